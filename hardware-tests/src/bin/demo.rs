//! The demo (`ci/demo`): a QEMU machine on the test bed PXE-boots the deploy
//! ramdisk; the agent inspects it (the test conductor prints the inventory
//! it received), then the conductor deploys the bootable test image with a
//! config drive as Ironic 39's `direct` deploy does, showing the agent's
//! write progress live; the agent powers the machine off, the machine boots
//! from its disk, and the deployed system prints its marker and config
//! drive. Built from the same pieces as `tests/bed_deploy.rs`
//! (`hardware_tests::bed::deploy`).
//!
//! Usage (root): `demo [--bios]` (default UEFI, Ironic's default boot mode).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use agent::testconductor::image_server::{Fault, ImageServer};
use agent::testconductor::{BootMode, DeployRequest, ImageInfo, Settings, TestConductor};
use anyhow::{bail, Context, Result};
use hardware_tests::bed::deploy::{self, Event, Target};
use hardware_tests::bed::{self, Net, NetOptions, BRIDGE_IP};
use hardware_tests::testimage;
use serde_json::{json, Value};

const MAC: &str = "52:54:00:de:00:07";

fn main() -> Result<()> {
    let uefi = match std::env::args().nth(1).as_deref() {
        None => true,
        Some("--bios") => false,
        Some("--uefi") => true,
        Some(other) => bail!("usage: demo [--bios|--uefi] (got {other:?})"),
    };
    if !hardware_tests::is_root() {
        bail!("the demo needs root (network namespace, taps, QEMU); run ci/demo as root");
    }
    let t0 = Instant::now();
    println!("== preparing: deploy ramdisk, test image");
    let ramdisk = bed::ramdisk_dir()?;
    println!("deploy ramdisk: {}", ramdisk.display());
    let marker = format!("demo-{:08x}", fastrand::u32(..));
    let img = testimage::build(
        &hardware_tests::repo_root().join("target/demo-image"),
        &marker,
    )
    .context("building the demo image")?;
    let sha = deploy::sha256_file(&img.raw)?;
    println!(
        "demo image: {} ({} MiB, sha256 {}…), its system prints marker {marker}",
        img.raw.display(),
        img.size >> 20,
        &sha[..16]
    );
    let api = format!("http://{BRIDGE_IP}:6385");
    let net = Net::start(NetOptions::pxe(
        "demo",
        &ramdisk,
        &format!(
            "console=ttyS0 quiet panic=-1 ipa-api-url={api} \
             ipa-inspection-callback-url={api}/v1/continue_inspection"
        ),
    ))?;
    let target = Target::new(&net.logs, "demo", uefi, MAC)?;
    let work = tempfile::tempdir()?;
    let instance = deploy::random_uuid();
    let configdrive = deploy::config_drive(
        work.path(),
        &json!({"uuid": instance, "name": "demo", "hostname": "demo"}),
    )?;
    println!(
        "prepared in {:.1} s; consoles in {}",
        t0.elapsed().as_secs_f64(),
        net.logs.display()
    );

    net.block_on(async {
        let conductor = TestConductor::start_on(
            Settings {
                command_poll_interval: Duration::from_secs(2),
                ..Settings::default()
            },
            format!("{BRIDGE_IP}:6385").parse()?,
        )
        .await?;
        let server = ImageServer::start_on(format!("{BRIDGE_IP}:0").parse()?)?;
        server.route("/images/demo.raw", &img.raw, &[], Fault::None);
        let uuid = conductor.enroll(&[MAC]);

        let t = Instant::now();
        println!(
            "\n== inspection: the machine ({}, 1 vCPU, QEMU TCG) PXE-boots the ramdisk",
            if uefi { "UEFI" } else { "BIOS" }
        );
        conductor.start_inspect(&uuid)?;
        let mut vm = target.pxe(&net)?;
        let node = conductor
            .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
            .await
            .with_context(|| format!("inspection; console: {}", vm.console_path().display()))?;
        println!(
            "inspected {:.1} s after power-on:",
            t.elapsed().as_secs_f64()
        );
        print_inventory(
            node.inspection_data
                .as_ref()
                .context("no inspection data")?,
        );

        println!(
            "\n== deploy: {} with a config drive (instance uuid {instance})",
            img.raw.display()
        );
        let t = Instant::now();
        conductor.make_available(&uuid)?;
        conductor.start_deploy(
            &uuid,
            DeployRequest {
                image_info: ImageInfo::raw_sha256(&server.url("/images/demo.raw"), &sha),
                configdrive: Some(configdrive),
                boot_mode: if uefi { BootMode::Uefi } else { BootMode::Bios },
                root_device: None,
            },
        )?;
        let tty = std::io::stdout().is_terminal();
        let mut last = String::new();
        let node = deploy::watch_deploy(
            &conductor,
            &uuid,
            &["active"],
            Duration::from_secs(420),
            |e| {
                let line = match e {
                    Event::State(s) => format!("node: {s}"),
                    Event::Progress(p) => format!("agent: {}", deploy::progress_line(&p)),
                };
                if line != last {
                    if tty {
                        print!("\r\x1b[K{:>5.1} s  {line}", t.elapsed().as_secs_f64());
                        if !line.starts_with("agent:") {
                            println!();
                        }
                        let _ = std::io::stdout().flush();
                    } else {
                        println!("{:>5.1} s  {line}", t.elapsed().as_secs_f64());
                    }
                    last = line;
                }
            },
        )
        .await?;
        if node.provision_state != "active" {
            bail!(
                "deploy ended {}: {}",
                node.provision_state,
                node.last_error.unwrap_or_default()
            );
        }
        println!("\nthe conductor's calls to the agent:");
        for l in conductor
            .transcript()
            .iter()
            .filter(|l| l.starts_with("C->A POST"))
        {
            println!("  {l}");
        }
        println!(
            "root uuid reported: {}",
            node.partition_uuids
                .map(|p| p["root uuid"].to_string())
                .unwrap_or_default()
        );
        tokio::task::block_in_place(|| vm.wait_exit(Duration::from_secs(120)))?;
        println!(
            "the agent powered the machine off {:.1} s after the deploy started",
            t.elapsed().as_secs_f64()
        );
        drop(vm);

        println!("\n== boot from disk");
        let mut disk = target.disk_boot(&net)?;
        let at = tokio::task::block_in_place(|| {
            deploy::wait_booted(
                &mut disk,
                &testimage::marker_line(&marker),
                Duration::from_secs(300),
            )
        })?;
        let console = disk.console();
        if uefi {
            if let Some(entry) = deploy::uefi_boot_entry(&console) {
                println!("firmware: {entry}");
            }
        }
        let line = console
            .lines()
            .find(|l| l.contains(&testimage::marker_line(&marker)))
            .unwrap_or_default();
        println!(
            "deployed system, {:.1} s after power-on: {}",
            at.as_secs_f64(),
            line.trim()
        );
        let meta = testimage::meta_data(&console)
            .context("the deployed system printed no config drive")?;
        println!("its config drive's meta_data.json: {meta}");
        if !meta.contains(&instance) {
            bail!("the config drive does not carry instance uuid {instance}");
        }
        anyhow::Ok(())
    })??;
    println!("\ndemo done in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// A few lines about the machine from the inspection document.
fn print_inventory(doc: &Value) {
    let inv = &doc["inventory"];
    let gib = |v: &Value| v.as_u64().unwrap_or(0) as f64 / (1u64 << 30) as f64;
    let sv = &inv["system_vendor"];
    println!(
        "  system    {} {} (serial {})",
        sv["manufacturer"].as_str().unwrap_or("?"),
        sv["product_name"].as_str().unwrap_or("?"),
        sv["serial_number"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("-")
    );
    let cpu = &inv["cpu"];
    println!(
        "  cpu       {} × {} ({})",
        cpu["count"],
        cpu["model_name"].as_str().unwrap_or("?"),
        cpu["architecture"].as_str().unwrap_or("?")
    );
    println!("  memory    {} MiB", inv["memory"]["physical_mb"]);
    for d in inv["disks"].as_array().into_iter().flatten() {
        println!(
            "  disk      {} {:.1} GiB serial {} rotational {}",
            d["name"].as_str().unwrap_or("?"),
            gib(&d["size"]),
            d["serial"].as_str().unwrap_or("-"),
            d["rotational"]
        );
    }
    for i in inv["interfaces"].as_array().into_iter().flatten() {
        println!(
            "  nic       {} {} {}",
            i["name"].as_str().unwrap_or("?"),
            i["mac_address"].as_str().unwrap_or("?"),
            i["ipv4_address"].as_str().unwrap_or("-")
        );
    }
    println!(
        "  boot      {} from {}",
        inv["boot"]["current_boot_mode"].as_str().unwrap_or("?"),
        inv["boot"]["pxe_interface"].as_str().unwrap_or("?")
    );
    if let Some(root) = doc["root_disk"]["name"].as_str() {
        println!("  root disk {root} (the agent's choice without hints)");
    }
}
