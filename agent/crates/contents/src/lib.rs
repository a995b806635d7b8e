//! What the agent puts on disks: [`image`] (fetching images and the
//! streaming write), [`configdrive`] (config drives after an image write),
//! [`container_steps`] (IPA's container steps: settings, steps file,
//! options, allowlist), [`ignition`] (Ignition for CoreOS-like images),
//! [`partimage`] (partition images: layout, table, the other partitions,
//! their UEFI loaders), [`raid`] (software RAID), [`selection`] (which
//! disks the node's `skip_block_devices` protect), [`uefi`] (boot
//! entries), [`grub`] (BIOS GRUB installed from the deployed image),
//! [`inject`] (`inject_files`: files written into the deployed disk's
//! filesystems), [`vmedia`] (what Ironic puts on virtual media for the
//! ramdisk), [`exec_steps`] (the operator's executable hardware managers:
//! manifests and running them), [`nicfw`] (NVIDIA/Mellanox NIC firmware
//! images and settings with mstflint, as IPA's Mellanox manager).

pub mod configdrive;
pub mod container_steps;
pub mod exec_steps;
pub mod grub;
pub mod ignition;
pub mod image;
pub mod inject;
pub mod nicfw;
pub mod partimage;
pub mod raid;
pub mod selection;
pub mod uefi;
pub mod vmedia;
