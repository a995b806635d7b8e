//! Tests of `bootloader.rs`.

use super::*;

#[test]
fn bios_grub_only_on_x86() {
    assert!(bios_grub_arch("x86_64").is_ok());
    let e = bios_grub_arch("aarch64").unwrap_err();
    assert!(e.details.contains("aarch64 machine") && e.details.contains("boot_mode to uefi"));
}

#[test]
fn whole_disk_root_uuids() {
    assert!(is_whole_disk(""));
    assert!(is_whole_disk("0x00000000"));
    assert!(is_whole_disk("0x1c2b3a49"));
    assert!(!is_whole_disk("5d0b6e8e-0a4e-4c5b-9f57-2e0d3c1b8a11"));
}

#[test]
fn bios_grub_is_refused_as_ipa_does() {
    let off = bios_grub_refusal();
    assert_eq!(off.kind.type_name(), "InvalidImage");
    assert!(off.details.contains("enable_bios_bootloader_install"));
}
