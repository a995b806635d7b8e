//! `ci/demo --bmc …`'s flags: parsed and checked (files read, formats
//! validated) before anything starts, each error naming the flag.

use std::path::{Path, PathBuf};

use super::error::Problem;

/// The help text of `ci/demo` (both modes), which `ci/demo --help` prints
/// without building anything.
pub const USAGE: &str = include_str!("../bin/demo_usage.txt");

/// How the BMC's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The system's roots (webpki).
    System,
    /// This CA file.
    Ca(PathBuf),
    /// Not at all (`--bmc-insecure`).
    Insecure,
}

/// The image to deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A local file, served from `--http-address`.
    File(PathBuf),
    /// A URL the server's agent downloads itself.
    Url(String),
}

/// How the server boots the agent (`--boot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// Ironic's ISO in the BMC's virtual CD (`redfish-virtual-media`).
    Vmedia,
    /// The NIC's PXE, answered from this machine with this address for
    /// `--mac` (`ipxe`; [`super::pxe`]).
    Pxe(super::pxe::Lease),
}

impl Boot {
    /// Ironic's boot interface for it.
    pub fn ironic_interface(&self) -> &'static str {
        match self {
            Boot::Vmedia => "redfish-virtual-media",
            Boot::Pxe(_) => "ipxe",
        }
    }
}

/// Everything `--bmc` mode was given, checked.
#[derive(Debug, Clone)]
pub struct Options {
    /// `https://HOST[:PORT]`.
    pub bmc_address: String,
    /// `/redfish/v1/Systems/ID`.
    pub system_path: String,
    /// The BMC user.
    pub user: String,
    /// The password (read from the file).
    pub password: String,
    /// How the BMC's certificate is checked.
    pub trust: Trust,
    /// The boot NIC's MAC, lower case.
    pub mac: String,
    /// Where Ironic and the HTTP server listen.
    pub http_address: std::net::Ipv4Addr,
    /// The image.
    pub image: Image,
    /// `(algorithm, hex)` when given.
    pub checksum: Option<(String, String)>,
    /// Ironic's `network_data`, when given.
    pub network_data: Option<serde_json::Value>,
    /// How the server boots the agent.
    pub boot: Boot,
    /// Stop after inspection.
    pub inspect_only: bool,
    /// The serial of the disk the operator allows to be written.
    pub confirm_disk: Option<String>,
    /// Seconds the BMC may take to read the ISO.
    pub iso_read_timeout: u64,
    /// Seconds from the ISO read to the agent's first heartbeat.
    pub heartbeat_timeout: u64,
    /// Only check, then stop.
    pub check_only: bool,
}

fn flag(flag: &str, reason: impl Into<String>) -> Problem {
    Problem::Flag {
        flag: flag.to_string(),
        reason: reason.into(),
    }
}

fn read_file(name: &'static str, path: &Path) -> Result<String, Problem> {
    std::fs::read_to_string(path).map_err(|e| Problem::File {
        flag: name,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

impl Options {
    /// Whether `args` ask for `--bmc` mode.
    pub fn wanted(args: &[String]) -> bool {
        args.iter().any(|a| a == "--bmc" || a.starts_with("--bmc="))
    }

    /// Parses `args` (without the program name).
    pub fn parse(args: &[String]) -> Result<Self, Problem> {
        let mut v: std::collections::BTreeMap<&'static str, String> = Default::default();
        let mut switches: Vec<&'static str> = Vec::new();
        const VALUED: [&str; 13] = [
            "--bmc",
            "--bmc-user",
            "--bmc-password-file",
            "--bmc-ca",
            "--mac",
            "--http-address",
            "--image",
            "--checksum",
            "--network-data",
            "--boot",
            "--confirm-disk",
            "--iso-read-timeout",
            "--heartbeat-timeout",
        ];
        const SWITCHES: [&str; 3] = ["--bmc-insecure", "--inspect-only", "--check"];
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (name, inline) = match a.split_once('=') {
                Some((n, val)) => (n, Some(val.to_string())),
                None => (a.as_str(), None),
            };
            if let Some(&k) = VALUED.iter().find(|k| **k == name) {
                let val = match inline {
                    Some(val) => val,
                    None => it.next().cloned().ok_or_else(|| flag(k, "needs a value"))?,
                };
                if v.insert(k, val).is_some() {
                    return Err(flag(k, "given twice"));
                }
            } else if let Some(&k) = SWITCHES.iter().find(|k| **k == a.as_str()) {
                switches.push(k);
            } else {
                return Err(flag(a, "unknown flag with --bmc"));
            }
        }
        let need = |k: &'static str| v.get(k).cloned().ok_or_else(|| flag(k, "missing"));
        let (bmc_address, system_path) = split_bmc_url(&need("--bmc")?)?;
        let password_file = PathBuf::from(need("--bmc-password-file")?);
        let password = read_file("--bmc-password-file", &password_file)?
            .trim_end_matches(['\n', '\r'])
            .to_string();
        if password.is_empty() {
            return Err(Problem::File {
                flag: "--bmc-password-file",
                path: password_file,
                reason: "empty".into(),
            });
        }
        let insecure = switches.contains(&"--bmc-insecure");
        let trust = match (v.get("--bmc-ca"), insecure) {
            (Some(_), true) => {
                return Err(flag("--bmc-ca", "give either --bmc-ca or --bmc-insecure"))
            }
            (Some(ca), false) => {
                let ca = PathBuf::from(ca);
                let pem = read_file("--bmc-ca", &ca)?;
                if !pem.contains("-----BEGIN CERTIFICATE-----") {
                    return Err(Problem::File {
                        flag: "--bmc-ca",
                        path: ca,
                        reason: "no PEM certificate in it".into(),
                    });
                }
                Trust::Ca(std::fs::canonicalize(&ca).unwrap_or(ca))
            }
            (None, true) => Trust::Insecure,
            (None, false) => Trust::System,
        };
        let mac = parse_mac(&need("--mac")?)?;
        let addr = need("--http-address")?;
        let http_address = addr
            .parse()
            .map_err(|_| flag("--http-address", format!("{addr:?} is not an IPv4 address")))?;
        let image = need("--image")?;
        let image = if image.starts_with("http://") || image.starts_with("https://") {
            Image::Url(image)
        } else {
            let p = PathBuf::from(&image);
            let meta = std::fs::metadata(&p).map_err(|e| Problem::File {
                flag: "--image",
                path: p.clone(),
                reason: format!("{e} (give a file or an http(s) URL)"),
            })?;
            if !meta.is_file() {
                return Err(flag("--image", format!("{image} is not a file")));
            }
            Image::File(std::fs::canonicalize(&p).unwrap_or(p))
        };
        let checksum = v.get("--checksum").map(|c| parse_checksum(c)).transpose()?;
        if matches!(image, Image::Url(_)) && checksum.is_none() {
            return Err(flag(
                "--checksum",
                "needed with an image URL (the agent verifies what it writes)",
            ));
        }
        let network_data = v
            .get("--network-data")
            .map(|f| parse_network_data(Path::new(f)))
            .transpose()?;
        let boot = match v.get("--boot").map(String::as_str) {
            None | Some("vmedia") => Boot::Vmedia,
            // The address the demo's DHCP server gives the server.
            Some("pxe") => Boot::Pxe(super::pxe::lease_for(network_data.as_ref(), &mac)?),
            Some(other) => {
                return Err(flag(
                    "--boot",
                    format!("{other:?}: give vmedia (the default) or pxe"),
                ))
            }
        };
        let secs = |k: &'static str, default: u64| -> Result<u64, Problem> {
            v.get(k).map_or(Ok(default), |s| {
                s.parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| flag(k, format!("{s:?} is not a number of seconds")))
            })
        };
        Ok(Self {
            bmc_address,
            system_path,
            user: need("--bmc-user")?,
            password,
            trust,
            mac,
            http_address,
            image,
            checksum,
            network_data,
            boot,
            inspect_only: switches.contains(&"--inspect-only"),
            confirm_disk: v.get("--confirm-disk").cloned(),
            iso_read_timeout: secs("--iso-read-timeout", 120)?,
            heartbeat_timeout: secs("--heartbeat-timeout", 600)?,
            check_only: switches.contains(&"--check"),
        })
    }
}

/// `redfish+https://HOST[:PORT]/redfish/v1/Systems/ID` (or `https://…`)
/// into `https://HOST[:PORT]` and `/redfish/v1/Systems/ID`.
fn split_bmc_url(url: &str) -> Result<(String, String), Problem> {
    let plain = url.strip_prefix("redfish+").unwrap_or(url);
    let bad = |why: &str| {
        flag(
            "--bmc",
            format!("{url:?} {why} (want redfish+https://HOST[:PORT]/redfish/v1/Systems/ID)"),
        )
    };
    let (scheme, rest) = plain
        .split_once("://")
        .ok_or_else(|| bad("has no scheme"))?;
    if scheme != "https" && scheme != "http" {
        return Err(bad("is neither https nor http"));
    }
    let at = rest.find('/').ok_or_else(|| bad("has no system path"))?;
    let (host, path) = rest.split_at(at);
    let path = path.trim_end_matches('/');
    let id = path
        .strip_prefix("/redfish/v1/Systems/")
        .ok_or_else(|| bad("is not a /redfish/v1/Systems/ID path"))?;
    if host.is_empty() || id.is_empty() || id.contains('/') {
        return Err(bad("lacks a host or a system id"));
    }
    Ok((format!("{scheme}://{host}"), path.to_string()))
}

fn parse_mac(mac: &str) -> Result<String, Problem> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    if parts.len() != 6
        || !parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(flag("--mac", format!("{mac:?} is not a MAC address")));
    }
    Ok(parts.join(":").to_ascii_lowercase())
}

fn parse_checksum(c: &str) -> Result<(String, String), Problem> {
    let (algo, hex) = match c.split_once(':') {
        Some((a, h)) => (a.to_string(), h),
        None if c.len() == 128 => ("sha512".to_string(), c),
        None => ("sha256".to_string(), c),
    };
    let len = match algo.as_str() {
        "sha256" => 64,
        "sha512" => 128,
        _ => return Err(flag("--checksum", format!("{algo}: use sha256 or sha512"))),
    };
    if hex.len() != len || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(flag(
            "--checksum",
            format!("{hex:?} is not {len} hex digits of {algo}"),
        ));
    }
    Ok((algo, hex.to_ascii_lowercase()))
}

fn parse_network_data(path: &Path) -> Result<serde_json::Value, Problem> {
    let text = read_file("--network-data", path)?;
    let bad = |reason: String| Problem::File {
        flag: "--network-data",
        path: path.to_path_buf(),
        reason,
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    for key in ["links", "networks"] {
        if !v[key].is_array() {
            return Err(bad(format!(
                "no {key:?} list (Ironic's network_data format, as in OpenStack's network_data.json)"
            )));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_is_in_the_help_text() {
        for f in [
            "--bmc ",
            "--bmc-user",
            "--bmc-password-file",
            "--bmc-ca",
            "--bmc-insecure",
            "--mac",
            "--http-address",
            "--image",
            "--checksum",
            "--network-data",
            "--boot",
            "--inspect-only",
            "--confirm-disk",
            "--iso-read-timeout",
            "--heartbeat-timeout",
            "--check",
            "--bios",
            "--test-conductor",
        ] {
            assert!(USAGE.contains(f), "{f} not in the help text");
        }
    }

    #[test]
    fn the_bmc_url_splits_into_address_and_system() {
        assert_eq!(
            split_bmc_url("redfish+https://10.0.0.5:8443/redfish/v1/Systems/abc/").unwrap(),
            (
                "https://10.0.0.5:8443".to_string(),
                "/redfish/v1/Systems/abc".to_string()
            )
        );
        let e = split_bmc_url("https://bmc/redfish/v1/Managers/1").unwrap_err();
        assert!(e.to_string().contains("--bmc"), "{e}");
        assert!(split_bmc_url("ftp://bmc/redfish/v1/Systems/1").is_err());
    }

    #[test]
    fn macs_and_checksums_are_checked() {
        assert_eq!(parse_mac("52-54-00-AA-bb-01").unwrap(), "52:54:00:aa:bb:01");
        assert!(parse_mac("52:54:00:aa:bb").is_err());
        let sha = "a".repeat(64);
        assert_eq!(
            parse_checksum(&format!("sha256:{sha}")).unwrap(),
            ("sha256".into(), sha.clone())
        );
        assert_eq!(parse_checksum(&sha).unwrap().0, "sha256");
        assert!(parse_checksum("md5:abc").is_err());
        assert!(parse_checksum("sha256:abc").is_err());
    }

    #[test]
    fn a_missing_flag_is_named() {
        let e =
            Options::parse(&["--bmc".into(), "https://b/redfish/v1/Systems/1".into()]).unwrap_err();
        assert!(
            e.to_string().starts_with("--bmc-password-file: missing"),
            "{e}"
        );
    }
}
