//! The bundle `log.collect_system_logs` returns (PROTOCOL.md §1.7; the command is
//! `agent_core::commands::logs`): a base64 `tar.gz` of the agent's
//! own log ([`memlog`]), the kernel log, the ramdisk's boot phases
//! ([`agent_base::bootphases`]), the inventory, mounts, block
//! devices and network state, and what IPA 13 gets from tools, made
//! natively ([`native`]): partition tables, multipath devices, udev and
//! kernel properties of disks and NICs (the UEFI boot entries come from the
//! caller). Ironic only decodes and stores it (on deploy
//! failure by default). Each part that cannot be read is replaced by a file
//! saying why, so the bundle is always produced. In OpenShift's container
//! form the live system's journal is the part `journal` instead of the
//! agent's own log ([`crate::hostroot::journal`]).

pub mod memlog;
pub(crate) mod native;
pub(crate) mod tar;

use std::io::Write;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;

use agent_base::tool::ToolError;

/// Tools whose output goes into the bundle: (file name, argv).
const TOOLS: &[(&str, &[&str])] = &[
    ("dmesg", &["dmesg"]),
    ("ip_addr", &["ip", "addr"]),
    ("ip_route", &["ip", "route"]),
    ("lsblk", &["lsblk", "--all", "--output-all"]),
    ("df", &["df", "-a"]),
    ("ps", &["ps", "au"]),
];

/// Files copied into the bundle: (file name, path).
const FILES: &[(&str, &str)] = &[
    ("mounts", "/proc/self/mountinfo"),
    ("mdstat", "/proc/mdstat"),
    ("cmdline", "/proc/cmdline"),
    ("boot_phases", agent_base::bootphases::RAMDISK_PATH),
];

/// Builds the base64 tar.gz, with the parts `extra` the layers above make
/// (the UEFI boot entries). With `host_root` (the container form) the live
/// system's journal is the part `journal` and the agent's own log is left
/// out (the journal has it, as the container's output); a journal that
/// cannot be read is logged as an error and left out, as OpenShift's
/// manager does, and the agent's log is kept then.
pub fn bundle(
    skip_bmc: bool,
    host_root: Option<&std::path::Path>,
    extra: &[(String, Vec<u8>)],
) -> std::io::Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut tar = Vec::new();
    let journal = host_root.and_then(|root| match crate::hostroot::journal::read(root) {
        Ok(j) => Some(j),
        Err(e) => {
            tracing::error!("{e}");
            None
        }
    });
    match &journal {
        Some(j) => tar::append_file(&mut tar, "journal", j, now),
        None => tar::append_file(&mut tar, "agent.log", &memlog::snapshot(), now),
    }
    for (name, argv) in TOOLS {
        tar::append_file(&mut tar, name, &run(argv), now);
    }
    for (name, path) in FILES {
        let data = std::fs::read(path).unwrap_or_else(|e| format!("reading {path}: {e}\n").into());
        tar::append_file(&mut tar, name, &data, now);
    }
    let opts = crate::inventory::Options {
        skip_bmc,
        filter_usb_nics: host_root.is_some(),
        ..crate::inventory::Options::live(None)
    };
    let inventory = crate::inventory::collect(&opts)
        .map(|inv| serde_json::to_vec_pretty(&inv).unwrap_or_default())
        .unwrap_or_else(|e| format!("collecting the inventory: {e:#}\n").into_bytes());
    tar::append_file(&mut tar, "inventory.json", &inventory, now);
    for (name, data) in native::parts(std::path::Path::new("/")).iter().chain(extra) {
        tar::append_file(&mut tar, name, data, now);
    }
    tar::finish(&mut tar);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(gz.finish()?))
}

/// Output of a tool (stdout, then stderr), or why it could not run.
fn run(argv: &[&str]) -> Vec<u8> {
    match agent_base::tool::output(Command::new(argv[0]).args(&argv[1..])) {
        Ok(o) => {
            let mut out = o.stdout;
            out.extend_from_slice(&o.stderr);
            if !o.status.success() {
                out.extend_from_slice(
                    format!("\n[{} exited with {}]\n", argv.join(" "), o.status).as_bytes(),
                );
            }
            out
        }
        Err(ToolError::Spawn { source, .. }) => {
            format!("running {}: {source}\n", argv.join(" ")).into_bytes()
        }
        Err(e) => format!("{e}\n").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_is_a_base64_tar_gz_with_every_part() {
        memlog::append(b"a line the bundle must carry\n");
        let b64 = bundle(true, None, &[("extra".to_string(), b"part".to_vec())]).unwrap();
        let gz = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs.tar.gz");
        std::fs::write(&path, gz).unwrap();
        agent_base::tool::run(
            Command::new("tar")
                .arg("-xzf")
                .arg(&path)
                .arg("-C")
                .arg(dir.path()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap();
        assert!(log.contains("a line the bundle must carry"));
        for name in [
            "dmesg",
            "ip_addr",
            "lsblk",
            "mounts",
            "inventory.json",
            "partitions",
            "multipath",
            "extra",
        ] {
            assert!(dir.path().join(name).exists(), "{name} missing");
        }
        assert_eq!(std::fs::read(dir.path().join("extra")).unwrap(), b"part");
        assert!(dir.path().join("udev").is_dir(), "no udev/ properties");
    }
}
