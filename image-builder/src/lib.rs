//! The deploy-ramdisk builder as a library: [`arch`] holds what differs
//! between the x86_64 and aarch64 images, [`kernel`] finds a kernel in an
//! unpacked package and resolves module closures from `modules.dep`,
//! [`cpio`] writes reproducible newc archives, [`firmware`] picks the
//! blobs the drivers name, [`assemble`] puts the
//! deploy initramfs together, [`bootchain`] writes the signed Secure Boot
//! network boot chain (shim, GRUB, grub.cfg), [`oci`] the agent's OCI
//! image for OpenShift's `ironic-agent` unit. The `image-builder` binary drives them; the
//! test disk image in `hardware-tests` reuses `kernel` and `cpio`.

pub mod arch;
pub mod assemble;
pub mod bootchain;
pub mod cpio;
pub mod firmware;
pub mod kernel;
pub mod metal3;
pub mod oci;
