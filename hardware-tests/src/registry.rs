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
    /// Plain HTTP, no TLS (a lab's or a disconnected mirror's registry).
    plain_http: bool,
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
        Self::start_with(ip, None, false)
    }

    /// [`Registry::start`] speaking plain HTTP (no TLS at all), as a lab's
    /// or a disconnected mirror's registry often does.
    pub fn start_plain_http() -> Result<Self> {
        Self::start_with("127.0.0.1", None, true)
    }

    /// [`Registry::start`] with HTTP basic authentication: `user` (name,
    /// password) is its only user (htpasswd, bcrypt).
    pub fn start_with_user(user: (&str, &str)) -> Result<Self> {
        Self::start_with("127.0.0.1", Some(user), false)
    }

    fn start_with(ip: &str, user: Option<(&str, &str)>, plain_http: bool) -> Result<Self> {
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
             http:\n  addr: {addr}\n",
            d.join("storage").display(),
        );
        if !plain_http {
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                d.join("server.pem").display(),
                d.join("server.key").display(),
            ));
        }
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
            plain_http,
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
        self.push_busybox_image_with(name, entrypoint, None)
    }

    /// [`Registry::push_busybox_image`] with the files of `extra` (a root
    /// directory, e.g. [`openssl_root`]) added to the image.
    pub fn push_busybox_image_with(
        &self,
        name: &str,
        entrypoint: &[&str],
        extra: Option<&Path>,
    ) -> Result<String> {
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
        if let Some(extra) = extra {
            let mut from = extra.as_os_str().to_owned();
            from.push("/.");
            run(Command::new("cp")
                .arg("-a")
                .arg(from)
                .arg(bundle.join("rootfs")))?;
        }
        run(Command::new("umoci")
            .args(["repack", "--image", &image])
            .arg(&bundle))?;
        let mut config = Command::new("umoci");
        config.args(["config", "--image", &image]);
        for arg in entrypoint {
            config.arg(format!("--config.entrypoint={arg}"));
        }
        run(&mut config)?;
        self.push(&format!("oci:{image}"), name)
    }

    /// Copies `source` (a skopeo image reference) to the registry as
    /// `name`, with the registry's CA and its user. Returns
    /// `docker://ADDR/name`.
    fn push(&self, source: &str, name: &str) -> Result<String> {
        let dest = format!("docker://{}/{name}", self.addr);
        let mut copy = Command::new("skopeo");
        copy.args(["copy", "--quiet"]);
        if self.plain_http {
            // skopeo (containers/image) uses plain HTTP only so.
            copy.arg("--dest-tls-verify=false");
        } else {
            copy.arg("--dest-cert-dir")
                .arg(self.dir.path().join("certs.d"));
        }
        if let Some((name, password)) = &self.user {
            copy.arg("--dest-creds").arg(format!("{name}:{password}"));
        }
        run(copy.arg(source).arg(&dest))?;
        Ok(dest)
    }
}

impl Registry {
    /// Pushes the image of the OCI layout `layout` (tag `latest`) as
    /// `name` (`repo:tag`) with skopeo. Returns `docker://ADDR/name`.
    pub fn push_layout(&self, layout: &Path, name: &str) -> Result<String> {
        self.push(&format!("oci:{}:latest", layout.display()), name)
    }
}

/// Debian's `openssl` with its libraries and loader (staged by
/// `image-builder/stage-dynamic.sh`, nothing installed): a TLS client
/// for images (`openssl s_client`), since busybox-static's wget cannot
/// do TLS. Returns the staged root.
pub fn openssl_root() -> Result<PathBuf> {
    let dir = crate::repo_root().join("target/debs/openssl-client");
    let root = dir.join("root");
    if !root.join("usr/bin/openssl").is_file() {
        run(
            Command::new(crate::repo_root().join("image-builder/stage-dynamic.sh"))
                .arg(&root)
                .arg(dir.join("debs"))
                .arg("openssl libssl3 libc6")
                .arg("usr/bin/openssl=usr/bin/openssl"),
        )
        .context("staging openssl")?;
    }
    Ok(root)
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

/// Whether `path` is a filesystem of type `magic`.
fn fs_is(path: &str, magic: nix::sys::statfs::FsType) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|s| s.filesystem_type() == magic)
}

/// crun's cgroupfs manager makes each container's cgroup and enforces its
/// device rules on cgroup v2 (a BPF program; the ramdisk's layout) or on
/// cgroup v1 (the `devices` controller), but refuses a hybrid layout (v1
/// controllers with cgroup2 at `/sys/fs/cgroup/unified`, as on this kind
/// of CI machine, whose root also lacks the CAP_SYS_RESOURCE that Debian
/// 12's crun needs to raise RLIMIT_MEMLOCK before it loads a BPF
/// program). So where `/sys/fs/cgroup` is neither pure v2 nor pure v1,
/// the test `name` of the current test binary is run again in a private
/// mount namespace (util-linux's `unshare`) where it is: the hybrid
/// layout's `unified` mount is unmounted there (v1, as crun supports it),
/// or, with nothing mounted, cgroup2 is mounted over `/sys/fs/cgroup`; the
/// machine's own mounts are untouched. Returns whether the caller should
/// run the test's body in this process (false: it ran, and passed, in the
/// child).
pub fn with_crun_cgroups(name: &str) -> bool {
    use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};
    let v2 = || fs_is("/sys/fs/cgroup", CGROUP2_SUPER_MAGIC);
    let v1 = || fs_is("/sys/fs/cgroup/devices", CGROUP_SUPER_MAGIC);
    let unified = || fs_is("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC);
    if v2() || (v1() && !unified()) {
        return true;
    }
    if std::env::var_os(INNER).is_some() {
        if v1() {
            run(Command::new("umount").arg("/sys/fs/cgroup/unified"))
                .expect("unmounting cgroup2 in the private mount namespace");
            assert!(!unified());
        } else {
            run(Command::new("mount").args(["-t", "cgroup2", "cgroup2", "/sys/fs/cgroup"]))
                .expect("mounting cgroup2 in the private mount namespace");
            assert!(v2());
        }
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

/// Commands for busybox sh that probe a container step's isolation and
/// print one line per check, `NAME rc=STATUS OUTPUT` (output on one line):
/// `status` (Seccomp, NoNewPrivs, CapEff of /proc/self/status) and
/// `personality` (`linux64 -R`: personality(2) with ADDR_NO_RANDOMIZE,
/// which anyone may set but podman's profile does not list); with
/// `devices_and_api` (`client`, `key_file`) also `ro-read` and `ro-write`
/// (a sector of `/dev/ro`), `ungranted` (a line written to `/dev/other`:
/// a write, since opening `/dev/kmsg` to read needs CAP_SYSLOG), `local`
/// (`GET /v1/local/status` sent by `client`, a command that connects to
/// the agent's API and relays its standard input, e.g. `$B nc 127.0.0.1
/// PORT`, kept open 2 s for the answer: its status line) and `keyfile` (reading `key_file`).
/// The device checks are for a container with its own `/dev` (not
/// `--privileged`, whose `/dev` is the host's).
pub fn isolation_probe(devices_and_api: Option<(&str, &str)>) -> String {
    let mut s = "B=/bin/busybox; \
         c() { n=$1; shift; o=$(\"$@\" 2>&1); r=$?; echo \"$n rc=$r\" $o; }; \
         c status $B grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; \
         c personality $B linux64 -R $B true"
        .to_string();
    if let Some((client, key_file)) = devices_and_api {
        s.push_str(&format!(
            "; c ro-read $B dd if=/dev/ro of=/dev/null bs=512 count=1; \
             c ro-write $B dd if=/dev/zero of=/dev/ro bs=512 count=1 conv=notrunc,fsync; \
             c ungranted $B sh -c 'echo ungranted-device-write > /dev/other'; \
             get() {{ {{ printf 'GET /v1/local/status HTTP/1.0\\r\\n\\r\\n'; $B sleep 2; }} | {client} 2>&1 | $B grep -m1 HTTP/; }}; \
             c local get; \
             c keyfile $B cat {key_file}"
        ));
    }
    s
}

/// [`isolation_probe`]'s report: each check's (exit status, output).
pub fn probe_report(text: &str) -> std::collections::HashMap<String, (i32, String)> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(" rc=")?;
            let (rc, out) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((name.to_string(), (rc.parse().ok()?, out.to_string())))
        })
        .collect()
}
