//! `agent demo`: the agent in host mode, driven by the built-in test
//! conductor through two manual cleans with `erase_devices_metadata` on a
//! scratch disk image (a file with a GPT and a filesystem signature), over
//! HTTPS with the auto-generated certificate, printing every call.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use super::{Settings, TestConductor};
use agent_base::config::{ApiUrls, Config, RunMode};
use agent_devices::disk::erase::probe_signatures;
use agent_testkit::write_demo_image;

/// The MAC the demo node is enrolled with.
const DEMO_MAC: &str = "52:54:00:de:00:01";

/// Runs the demo.
pub async fn run(workdir: Option<PathBuf>) -> Result<()> {
    let tmp = tempdir_in(workdir)?;
    let image = tmp.join("demo-disk.img");
    write_demo_image(&image)?;
    println!(
        "scratch disk {}: signatures {:?}",
        image.display(),
        signatures(&image)?
    );

    let conductor = TestConductor::start(Settings::default()).await?;
    println!("test conductor at {} (require_tls = true)", conductor.url());
    let uuid = conductor.enroll(&[DEMO_MAC]);

    let config = host_config(conductor.url(), DEMO_MAC, &image);

    let mut agent = None;
    for round in 1..=2 {
        if round == 2 {
            write_demo_image(&image)?;
            println!(
                "\nscratch disk re-partitioned: signatures {:?}",
                signatures(&image)?
            );
        }
        let started = Instant::now();
        conductor.start_clean(
            &uuid,
            Some(vec![
                json!({"interface": "deploy", "step": "erase_devices_metadata"}),
            ]),
        )?;
        println!("\n== manual clean #{round}: manageable -> cleaning -> clean wait");
        if agent.is_none() {
            let a = crate::agent::start(config.clone()).await?;
            println!("agent callback URL: {}", a.callback_url);
            agent = Some(a);
        }
        let node = conductor
            .wait_for_state(&uuid, "manageable", Duration::from_secs(120))
            .await?;
        println!(
            "node back in {:?} after {:.1} s; tokens issued so far: {}",
            node.provision_state,
            started.elapsed().as_secs_f64(),
            node.tokens_issued
        );
        println!("scratch disk signatures now: {:?}", signatures(&image)?);
    }
    println!("\n== transcript (A = agent, C = conductor)");
    for line in conductor.transcript() {
        println!("  {line}");
    }
    if let Some(a) = agent {
        a.task.abort();
    }
    std::fs::remove_dir_all(&tmp).ok();
    Ok(())
}

/// The host-mode configuration the demo and the tests use against a
/// conductor at `url`: loopback only, a free port, `device` the only writable
/// device, `mac` the node's port, short back-off so flows take seconds.
pub fn host_config(url: &str, mac: &str, device: &std::path::Path) -> Config {
    Config {
        api_urls: ApiUrls::Urls(vec![url.to_string()]),
        advertise_host: Some(std::net::IpAddr::from([127, 0, 0, 1])),
        listen_host: std::net::IpAddr::from([127, 0, 0, 1]),
        listen_port: 0,
        allowed_devices: vec![device.to_path_buf()],
        extra_macs: vec![mac.into()],
        lookup_timeout: Duration::ZERO,
        lookup_max_interval: Duration::from_secs(2),
        min_heartbeat_interval: Duration::from_secs(1),
        mode: RunMode::Host,
        ..Config::default()
    }
}

fn tempdir_in(workdir: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match workdir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("agent-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn signatures(path: &std::path::Path) -> Result<Vec<String>> {
    probe_signatures(&std::fs::File::open(path)?)
}
