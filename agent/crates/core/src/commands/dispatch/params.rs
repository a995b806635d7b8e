//! Typed command parameters: a command that takes parameters names them in
//! a struct, and [`parse`] is the one place that turns the request's JSON
//! into it, so a bad parameter becomes one precise
//! `InvalidCommandParamsError` naming the field (`step.args: invalid type:
//! string "x", expected a map`). Unknown fields are accepted, as IPA does
//! (Ironic adds some over time).

use ironic_types::node::Ports;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::commands::{CommandError, ErrorKind};

/// A parameter that does not fit its command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ParamsError {
    /// Where in the parameters (`step.args`, `.` for the whole object).
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl ParamsError {
    /// An error about the value at `path`.
    pub fn at(path: &str, reason: impl Into<String>) -> Self {
        ParamsError {
            path: path.to_string(),
            reason: reason.into(),
        }
    }
}

/// The parameters `params` as a `T`.
pub(crate) fn parse<T: DeserializeOwned>(params: &Value) -> Result<T, ParamsError> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let reason = e.into_inner().to_string();
        ParamsError { path, reason }
    })
}

/// [`parse`] for a handler: a bad parameter is the command's
/// `InvalidCommandParams` failure.
pub(crate) fn for_command<T: DeserializeOwned>(params: &Value) -> Result<T, CommandError> {
    parse(params).map_err(|e| CommandError::new(ErrorKind::InvalidCommandParams, e.to_string()))
}

/// The step a conductor asks `execute_clean_step`, `execute_deploy_step` or
/// `execute_service_step`
/// to run (the whole object is echoed back in the result).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct StepRequest {
    /// The step's name.
    pub step: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Option<Map<String, Value>>,
}

/// `clean.execute_clean_step` / `deploy.execute_deploy_step` /
/// `service.execute_service_step`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ExecuteStep {
    /// The step.
    pub step: StepRequest,
    /// The node (cached for later steps).
    #[serde(default)]
    pub node: Value,
    /// The node's ports.
    #[serde(default)]
    pub ports: Ports,
    /// The hardware-manager versions the conductor saw (`clean_version`).
    #[serde(default)]
    pub clean_version: Option<Value>,
    /// Likewise for deploy steps (`deploy_version`).
    #[serde(default)]
    pub deploy_version: Option<Value>,
    /// Likewise for service steps (`service_version`).
    #[serde(default)]
    pub service_version: Option<Value>,
}

/// `standby.prepare_image`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PrepareImage {
    /// The image to write (validated by `image::info::parse`).
    pub image_info: Value,
    /// A config drive (gzip+base64 ISO, URL, or JSON), if any.
    #[serde(default)]
    pub configdrive: Option<Value>,
}

/// `image.install_bootloader`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InstallBootloader {
    /// `uefi` or `bios` (default).
    #[serde(default)]
    pub target_boot_mode: Option<String>,
    /// The root filesystem's UUID (logged).
    #[serde(default)]
    pub root_uuid: Option<String>,
    /// Succeed even when the boot entries cannot be written.
    #[serde(default)]
    pub ignore_bootloader_failure: Option<bool>,
    /// The node has a software RAID configuration (Ironic sends it).
    #[serde(default)]
    pub software_raid: Option<bool>,
}

/// `get_clean_steps` / `get_deploy_steps`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct GetSteps {
    /// The node (cached for the steps; anything but an object is ignored).
    #[serde(default)]
    pub node: Value,
}

/// The `write_image` deploy step's arguments (as `prepare_image`'s, but
/// both may be missing: the image check then names what is wrong).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct WriteImageArgs {
    /// The image to write (validated by `image::info::parse`).
    #[serde(default)]
    pub image_info: Value,
    /// A config drive; `null` or missing: `image_info.configdrive`, if any.
    #[serde(default)]
    pub configdrive: Option<Value>,
}

/// The `install_coreos` deploy step's arguments (Metal3's names). Each
/// one may be missing or `null`; then the node's `instance_info` is used.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InstallCoreosArgs {
    /// The image, as for `write_image`.
    #[serde(default)]
    pub image_info: Option<Value>,
    /// The Ignition config.
    #[serde(default)]
    pub ignition: Option<IgnitionText>,
    /// Extra kernel arguments.
    #[serde(default)]
    pub append_karg: Option<KernelArgs>,
    /// Carry the ramdisk's network into the image (`--copy-network`).
    #[serde(default)]
    pub copy_network: Option<bool>,
}

/// An Ignition config given as a JSON object or as its text: the bytes to
/// write (whether they are Ignition is checked by the step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnitionText(pub Vec<u8>);

/// A value that is neither an object nor a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an Ignition config (object or text), not {0}")]
pub struct NotIgnitionText(pub Value);

impl IgnitionText {
    /// From a JSON object (serialised) or a string (its bytes).
    pub fn from_value(v: &Value) -> Result<Self, NotIgnitionText> {
        match v {
            Value::String(s) => Ok(IgnitionText(s.clone().into_bytes())),
            Value::Object(_) => Ok(IgnitionText(
                serde_json::to_vec(v).expect("a JSON value serialises"),
            )),
            other => Err(NotIgnitionText(other.clone())),
        }
    }
}

impl<'de> Deserialize<'de> for IgnitionText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        IgnitionText::from_value(&v).map_err(serde::de::Error::custom)
    }
}

/// Kernel arguments, as coreos-installer's `--append-karg` takes them: a
/// list of strings, or one string split at commas; each trimmed, empty ones
/// dropped, none may contain whitespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelArgs(pub Vec<String>);

/// Why a value is not a list of kernel arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelArgsError {
    /// A list with something else than a string in it.
    #[error("must hold strings, not {0}")]
    NotString(Value),
    /// Neither a list nor a string.
    #[error("must be a list of strings, not {0}")]
    NotList(Value),
    /// An argument with blanks inside.
    #[error("kernel argument {0:?} contains whitespace")]
    Whitespace(String),
}

impl KernelArgs {
    /// From a list of strings or a comma-separated string.
    pub fn from_value(v: &Value) -> Result<Self, KernelArgsError> {
        let list: Vec<String> = match v {
            Value::String(s) => s.split(',').map(str::to_string).collect(),
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| KernelArgsError::NotString(x.clone()))
                })
                .collect::<Result<_, _>>()?,
            other => return Err(KernelArgsError::NotList(other.clone())),
        };
        let list: Vec<String> = list
            .into_iter()
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect();
        if let Some(bad) = list.iter().find(|k| k.chars().any(char::is_whitespace)) {
            return Err(KernelArgsError::Whitespace(bad.clone()));
        }
        Ok(KernelArgs(list))
    }
}

impl<'de> Deserialize<'de> for KernelArgs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        KernelArgs::from_value(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    //! Errors that name the field.

    use serde_json::json;

    use super::*;

    /// Whether `params` parse as a `T`.
    fn check<T: DeserializeOwned>(params: &Value) -> Result<(), ParamsError> {
        parse::<T>(params).map(drop)
    }

    #[test]
    fn a_bad_parameter_is_named_by_its_path() {
        let e = check::<ExecuteStep>(&json!({"step": {"step": "x", "args": "nope"}})).unwrap_err();
        assert_eq!(e.path, "step.args");
        assert!(e.reason.contains("expected a map"), "{e}");
        let e = check::<ExecuteStep>(&json!({"node": {}})).unwrap_err();
        assert!(e.reason.contains("missing field `step`"), "{e}");
        check::<ExecuteStep>(
            &json!({"step": {"step": "write_image", "args": null, "priority": 80},
            "node": {"uuid": "u"}, "ports": [], "deploy_version": {"generic": "1.2"}, "extra": 1}),
        )
        .unwrap();
        let e =
            check::<InstallBootloader>(&json!({"ignore_bootloader_failure": "yes"})).unwrap_err();
        assert_eq!(e.path, "ignore_bootloader_failure");
        let e = check::<PrepareImage>(&json!({})).unwrap_err();
        assert!(e.reason.contains("image_info"), "{e}");
    }

    #[test]
    fn step_arguments_name_the_bad_one() {
        // write_image: both may be missing (the image check reports it),
        // a null config drive means "none given".
        let a: WriteImageArgs = parse(&json!({})).unwrap();
        assert!(a.image_info.is_null() && a.configdrive.is_none());
        let a: WriteImageArgs =
            parse(&json!({"image_info": {"id": "x"}, "configdrive": null})).unwrap();
        assert_eq!(a.image_info, json!({"id": "x"}));
        assert!(a.configdrive.is_none());
        let e = check::<WriteImageArgs>(&json!("not an object")).unwrap_err();
        assert!(e.reason.contains("expected struct WriteImageArgs"), "{e}");

        // install_coreos: a bad value of each argument names it.
        let a: InstallCoreosArgs = parse(&json!({"image_info": null, "ignition": null,
            "append_karg": " console=ttyS0, ,ip=dhcp"}))
        .unwrap();
        assert!(a.image_info.is_none() && a.ignition.is_none());
        assert_eq!(
            a.append_karg.unwrap().0,
            vec!["console=ttyS0".to_string(), "ip=dhcp".to_string()]
        );
        let a: InstallCoreosArgs =
            parse(&json!({"ignition": {"ignition": {"version": "3.4.0"}}})).unwrap();
        assert_eq!(
            a.ignition.unwrap().0,
            br#"{"ignition":{"version":"3.4.0"}}"#
        );
        let e = check::<InstallCoreosArgs>(&json!({"ignition": 5})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ignition: must be an Ignition config (object or text), not 5"
        );
        let e = check::<InstallCoreosArgs>(&json!({"append_karg": 3})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "append_karg: must be a list of strings, not 3"
        );
        let e = check::<InstallCoreosArgs>(&json!({"append_karg": ["a", 1]})).unwrap_err();
        assert_eq!(e.to_string(), "append_karg: must hold strings, not 1");
        let e = check::<InstallCoreosArgs>(&json!({"append_karg": ["a b"]})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "append_karg: kernel argument \"a b\" contains whitespace"
        );

        // get_*_steps: anything goes as the node.
        let g: GetSteps = parse(&json!({"node": "x"})).unwrap();
        assert_eq!(g.node, json!("x"));
    }
}
