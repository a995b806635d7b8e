//! The container steps file baked into the ramdisk (`[container]
//! container_steps_file`), read as IPA 13 reads it: a YAML mapping whose
//! `steps` is a list of steps, each with `name` and `image` (checked when
//! the file is loaded), `priority`, `interface`, `reboot_requested` and
//! `abortable` (checked when the steps are advertised), and optional
//! `pull_options` / `run_options`. A missing file is no steps; a file that
//! cannot be read or parsed is a configuration error, never "no steps".
//!
//! Stricter than IPA where IPA would pass a value on that breaks later:
//! `name` and `image` must be strings, `priority` a non-negative integer,
//! `interface` a string, `reboot_requested` and `abortable` booleans, and
//! a name may not start with `_` (IPA advertises such a step and then
//! cannot resolve it).
//!
//! Priorities are honoured for clean steps only: the same steps are
//! offered as deploy and service steps with priority 0, so a container
//! meant for cleaning never fires on every deployment or service.

use std::path::Path;

use serde_json::{json, Value as Json};
use serde_yaml_ng::Value;

use super::settings::as_options;
use super::ContainerError;

/// The step names this manager itself answers to.
pub const GENERIC_STEP: &str = "generic_container_step";
/// IPA's deprecated alias of [`GENERIC_STEP`].
pub const DEPRECATED_STEP: &str = "container_clean_step";

/// One step of the file, as needed to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileStep {
    /// The step's name.
    pub name: String,
    /// The image reference.
    pub image: String,
    /// Its own `pull_options` words (empty: the configured ones).
    pub pull_words: Vec<String>,
    /// Its own `run_options` words.
    pub run_words: Vec<String>,
    /// The mapping as written, for the keys read when advertising.
    raw: serde_yaml_ng::Mapping,
}

/// A step as advertised to the conductor (`get_*_steps`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AdvertisedStep {
    /// The step's name.
    pub step: String,
    /// Its priority (0: runs only when asked for).
    pub priority: u32,
    /// The conductor interface it belongs to.
    pub interface: String,
    /// Whether the node reboots after it.
    pub reboot_requested: bool,
    /// Whether it may be aborted.
    pub abortable: bool,
    /// The arguments it takes (the generic step only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argsinfo: Option<Json>,
}

/// IPA's two generic steps: priority 0, deploy interface, abortable, with
/// their `argsinfo`.
pub fn builtin_steps() -> Vec<AdvertisedStep> {
    [GENERIC_STEP, DEPRECATED_STEP]
        .into_iter()
        .map(|name| AdvertisedStep {
            step: name.to_string(),
            priority: 0,
            interface: "deploy".into(),
            reboot_requested: false,
            abortable: true,
            argsinfo: Some(json!({
                "container_url": {"description": "Container image URL", "required": true},
                "pull_options": {"description": "Pull options", "required": false},
                "run_options": {"description": "Run options", "required": false},
            })),
        })
        .collect()
}

/// The steps of one file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepsFile {
    /// The file's path, for messages.
    pub path: String,
    /// Its steps, in order.
    pub steps: Vec<FileStep>,
}

/// Python's name for a YAML value's type, as IPA's messages say it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Sequence(_) => "list",
        Value::Mapping(_) => "dict",
        Value::Tagged(_) => "tagged value",
    }
}

/// Python's truth of a value (`not value`).
fn falsy(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        Value::Tagged(_) => false,
    }
}

/// Python's `str()` of a scalar, for naming a step in a message.
fn display(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => format!("<{}>", type_name(other)),
    }
}

impl StepsFile {
    /// Reads `path`; a missing file is no steps.
    pub fn load(path: &Path) -> Result<StepsFile, ContainerError> {
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!("No container steps file at {shown}");
                return Ok(StepsFile {
                    path: shown,
                    steps: Vec::new(),
                });
            }
            Err(e) => {
                return Err(ContainerError::Configuration(format!(
                    "Could not read container steps from {shown}: {e}"
                )))
            }
        };
        StepsFile::parse(&text, &shown)
    }

    /// Parses the file's text; `path` names it in messages.
    pub fn parse(text: &str, path: &str) -> Result<StepsFile, ContainerError> {
        let conf = |msg: String| ContainerError::Configuration(msg);
        let data: Value = serde_yaml_ng::from_str(text)
            .map_err(|e| conf(format!("Could not read container steps from {path}: {e}")))?;
        let mut out = StepsFile {
            path: path.to_string(),
            steps: Vec::new(),
        };
        let map = match data {
            Value::Null => return Ok(out),
            Value::Mapping(m) => m,
            other => {
                return Err(conf(format!(
                "Container steps file {path} must contain a mapping with a 'steps' key, got {}.",
                type_name(&other)
            )))
            }
        };
        let steps = match map.get("steps") {
            None => return Ok(out),
            Some(s) if falsy(s) => return Ok(out),
            Some(Value::Sequence(s)) => s,
            Some(other) => {
                return Err(conf(format!(
                    "'steps' in {path} must be a list, got {}.",
                    type_name(other)
                )))
            }
        };
        for step in steps {
            out.steps.push(file_step(step, path)?);
        }
        Ok(out)
    }

    /// The step named `name`, if the file has one (the first, as IPA).
    pub fn find(&self, name: &str) -> Option<&FileStep> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The file's steps as advertised: with their priority when
    /// `automatic` (clean steps), 0 otherwise (deploy and service steps).
    /// `reserved` says whether a name belongs to an existing step or
    /// method of any hardware manager; a file step may not shadow one.
    pub fn advertised(
        &self,
        automatic: bool,
        reserved: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<AdvertisedStep>, ContainerError> {
        let conf = |msg: String| ContainerError::Configuration(msg);
        let mut out = Vec::new();
        for step in &self.steps {
            let name = &step.name;
            if name == GENERIC_STEP || name == DEPRECATED_STEP || reserved(name) {
                return Err(conf(format!(
                    "Container step '{name}' collides with an existing hardware manager method and \
                     would shadow it. Rename it in {}.",
                    self.path
                )));
            }
            // Every key is read in every phase, so a file missing one
            // fails the same way whether or not its priority is used.
            let key = |k: &str| {
                step.raw.get(k).ok_or_else(|| {
                    tracing::error!("Missing key '{k}' in cleaning step: {name}");
                    conf(format!(
                        "Missing required key '{k}' in cleaning step: {name}"
                    ))
                })
            };
            let bad = |k: &str, want: &str, v: &Value| {
                conf(format!(
                    "Container step '{name}' in {}: '{k}' must be {want}, got {}.",
                    self.path,
                    type_name(v)
                ))
            };
            let priority = key("priority")?;
            let priority = priority
                .as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| bad("priority", "a non-negative integer", priority))?;
            let interface = key("interface")?;
            let interface = interface
                .as_str()
                .ok_or_else(|| bad("interface", "a string", interface))?;
            let reboot = key("reboot_requested")?;
            let reboot = reboot
                .as_bool()
                .ok_or_else(|| bad("reboot_requested", "a boolean", reboot))?;
            let abortable = key("abortable")?;
            let abortable = abortable
                .as_bool()
                .ok_or_else(|| bad("abortable", "a boolean", abortable))?;
            out.push(AdvertisedStep {
                step: name.clone(),
                priority: if automatic { priority } else { 0 },
                interface: interface.to_string(),
                reboot_requested: reboot,
                abortable,
                argsinfo: None,
            });
        }
        Ok(out)
    }
}

/// One entry of `steps`, checked as IPA's `_validate_step` does.
fn file_step(step: &Value, path: &str) -> Result<FileStep, ContainerError> {
    let conf = |msg: String| ContainerError::Configuration(msg);
    let Value::Mapping(map) = step else {
        return Err(conf(format!(
            "Each container step in {path} must be a mapping, got {}.",
            type_name(step)
        )));
    };
    let shown_name = map.get("name").map_or("<unnamed>".into(), display);
    let text = |key: &str| -> Result<String, ContainerError> {
        match map.get(key) {
            Some(v) if !falsy(v) => v.as_str().map(String::from).ok_or_else(|| {
                conf(format!(
                    "Container step '{shown_name}' in {path}: '{key}' must be a string, got {}.",
                    type_name(v)
                ))
            }),
            _ => Err(conf(format!(
                "Container step '{shown_name}' in {path} is missing the required '{key}' key."
            ))),
        }
    };
    let name = text("name")?;
    let image = text("image")?;
    if name.starts_with('_') {
        return Err(conf(format!(
            "Container step '{name}' in {path}: a step name may not start with '_'."
        )));
    }
    let words = |key: &str| -> Result<Vec<String>, ContainerError> {
        match map.get(key) {
            None => Ok(Vec::new()),
            Some(v) if falsy(v) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(as_options(std::slice::from_ref(s))),
            Some(Value::Sequence(items)) => {
                let mut out = Vec::new();
                for item in items {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        other => {
                            return Err(conf(format!(
                                "Container step '{name}' in {path}: each item of '{key}' must be a string, got {}.",
                                type_name(other)
                            )))
                        }
                    }
                }
                Ok(as_options(&out))
            }
            Some(other) => Err(conf(format!(
                "Container step '{name}' in {path}: '{key}' must be a string or a list, got {}.",
                type_name(other)
            ))),
        }
    };
    Ok(FileStep {
        pull_words: words("pull_options")?,
        run_words: words("run_options")?,
        name,
        image,
        raw: map.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/etc/steps.yaml";

    fn err(text: &str) -> String {
        StepsFile::parse(text, P).unwrap_err().to_string()
    }

    const GOOD: &str = "
steps:
  - name: write_marker
    image: docker://r.example/tool:1
    priority: 30
    interface: deploy
    reboot_requested: false
    abortable: true
    run_options: --rm --device /dev/sdb
  - name: firmware
    image: r.example/fw:2
    priority: 0
    interface: management
    reboot_requested: true
    abortable: false
    pull_options: [--tls-verify=false, --creds u:p]
";

    #[test]
    fn a_good_file_parses() {
        let f = StepsFile::parse(GOOD, P).unwrap();
        assert_eq!(f.steps.len(), 2);
        let s = f.find("write_marker").unwrap();
        assert_eq!(s.image, "docker://r.example/tool:1");
        assert_eq!(s.run_words, ["--rm", "--device", "/dev/sdb"]);
        assert!(s.pull_words.is_empty());
        let fw = f.find("firmware").unwrap();
        assert_eq!(fw.pull_words, ["--tls-verify=false", "--creds", "u:p"]);
        assert!(f.find("nope").is_none());
    }

    #[test]
    fn priorities_only_for_clean_steps() {
        let f = StepsFile::parse(GOOD, P).unwrap();
        let clean = f.advertised(true, &|_| false).unwrap();
        assert_eq!(clean[0].priority, 30);
        assert_eq!(clean[0].interface, "deploy");
        assert!(clean[0].abortable && !clean[0].reboot_requested);
        assert!(clean[1].reboot_requested && !clean[1].abortable);
        let deploy = f.advertised(false, &|_| false).unwrap();
        assert!(deploy.iter().all(|s| s.priority == 0));
        assert_eq!(deploy.len(), 2);
    }

    #[test]
    fn empty_or_missing_means_no_steps() {
        for text in ["", "steps:", "steps: []", "other: 1", "~"] {
            assert!(
                StepsFile::parse(text, P).unwrap().steps.is_empty(),
                "{text:?}"
            );
        }
        let missing = StepsFile::load(Path::new("/nonexistent/steps.yaml")).unwrap();
        assert!(missing.steps.is_empty());
    }

    #[test]
    fn unusable_files_say_why() {
        assert!(
            err("steps: [").starts_with("Could not read container steps from /etc/steps.yaml: ")
        );
        assert_eq!(
            err("- a\n- b"),
            "Container steps file /etc/steps.yaml must contain a mapping with a 'steps' key, got list."
        );
        assert_eq!(
            err("steps: 3"),
            "'steps' in /etc/steps.yaml must be a list, got int."
        );
        assert_eq!(
            err("steps: [x]"),
            "Each container step in /etc/steps.yaml must be a mapping, got str."
        );
        assert_eq!(
            err("steps: [{image: a}]"),
            "Container step '<unnamed>' in /etc/steps.yaml is missing the required 'name' key."
        );
        assert_eq!(
            err("steps: [{name: s, image: ''}]"),
            "Container step 's' in /etc/steps.yaml is missing the required 'image' key."
        );
        assert!(err("steps: [{name: 5, image: a}]").contains("'name' must be a string, got int"));
        assert!(err("steps: [{name: _x, image: a}]").contains("may not start with '_'"));
        assert!(err("steps: [{name: s, image: a, run_options: {a: 1}}]")
            .contains("'run_options' must be a string or a list, got dict"));
    }

    #[test]
    fn advertising_checks_keys_and_reserved_names() {
        let f = StepsFile::parse("steps: [{name: s, image: a, priority: 1}]", P).unwrap();
        // Resolvable for running, though not advertisable (as IPA).
        assert!(f.find("s").is_some());
        let e = f.advertised(false, &|_| false).unwrap_err().to_string();
        assert_eq!(e, "Missing required key 'interface' in cleaning step: s");

        let f = StepsFile::parse(
            "steps: [{name: s, image: a, priority: -1, interface: deploy, reboot_requested: false, abortable: true}]",
            P,
        )
        .unwrap();
        let e = f.advertised(true, &|_| false).unwrap_err().to_string();
        assert!(
            e.contains("'priority' must be a non-negative integer, got int"),
            "{e}"
        );

        for name in ["erase_devices_metadata", GENERIC_STEP, DEPRECATED_STEP] {
            let text = format!(
                "steps: [{{name: {name}, image: a, priority: 1, interface: deploy, reboot_requested: false, abortable: true}}]"
            );
            let f = StepsFile::parse(&text, P).unwrap();
            let e = f
                .advertised(true, &|n| n == "erase_devices_metadata")
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!(
                    "Container step '{name}' collides with an existing hardware manager method and would shadow it. Rename it in /etc/steps.yaml."
                )
            );
        }
    }

    #[test]
    fn the_builtin_steps_are_ipas() {
        let b = builtin_steps();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].step, GENERIC_STEP);
        assert_eq!(b[1].step, DEPRECATED_STEP);
        let j = serde_json::to_value(&b[0]).unwrap();
        assert_eq!(j["argsinfo"]["container_url"]["required"], true);
        assert_eq!(j["priority"], 0);
        assert_eq!(j["interface"], "deploy");
    }
}
