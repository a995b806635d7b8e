//! The value forms of IPA's burn-in knobs in `driver_info`, which IPA hands
//! to stress-ng and fio as they are: durations (`--timeout 86400`, `10m`),
//! worker counts (`--cpu 0`: one per CPU) and sizes (`--vm-bytes 98%`,
//! `512M`). Numbers may come as JSON numbers or strings.

use std::time::Duration;

use serde_json::Value;

use super::BurninError;

fn bad(key: &str, reason: impl Into<String>) -> BurninError {
    BurninError::Knob {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// A JSON number or a string holding one, as text.
fn text(key: &str, v: &Value) -> Result<String, BurninError> {
    match v {
        Value::Number(n) => Ok(n.to_string()),
        Value::String(s) => Ok(s.trim().to_string()),
        other => Err(bad(
            key,
            format!("expected a number or a string, got {other}"),
        )),
    }
}

/// A duration as stress-ng reads `--timeout`: seconds, or a number with one
/// of the suffixes `s`, `m`, `h`, `d`, `y`. Zero (stress-ng: run forever)
/// is refused: a step must end.
pub fn duration(key: &str, v: &Value) -> Result<Duration, BurninError> {
    let t = text(key, v)?;
    let (num, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_lowercase()),
        _ => (t.as_str(), 's'),
    };
    let factor = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86400.0,
        'y' => 365.0 * 86400.0,
        other => return Err(bad(key, format!("unknown time unit {other:?} in {t:?}"))),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| bad(key, format!("{t:?} is not a duration")))?;
    if !n.is_finite() || n < 0.0 {
        return Err(bad(key, format!("{t:?} is not a duration")));
    }
    let secs = n * factor;
    if secs == 0.0 {
        return Err(bad(
            key,
            "0 would run for ever (stress-ng's meaning); give a duration",
        ));
    }
    if secs > 10.0 * 365.0 * 86400.0 {
        return Err(bad(key, format!("{t:?} is longer than ten years")));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A non-negative whole number (worker counts, loops, seconds).
pub fn count(key: &str, v: &Value) -> Result<u64, BurninError> {
    let t = text(key, v)?;
    t.parse::<u64>()
        .map_err(|_| bad(key, format!("{t:?} is not a whole number ≥ 0")))
}

/// A size as stress-ng reads `--vm-bytes`: bytes, a number with one of the
/// suffixes `b`, `k`, `m`, `g`, `t` (powers of 1024, any case), or a
/// percentage of `available` bytes.
pub fn bytes(key: &str, v: &Value, available: u64) -> Result<u64, BurninError> {
    let t = text(key, v)?;
    if let Some(p) = t.strip_suffix('%') {
        let pct: f64 = p
            .trim()
            .parse()
            .map_err(|_| bad(key, format!("{t:?} is not a percentage")))?;
        if !(pct > 0.0 && pct <= 100.0) {
            return Err(bad(key, format!("{t:?} is not a percentage in (0, 100]")));
        }
        return Ok((available as f64 * pct / 100.0) as u64);
    }
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_lowercase() {
                'b' => 0,
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                other => return Err(bad(key, format!("unknown size unit {other:?} in {t:?}"))),
            };
            (&t[..i], shift)
        }
        _ => (t.as_str(), 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| bad(key, format!("{t:?} is not a size")))?;
    n.checked_mul(1u64 << shift)
        .filter(|b| *b > 0)
        .ok_or_else(|| bad(key, format!("{t:?} is not a usable size")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn durations_as_stress_ng_reads_them() {
        let d = |v: Value| duration("k", &v);
        assert_eq!(d(json!(86400)).unwrap(), Duration::from_secs(86400));
        assert_eq!(d(json!("90")).unwrap(), Duration::from_secs(90));
        assert_eq!(d(json!("10m")).unwrap(), Duration::from_secs(600));
        assert_eq!(d(json!("2H")).unwrap(), Duration::from_secs(7200));
        assert_eq!(d(json!(1.5)).unwrap(), Duration::from_millis(1500));
        let e = d(json!(0)).unwrap_err().to_string();
        assert!(e.starts_with("k: 0 would run for ever"), "{e}");
        assert!(d(json!("5x")).is_err());
        assert!(d(json!(-3)).is_err());
        assert!(d(json!("abc")).is_err());
        assert!(d(json!(null)).is_err());
        assert!(d(json!("")).is_err());
        assert!(d(json!("1e300")).is_err());
    }

    #[test]
    fn sizes_and_percentages() {
        let b = |v: Value| bytes("k", &v, 1000);
        assert_eq!(b(json!("98%")).unwrap(), 980);
        assert_eq!(b(json!(4096)).unwrap(), 4096);
        assert_eq!(b(json!("64M")).unwrap(), 64 << 20);
        assert_eq!(b(json!("2g")).unwrap(), 2 << 30);
        assert_eq!(b(json!("12b")).unwrap(), 12);
        assert!(b(json!("0%")).is_err());
        assert!(b(json!("101%")).is_err());
        assert!(b(json!("0")).is_err());
        assert!(b(json!("9999999999t")).is_err());
        assert!(b(json!("5q")).is_err());
        assert!(b(json!([1])).is_err());
    }

    #[test]
    fn counts() {
        assert_eq!(count("k", &json!(4)).unwrap(), 4);
        assert_eq!(count("k", &json!("0")).unwrap(), 0);
        assert!(count("k", &json!(-1)).is_err());
        assert!(count("k", &json!(1.5)).is_err());
    }
}
