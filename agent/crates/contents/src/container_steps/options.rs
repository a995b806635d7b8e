//! `pull_options` and `run_options` in podman's syntax, translated to the
//! typed options this agent's registry client and OCI runtime take. Only
//! the subset operators use is supported (`--tls-verify`, `--authfile`,
//! `--creds` to pull; `--rm`, `--network`, `--privileged`, `--volume`,
//! `--device`, `--env` to run); any other option is refused by name, never
//! dropped, so a step never runs with less isolation or more access than
//! its author wrote without saying so.
//!
//! As in podman, a boolean flag takes its value only as `--flag=value`,
//! and an option with a value takes it as `--opt=value` or `--opt value`.

use std::path::PathBuf;

/// Registry credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `--creds user[:password]`.
    Creds {
        /// The user name.
        user: String,
        /// The password (empty when none was given).
        password: String,
    },
    /// `--authfile PATH`: a containers-auth.json file.
    AuthFile(PathBuf),
}

impl std::fmt::Debug for Auth {
    // The password never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Creds { user, .. } => write!(f, "Creds {{ user: {user:?}, password: <hidden> }}"),
            Auth::AuthFile(p) => write!(f, "AuthFile({p:?})"),
        }
    }
}

/// What `pull_options` say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullOptions {
    /// Verify the registry's certificate (podman's default: true).
    pub tls_verify: bool,
    /// Credentials, if any.
    pub auth: Option<Auth>,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            tls_verify: true,
            auth: None,
        }
    }
}

/// `--volume host:container[:ro|rw]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The host path bind-mounted.
    pub host: PathBuf,
    /// Where it appears in the container.
    pub container: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// `--device host[:container[:perms]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The host device node.
    pub host: PathBuf,
    /// Its path in the container (the host path when not given).
    pub container: PathBuf,
    /// cgroup permissions, a subset of `rwm` (all when not given).
    pub permissions: String,
}

/// What `run_options` say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// `--rm`: the container is removed after it exits. This agent always
    /// removes it; the flag is accepted for podman compatibility.
    pub rm: bool,
    /// `--network=host`: the host's network namespace; otherwise a new
    /// one with only loopback (podman's `--network=none`).
    pub network_host: bool,
    /// `--privileged`: every capability and every host device.
    pub privileged: bool,
    /// `--volume`s.
    pub volumes: Vec<Volume>,
    /// `--device`s.
    pub devices: Vec<Device>,
    /// `--env K=V`s, in order.
    pub env: Vec<(String, String)>,
    /// `--tls-verify` given to `run`: podman only uses it when `run` has
    /// to pull, which never happens here (the image was pulled with
    /// `pull_options`). Accepted, since Ironic's defaults send it.
    pub tls_verify: Option<bool>,
}

/// A refused or malformed option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// An option outside the supported subset.
    #[error("unsupported container option {option:?} in {field}")]
    Unsupported {
        /// The option's name, without any `=value`.
        option: String,
        /// `pull_options` or `run_options`.
        field: &'static str,
    },
    /// A word that is not an option.
    #[error("unexpected argument {word:?} in {field}: only options are accepted")]
    Positional {
        /// The word.
        word: String,
        /// `pull_options` or `run_options`.
        field: &'static str,
    },
    /// An option whose value is missing or does not parse.
    #[error("container option {option:?} in {field}: {why}")]
    BadValue {
        /// The option's name.
        option: String,
        /// `pull_options` or `run_options`.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

const PULL: &str = "pull_options";
const RUN: &str = "run_options";

/// Walks argv words as `(name, inline value)` and hands out values.
struct Words<'a> {
    words: std::slice::Iter<'a, String>,
    field: &'static str,
}

impl<'a> Words<'a> {
    fn next_option(&mut self) -> Option<Result<(&'a str, Option<&'a str>), OptionError>> {
        let word = self.words.next()?;
        if !word.starts_with('-') || word == "-" || word == "--" {
            return Some(Err(OptionError::Positional {
                word: word.clone(),
                field: self.field,
            }));
        }
        Some(Ok(match word.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (word.as_str(), None),
        }))
    }

    /// The value of an option that takes one: inline or the next word.
    fn value(&mut self, name: &str, inline: Option<&'a str>) -> Result<&'a str, OptionError> {
        if let Some(v) = inline {
            return Ok(v);
        }
        self.words
            .next()
            .map(String::as_str)
            .ok_or_else(|| self.bad(name, "needs a value"))
    }

    fn bad(&self, name: &str, why: impl Into<String>) -> OptionError {
        OptionError::BadValue {
            option: name.to_string(),
            field: self.field,
            why: why.into(),
        }
    }

    /// A boolean flag: bare is true, `=value` must be a boolean.
    fn flag(&self, name: &str, inline: Option<&str>) -> Result<bool, OptionError> {
        match inline {
            None => Ok(true),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(self.bad(name, format!("{v:?} is not true or false"))),
            },
        }
    }

    fn unsupported(&self, name: &str) -> OptionError {
        OptionError::Unsupported {
            option: name.to_string(),
            field: self.field,
        }
    }
}

/// Parses `pull_options` words.
pub fn parse_pull(words: &[String]) -> Result<PullOptions, OptionError> {
    let mut w = Words {
        words: words.iter(),
        field: PULL,
    };
    let mut out = PullOptions::default();
    while let Some(opt) = w.next_option() {
        let (name, inline) = opt?;
        match name {
            "--tls-verify" => out.tls_verify = w.flag(name, inline)?,
            "--authfile" => {
                let path = w.value(name, inline)?;
                if path.is_empty() {
                    return Err(w.bad(name, "an empty path"));
                }
                out.auth = Some(Auth::AuthFile(PathBuf::from(path)));
            }
            "--creds" => {
                let creds = w.value(name, inline)?;
                let (user, password) = creds.split_once(':').unwrap_or((creds, ""));
                if user.is_empty() {
                    return Err(w.bad(name, "no user name (USER[:PASSWORD])"));
                }
                out.auth = Some(Auth::Creds {
                    user: user.to_string(),
                    password: password.to_string(),
                });
            }
            _ => return Err(w.unsupported(name)),
        }
    }
    Ok(out)
}

/// Parses `run_options` words.
pub fn parse_run(words: &[String]) -> Result<RunOptions, OptionError> {
    let mut w = Words {
        words: words.iter(),
        field: RUN,
    };
    let mut out = RunOptions::default();
    while let Some(opt) = w.next_option() {
        let (name, inline) = opt?;
        match name {
            "--rm" => out.rm = w.flag(name, inline)?,
            "--privileged" => out.privileged = w.flag(name, inline)?,
            "--tls-verify" => out.tls_verify = Some(w.flag(name, inline)?),
            "--network" | "--net" => match w.value(name, inline)? {
                "host" => out.network_host = true,
                "none" => out.network_host = false,
                other => {
                    return Err(w.bad(name, format!("{other:?}: only host or none is supported")))
                }
            },
            "--volume" | "-v" => {
                let v = w.value(name, inline)?;
                out.volumes.push(volume(v).map_err(|why| w.bad(name, why))?);
            }
            "--device" => {
                let v = w.value(name, inline)?;
                out.devices.push(device(v).map_err(|why| w.bad(name, why))?);
            }
            "--env" | "-e" => {
                let v = w.value(name, inline)?;
                out.env.push(env(v).map_err(|why| w.bad(name, why))?);
            }
            _ => return Err(w.unsupported(name)),
        }
    }
    Ok(out)
}

/// An absolute path with no `..`.
fn abs_path(p: &str, what: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(p);
    if !path.is_absolute() {
        return Err(format!("{what} {p:?} is not an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!("{what} {p:?} contains \"..\""));
    }
    Ok(path)
}

fn volume(v: &str) -> Result<Volume, String> {
    let parts: Vec<&str> = v.split(':').collect();
    let (host, container, read_only) = match parts.as_slice() {
        [h, c] => (*h, *c, false),
        [h, c, "ro"] => (*h, *c, true),
        [h, c, "rw"] => (*h, *c, false),
        [_, _, o] => return Err(format!("mount option {o:?}: only ro or rw is supported")),
        _ => return Err(format!("{v:?} is not HOST-PATH:CONTAINER-PATH[:ro|rw]")),
    };
    Ok(Volume {
        host: abs_path(host, "host path")?,
        container: abs_path(container, "container path")?,
        read_only,
    })
}

fn device(v: &str) -> Result<Device, String> {
    let parts: Vec<&str> = v.split(':').collect();
    let (host, container, permissions) = match parts.as_slice() {
        [h] => (*h, *h, "rwm"),
        [h, c] => (*h, *c, "rwm"),
        [h, c, p] => (*h, *c, *p),
        _ => return Err(format!("{v:?} is not HOST[:CONTAINER[:PERMISSIONS]]")),
    };
    if permissions.is_empty() || !permissions.chars().all(|c| "rwm".contains(c)) {
        return Err(format!(
            "permissions {permissions:?} are not a subset of rwm"
        ));
    }
    Ok(Device {
        host: abs_path(host, "device")?,
        container: abs_path(container, "container path")?,
        permissions: permissions.to_string(),
    })
}

/// `K=V`, or `K` alone, which podman fills from its own environment.
fn env(v: &str) -> Result<(String, String), String> {
    let (k, val) = match v.split_once('=') {
        Some((k, val)) => (k, val.to_string()),
        None => (v, std::env::var(v).unwrap_or_default()),
    };
    if k.is_empty() || k.contains('\0') || val.contains('\0') {
        return Err(format!("{v:?} is not NAME=VALUE"));
    }
    Ok((k.to_string(), val))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn pull_options_translate() {
        assert_eq!(parse_pull(&[]).unwrap(), PullOptions::default());
        assert!(PullOptions::default().tls_verify);
        let p = parse_pull(&w("--tls-verify=false --creds bob:s3:cr")).unwrap();
        assert!(!p.tls_verify);
        assert_eq!(
            p.auth,
            Some(Auth::Creds {
                user: "bob".into(),
                password: "s3:cr".into()
            })
        );
        assert!(!format!("{:?}", p.auth).contains("s3:cr"));
        let p = parse_pull(&w("--tls-verify --authfile=/run/auth.json")).unwrap();
        assert!(p.tls_verify);
        assert_eq!(p.auth, Some(Auth::AuthFile("/run/auth.json".into())));
    }

    #[test]
    fn run_options_translate() {
        let r = parse_run(&w(
            "--rm --network=host --privileged -v /a:/b:ro --volume /c:/d \
             --device /dev/loop7 --device=/dev/sdb:/dev/disk:rw -e A=1 --env B=x=y --tls-verify=false",
        ))
        .unwrap();
        assert!(r.rm && r.network_host && r.privileged);
        assert_eq!(r.tls_verify, Some(false));
        assert_eq!(
            r.volumes,
            [
                Volume {
                    host: "/a".into(),
                    container: "/b".into(),
                    read_only: true
                },
                Volume {
                    host: "/c".into(),
                    container: "/d".into(),
                    read_only: false
                },
            ]
        );
        assert_eq!(r.devices[0].container, PathBuf::from("/dev/loop7"));
        assert_eq!(r.devices[0].permissions, "rwm");
        assert_eq!(r.devices[1].container, PathBuf::from("/dev/disk"));
        assert_eq!(r.devices[1].permissions, "rw");
        assert_eq!(
            r.env,
            [("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert!(!parse_run(&w("--network none")).unwrap().network_host);
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        let e = parse_run(&w("--rm --entrypoint /bin/sh")).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unsupported container option "--entrypoint" in run_options"#
        );
        let e = parse_run(&w("--cap-add=SYS_ADMIN")).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unsupported container option "--cap-add" in run_options"#
        );
        // A run option is not a pull option.
        let e = parse_pull(&w("--privileged")).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unsupported container option "--privileged" in pull_options"#
        );
        let e = parse_run(&w("image:1")).unwrap_err();
        assert!(matches!(e, OptionError::Positional { .. }), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        for (args, needle) in [
            ("--volume", "needs a value"),
            ("--volume relative:/x", "not an absolute path"),
            ("--volume /a:/b:z", "only ro or rw"),
            ("--volume /../etc:/b", "contains \"..\""),
            ("--device /dev/x:/dev/y:rwx", "not a subset of rwm"),
            ("--network bridge", "only host or none"),
            ("--rm=maybe", "not true or false"),
            ("--env =v", "not NAME=VALUE"),
        ] {
            let e = parse_run(&w(args)).unwrap_err().to_string();
            assert!(e.contains(needle), "{args}: {e}");
        }
        let e = parse_pull(&w("--creds :pw")).unwrap_err().to_string();
        assert!(e.contains("no user name"), "{e}");
        // A bare boolean flag does not take the next word as its value.
        let e = parse_pull(&w("--tls-verify false")).unwrap_err();
        assert!(matches!(e, OptionError::Positional { .. }), "{e}");
    }
}
