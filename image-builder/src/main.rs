//! `image-builder build --out DIR …`: the deploy ramdisk (kernel, initramfs
//! with the static agent as PID 1, iPXE script), reproducibly; and
//! `image-builder oci --out DIR --agent BIN`: the agent's OCI image for
//! OpenShift's `ironic-agent` unit ([`image_builder::oci`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use image_builder::arch::Arch;
use image_builder::{assemble, kernel};

/// Builds the deploy ramdisk.
#[derive(Debug, Parser)]
#[command(name = "image-builder")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write DIR/deploy.kernel, DIR/deploy.initramfs and DIR/boot.ipxe, and
    /// the same under Metal3's names (ironic-python-agent.kernel,
    /// .initramfs, .tar, .tar.gz; ironic-python-agent_aarch64.* for aarch64).
    Build(BuildArgs),
    /// Write DIR/oci (an OCI image layout, tag `latest`),
    /// DIR/ironic-agent.oci.tar and DIR/ironic-agent.docker.tar: the agent as
    /// OpenShift's `ironic-agent` container (entrypoint `agent container`).
    Oci(OciArgs),
}

#[derive(Debug, clap::Args)]
struct OciArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// The static x86_64 agent (image-builder/build-agent.sh).
    #[arg(long)]
    agent: PathBuf,
    /// The static aarch64 agent: both under one image index.
    #[arg(long)]
    agent_aarch64: Option<PathBuf>,
    /// CA bundle to include (default: the build host's, if any).
    #[arg(long)]
    ca_bundle: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// An unpacked kernel package (boot/vmlinuz-V, lib/modules/V with modules.dep).
    #[arg(long, conflicts_with = "kernel_package")]
    kernel_root: Option<PathBuf>,
    /// A Debian linux-image .deb (unpacked and depmod'ed into OUT/.kernel).
    #[arg(long)]
    kernel_package: Option<PathBuf>,
    /// The static agent binary.
    #[arg(long)]
    agent: PathBuf,
    /// A static busybox for the debug shell.
    #[arg(long)]
    busybox: Option<PathBuf>,
    /// A directory tree to add as it is (repeatable), e.g. the SSH server
    /// with its libraries from `image-builder/fetch-ssh.sh`.
    #[arg(long)]
    extra_root: Vec<PathBuf>,
    /// An operator's executable hardware managers: a directory of manifests
    /// (`*.yaml`) and their executables, put where the agent looks for them
    /// (`/etc/ironic-python-agent/managers`; agent/docs/own-steps.md).
    #[arg(long)]
    managers: Option<PathBuf>,
    /// Unpacked firmware packages (from `image-builder/fetch-firmware.sh`):
    /// the blobs the included drivers name go to `lib/firmware`.
    #[arg(long)]
    firmware_root: Option<PathBuf>,
    /// Unpacked shim-signed and grub-efi-amd64-signed (from
    /// `image-builder/fetch-bootchain.sh`): writes shimx64.efi, grubx64.efi
    /// and grub/grub.cfg for Secure Boot network boot (aarch64: the arm64
    /// packages' shimaa64.efi and grubaa64.efi).
    #[arg(long)]
    boot_chain_root: Option<PathBuf>,
    /// CA bundle to include (default: the build host's, if any).
    #[arg(long)]
    ca_bundle: Option<PathBuf>,
    /// Driver profile: `full` (every module of the driver classes, with
    /// their firmware: real servers) or `vm` (a short list for VMs).
    #[arg(long, default_value = "full")]
    drivers: kernel::Profile,
    /// Extra kernel arguments written into boot.ipxe (e.g. ipa-api-url=…).
    #[arg(long, default_value = "ipa-api-url=mdns")]
    append: String,
    /// The architecture of the image (`x86_64` or `aarch64`): the agent,
    /// busybox and kernel given must be of it (checked).
    #[arg(long, default_value = "x86_64")]
    arch: Arch,
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let args = match cli.command {
        Cmd::Build(args) => args,
        Cmd::Oci(args) => return oci(&args),
    };
    std::fs::create_dir_all(&args.out)?;
    let root = match (&args.kernel_root, &args.kernel_package) {
        (Some(r), _) => r.clone(),
        (None, Some(deb)) => unpack(deb, &args.out.join(".kernel"))?,
        (None, None) => {
            bail!("give --kernel-root or --kernel-package (image-builder/build.sh fetches one)")
        }
    };
    let kernel = kernel::Kernel::find(&root)?;
    if elf_is_dynamic(&args.agent)? {
        bail!(
            "{} is dynamically linked; build it with image-builder/build-agent.sh",
            args.agent.display()
        );
    }
    args.arch.check_elf(&args.agent)?;
    if let Some(bb) = &args.busybox {
        args.arch.check_elf(bb)?;
    }
    let kernel_bytes = args.arch.deploy_kernel(&kernel.image)?;
    let ca = args.ca_bundle.clone().or_else(|| {
        let p = PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
        p.exists().then_some(p)
    });
    let inputs = assemble::Inputs {
        kernel: kernel.clone(),
        agent: args.agent.clone(),
        busybox: args.busybox.clone(),
        ca_bundle: ca,
        extra_roots: args.extra_root.clone(),
        firmware_root: args.firmware_root.clone(),
        profile: args.drivers,
        managers: args.managers.clone(),
    };
    let (tree, report) = assemble::tree(&inputs)?;
    if !report.missing_modules.is_empty() {
        println!(
            "not modules in {} (built in or absent): {}",
            kernel.version,
            report.missing_modules.join(" ")
        );
    }
    let initramfs = assemble::initramfs(&tree)?;
    let kpath = args.out.join("deploy.kernel");
    std::fs::write(&kpath, &kernel_bytes)?;
    // aarch64: the signed Image for Secure Boot, beside the gzipped one.
    let signed = args.out.join("deploy.kernel.signed");
    match args.arch.signed_kernel(&kernel.image)? {
        Some(bytes) => std::fs::write(&signed, bytes)?,
        None => {
            let _ = std::fs::remove_file(&signed);
        }
    }
    std::fs::write(args.out.join("deploy.initramfs"), &initramfs)?;
    std::fs::write(
        args.out.join("boot.ipxe"),
        assemble::ipxe_script(args.arch, &args.append),
    )?;
    if let Some(root) = &args.boot_chain_root {
        image_builder::bootchain::write(&args.out, root, args.arch, &args.append)?;
    }
    image_builder::metal3::write(
        &args.out,
        args.arch.metal3_name(),
        &kpath,
        &args.out.join("deploy.initramfs"),
    )?;
    let ksize = std::fs::metadata(&kpath)?.len();
    let mut text = coverage_text(&args, &kernel, &report, ksize, initramfs.len() as u64);
    if let Ok(m) = std::fs::metadata(&signed) {
        text.push_str(&format!(
            "size kernel-signed {} ({:.1} MiB; deploy.kernel.signed, for Secure Boot, instead of deploy.kernel)\n",
            m.len(),
            m.len() as f64 / (1 << 20) as f64
        ));
    }
    std::fs::write(args.out.join("coverage.txt"), &text)?;
    print!("{text}");
    Ok(())
}

/// The coverage report (`OUT/coverage.txt`, also printed): one
/// `class NAME INCLUDED/KERNEL` line per driver class, the firmware counts
/// and every name not included with the reason, and the sizes.
fn coverage_text(
    args: &BuildArgs,
    kernel: &kernel::Kernel,
    report: &assemble::Report,
    ksize: u64,
    isize: u64,
) -> String {
    use std::fmt::Write;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut t = String::new();
    let profile = match args.drivers {
        kernel::Profile::Full => "full",
        kernel::Profile::Vm => "vm",
    };
    let _ = writeln!(t, "profile {profile} kernel {}", kernel.version);
    let _ = writeln!(t, "arch {}", args.arch.name());
    let _ = writeln!(t, "modules {}", report.modules);
    for c in &report.classes {
        let pct = if c.kernel == 0 {
            0.0
        } else {
            100.0 * c.included as f64 / c.kernel as f64
        };
        let _ = writeln!(
            t,
            "class {} {}/{} ({pct:.0}%)",
            c.name, c.included, c.kernel
        );
    }
    match &report.firmware {
        None => {
            let _ = writeln!(t, "firmware none (no --firmware-root)");
        }
        Some(f) => {
            let _ = writeln!(
                t,
                "firmware named {} found {} missing-upstream {} not-fetched {} unknown {} ({:.1} MiB)",
                f.named,
                f.found,
                f.missing_upstream.len(),
                f.not_fetched.len(),
                f.unknown.len(),
                mib(f.bytes)
            );
            for m in &f.missing_upstream {
                let _ = writeln!(t, "firmware-missing-upstream {m}");
            }
            for (m, p) in &f.not_fetched {
                let _ = writeln!(t, "firmware-not-fetched {m} {p}");
            }
            for m in &f.unknown {
                let _ = writeln!(t, "firmware-unknown {m}");
            }
        }
    }
    let _ = writeln!(t, "size kernel {ksize} ({:.1} MiB)", mib(ksize));
    let _ = writeln!(t, "size initramfs {isize} ({:.1} MiB)", mib(isize));
    let _ = writeln!(
        t,
        "size total {} ({:.1} MiB)",
        ksize + isize,
        mib(ksize + isize)
    );
    t
}

/// Unpacks a kernel .deb with dpkg-deb and builds its modules.dep with depmod.
fn unpack(deb: &Path, dir: &Path) -> Result<PathBuf> {
    if !dir.join("lib/modules").exists() {
        let ok = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(dir)
            .status()
            .context("running dpkg-deb")?;
        if !ok.success() {
            bail!("dpkg-deb -x {} failed", deb.display());
        }
    }
    let mods = dir.join("lib/modules");
    for v in std::fs::read_dir(&mods)?.flatten() {
        let version = v.file_name().to_string_lossy().into_owned();
        if !v.path().join("modules.dep").exists() {
            let ok = Command::new("depmod")
                .arg("-b")
                .arg(dir)
                .arg(&version)
                .status()
                .context("running depmod")?;
            if !ok.success() {
                bail!("depmod -b {} {version} failed", dir.display());
            }
        }
    }
    Ok(dir.to_path_buf())
}

/// Whether an ELF file has a PT_DYNAMIC or PT_INTERP program header.
pub fn elf_is_dynamic(path: &Path) -> Result<bool> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        bail!("{} is not a 64-bit little-endian ELF file", path.display());
    }
    let u16at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[32..40].try_into()?) as usize;
    let (phentsize, phnum) = (u16at(54), u16at(56));
    for i in 0..phnum {
        let o = phoff + i * phentsize;
        let Some(t) = b.get(o..o + 4) else {
            bail!("truncated program headers")
        };
        let p_type = u32::from_le_bytes(t.try_into()?);
        if p_type == 2 || p_type == 3 {
            return Ok(true);
        }
    }
    Ok(false)
}

fn oci(args: &OciArgs) -> Result<()> {
    let mut inputs = vec![image_builder::oci::Input {
        arch: Arch::X86_64,
        agent: args.agent.clone(),
    }];
    if let Some(a) = &args.agent_aarch64 {
        inputs.push(image_builder::oci::Input {
            arch: Arch::Aarch64,
            agent: a.clone(),
        });
    }
    for i in &inputs {
        if elf_is_dynamic(&i.agent)? {
            bail!(
                "{} is dynamically linked; build it with image-builder/build-agent.sh",
                i.agent.display()
            );
        }
    }
    let ca = args.ca_bundle.clone().or_else(|| {
        let p = PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
        p.exists().then_some(p)
    });
    std::fs::create_dir_all(&args.out)?;
    let r = image_builder::oci::write(&args.out, &inputs, ca.as_deref())?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for (arch, digest, layer) in &r.images {
        println!(
            "image {arch} {digest} layer {layer} ({:.1} MiB compressed)",
            mib(*layer)
        );
    }
    println!("tag {} -> {}", image_builder::oci::TAG, r.tag_digest);
    println!(
        "size oci-archive {} ({:.1} MiB), docker-archive {} ({:.1} MiB)",
        r.oci_archive_bytes,
        mib(r.oci_archive_bytes),
        r.docker_archive_bytes,
        mib(r.docker_archive_bytes)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_binaries_are_dynamic() {
        assert!(elf_is_dynamic(Path::new("/bin/sh")).unwrap());
        assert!(elf_is_dynamic(Path::new("/etc/hostname")).is_err());
    }
}
