//! IPA 13's `[container]` options (`config.py`, `container_opts`) with
//! IPA's defaults: read from the agent's configuration files' `[container]`
//! group, then overlaid by the lookup answer's `agent_containers` object
//! option by option, as `agent.py` does with `set_override`. An option
//! this agent does not know, or a value that does not convert to the
//! option's type, is warned about and ignored (IPA's `NoSuchOptError` /
//! `ValueError` branches), never failing the lookup. One option is this
//! agent's own: `require_tls_verify`, which refuses unverified pulls
//! ([`super::policy`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

/// IPA's default `[container] container_steps_file`.
pub const DEFAULT_STEPS_FILE: &str = "/etc/ironic-python-agent.d/mysteps.yaml";

/// IPA's choices for `[container] runner`.
const RUNNERS: [&str; 2] = ["podman", "docker"];

/// The `[container]` group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSettings {
    /// Run any image a step argument names (`allow_arbitrary_containers`).
    pub allow_arbitrary_containers: bool,
    /// Images a step argument may name (`allowed_containers`, a ListOpt).
    pub allowed_containers: Vec<String>,
    /// The steps file baked into the ramdisk (`container_steps_file`).
    pub container_steps_file: PathBuf,
    /// IPA's runtime choice (`podman` or `docker`). Kept for the record:
    /// this agent always runs images with its own OCI runtime, whose
    /// options are podman's subset ([`super::options`]).
    pub runner: String,
    /// `pull_options` as a ListOpt holds them: comma-separated items, each
    /// later split on whitespace ([`as_options`]).
    pub pull_options: Vec<String>,
    /// `run_options`, likewise.
    pub run_options: Vec<String>,
    /// Refuse pulls with `--tls-verify=false` (`require_tls_verify`, this
    /// agent's option, not IPA's; also the kernel parameter
    /// `ipa-container-require-tls-verify`). Once on, it stays on: the
    /// lookup's `agent_containers` can turn it on, never off.
    pub require_tls_verify: bool,
}

impl Default for ContainerSettings {
    fn default() -> Self {
        ContainerSettings {
            allow_arbitrary_containers: false,
            allowed_containers: Vec::new(),
            container_steps_file: PathBuf::from(DEFAULT_STEPS_FILE),
            runner: "podman".into(),
            pull_options: Vec::new(),
            run_options: vec!["--rm".into(), "--network=host".into()],
            require_tls_verify: false,
        }
    }
}

/// One value as written in a file or sent by the conductor.
enum Raw<'a> {
    Text(&'a str),
    Json(&'a Value),
}

impl ContainerSettings {
    /// The settings from the configuration files' `[container]` group;
    /// each option that cannot be used adds a note and keeps IPA's default.
    pub fn from_group(group: &BTreeMap<String, String>, notes: &mut Vec<String>) -> Self {
        let mut out = ContainerSettings::default();
        for (key, value) in group {
            if let Err(why) = out.set(key, Raw::Text(value)) {
                notes.push(format!("[container] {key}: {why}; ignored"));
            }
        }
        out
    }

    /// These settings with the lookup answer's `agent_containers` applied
    /// over them. Like IPA, an empty or absent object changes nothing; a
    /// key that is not an option or a value that does not convert is
    /// skipped. Returns the notes, one per skipped key, for the caller to
    /// log.
    pub fn overlay(&mut self, agent_containers: Option<&Value>) -> Vec<String> {
        let mut notes = Vec::new();
        let Some(obj) = agent_containers.and_then(Value::as_object) else {
            return notes;
        };
        for (key, value) in obj {
            if let Err(why) = self.set(key, Raw::Json(value)) {
                notes.push(format!(
                    "[container] {key} sent by the conductor: {why}; ignored"
                ));
            }
        }
        notes
    }

    /// Sets one option, converting as oslo.config's types do.
    fn set(&mut self, key: &str, value: Raw<'_>) -> Result<(), String> {
        match key {
            "allow_arbitrary_containers" => self.allow_arbitrary_containers = boolean(value)?,
            "allowed_containers" => self.allowed_containers = list(value)?,
            "pull_options" => self.pull_options = list(value)?,
            "run_options" => self.run_options = list(value)?,
            // Only ever tightened: a later source cannot undo an earlier
            // source's demand for verified pulls.
            "require_tls_verify" => self.require_tls_verify |= boolean(value)?,
            "container_steps_file" => {
                let path = string(value)?;
                if path.is_empty() {
                    return Err("an empty path".into());
                }
                self.container_steps_file = PathBuf::from(path);
            }
            "runner" => {
                let runner = string(value)?;
                if !RUNNERS.contains(&runner.as_str()) {
                    return Err(format!(
                        "{runner:?} is not one of IPA's choices {RUNNERS:?}"
                    ));
                }
                self.runner = runner;
            }
            _ => return Err("not an IPA 13 [container] option nor this agent's".into()),
        }
        Ok(())
    }

    /// `pull_options` as the argv words IPA passes to the runtime.
    pub fn pull_words(&self) -> Vec<String> {
        as_options(&self.pull_options)
    }

    /// `run_options` as argv words.
    pub fn run_words(&self) -> Vec<String> {
        as_options(&self.run_options)
    }
}

/// IPA's `_as_options`: every item split on whitespace (an option value
/// with a literal space cannot be written).
pub fn as_options(items: &[String]) -> Vec<String> {
    items
        .iter()
        .flat_map(|i| i.split_whitespace())
        .map(String::from)
        .collect()
}

/// oslo.config's Boolean: a JSON boolean, or one of its words.
fn boolean(value: Raw<'_>) -> Result<bool, String> {
    let text = match value {
        Raw::Json(Value::Bool(b)) => return Ok(*b),
        Raw::Json(Value::String(s)) => s.as_str(),
        Raw::Text(s) => s,
        Raw::Json(other) => return Err(format!("{other} is not a boolean")),
    };
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean")),
    }
}

/// oslo.config's String: text, or a JSON number rendered.
fn string(value: Raw<'_>) -> Result<String, String> {
    match value {
        Raw::Text(s) => Ok(s.to_string()),
        Raw::Json(Value::String(s)) => Ok(s.clone()),
        Raw::Json(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        Raw::Json(other) => Err(format!("{other} is not a string")),
    }
}

/// oslo.config's List: a string splits on commas (items trimmed, empty
/// ones dropped); a JSON list takes each item as a string.
fn list(value: Raw<'_>) -> Result<Vec<String>, String> {
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(String::from)
            .collect()
    };
    match value {
        Raw::Text(s) => Ok(split(s)),
        Raw::Json(Value::String(s)) => Ok(split(s)),
        Raw::Json(Value::Array(items)) => items
            .iter()
            .map(|i| string(Raw::Json(i)))
            .collect::<Result<_, _>>(),
        Raw::Json(other) => Err(format!("{other} is not a list")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_ipas() {
        let s = ContainerSettings::default();
        assert!(!s.allow_arbitrary_containers);
        assert!(s.allowed_containers.is_empty());
        assert_eq!(s.container_steps_file, PathBuf::from(DEFAULT_STEPS_FILE));
        assert_eq!(s.run_words(), ["--rm", "--network=host"]);
        assert!(s.pull_words().is_empty());
    }

    #[test]
    fn the_file_group_converts_and_notes_what_it_skips() {
        let group: BTreeMap<String, String> = [
            ("allow_arbitrary_containers", "yes"),
            (
                "allowed_containers",
                "docker://r.example/a:1, r.example/b:2,",
            ),
            ("pull_options", "--tls-verify=false --creds u:p"),
            ("runner", "crun"),
            ("require_tls_verify", "on"),
            ("bogus", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut notes = Vec::new();
        let s = ContainerSettings::from_group(&group, &mut notes);
        assert!(s.allow_arbitrary_containers);
        assert_eq!(
            s.allowed_containers,
            ["docker://r.example/a:1", "r.example/b:2"]
        );
        assert_eq!(s.pull_words(), ["--tls-verify=false", "--creds", "u:p"]);
        assert_eq!(s.runner, "podman");
        assert!(s.require_tls_verify);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("[container] bogus")));
        assert!(notes.iter().any(|n| n.contains("\"crun\" is not one of")));
    }

    #[test]
    fn the_lookup_overlays_option_by_option() {
        let mut s = ContainerSettings {
            allowed_containers: vec!["from-file".into()],
            ..ContainerSettings::default()
        };
        // Ironic 39's defaults, as its lookup answer sends them, plus an
        // unknown option and a bad value.
        let notes = s.overlay(Some(&json!({
            "allow_arbitrary_containers": "maybe",
            "allowed_containers": ["r.example/tool:1"],
            "container_steps_file": "/etc/steps.yaml",
            "runner": "podman",
            "pull_options": "--tls-verify=false",
            "run_options": "--rm --network=host --tls-verify=false",
            "newer_option": 1,
        })));
        assert!(!s.allow_arbitrary_containers);
        assert_eq!(s.allowed_containers, ["r.example/tool:1"]);
        assert_eq!(s.container_steps_file, PathBuf::from("/etc/steps.yaml"));
        assert_eq!(s.pull_words(), ["--tls-verify=false"]);
        assert_eq!(
            s.run_words(),
            ["--rm", "--network=host", "--tls-verify=false"]
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("newer_option")));
        assert!(notes
            .iter()
            .any(|n| n.contains("\"maybe\" is not a boolean")));

        // require_tls_verify: the lookup may turn it on, never off.
        let notes = s.overlay(Some(&json!({"require_tls_verify": true})));
        assert!(notes.is_empty() && s.require_tls_verify, "{notes:?}");
        s.overlay(Some(&json!({"require_tls_verify": false})));
        assert!(s.require_tls_verify);
        s.require_tls_verify = false;

        // Not an object, or absent: nothing changes.
        let before = s.clone();
        assert!(s.overlay(Some(&json!("x"))).is_empty());
        assert!(s.overlay(None).is_empty());
        assert_eq!(s, before);
    }
}
