//! What the Metal3 flow tests (`metal3_flow`, `metal3_ipv6_flow`) share:
//! Ironic's configuration as Metal3's ironic-image sets it (see
//! `metal3_flow.rs`'s module comment for what differs and why), the files
//! Ironic put on the virtual-media ISO in a domain's CD-ROM drive, and the
//! serial console read as text, and the deploy the baremetal-operator
//! asks for (the node patch, then `active` with a config drive).

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use super::redfish::Bmc;
use crate::ironic::Ironic;
use crate::run;

/// The ironic.conf fragment loaded after `ci/ironic/ironic.conf` and the
/// state directory's `paths.conf`: Metal3's settings with redfish virtual
/// media, fast track, the agent's TLS trust from `api_ca_file` (`cert`),
/// `esp` as the ESP, and `http_root` `www` served at `http_url` (an IPv6
/// literal bracketed).
pub fn ironic_conf(esp: &Path, cert: &Path, www: &Path, http_url: &str) -> String {
    format!(
        "[DEFAULT]\n\
         enabled_hardware_types = fake-hardware,redfish\n\
         enabled_boot_interfaces = fake,ipxe,redfish-virtual-media\n\
         enabled_power_interfaces = fake,redfish\n\
         enabled_management_interfaces = noop,fake,redfish\n\
         enabled_inspect_interfaces = agent,fake,no-inspect\n\
         default_boot_interface = redfish-virtual-media\n\
         default_power_interface = redfish\n\
         default_management_interface = redfish\n\
         default_inspect_interface = agent\n\
         esp_image = {esp}\n\
         [agent]\n\
         deploy_logs_collect = always\n\
         max_command_attempts = 30\n\
         api_ca_file = {cert}\n\
         [conductor]\n\
         automated_clean = true\n\
         power_state_change_timeout = 120\n\
         [deploy]\n\
         fast_track = true\n\
         erase_devices_metadata_priority = 10\n\
         erase_devices_priority = 0\n\
         http_root = {www}\n\
         http_url = {http_url}\n\
         [inspector]\n\
         require_managed_boot = false\n\
         power_off = false\n\
         extra_kernel_params = ipa-inspection-dhcp-all-interfaces=1 ipa-collect-lldp=1\n\
         hooks = $default_hooks,parse-lldp\n\
         add_ports = all\n\
         keep_ports = present\n\
         [redfish]\n\
         use_swift = false\n\
         kernel_append_params = console=ttyS0\n",
        esp = esp.display(),
        cert = cert.display(),
        www = www.display(),
    )
}

/// Starts the deploy the baremetal-operator asks for: the node patch for
/// the qcow2 image at `url` (sha256 `sha256`) in UEFI mode, then
/// `active` with `configdrive`. The caller waits for `active`.
pub async fn start_deploy(
    ironic: &Ironic,
    uuid: &str,
    url: &str,
    sha256: &str,
    configdrive: Value,
) -> anyhow::Result<()> {
    ironic
        .patch(
            uuid,
            json!([
                {"op": "add", "path": "/instance_info/image_source", "value": url},
                {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
                {"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha256},
                {"op": "add", "path": "/instance_info/image_disk_format", "value": "qcow2"},
                {"op": "add", "path": "/instance_info/capabilities", "value": {"boot_mode": "uefi"}},
            ]),
        )
        .await?;
    ironic
        .provision(
            uuid,
            json!({"target": "active", "configdrive": configdrive}),
        )
        .await?;
    Ok(())
}

/// What Ironic put on the ISO it inserted: the listing (`isoinfo -f`),
/// `/EFI/BOOT/grub.cfg` (the kernel command line) and
/// `/openstack/latest/network_data.json` (empty when absent).
#[derive(Debug, Clone)]
pub struct IsoSeen {
    /// Every path on the ISO, one a line.
    pub listing: String,
    /// The grub configuration.
    pub grub: String,
    /// The node's `network_data` as Ironic wrote it.
    pub network_data: String,
}

/// The ISO in domain `name`'s CD-ROM drive, if one is inserted.
pub fn inserted_iso(bmc: &Bmc<'_>, name: &str) -> Option<String> {
    let xml = bmc.domain_xml(name, false).ok()?;
    let at = xml.find("device='cdrom'")?;
    let cd = xml.get(at..at + xml.get(at..)?.find("</disk>")?)?;
    cd.split("<source file='")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .map(str::to_string)
}

/// Reads the ISO in domain `name`'s drive; `None` while none is inserted or
/// it cannot be read yet.
pub fn read_inserted_iso(bmc: &Bmc<'_>, name: &str) -> Option<IsoSeen> {
    let iso = inserted_iso(bmc, name)?;
    let file = |path: &str| {
        run(Command::new("isoinfo")
            .args(["-R", "-x", path, "-i"])
            .arg(&iso))
        .unwrap_or_default()
    };
    let listing = run(Command::new("isoinfo").args(["-R", "-f", "-i"]).arg(&iso)).ok()?;
    Some(IsoSeen {
        listing,
        grub: file("/EFI/BOOT/grub.cfg"),
        network_data: file("/openstack/latest/network_data.json"),
    })
}

/// A serial console file as text (firmware and grub write escape
/// sequences, so not UTF-8 throughout); empty when unreadable.
pub fn console_text(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}
