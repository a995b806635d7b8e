//! Matching parsed hints against one disk, with the reason for a mismatch
//! (IPA's `device_hints.find_devices_by_hints` plus oslo's `specs_matcher`).

use super::parse::{normalize, Expr, Hint, Kind, Op};
use crate::inventory::Disk;

const GIB: f64 = (1u64 << 30) as f64;

/// Every value the disk reports for a hint: all its serials or WWNs (IPA
/// 13 matches a hint when any one of them does), else the one attribute.
fn values(disk: &Disk, name: &str) -> Vec<String> {
    let many = match name {
        "serial" => &disk.serials,
        "wwn" => &disk.wwns,
        _ => &Vec::new(),
    };
    let mut out: Vec<String> = attribute(disk, name).into_iter().collect();
    out.extend(
        many.iter()
            .filter(|v| !out.contains(v))
            .cloned()
            .collect::<Vec<_>>(),
    );
    out.retain(|v| !v.trim().is_empty());
    out
}

/// The disk attribute a hint looks at, as a string (`None`: unknown).
fn attribute(disk: &Disk, name: &str) -> Option<String> {
    match name {
        "name" => Some(disk.name.clone()),
        "model" => disk.model.clone(),
        "wwn" => disk.wwn.clone(),
        "serial" => disk.serial.clone(),
        "vendor" => disk.vendor.clone(),
        "wwn_with_extension" => disk.wwn_with_extension.clone(),
        "wwn_vendor_extension" => disk.wwn_vendor_extension.clone(),
        "hctl" => disk.hctl.clone(),
        "by_path" => disk.by_path.clone(),
        "tran" => disk.tran.clone(),
        _ => None,
    }
}

/// Why a disk does not satisfy a hint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Mismatch {
    /// `rotational` differs.
    #[error("rotational is {have} (hint {given})")]
    Rotational {
        /// The disk's value.
        have: bool,
        /// The hint as given.
        given: String,
    },
    /// The size (GiB) does not satisfy `size`.
    #[error("size {gib:.2} GiB does not satisfy size {given}")]
    Size {
        /// The disk's size in GiB.
        gib: f64,
        /// The hint as given.
        given: String,
    },
    /// The disk lacks the attribute.
    #[error("has no {name} (hint {given:?})")]
    Missing {
        /// The hint.
        name: String,
        /// The hint as given.
        given: String,
    },
    /// The attribute has another value.
    #[error("{name} {have:?} does not match {name} {given:?}")]
    Differs {
        /// The hint.
        name: String,
        /// The disk's value.
        have: String,
        /// The hint as given.
        given: String,
    },
}

/// `Ok(())` when the disk satisfies the hint, else why not.
pub fn check(disk: &Disk, hint: &Hint) -> Result<(), Mismatch> {
    match (&hint.expr, hint.kind) {
        (Expr::Bool(want), _) => {
            if disk.rotational == *want {
                Ok(())
            } else {
                Err(Mismatch::Rotational {
                    have: disk.rotational,
                    given: hint.given.clone(),
                })
            }
        }
        (Expr::Cmp { op, values }, Kind::Size) => {
            let gib = disk.size as f64 / GIB;
            let ok = if *op == Op::RangeIn {
                in_range(values, gib)
            } else {
                values.iter().any(|v| {
                    let want: f64 = v.parse().unwrap_or(f64::NAN);
                    numeric(*op, gib, want)
                })
            };
            if ok {
                Ok(())
            } else {
                Err(Mismatch::Size {
                    gib,
                    given: hint.given.clone(),
                })
            }
        }
        (Expr::Cmp { op, values }, _) => {
            let raw = self::values(disk, &hint.name);
            if raw.is_empty() {
                return Err(Mismatch::Missing {
                    name: hint.name.clone(),
                    given: hint.given.clone(),
                });
            }
            let mut have: Vec<String> = raw.iter().map(|v| normalize(v)).collect();
            // A name hint may give the by-path link instead of the kernel name.
            if hint.name == "name" {
                if let Some(bp) = &disk.by_path {
                    have.push(normalize(bp));
                }
            }
            let ok = match op {
                Op::AllIn => values.iter().all(|v| have.contains(v)),
                Op::RangeIn => raw
                    .iter()
                    .any(|v| v.trim().parse::<f64>().is_ok_and(|n| in_range(values, n))),
                op => have.iter().any(|h| string(*op, h, values)),
            };
            if ok {
                Ok(())
            } else {
                Err(Mismatch::Differs {
                    name: hint.name.clone(),
                    have: raw.join(", "),
                    given: hint.given.clone(),
                })
            }
        }
    }
}

/// `values` of a `<range-in>`: `[`/`(`, low, high, `]`/`)` (checked when
/// parsed).
fn in_range(values: &[String], have: f64) -> bool {
    let [open, lo, hi, close] = values else {
        return false;
    };
    let (Ok(lo), Ok(hi)) = (lo.parse::<f64>(), hi.parse::<f64>()) else {
        return false;
    };
    let above = if open == "(" { have > lo } else { have >= lo };
    let below = if close == ")" { have < hi } else { have <= hi };
    above && below
}

fn numeric(op: Op, have: f64, want: f64) -> bool {
    match op {
        Op::Legacy | Op::NumGe => have >= want,
        Op::NumEq | Op::Or => have == want,
        Op::NumNe => have != want,
        Op::NumLe => have <= want,
        Op::NumLt => have < want,
        Op::NumGt => have > want,
        _ => false,
    }
}

fn string(op: Op, have: &str, values: &[String]) -> bool {
    let want = values.first().map(String::as_str).unwrap_or_default();
    match op {
        Op::StrEq => have == want,
        Op::StrNe => have != want,
        Op::StrLt => have < want,
        Op::StrLe => have <= want,
        Op::StrGt => have > want,
        Op::StrGe => have >= want,
        Op::In => have.contains(want),
        Op::Or => values.iter().any(|v| v == have),
        // Numeric operators on a string attribute compare numbers when both
        // sides are numbers (oslo converts with float()); otherwise no match.
        op => match (have.parse::<f64>(), want.parse::<f64>()) {
            (Ok(h), Ok(w)) => numeric(op, h, w),
            _ => false,
        },
    }
}
