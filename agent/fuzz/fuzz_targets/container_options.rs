//! `pull_options` and `run_options` in podman's syntax (one word a line),
//! as a step's arguments or the `[container]` settings give them: no
//! panic; every refusal names its field; accepted run options hold only
//! absolute paths without `..`, device permissions within `rwm` and
//! non-empty variable names, and say the same when written back as
//! canonical words and parsed again.
#![no_main]

use agent_contents::container_steps::options::{parse_pull, parse_run, Auth, OptionError, RunOptions};
use libfuzzer_sys::fuzz_target;

fn field(e: &OptionError) -> &'static str {
    match e {
        OptionError::Unsupported { field, .. }
        | OptionError::Positional { field, .. }
        | OptionError::BadValue { field, .. } => field,
    }
}

/// `r` as the words that should parse back to it.
fn canonical(r: &RunOptions) -> Vec<String> {
    let mut w = vec![
        format!("--rm={}", r.rm),
        format!("--privileged={}", r.privileged),
        format!("--network={}", if r.network_host { "host" } else { "none" }),
    ];
    if let Some(t) = r.tls_verify {
        w.push(format!("--tls-verify={t}"));
    }
    for v in &r.volumes {
        let mode = if v.read_only { "ro" } else { "rw" };
        w.push("--volume".into());
        w.push(format!("{}:{}:{mode}", v.host.display(), v.container.display()));
    }
    for d in &r.devices {
        w.push(format!(
            "--device={}:{}:{}",
            d.host.display(),
            d.container.display(),
            d.permissions
        ));
    }
    for (k, v) in &r.env {
        w.push("-e".into());
        w.push(format!("{k}={v}"));
    }
    w
}

fn clean(p: &std::path::Path) -> bool {
    p.is_absolute()
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let words: Vec<String> = text.split('\n').map(String::from).collect();
    match parse_pull(&words) {
        Ok(p) => match p.auth {
            Some(Auth::Creds { user, .. }) => assert!(!user.is_empty()),
            Some(Auth::AuthFile(path)) => assert!(!path.as_os_str().is_empty()),
            None => {}
        },
        Err(e) => {
            assert_eq!(field(&e), "pull_options");
            assert!(e.to_string().contains("pull_options"), "{e}");
        }
    }
    match parse_run(&words) {
        Ok(r) => {
            for v in &r.volumes {
                assert!(clean(&v.host) && clean(&v.container), "{v:?}");
            }
            for d in &r.devices {
                assert!(clean(&d.host) && clean(&d.container), "{d:?}");
                assert!(!d.permissions.is_empty());
                assert!(d.permissions.chars().all(|c| "rwm".contains(c)), "{d:?}");
            }
            for (k, v) in &r.env {
                assert!(!k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
            }
            let again = parse_run(&canonical(&r)).expect("canonical words parse");
            assert_eq!(again, r);
        }
        Err(e) => {
            assert_eq!(field(&e), "run_options");
            assert!(e.to_string().contains("run_options"), "{e}");
        }
    }
});
