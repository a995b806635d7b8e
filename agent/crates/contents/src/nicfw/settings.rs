//! `update_nvidia_nic_firmware_settings` as IPA 13 runs it
//! (`NvidiaNicsConfig`, `NvidiaNicConfig`): settings matched to the NICs
//! by PCI device ID (one entry per ID); a card's first function takes the
//! entry's `globalConfig`, function 0 its `function0Config`, the others
//! `function1Config`. Cards whose burnt image is not running yet are
//! reset first (a failed reset is logged, as in IPA); then every
//! parameter of every NIC is checked — known to this `mstconfig`
//! (`mstconfig -d PCI i`), and present in the firmware's current
//! configuration (`mstconfig -d PCI q`; an array index within the
//! firmware's `Array[lo..hi]`, IPA's upper bound excluded) — before any is
//! set with `mstconfig -d PCI -y set NAME=VALUE…`, only those whose value
//! differs.
//!
//! The device ID is compared ignoring case: `lspci` prints `101b`, IPA's
//! own example writes `101B` (which IPA, comparing exactly, never matches).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;

use serde_json::Value;

use super::discovery::{discover, query_device, Nic};
use super::image::reset;
use super::query::{known_to_mstconfig, parse_mstconfig_query, ArrayParam};
use super::tools::{run, Tools};
use super::NicFwError;

/// What the step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Per function: the `NAME=VALUE` words set (functions with nothing
    /// to change are left out).
    pub set: BTreeMap<String, Vec<String>>,
    /// Cards reset before their settings were read.
    pub reset: Vec<String>,
}

/// A settings entry: its place in the list and its object.
type Entry<'a> = (usize, &'a serde_json::Map<String, Value>);

/// One NIC function's parameters, in the order given (later ones win).
#[derive(Debug)]
struct NicConfig<'a> {
    nic: &'a Nic,
    params: Vec<(String, Value)>,
}

/// Runs the step on `settings` (the step's argument as sent), with the
/// tools on `search_path`.
pub fn update(settings: &Value, search_path: &OsStr) -> Result<Outcome, NicFwError> {
    let Value::Array(list) = settings else {
        return Err(NicFwError::InvalidSettingsConfig(format!(
            "The settings must be a list of settings, {settings}"
        )));
    };
    let tools = Tools::find(search_path)?;
    let nics = discover(&tools)?;
    let ids: BTreeSet<String> = nics
        .iter()
        .map(|n| n.device_id.to_ascii_lowercase())
        .collect();
    let by_id = settings_map(list, &ids)?;
    let mut outcome = Outcome::default();
    let mut configs = Vec::new();
    let mut seen_cards = BTreeSet::new();
    for nic in &nics {
        let Some((index, entry)) = by_id.get(&nic.device_id.to_ascii_lowercase()) else {
            continue;
        };
        let mut params = Vec::new();
        if seen_cards.insert(nic.card().to_string()) {
            add(&mut params, entry, "globalConfig", *index)?;
            if query_device(&tools, &nic.pci)?.image_changed() {
                outcome.reset.push(nic.pci.clone());
            }
        }
        let function = if nic.is_function0() {
            "function0Config"
        } else {
            "function1Config"
        };
        add(&mut params, entry, function, *index)?;
        if !params.is_empty() {
            configs.push(NicConfig { nic, params });
        }
    }
    for pci in &outcome.reset {
        if let Err(e) = reset(&tools, pci) {
            tracing::error!(device = pci, "Failed to reset device: {e}");
        }
    }
    let mut current = Vec::new();
    for c in &configs {
        current.push(validate(&tools, c)?);
    }
    for (c, now) in configs.iter().zip(&current) {
        let words = changes(c, now);
        if words.is_empty() {
            tracing::info!(
                device = c.nic.pci,
                "Set device configurations: No operation required"
            );
            continue;
        }
        let mut args = vec!["-d", c.nic.pci.as_str(), "-y", "set"];
        args.extend(words.iter().map(String::as_str));
        run(
            &tools.mstconfig,
            &args,
            &format!("setting {} on device {}", words.join(" "), c.nic.pci),
        )?;
        tracing::info!(
            device = c.nic.pci,
            "Set device configurations: setting {} done successfully",
            words.join(" ")
        );
        outcome.set.insert(c.nic.pci.clone(), words);
    }
    Ok(outcome)
}

/// IPA's `create_settings_map`: each present device ID's entry (index and
/// object). An entry without a `deviceID` is IPA's
/// `InvalidFirmwareSettingsConfig`, two for one present ID its
/// `DuplicateDeviceID`.
fn settings_map<'a>(
    list: &'a [Value],
    ids: &BTreeSet<String>,
) -> Result<BTreeMap<String, Entry<'a>>, NicFwError> {
    let mut out = BTreeMap::new();
    for (i, s) in list.iter().enumerate() {
        let Some(entry) = s.as_object() else {
            return Err(NicFwError::InvalidSettingsConfig(format!(
                "settings {i} must be an object, got {s}"
            )));
        };
        let id = match entry.get("deviceID") {
            Some(Value::String(id)) if !id.is_empty() => id.to_ascii_lowercase(),
            None | Some(Value::Null) | Some(Value::String(_)) => {
                return Err(NicFwError::InvalidSettingsConfig(format!(
                    "There is no deviceID provided for settings {i} ({s})"
                )))
            }
            Some(other) => {
                return Err(NicFwError::InvalidSettingsConfig(format!(
                    "the deviceID of settings {i} must be a string (lspci's hex ID, e.g. \"101b\"), got {other}"
                )))
            }
        };
        if !ids.contains(&id) {
            tracing::info!(
                device_id = id,
                "There are no devices with ID {id} on the system; settings {i} left unused"
            );
            continue;
        }
        if out.insert(id.clone(), (i, entry)).is_some() {
            return Err(NicFwError::DuplicateDeviceId(format!(
                "duplicate settings for device ID {id} (settings {i})"
            )));
        }
    }
    Ok(out)
}

/// Adds the parameters of group `key` of settings `index` to `params`.
fn add(
    params: &mut Vec<(String, Value)>,
    entry: &serde_json::Map<String, Value>,
    key: &str,
    index: usize,
) -> Result<(), NicFwError> {
    let group = match entry.get(key) {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(NicFwError::InvalidSettingsConfig(format!(
                "{key} of settings {index} must be an object of parameters, got {other}"
            )))
        }
    };
    for (name, value) in group {
        if !matches!(value, Value::Bool(_) | Value::Number(_) | Value::String(_)) {
            return Err(NicFwError::InvalidSettingsConfig(format!(
                "{key}.{name} of settings {index} must be a string, a number or a boolean, got {value}"
            )));
        }
        params.retain(|(n, _)| n != name);
        params.push((name.clone(), value.clone()));
    }
    Ok(())
}

/// IPA's `validate_config`: every parameter known to `mstconfig` and to
/// the firmware. Returns the firmware's current configuration.
fn validate(tools: &Tools, c: &NicConfig<'_>) -> Result<BTreeMap<String, String>, NicFwError> {
    let pci = &c.nic.pci;
    tracing::info!(device = pci, "Validating config");
    let info = run(
        &tools.mstconfig,
        &["-d", pci, "i"],
        &format!("listing the configurations mstconfig supports for device {pci}"),
    )?;
    let q = run(
        &tools.mstconfig,
        &["-d", pci, "q"],
        &format!("querying the configuration of device {pci}"),
    )?;
    let current = parse_mstconfig_query(&q);
    for (name, _) in &c.params {
        if !known_to_mstconfig(&info, name) {
            return Err(NicFwError::UnsupportedByMstconfig(format!(
                "Configuration {name} (device {pci}) is not supported by mstconfig, please update to the latest mstflint package."
            )));
        }
        let supported = match ArrayParam::parse(name) {
            Some(a) => current.get(a.name).is_some_and(|v| a.fits(v)),
            None => current.contains_key(name),
        };
        if !supported {
            return Err(NicFwError::UnsupportedByFirmware(format!(
                "Configuration {name} for device {pci} is not supported with current fw"
            )));
        }
    }
    Ok(current)
}

/// IPA's `set_config` comparison: the `NAME=VALUE` words of parameters
/// whose value differs (array parameters always; integers compared as
/// integers, anything else as IPA does: the value, lower-cased, not found
/// in the current one, e.g. `True` against `True(1)`).
fn changes(c: &NicConfig<'_>, current: &BTreeMap<String, String>) -> Vec<String> {
    let mut words = Vec::new();
    for (name, value) in &c.params {
        let text = python_str(value);
        let now = current.get(name);
        let differs = if ArrayParam::parse(name).is_some() {
            true
        } else {
            match (python_int(value), now.and_then(|n| parse_int(n))) {
                (Some(want), Some(have)) => want != have,
                _ => !now.is_some_and(|n| n.to_lowercase().contains(&text.to_lowercase())),
            }
        };
        if differs {
            words.push(format!("{name}={text}"));
        } else {
            tracing::info!(
                device = c.nic.pci,
                "value of {name} is already configured as {text}, no need to update it"
            );
        }
    }
    words
}

/// A JSON value as Python's `str()` writes it (`True`, `16`, `ETH`).
fn python_str(v: &Value) -> String {
    match v {
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Python's `int()` of a JSON value, where it has one.
fn python_int(v: &Value) -> Option<i64> {
    match v {
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f.trunc() as i64)),
        Value::String(s) => parse_int(s),
        _ => None,
    }
}

/// Python's `int()` of a string: an optional sign and decimal digits, with
/// blanks around.
fn parse_int(s: &str) -> Option<i64> {
    s.trim().parse().ok()
}
