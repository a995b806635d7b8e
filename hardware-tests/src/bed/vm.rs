//! A QEMU virtual machine on the bed's network: firmware, disks, NICs and
//! boot source as the test says, console in a file, killed on drop. x86_64
//! machines are q35 PCs (SeaBIOS or OVMF); aarch64 ones (issue 33) are
//! QEMU's `virt` board with a Cortex-A57 and AAVMF, Arm's UEFI, as Arm
//! servers boot.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use image_builder::arch::Arch;

use super::net::{Net, Proc};

/// Firmware of the machine.
#[derive(Debug, Clone)]
pub enum Firmware {
    /// SeaBIOS.
    Bios,
    /// OVMF; `vars` is the machine's NVRAM (copied from OVMF's template
    /// when missing), kept across boots like a real machine's.
    Uefi {
        /// The NVRAM file.
        vars: PathBuf,
    },
    /// OVMF built with Secure Boot (SMM, `OVMF_CODE_4M.secboot.fd`) and
    /// NVRAM from `OVMF_VARS_4M.ms.fd`: Microsoft's keys enrolled and Secure
    /// Boot enforced, as servers ship.
    UefiSecureBoot {
        /// The NVRAM file.
        vars: PathBuf,
    },
}

/// Where a disk is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bus {
    /// virtio-blk (`/dev/vdX`).
    Virtio,
    /// An NVMe controller of its own (`/dev/nvmeXn1`).
    Nvme,
    /// A port of q35's AHCI controller (`/dev/sdX`, transport sata).
    Sata,
    /// virtio-scsi (`/dev/sdX`).
    Scsi,
    /// A USB mass-storage device on an xHCI controller (`/dev/sdX`,
    /// transport usb): a stick left in the machine.
    Usb,
}

/// A virtual disk backed by a file (created sparse when missing).
#[derive(Debug, Clone)]
pub struct Disk {
    /// The backing file (raw).
    pub path: PathBuf,
    /// Size in bytes if the file must be created.
    pub size: u64,
    /// Controller.
    pub bus: Bus,
    /// Serial number the guest sees.
    pub serial: String,
    /// Model (SATA and SCSI only; virtio-blk and NVMe have none to set).
    pub model: Option<String>,
}

/// One LUN seen on several paths, as a SAN presents it: `paths` virtio-scsi
/// disks (`scsi-hd`, each on its own target of one controller) on the same
/// backing file, shared for writing without QEMU's image locking, all with
/// the same serial and WWN. Offered on directly started machines only.
#[derive(Debug, Clone)]
pub struct MultipathDisk {
    /// The backing file (raw; created sparse when missing).
    pub path: PathBuf,
    /// Size in bytes if the file must be created.
    pub size: u64,
    /// Serial number every path reports.
    pub serial: String,
    /// WWN every path reports (`0x5000c50015ea71ad`).
    pub wwn: String,
    /// Number of paths.
    pub paths: u32,
}

/// A NIC on a tap in the bed's bridge.
#[derive(Debug, Clone)]
pub struct Nic {
    /// `52:54:00:…`.
    pub mac: String,
}

/// What the machine boots.
#[derive(Debug, Clone)]
pub enum Boot {
    /// PXE from the first NIC (iPXE, then the bed's `boot.ipxe`).
    Network,
    /// Its disks, in the firmware's own order (UEFI: the NVRAM `BootOrder`).
    Disk,
    /// A kernel and initramfs given to QEMU directly (fast, no firmware).
    Direct {
        /// bzImage.
        kernel: PathBuf,
        /// initramfs.
        initrd: PathBuf,
        /// Kernel command line.
        append: String,
    },
}

/// The machine.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// Names the console file.
    pub name: String,
    /// Firmware.
    pub firmware: Firmware,
    /// RAM.
    pub memory_mb: u32,
    /// vCPUs.
    pub cpus: u32,
    /// Disks in order.
    pub disks: Vec<Disk>,
    /// NICs in order.
    pub nics: Vec<Nic>,
    /// Boot source.
    pub boot: Boot,
    /// A BMC: QEMU's simulator behind a KCS interface (`/dev/ipmi0` in the
    /// guest once ipmi_si and ipmi_devintf are loaded).
    pub ipmi: bool,
    /// A disc in a SATA CD/DVD drive on the last AHCI port (`/dev/sr0`),
    /// as a BMC's virtual media appears.
    pub cdrom: Option<PathBuf>,
    /// The real-time clock's start (QEMU's `-rtc base=`, e.g.
    /// `2027-11-24T12:00:00`): a guest whose clock is wrong.
    pub rtc_base: Option<String>,
    /// QEMU's `blkdebug` rule file for the first disk (a virtio disk):
    /// read and write errors injected where the rules say (see
    /// `tests/qemu/faults_disk_qemu.rs`). QEMU reads the file each time the
    /// machine starts. Offered on the Redfish bed's domains only.
    pub blkdebug: Option<PathBuf>,
    /// LUNs seen on several paths (after `disks`).
    pub multipath_disks: Vec<MultipathDisk>,
    /// The CPU architecture: x86_64 (q35) or aarch64 (`virt`, AAVMF; no
    /// BIOS, no SATA/IDE, no ISA BMC).
    pub arch: Arch,
    /// A QMP socket ([`Vm::qmp_socket`], see [`super::qmp`]); the machine
    /// then stays (stopped) after a power off, so it can still be asked.
    pub qmp: bool,
    /// A USB network device with this MAC (QEMU's `usb-net` on an xHCI
    /// controller, on no network): Linux binds it to `cdc_ether`, as a
    /// BMC's USB NIC. Offered on the Redfish bed's x86_64 domains only.
    pub usb_nic: Option<String>,
}

impl VmSpec {
    /// One vCPU, 1 GiB, BIOS, no disks or NICs, network boot.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            firmware: Firmware::Bios,
            memory_mb: 1024,
            cpus: 1,
            disks: Vec::new(),
            nics: Vec::new(),
            boot: Boot::Network,
            ipmi: false,
            cdrom: None,
            rtc_base: None,
            blkdebug: None,
            multipath_disks: Vec::new(),
            arch: Arch::X86_64,
            qmp: false,
            usb_nic: None,
        }
    }
}

/// A running QEMU.
#[derive(Debug)]
pub struct Vm<'n> {
    net: &'n Net,
    taps: Vec<String>,
    console: PathBuf,
    started: Instant,
    qmp: Option<PathBuf>,
    // Dropped before the taps are deleted (see Drop).
    qemu: Option<Proc>,
}

pub(crate) const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub(crate) const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
const OVMF_CODE_SECBOOT: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
const OVMF_VARS_MS: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";
// AAVMF (package qemu-efi-aarch64): the 64 MiB flash images `virt` takes;
// the `.ms` pair has Microsoft's keys enrolled and Secure Boot enforced.
const AAVMF_CODE: &str = "/usr/share/AAVMF/AAVMF_CODE.fd";
const AAVMF_VARS: &str = "/usr/share/AAVMF/AAVMF_VARS.fd";
const AAVMF_CODE_MS: &str = "/usr/share/AAVMF/AAVMF_CODE.ms.fd";
const AAVMF_VARS_MS: &str = "/usr/share/AAVMF/AAVMF_VARS.ms.fd";

/// The QEMU program, machine, CPU (TCG) and what the machine lacks, per
/// architecture. Cortex-A57: an ARMv8.0 server core QEMU emulates quickly
/// (`-cpu max` enables features whose emulation is slow under TCG).
fn platform(arch: Arch) -> (&'static str, &'static str, &'static str) {
    match arch {
        Arch::X86_64 => ("qemu-system-x86_64", "q35", "qemu64,+rdrand"),
        Arch::Aarch64 => ("qemu-system-aarch64", "virt", "cortex-a57"),
    }
}

impl<'n> Vm<'n> {
    /// Starts the machine in the bed's namespace. Its console goes to
    /// `<net.logs>/<name>.console.log` (a new file each boot).
    pub fn start(net: &'n Net, spec: &VmSpec) -> Result<Self> {
        let console = net.logs.join(format!("{}.console.log", spec.name));
        // TCG by default: this machine's /dev/kvm cannot boot a stock
        // kernel. BED_ACCEL=kvm opts in where KVM works.
        let kvm = std::env::var("BED_ACCEL").is_ok_and(|a| a == "kvm");
        let (program, machine, cpu) = platform(spec.arch);
        let arm = spec.arch == Arch::Aarch64;
        let mut args: Vec<String> = [
            "-accel",
            if kvm { "kvm" } else { "tcg" },
            "-cpu",
            if kvm { "host" } else { cpu },
            "-machine",
            machine,
            "-nographic",
            "-no-reboot",
            "-nodefaults",
            "-serial",
            "stdio",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(["-m".into(), spec.memory_mb.to_string()]);
        args.extend(["-smp".into(), spec.cpus.to_string()]);
        if let Some(base) = &spec.rtc_base {
            args.extend(["-rtc".into(), format!("base={base}")]);
        }
        let qmp = spec
            .qmp
            .then(|| net.logs.join(format!("{}.qmp", spec.name)));
        if let Some(socket) = &qmp {
            let _ = std::fs::remove_file(socket);
            args.extend([
                "-qmp".into(),
                format!("unix:{},server=on,wait=off", socket.display()),
                "-no-shutdown".into(),
            ]);
        }
        if arm {
            anyhow::ensure!(
                !spec.ipmi && spec.cdrom.is_none(),
                "{}: the aarch64 `virt` machine has no ISA BMC and no SATA CD drive",
                spec.name
            );
            anyhow::ensure!(
                spec.disks.iter().all(|d| d.bus != Bus::Sata),
                "{}: the aarch64 `virt` machine has no AHCI controller",
                spec.name
            );
            // No RNDR on a Cortex-A57: the guest's entropy (and the EFI
            // RNG protocol AAVMF hands the kernel) comes from virtio-rng.
            args.extend(["-device", "virtio-rng-pci"].map(String::from));
        }
        let uefi = match &spec.firmware {
            Firmware::Bios if arm => {
                bail!(
                    "{}: aarch64 machines have no BIOS: use Firmware::Uefi (AAVMF)",
                    spec.name
                )
            }
            Firmware::Bios => None,
            Firmware::Uefi { vars } if arm => Some((vars, AAVMF_CODE, AAVMF_VARS)),
            Firmware::UefiSecureBoot { vars } if arm => Some((vars, AAVMF_CODE_MS, AAVMF_VARS_MS)),
            Firmware::Uefi { vars } => Some((vars, OVMF_CODE, OVMF_VARS)),
            Firmware::UefiSecureBoot { vars } => {
                // The secure-boot build keeps its variables in SMM.
                args.extend(
                    [
                        "-machine",
                        "smm=on",
                        "-global",
                        "driver=cfi.pflash01,property=secure,value=on",
                    ]
                    .map(String::from),
                );
                Some((vars, OVMF_CODE_SECBOOT, OVMF_VARS_MS))
            }
        };
        match uefi {
            None => {}
            Some((vars, code, template)) => {
                if !vars.exists() {
                    std::fs::copy(template, vars).with_context(|| {
                        format!("copying {template} (package ovmf or qemu-efi-aarch64)")
                    })?;
                }
                args.push("-drive".into());
                args.push(format!(
                    "if=pflash,format=raw,unit=0,readonly=on,file={code}"
                ));
                args.push("-drive".into());
                args.push(format!(
                    "if=pflash,format=raw,unit=1,file={}",
                    vars.display()
                ));
            }
        }
        anyhow::ensure!(
            spec.blkdebug.is_none() && spec.usb_nic.is_none(),
            "{}: blkdebug disks and USB NICs are offered on the Redfish bed's domains only",
            spec.name
        );
        let bios_disk_boot =
            matches!(spec.firmware, Firmware::Bios) && matches!(spec.boot, Boot::Disk);
        disk_args(&spec.disks, bios_disk_boot, &mut args)?;
        multipath_args(&spec.multipath_disks, &mut args)?;
        if let Some(iso) = &spec.cdrom {
            let sata = spec.disks.iter().filter(|d| d.bus == Bus::Sata).count();
            anyhow::ensure!(
                sata < 6,
                "the CD/DVD drive needs the last of q35's 6 AHCI ports"
            );
            args.push("-drive".into());
            args.push(format!(
                "file={},if=none,id=cd0,format=raw,media=cdrom,readonly=on",
                iso.display()
            ));
            args.push("-device".into());
            args.push("ide-cd,drive=cd0,bus=ide.5".into());
        }
        if spec.ipmi {
            args.extend(
                [
                    "-device",
                    "ipmi-bmc-sim,id=bmc0",
                    "-device",
                    "isa-ipmi-kcs,bmc=bmc0",
                ]
                .map(String::from),
            );
        }
        let mut vm = Self {
            net,
            taps: Vec::new(),
            console: console.clone(),
            started: Instant::now(),
            qmp,
            qemu: None,
        };
        for (i, nic) in spec.nics.iter().enumerate() {
            let tap = net.add_tap()?;
            vm.taps.push(tap.clone());
            args.push("-netdev".into());
            args.push(format!("tap,id=n{i},ifname={tap},script=no,downscript=no"));
            let mut dev = format!("virtio-net-pci,netdev=n{i},mac={}", nic.mac);
            match spec.boot {
                Boot::Network if i == 0 => dev.push_str(",bootindex=0"),
                // No option ROM: the firmware does not try PXE on the way to the disk.
                Boot::Network => {}
                _ => dev.push_str(",romfile="),
            }
            args.push("-device".into());
            args.push(dev);
        }
        if let Boot::Direct {
            kernel,
            initrd,
            append,
        } = &spec.boot
        {
            args.push("-kernel".into());
            args.push(kernel.display().to_string());
            args.push("-initrd".into());
            args.push(initrd.display().to_string());
            args.push("-append".into());
            args.push(append.clone());
        }
        let out = std::fs::File::create(&console)
            .with_context(|| format!("creating {}", console.display()))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &net.ns.name, program])
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {program} (ci/install-deps installs it)"))?;
        vm.started = Instant::now();
        vm.qemu = Some(Proc::new(child, &format!("QEMU {}", spec.name)));
        Ok(vm)
    }

    /// The QMP socket, when the spec asked for one.
    pub fn qmp_socket(&self) -> Option<&Path> {
        self.qmp.as_deref()
    }

    /// Whether the guest is powered off (QMP's `query-status` says
    /// `shutdown`; needs [`VmSpec::qmp`]).
    pub fn powered_off(&self) -> Result<bool> {
        let socket = self.qmp_socket().context("the machine has no QMP socket")?;
        let status = super::qmp::command(socket, "query-status", serde_json::json!({}))?;
        Ok(status["status"] == "shutdown")
    }

    /// The console file.
    pub fn console_path(&self) -> &Path {
        &self.console
    }

    /// The console so far.
    pub fn console(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.console).unwrap_or_default()).into_owned()
    }

    /// Time since QEMU started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Waits until `needle` is on the console; returns the time since QEMU
    /// started. Fails when QEMU exits first or at the timeout, naming the
    /// console file.
    pub fn wait_console(&mut self, needle: &str, timeout: Duration) -> Result<Duration> {
        self.wait_console_n(needle, 1, timeout)
    }

    /// [`Vm::wait_console`] until `needle` has appeared `n` times (the
    /// console is read whole: a second login prompt is the second `login:`).
    pub fn wait_console_n(
        &mut self,
        needle: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.console().matches(needle).count() >= n {
                return Ok(self.elapsed());
            }
            if let Some(status) = self.exited()? {
                bail!(
                    "{needle:?} never appeared {n} time(s): QEMU exited ({status}){}; console: {}",
                    self.stderr_note(),
                    self.console.display()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{needle:?} did not appear {n} time(s) within {timeout:?}; console: {}",
                    self.console.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for the machine to power off (or reboot: `-no-reboot` makes
    /// that an exit too).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!(
                    "the VM did not power off within {timeout:?}; console: {}",
                    self.console.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether QEMU has exited, and how.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        let qemu = self.qemu.as_mut().context("QEMU is not running")?;
        Ok(qemu.child().try_wait()?)
    }

    /// Types a line on the serial console.
    pub fn type_line(&mut self, line: &str) -> Result<()> {
        let qemu = self.qemu.as_mut().context("QEMU is not running")?;
        let stdin = qemu.child().stdin.as_mut().context("no console input")?;
        stdin.write_all(line.as_bytes())?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        Ok(())
    }

    /// Stops QEMU now (by PID) and removes its taps.
    pub fn kill(&mut self) {
        self.qemu = None;
        for tap in self.taps.drain(..) {
            self.net.del_tap(&tap);
        }
    }

    fn stderr_note(&mut self) -> String {
        use std::io::Read;
        let mut err = String::new();
        if let Some(q) = self.qemu.as_mut() {
            if let Some(e) = q.child().stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
        }
        if err.trim().is_empty() {
            String::new()
        } else {
            format!(": {}", err.trim())
        }
    }
}

impl Drop for Vm<'_> {
    fn drop(&mut self) {
        self.kill();
    }
}

fn multipath_args(disks: &[MultipathDisk], args: &mut Vec<String>) -> Result<()> {
    for (i, d) in disks.iter().enumerate() {
        if !d.path.exists() {
            std::fs::File::create(&d.path)
                .and_then(|f| f.set_len(d.size))
                .with_context(|| format!("creating disk {}", d.path.display()))?;
        }
        args.push("-device".into());
        args.push(format!("virtio-scsi-pci,id=mp{i}"));
        for p in 0..d.paths {
            args.push("-drive".into());
            args.push(format!(
                "file={},if=none,id=mp{i}p{p},format=raw,file.locking=off",
                d.path.display()
            ));
            args.push("-device".into());
            args.push(format!(
                // id: QMP's device_del takes the path away (a lost path).
                "scsi-hd,drive=mp{i}p{p},bus=mp{i}.0,scsi-id={p},lun=0,share-rw=on,serial={},wwn={},id=mp{i}p{p}d",
                d.serial, d.wwn
            ));
        }
    }
    Ok(())
}

fn disk_args(disks: &[Disk], bios_disk_boot: bool, args: &mut Vec<String>) -> Result<()> {
    let mut sata = 0;
    let mut scsi = false;
    let mut usb = false;
    for (i, d) in disks.iter().enumerate() {
        if !d.path.exists() {
            std::fs::File::create(&d.path)
                .and_then(|f| f.set_len(d.size))
                .with_context(|| format!("creating disk {}", d.path.display()))?;
        }
        args.push("-drive".into());
        args.push(format!(
            // discard=unmap: the disks discard as SSDs do (and a discard
            // punches holes in the file).
            "file={},if=none,id=d{i},format=raw,cache=unsafe,discard=unmap",
            d.path.display()
        ));
        let boot_first = bios_disk_boot && i == 0;
        let mut dev = match d.bus {
            Bus::Virtio => format!("virtio-blk-pci,drive=d{i},serial={}", d.serial),
            // id: QMP reaches it at /machine/peripheral/nvme<i>.
            Bus::Nvme => format!("nvme,drive=d{i},serial={},id=nvme{i}", d.serial),
            Bus::Sata => {
                sata += 1;
                anyhow::ensure!(sata <= 6, "q35's AHCI has 6 ports");
                format!("ide-hd,drive=d{i},bus=ide.{},serial={}", sata - 1, d.serial)
            }
            Bus::Scsi => {
                if !scsi {
                    args.push("-device".into());
                    args.push("virtio-scsi-pci,id=scsi0".into());
                    scsi = true;
                }
                format!("scsi-hd,drive=d{i},bus=scsi0.0,serial={}", d.serial)
            }
            Bus::Usb => {
                if !usb {
                    args.push("-device".into());
                    args.push("qemu-xhci,id=xhci0".into());
                    usb = true;
                }
                format!("usb-storage,drive=d{i},bus=xhci0.0,serial={}", d.serial)
            }
        };
        if let Some(model) = &d.model {
            match d.bus {
                Bus::Sata => dev.push_str(&format!(",model={model}")),
                Bus::Scsi => dev.push_str(&format!(",product={model}")),
                Bus::Virtio | Bus::Nvme | Bus::Usb => {
                    bail!(
                        "disk {}: a model can be set on SATA and SCSI disks only",
                        d.serial
                    )
                }
            }
        }
        // SeaBIOS boots the first disk; OVMF follows its NVRAM `BootOrder`
        // (a bootindex would make it reorder the entries the agent wrote).
        if boot_first {
            dev.push_str(",bootindex=1");
        }
        args.push("-device".into());
        args.push(dev);
    }
    Ok(())
}
