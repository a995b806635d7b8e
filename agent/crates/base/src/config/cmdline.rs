//! Parsing of the kernel command line (`/proc/cmdline`) into key/value
//! parameters, and the typed readers that turn raw values into settings.
//!
//! Design: unknown keys are kept but ignored by the caller; a malformed value
//! is reported once (by the caller, through [`ParamError`]) and the default is
//! used, so a typo on the kernel command line never stops a node from booting.

use std::collections::BTreeMap;

/// Kernel command line parameters, last occurrence of a key wins (as with IPA).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelParams {
    values: BTreeMap<String, String>,
}

/// A parameter whose value could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel parameter {key}={value:?} ignored: {reason}")]
pub struct ParamError {
    /// Parameter name.
    pub key: String,
    /// The raw value given.
    pub value: String,
    /// Why it was rejected.
    pub reason: String,
}

impl KernelParams {
    /// Splits a command line into `key=value` tokens. Tokens without `=` are
    /// flags and stored with an empty value; double quotes around a value (as
    /// the kernel allows, `key="a b"`) are removed.
    pub fn parse(cmdline: &str) -> Self {
        let mut values = BTreeMap::new();
        for token in split_respecting_quotes(cmdline) {
            let (key, value) = match token.split_once('=') {
                Some((k, v)) => (k.to_string(), v.trim_matches('"').to_string()),
                None => (token.clone(), String::new()),
            };
            if !key.is_empty() {
                values.insert(key, value);
            }
        }
        Self { values }
    }

    /// Sets `key` (a later source overriding this one).
    pub fn set(&mut self, key: &str, value: &str) {
        self.values.insert(key.to_string(), value.to_string());
    }

    /// Every `(key, value)`, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Raw value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Whether `key` appears at all (with or without a value).
    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Boolean parameter: `1/true/yes/on` and `0/false/no/off` (any case); a
    /// bare flag counts as true.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ParamError> {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        parse_bool(raw).map(Some).ok_or_else(|| ParamError {
            key: key.into(),
            value: raw.into(),
            reason: "expected one of 1/true/yes/on or 0/false/no/off".into(),
        })
    }

    /// Unsigned number parameter (seconds, ports, counts).
    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, ParamError> {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        raw.trim().parse::<T>().map(Some).map_err(|_| ParamError {
            key: key.into(),
            value: raw.into(),
            reason: "expected a non-negative number".into(),
        })
    }
}

/// Parses an IPA-style boolean. A bare flag (empty value) is true.
pub(crate) fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn split_respecting_quotes(cmdline: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in cmdline.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_keys_values_and_flags() {
        let p = KernelParams::parse(
            "BOOT_IMAGE=/vmlinuz quiet ipa-api-url=https://10.0.0.1:6385,http://[fd00::1]:6385 \
             ipa-debug=1 console=ttyS0,115200n8 x=\"a b\"\n",
        );
        assert_eq!(
            p.get("ipa-api-url"),
            Some("https://10.0.0.1:6385,http://[fd00::1]:6385")
        );
        assert_eq!(p.get("quiet"), Some(""));
        assert_eq!(p.get("x"), Some("a b"));
        assert_eq!(p.bool("ipa-debug"), Ok(Some(true)));
        assert_eq!(p.bool("absent"), Ok(None));
    }

    #[test]
    fn last_occurrence_wins() {
        let p = KernelParams::parse("ipa-debug=0 ipa-debug=1");
        assert_eq!(p.bool("ipa-debug"), Ok(Some(true)));
    }

    #[test]
    fn malformed_values_are_errors_naming_the_key() {
        let p = KernelParams::parse("ipa-insecure=maybe ipa-lookup-timeout=ten");
        let e = p.bool("ipa-insecure").unwrap_err();
        assert_eq!(e.key, "ipa-insecure");
        assert!(e.to_string().contains("ipa-insecure=\"maybe\""), "{e}");
        let e = p.number::<u64>("ipa-lookup-timeout").unwrap_err();
        assert!(e.to_string().contains("non-negative number"));
    }
}
