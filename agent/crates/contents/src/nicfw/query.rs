//! Parsing the tools' output as IPA 13 reads it (pure functions over text,
//! tested on the shapes of IPA's own unit tests; nothing here panics):
//! `mstflint query` (`FW Version`, `FW Version(Running)`, `PSID`),
//! `lspci -Dn -d 15b3:` (network-class functions only), `mstconfig q`
//! (the table after `Configurations:`), `mstconfig i` (which parameters
//! the tool knows), and array parameters (`NAME[i]`, `NAME[a..b]`).

use std::collections::BTreeMap;

/// What `mstflint query` says of a device or an image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FwQuery {
    /// `FW Version:` (the burnt image).
    pub fw_ver: Option<String>,
    /// `FW Version(Running):`, shown while a burnt image waits for a reset.
    pub running_fw_ver: Option<String>,
    /// `PSID:`, the board's firmware flavour.
    pub psid: Option<String>,
}

impl FwQuery {
    /// Whether a burnt image is not yet running (IPA's
    /// `is_image_changed`).
    pub fn image_changed(&self) -> bool {
        self.running_fw_ver.is_some() && self.running_fw_ver != self.fw_ver
    }
}

/// Parses `mstflint query` output; a later line wins, as in IPA.
pub(crate) fn parse_flint_query(text: &str) -> FwQuery {
    let mut q = FwQuery::default();
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("FW Version:").and_then(version) {
            q.fw_ver = Some(v);
        } else if let Some(v) = line.strip_prefix("FW Version(Running):").and_then(version) {
            q.running_fw_ver = Some(v);
        } else if let Some(p) = line.strip_prefix("PSID:").and_then(word) {
            q.psid = Some(p);
        }
    }
    q
}

/// The `N.N.N` at the start of `s` (after blanks).
fn version(s: &str) -> Option<String> {
    let s = s.trim_start();
    let mut end = 0;
    for part in 0..3 {
        let digits = s[end..].bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        end += digits;
        if part < 2 {
            if s.as_bytes().get(end) != Some(&b'.') {
                return None;
            }
            end += 1;
        }
    }
    Some(s[..end].to_string())
}

/// The word (`[A-Za-z0-9_]+`) at the start of `s` (after blanks).
fn word(s: &str) -> Option<String> {
    let s = s.trim_start();
    let n = s
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    (n > 0).then(|| s[..n].to_string())
}

/// One NVIDIA function from `lspci -Dn -d 15b3:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PciFunction {
    /// Its address with domain (`0000:06:00.0`).
    pub pci: String,
    /// The device ID (`101b`).
    pub device_id: String,
}

/// The network-class (`02xx`) functions of `lspci -Dn -d 15b3:` output,
/// as IPA keeps them; a line of another shape is an error naming it.
pub(crate) fn parse_lspci(text: &str) -> Result<Vec<PciFunction>, String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let bad = || format!("unexpected line in `lspci -Dn -d 15b3:` output: {line:?}");
        let mut fields = line.split_whitespace();
        let pci = fields.next().ok_or_else(bad)?;
        let class = fields
            .next()
            .and_then(|c| c.split(':').next())
            .ok_or_else(bad)?;
        let is_network = class.len() >= 4
            && class.starts_with("02")
            && class.as_bytes()[2..4].iter().all(u8::is_ascii_digit);
        if !is_network {
            continue;
        }
        let device_id = line
            .split_once("15b3:")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .ok_or_else(bad)?;
        out.push(PciFunction {
            pci: pci.to_string(),
            device_id: device_id.to_string(),
        });
    }
    Ok(out)
}

/// The `NAME value` table after the `Configurations:` line of
/// `mstconfig -d DEV q` (empty when there is none, as in IPA).
pub(crate) fn parse_mstconfig_query(text: &str) -> BTreeMap<String, String> {
    let mut lines = text.lines().filter(|l| !l.is_empty());
    if !lines.any(|l| l.contains("Configurations:")) {
        return BTreeMap::new();
    }
    lines
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

/// Whether `mstconfig -d DEV i` output names parameter `name` (an array
/// index dropped): the name as a whole word, where IPA looks for it as
/// any substring of the text.
pub(crate) fn known_to_mstconfig(info: &str, name: &str) -> bool {
    let name = ArrayParam::parse(name).map_or(name, |a| a.name);
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    info.match_indices(name).any(|(at, _)| {
        let before = info.as_bytes()[..at].last().copied();
        let after = info.as_bytes().get(at + name.len()).copied();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// An array parameter as a setting names it: `NAME[i]` or `NAME[a..b]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArrayParam<'a> {
    /// The parameter.
    pub name: &'a str,
    /// The first index.
    pub first: u64,
    /// The last index (`first` for a single one).
    pub last: u64,
    /// Whether a range was given.
    pub range: bool,
}

impl<'a> ArrayParam<'a> {
    /// Parses `NAME[i]` / `NAME[a..b]` at the start of `s` (IPA's
    /// `re.match`: text after the `]` is ignored).
    pub(crate) fn parse(s: &'a str) -> Option<Self> {
        let (name, rest) = s.split_once('[')?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return None;
        }
        let (inside, _) = rest.split_once(']')?;
        let (first, last, range) = match inside.split_once("..") {
            Some((a, b)) => (index(a)?, index(b)?, true),
            None => {
                let i = index(inside)?;
                (i, i, false)
            }
        };
        Some(ArrayParam {
            name,
            first,
            last,
            range,
        })
    }

    /// Whether the firmware's `Array[lo..hi]` value admits it, by IPA's
    /// rule: indices in `lo..hi` (the upper bound excluded), a range's
    /// first index below its last.
    pub(crate) fn fits(&self, value: &str) -> bool {
        let Some((lo, hi)) = array_value(value) else {
            return false;
        };
        let inside = |i: u64| lo <= i && i < hi;
        if self.range {
            inside(self.first) && inside(self.last) && self.first < self.last
        } else {
            inside(self.first)
        }
    }
}

fn index(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `Array[lo..hi]` at the start of a `mstconfig q` value.
fn array_value(value: &str) -> Option<(u64, u64)> {
    let inside = value.strip_prefix("Array[")?.split_once(']')?.0;
    let (a, b) = inside.split_once("..")?;
    Some((index(a)?, index(b)?))
}
