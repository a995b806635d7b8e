//! The files of an `inject_files` request, checked as IPA checks them
//! (`_validate_files`), with IPA's messages.

use serde_json::{Map, Value};

use super::InjectError;

/// One file to write or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// Absolute path inside the partition (`/etc/sysctl.d/x.conf`).
    pub path: String,
    /// Partition number or device; `None`: found by the path's first directory.
    pub partition: Option<String>,
    /// Base64 content, or an http(s) URL.
    pub content: Option<String>,
    /// Delete the file instead.
    pub deleted: bool,
    /// File mode.
    pub mode: Option<u32>,
    /// Mode of the leaf directory if it is created.
    pub dirmode: Option<u32>,
    /// Owner uid.
    pub owner: Option<u32>,
    /// Group gid.
    pub group: Option<u32>,
}

impl FileSpec {
    /// The path without leading `/`, `.` and empty components.
    pub fn relative_path(&self) -> String {
        self.path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect::<Vec<_>>()
            .join("/")
    }
}

const FIELDS: [&str; 8] = [
    "path",
    "partition",
    "content",
    "deleted",
    "mode",
    "dirmode",
    "owner",
    "group",
];

fn one(fl: &Map<String, Value>, failures: &mut Vec<String>) -> Option<FileSpec> {
    let shown = Value::Object(fl.clone()).to_string();
    let mut unknown: Vec<&str> = fl
        .keys()
        .map(String::as_str)
        .filter(|k| !FIELDS.contains(k))
        .collect();
    unknown.sort_unstable();
    if !unknown.is_empty() {
        failures.push(format!(
            "unexpected fields in {shown}: {}",
            unknown.join(", ")
        ));
    }
    let path = fl.get("path").and_then(Value::as_str).unwrap_or_default();
    let partition = match fl.get("partition") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(_) => {
            failures.push(format!("partition must be a number or a device in {shown}"));
            None
        }
    };
    if path.is_empty() {
        failures.push(format!("expected a path in {shown}"));
    } else if !path.starts_with('/') {
        failures.push(format!("{shown}: the path must be absolute"));
    } else if path.split('/').any(|c| c == "..") {
        failures.push(format!("{shown}: the path must not contain .."));
    } else if path.ends_with('/') {
        failures.push(format!("directories not supported for {shown}"));
    } else if path.rsplit_once('/').is_some_and(|(d, _)| d.is_empty()) && partition.is_none() {
        failures.push(format!("{shown} in root directory requires \"partition\""));
    }
    let content = match fl.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            failures.push(format!("content must be a string in {shown}"));
            None
        }
    };
    let deleted = fl.get("deleted").is_some_and(|d| d.as_bool() == Some(true));
    if deleted && content.as_deref().is_some_and(|c| !c.is_empty()) {
        failures.push(format!("content cannot be used with deleted in {shown}"));
    }
    if let Some(c) = &content {
        if c.contains("://") && !(c.starts_with("http://") || c.starts_with("https://")) {
            failures.push(format!("content URLs must be http(s) in {shown}"));
        } else if c.contains("://") && c.contains('{') {
            failures.push(format!(
                "content URL templates ({{node…}}) are not supported by this agent in {shown}"
            ));
        }
    }
    let mut number = |field: &str| match fl.get(field) {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                failures.push(format!("{field} must be a number in {shown}"));
                None
            }
        },
    };
    let (mode, dirmode, owner, group) = (
        number("mode"),
        number("dirmode"),
        number("owner"),
        number("group"),
    );
    Some(FileSpec {
        path: path.to_string(),
        partition,
        content,
        deleted,
        mode,
        dirmode,
        owner,
        group,
    })
}

/// The files of `properties.inject_files` followed by the step's `files`.
pub fn validate(from_properties: &Value, from_args: &Value) -> Result<Vec<FileSpec>, InjectError> {
    let list = |v: &Value, what: &str| -> Result<Vec<Value>, InjectError> {
        match v {
            Value::Null => Ok(Vec::new()),
            Value::Array(a) => Ok(a.clone()),
            other => Err(InjectError::Invalid(format!(
                "{what} must be a list, got {}",
                match other {
                    Value::Object(_) => "dict",
                    Value::String(_) => "str",
                    Value::Number(_) => "int",
                    Value::Bool(_) => "bool",
                    _ => "other",
                }
            ))),
        }
    };
    let mut all = list(from_properties, "The `inject_files` node property")?;
    all.extend(list(from_args, "The `files` argument")?);
    let mut failures = Vec::new();
    let mut out = Vec::new();
    for fl in &all {
        match fl.as_object() {
            Some(o) => out.extend(one(o, &mut failures)),
            None => failures.push(format!("expected an object, got {fl}")),
        }
    }
    if failures.is_empty() {
        Ok(out)
    } else {
        Err(InjectError::Invalid(format!(
            "Validation of files failed: {}",
            failures.join("; ")
        )))
    }
}
