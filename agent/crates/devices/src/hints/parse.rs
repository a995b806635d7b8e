//! Parsing Ironic's root device hints (`properties.root_device` /
//! `instance_info.root_device`) into typed expressions, with the rules of
//! IPA's `device_hints.parse_root_device_hints` and the grammar of
//! oslo.utils' `specs_matcher`.
//!
//! An expression is `[<op>] <value>` or `<or> v1 <or> v2 ...`. Values are
//! lower-cased and URL-quoted (so `s== big model` compares `big%20model`).
//! Without an operator, string hints mean `s==` and `size` means `==`.
//! `size` is in GiB. `<all-in> a b` asks that the disk reports every value
//! (a disk can report several serials and WWNs); `<range-in> [ 10 20 )`
//! compares numbers within bounds (inclusive `[ ]`, exclusive `( )`), as
//! oslo documents them. (IPA 13 parses both, but its matcher then raises
//! on them: `ast.literal_eval` of a disk attribute, and `int("[ 10 20 ]")`
//! for `size`; here they mean what oslo's documentation says.) String
//! operators on `size` are rejected, so a hint can never silently select
//! nothing for a reason nobody sees.

use serde_json::Value;

/// The type of a hint's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Compared as a normalized string.
    Str,
    /// `size`: an integer number of GiB.
    Size,
    /// `rotational`.
    Bool,
}

/// Every hint Ironic accepts, with its type.
pub const HINTS: [(&str, Kind); 12] = [
    ("size", Kind::Size),
    ("model", Kind::Str),
    ("wwn", Kind::Str),
    ("serial", Kind::Str),
    ("vendor", Kind::Str),
    ("wwn_with_extension", Kind::Str),
    ("wwn_vendor_extension", Kind::Str),
    ("name", Kind::Str),
    ("rotational", Kind::Bool),
    ("hctl", Kind::Str),
    ("by_path", Kind::Str),
    ("tran", Kind::Str),
];

/// A comparison operator of the hint language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `=`: numerically *greater or equal* (legacy meaning kept by oslo).
    Legacy,
    /// `==`.
    NumEq,
    /// `!=`.
    NumNe,
    /// `<=`.
    NumLe,
    /// `<`.
    NumLt,
    /// `>=`.
    NumGe,
    /// `>`.
    NumGt,
    /// `s==`.
    StrEq,
    /// `s!=`.
    StrNe,
    /// `s<=`.
    StrLe,
    /// `s<`.
    StrLt,
    /// `s>=`.
    StrGe,
    /// `s>`.
    StrGt,
    /// `<in>`: the value contains the hint.
    In,
    /// `<or>`: equal to any of the values.
    Or,
    /// `<all-in>`: the disk reports every one of the values.
    AllIn,
    /// `<range-in>`: a number within bounds; values are `[`/`(`, the
    /// lower bound, the upper bound, `]`/`)`.
    RangeIn,
}

/// Unary operators in the order the grammar tries them (longest first where
/// one is a prefix of another).
const UNARY: [(&str, Op); 14] = [
    ("==", Op::NumEq),
    ("=", Op::Legacy),
    ("!=", Op::NumNe),
    ("<in>", Op::In),
    (">=", Op::NumGe),
    ("<=", Op::NumLe),
    (">", Op::NumGt),
    ("<", Op::NumLt),
    ("s==", Op::StrEq),
    ("s!=", Op::StrNe),
    ("s<=", Op::StrLe),
    ("s<", Op::StrLt),
    ("s>=", Op::StrGe),
    ("s>", Op::StrGt),
];

impl Op {
    /// The operator's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Or => "<or>",
            Op::AllIn => "<all-in>",
            Op::RangeIn => "<range-in>",
            op => UNARY
                .iter()
                .find(|(_, o)| *o == op)
                .map(|(s, _)| *s)
                .unwrap_or("?"),
        }
    }

    /// Whether the operator compares numbers.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Op::Legacy | Op::NumEq | Op::NumNe | Op::NumLe | Op::NumLt | Op::NumGe | Op::NumGt
        )
    }
}

/// A parsed hint value.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `rotational`.
    Bool(bool),
    /// An operator and its normalized values (one, or several for `<or>`).
    Cmp {
        /// Operator.
        op: Op,
        /// Values: normalized strings, or decimal numbers for `size`.
        values: Vec<String>,
    },
}

/// One hint.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    /// Hint name (`model`, `size`, ...).
    pub name: String,
    /// Its type.
    pub kind: Kind,
    /// Parsed expression.
    pub expr: Expr,
    /// As given, for messages.
    pub given: String,
}

/// Lower-cases, trims and URL-quotes a value as IPA does (Python's
/// `urllib.parse.quote`: letters, digits, `_.-~/` stay; the rest is `%XX`).
pub fn normalize(value: &str) -> String {
    let mut out = String::new();
    for b in value.trim().to_lowercase().bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Why an expression does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Nothing but blanks.
    #[error("the expression is empty")]
    Empty,
    /// `<all-in>` and nothing else.
    #[error("<all-in> without values")]
    AllInWithoutValues,
    /// A `<range-in>` that is not `<range-in> [ low high ]` (brackets `[`
    /// or `(` and `]` or `)`, numbers, low ≤ high).
    #[error("<range-in> needs \"[ low high ]\" with ( or [, ) or ] and numbers low <= high: {0}")]
    Range(String),
    /// `<or>` and nothing else.
    #[error("<or> without values")]
    OrWithoutValues,
    /// A unary operator and nothing after it.
    #[error("operator {0} without a value")]
    NoValue(&'static str),
}

/// Why a `root_device` object does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Neither an object nor `null`.
    #[error("root device hints must be an object, not {0}")]
    NotAnObject(String),
    /// Names Ironic does not know.
    #[error(
        "the hints \"{}\" are invalid; valid hints are: \"{}\"",
        .0.join(", "),
        HINTS.map(|(n, _)| n).join(", ")
    )]
    Unknown(Vec<String>),
    /// A Boolean hint (`rotational`) with another value.
    #[error("root device hint \"{name}\" is not a Boolean value: {given}")]
    NotBool {
        /// The hint.
        name: &'static str,
        /// Its value as given.
        given: String,
    },
    /// A string hint with a value that is not a string.
    #[error("root device hint \"{name}\" is not a string value: {given}")]
    NotString {
        /// The hint.
        name: &'static str,
        /// Its value as given.
        given: String,
    },
    /// A hint whose expression does not parse.
    #[error("root device hint \"{name}\": {reason}")]
    Expression {
        /// The hint.
        name: &'static str,
        /// What is wrong with the expression.
        reason: ExprError,
    },
    /// `size` with a string operator.
    #[error("root device hint \"size\" needs a numeric operator, not {0}")]
    SizeOperator(&'static str),
    /// `size` of zero or less.
    #[error("root device hint \"size\" should be a positive integer: {0}")]
    SizeNotPositive(String),
    /// `size` that is not an integer.
    #[error("root device hint \"size\" is not an integer value: {0}")]
    SizeNotInteger(String),
}

impl ParseError {
    /// The hint the error is about, when it is about one (for a path such
    /// as `root_device.size`).
    pub fn hint(&self) -> Option<&str> {
        match self {
            ParseError::NotBool { name, .. }
            | ParseError::NotString { name, .. }
            | ParseError::Expression { name, .. } => Some(name),
            ParseError::SizeOperator(_)
            | ParseError::SizeNotPositive(_)
            | ParseError::SizeNotInteger(_) => Some("size"),
            ParseError::Unknown(names) if names.len() == 1 => Some(names[0].as_str()),
            ParseError::NotAnObject(_) | ParseError::Unknown(_) => None,
        }
    }
}

/// Splits an expression into operator and raw values (not yet normalized).
/// `None` operator: the whole expression is the value.
pub fn split_expression(expr: &str) -> Result<(Option<Op>, Vec<String>), ExprError> {
    let e = expr.trim().to_lowercase();
    if e.is_empty() {
        return Err(ExprError::Empty);
    }
    if let Some(rest) = e.strip_prefix("<all-in>") {
        let values: Vec<String> = rest.split_whitespace().map(String::from).collect();
        if values.is_empty() {
            return Err(ExprError::AllInWithoutValues);
        }
        return Ok((Some(Op::AllIn), values));
    }
    if let Some(rest) = e.strip_prefix("<range-in>") {
        return range(rest).map(|v| (Some(Op::RangeIn), v));
    }
    if e.starts_with("<or>") {
        let values: Vec<String> = e
            .split("<or>")
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(String::from)
            .collect();
        if values.is_empty() {
            return Err(ExprError::OrWithoutValues);
        }
        return Ok((Some(Op::Or), values));
    }
    for (spelling, op) in UNARY {
        if let Some(rest) = e.strip_prefix(spelling) {
            let value = rest.trim();
            if value.is_empty() {
                return Err(ExprError::NoValue(spelling));
            }
            return Ok((Some(op), vec![value.to_string()]));
        }
    }
    Ok((None, vec![e]))
}

/// `[ low high ]` (spaces around the brackets optional) into its four
/// tokens, checked.
fn range(text: &str) -> Result<Vec<String>, ExprError> {
    let mut tokens: Vec<String> = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if matches!(c, '[' | '(' | ']' | ')') || c.is_whitespace() {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    let bad = || ExprError::Range(text.trim().to_string());
    let [open, lo, hi, close] = tokens.as_slice() else {
        return Err(bad());
    };
    let (Ok(l), Ok(h)) = (lo.parse::<f64>(), hi.parse::<f64>()) else {
        return Err(bad());
    };
    if !matches!(open.as_str(), "[" | "(")
        || !matches!(close.as_str(), "]" | ")")
        || l.partial_cmp(&h).is_none_or(|o| o.is_gt())
    {
        return Err(bad());
    }
    Ok(tokens)
}

/// Parses a `root_device` object. `null` and `{}` mean "no hints".
pub fn parse(hints: &Value) -> Result<Vec<Hint>, ParseError> {
    let map = match hints {
        Value::Null => return Ok(Vec::new()),
        Value::Object(m) => m,
        other => return Err(ParseError::NotAnObject(other.to_string())),
    };
    let unknown: Vec<String> = map
        .keys()
        .filter(|k| !HINTS.iter().any(|(n, _)| n == k))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(ParseError::Unknown(unknown));
    }
    let mut out = Vec::new();
    // Ironic's order, so messages are stable.
    for (name, kind) in HINTS {
        let Some(v) = map.get(name) else { continue };
        let given = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let expr = match kind {
            Kind::Bool => Expr::Bool(parse_bool(v).ok_or_else(|| ParseError::NotBool {
                name,
                given: given.clone(),
            })?),
            Kind::Str => {
                if !v.is_string() {
                    return Err(ParseError::NotString { name, given });
                }
                let (op, values) = split_expression(&given)
                    .map_err(|reason| ParseError::Expression { name, reason })?;
                let op = op.unwrap_or(Op::StrEq);
                Expr::Cmp {
                    op,
                    values: if op == Op::RangeIn {
                        values
                    } else {
                        values.iter().map(|v| normalize(v)).collect()
                    },
                }
            }
            Kind::Size => {
                if !(v.is_string() || v.is_u64() || v.is_i64()) {
                    return Err(ParseError::SizeNotInteger(given));
                }
                let (op, values) =
                    split_expression(&given).map_err(|reason| ParseError::Expression {
                        name: "size",
                        reason,
                    })?;
                let op = op.unwrap_or(Op::NumEq);
                if !(op.is_numeric() || op == Op::Or || op == Op::RangeIn) {
                    return Err(ParseError::SizeOperator(op.as_str()));
                }
                for v in values.iter().filter(|_| op != Op::RangeIn) {
                    match v.parse::<i64>() {
                        Ok(n) if n > 0 => {}
                        Ok(_) => return Err(ParseError::SizeNotPositive(given)),
                        Err(_) => return Err(ParseError::SizeNotInteger(given)),
                    }
                }
                Expr::Cmp { op, values }
            }
        };
        out.push(Hint {
            name: name.to_string(),
            kind,
            expr,
            given,
        });
    }
    Ok(out)
}

/// oslo's strict boolean parsing.
fn parse_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => match n.as_i64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        Value::String(s) => match s.trim().to_lowercase().as_str() {
            "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
            "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cmp(h: &Hint) -> (Op, Vec<String>) {
        match &h.expr {
            Expr::Cmp { op, values } => (*op, values.clone()),
            Expr::Bool(_) => panic!("bool"),
        }
    }

    #[test]
    fn operators_and_defaults() {
        let h = parse(
            &json!({"model": "Big Model", "size": 10, "serial": "s!= abc",
                               "vendor": "<or> ATA <or> Dell Inc", "wwn": "<in>5000",
                               "hctl": "s>= 1:0:0:0", "rotational": "no"}),
        )
        .unwrap();
        let by = |n: &str| h.iter().find(|x| x.name == n).unwrap();
        assert_eq!(cmp(by("model")), (Op::StrEq, vec!["big%20model".into()]));
        assert_eq!(cmp(by("size")), (Op::NumEq, vec!["10".into()]));
        assert_eq!(cmp(by("serial")), (Op::StrNe, vec!["abc".into()]));
        assert_eq!(
            cmp(by("vendor")),
            (Op::Or, vec!["ata".into(), "dell%20inc".into()])
        );
        assert_eq!(cmp(by("wwn")), (Op::In, vec!["5000".into()]));
        assert_eq!(cmp(by("hctl")), (Op::StrGe, vec!["1%3A0%3A0%3A0".into()]));
        assert_eq!(by("rotational").expr, Expr::Bool(false));
        // Ironic's order, not the object's.
        let names: Vec<&str> = h.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "size",
                "model",
                "wwn",
                "serial",
                "vendor",
                "rotational",
                "hctl"
            ]
        );
    }

    #[test]
    fn every_numeric_operator_without_spaces_too() {
        for (e, op) in [
            (">= 10", Op::NumGe),
            (">=10", Op::NumGe),
            ("> 10", Op::NumGt),
            ("<= 10", Op::NumLe),
            ("< 10", Op::NumLt),
            ("== 10", Op::NumEq),
            ("!= 10", Op::NumNe),
            ("= 10", Op::Legacy),
            ("<or> 10 <or> 20", Op::Or),
        ] {
            let h = parse(&json!({ "size": e })).unwrap();
            assert_eq!(cmp(&h[0]).0, op, "{e}");
        }
        for (e, op) in [
            ("s== a", Op::StrEq),
            ("s!= a", Op::StrNe),
            ("s< a", Op::StrLt),
            ("s<= a", Op::StrLe),
            ("s> a", Op::StrGt),
            ("s>= a", Op::StrGe),
            ("<in> a", Op::In),
        ] {
            let h = parse(&json!({ "model": e })).unwrap();
            assert_eq!(cmp(&h[0]), (op, vec!["a".into()]), "{e}");
        }
    }

    #[test]
    fn invalid_hints_are_errors() {
        for (hints, needle) in [
            (json!({"colour": "red"}), "invalid"),
            (json!({"size": "big"}), "not an integer"),
            (json!({"size": -1}), "positive"),
            (json!({"size": "0"}), "positive"),
            (json!({"size": 1.5}), "not an integer"),
            (json!({"size": "s== 10"}), "numeric operator"),
            (json!({"model": 5}), "not a string"),
            (json!({"model": "  "}), "empty"),
            (json!({"model": "s=="}), "without a value"),
            (json!({"rotational": "maybe"}), "Boolean"),
            (json!({"model": "<all-in>"}), "<all-in> without values"),
            (json!({"size": "<all-in> 1 2"}), "numeric operator"),
            (json!({"size": "<range-in> [ 2 1 ]"}), "low <= high"),
            (json!({"size": "<range-in> [ 1 2"}), "<range-in> needs"),
            (json!({"model": "<range-in> { 1 2 }"}), "<range-in> needs"),
            (json!({"size": "<range-in> [ a 2 ]"}), "<range-in> needs"),
            (json!(["name"]), "object"),
        ] {
            let e = parse(&hints).unwrap_err().to_string();
            assert!(e.contains(needle), "{hints}: {e}");
        }
        assert!(parse(&json!({})).unwrap().is_empty());
        assert!(parse(&Value::Null).unwrap().is_empty());
    }

    #[test]
    fn all_in_and_range_in_parse() {
        let h =
            parse(&json!({"serial": "<all-in> ABC def", "size": "<range-in> (10 20]"})).unwrap();
        assert_eq!(
            cmp(&h[0]),
            (
                Op::RangeIn,
                vec!["(".into(), "10".into(), "20".into(), "]".into()]
            )
        );
        assert_eq!(cmp(&h[1]), (Op::AllIn, vec!["abc".into(), "def".into()]));
        let h = parse(&json!({"hctl": "<range-in> [ 0 1.5 )"})).unwrap();
        assert_eq!(cmp(&h[0]).1, ["[", "0", "1.5", ")"]);
    }

    #[test]
    fn normalization_matches_python_quote() {
        assert_eq!(normalize(" QEMU HARDDISK "), "qemu%20harddisk");
        assert_eq!(
            normalize("/dev/disk/by-path/pci-0000:00:1f.2-ata-1"),
            "/dev/disk/by-path/pci-0000%3A00%3A1f.2-ata-1"
        );
        assert_eq!(normalize("a_b.c~d"), "a_b.c~d");
    }
}
