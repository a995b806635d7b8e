//! Command-line interface: `agent serve` (host mode daemon), `agent
//! container` (OpenShift's `ironic-agent` container), `agent demo`
//! (the agent driven by the built-in test conductor), and the console tools
//! of the debug shell: `agent write-image`, `agent erase`, `agent status`,
//! `agent lookup`, `agent inventory`, `agent root-disk`, and `agent json-get`
//! for executable steps' scripts. Flags override the
//! kernel command line, which is read from `/proc/cmdline` or `--cmdline-file`.

pub(crate) mod container;
pub(crate) mod erase;
pub(crate) mod json_get;
pub(crate) mod lookup;
pub(crate) mod progress_view;
pub(crate) mod status;
pub(crate) mod write_image;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use agent_base::config::{self, Config, RunMode};

/// Bare-metal deploy agent, compatible with Ironic's ironic-python-agent.
#[derive(Debug, Parser)]
#[command(name = "agent", version)]
pub struct Cli {
    /// Debug logging (also `ipa-debug=1` on the kernel command line).
    #[arg(long, global = true)]
    pub debug: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent on an ordinary machine (host mode): only devices given
    /// with --allow-device are written; power actions are simulated.
    Serve(ServeArgs),
    /// Run as OpenShift's `ironic-agent` container on a CoreOS live system
    /// (the OCI image's entrypoint): IPA's configuration files, the host's
    /// root at /mnt/coreos; on a host that is not live, as `serve`.
    Container(container::ContainerArgs),
    /// Show the agent being driven by the built-in test conductor: a manual
    /// clean with erase_devices_metadata on a scratch disk image (only in
    /// builds with the `test-conductor` feature, never in the ramdisk).
    #[cfg(feature = "test-conductor")]
    Demo(DemoArgs),
    /// Write a disk image to a device: streamed, decompressed or converted
    /// (raw, qcow2, zstd, gzip, xz), checksum-verified, fail-closed.
    WriteImage(write_image::WriteImageArgs),
    /// Erase one disk (the erase_devices methods), with a progress bar.
    Erase(erase::EraseArgs),
    /// What the running agent is doing: lookup, conductor, heartbeats, commands.
    Status(status::StatusArgs),
    /// Look this machine's node up at the conductor and print it (no token is taken).
    Lookup(lookup::LookupArgs),
    /// Print the hardware inventory Ironic would receive (JSON).
    Inventory(InventoryArgs),
    /// Print the disk the image would be written to, and why the others were not.
    RootDisk(RootDiskArgs),
    /// Print values of the JSON document on stdin (for executable steps' scripts).
    JsonGet(json_get::JsonGetArgs),
    /// The agent service inside the deploy ramdisk (started by PID 1).
    #[command(hide = true)]
    Ramdisk(RamdiskArgs),
}

/// Flags of `agent ramdisk` (passed by PID 1, not by people).
#[derive(Debug, Args)]
pub struct RamdiskArgs {
    /// Address DHCP gave the preferred NIC (unless ipa-advertise-host is set).
    #[arg(long)]
    pub advertise_host: Option<std::net::IpAddr>,
}

/// Flags of `agent inventory`.
#[derive(Debug, Args)]
pub struct InventoryArgs {
    /// A readable table instead of JSON.
    #[arg(long)]
    pub human: bool,
    /// Read a captured tree instead of the running system.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Listen for LLDP on every NIC with link (needs root).
    #[arg(long)]
    pub lldp: bool,
    /// LLDP listening time in seconds.
    #[arg(long, default_value_t = agent_devices::lldp::DEFAULT_TIMEOUT.as_secs())]
    pub lldp_timeout: u64,
}

/// Flags of `agent root-disk`.
#[derive(Debug, Args)]
pub struct RootDiskArgs {
    /// Root device hints as Ironic takes them, e.g. '{"size": ">= 100"}'.
    #[arg(long)]
    pub hints: Option<String>,
    /// Read a captured tree instead of the running system.
    #[arg(long)]
    pub root: Option<PathBuf>,
}

/// Flags of `agent serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// How to reach the conductor.
    #[command(flatten)]
    pub conductor: ConductorArgs,
    /// Address put in the callback URL (default: the one routing to the conductor).
    #[arg(long)]
    pub advertise_host: Option<std::net::IpAddr>,
    /// Port put in the callback URL (0: the port actually bound).
    #[arg(long)]
    pub advertise_port: Option<u16>,
    /// Address the command API binds (default in host mode: the advertised address).
    #[arg(long)]
    pub listen_host: Option<std::net::IpAddr>,
    /// Port the command API binds (0: any free port).
    #[arg(long)]
    pub listen_port: Option<u16>,
    /// A device the agent may write (repeatable). Nothing else is touched.
    #[arg(long = "allow-device")]
    pub allow_device: Vec<PathBuf>,
    /// A network record (JSON, as the ramdisk's init writes it) that
    /// `install_coreos` with `coreos_copy_network` carries into the image.
    #[arg(long)]
    pub network_record: Option<PathBuf>,
    /// A directory of executable hardware managers' manifests (`*.yaml`,
    /// agent/docs/own-steps.md) whose steps the agent offers.
    #[arg(long)]
    pub managers_dir: Option<PathBuf>,
    /// Serve plain HTTP even when the conductor supports auto-TLS.
    #[arg(long)]
    pub no_tls: bool,
    /// Give up looking the node up after this many seconds (0: never).
    #[arg(long)]
    pub lookup_timeout: Option<u64>,
    /// Longest gap between lookup attempts, in seconds.
    #[arg(long)]
    pub lookup_max_interval: Option<u64>,
    /// Minimum gap between a heartbeat and the next forced one, in seconds.
    #[arg(long)]
    pub min_heartbeat_interval: Option<f64>,
}

/// The conductor flags `agent serve` and `agent lookup` share; they
/// override what the kernel command line says.
#[derive(Debug, Clone, Default, Args)]
pub struct ConductorArgs {
    /// Conductor API URL (repeatable or comma-separated; `mdns` browses);
    /// overrides ipa-api-url.
    #[arg(long = "api-url", value_delimiter = ',')]
    pub api_url: Vec<String>,
    /// Also look the node up by this MAC (repeatable).
    #[arg(long = "mac")]
    pub mac: Vec<String>,
    /// Read kernel parameters from this file instead of /proc/cmdline.
    #[arg(long)]
    pub cmdline_file: Option<PathBuf>,
    /// Also read IPA's configuration files under this directory
    /// (`etc/ironic-python-agent.d/*.conf`, …; the ramdisk reads them under `/`).
    #[arg(long)]
    pub config_root: Option<PathBuf>,
    /// Do not verify the conductor's (and image servers') TLS certificates.
    #[arg(long)]
    pub insecure: bool,
    /// CA bundle for the conductor and image servers.
    #[arg(long)]
    pub cafile: Option<PathBuf>,
}

impl ConductorArgs {
    /// The configuration: kernel parameters (from `--cmdline-file` or
    /// /proc/cmdline), then these flags.
    pub fn config(&self) -> Result<Config> {
        let mut c = config::load(self.cmdline_file.as_deref(), self.config_root.as_deref())?;
        if !self.api_url.is_empty() {
            c.api_urls = config::parse_api_urls(&self.api_url.join(","))
                .map_err(|e| anyhow::anyhow!("--api-url: {e}"))?;
        }
        for m in &self.mac {
            if !agent_base::net::is_valid_mac(&m.to_ascii_lowercase()) {
                anyhow::bail!("--mac {m:?}: expected six colon-separated hex bytes");
            }
        }
        c.extra_macs = self.mac.clone();
        c.insecure |= self.insecure;
        if let Some(f) = &self.cafile {
            c.cafile = Some(f.clone());
        }
        Ok(c)
    }
}

/// Flags of `agent demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the scratch disk image here instead of a temporary directory.
    #[arg(long)]
    pub workdir: Option<PathBuf>,
}

/// The log filter of `--debug` (`ipa-debug=1`): the agent's own debug
/// lines, its libraries' at info, as IPA's debug flag leaves urllib3 and
/// the other libraries at oslo.log's default levels (a library's debug
/// lines, per connection or packet, would flood a serial console).
pub const DEBUG_FILTER: &str = "info,agent=debug";

/// Sets up logging to stderr and to the in-memory log that
/// `log.collect_system_logs` returns; `RUST_LOG` overrides the level.
/// Colours only on a terminal: under podman, systemd's journal or a pipe
/// the lines stay plain text (`NO_COLOR` turns them off everywhere).
pub fn init_tracing(debug: bool) {
    let default = if debug { DEBUG_FILTER } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(agent_devices::logs::memlog::Tee)
        .with_target(false)
        .with_ansi(colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .try_init();
}

/// Whether log lines carry ANSI colours: on a terminal, unless `NO_COLOR`
/// is set to anything but the empty string (no-color.org's rule).
fn colours(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let config = host_config(&args, cli.debug)?;
            crate::agent::run(config).await
        }
        Command::Container(args) => container::run(&args, cli.debug).await,
        #[cfg(feature = "test-conductor")]
        Command::Demo(args) => crate::testconductor::demo::run(args.workdir).await,
        Command::WriteImage(args) => write_image::run(args).await,
        Command::Erase(args) => tokio::task::spawn_blocking(move || erase::run(&args))
            .await
            .context("the erase crashed")?,
        Command::Status(args) => status::run(&args).await,
        Command::Lookup(args) => lookup::run(&args).await,
        Command::Inventory(args) => print_inventory(&args).await,
        Command::RootDisk(args) => print_root_disk(&args),
        Command::JsonGet(args) => json_get::run(&args),
        Command::Ramdisk(args) => {
            let config = ramdisk_config(&args, cli.debug)?;
            crate::agent::run(config).await
        }
    }
}

fn inventory_options(root: Option<&std::path::Path>) -> Result<agent_devices::inventory::Options> {
    Ok(match root {
        Some(r) => agent_devices::inventory::Options::fixture(r),
        None => {
            let params = config::read_kernel_params(None)?;
            let bootif = params.get("BOOTIF").map(String::from);
            agent_devices::inventory::Options::live(bootif.filter(|b| !b.is_empty()))
        }
    })
}

async fn print_inventory(args: &InventoryArgs) -> Result<()> {
    let opts = inventory_options(args.root.as_deref())?;
    let mut inv = agent_devices::inventory::collect(&opts)?;
    if args.lldp {
        let lldp = agent_devices::lldp::collect(&inv, Duration::from_secs(args.lldp_timeout)).await;
        agent_devices::lldp::apply(&mut inv, &lldp);
    }
    if args.human {
        print!("{}", agent_devices::inventory::human::render(&inv));
        if args.root.is_none() {
            print!("{}", signature_lines(&inv.disks));
        }
    } else {
        println!("{}", serde_json::to_string_pretty(&inv)?);
    }
    Ok(())
}

fn print_root_disk(args: &RootDiskArgs) -> Result<()> {
    let opts = inventory_options(args.root.as_deref())?;
    let inv = agent_devices::inventory::collect(&opts)?;
    let hints: Option<serde_json::Value> = args
        .hints
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .context("--hints is not JSON")?;
    let choice = agent_devices::hints::choose(&inv.disks, hints.as_ref())?;
    println!("root device: {} ({})", choice.disk.name, choice.reason);
    for r in &choice.rejected {
        println!("  not {}: {}", r.name, r.reason);
    }
    if args.root.is_none() {
        print!("{}", signature_lines(std::slice::from_ref(&choice.disk)));
    }
    Ok(())
}

/// What libblkid finds on each disk (read-only probe), one line each.
fn signature_lines(disks: &[agent_devices::inventory::Disk]) -> String {
    let mut out = String::from("\nOn-disk signatures (libblkid)\n");
    for d in disks {
        let s = match agent_devices::inventory::signatures::probe(std::path::Path::new(&d.name)) {
            Ok(s) => s.summary(),
            Err(e) => format!("cannot probe: {e:#}"),
        };
        out.push_str(&format!("  {:<14} {s}\n", d.name));
    }
    out
}

/// Builds the ramdisk configuration: kernel parameters, ramdisk mode, the
/// address DHCP gave the preferred NIC.
pub fn ramdisk_config(args: &RamdiskArgs, debug: bool) -> Result<Config> {
    // Ramdisk mode may write any unmounted disk: never outside the ramdisk.
    if !agent_core::power::in_ramdisk() {
        anyhow::bail!(
            "`agent ramdisk` runs only inside the deploy ramdisk (its root is the initramfs and {} exists); use `agent serve` on other machines",
            agent_core::power::RAMDISK_MARKER
        );
    }
    let mut c = config::load(None, Some(std::path::Path::new("/")))?;
    c.mode = RunMode::Ramdisk;
    c.debug |= debug;
    c.network_record = Some(agent_devices::netconf::record::RAMDISK_PATH.into());
    c.exec_managers_dir = Some(agent_contents::exec_steps::RAMDISK_DIR.into());
    if c.advertise_host.is_none() {
        c.advertise_host = args.advertise_host;
    }
    Ok(c)
}

/// Sets up logging for the ramdisk service: timestamps are seconds since
/// boot, so the console shows each phase's time.
pub fn init_ramdisk_tracing(debug: bool) {
    struct SinceBoot;
    impl tracing_subscriber::fmt::time::FormatTime for SinceBoot {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            write!(w, "[{:8.3}]", crate::init::clock::since_boot())
        }
    }
    let default = if debug { DEBUG_FILTER } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .with_timer(SinceBoot)
        .try_init();
}

/// Builds the host-mode configuration: kernel parameters, then flags.
pub fn host_config(args: &ServeArgs, debug: bool) -> Result<Config> {
    let mut c = args.conductor.config()?;
    c.mode = RunMode::Host;
    c.debug |= debug;
    // Host mode waits for the conductor as long as it takes.
    c.lookup_timeout = Duration::ZERO;
    if let Some(h) = args.advertise_host {
        c.advertise_host = Some(h);
    }
    if let Some(p) = args.advertise_port {
        c.advertise_port = p;
    }
    // On a shared host, listen only where we advertise unless told otherwise.
    c.listen_host = args
        .listen_host
        .or(c.advertise_host)
        .unwrap_or(c.listen_host);
    if let Some(p) = args.listen_port {
        c.listen_port = p;
    }
    c.allowed_devices = args.allow_device.clone();
    c.network_record.clone_from(&args.network_record);
    c.exec_managers_dir.clone_from(&args.managers_dir);
    if args.no_tls {
        c.auto_tls = false;
    }
    if let Some(t) = args.lookup_timeout {
        c.lookup_timeout = Duration::from_secs(t);
    }
    if let Some(t) = args.lookup_max_interval {
        c.lookup_max_interval = Duration::from_secs(t.max(1));
    }
    if let Some(t) = args.min_heartbeat_interval {
        c.min_heartbeat_interval = Duration::from_secs_f64(t.max(0.0));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    //! One configuration path: kernel parameters, then the shared flags.

    use clap::Parser;

    use super::*;

    fn serve(args: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from([&["agent", "serve"], args].concat()).expect("parses");
        match cli.command {
            Command::Serve(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some("".into())));
        assert!(!colours(true, Some("1".into())));
        // podman's and journald's stderr is no terminal.
        assert!(!colours(false, None));
    }

    #[test]
    fn flags_override_the_kernel_parameters_in_serve_and_lookup_alike() {
        let dir = tempfile::tempdir().unwrap();
        let cmdline = dir.path().join("cmdline");
        std::fs::write(
            &cmdline,
            "ipa-api-url=http://10.0.0.1:6385 ipa-insecure=0 ipa-lookup-timeout=7\n",
        )
        .unwrap();
        let file = cmdline.to_str().unwrap();
        let args = serve(&[
            "--cmdline-file",
            file,
            "--api-url",
            "http://127.0.0.1:6385",
            "--mac",
            "52:54:00:12:34:56",
            "--insecure",
            "--managers-dir",
            "/srv/managers",
        ]);
        let c = host_config(&args, false).unwrap();
        assert_eq!(
            c.exec_managers_dir.as_deref(),
            Some(std::path::Path::new("/srv/managers"))
        );
        assert_eq!(
            c.api_urls,
            config::ApiUrls::Urls(vec!["http://127.0.0.1:6385".into()])
        );
        assert!(c.insecure);
        assert_eq!(c.extra_macs, ["52:54:00:12:34:56"]);
        assert_eq!(c.mode, RunMode::Host);
        assert_eq!(c.lookup_timeout, Duration::ZERO, "host mode waits for ever");

        let cli = Cli::try_parse_from(["agent", "lookup", "--cmdline-file", file]).unwrap();
        let Command::Lookup(l) = cli.command else {
            panic!("not lookup")
        };
        let c = l.conductor.config().unwrap();
        assert_eq!(
            c.api_urls,
            config::ApiUrls::Urls(vec!["http://10.0.0.1:6385".into()])
        );
        assert_eq!(c.exec_managers_dir, None, "no managers unless asked for");
        assert_eq!(c.lookup_timeout, Duration::from_secs(7));
    }

    #[test]
    fn debug_logging_is_the_agents_own() {
        let f = tracing_subscriber::EnvFilter::try_new(super::DEBUG_FILTER).unwrap();
        assert_eq!(
            f.max_level_hint(),
            Some(tracing::level_filters::LevelFilter::DEBUG)
        );
        let text = f.to_string();
        assert!(
            text.contains("agent=debug") && text.contains("info"),
            "{text}"
        );
    }

    #[test]
    fn the_ramdisk_service_refuses_to_run_outside_the_ramdisk() {
        let e = ramdisk_config(
            &RamdiskArgs {
                advertise_host: None,
            },
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("only inside the deploy ramdisk"),
            "{e}"
        );
    }

    #[test]
    fn an_unreadable_command_line_or_a_bad_mac_is_an_error_naming_it() {
        let args = serve(&["--cmdline-file", "/nonexistent/cmdline"]);
        let e = host_config(&args, false).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/cmdline"), "{e:#}");
        let cli =
            Cli::try_parse_from(["agent", "lookup", "--cmdline-file", "/nonexistent/cmdline"])
                .unwrap();
        let Command::Lookup(l) = cli.command else {
            panic!("not lookup")
        };
        assert!(l.conductor.config().is_err(), "no silent defaults");

        let dir = tempfile::tempdir().unwrap();
        let cmdline = dir.path().join("cmdline");
        std::fs::write(&cmdline, "").unwrap();
        let args = serve(&["--cmdline-file", cmdline.to_str().unwrap(), "--mac", "nope"]);
        let e = host_config(&args, false).unwrap_err();
        assert!(e.to_string().contains("--mac \"nope\""), "{e}");
    }
}
