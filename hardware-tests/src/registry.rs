//! A local OCI registry for the container step tests: Debian's
//! `docker-registry` on 127.0.0.1 (or the bed's bridge) with TLS from a CA made here (rcgen),
//! its own config and storage in a temporary directory (never the system
//! service's), killed by PID when dropped; and images built from Debian's
//! busybox-static with umoci (unpack, repack, config) and pushed with skopeo.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::run;

/// The running registry.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    /// The one user when the registry requires authentication.
    user: Option<(String, String)>,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts the registry on a free loopback port and waits until it
    /// accepts connections.
    pub fn start() -> Result<Self> {
        Self::start_on("127.0.0.1")
    }

    /// Starts the registry on a free port of `ip` (an address of the
    /// network namespace the caller is in; its certificate names it).
    pub fn start_on(ip: &str) -> Result<Self> {
        Self::start_with(ip, None)
    }

    /// [`Registry::start`] with HTTP basic authentication: `user` (name,
    /// password) is its only user (htpasswd, bcrypt).
    pub fn start_with_user(user: (&str, &str)) -> Result<Self> {
        Self::start_with("127.0.0.1", Some(user))
    }

    fn start_with(ip: &str, user: Option<(&str, &str)>) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        // A CA, and the registry's certificate for 127.0.0.1 signed by it.
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "container test CA");
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate()?;
        let params = CertificateParams::new(vec![ip.to_string()])?;
        let cert = params.signed_by(&key, &issuer)?;
        std::fs::write(d.join("ca.pem"), ca.pem())?;
        std::fs::create_dir(d.join("certs.d"))?;
        std::fs::write(d.join("certs.d/ca.crt"), ca.pem())?;
        std::fs::write(d.join("server.pem"), cert.pem())?;
        std::fs::write(d.join("server.key"), key.serialize_pem())?;

        let port = std::net::TcpListener::bind((ip, 0))?.local_addr()?.port();
        let addr = format!("{ip}:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {addr}\n  tls:\n    certificate: {}\n    key: {}\n",
            d.join("storage").display(),
            d.join("server.pem").display(),
            d.join("server.key").display(),
        );
        if let Some((name, password)) = user {
            let entry = run(Command::new("htpasswd").args(["-Bbn", name, password]))
                .context("htpasswd (ci/install-deps installs apache2-utils)")?;
            std::fs::write(d.join("htpasswd"), format!("{entry}\n"))?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: container-test\n    path: {}\n",
                d.join("htpasswd").display()
            ));
        }
        std::fs::write(d.join("config.yml"), config)?;
        let log = std::fs::File::create(d.join("registry.log"))?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting docker-registry (ci/install-deps installs it)")?;
        let reg = Registry {
            child,
            dir,
            addr,
            user: user.map(|(n, p)| (n.to_string(), p.to_string())),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&reg.addr).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "docker-registry did not listen on {} within 30 s: {}",
                    reg.addr,
                    reg.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(reg)
    }

    /// The CA's PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The registry's log so far (its access log included).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Builds an image holding Debian's static busybox at `/bin/busybox`
    /// with `entrypoint`, and pushes it as `name` (`repo:tag`). Returns
    /// `docker://ADDR/name`.
    pub fn push_busybox_image(&self, name: &str, entrypoint: &[&str]) -> Result<String> {
        let busybox = crate::debs::unpacked("busybox-static", &["busybox-static"])?;
        let work = tempfile::tempdir_in(self.dir.path())?;
        let layout = work.path().join("oci");
        let image = format!("{}:img", layout.display());
        run(Command::new("umoci")
            .args(["init", "--layout"])
            .arg(&layout))?;
        run(Command::new("umoci").args(["new", "--image", &image]))?;
        // unpack + repack rather than `umoci insert`: Debian 12's umoci
        // 0.4.7 writes an inserted file's layer without the tar padding and
        // end-of-archive blocks, which a strict tar reader refuses.
        let bundle = work.path().join("bundle");
        run(Command::new("umoci")
            .args(["unpack", "--image", &image])
            .arg(&bundle))?;
        let bin = bundle.join("rootfs/bin");
        std::fs::create_dir_all(&bin)?;
        std::fs::copy(busybox_binary(&busybox)?, bin.join("busybox"))?;
        run(Command::new("umoci")
            .args(["repack", "--image", &image])
            .arg(&bundle))?;
        let mut config = Command::new("umoci");
        config.args(["config", "--image", &image]);
        for arg in entrypoint {
            config.arg(format!("--config.entrypoint={arg}"));
        }
        run(&mut config)?;
        let dest = format!("docker://{}/{name}", self.addr);
        let mut copy = Command::new("skopeo");
        copy.args(["copy", "--quiet", "--dest-cert-dir"])
            .arg(self.dir.path().join("certs.d"));
        if let Some((name, password)) = &self.user {
            copy.arg("--dest-creds").arg(format!("{name}:{password}"));
        }
        run(copy.arg(format!("oci:{image}")).arg(&dest))?;
        Ok(dest)
    }
}

fn busybox_binary(root: &Path) -> Result<PathBuf> {
    for p in ["bin/busybox", "usr/bin/busybox"] {
        let b = root.join(p);
        if b.is_file() {
            return Ok(b);
        }
    }
    bail!("no busybox in {}", root.display())
}

/// The variable that marks the run inside the private mount namespace.
const INNER: &str = "HARDWARE_TESTS_CGROUP2_NS";

/// crun wants a cgroup v2 filesystem at `/sys/fs/cgroup` (the ramdisk's
/// agent mounts one where there is none). Where this machine has another
/// layout (hybrid or v1, as in some CI containers), the test `name` of
/// the current test binary is run again in a private mount namespace
/// (util-linux's `unshare`) with cgroup2 mounted over `/sys/fs/cgroup`
/// there only; the machine's own mounts are untouched. Returns whether
/// the caller should run the test's body in this process (false: it ran,
/// and passed, in the child).
pub fn in_cgroup2_namespace(name: &str) -> bool {
    let cgroup2 = || {
        nix::sys::statfs::statfs("/sys/fs/cgroup")
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    };
    if cgroup2() {
        return true;
    }
    if std::env::var_os(INNER).is_some() {
        run(Command::new("mount").args(["-t", "cgroup2", "cgroup2", "/sys/fs/cgroup"]))
            .expect("mounting cgroup2 in the private mount namespace");
        assert!(cgroup2());
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(exe)
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(INNER, "1")
        .status()
        .expect("running unshare");
    assert!(status.success(), "{name} in its mount namespace: {status}");
    false
}
