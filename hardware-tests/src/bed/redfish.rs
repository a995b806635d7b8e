//! A real Redfish BMC for the bed's machines: sushy-tools' emulator
//! (`sushy-emulator`, PyPI 2.2.0, installed by `ci/redfish/install.sh`) with
//! its libvirt driver, in front of a private libvirt daemon that runs the
//! machines as libvirt domains (TCG, q35, OVMF with their own NVRAM, NICs on
//! taps in the bed's bridge, a CD-ROM drive for virtual media; aarch64
//! machines as Arm servers; the domains' XML is [`super::domain`]'s and
//! [`super::arm_domain`]'s).
//!
//! libvirtd (Debian's `libvirt-daemon` + `libvirt-daemon-driver-qemu`, no
//! system service) runs inside the bed's network namespace and in a mount
//! namespace of its own, where the state directory's `etc/`, `run/` and
//! `var/` are bind-mounted over `/etc/libvirt`, `/run` and `/var`, and
//! private copies of `/etc/passwd` and `/etc/group` name the `libvirt-qemu`
//! user its QEMU driver looks up (as root). So it reads only the
//! configuration written here (QEMU as root, no cgroups, no namespaces, no
//! security driver), defines no network (no default NAT network: there is
//! no network XML in its private `/etc/libvirt`), writes nothing outside
//! the state directory, and its socket is
//! `<state>/run/libvirt/libvirt-sock`, reached by sushy-tools and virsh as
//! `qemu:///system?socket=…`. sushy-emulator listens on the bridge address
//! (port 8000, HTTP basic auth) and only exposes the domains defined here
//! (`SUSHY_EMULATOR_ALLOWED_INSTANCES`). Virtual media images are fetched
//! by sushy-tools and uploaded into the storage pool `default`, a directory
//! in the state directory.
//!
//! Everything is removed on drop, also when a test fails: domains destroyed
//! and undefined (their NVRAM kept, like [`super::Vm`]'s), sushy-emulator
//! and libvirtd killed by PID, then any QEMU left by the PID in its pid
//! file (the domains' and libvirtd's capability probes'), the taps deleted
//! and the state directory removed. The logs (libvirtd, sushy-emulator,
//! each domain's QEMU log and serial console) stay in the bed's log
//! directory. Every `virsh` call is bounded in time, and libvirtd is
//! started a second time if it does not answer at first.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::net::{Net, Proc, BRIDGE_IP};
use super::vm::{VmSpec, OVMF_CODE, OVMF_VARS};
use crate::{repo_root, run};

/// The port sushy-emulator listens on (at [`BRIDGE_IP`]).
pub const PORT: u16 = 8000;
/// The BMC's user name (HTTP basic auth).
pub const USER: &str = "admin";
/// The BMC's password.
pub const PASSWORD: &str = "bed-redfish";

/// An EFI system partition image in `dir` for Ironic's `[DEFAULT] esp_image`: grub
/// (grub-mkimage, modules built in) that finds the ISO's
/// `/EFI/BOOT/grub.cfg`, which Ironic writes, and reads it.
pub fn esp_image(dir: &Path) -> Result<PathBuf> {
    let cfg = dir.join("embedded.cfg");
    std::fs::write(
        &cfg,
        "search --no-floppy --set=root --file /EFI/BOOT/grub.cfg\n\
         set prefix=($root)/EFI/BOOT\n\
         configfile ($root)/EFI/BOOT/grub.cfg\n",
    )?;
    let efi = dir.join("BOOTX64.EFI");
    run(Command::new("grub-mkimage")
        .args(["-O", "x86_64-efi", "-p", "/EFI/BOOT", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&efi)
        .args([
            "iso9660",
            "fat",
            "part_gpt",
            "part_msdos",
            "search",
            "search_fs_file",
            "configfile",
            "normal",
            "linux",
            "echo",
            "test",
        ]))?;
    let esp = dir.join("esp.img");
    run(Command::new("mkfs.vfat")
        .args(["-C", "-n", "ESP"])
        .arg(&esp)
        .arg("8192"))?;
    run(Command::new("mmd")
        .arg("-i")
        .arg(&esp)
        .args(["::/EFI", "::/EFI/BOOT"]))?;
    run(Command::new("mcopy")
        .arg("-i")
        .arg(&esp)
        .arg(&efi)
        .arg("::/EFI/BOOT/BOOTX64.EFI"))?;
    Ok(esp)
}

/// A machine the BMC manages.
#[derive(Debug, Clone)]
pub struct System {
    /// The libvirt domain's name (the spec's name).
    pub name: String,
    /// Its UUID: the Redfish system id (`redfish_system_id` is
    /// `/redfish/v1/Systems/<uuid>`).
    pub uuid: String,
    /// Its serial console (a file in the bed's log directory).
    pub console: PathBuf,
}

impl System {
    /// `/redfish/v1/Systems/<uuid>`.
    pub fn path(&self) -> String {
        format!("/redfish/v1/Systems/{}", self.uuid)
    }
}

/// Where sushy-emulator listens (see [`Bmc::start_emulator_at`]).
#[derive(Debug, Clone)]
pub struct Listen {
    /// The network namespace it runs in.
    pub netns: String,
    /// The address it binds.
    pub ip: String,
    /// The port.
    pub port: u16,
    /// HTTPS with this PEM certificate and key.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Offer no virtual media device (a BMC without the licence for it).
    pub no_virtual_media: bool,
}

/// The private libvirtd, sushy-emulator and the domains defined in it.
#[derive(Debug)]
pub struct Bmc<'n> {
    net: &'n Net,
    state: tempfile::TempDir,
    venv: PathBuf,
    systems: Vec<System>,
    taps: Vec<String>,
    sushy: Option<Proc>,
    libvirtd: Option<Proc>,
    /// The bed address sushy-emulator listens on ([`Bmc::url`]).
    ip: String,
}

/// `$REDFISH_VENV`, else `target/redfish-venv` (made by `ci/redfish/install.sh`).
pub fn venv() -> PathBuf {
    std::env::var_os("REDFISH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/redfish-venv"))
}

impl<'n> Bmc<'n> {
    /// Runs `ci/redfish/install.sh` (a no-op when up to date) and starts
    /// libvirtd in the bed's namespace. sushy-emulator starts with
    /// [`Bmc::start_emulator`], once the machines are defined (it exposes
    /// only those).
    pub fn start(net: &'n Net) -> Result<Self> {
        let venv = venv();
        run(Command::new(repo_root().join("ci/redfish/install.sh")).arg(&venv))
            .context("ci/redfish/install.sh")?;
        let state = tempfile::Builder::new()
            .prefix("redfish-bed-")
            .tempdir()
            .context("the BMC's state directory")?;
        let mut bmc = Self {
            net,
            state,
            venv,
            systems: Vec::new(),
            taps: Vec::new(),
            sushy: None,
            libvirtd: None,
            ip: BRIDGE_IP.to_string(),
        };
        bmc.start_libvirtd()?;
        Ok(bmc)
    }

    /// The state directory (libvirt's private `/etc/libvirt`, `/run`, `/var`).
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// `qemu:///system?socket=<state>/run/libvirt/libvirt-sock`.
    pub fn libvirt_uri(&self) -> String {
        format!(
            "qemu:///system?socket={}",
            self.state.path().join("run/libvirt/libvirt-sock").display()
        )
    }

    /// `http://10.99.0.1:8000` (`http://[fd99::1]:8000` after
    /// [`Bmc::start_emulator_on`] that address): reachable from inside the
    /// bed's namespace.
    pub fn url(&self) -> String {
        format!("http://{}:{PORT}", crate::url_host(&self.ip))
    }

    /// The machines defined so far.
    pub fn systems(&self) -> &[System] {
        &self.systems
    }

    /// Starts libvirtd and waits until it answers, twice at most. Once in
    /// a full ci/test run libvirtd never answered: its QEMU
    /// capability probe (a `qemu-system-i386 -machine none` it starts)
    /// and libvirtd waited on each other for 20 minutes. The second start
    /// follows killing both.
    fn start_libvirtd(&mut self) -> Result<()> {
        self.prepare_libvirtd()?;
        let mut attempt = 1;
        loop {
            match self.spawn_libvirtd() {
                Ok(()) => break,
                Err(e) if attempt < 2 => {
                    eprintln!("warning: {e:#}; starting libvirtd again");
                    self.stop_libvirtd();
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        // sushy-tools uploads virtual media into the pool `default`.
        let pool = self.state.path().join("pool").display().to_string();
        self.virsh(&["pool-define-as", "default", "dir", "--target", &pool])?;
        self.virsh(&["pool-start", "default"])?;
        Ok(())
    }

    /// The private configuration, passwd, group and directories libvirtd
    /// runs with (bind-mounted over the machine's by [`Self::spawn_libvirtd`]).
    fn prepare_libvirtd(&mut self) -> Result<()> {
        let s = self.state.path();
        for d in [
            "etc",
            "run",
            "var/lib",
            "var/log",
            "var/cache",
            "var/tmp",
            "pool",
        ] {
            std::fs::create_dir_all(s.join(d))?;
        }
        // /var/run is /run on Debian; keep that inside the private /var.
        std::os::unix::fs::symlink("/run", s.join("var/run"))?;
        std::fs::write(
            s.join("etc/libvirtd.conf"),
            "# Written by hardware-tests/src/bed/redfish.rs: unix socket only, root only.\n\
             listen_tls = 0\nlisten_tcp = 0\n\
             unix_sock_rw_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n\
             log_outputs = \"3:stderr\"\n",
        )?;
        // QEMU as root without libvirt's confinement: no cgroups (the
        // machine's cgroup tree is not libvirt's to manage), no private
        // /dev, no security driver, no virtlogd or lock daemon to start.
        std::fs::write(
            s.join("etc/qemu.conf"),
            "# Written by hardware-tests/src/bed/redfish.rs.\n\
             user = \"root\"\ngroup = \"root\"\n\
             dynamic_ownership = 0\nremember_owner = 0\n\
             security_driver = \"none\"\nnamespaces = []\ncgroup_controllers = []\n\
             stdio_handler = \"file\"\nlock_manager = \"nop\"\n",
        )?;
        // Debian's QEMU driver looks up its default user libvirt-qemu before
        // reading qemu.conf; libvirt-daemon-system would add it to the
        // machine's /etc/passwd. A private copy names it (as uid 0) instead.
        let mut passwd = std::fs::read_to_string("/etc/passwd")?;
        let mut group = std::fs::read_to_string("/etc/group")?;
        if !passwd.lines().any(|l| l.starts_with("libvirt-qemu:")) {
            passwd.push_str("libvirt-qemu:x:0:0:bed libvirtd:/nonexistent:/usr/sbin/nologin\n");
        }
        for g in ["libvirt-qemu", "kvm"] {
            if !group.lines().any(|l| l.starts_with(&format!("{g}:"))) {
                let _ = writeln!(group, "{g}:x:0:");
            }
        }
        std::fs::write(s.join("passwd"), passwd)?;
        std::fs::write(s.join("group"), group)?;
        Ok(())
    }

    /// Starts libvirtd in the bed's namespace and waits (90 s at most)
    /// until it answers `virsh version`.
    fn spawn_libvirtd(&mut self) -> Result<()> {
        let s = self.state.path();
        let q = |p: &str| shell_quote(&s.join(p));
        let script = format!(
            "set -e\n\
             mount --bind {etc} /etc/libvirt\n\
             mount --bind {passwd} /etc/passwd\n\
             mount --bind {group} /etc/group\n\
             mount --bind {run} /run\n\
             mount --bind {var} /var\n\
             exec libvirtd -f /etc/libvirt/libvirtd.conf\n",
            etc = q("etc"),
            passwd = q("passwd"),
            group = q("group"),
            run = q("run"),
            var = q("var"),
        );
        let log = self.net.logs.join("libvirtd.log");
        let out = std::fs::File::create(&log)?;
        // ip netns exec, unshare (no --fork) and sh's exec all exec: the
        // PID is libvirtd's. `ip netns exec` already gives a mount namespace
        // of its own; unshare makes it private, so no mount made here ever
        // propagates to the machine's.
        let child = Command::new("ip")
            .args(["netns", "exec", &self.net.ns.name])
            .args(["unshare", "--mount", "--propagation", "private"])
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting libvirtd (ci/redfish/install.sh installs libvirt-daemon)")?;
        self.libvirtd = Some(Proc::new(child, "libvirtd"));

        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(p) = self.libvirtd.as_mut() {
                if let Some(status) = p.child().try_wait()? {
                    bail!(
                        "libvirtd exited ({status}) while starting; its log: {}",
                        log.display()
                    );
                }
            }
            if s.join("run/libvirt/libvirt-sock").exists()
                && self
                    .virsh_within(Duration::from_secs(15), &["version"])
                    .is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "libvirtd did not answer within 90 s; its log: {}",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills libvirtd by PID, then what it leaves: each QEMU by the PID in
    /// its pid file, the domains' (`run/libvirt/qemu/*.pid`) and the
    /// capability probes' (`var/lib/libvirt/qemu/qmp-*/qmp.pid`), which
    /// daemonize out of libvirtd's process tree.
    fn stop_libvirtd(&mut self) {
        self.libvirtd = None;
        let s = self.state.path();
        let mut pidfiles = Vec::new();
        let files = |dir: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default()
        };
        for p in files(&s.join("run/libvirt/qemu")) {
            if p.extension().is_some_and(|x| x == "pid") {
                pidfiles.push(p);
            }
        }
        for d in files(&s.join("var/lib/libvirt/qemu")) {
            if d.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("qmp-"))
            {
                pidfiles.push(d.join("qmp.pid"));
            }
        }
        for p in pidfiles {
            if let Some(pid) = std::fs::read_to_string(&p)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                // Still that QEMU, not a process that got its PID since.
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"));
                if !comm.is_ok_and(|c| c.starts_with("qemu")) {
                    continue;
                }
                let pid = nix::unistd::Pid::from_raw(pid);
                if nix::sys::signal::kill(pid, None).is_ok() {
                    eprintln!(
                        "warning: killing QEMU {pid} left by libvirtd ({})",
                        p.display()
                    );
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
                }
            }
        }
    }

    /// Runs `virsh -c <uri> <args>` and returns its output.
    /// Bounded (120 s): a libvirtd that stopped answering fails the call,
    /// it does not hang the test.
    pub fn virsh(&self, args: &[&str]) -> Result<String> {
        self.virsh_within(Duration::from_secs(120), args)
    }

    /// `virsh` bounded by `limit` (coreutils' `timeout`, then SIGKILL 5 s
    /// later).
    fn virsh_within(&self, limit: Duration, args: &[&str]) -> Result<String> {
        run(Command::new("timeout")
            .arg("--kill-after=5")
            .arg(limit.as_secs().to_string())
            .arg("virsh")
            .arg("-q")
            .arg("-c")
            .arg(self.libvirt_uri())
            .args(args))
        .with_context(|| format!("virsh {} (bounded by {limit:?})", args.join(" ")))
    }

    /// The domain's XML as libvirt has it (`--inactive`: the persistent
    /// definition, which sushy-tools edits).
    pub fn domain_xml(&self, name: &str, inactive: bool) -> Result<String> {
        let mut args = vec!["dumpxml"];
        if inactive {
            args.push("--inactive");
        }
        args.push(name);
        self.virsh(&args)
    }

    /// Whether the domain runs (`virsh domstate`).
    pub fn domain_state(&self, name: &str) -> Result<String> {
        self.virsh(&["domstate", name])
    }

    /// What the domain boots first in its persistent definition, where
    /// sushy-tools puts the Redfish boot device: `network`, `disk` or
    /// `cdrom` (the device holding `<boot order='1'/>`); `None` when no
    /// device has it.
    pub fn first_boot_device(&self, name: &str) -> Result<Option<String>> {
        Ok(first_boot_device(&self.domain_xml(name, true)?))
    }

    /// Defines `spec` as a libvirt domain, powered off: the machine
    /// [`super::Vm::start`] would run (TCG, `qemu64` with rdrand, q35,
    /// SeaBIOS or OVMF with the spec's NVRAM file, its disks and NICs, the
    /// console appended to `<logs>/<name>.console.log`) plus an empty SATA CD-ROM
    /// drive for virtual media; an aarch64 spec is an Arm server instead
    /// (see [`super::arm_domain`]). `Boot::Network` puts the first NIC first
    /// in the boot order, `Boot::Disk` the first disk; later the BMC
    /// decides (Redfish `BootSourceOverrideTarget`). NVMe disks, disk
    /// models on SATA, a direct kernel boot and the IPMI simulator are not
    /// offered here.
    pub fn define(&mut self, spec: &VmSpec) -> Result<System> {
        let console = self.net.logs.join(format!("{}.console.log", spec.name));
        let _ = std::fs::remove_file(&console);
        let mut taps = Vec::new();
        for _ in &spec.nics {
            let tap = self.net.add_tap()?;
            self.taps.push(tap.clone());
            taps.push(tap);
        }
        let xml = match spec.arch {
            image_builder::arch::Arch::X86_64 => super::domain::domain_xml(spec, &taps, &console)?,
            image_builder::arch::Arch::Aarch64 => {
                super::arm_domain::domain_xml(spec, &taps, &console)?
            }
        };
        let file = self.state.path().join(format!("{}.xml", spec.name));
        std::fs::write(&file, &xml)?;
        self.virsh(&["define", &file.display().to_string()])
            .with_context(|| format!("defining {}", spec.name))?;
        let uuid = self.virsh(&["domuuid", &spec.name])?;
        let system = System {
            name: spec.name.clone(),
            uuid,
            console,
        };
        self.systems.push(system.clone());
        Ok(system)
    }

    /// Starts sushy-emulator on [`BRIDGE_IP`]:[`PORT`] in the bed's
    /// namespace, exposing the domains defined so far, and waits until it
    /// answers.
    pub fn start_emulator(&mut self) -> Result<()> {
        self.start_emulator_on(BRIDGE_IP)
    }

    /// [`Bmc::start_emulator`] on the bed's address `ip` (an IPv6-only
    /// bed's [`super::BRIDGE_IP6`]); [`Bmc::url`] then names it.
    pub fn start_emulator_on(&mut self, ip: &str) -> Result<()> {
        self.ip = ip.to_string();
        let listen = Listen {
            netns: self.net.ns.name.clone(),
            ip: ip.to_string(),
            port: PORT,
            tls: None,
            no_virtual_media: false,
        };
        self.start_emulator_at(&listen)
    }

    /// Stops sushy-emulator (by PID), so it can start again otherwise.
    pub fn stop_emulator(&mut self) {
        self.sushy = None;
    }

    /// [`Bmc::start_emulator`] listening as `listen` says: in another
    /// namespace (which the bed's namespace must route to), over HTTPS.
    /// libvirtd stays in the bed's namespace (sushy-tools reaches it by
    /// its socket).
    pub fn start_emulator_at(&mut self, listen: &Listen) -> Result<()> {
        anyhow::ensure!(self.sushy.is_none(), "sushy-emulator already runs");
        let s = self.state.path();
        std::fs::create_dir_all(s.join("sushy/tmp"))?;
        // An Apache-style user file with a bcrypt digest, the only kind
        // sushy-tools accepts.
        let htpasswd = run(Command::new(self.venv.join("bin/python")).args([
            "-c",
            "import bcrypt, sys; print(sys.argv[1] + ':' + bcrypt.hashpw(sys.argv[2].encode(), bcrypt.gensalt(4)).decode())",
            USER,
            PASSWORD,
        ]))?;
        std::fs::write(s.join("sushy/htpasswd"), format!("{htpasswd}\n"))?;
        let uuids: Vec<String> = self
            .systems
            .iter()
            .map(|m| format!("'{}'", m.uuid))
            .collect();
        let conf = format!(
            "# Written by hardware-tests/src/bed/redfish.rs.\n\
             SUSHY_EMULATOR_LISTEN_IP = '{ip}'\n\
             SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
             {tls}\
             SUSHY_EMULATOR_LIBVIRT_URI = '{uri}'\n\
             SUSHY_EMULATOR_AUTH_FILE = '{auth}'\n\
             SUSHY_EMULATOR_STATE_DIR = '{state}'\n\
             SUSHY_EMULATOR_STORAGE_POOL = 'default'\n\
             SUSHY_EMULATOR_ALLOWED_INSTANCES = [{uuids}]\n\
             SUSHY_EMULATOR_BOOT_LOADER_MAP = {{'UEFI': {{'x86_64': '{OVMF_CODE}'}}, 'Legacy': {{'x86_64': None}}}}\n\
             SUSHY_EMULATOR_SECURE_BOOT_DISABLED_NVRAM = '{OVMF_VARS}'\n\
             SUSHY_EMULATOR_VMEDIA_DEVICES = {vmedia}\n",
            vmedia = if listen.no_virtual_media {
                "{}"
            } else {
                "{'Cd': {'Name': 'Virtual CD', 'MediaTypes': ['CD', 'DVD']}}"
            },
            ip = listen.ip,
            port = listen.port,
            tls = match &listen.tls {
                Some((cert, key)) => format!(
                    "SUSHY_EMULATOR_SSL_CERT = '{}'\nSUSHY_EMULATOR_SSL_KEY = '{}'\n",
                    cert.display(),
                    key.display()
                ),
                None => String::new(),
            },
            uri = self.libvirt_uri(),
            auth = s.join("sushy/htpasswd").display(),
            state = s.join("sushy").display(),
            uuids = uuids.join(", "),
        );
        let conf_path = s.join("sushy/emulator.conf");
        std::fs::write(&conf_path, conf)?;
        let log = self.net.logs.join("sushy-emulator.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new("ip")
            .args(["netns", "exec", &listen.netns])
            .arg(self.venv.join("bin/sushy-emulator"))
            .env("SUSHY_EMULATOR_CONFIG", &conf_path)
            // Virtual media is downloaded to a temporary file first.
            .env("TMPDIR", s.join("sushy/tmp"))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting sushy-emulator")?;
        self.sushy = Some(Proc::new(child, "sushy-emulator"));
        let addr = crate::socket_addr(&listen.ip, listen.port)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(p) = self.sushy.as_mut() {
                if let Some(status) = p.child().try_wait()? {
                    bail!(
                        "sushy-emulator exited ({status}) while starting; its log: {}",
                        log.display()
                    );
                }
            }
            let up = self.net.ns.enter(|| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
            })?;
            if up {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "sushy-emulator did not listen within 60 s; its log: {}",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Freezes the BMC (SIGSTOP to sushy-emulator by its PID): it still
    /// accepts connections and answers nothing, as a hung BMC, so a
    /// conductor's Redfish call waits inside whatever step made it.
    /// [`Bmc::thaw`] resumes it (a frozen emulator is still killed on drop).
    pub fn freeze(&self) -> Result<()> {
        self.signal_emulator(nix::sys::signal::Signal::SIGSTOP)
    }

    /// Resumes a BMC [`Bmc::freeze`] froze.
    pub fn thaw(&self) -> Result<()> {
        self.signal_emulator(nix::sys::signal::Signal::SIGCONT)
    }

    fn signal_emulator(&self, signal: nix::sys::signal::Signal) -> Result<()> {
        let pid = self
            .sushy
            .as_ref()
            .context("sushy-emulator is not running")?
            .pid();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .with_context(|| format!("{signal} to sushy-emulator (pid {pid})"))
    }

    /// A Redfish client of this BMC (use it inside [`Net::block_on`]).
    pub fn client(&self) -> Result<Client> {
        Ok(Client {
            base: self.url(),
            http: agent_base::tls::http_client(false, None, Duration::from_secs(60))?,
        })
    }

    fn teardown(&mut self) {
        for sys in std::mem::take(&mut self.systems) {
            // Not running is fine; a failure here is repaired below by PID.
            let _ = self.virsh(&["destroy", &sys.name]);
            if let Err(e) = self.virsh(&["undefine", "--keep-nvram", &sys.name]) {
                eprintln!("warning: undefining {}: {e:#}", sys.name);
            }
            let qemu_log = self
                .state
                .path()
                .join(format!("var/log/libvirt/qemu/{}.log", sys.name));
            let _ = std::fs::copy(
                &qemu_log,
                self.net.logs.join(format!("{}.qemu.log", sys.name)),
            );
        }
        self.sushy = None;
        self.stop_libvirtd();
        for tap in self.taps.drain(..) {
            self.net.del_tap(&tap);
        }
    }
}

impl Drop for Bmc<'_> {
    fn drop(&mut self) {
        self.teardown();
        // The TempDir field removes the state directory after this.
    }
}

/// A minimal Redfish client with the BMC's credentials.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .basic_auth(USER, Some(PASSWORD));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("{method} {path}: HTTP {status}: {text}");
        }
        Ok(if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).with_context(|| format!("{method} {path}: not JSON"))?
        })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// `PATCH path` with a JSON body.
    pub async fn patch(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    /// `GET` without credentials: the status code only.
    pub async fn status_without_auth(&self, path: &str) -> Result<u16> {
        let resp = self.http.get(format!("{}{path}", self.base)).send().await?;
        Ok(resp.status().as_u16())
    }
}

/// The kind of device whose element holds `<boot order='1'/>` in a domain
/// XML: `network` for an `<interface>`, else the `<disk>`'s `device`.
fn first_boot_device(xml: &str) -> Option<String> {
    let at = xml.find("<boot order='1'/>")?;
    let before = &xml[..at];
    let disk = before.rfind("<disk ");
    let nic = before.rfind("<interface ");
    match (disk, nic) {
        (Some(d), n) if n.is_none_or(|n| d > n) => {
            let tag = &before[d..d + before[d..].find('>')?];
            tag.split("device='")
                .nth(1)
                .and_then(|v| v.split('\'').next())
                .map(str::to_string)
        }
        (_, Some(_)) => Some("network".to_string()),
        _ => None,
    }
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::first_boot_device;

    #[test]
    fn the_first_boot_device_is_read_from_the_domain_xml() {
        let nic_first = "<domain><devices>\
            <disk type='file' device='disk'><source file='/d'/><target dev='vda' bus='virtio'/></disk>\
            <disk type='file' device='cdrom'><target dev='sdx' bus='sata'/></disk>\
            <interface type='ethernet'><mac address='52:54:00:00:00:01'/><boot order='1'/></interface>\
            </devices></domain>";
        assert_eq!(first_boot_device(nic_first).as_deref(), Some("network"));
        let disk_first = "<domain><devices>\
            <disk type='file' device='disk'><source file='/d'/><boot order='1'/></disk>\
            <interface type='ethernet'><mac address='52:54:00:00:00:01'/><boot order='2'/></interface>\
            </devices></domain>";
        assert_eq!(first_boot_device(disk_first).as_deref(), Some("disk"));
        let cd_first = "<disk type='file' device='cdrom'><boot order='1'/></disk>";
        assert_eq!(first_boot_device(cd_first).as_deref(), Some("cdrom"));
        assert_eq!(
            first_boot_device("<domain><os><boot dev='hd'/></os></domain>"),
            None
        );
    }
}
