//! Which image a container step may run, and with which options: IPA 13's
//! `_apply_container_policy`, applied before anything is pulled.
//!
//! Steps baked into the ramdisk (the steps file) are trusted: their own
//! options apply, else the configured ones. A step whose image comes in
//! its arguments (`generic_container_step` from a runbook, a deploy
//! template or a servicing request) is not: unless
//! `allow_arbitrary_containers`, its image must be in `allowed_containers`
//! and only the configured options apply — the caller's are ignored, since
//! options alone (`--privileged`, `-v /:/host`) defeat an image allowlist.
//! With `require_tls_verify`, a pull with `--tls-verify=false` is refused
//! here, before any connection is made.

use super::options::{self, PullOptions, RunOptions};
use super::settings::{as_options, ContainerSettings};
use super::ContainerError;

/// Transports naming an image in a remote registry, stripped before
/// comparing (`docker://r/x:1` and `r/x:1` are the same image).
const REGISTRY_TRANSPORTS: [&str; 2] = ["docker://", "oci://"];

/// containers-transports(5) that name local storage or files; a reference
/// with one of them names no registry image and matches nothing.
const LOCAL_TRANSPORTS: [&str; 8] = [
    "containers-storage:",
    "docker-archive:",
    "docker-daemon:",
    "oci-archive:",
    "oci:",
    "dir:",
    "sif:",
    "ostree:",
];

/// The registry reference `value` names, without its transport; `None`
/// for any other transport (fails closed: it matches no allowlist entry,
/// not even one spelled the same way, and cannot be pulled).
pub fn normalize_image_ref(value: &str) -> Option<&str> {
    for prefix in REGISTRY_TRANSPORTS {
        if let Some(rest) = value.strip_prefix(prefix) {
            return (!rest.contains("://")).then_some(rest);
        }
    }
    if value.contains("://") || LOCAL_TRANSPORTS.iter().any(|t| value.starts_with(t)) {
        return None;
    }
    Some(value)
}

/// Who wrote the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The ramdisk's steps file.
    Trusted,
    /// Step arguments from the conductor.
    Arguments,
}

/// What a permitted step runs: the registry reference and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permitted {
    /// The image reference without its transport.
    pub reference: String,
    /// How to pull it.
    pub pull: PullOptions,
    /// How to run it.
    pub run: RunOptions,
}

/// Decides whether `container_url` may run and with which options.
/// `pull_words` / `run_words` are the step's own options (IPA's
/// `_as_options` already applied); empty means none given.
pub fn apply(
    settings: &ContainerSettings,
    container_url: &str,
    pull_words: &[String],
    run_words: &[String],
    origin: Origin,
) -> Result<Permitted, ContainerError> {
    if container_url.is_empty() {
        return Err(ContainerError::InvalidParams(
            "container_url must be a non-empty string, got str.".into(),
        ));
    }
    let (pull, run) = if origin == Origin::Trusted || settings.allow_arbitrary_containers {
        let or_configured = |own: &[String], configured: &[String]| {
            if own.is_empty() {
                as_options(configured)
            } else {
                own.to_vec()
            }
        };
        (
            or_configured(pull_words, &settings.pull_options),
            or_configured(run_words, &settings.run_options),
        )
    } else {
        let wanted = normalize_image_ref(container_url);
        let listed = settings
            .allowed_containers
            .iter()
            .filter_map(|a| normalize_image_ref(a))
            .any(|a| Some(a) == wanted);
        if !listed {
            tracing::error!(
                "Refusing to run container {container_url}: it is not listed in \
                 [container]allowed_containers, which permits {:?}",
                settings.allowed_containers
            );
            return Err(ContainerError::NotPermitted(container_url.to_string()));
        }
        if !pull_words.is_empty() || !run_words.is_empty() {
            tracing::info!(
                "container {container_url}: the step's own pull/run options are ignored; \
                 only [container] pull_options and run_options apply to an image from step arguments"
            );
        }
        (settings.pull_words(), settings.run_words())
    };
    let reference = normalize_image_ref(container_url).ok_or_else(|| {
        ContainerError::InvalidParams(format!(
            "container_url {container_url:?}: only registry references (optionally docker:// or oci://) can be pulled"
        ))
    })?;
    let pull = options::parse_pull(&pull)?;
    if settings.require_tls_verify && !pull.tls_verify {
        return Err(ContainerError::Configuration(format!(
            "container image {reference}: refusing to pull it without TLS verification \
             (--tls-verify=false in pull_options): [container] require_tls_verify \
             (kernel parameter {REQUIRE_TLS_VERIFY_PARAM}) is on"
        )));
    }
    Ok(Permitted {
        reference: reference.to_string(),
        pull,
        run: options::parse_run(&run)?,
    })
}

/// The kernel parameter that turns `[container] require_tls_verify` on.
pub const REQUIRE_TLS_VERIFY_PARAM: &str = "ipa-container-require-tls-verify";

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn settings(allowed: &[&str]) -> ContainerSettings {
        ContainerSettings {
            allowed_containers: allowed.iter().map(|s| s.to_string()).collect(),
            pull_options: vec!["--tls-verify=false".into()],
            ..ContainerSettings::default()
        }
    }

    #[test]
    fn normalisation_strips_registry_transports_only() {
        assert_eq!(
            normalize_image_ref("docker://r:5000/t:1"),
            Some("r:5000/t:1")
        );
        assert_eq!(
            normalize_image_ref("oci://r/t@sha256:ab"),
            Some("r/t@sha256:ab")
        );
        assert_eq!(normalize_image_ref("r:5000/t:1"), Some("r:5000/t:1"));
        assert_eq!(normalize_image_ref("containers-storage:r/t:1"), None);
        assert_eq!(normalize_image_ref("oci:/layout:t"), None);
        assert_eq!(normalize_image_ref("https://r/t:1"), None);
        assert_eq!(normalize_image_ref("docker://https://r/t"), None);
    }

    #[test]
    fn an_allowed_image_runs_with_the_configured_options_only() {
        let s = settings(&["docker://r.example/tool:1"]);
        let p = apply(
            &s,
            "r.example/tool:1",
            &words("--tls-verify=true"),
            &words("--privileged -v /:/host"),
            Origin::Arguments,
        )
        .unwrap();
        assert_eq!(p.reference, "r.example/tool:1");
        assert!(!p.pull.tls_verify, "the configured pull options apply");
        assert!(!p.run.privileged && p.run.volumes.is_empty());
        assert!(p.run.rm && p.run.network_host);
    }

    #[test]
    fn a_listed_local_transport_matches_nothing() {
        let s = settings(&["containers-storage:r.example/tool:1", "r.example/tool:1"]);
        let e = apply(
            &s,
            "containers-storage:r.example/tool:1",
            &[],
            &[],
            Origin::Arguments,
        )
        .unwrap_err();
        assert!(matches!(e, ContainerError::NotPermitted(_)), "{e}");
        let e = apply(&s, "r.example/other:1", &[], &[], Origin::Arguments).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Container image r.example/other:1 is not in [container]allowed_containers \
             and [container]allow_arbitrary_containers is not enabled."
        );
        let e = apply(&s, "", &[], &[], Origin::Arguments).unwrap_err();
        assert!(matches!(e, ContainerError::InvalidParams(_)), "{e}");
    }

    #[test]
    fn trusted_or_arbitrary_steps_bring_their_own_options() {
        let s = settings(&[]);
        for (origin, s) in [
            (Origin::Trusted, s.clone()),
            (
                Origin::Arguments,
                ContainerSettings {
                    allow_arbitrary_containers: true,
                    ..s.clone()
                },
            ),
        ] {
            let p = apply(
                &s,
                "docker://any/img:2",
                &[],
                &words("--privileged"),
                origin,
            )
            .unwrap();
            assert_eq!(p.reference, "any/img:2");
            assert!(p.run.privileged && !p.run.rm);
            assert!(
                !p.pull.tls_verify,
                "no own pull options: the configured ones"
            );
        }
        // Even trusted, a local transport cannot be pulled.
        let e = apply(&s, "dir:/tmp/x", &[], &[], Origin::Trusted).unwrap_err();
        assert!(e.to_string().contains("only registry references"), "{e}");
        // Nor an option outside the subset.
        let e = apply(&s, "any/img:2", &[], &words("--pid=host"), Origin::Trusted).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unsupported container option "--pid" in run_options"#
        );
    }

    #[test]
    fn require_tls_verify_refuses_unverified_pulls_by_name() {
        let strict = ContainerSettings {
            require_tls_verify: true,
            ..settings(&["r.example/tool:1"])
        };
        for (origin, own) in [
            (Origin::Arguments, ""),
            (Origin::Trusted, "--tls-verify=false"),
        ] {
            let e = apply(&strict, "r.example/tool:1", &words(own), &[], origin).unwrap_err();
            assert!(matches!(e, ContainerError::Configuration(_)), "{e}");
            assert_eq!(
                e.to_string(),
                "container image r.example/tool:1: refusing to pull it without TLS \
                 verification (--tls-verify=false in pull_options): [container] \
                 require_tls_verify (kernel parameter ipa-container-require-tls-verify) is on"
            );
        }
        // Verified pulls go ahead.
        let p = apply(
            &strict,
            "r.example/tool:1",
            &words("--tls-verify=true"),
            &[],
            Origin::Trusted,
        )
        .unwrap();
        assert!(p.pull.tls_verify);
    }
}
