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
//! `--config-dir`, which IPA's service uses).

use std::path::{Path, PathBuf};

use super::KernelParams;

/// The files read, relative to the root, before the directory.
pub const FILES: [&str; 2] = [
    "etc/ironic-python-agent.conf",
    "etc/ironic-python-agent/ironic-python-agent.conf",
];

/// The configuration directory, relative to the root.
pub const DIR: &str = "etc/ironic-python-agent.d";

/// Largest configuration file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What the files say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Options as kernel parameters (`ipa-api-url`), in reading order.
    pub params: Vec<(String, String)>,
    /// `cafile`.
    pub cafile: Option<PathBuf>,
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
}

/// The files under `root` that are read, in order.
pub fn paths(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = FILES.iter().map(|f| root.join(f)).collect();
    let mut dir: Vec<PathBuf> = std::fs::read_dir(root.join(DIR))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .collect();
    dir.sort();
    out.extend(dir);
    out
}

/// Reads the configuration files under `root` (`/` in the ramdisk).
pub fn read(root: &Path) -> FileOptions {
    let mut out = FileOptions::default();
    for path in paths(root) {
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
    fn no_files_no_options() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(read(root.path()), FileOptions::default());
    }
}
