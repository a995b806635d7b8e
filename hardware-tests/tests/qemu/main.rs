//! The suites that boot a guest under QEMU (TCG): the deploy ramdisk, the
//! bed's machines behind their BMCs, real Ironic driving them. One module
//! per suite, one test binary for all (each suite's own binary linked the
//! agent and the bed once more). Run one suite as root from
//! `hardware-tests/`: `cargo test -p hardware-tests --test qemu -- NAME::`
//! (`ci/test-jobs` runs each suite as a job of its own, by its tests' exact
//! names). Run without a filter, every suite's tests would run side by side:
//! more guests than this machine can carry.

mod arm_ironic_flow;
mod arm_ironic_pxe;
mod bed_boot;
mod bed_clean_bench;
mod bed_deploy;
mod bed_inspect_clean;
mod bed_ipmi;
mod bed_network;
mod bed_own_server;
mod bed_secure_boot;
mod bed_small_ram;
mod faults_disk_qemu;
mod ironic_bios_grub_ramdisk;
mod ironic_container_steps_ramdisk;
mod ironic_drives_ramdisk;
mod ironic_raid_ramdisk;
mod ironic_rescues_ramdisk;
mod metal3_flow;
mod metal3_ipv6_flow;
mod openshift_liveos;
mod partition_image_bios_grub;
mod partition_image_boots;
mod ramdisk_qemu;
mod ramdisk_qemu_4kn_configdrive;
mod ramdisk_qemu_aarch64;
mod ramdisk_qemu_clock;
mod ramdisk_qemu_exec_steps;
mod ramdisk_qemu_multipath;
mod ramdisk_qemu_multipath_failover;
mod ramdisk_qemu_raid;
mod ramdisk_qemu_raid_boot;
mod ramdisk_qemu_raid_levels;
mod ramdisk_qemu_rescue;
mod ramdisk_qemu_rootpwd;
mod ramdisk_qemu_smart;
mod ramdisk_qemu_vmedia;
mod redfish_vmedia_boot;
mod testimage_boots;
