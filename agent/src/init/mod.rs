//! PID 1 of the deploy ramdisk: `/init` is the agent binary itself. It
//! mounts the kernel filesystems, loads drivers by modalias coldplug, brings
//! the network up (static from `network_data.json` on Ironic's virtual
//! media, [`vmedia`], else by DHCP), then supervises the agent service (and
//! the debug shell) forever, reaping orphans. Every phase prints a console
//! line with the seconds since boot.
//!
//! Kernel arguments read here (overridden by IPA's configuration files and
//! a virtual floppy's parameters, as the agent reads them):
//! `boot_method=vmedia` (read the virtual media), `BOOTIF` (preferred NIC), `ip=` (static address),
//! `ipa-enable-vlan-interfaces` (VLANs, explicit or from LLDP within
//! `ipa-lldp-timeout`), `ipa-debug=1` (the agent logs at debug level),
//! `agent.shell=1` (a passwordless root shell on the console), `sshkey=`
//! (SSH access, [`ssh`]), `rootpwd=` (a `$6$` crypt hash: root logs in on
//! the console), `agent.rootpwd-after-rescue=1` (root keeps that password
//! after a rescue; see [`access`] for who gets in how),
//! `agent.settle=SECONDS` (coldplug quiet time, default 1),
//! `agent.dhcp-timeout=SECONDS` (default 30), `agent.multipath-queue=SECONDS`
//! (how long a multipath device with no path queues I/O before it fails,
//! default 60; see `agent_devices::disk::multipath::watch`).

pub(crate) mod access;
pub(crate) mod clock;
pub(crate) mod coldplug;
pub mod modules;
pub(crate) mod mounts;
pub(crate) mod ssh;
pub(crate) mod supervise;
pub(crate) mod vmedia;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clock::say;

use agent_base::bootphases;
use agent_base::config::KernelParams;

/// Whether this process should act as init: it is PID 1 or was started as `/init`.
pub fn is_init() -> bool {
    is_init_for(
        std::env::args_os().next().as_deref(),
        std::path::Path::new(agent_core::power::RAMDISK_MARKER).exists(),
    )
}

/// [`is_init`] for a given `argv[0]` and whether the ramdisk's marker file
/// exists: only the ramdisk's `/init` is PID 1's code. Being PID 1 alone
/// (`agent serve` as a container's entrypoint) is not enough: ramdisk mode
/// may write any unmounted disk.
fn is_init_for(argv0: Option<&std::ffi::OsStr>, marker: bool) -> bool {
    argv0.is_some_and(|a| a == "/init") && marker
}

/// Modules no device asks for but the agent needs (one name per line).
pub const ALWAYS_MODULES: &str = "/etc/agent-modules";

/// Runs PID 1. Never returns.
pub fn main() -> ! {
    let started = clock::since_boot();
    say("phase init: deploy ramdisk init starting");
    for failure in mounts::mount_all() {
        say(&format!("mount failed: {failure}"));
    }
    std::env::set_var("PATH", "/bin:/sbin:/usr/bin:/usr/sbin");
    // The agent's binary for executable steps' scripts (`"$AGENT_EXE"
    // json-get`): `/init` itself would be taken for PID 1's code.
    std::env::set_var(agent_contents::exec_steps::run::AGENT_EXE, "/bin/agent");
    say("phase mounts done");
    // /run is mounted now: the phases go to the file the agent reads.
    bootphases::record_at("init", started);
    bootphases::record("mounts");

    let cmdline = agent_base::config::read_cmdline(None).unwrap_or_else(|e| {
        say(&format!("{e}; using the defaults"));
        String::new()
    });
    let mut params = KernelParams::parse(&cmdline);

    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let moddir = PathBuf::from("/lib/modules").join(&release);
    let mut loader = modules::Loader::new(moddir.clone());
    let always: Vec<String> = std::fs::read_to_string(ALWAYS_MODULES)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let report = coldplug::run(
        &mut loader,
        Path::new("/sys"),
        &always,
        secs(&params, "agent.settle", 1.0),
        Duration::from_secs(20),
    );
    say(&format!(
        "phase modules done: {} loaded for {} devices from {}",
        report.loaded,
        report.devices,
        moddir.display()
    ));
    bootphases::record("modules");
    // Multipath devices over the paths of each SAN LUN, as multipathd makes
    // them in IPA's ramdisk, before anything lists the disks (RAID members
    // included: an array on a LUN is assembled on its multipath device).
    let (assembled, failures) = agent_devices::disk::multipath::assemble();
    for f in failures {
        say(&format!("multipath: {f}"));
    }
    for line in assembled.iter().flat_map(|m| m.lines()) {
        say(&line);
    }
    // Failover, paths coming back, the bound on queueing and LUNs that
    // appear later, as multipathd keeps them in IPA's ramdisk.
    let queue = secs(
        &params,
        "agent.multipath-queue",
        agent_devices::disk::multipath::watch::DEFAULT_QUEUE.as_secs_f64(),
    );
    match agent_devices::disk::multipath::watch::spawn(queue, say) {
        Ok(_) => say(&format!(
            "multipath: watching paths; no path queues I/O for at most {} s",
            queue.as_secs()
        )),
        Err(e) => say(&format!("multipath: the path watch did not start: {e}")),
    }
    // Software RAID arrays on the disks start now, as udev and mdadm
    // --incremental start them in IPA's ramdisk (a deploy onto /dev/md0
    // after the clean that built it runs in a new boot).
    if let Ok(disks) = agent_devices::disk::whole_disks(Path::new("/sys")) {
        for dev in agent_contents::raid::ops::assemble_existing(&disks) {
            say(&format!("raid: {} assembled", dev.display()));
        }
    }
    if let Some(failure) = mounts::mount_efivarfs() {
        say(&format!("mount failed: {failure}"));
    }
    say(&format!(
        "phase firmware: {}",
        agent_devices::lockdown::describe(Path::new("/sys"))
    ));
    bootphases::record("firmware");

    let network_data = if vmedia::booted_from_vmedia(&params) {
        vmedia::read(&mut params)
    } else {
        None
    };
    say("phase vmedia done");
    bootphases::record("vmedia");
    for note in agent_base::config::merge_local(&mut params, Path::new("/")).notes {
        say(&format!("config: {note}"));
    }
    let plan = network_data.as_deref().and_then(vmedia::plan);
    if plan.as_ref().is_some_and(|p| p.has_bonds()) {
        // No bond0 of the driver's own: the plan names its bonds.
        loader.load_with("bonding", "max_bonds=0");
    }

    let bootif = params.get("BOOTIF").map(String::from);
    let fixed = params
        .get("ip")
        .and_then(agent_devices::netconf::static_ip::parse);
    let (nics, advertise) = agent_devices::netconf::bring_up(
        bootif.as_deref(),
        fixed.as_ref(),
        plan.as_ref(),
        &agent_devices::netconf::vlan::VlanPlan::parse(
            params.get("ipa-enable-vlan-interfaces").unwrap_or_default(),
        ),
        secs(
            &params,
            "ipa-lldp-timeout",
            agent_devices::lldp::DEFAULT_TIMEOUT.as_secs_f64(),
        ),
        Duration::from_secs(5),
        secs(&params, "agent.dhcp-timeout", 30.0),
    );
    for n in &nics {
        say(&format!("net: {}", agent_devices::netconf::describe(n)));
    }
    // For `coreos_copy_network`: what the network ended up as.
    let record = agent_devices::netconf::record::NetRecord::from_bringup(
        plan.as_ref(),
        fixed.as_ref(),
        &nics,
    );
    let record_path = Path::new(agent_devices::netconf::record::RAMDISK_PATH);
    match record.save(record_path) {
        Ok(()) => say(&format!(
            "net: {} interface(s) recorded in {}",
            record.ifaces.len(),
            record_path.display()
        )),
        Err(e) => say(&format!("net: no network record: {e:#}")),
    }
    say("phase network done");
    bootphases::record("network");

    let access = access::Access::from_params(&params);
    for note in &access.notes {
        say(note);
    }
    let mut agent_args = access.agent_args();
    if let (Some(ip), None) = (advertise, params.get("ipa-advertise-host")) {
        agent_args.extend(["--advertise-host".to_string(), ip.to_string()]);
    }
    let ssh = match ssh::key_from_cmdline(&cmdline).filter(|k| !k.is_empty()) {
        Some(key) => match ssh::authorize(Path::new("/"), &key) {
            Ok(()) if Path::new(ssh::DROPBEAR).exists() => true,
            Ok(()) => {
                say("sshkey given, but this ramdisk has no SSH server");
                false
            }
            Err(e) => {
                say(&format!("sshkey ignored: {e:#}"));
                false
            }
        },
        None => false,
    };
    let logins = match rootpwd_from_cmdline(&cmdline) {
        Some(hash) => {
            match agent_devices::rescue::account::set_root_password(Path::new("/"), &hash) {
                Ok(()) => true,
                Err(e) => {
                    say(&format!("{e:#}; no console login"));
                    false
                }
            }
        }
        None => false,
    };
    if access.debug_logging {
        say(if access.shell {
            "ipa-debug: the agent logs at debug level"
        } else {
            "ipa-debug: the agent logs at debug level (a console shell needs agent.shell=1)"
        });
    }
    let services = supervise::Services {
        agent_args,
        shell: access.shell,
        ssh,
        logins,
        // Only a rootpwd= password can be kept.
        rootpwd_after_rescue: access.rootpwd_after_rescue && logins,
    };
    supervise::run(&services)
}

/// The `rootpwd=` value of a kernel command line (a crypt hash, quoted or
/// not), as IPA ramdisks built with DIB's dynamic-login element take it.
pub fn rootpwd_from_cmdline(cmdline: &str) -> Option<String> {
    cmdline.split_whitespace().find_map(|w| {
        let v = w.strip_prefix("rootpwd=")?;
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// A duration parameter in seconds (fractions allowed), else `default`.
fn secs(params: &KernelParams, key: &str, default: f64) -> Duration {
    params
        .get(key)
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .unwrap_or(Duration::from_secs_f64(default))
}

#[cfg(test)]
mod tests {

    //! When the binary is PID 1's code.

    use std::ffi::OsStr;

    use super::is_init_for;

    #[test]
    fn durations_in_seconds_never_panic() {
        use super::{secs, KernelParams};
        let p = KernelParams::parse("a=1.5 b=-1 c=1e300 d=NaN e=x");
        assert_eq!(secs(&p, "a", 9.0).as_millis(), 1500);
        for k in ["b", "c", "d", "e", "missing"] {
            assert_eq!(secs(&p, k, 9.0).as_secs(), 9, "{k}");
        }
    }

    #[test]
    fn only_the_ramdisks_init_with_its_marker_is_init() {
        assert!(is_init_for(Some(OsStr::new("/init")), true));
        assert!(!is_init_for(Some(OsStr::new("/init")), false), "no marker");
        assert!(
            !is_init_for(Some(OsStr::new("agent")), true),
            "agent serve as PID 1"
        );
        assert!(!is_init_for(Some(OsStr::new("/usr/bin/agent")), true));
        assert!(!is_init_for(None, true));
    }

    #[test]
    fn rootpwd_quoted_or_not() {
        use super::rootpwd_from_cmdline as r;
        assert_eq!(
            r("console=ttyS0 rootpwd=\"$6$s$abc\" quiet").as_deref(),
            Some("$6$s$abc")
        );
        assert_eq!(r("rootpwd=$6$s$abc").as_deref(), Some("$6$s$abc"));
        assert_eq!(r("xrootpwd=$6$s$abc rootpwd="), None);
    }
}
