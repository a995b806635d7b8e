//! Software RAID (Ironic's `agent` RAID interface with `controller:
//! software`; PROTOCOL.md §7.8): [`config`] validates a `target_raid_config`
//! as IPA 13 does, [`plan`] picks each volume's member disks by device
//! hints and lays out their partitions, [`superblock`] writes and reads md's
//! version-1 superblocks, [`md`] drives the kernel's md driver, and [`ops`]
//! builds, assembles and deletes the arrays; [`member`] tells the erase
//! steps which devices are RAID members (left alone, as IPA 13 does).
//!
//! ## md kernel interface, not `mdadm`
//!
//! The agent talks to the kernel's md driver itself instead of shipping
//! Debian's `mdadm` in the ramdisk: it writes each member's version-1
//! superblock (a 256-byte structure plus a role table and a 32-bit
//! checksum, the on-disk format mdadm writes and libblkid, the kernel and
//! every mdadm read) and hands the members to the kernel with the same
//! three ioctls `mdadm --assemble` uses. That is about 400 lines against a
//! dynamically linked 600 KB binary plus libudev and its configuration in a
//! ramdisk that otherwise has one static agent and busybox; the agent keeps
//! one error path (typed `command_error`s instead of parsing mdadm's
//! messages), one safety policy (the same [`agent_devices::disk::WritePolicy`]
//! checks before any write) and no udev/auto-assembly daemon that could act
//! on disks behind its back. The superblocks are ordinary mdadm metadata, so
//! the deployed OS assembles the arrays with its own mdadm.
//!
//! Metadata: data volumes use version 1.2 (superblock 4 KiB from the start,
//! data from 1 MiB, mdadm's default and IPA's `--metadata=1`); the mirrored
//! EFI system partition uses version 1.0 (superblock at the end, data from
//! sector 0), so firmware reads each member as a plain FAT partition, as
//! IPA's `--metadata=1.0` ESP array. Redundant arrays start with a full
//! resync in the background, as `mdadm --create` without `--assume-clean`.

pub mod config;
pub mod esp;
pub mod md;
pub mod member;
pub mod ops;
pub mod plan;
pub mod superblock;

#[cfg(test)]
mod tests;
