//! `ci/demo --bmc …`: the main job against the operator's own server.
//! Real, unmodified Ironic 39 runs on this machine at `--http-address`
//! (its API on port 6385, its `http_root` with the ISOs it builds and the
//! image on 8088) and drives the server through its BMC with the `redfish`
//! hardware type and `redfish-virtual-media` boot: no DHCP or PXE on the
//! operator's network, static addressing through `--network-data`. With
//! `--boot pxe`, Ironic's `ipxe` boot instead, and this machine answers
//! the server's DHCP and TFTP itself ([`pxe`]).
//!
//! Order, so that a typo costs seconds: the flags are parsed and their
//! files read ([`options`]), the BMC is checked (reachable, certificate,
//! credentials, the system, a free virtual media CD; [`bmc`]) and the
//! address tried, all before the ramdisk, the ESP and Ironic are prepared.
//! Then [`flow`] inspects the server and stops unless `--confirm-disk`
//! names the disk the agent chose; confirmed, it cleans that disk only and
//! deploys. Whatever happens (an error, Ctrl-C or SIGTERM), Ironic is
//! stopped and the BMC put back as it was: the CD ejected, the boot
//! override restored, the power state too unless the server now boots the
//! deployed system. Every failure the operator can fix ends with the fix
//! ([`error::Problem`]).
//!
//! `tests/qemu/bed_own_server.rs` runs this against the bed: sushy-tools in a
//! namespace of its own at a routed address, over HTTPS with credentials.

pub mod bmc;
pub mod error;
pub mod flow;
pub mod inventory;
pub mod options;
pub mod pxe;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::bed::deploy::{self, Printer};
use crate::bed::http_root::HttpRoot;
use crate::bed::ironic_flow::Reporter;
use crate::bed::{self, redfish};
use crate::ironic::Ironic;
use bmc::BmcClient;
use error::Problem;
use flow::{Ctx, Outcome, Served};
use options::{Boot, Image, Options};
use pxe::PxeServer;

/// Ironic's API port at `--http-address`.
pub const API_PORT: u16 = 6385;
/// Ironic's `http_root` port at `--http-address`.
pub const HTTP_PORT: u16 = 8088;

/// Runs `ci/demo --bmc …` with `args` (without the program name).
pub fn main(args: &[String], mut out: Printer) -> Result<()> {
    let opts = Options::parse(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the runtime")?;
    out.line(format!(
        "checking the BMC at {}{}",
        opts.bmc_address, opts.system_path
    ));
    let client = BmcClient::new(&opts)?;
    let found = rt.block_on(client.check(opts.boot == Boot::Vmedia))?;
    out.line(format!("  system    {}", found.system));
    out.line(format!("  BMC       {}", found.bmc));
    out.line(format!(
        "  power {}, boot override {} ({}), {}",
        found.before.power,
        found.before.target.as_deref().unwrap_or("-"),
        found.before.enabled.as_deref().unwrap_or("-"),
        match opts.boot {
            Boot::Vmedia => format!("virtual media CD {} (empty)", found.cd),
            Boot::Pxe(_) => "--boot pxe: virtual media not used".to_string(),
        }
    ));
    check_address(&opts)?;
    out.line(format!(
        "--http-address {}: ports {API_PORT} and {HTTP_PORT} free",
        opts.http_address
    ));
    if opts.check_only {
        out.line("--check: the flags, the BMC and the address are fine");
        return Ok(());
    }

    let work = tempfile::Builder::new()
        .prefix("own-server-")
        .tempdir()
        .context("the demo's work directory")?;
    let root = work.path().join("http_root");
    std::fs::create_dir(&root)?;
    let image = prepare(&opts, &mut out, work.path(), &root)?;
    // From here on SIGINT and SIGTERM are noted, not fatal: Ironic and the
    // http server are stopped and the BMC put back before the demo ends.
    // (Before, they end it at once: nothing runs that needs stopping.)
    let (mut int, mut term) = rt.block_on(async {
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })?;
    let logs = bed::logs_dir("own-server")?;
    let http = HttpRoot::serve_here(
        &opts.http_address.to_string(),
        &root,
        HTTP_PORT,
        logs.join("http.log"),
    )?;
    // --boot pxe: DHCP and TFTP for the server's MAC only, from here.
    let pxe = match &opts.boot {
        Boot::Vmedia => None,
        Boot::Pxe(lease) => {
            let server = PxeServer::start(
                opts.http_address,
                &opts.mac,
                lease,
                &format!("{}/boot.ipxe", http.url()),
                &logs,
            )?;
            out.line(format!(
                "--boot pxe: DHCP for {} only ({} netmask {}), TFTP (snponly.efi) and iPXE from {}; its log: {}",
                opts.mac,
                lease.ip,
                lease.netmask,
                opts.http_address,
                server.log_path().display()
            ));
            Some(server)
        }
    };
    let conf = ironic_conf(&opts, &root, &redfish::esp_image(work.path())?, http.url());
    let t = Instant::now();
    let ironic = out
        .meanwhile("starting Ironic", None, || {
            Ironic::start_at(&opts.http_address.to_string(), API_PORT, Some(&conf))
        })
        .context("starting Ironic 39.0.0")?;
    out.line(format!(
        "Ironic 39.0.0 up at {} in {:.1} s (redfish, {}, fast track); its log: {}; http_root at {} (access log {})",
        ironic.url,
        t.elapsed().as_secs_f64(),
        opts.boot.ironic_interface(),
        ironic.log_path().display(),
        http.url(),
        http.log_path().display()
    ));

    let cx = Ctx {
        opts: &opts,
        ironic: &ironic,
        http: &http,
        bmc: &client,
        pxe: pxe.as_ref(),
        http_root: &root,
        image: &image,
    };
    let mut reporter = Reporter::new(out.clone());
    let result = rt.block_on(async {
        tokio::select! {
            r = flow::drive(&cx, &mut reporter) => r,
            _ = int.recv() => Err(Problem::Interrupted.into()),
            _ = term.recv() => Err(Problem::Interrupted.into()),
        }
    });
    if let Err(e) = &result {
        out.line(format!("failed: {e:#}"));
        out.line(format!("Ironic's log: {}", ironic.log_path().display()));
    }
    // Ironic stops first: it must not act on the server while it is put back.
    drop(ironic);
    drop(pxe);
    out.line("putting the BMC back as it was:");
    let deployed = matches!(result, Ok(Outcome::Deployed));
    match rt.block_on(client.restore(&found.cd, &found.before, deployed)) {
        Ok(lines) => lines.into_iter().for_each(|l| out.line(format!("  {l}"))),
        Err(e) => out.line(format!(
            "  could not: {e}; check the BMC by hand (virtual media, boot override)"
        )),
    }
    result.map(drop)
}

/// Fails unless this machine can listen on both ports at `--http-address`.
fn check_address(o: &Options) -> Result<(), Problem> {
    for port in [API_PORT, HTTP_PORT] {
        // A port still held is given a few seconds: an earlier run (a
        // Ctrl-C a moment ago) may still be letting go of it.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let err = loop {
            match std::net::TcpListener::bind((o.http_address, port)) {
                Ok(_) => break None,
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
                Err(e) => break Some(e),
            }
        };
        if let Some(e) = err {
            // Name what holds it: often an earlier run's Ironic.
            let held = crate::listeners::listening_on(Path::new("/proc"), port);
            let by = match held.first() {
                Some(h) if e.kind() == std::io::ErrorKind::AddrInUse => format!(", held by {h}"),
                _ => String::new(),
            };
            return Err(Problem::HttpAddress {
                addr: o.http_address.to_string(),
                reason: format!("port {port}: {e}{by}"),
                ports: format!("{API_PORT} and {HTTP_PORT}"),
            });
        }
    }
    Ok(())
}

/// The deploy ramdisk (built when missing) and the image in Ironic's
/// `http_root`, with its checksum and format.
fn prepare(o: &Options, out: &mut Printer, work: &Path, root: &Path) -> Result<Served> {
    let ramdisk = bed::ramdisk_location();
    if !bed::ramdisk_built(&ramdisk) {
        let log = work.join("ramdisk-build.log");
        out.line(format!(
            "building the deploy ramdisk into {}",
            ramdisk.display()
        ));
        out.meanwhile("building the deploy ramdisk", Some(&log), || {
            bed::build_ramdisk(&ramdisk, Some(&log))
        })?;
    }
    for f in ["deploy.kernel", "deploy.initramfs"] {
        link_or_copy(&ramdisk.join(f), &root.join(f))?;
    }
    out.line(format!("deploy ramdisk: {}", ramdisk.display()));
    Ok(match &o.image {
        Image::Url(url) => {
            let (algo, hash) = o
                .checksum
                .clone()
                .context("--checksum is needed with a URL")?;
            let format = if url.ends_with(".qcow2") {
                "qcow2"
            } else {
                "raw"
            };
            Served {
                url: url.clone(),
                algo,
                hash,
                format: format.into(),
            }
        }
        Image::File(path) => {
            let name = path
                .file_name()
                .context("--image has no file name")?
                .to_string_lossy()
                .into_owned();
            std::os::unix::fs::symlink(path, root.join(&name))
                .with_context(|| format!("linking {} into the http_root", path.display()))?;
            let (algo, hash) = match &o.checksum {
                Some(c) => c.clone(),
                None => {
                    let t = Instant::now();
                    let sha =
                        out.meanwhile("hashing the image", None, || deploy::sha256_file(path))?;
                    out.line(format!(
                        "--image {}: sha256 {sha} ({:.1} s)",
                        path.display(),
                        t.elapsed().as_secs_f64()
                    ));
                    ("sha256".to_string(), sha)
                }
            };
            let mut magic = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| f.read(&mut magic))
                .with_context(|| format!("reading --image {}", path.display()))?;
            Served {
                url: format!("http://{}:{HTTP_PORT}/{name}", o.http_address),
                algo,
                hash,
                format: if &magic == b"QFI\xfb" { "qcow2" } else { "raw" }.into(),
            }
        }
    })
}

fn link_or_copy(from: &Path, to: &PathBuf) -> Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    }
    Ok(())
}

/// Ironic's configuration for the operator's server (loaded after
/// `ci/ironic/ironic.conf`): `redfish` with `redfish-virtual-media` boot
/// (the ESP built here for UEFI ISOs) or `ipxe`, the agent inspect interface, fast
/// track (inspection, cleaning and the deploy in one boot of the agent),
/// `erase_devices_metadata` as the only automated clean step, and callback
/// timeouts that allow a real server's POST.
/// `redfish` with both boot interfaces: `redfish-virtual-media` (the
/// default) and `ipxe` (`--boot pxe`; Ironic writes `boot.ipxe` and the
/// node's iPXE config into its `http_root`).
const REDFISH_INTERFACES: &str = "enabled_hardware_types = fake-hardware,redfish
enabled_boot_interfaces = fake,redfish-virtual-media,ipxe
enabled_power_interfaces = fake,redfish
enabled_management_interfaces = noop,fake,redfish
default_boot_interface = redfish-virtual-media
default_power_interface = redfish
default_management_interface = redfish
";

fn ironic_conf(o: &Options, root: &Path, esp: &Path, http_url: &str) -> String {
    let wait = o.iso_read_timeout + o.heartbeat_timeout + 600;
    format!(
        "[DEFAULT]\n\
         {redfish}\
         esp_image = {esp}\n\
         [agent]\n\
         post_deploy_get_power_state_retries = 30\n\
         post_deploy_get_power_state_retry_interval = 2\n\
         [conductor]\n\
         automated_clean = true\n\
         force_power_state_during_sync = false\n\
         power_state_change_timeout = 120\n\
         deploy_callback_timeout = {wait}\n\
         clean_callback_timeout = {wait}\n\
         inspect_wait_timeout = {wait}\n\
         [deploy]\n\
         fast_track = true\n\
         erase_devices_metadata_priority = 10\n\
         erase_devices_priority = 0\n\
         http_root = {root}\n\
         http_url = {http_url}\n\
         [inspector]\n\
         require_managed_boot = false\n\
         power_off = false\n\
         [redfish]\n\
         use_swift = false\n\
         kernel_append_params = console=tty0 console=ttyS0\n\
         [pxe]\n\
         kernel_append_params = console=tty0 console=ttyS0\n",
        redfish = REDFISH_INTERFACES,
        esp = esp.display(),
        root = root.display(),
    )
}
