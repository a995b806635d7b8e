//! Typed command parameters: a command that takes parameters names them in
//! a struct, and [`parse`] is the one place that turns the request's JSON
//! into it, so a bad parameter becomes one precise
//! `InvalidCommandParamsError` naming the field (`step.args: invalid type:
//! string "x", expected a map`). Unknown fields are accepted, as IPA does
//! (Ironic adds some over time).

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{CommandError, ErrorKind};

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
pub fn parse<T: DeserializeOwned>(params: &Value) -> Result<T, ParamsError> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let reason = e.into_inner().to_string();
        ParamsError { path, reason }
    })
}

/// [`parse`] for a handler: a bad parameter is the command's
/// `InvalidCommandParams` failure.
pub fn for_command<T: DeserializeOwned>(params: &Value) -> Result<T, CommandError> {
    parse(params).map_err(|e| CommandError::new(ErrorKind::InvalidCommandParams, e.to_string()))
}

/// Checks that `params` fit a `T` (the command table's validation).
pub fn check<T: DeserializeOwned>(params: &Value) -> Result<(), ParamsError> {
    parse::<T>(params).map(drop)
}

/// The step a conductor asks `execute_clean_step` or `execute_deploy_step`
/// to run (the whole object is echoed back in the result).
#[derive(Debug, Clone, Deserialize)]
pub struct StepRequest {
    /// The step's name.
    pub step: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Option<Map<String, Value>>,
}

/// `clean.execute_clean_step` / `deploy.execute_deploy_step`.
#[derive(Debug, Clone, Deserialize)]
pub struct ExecuteStep {
    /// The step.
    pub step: StepRequest,
    /// The node (cached for later steps).
    #[serde(default)]
    pub node: Value,
    /// The node's ports.
    #[serde(default)]
    pub ports: Value,
    /// The hardware-manager versions the conductor saw (`clean_version`).
    #[serde(default)]
    pub clean_version: Option<Value>,
    /// Likewise for deploy steps (`deploy_version`).
    #[serde(default)]
    pub deploy_version: Option<Value>,
}

/// Checks an `execute_*_step` request: a named step with object arguments.
pub fn check_execute_step(params: &Value) -> Result<(), ParamsError> {
    let p: ExecuteStep = parse(params)?;
    if p.step.step.is_empty() {
        return Err(ParamsError::at("step.step", "the step name is empty"));
    }
    Ok(())
}

/// `standby.prepare_image`.
#[derive(Debug, Clone, Deserialize)]
pub struct PrepareImage {
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
}

#[cfg(test)]
mod tests {
    //! Errors that name the field.

    use serde_json::json;

    use super::*;

    #[test]
    fn a_bad_parameter_is_named_by_its_path() {
        let e = check_execute_step(&json!({"step": {"step": "x", "args": "nope"}})).unwrap_err();
        assert_eq!(e.path, "step.args");
        assert!(e.reason.contains("expected a map"), "{e}");
        let e = check_execute_step(&json!({"node": {}})).unwrap_err();
        assert!(e.reason.contains("missing field `step`"), "{e}");
        let e = check_execute_step(&json!({"step": {"step": ""}})).unwrap_err();
        assert_eq!(e.to_string(), "step.step: the step name is empty");
        check_execute_step(
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
}
