//! What real Ironic does to the operator's server, step by step: enrol it
//! (`redfish` hardware type, `redfish-virtual-media` or `ipxe` boot),
//! inspect it (watching that the BMC reads the ISO, or the server fetches
//! the agent by iPXE, and that the agent calls in),
//! stop there unless the operator confirmed the disk the agent chose, then
//! clean that disk only (every other disk in `skip_block_devices`) and
//! deploy the image to it, in the same boot of the agent (fast track).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::bmc::BmcClient;
use super::error::Problem;
use super::inventory::{self, ChosenDisk};
use super::options::{Boot, Options};
use super::pxe::PxeServer;
use crate::bed::http_root::HttpRoot;
use crate::bed::ironic_flow::Reporter;
use crate::ironic::{Ironic, Watch};

/// How far the flow went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Inspection only (`--inspect-only`).
    Inspected,
    /// The image is deployed; the server boots it.
    Deployed,
}

/// The image as Ironic gets it.
#[derive(Debug, Clone)]
pub struct Served {
    /// Where the agent downloads it.
    pub url: String,
    /// `sha256` or `sha512`.
    pub algo: String,
    /// Its hash.
    pub hash: String,
    /// `raw` or `qcow2`.
    pub format: String,
}

/// What the flow works with.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The operator's flags.
    pub opts: &'a Options,
    /// The Ironic driving the server.
    pub ironic: &'a Ironic,
    /// Ironic's `http_root`, served at `--http-address`.
    pub http: &'a HttpRoot,
    /// The operator's BMC.
    pub bmc: &'a BmcClient,
    /// DHCP and TFTP for the server (`--boot pxe`).
    pub pxe: Option<&'a PxeServer>,
    /// Its directory.
    pub http_root: &'a Path,
    /// The image.
    pub image: &'a Served,
}

/// How often the node is polled.
const POLL: Duration = Duration::from_secs(1);
/// What cleaning and the deploy may take once the agent runs.
const STEP_TIMEOUT: Duration = Duration::from_secs(1800);

/// Enrols the server, inspects it and, when confirmed, cleans and deploys.
pub async fn drive(cx: &Ctx<'_>, r: &mut Reporter) -> Result<Outcome> {
    let o = cx.opts;
    let url = cx.http.url().to_string();
    let mut driver_info = json!({
        "redfish_address": o.bmc_address,
        "redfish_system_id": o.system_path,
        "redfish_username": o.user,
        "redfish_password": o.password,
        "deploy_kernel": format!("{url}/deploy.kernel"),
        "deploy_ramdisk": format!("{url}/deploy.initramfs"),
    });
    driver_info["redfish_verify_ca"] = match &o.trust {
        super::options::Trust::System => json!(true),
        super::options::Trust::Ca(p) => json!(p.display().to_string()),
        super::options::Trust::Insecure => json!(false),
    };
    let mut body = json!({
        "name": "own-server",
        "driver": "redfish",
        "driver_info": driver_info,
        "boot_interface": o.boot.ironic_interface(),
        "power_interface": "redfish",
        "management_interface": "redfish",
        "inspect_interface": "agent",
        "deploy_interface": "direct",
        "network_interface": "noop",
        "automated_clean": true,
        "properties": {"cpu_arch": "x86_64", "capabilities": "boot_mode:uefi"},
    });
    if let Some(nd) = &o.network_data {
        body["network_data"] = nd.clone();
    }
    let node = cx.ironic.create_node(body).await.context("enrolling")?;
    let uuid = node["uuid"]
        .as_str()
        .context("node without uuid")?
        .to_string();
    cx.ironic.create_port(&uuid, &o.mac).await?;
    r.out.line(format!(
        "enrolled node own-server ({uuid}): redfish {}{}, {} boot, port {}",
        o.bmc_address,
        o.system_path,
        o.boot.ironic_interface(),
        o.mac
    ));
    cx.ironic
        .move_to(&uuid, "manage", "manageable", Duration::from_secs(120))
        .await
        .context("manage (Ironic checks the BMC)")?;

    r.out.line("");
    r.out.line(match o.boot {
        Boot::Vmedia => "== inspection: Ironic builds an ISO, the BMC inserts it, the server boots the agent from it",
        Boot::Pxe(_) => "== inspection: Ironic sets the server to boot from the network; DHCP, TFTP and iPXE from here boot the agent",
    });
    let t = Instant::now();
    inspect(cx, &uuid, r).await?;
    let stored = cx.ironic.inventory(&uuid).await?;
    let inv = &stored["inventory"];
    let root = &stored["plugin_data"]["root_disk"];
    r.out
        .line(format!("inspected in {:.1} s:", t.elapsed().as_secs_f64()));
    for line in inventory::inventory_lines(inv, root) {
        r.out.line(line);
    }
    r.out.line(inventory::boot_phases_line(
        &stored["plugin_data"]["boot_phases"],
    ));
    let chosen = inventory::chosen_disk(root)
        .context("inspection chose no root disk (the agent needs a disk of at least 4 GiB)")?;
    r.out.line(format!(
        "the image would be written to {chosen}: no root-device hint set, so the agent's choice \
         (the smallest disk of at least 4 GiB)"
    ));
    if o.inspect_only {
        r.out
            .line("--inspect-only: stopping here; nothing was written");
        return Ok(Outcome::Inspected);
    }
    confirmed(o.confirm_disk.as_deref(), &chosen)?;

    let others = inventory::protect_others(inv, &chosen);
    cx.ironic
        .patch(
            &uuid,
            json!([
                {"op": "add", "path": "/properties/root_device", "value": {"serial": chosen.serial}},
                {"op": "add", "path": "/properties/skip_block_devices", "value": others},
            ]),
        )
        .await?;
    r.out.line(format!(
        "confirmed: root_device hint serial {}; every other disk protected (skip_block_devices {})",
        chosen.serial,
        serde_json::to_string(&others)?
    ));

    r.out.line("");
    r.out.line(format!(
        "== provide: automated cleaning (erase_devices_metadata) of {} only, in the same agent boot",
        chosen.name
    ));
    let t = Instant::now();
    cx.ironic
        .provision(&uuid, json!({"target": "provide"}))
        .await?;
    settle(cx.ironic, &uuid, "available", r).await?;
    r.out.line(format!(
        "available after {:.1} s",
        t.elapsed().as_secs_f64()
    ));

    r.out.line("");
    let img = cx.image;
    r.out.line(format!(
        "== deploy: {} ({}, {} {}…) with a config drive",
        img.url,
        img.format,
        img.algo,
        &img.hash[..16]
    ));
    let t = Instant::now();
    cx.ironic
        .patch(
            &uuid,
            json!([
                {"op": "add", "path": "/instance_info/image_source", "value": img.url},
                {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": img.algo},
                {"op": "add", "path": "/instance_info/image_os_hash_value", "value": img.hash},
                {"op": "add", "path": "/instance_info/image_disk_format", "value": img.format},
                {"op": "add", "path": "/instance_info/capabilities", "value": {"boot_mode": "uefi"}},
            ]),
        )
        .await?;
    let mut configdrive =
        json!({"meta_data": {"uuid": uuid, "name": "own-server", "hostname": "own-server"}});
    if let Some(nd) = &o.network_data {
        configdrive["network_data"] = nd.clone();
    }
    cx.ironic
        .provision(
            &uuid,
            json!({"target": "active", "configdrive": configdrive}),
        )
        .await?;
    settle(cx.ironic, &uuid, "active", r).await?;
    r.out.line(format!(
        "active after {:.1} s: Ironic set the disk first through the BMC and powered the server on; it boots the deployed system",
        t.elapsed().as_secs_f64()
    ));
    Ok(Outcome::Deployed)
}

/// Fails unless `--confirm-disk` (`given`) names `chosen`'s serial.
fn confirmed(given: Option<&str>, chosen: &ChosenDisk) -> Result<(), Problem> {
    match given {
        None => Err(Problem::NotConfirmed {
            disk: chosen.to_string(),
            serial: chosen.serial.clone(),
        }),
        Some(s) if chosen.serial.is_empty() || s != chosen.serial => Err(Problem::WrongDisk {
            given: s.to_string(),
            disk: chosen.to_string(),
            serial: chosen.serial.clone(),
        }),
        Some(_) => Ok(()),
    }
}

/// Polls until the node settles in `state`; a `* failed` state ends it
/// with Ironic's `last_error`.
async fn settle(ironic: &Ironic, uuid: &str, state: &str, r: &mut Reporter) -> Result<Value> {
    let start = Instant::now();
    loop {
        let node = ironic.node(uuid).await?;
        r.seen(ironic, &node).await;
        let current = node["provision_state"].as_str().unwrap_or_default();
        if current.ends_with("failed") {
            bail!(
                "the node went to {current:?} waiting for {state:?}: {}; Ironic's log: {}",
                node["last_error"],
                ironic.log_path().display()
            );
        }
        if current == state && node["target_provision_state"].is_null() {
            return Ok(node);
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!(
                "the node is still {current:?} after {STEP_TIMEOUT:?} waiting for {state:?}; Ironic's log: {}",
                ironic.log_path().display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The ISO Ironic published in its `http_root` (`redfish/boot-<uuid>.iso`),
/// as a URL, while it is there (Ironic removes it when inspection fails).
fn published_iso(cx: &Ctx<'_>) -> Option<String> {
    let dir = cx.http_root.join("redfish");
    std::fs::read_dir(&dir).ok().and_then(|d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.ends_with(".iso"))
            .map(|n| format!("{}/redfish/{n}", cx.http.url()))
    })
}

/// The line saying the server got the agent, once it has: the BMC read
/// the ISO (virtual media), or the server fetched the node's ramdisk
/// through iPXE (PXE).
fn booted(cx: &Ctx<'_>) -> Option<String> {
    let reqs = cx.http.requests();
    match cx.pxe {
        None => reqs
            .into_iter()
            .find(|q| q.path.ends_with(".iso"))
            .map(|q| {
                format!(
                    "the BMC ({}) read the ISO {} (HTTP {})",
                    q.client, q.path, q.status
                )
            }),
        Some(_) => reqs
            .into_iter()
            .find(|q| q.path.ends_with("/deploy_ramdisk") && q.status == 200)
            .map(|q| {
                format!(
                    "the server ({}) booted by PXE and fetched the agent {} through iPXE (HTTP {})",
                    q.client, q.path, q.status
                )
            }),
    }
}

/// How far a PXE boot got, for [`Problem::PxeNotBooted`].
fn pxe_progress(cx: &Ctx<'_>, pxe: &PxeServer) -> String {
    let mac = &cx.opts.mac;
    let script = cx
        .http
        .requests()
        .iter()
        .any(|q| q.path.ends_with("boot.ipxe"));
    if script {
        format!("iPXE on {mac} read boot.ipxe but never fetched the agent (Ironic's iPXE config for it was missing or unreachable)")
    } else if pxe.sent_ipxe() {
        format!("{mac} got iPXE over TFTP but iPXE never fetched boot.ipxe from --http-address (TCP 8088)")
    } else if pxe.saw_dhcp(mac) {
        format!("{mac} asked for an address but never fetched iPXE over TFTP (UDP 69) or boot.ipxe")
    } else {
        format!(
            "no DHCP request from {mac} reached this machine (dnsmasq's log: {})",
            pxe.log_path().display()
        )
    }
}

/// `inspect` until `manageable`, with the two lab checks: the BMC must
/// read the ISO within `--iso-read-timeout`, and the agent must call
/// Ironic within `--heartbeat-timeout` of that.
async fn inspect(cx: &Ctx<'_>, uuid: &str, r: &mut Reporter) -> Result<()> {
    let o = cx.opts;
    cx.ironic
        .provision(uuid, json!({"target": "inspect"}))
        .await?;
    let start = Instant::now();
    let mut iso_read: Option<Instant> = None;
    let mut called_in = false;
    let mut left = false;
    let mut iso = None;
    loop {
        iso = iso.or_else(|| published_iso(cx));
        let node = cx.ironic.node(uuid).await?;
        r.seen(cx.ironic, &node).await;
        let state = node["provision_state"].as_str().unwrap_or_default();
        left |= state != "manageable";
        if iso_read.is_none() {
            if let Some(line) = booted(cx) {
                r.out.line(line);
                iso_read = Some(Instant::now());
            } else if state.ends_with("failed") || start.elapsed().as_secs() >= o.iso_read_timeout {
                let last_error = node["last_error"]
                    .as_str()
                    .map(|e| format!(": Ironic says {e}"))
                    .unwrap_or_default();
                let secs = start.elapsed().as_secs();
                return Err(match cx.pxe {
                    None => Problem::IsoNotRead {
                        url: iso.unwrap_or_else(|| format!("{}/redfish/", cx.http.url())),
                        secs,
                        last_error,
                    },
                    Some(pxe) => Problem::PxeNotBooted {
                        secs,
                        seen: pxe_progress(cx, pxe),
                        last_error,
                    },
                }
                .into());
            }
        }
        if !called_in && node["driver_internal_info"]["agent_url"].is_string() {
            called_in = true;
            r.out.line(format!(
                "the agent called Ironic from {}",
                node["driver_internal_info"]["agent_url"]
            ));
        }
        if state.ends_with("failed") {
            bail!(
                "inspection failed: {}; Ironic's log: {}",
                node["last_error"],
                cx.ironic.log_path().display()
            );
        }
        if let Some(at) = iso_read {
            if !called_in && at.elapsed().as_secs() >= o.heartbeat_timeout {
                return Err(Problem::NoHeartbeat {
                    booted: match cx.pxe {
                        None => "the BMC read the boot ISO",
                        Some(_) => "the server fetched the agent by iPXE",
                    }
                    .to_string(),
                    api: cx.ironic.url.clone(),
                    secs: at.elapsed().as_secs(),
                    last: match cx.bmc.newest_log_entry().await {
                        Some(entry) => format!("; the BMC's newest log entry: {entry}"),
                        None => "; the BMC keeps no log of the server to show here".into(),
                    },
                }
                .into());
            }
        }
        if left && state == "manageable" && node["target_provision_state"].is_null() {
            return Ok(());
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!(
                "inspection: the node is still {state:?} after {STEP_TIMEOUT:?}; Ironic's log: {}",
                cx.ironic.log_path().display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_chosen_disks_serial_confirms() {
        let disk = |serial: &str| ChosenDisk {
            name: "/dev/sda".into(),
            serial: serial.into(),
            size: 8 << 30,
        };
        assert!(confirmed(Some("S1"), &disk("S1")).is_ok());
        let e = confirmed(None, &disk("S1")).unwrap_err().to_string();
        assert!(e.ends_with("run again with --confirm-disk S1"), "{e}");
        let e = confirmed(Some("S2"), &disk("S1")).unwrap_err().to_string();
        assert!(e.contains("--confirm-disk S2 does not name"), "{e}");
        // A disk without a serial can never be confirmed.
        assert!(confirmed(Some(""), &disk("")).is_err());
    }
}
