//! The bed's network: a namespace with a bridge and dnsmasq serving DHCPv4,
//! DHCPv6 with SLAAC router advertisements, and PXE (iPXE clients get the
//! bed's `boot.ipxe` over TFTP with the ramdisk, or the URL of Ironic's
//! `boot.ipxe` on its HTTP server; UEFI clients without iPXE get iPXE's
//! `snponly.efi` first; or Ironic's own TFTP root and loader for its `pxe`
//! boot interface), plus running test code and programs inside it.
//! An IPv6-only bed ([`NetOptions::ipv6_only`]) has no IPv4 address, no
//! dnsmasq, and drops (and counts) every IPv4 and ARP frame on its bridge.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

use super::ipv4_drop::{drop_ipv4, dropped_frames};
use crate::netns::NetNs;

/// The bridge's address inside the namespace: where the conductor, image
/// servers and dnsmasq listen, and the guests' default route.
pub const BRIDGE_IP: &str = "10.99.0.1";

/// The bridge's IPv6 address (`/64`): on every bed, and the only address
/// of an IPv6-only one.
pub const BRIDGE_IP6: &str = "fd99::1";

/// A process started by the bed; killed by its PID on drop.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    what: String,
}

impl Proc {
    /// Wraps a child process (`what` names it in messages).
    pub fn new(child: Child, what: &str) -> Self {
        Self {
            child,
            what: what.to_string(),
        }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child, e.g. to write to its stdin or check whether it exited.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Err(e) = self.child.kill() {
                eprintln!(
                    "warning: killing {} (pid {}): {e}",
                    self.what,
                    self.child.id()
                );
            }
        }
        let _ = self.child.wait();
    }
}

/// What the network offers.
#[derive(Debug, Clone)]
pub struct NetOptions {
    /// Short name: the namespace's prefix and the log directory.
    pub name: String,
    /// Fixed leases: (MAC, IPv4 address in 10.99.0.0/24).
    pub hosts: Vec<(String, String)>,
    /// Directory with `deploy.kernel` and `deploy.initramfs` to PXE-boot
    /// (see [`super::ramdisk_dir`]); `None`: no PXE.
    pub ramdisk: Option<PathBuf>,
    /// Kernel arguments for the PXE-booted ramdisk (see [`Net::set_kernel_args`]).
    pub kernel_args: String,
    /// Offer DHCP(v6) and router advertisements; `false`: a network where
    /// only static addresses work (Metal3's DHCP-less setups).
    pub dhcp: bool,
    /// Where iPXE clients are sent instead of the bed's own `boot.ipxe`:
    /// the URL of Ironic's `boot.ipxe` in its `http_root`, as Metal3's
    /// dnsmasq does (`dhcp-boot=tag:ipxe,http://…/boot.ipxe`). Overrides
    /// `ramdisk` for iPXE clients; UEFI clients without iPXE still get
    /// `snponly.efi` over TFTP.
    pub ipxe_script_url: Option<String>,
    /// UEFI PXE clients get Debian's signed boot chain from the ramdisk
    /// directory instead of iPXE: `shimx64.efi`, which loads `grubx64.efi`,
    /// which reads `grub/grub.cfg` (written here with `kernel_args`) and
    /// boots the ramdisk over TFTP — the path that works under Secure Boot
    /// (`shimaa64.efi`, `grubaa64.efi` and the signed
    /// `deploy.kernel.signed` from an aarch64 ramdisk).
    pub secure_boot_chain: bool,
    /// `false`: an IPv6-only network (see [`NetOptions::ipv6_only`]).
    pub ipv4: bool,
    /// Ironic's own TFTP root (its `pxe` boot interface): dnsmasq serves
    /// that directory and hands UEFI PXE clients its loader; nothing of
    /// the bed's own is put there. Excludes `ramdisk`, `ipxe_script_url`
    /// and `secure_boot_chain`.
    pub ironic_tftp: Option<IronicTftp>,
}

/// Ironic's TFTP root as the bed's dnsmasq serves it (see
/// [`NetOptions::ironic_tftp`]).
#[derive(Debug, Clone)]
pub struct IronicTftp {
    /// Ironic's `[pxe] tftp_root`, the same string (Ironic's master GRUB
    /// config sources absolute paths under it, which dnsmasq serves only
    /// when they start with its own `--tftp-root`).
    pub root: PathBuf,
    /// The loader UEFI clients (client-arch 7 and 11) get, a file name in
    /// `root` (one of Ironic's `[pxe] loader_file_paths`).
    pub uefi_bootfile: String,
}

impl NetOptions {
    /// A network named `name` that PXE-boots the ramdisk in `ramdisk`.
    pub fn pxe(name: &str, ramdisk: &Path, kernel_args: &str) -> Self {
        Self {
            name: name.to_string(),
            hosts: Vec::new(),
            ramdisk: Some(ramdisk.to_path_buf()),
            kernel_args: kernel_args.to_string(),
            dhcp: true,
            ipxe_script_url: None,
            secure_boot_chain: false,
            ipv4: true,
            ironic_tftp: None,
        }
    }

    /// A network named `name` with no DHCP server (static addresses, as
    /// virtual media's `network_data` gives them) and nothing to PXE-boot.
    pub fn no_dhcp(name: &str) -> Self {
        Self {
            name: name.to_string(),
            hosts: Vec::new(),
            ramdisk: None,
            kernel_args: String::new(),
            dhcp: false,
            ipxe_script_url: None,
            secure_boot_chain: false,
            ipv4: true,
            ironic_tftp: None,
        }
    }

    /// A network named `name` that carries no IPv4 at all: the bridge has
    /// only [`BRIDGE_IP6`] (no DAD, so it is usable at once), no dnsmasq
    /// runs (no DHCP, no router advertisements: static addresses only),
    /// and ebtables drops every IPv4 and ARP frame that enters, crosses or
    /// leaves the bridge, counting them ([`Net::ipv4_frames_dropped`]).
    pub fn ipv6_only(name: &str) -> Self {
        Self {
            ipv4: false,
            ..Self::no_dhcp(name)
        }
    }

    /// A network named `name` whose iPXE clients boot what Ironic's
    /// `boot.ipxe` at `script_url` says (Ironic's `ipxe` boot interface).
    pub fn ironic_ipxe(name: &str, script_url: &str) -> Self {
        Self {
            name: name.to_string(),
            hosts: Vec::new(),
            ramdisk: None,
            kernel_args: String::new(),
            dhcp: true,
            ipxe_script_url: Some(script_url.to_string()),
            secure_boot_chain: false,
            ipv4: true,
            ironic_tftp: None,
        }
    }
}

/// The namespace, its bridge `br0` and dnsmasq; torn down on drop.
#[derive(Debug)]
pub struct Net {
    /// The namespace (shared with helpers that enter it).
    pub ns: Arc<NetNs>,
    /// Where consoles and logs go (`target/bed-logs/<name>`).
    pub logs: PathBuf,
    tftp: tempfile::TempDir,
    taps: AtomicUsize,
    // Dropped before `ns`: fields drop in declaration order.
    _dnsmasq: Option<Proc>,
}

impl Net {
    /// Creates the namespace, bridge and dnsmasq.
    pub fn start(opts: NetOptions) -> Result<Self> {
        let logs = super::logs_dir(&opts.name)?;
        let ns = Arc::new(NetNs::new(&opts.name)?);
        // group_fwd_mask 0x4000: the bridge forwards LLDP (01:80:c2:00:00:0e)
        // between its ports, so a guest hears the bed's switch.
        ns.ip(&[
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "forward_delay",
            "0",
            "group_fwd_mask",
            "0x4000",
        ])?;
        if opts.ipv4 {
            ns.ip(&["addr", "add", &format!("{BRIDGE_IP}/24"), "dev", "br0"])?;
        } else {
            drop_ipv4(&ns)?;
        }
        ns.ip(&[
            "addr",
            "add",
            &format!("{BRIDGE_IP6}/64"),
            "dev",
            "br0",
            "nodad",
        ])?;
        ns.ip(&["link", "set", "br0", "up"])?;

        let tftp = tempfile::tempdir().context("TFTP directory")?;
        if let Some(dir) = &opts.ramdisk {
            for f in ["deploy.kernel", "deploy.initramfs"] {
                std::fs::copy(dir.join(f), tftp.path().join(f))
                    .with_context(|| format!("copying {f} from {}", dir.display()))?;
            }
        }
        let pxe =
            opts.ramdisk.is_some() || opts.ipxe_script_url.is_some() || opts.ironic_tftp.is_some();
        anyhow::ensure!(
            opts.ironic_tftp.is_none()
                || (opts.ramdisk.is_none()
                    && opts.ipxe_script_url.is_none()
                    && !opts.secure_boot_chain),
            "Ironic's TFTP root excludes the bed's own ramdisk, boot chain and iPXE script"
        );
        let uefi_bootfile = match (&opts.ramdisk, opts.secure_boot_chain) {
            _ if opts.ironic_tftp.is_some() => "",
            (Some(dir), true) => {
                // The ramdisk's architecture: an aarch64 build has the
                // arm64 chain (shimaa64.efi) and no x86 one.
                let arch = if !dir.join("shimx64.efi").exists() && dir.join("shimaa64.efi").exists()
                {
                    image_builder::arch::Arch::Aarch64
                } else {
                    image_builder::arch::Arch::X86_64
                };
                let x = arch.efi_suffix();
                for f in [format!("shim{x}.efi"), format!("grub{x}.efi")] {
                    std::fs::copy(dir.join(&f), tftp.path().join(&f)).with_context(|| {
                        format!(
                            "copying {f} from {} (image-builder writes it)",
                            dir.display()
                        )
                    })?;
                }
                if arch == image_builder::arch::Arch::Aarch64 {
                    // shim verifies the kernel: the signed arm64 Image, not
                    // the gzipped deploy.kernel (image-builder writes both).
                    std::fs::copy(
                        dir.join("deploy.kernel.signed"),
                        tftp.path().join("deploy.kernel"),
                    )
                    .with_context(|| {
                        format!(
                            "copying deploy.kernel.signed from {} (image-builder --arch aarch64 writes it)",
                            dir.display()
                        )
                    })?;
                }
                std::fs::create_dir_all(tftp.path().join("grub"))?;
                std::fs::write(
                    tftp.path().join("grub/grub.cfg"),
                    image_builder::bootchain::grub_cfg_for(arch, &opts.kernel_args),
                )?;
                match arch {
                    image_builder::arch::Arch::X86_64 => "shimx64.efi",
                    image_builder::arch::Arch::Aarch64 => "shimaa64.efi",
                }
            }
            (None, true) => anyhow::bail!("secure_boot_chain needs a ramdisk directory"),
            _ => {
                if pxe {
                    std::fs::copy(super::ipxe_efi()?, tftp.path().join("snponly.efi"))?;
                }
                "snponly.efi"
            }
        };
        let dnsmasq_log = logs.join("dnsmasq.log");
        if !opts.ipv4 {
            anyhow::ensure!(
                !pxe && !opts.dhcp && opts.hosts.is_empty(),
                "an IPv6-only bed has no dnsmasq: no DHCP, leases or PXE"
            );
            // No dnsmasq: an empty log says so to tests that read it.
            std::fs::write(&dnsmasq_log, "")?;
            return Ok(Self {
                ns,
                logs,
                tftp,
                taps: AtomicUsize::new(0),
                _dnsmasq: None,
            });
        }
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns.name, "dnsmasq", "--keep-in-foreground"])
            .args([
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--port=0",
            ])
            .args(["--interface=br0", "--bind-interfaces", "--log-dhcp"])
            // A test network: no ping before offering an address (3 s each).
            .arg("--no-ping")
            .arg(format!("--log-facility={}", dnsmasq_log.display()));
        if opts.dhcp {
            cmd.args(["--dhcp-range=10.99.0.100,10.99.0.199,255.255.255.0,1h"])
                .arg(format!("--dhcp-option=option:router,{BRIDGE_IP}"))
                // Router advertisements with both SLAAC and DHCPv6 (stateful).
                .args([
                    "--enable-ra",
                    "--dhcp-range=fd99::100,fd99::1ff,slaac,64,1h",
                ]);
        }
        cmd.arg(format!(
            "--dhcp-leasefile={}",
            tftp.path().join("leases").display()
        ))
        .arg("--pid-file=");
        for (mac, ip) in &opts.hosts {
            cmd.arg(format!("--dhcp-host={mac},{ip}"));
        }
        if pxe {
            // iPXE (BIOS option ROM, or snponly.efi chained from UEFI PXE)
            // announces itself with option 175 and gets the script: the
            // bed's over TFTP, or Ironic's URL.
            let script = opts.ipxe_script_url.as_deref().unwrap_or("boot.ipxe");
            cmd.args([
                "--dhcp-match=set:ipxe,175",
                "--dhcp-match=set:efi64,option:client-arch,7",
                // Arm 64-bit UEFI (AAVMF).
                "--dhcp-match=set:efi64,option:client-arch,11",
            ]);
            match &opts.ironic_tftp {
                // Ironic's root and loader: no iPXE script there.
                Some(t) => cmd
                    .arg(format!("--dhcp-boot=tag:efi64,{}", t.uefi_bootfile))
                    .arg(format!("--tftp-root={}", t.root.display())),
                None => cmd
                    .arg(format!("--dhcp-boot=tag:ipxe,{script}"))
                    .arg(format!("--dhcp-boot=tag:efi64,tag:!ipxe,{uefi_bootfile}"))
                    .arg(format!("--tftp-root={}", tftp.path().display())),
            };
            cmd.arg("--enable-tftp");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting dnsmasq (ci/install-deps installs dnsmasq-base)")?;
        let net = Self {
            ns,
            logs,
            tftp,
            taps: AtomicUsize::new(0),
            _dnsmasq: Some(Proc::new(child, "dnsmasq")),
        };
        net.set_kernel_args(&opts.kernel_args)?;
        Ok(net)
    }

    /// Sets the kernel arguments of the next PXE boots. `BOOTIF` is added
    /// by iPXE from the booting NIC's MAC, and `initrd=`, which Debian's
    /// iPXE needs under UEFI to hand the initramfs to the kernel's EFI stub.
    pub fn set_kernel_args(&self, args: &str) -> Result<()> {
        std::fs::write(
            self.tftp.path().join("boot.ipxe"),
            format!(
                "#!ipxe\nkernel deploy.kernel initrd=deploy.initramfs BOOTIF=01-${{net0/mac:hexhyp}} {args}\n\
                 initrd deploy.initramfs\nboot\n"
            ),
        )
        .context("writing boot.ipxe")
    }

    /// dnsmasq's log so far (DHCP and TFTP).
    pub fn dnsmasq_log(&self) -> String {
        std::fs::read_to_string(self.logs.join("dnsmasq.log")).unwrap_or_default()
    }

    /// IPv4 and ARP frames from the IPv6-only bed's machines (entering the
    /// bridge from a port) that its ebtables rules dropped so far
    /// ([`Net::ipv4_drop_rules`] has every rule's count).
    pub fn ipv4_frames_dropped(&self) -> Result<u64> {
        Ok(dropped_frames(&self.ipv4_drop_rules()?))
    }

    /// The IPv6-only bed's ebtables rules with their counters (`ebtables
    /// -L --Lc` in the namespace): which chain and protocol dropped what.
    pub fn ipv4_drop_rules(&self) -> Result<String> {
        crate::run(Command::new("ip").args([
            "netns",
            "exec",
            &self.ns.name,
            "ebtables-nft",
            "-L",
            "--Lc",
        ]))
    }

    /// A new tap device in the bridge, up.
    pub fn add_tap(&self) -> Result<String> {
        let name = format!("tap{}", self.taps.fetch_add(1, Ordering::Relaxed));
        self.ns
            .ip(&["tuntap", "add", "dev", &name, "mode", "tap"])?;
        self.ns.ip(&["link", "set", &name, "master", "br0", "up"])?;
        Ok(name)
    }

    /// Deletes a tap made by [`Net::add_tap`].
    pub fn del_tap(&self, name: &str) {
        if let Err(e) = self.ns.ip(&["link", "del", name]) {
            eprintln!("warning: deleting {name}: {e:#}");
        }
    }

    /// Starts `cmd` inside the namespace (`ip netns exec`, which execs, so
    /// the returned process's PID is the program's).
    pub fn spawn(&self, program: &str, args: &[&str], what: &str) -> Result<Proc> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns.name, program])
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {what} in {}", self.ns.name))?;
        Ok(Proc::new(child, what))
    }

    /// Runs async test code on a runtime whose threads all live in the
    /// namespace: every socket it opens (servers on [`BRIDGE_IP`], clients
    /// to guests) belongs to the namespace, never to the host's network.
    pub fn block_on<F>(&self, fut: F) -> Result<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.ns.enter(|| -> Result<F::Output> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .context("building the namespace's runtime")?;
            Ok(rt.block_on(fut))
        })?
    }
}
