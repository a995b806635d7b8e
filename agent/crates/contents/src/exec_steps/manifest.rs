//! The manifest of an executable hardware manager: one YAML file naming the
//! manager, its steps (each an executable with its interface, priorities
//! per phase, `argsinfo`, time limit) and its optional per-disk erase,
//! inspection and root-disk (`os_install_device`) hooks; parsed, checked and turned into [`ExecManager`] here
//! (a directory of them: [`super::dir`]).
//! The reference for operators is `agent/docs/own-steps.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_yaml_ng::Value;

/// IPA's `HardwareSupport.SERVICE_PROVIDER`: the support level of a manager
/// whose manifest does not say.
pub(crate) const DEFAULT_SUPPORT: u32 = 3;

/// A hook's time limit when its manifest does not give one.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The longest time limit a manifest may ask for (a week).
const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// The Ironic step interfaces a step may belong to (Ironic's conductor
/// orders clean steps of equal priority by interface: power, management,
/// deploy, firmware, bios, raid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interface {
    /// `deploy`.
    Deploy,
    /// `raid`.
    Raid,
    /// `bios`.
    Bios,
    /// `management`.
    Management,
    /// `firmware`.
    Firmware,
    /// `power`.
    Power,
}

impl Interface {
    /// The name Ironic uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deploy => "deploy",
            Self::Raid => "raid",
            Self::Bios => "bios",
            Self::Management => "management",
            Self::Firmware => "firmware",
            Self::Power => "power",
        }
    }
}

impl fmt::Display for Interface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An executable and how to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The executable, resolved against the manifest's directory.
    pub executable: PathBuf,
    /// Its arguments (argv after the executable).
    pub args: Vec<String>,
    /// Its time limit; it is killed after this.
    pub timeout: Duration,
}

/// One argument a step accepts, as Ironic's `argsinfo` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgSpec {
    /// The argument's name.
    pub name: String,
    /// What it means, for the operator.
    pub description: String,
    /// Whether Ironic must pass it.
    pub required: bool,
}

/// One step an executable manager offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecStep {
    /// The step's name (an identifier, unique in its manifest).
    pub name: String,
    /// The Ironic interface it belongs to.
    pub interface: Interface,
    /// Its priority as a clean step; `None`: not a clean step.
    pub clean_priority: Option<u32>,
    /// Its priority as a deploy step; `None`: not a deploy step.
    pub deploy_priority: Option<u32>,
    /// Its priority as a service step; `None`: not a service step.
    pub service_priority: Option<u32>,
    /// Whether Ironic reboots the node after it.
    pub reboot_requested: bool,
    /// Whether Ironic may abort it while it runs.
    pub abortable: bool,
    /// The arguments it accepts, by name.
    pub argsinfo: Vec<ArgSpec>,
    /// What runs.
    pub hook: Hook,
}

/// An executable hardware manager, as its manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecManager {
    /// The manifest file it came from (for messages).
    pub path: PathBuf,
    /// The manager's name (an identifier).
    pub name: String,
    /// Its version, reported to Ironic with its name.
    pub version: String,
    /// IPA's hardware support level; 0 disables the manager.
    pub support: u32,
    /// Its steps.
    pub steps: Vec<ExecStep>,
    /// Its per-disk erase method, if any.
    pub erase_block_device: Option<Hook>,
    /// Its inspection data collector, if any.
    pub inspect: Option<Hook>,
    /// Its choice of the disk the image is written to (IPA's
    /// `get_os_install_device`), if any.
    pub os_install_device: Option<Hook>,
}

/// Why a manifest (or the directory of manifests) was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The directory or the file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// What could not be read.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not YAML, or its top level is not a manifest.
    #[error("{}: {message}", path.display())]
    Syntax {
        /// The manifest.
        path: PathBuf,
        /// The parser's message (with the line where it knows it).
        message: String,
    },
    /// A field has a value the agent refuses.
    #[error("{}: {}{field} {problem}", path.display(), StepPrefix(step.as_deref()))]
    Invalid {
        /// The manifest.
        path: PathBuf,
        /// The step (its name, or `steps[i]` without one); `None` for a
        /// manager-level field.
        step: Option<String>,
        /// The field.
        field: String,
        /// What is wrong with it (follows the field's name).
        problem: String,
    },
    /// Two manifests of the directory declare the same manager or step.
    #[error("{}: {what} is already declared by {}", path.display(), other.display())]
    Clash {
        /// The manifest refused.
        path: PathBuf,
        /// `manager "x"` or `step "y"`.
        what: String,
        /// The manifest that declared it first.
        other: PathBuf,
    },
}

/// `step "x": ` before a step's field, nothing before the manager's.
struct StepPrefix<'a>(Option<&'a str>);

impl fmt::Display for StepPrefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(s) if s.starts_with("steps[") => write!(f, "{s}: "),
            Some(s) => write!(f, "step \"{s}\": "),
            None => Ok(()),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    version: Value,
    #[serde(default)]
    support: Option<u32>,
    #[serde(default)]
    steps: Vec<Value>,
    #[serde(default)]
    erase_block_device: Option<Value>,
    #[serde(default)]
    inspect: Option<Value>,
    #[serde(default)]
    os_install_device: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: String,
    executable: String,
    #[serde(default)]
    args: Vec<String>,
    interface: Interface,
    #[serde(default)]
    clean_priority: Option<u32>,
    #[serde(default)]
    deploy_priority: Option<u32>,
    #[serde(default)]
    service_priority: Option<u32>,
    #[serde(default)]
    reboot_requested: bool,
    #[serde(default)]
    abortable: bool,
    #[serde(default)]
    argsinfo: BTreeMap<String, RawArg>,
    #[serde(default)]
    timeout: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArg {
    #[serde(default)]
    description: String,
    #[serde(default)]
    required: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHook {
    executable: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    timeout: Option<u64>,
}

/// Whether `s` is an identifier: a letter or `_`, then letters, digits, `_`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Builds the errors of one manifest.
struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn invalid(&self, step: Option<&str>, field: &str, problem: String) -> ManifestError {
        ManifestError::Invalid {
            path: self.path.to_path_buf(),
            step: step.map(str::to_string),
            field: field.to_string(),
            problem,
        }
    }

    /// `executable` resolved against the manifest's directory, checked to be
    /// an executable file.
    fn executable(
        &self,
        step: Option<&str>,
        field: &str,
        exe: &str,
    ) -> Result<PathBuf, ManifestError> {
        if exe.is_empty() {
            return Err(self.invalid(step, field, "is empty".into()));
        }
        let dir = self.path.parent().unwrap_or(Path::new(""));
        let full = dir.join(exe);
        let meta = match std::fs::metadata(&full) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(self.invalid(step, field, format!("{exe} does not exist")));
            }
            Err(e) => return Err(self.invalid(step, field, format!("{exe}: {e}"))),
        };
        if !meta.is_file() {
            return Err(self.invalid(step, field, format!("{exe} is not a file")));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(self.invalid(step, field, format!("{exe} is not executable")));
        }
        Ok(full)
    }

    fn timeout(
        &self,
        step: Option<&str>,
        field: &str,
        secs: Option<u64>,
    ) -> Result<Duration, ManifestError> {
        match secs {
            None => Ok(DEFAULT_TIMEOUT),
            Some(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => Ok(Duration::from_secs(s)),
            Some(s) => Err(self.invalid(
                step,
                field,
                format!("{s} is out of range (1 to {MAX_TIMEOUT_SECS} seconds)"),
            )),
        }
    }

    fn hook(&self, field: &str, raw: Value) -> Result<Hook, ManifestError> {
        let raw: RawHook = serde_yaml_ng::from_value(raw)
            .map_err(|e| self.invalid(None, field, format!("is not a hook: {e}")))?;
        Ok(Hook {
            executable: self.executable(None, &format!("{field}.executable"), &raw.executable)?,
            args: raw.args,
            timeout: self.timeout(None, &format!("{field}.timeout"), raw.timeout)?,
        })
    }

    fn step(&self, index: usize, raw: Value) -> Result<ExecStep, ManifestError> {
        // Errors name the step by its name when it has a usable one.
        let label = raw
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| is_identifier(n))
            .map_or_else(|| format!("steps[{index}]"), str::to_string);
        let s = Some(label.as_str());
        let raw: RawStep = serde_yaml_ng::from_value(raw).map_err(|e| ManifestError::Invalid {
            path: self.path.to_path_buf(),
            step: Some(label.clone()),
            field: "step".into(),
            problem: format!("is refused: {e}"),
        })?;
        if !is_identifier(&raw.name) {
            return Err(self.invalid(s, "name", format!("{:?} is not an identifier", raw.name)));
        }
        if raw.clean_priority.is_none()
            && raw.deploy_priority.is_none()
            && raw.service_priority.is_none()
        {
            return Err(self.invalid(
                s,
                "clean_priority",
                "is missing, and so are deploy_priority and service_priority: the step would be \
                 in no phase"
                    .into(),
            ));
        }
        let mut argsinfo = Vec::with_capacity(raw.argsinfo.len());
        for (name, arg) in raw.argsinfo {
            if !is_identifier(&name) {
                return Err(self.invalid(s, "argsinfo", format!("{name:?} is not an identifier")));
            }
            argsinfo.push(ArgSpec {
                name,
                description: arg.description,
                required: arg.required,
            });
        }
        Ok(ExecStep {
            hook: Hook {
                executable: self.executable(s, "executable", &raw.executable)?,
                args: raw.args,
                timeout: self.timeout(s, "timeout", raw.timeout)?,
            },
            name: raw.name,
            interface: raw.interface,
            clean_priority: raw.clean_priority,
            deploy_priority: raw.deploy_priority,
            service_priority: raw.service_priority,
            reboot_requested: raw.reboot_requested,
            abortable: raw.abortable,
            argsinfo,
        })
    }
}

/// Parses and checks the manifest `text` read from `path` (executables are
/// resolved against `path`'s directory and must be executable files).
pub fn parse_manifest(text: &str, path: &Path) -> Result<ExecManager, ManifestError> {
    let cx = Ctx { path };
    let raw: RawManifest = serde_yaml_ng::from_str(text).map_err(|e| ManifestError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if !is_identifier(&raw.name) {
        return Err(cx.invalid(None, "name", format!("{:?} is not an identifier", raw.name)));
    }
    // `version: 1.2` is a number to YAML; the operator meant the string.
    let version = match raw.version {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        other => {
            return Err(cx.invalid(
                None,
                "version",
                format!("must be a string, not {}", yaml_kind(&other)),
            ))
        }
    };
    if version.is_empty() {
        return Err(cx.invalid(None, "version", "is empty".into()));
    }
    let mut steps = Vec::with_capacity(raw.steps.len());
    let mut names = BTreeSet::new();
    for (i, s) in raw.steps.into_iter().enumerate() {
        let step = cx.step(i, s)?;
        if !names.insert(step.name.clone()) {
            return Err(cx.invalid(Some(&step.name), "name", "is declared twice".into()));
        }
        steps.push(step);
    }
    let erase_block_device = raw
        .erase_block_device
        .map(|h| cx.hook("erase_block_device", h))
        .transpose()?;
    let inspect = raw.inspect.map(|h| cx.hook("inspect", h)).transpose()?;
    let os_install_device = raw
        .os_install_device
        .map(|h| cx.hook("os_install_device", h))
        .transpose()?;
    Ok(ExecManager {
        path: path.to_path_buf(),
        name: raw.name,
        version,
        support: raw.support.unwrap_or(DEFAULT_SUPPORT),
        steps,
        erase_block_device,
        inspect,
        os_install_device,
    })
}

fn yaml_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}
