//! `coreos-installer install` on the live system, as OpenShift's hardware
//! manager runs it for `install_coreos` (PROTOCOL.md §6.3): the arguments
//! ([`args`]), the Ignition config with the first-boot host name
//! ([`with_firstboot_hostname`]) written to the host's `/tmp/ironic.ign`,
//! and the run ([`install`]): `chroot HOST_ROOT coreos-installer install
//! ARGS DEVICE`, its merged output streamed to the log line by line, tried
//! [`ATTEMPTS`] times, failing with IPA's texts ([`InstallError`]).
//!
//! What the step reads from the node (the config drive, the image URL) and
//! what happens to the disk after a final failure belong to the command
//! (`commands/coreos_host.rs`).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Where the Ignition config goes, inside the host's root.
pub const IGNITION_PATH: &str = "/tmp/ironic.ign";
/// How many times the install is tried (IPA's tenacity `stop_after_attempt(3)`).
pub const ATTEMPTS: u32 = 3;
/// The longest output line logged (the rest of it is dropped).
const MAX_LINE: usize = 4096;

/// What to install and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Whether an Ignition file was written ([`IGNITION_PATH`]).
    pub ignition: bool,
    /// `meta_data.coreos_append_karg`, joined with commas into one
    /// `--append-karg` as OpenShift's manager does.
    pub append_karg: Vec<String>,
    /// `instance_info.image_source`: `--image-url URL --insecure`; `None`:
    /// `--offline` (the live system's own image).
    pub image_url: Option<String>,
    /// `IPA_COREOS_IP_OPTIONS`: one more `--append-karg`, as given.
    pub ip_options: Option<String>,
    /// `--copy-network`.
    pub copy_network: bool,
    /// The root device.
    pub device: PathBuf,
}

/// `coreos-installer`'s arguments for `plan`, after `install`, in
/// OpenShift's order.
pub fn args(plan: &Plan) -> Vec<String> {
    let mut a = vec!["install".to_string(), "--preserve-on-error".to_string()];
    if plan.ignition {
        a.extend(["--ignition-file".into(), IGNITION_PATH.into()]);
    }
    if !plan.append_karg.is_empty() {
        a.extend(["--append-karg".into(), plan.append_karg.join(",")]);
    }
    match &plan.image_url {
        Some(url) => a.extend(["--image-url".into(), url.clone(), "--insecure".into()]),
        None => a.push("--offline".into()),
    }
    if let Some(ip) = plan.ip_options.as_deref().filter(|s| !s.is_empty()) {
        a.extend(["--append-karg".into(), ip.to_string()]);
    }
    if plan.copy_network {
        a.push("--copy-network".into());
    }
    a.push(plan.device.display().to_string());
    a
}

/// Why a `user_data` cannot carry the first-boot host name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IgnitionError {
    /// Text that is not JSON.
    #[error("configdrive.user_data is not a JSON Ignition config: {0}")]
    NotJson(String),
    /// JSON that is not an object.
    #[error("configdrive.user_data is not an Ignition config (a JSON object)")]
    NotObject,
    /// `storage` or `storage.files` of the wrong type.
    #[error("configdrive.user_data: {0} must be {1}")]
    Shape(&'static str, &'static str),
}

/// The Ignition config to install: `user_data` (an object, its JSON text,
/// or none) with the host name written to `/etc/hostname` on first boot,
/// as OpenShift's manager always adds it (an Ignition 3.0.0 skeleton when
/// there is no config). An empty `hostname` adds nothing.
pub fn with_firstboot_hostname(
    user_data: Option<&Value>,
    hostname: &str,
) -> Result<Option<Value>, IgnitionError> {
    let config = match user_data {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(
            serde_json::from_str::<Value>(s).map_err(|e| IgnitionError::NotJson(e.to_string()))?,
        ),
        Some(v) => Some(v.clone()),
    };
    let hostname = hostname.trim();
    if hostname.is_empty() {
        return Ok(config);
    }
    let mut config = match config {
        None => json!({"ignition": {"version": "3.0.0"}}),
        Some(Value::Object(m)) if m.is_empty() => json!({"ignition": {"version": "3.0.0"}}),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(IgnitionError::NotObject),
    };
    let storage = config
        .as_object_mut()
        .expect("an object")
        .entry("storage")
        .or_insert_with(|| json!({}));
    let storage = storage
        .as_object_mut()
        .ok_or(IgnitionError::Shape("storage", "an object"))?;
    let files = storage.entry("files").or_insert_with(|| json!([]));
    let files = files
        .as_array_mut()
        .ok_or(IgnitionError::Shape("storage.files", "a list"))?;
    files.push(json!({
        "path": "/etc/hostname",
        "mode": 0o644,
        "overwrite": true,
        "contents": {"source": format!("data:,{}", quote(hostname))},
    }));
    Ok(Some(config))
}

/// Percent-encodes `s` as Python's `urllib.parse.quote` (letters, digits,
/// `_.-~` and `/` stay).
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Writes the Ignition config to [`IGNITION_PATH`] under `root` (0600: it
/// may hold secrets).
pub fn write_ignition(root: &Path, config: &Value) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join(IGNITION_PATH.trim_start_matches('/'));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    f.write_all(&serde_json::to_vec(config).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    Ok(path)
}

/// Why the install failed (IPA's `DeploymentError` texts).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InstallError {
    /// `coreos-installer` (or the host's root) cannot be run.
    #[error("Cannot run coreos-installer, is it installed in {root}?")]
    NotInstalled {
        /// The host's root.
        root: String,
        /// Why the spawn failed (logged, not in IPA's text).
        reason: String,
    },
    /// It ended with a non-zero code (`-N` for signal N, as Python's).
    #[error("coreos-installer failed with code {code}: {last_line}")]
    Failed {
        /// The exit code.
        code: i32,
        /// Its last non-empty output line (`None` if there was none).
        last_line: String,
    },
    /// Its output could not be read or it could not be waited for.
    #[error("coreos-installer: {0}")]
    Io(String),
}

/// Runs `coreos-installer ARGS` chrooted into `root` up to [`ATTEMPTS`]
/// times; the last attempt's error is returned.
pub fn install(root: &Path, args: &[String]) -> Result<(), InstallError> {
    let mut last = None;
    for attempt in 1..=ATTEMPTS {
        match run_once(root, args) {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::error!(attempt, attempts = ATTEMPTS, "{e}");
                last = Some(e);
            }
        }
    }
    Err(last.expect("at least one attempt"))
}

/// One run, its output (stdout and stderr in one pipe) logged as it comes.
pub fn run_once(root: &Path, args: &[String]) -> Result<(), InstallError> {
    let mut cmd = super::command(root, "coreos-installer");
    // Its errors are anyhow's: a backtrace the agent's environment asks
    // for would replace the error as the last line IPA's text quotes.
    cmd.args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(std::process::Stdio::null());
    // One pipe for both streams, so lines keep their order (O_CLOEXEC: only
    // the child's dup'ed stdout and stderr stay open across its exec).
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| InstallError::Io(format!("making a pipe: {e}")))?;
    let writer2 = writer
        .try_clone()
        .map_err(|e| InstallError::Io(e.to_string()))?;
    let reader = std::fs::File::from(reader);
    cmd.stdout(writer).stderr(writer2);
    tracing::info!("Executing CoreOS installer: {}", super::cmdline(root, &cmd));
    let mut child = cmd.spawn().map_err(|e| {
        let err = InstallError::NotInstalled {
            root: root.display().to_string(),
            reason: e.to_string(),
        };
        tracing::error!("{err} ({e})");
        err
    })?;
    // The command still holds the pipe's write ends: dropped, so the
    // reader sees the end when the child exits.
    drop(cmd);
    let last = stream_lines(reader, |line| tracing::info!("coreos-installer: {line}"))
        .map_err(|e| InstallError::Io(format!("reading its output: {e}")))?;
    let status = child
        .wait()
        .map_err(|e| InstallError::Io(format!("waiting for it: {e}")))?;
    if status.success() {
        return Ok(());
    }
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| -s))
        .unwrap_or(-1);
    tracing::error!("coreos-installer failed with code {code}");
    Err(InstallError::Failed {
        code,
        last_line: last.unwrap_or_else(|| "None".into()),
    })
}

/// Reads `r` to its end, calling `each` per line (split at `\n` or `\r`,
/// trimmed, at most [`MAX_LINE`] bytes, invalid UTF-8 replaced); returns
/// the last non-empty line.
fn stream_lines(mut r: impl Read, mut each: impl FnMut(&str)) -> std::io::Result<Option<String>> {
    let mut last = None;
    let mut line = Vec::new();
    let mut buf = [0u8; 8192];
    let mut emit = |line: &mut Vec<u8>, last: &mut Option<String>| {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if !text.is_empty() {
            each(text);
            *last = Some(text.to_string());
        }
        line.clear();
    };
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for &b in &buf[..n] {
            if b == b'\n' || b == b'\r' {
                emit(&mut line, &mut last);
            } else if line.len() < MAX_LINE {
                line.push(b);
            }
        }
    }
    emit(&mut line, &mut last);
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            device: PathBuf::from("/dev/sda"),
            ..Plan::default()
        }
    }

    #[test]
    fn the_default_call_is_offline() {
        assert_eq!(
            args(&plan()),
            ["install", "--preserve-on-error", "--offline", "/dev/sda"]
        );
    }

    #[test]
    fn every_input_in_openshifts_order() {
        let p = Plan {
            ignition: true,
            append_karg: vec!["console=ttyS0".into(), "nosmt".into()],
            image_url: Some("http://h/rhcos.raw.gz".into()),
            ip_options: Some("ip=dhcp6".into()),
            copy_network: true,
            device: PathBuf::from("/dev/disk/by-path/pci-0000:00:1f.2-ata-1"),
        };
        assert_eq!(
            args(&p),
            [
                "install",
                "--preserve-on-error",
                "--ignition-file",
                "/tmp/ironic.ign",
                "--append-karg",
                "console=ttyS0,nosmt",
                "--image-url",
                "http://h/rhcos.raw.gz",
                "--insecure",
                "--append-karg",
                "ip=dhcp6",
                "--copy-network",
                "/dev/disk/by-path/pci-0000:00:1f.2-ata-1",
            ]
        );
        let p = Plan {
            ip_options: Some(String::new()),
            ..plan()
        };
        assert_eq!(
            args(&p).len(),
            4,
            "an empty IPA_COREOS_IP_OPTIONS adds nothing"
        );
    }

    fn hostname_entry(name: &str) -> Value {
        json!({"path": "/etc/hostname", "mode": 420, "overwrite": true,
            "contents": {"source": format!("data:,{name}")}})
    }

    #[test]
    fn the_hostname_goes_into_every_form_of_user_data() {
        // None, null, "" and {}: the 3.0.0 skeleton.
        for ud in [None, Some(json!(null)), Some(json!("")), Some(json!({}))] {
            assert_eq!(
                with_firstboot_hostname(ud.as_ref(), "worker-0").unwrap(),
                Some(json!({"ignition": {"version": "3.0.0"},
                    "storage": {"files": [hostname_entry("worker-0")]}})),
                "{ud:?}"
            );
        }
        // An object and its text, with files of their own.
        let cfg = json!({"ignition": {"version": "3.4.0"},
            "storage": {"files": [{"path": "/etc/motd"}]}});
        let want = json!({"ignition": {"version": "3.4.0"},
            "storage": {"files": [{"path": "/etc/motd"}, hostname_entry("a%20b%3Fc/d")]}});
        assert_eq!(
            with_firstboot_hostname(Some(&cfg), "a b?c/d").unwrap(),
            Some(want.clone())
        );
        let text = Value::String(cfg.to_string());
        assert_eq!(
            with_firstboot_hostname(Some(&text), "a b?c/d").unwrap(),
            Some(want)
        );
        // No host name: the config as given, none stays none.
        assert_eq!(with_firstboot_hostname(Some(&text), "").unwrap(), Some(cfg));
        assert_eq!(with_firstboot_hostname(None, " ").unwrap(), None);
    }

    #[test]
    fn user_data_that_cannot_take_the_hostname_is_refused_by_name() {
        let e = with_firstboot_hostname(Some(&json!("#cloud-config\n")), "h").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("configdrive.user_data is not a JSON Ignition config: "),
            "{e}"
        );
        assert_eq!(
            with_firstboot_hostname(Some(&json!("[1]")), "h").unwrap_err(),
            IgnitionError::NotObject
        );
        assert_eq!(
            with_firstboot_hostname(Some(&json!({"storage": []})), "h")
                .unwrap_err()
                .to_string(),
            "configdrive.user_data: storage must be an object"
        );
        assert_eq!(
            with_firstboot_hostname(Some(&json!({"storage": {"files": {}}})), "h")
                .unwrap_err()
                .to_string(),
            "configdrive.user_data: storage.files must be a list"
        );
    }

    #[test]
    fn ignition_is_written_private_under_the_root() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        let p = write_ignition(dir.path(), &json!({"ignition": {"version": "3.0.0"}})).unwrap();
        assert_eq!(p, dir.path().join("tmp/ironic.ign"));
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            r#"{"ignition":{"version":"3.0.0"}}"#
        );
        assert_eq!(p.metadata().unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn output_lines_are_split_bounded_and_the_last_kept() {
        let mut seen = Vec::new();
        let mut input = b"Installing\r\n\rRead disk 10%\rRead disk 100%\n".to_vec();
        input.extend(vec![b'x'; MAX_LINE + 10]);
        input.extend(b"\n\xff bad utf8\n\n  \n");
        let last = stream_lines(&input[..], |l| seen.push(l.to_string())).unwrap();
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[..3], ["Installing", "Read disk 10%", "Read disk 100%"]);
        assert_eq!(seen[3].len(), MAX_LINE);
        assert_eq!(last.as_deref(), Some("\u{fffd} bad utf8"));
        assert_eq!(stream_lines(&b""[..], |_| {}).unwrap(), None);
    }

    #[test]
    fn a_missing_root_is_ipas_cannot_run_error_after_three_tries() {
        let e = install(Path::new("/nonexistent/host/root"), &args(&plan())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Cannot run coreos-installer, is it installed in /nonexistent/host/root?"
        );
    }
}
