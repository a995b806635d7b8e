//! IPA's configuration files: INI files whose `[DEFAULT]` options override
//! the kernel command line (as in ironic-python-agent, where kernel
//! parameters are only the options' defaults). Ironic's virtual-media ISO
//! carries `etc/ironic-python-agent/ironic.crt` and
//! `etc/ironic-python-agent.d/ironic-tls.conf` (`cafile = …`), which the
//! ramdisk copies to `/etc` before reading these files.
//!
//! Read, later overriding earlier: `/etc/ironic-python-agent.conf`,
//! `/etc/ironic-python-agent/ironic-python-agent.conf`, then every `*.conf`
//! in `/etc/ironic-python-agent.d/` in name order (oslo.config's
//! `--config-dir`, which IPA's service uses). In OpenShift's container
//! ([`read_in_container`]) also every `*.conf` in `/etc/ironic-python-agent/`
//! first: that image's entrypoint is `ironic-python-agent --config-dir
//! /etc/ironic-python-agent`, where the unit mounts `ignition.conf`.

use std::path::{Path, PathBuf};

use super::{groups, image_server, Config, KernelParams};

/// The files read, relative to the root, before the directory.
pub const FILES: [&str; 2] = [
    "etc/ironic-python-agent.conf",
    "etc/ironic-python-agent/ironic-python-agent.conf",
];

/// The configuration directory, relative to the root.
pub const DIR: &str = "etc/ironic-python-agent.d";

/// The configuration directory of OpenShift's `ironic-agent` image,
/// relative to the root (its entrypoint's `--config-dir`).
pub const CONTAINER_DIR: &str = "etc/ironic-python-agent";

/// Largest configuration file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What the files say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Options as kernel parameters (`ipa-api-url`), in reading order.
    pub params: Vec<(String, String)>,
    /// `cafile`.
    pub cafile: Option<PathBuf>,
    /// Supported options that have no kernel parameter
    /// ([`super::ipa_params::file_only_option`]: `image_server_*`,
    /// `fail_if_clock_not_set`), option → value.
    pub file_only: std::collections::BTreeMap<String, String>,
    /// The option groups besides `[DEFAULT]` that are read
    /// ([`super::groups::READ`]), later files overriding earlier ones.
    pub groups: super::groups::Groups,
    /// One line per file read, option ignored or line not understood.
    pub notes: Vec<String>,
}

impl FileOptions {
    /// Lays these options over `params` (files win, as in IPA).
    pub fn apply_to(&self, params: &mut KernelParams) {
        for (k, v) in &self.params {
            params.set(k, v);
        }
    }

    /// Sets what the files say beyond the kernel parameters' options on
    /// `config` (made from `params`, these files' options laid over):
    /// the groups, the file-only options and `cafile`. Returns the lines to
    /// log, the files' own notes first.
    pub fn configure(&self, config: &mut Config, params: &KernelParams) -> Vec<String> {
        let mut notes = self.notes.clone();
        config.mdns = groups::mdns(&self.groups, &mut notes);
        config.apply_file_use_mdns(params, &mut notes);
        config.image_server_auth = image_server::from_options(&self.file_only, &mut notes);
        if let Some(v) = self.file_only.get("fail_if_clock_not_set") {
            match groups::oslo_bool(v) {
                Some(b) => config.fail_if_clock_not_set = b,
                None => notes.push(format!(
                    "fail_if_clock_not_set = {v:?} does not parse; false applies"
                )),
            }
        }
        config.metrics_defaults = groups::metrics_defaults(&self.groups, &mut notes);
        config.container_group = self.groups.get("container").cloned().unwrap_or_default();
        (
            config.efi_system_partition_mb,
            config.bios_boot_partition_mb,
        ) = groups::disk_utils(&self.groups, &mut notes);
        if let Some(ca) = &self.cafile {
            config.cafile = Some(ca.clone());
        }
        notes
    }
}

/// The files under `root` that are read, in order.
pub fn paths(root: &Path) -> Vec<PathBuf> {
    paths_with(root, &[DIR])
}

/// [`FILES`] under `root`, then every `*.conf` of each of `dirs` in name
/// order (a file already listed is not read twice).
fn paths_with(root: &Path, dirs: &[&str]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = FILES.iter().map(|f| root.join(f)).collect();
    for d in dirs {
        let mut dir: Vec<PathBuf> = std::fs::read_dir(root.join(d))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "conf"))
            .filter(|p| !out.contains(p))
            .collect();
        dir.sort();
        out.extend(dir);
    }
    out
}

/// Reads the configuration files under `root` (`/` in the ramdisk).
pub fn read(root: &Path) -> FileOptions {
    read_paths(paths(root))
}

/// Reads them as the agent in OpenShift's container does: [`FILES`], every
/// `*.conf` in [`CONTAINER_DIR`] (IPA's `00-defaults.conf`, the unit's
/// `ignition.conf`), then [`DIR`], later files overriding earlier ones.
pub fn read_in_container(root: &Path) -> FileOptions {
    read_paths(paths_with(root, &[CONTAINER_DIR, DIR]))
}

fn read_paths(paths: Vec<PathBuf>) -> FileOptions {
    let mut out = FileOptions::default();
    for path in paths {
        let text = match std::fs::metadata(&path) {
            Err(_) => continue,
            Ok(m) if !m.is_file() || m.len() > MAX_FILE_BYTES => {
                out.notes.push(format!(
                    "{}: ignored (not a regular file of at most {MAX_FILE_BYTES} bytes)",
                    path.display()
                ));
                continue;
            }
            Ok(_) => match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    out.notes
                        .push(format!("{}: unreadable: {e}", path.display()));
                    continue;
                }
            },
        };
        out.notes.push(format!("{}: read", path.display()));
        parse_into(&text, &path.display().to_string(), &mut out);
    }
    out
}

/// What one file's text says (`source` names it in the notes).
pub fn parse(text: &str, source: &str) -> FileOptions {
    let mut out = FileOptions::default();
    parse_into(text, source, &mut out);
    out
}

/// Parses one INI text: `[DEFAULT]`, and the groups of
/// [`super::groups::READ`].
fn parse_into(text: &str, source: &str, out: &mut FileOptions) {
    let mut section = String::from("DEFAULT");
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim().to_string();
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            out.notes
                .push(format!("{source}:{}: not `key = value`; ignored", n + 1));
            continue;
        };
        let key = key.trim().replace('-', "_");
        let value = value.trim().trim_matches('"').to_string();
        if super::groups::READ.contains(&section.as_str()) {
            out.groups
                .entry(section.clone())
                .or_default()
                .insert(key, value);
            continue;
        }
        if section != "DEFAULT" {
            continue;
        }
        if key == "cafile" {
            out.cafile = (!value.is_empty()).then(|| PathBuf::from(&value));
        } else if let Some(option) = super::ipa_params::file_only_option(&key) {
            out.file_only.insert(option.to_string(), value);
        } else if let Some(param) = super::ipa_params::file_option_param(&key) {
            out.params.push((param.to_string(), value));
        } else if let Some(why) = super::ipa_params::file_option_refusal(&key) {
            out.notes
                .push(format!("{source}: option {key} ignored: {why}"));
        } else {
            out.notes
                .push(format!("{source}: option {key} is not used by this agent"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ironics_tls_file_and_overrides_in_name_order() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join(DIR);
        std::fs::create_dir_all(&d).unwrap();
        // What Ironic injects into the virtual-media ISO.
        std::fs::write(
            d.join("ironic-tls.conf"),
            "[DEFAULT]\ncafile = /etc/ironic-python-agent/ironic.crt\n",
        )
        .unwrap();
        std::fs::write(
            d.join("00-site.conf"),
            "# site\n[DEFAULT]\napi_url = https://10.0.0.1:6385\ninsecure = true\n\
             certfile=/x\nwhatever = 1\n[oslo_log]\napi_url = nope\n",
        )
        .unwrap();
        std::fs::write(d.join("zz-late.conf"), "[DEFAULT]\ninsecure: false\n").unwrap();
        std::fs::write(d.join("notes.txt"), "[DEFAULT]\ndebug = 1\n").unwrap();
        std::fs::create_dir_all(root.path().join("etc/ironic-python-agent")).unwrap();
        std::fs::write(
            root.path().join(FILES[1]),
            "[DEFAULT]\nlookup_timeout = 300\nbroken line\n",
        )
        .unwrap();

        let o = read(root.path());
        assert_eq!(
            o.cafile.as_deref(),
            Some(Path::new("/etc/ironic-python-agent/ironic.crt"))
        );
        assert_eq!(
            o.params,
            vec![
                ("ipa-lookup-timeout".to_string(), "300".to_string()),
                ("ipa-api-url".into(), "https://10.0.0.1:6385".into()),
                ("ipa-insecure".into(), "true".into()),
                ("ipa-certfile".into(), "/x".into()),
                ("ipa-insecure".into(), "false".into()),
            ]
        );
        let notes = o.notes.join("\n");
        assert!(
            notes.contains("option whatever is not used by this agent"),
            "{notes}"
        );
        assert!(
            notes.contains("ironic-python-agent.conf:3: not `key = value`"),
            "{notes}"
        );
        assert!(
            !notes.contains("notes.txt"),
            "only *.conf files are read: {notes}"
        );

        // Files override the kernel command line; the last file wins.
        let mut p =
            KernelParams::parse("ipa-api-url=http://kernel:6385 ipa-insecure=1 ipa-debug=1");
        o.apply_to(&mut p);
        assert_eq!(p.get("ipa-api-url"), Some("https://10.0.0.1:6385"));
        assert_eq!(p.get("ipa-insecure"), Some("false"));
        assert_eq!(p.get("ipa-debug"), Some("1"));
    }

    #[test]
    fn the_container_reads_its_config_dir_in_name_order_before_the_d_dir() {
        let root = tempfile::tempdir().unwrap();
        let c = root.path().join(CONTAINER_DIR);
        std::fs::create_dir_all(&c).unwrap();
        std::fs::create_dir_all(root.path().join(DIR)).unwrap();
        // As OpenShift's unit mounts it, beside IPA's image defaults.
        std::fs::write(
            c.join("ignition.conf"),
            "[DEFAULT]\napi_url = http://10.0.0.1:6385\ninsecure = True\n",
        )
        .unwrap();
        std::fs::write(
            c.join("00-defaults.conf"),
            "[DEFAULT]\napi_url = http://defaults:6385\nlisten_port = 9998\n",
        )
        .unwrap();
        std::fs::write(c.join("ironic.crt"), "not a conf file").unwrap();
        std::fs::write(
            c.join(FILES[1].rsplit('/').next().unwrap()),
            "[DEFAULT]\ndebug = 1\n",
        )
        .unwrap();
        std::fs::write(
            root.path().join(DIR).join("late.conf"),
            "[DEFAULT]\nlisten_port = 9997\n",
        )
        .unwrap();
        let o = read_in_container(root.path());
        let done: Vec<&str> = o
            .notes
            .iter()
            .filter(|n| n.ends_with(": read"))
            .map(String::as_str)
            .collect();
        assert_eq!(done.len(), 4, "each file once: {done:?}");
        let mut p = KernelParams::parse("ipa-api-url=http://kernel:6385");
        o.apply_to(&mut p);
        assert_eq!(
            p.get("ipa-api-url"),
            Some("http://10.0.0.1:6385"),
            "ignition.conf after 00-defaults.conf"
        );
        assert_eq!(
            p.get("ipa-listen-port"),
            Some("9997"),
            "the .d directory last"
        );
        assert_eq!(p.get("ipa-insecure"), Some("True"));
        // The ramdisk's reading is unchanged: not the container directory.
        let mut p = KernelParams::parse("");
        read(root.path()).apply_to(&mut p);
        assert_eq!(p.get("ipa-api-url"), None);
    }

    #[test]
    fn no_files_no_options() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()), FileOptions::default());
    }
}
