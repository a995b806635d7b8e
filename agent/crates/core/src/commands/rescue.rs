//! `rescue.finalize_rescue` (PROTOCOL.md §1.8(d)): Ironic, in `rescue wait`,
//! sends the rescue password (a crypt hash with `hashed: true`; plain text
//! from old conductors), and the agent makes the `rescue` login
//! ([`agent_devices::rescue::account`]), answers, then stops its API and its
//! heartbeats for good while the network stays up: the ramdisk's agent
//! exits and PID 1 opens the console and SSH logins. In host mode nothing
//! of this machine is changed: the account is only logged as it would be
//! made, and the agent stops serving and heartbeating as in the ramdisk.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::{CommandError, ErrorKind, Outcome};
use crate::state::{AgentEvent, AgentState};
use agent_base::config::RunMode;
use agent_devices::rescue::{account, crypt};

/// Delay before stopping, so the conductor gets the command's answer.
const STOP_DELAY: Duration = Duration::from_secs(1);

/// `rescue.finalize_rescue`'s parameters (IPA's names and defaults).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FinalizeRescue {
    /// The password, or its crypt hash when `hashed`.
    #[serde(default)]
    pub rescue_password: String,
    /// Whether `rescue_password` is already a crypt hash (Ironic ≥ 15 sends
    /// `instance_info.hashed_rescue_password` with `true`).
    #[serde(default)]
    pub hashed: bool,
}

/// The hash to install: Ironic's, checked, or one made from the plain text.
pub(crate) fn rescue_hash(p: &FinalizeRescue) -> Result<String, CommandError> {
    if p.rescue_password.is_empty() {
        // IPA would hash the empty string: a login without a password.
        return Err(CommandError::new(
            ErrorKind::InvalidCommandParams,
            "rescue_password is empty: refusing a rescue login without a password",
        ));
    }
    if p.hashed {
        crypt::check_hash(&p.rescue_password).map_err(|e| {
            CommandError::new(
                ErrorKind::InvalidCommandParams,
                format!("rescue_password (hashed): {e}"),
            )
        })?;
        Ok(p.rescue_password.clone())
    } else {
        Ok(crypt::hash_password(&p.rescue_password))
    }
}

/// `rescue.finalize_rescue` (sync): `null`, then the agent stops.
pub(crate) async fn finalize_rescue(state: Arc<AgentState>, p: FinalizeRescue) -> Outcome {
    let hash = match rescue_hash(&p) {
        Ok(h) => h,
        Err(e) => return Outcome::Failed(e),
    };
    let scheme = hash[..3].to_string();
    match state.config.mode {
        RunMode::Ramdisk => {
            let done = tokio::task::spawn_blocking(move || account::install(Path::new("/"), &hash))
                .await;
            match done {
                Ok(Ok(())) => tracing::warn!(
                    user = account::USER,
                    scheme,
                    "rescue: login made; the agent stops serving and heartbeating, the network stays up"
                ),
                Ok(Err(e)) => {
                    return Outcome::Failed(CommandError::from_anyhow(
                        ErrorKind::CommandExecution,
                        &e.context("Rescue Operation failed when writing the rescue account"),
                    ))
                }
                Err(e) => {
                    return Outcome::Failed(CommandError::new(
                        ErrorKind::CommandExecution,
                        e.to_string(),
                    ))
                }
            }
        }
        RunMode::Container => {
            // The container's accounts are not the host's, and the host's
            // are CoreOS's (Ignition's): nothing to log in to.
            return Outcome::Failed(CommandError::new(
                ErrorKind::CommandExecution,
                "Rescue is not supported by the agent's container form (OpenShift's ironic-agent): it has no login of its own and does not change the host's accounts".to_string(),
            ));
        }
        RunMode::Host => tracing::warn!(
            user = account::USER,
            scheme,
            "host mode: rescue simulated; no account or password of this machine is changed; the agent stops serving and heartbeating"
        ),
    }
    let s = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(STOP_DELAY).await;
        s.notify(AgentEvent::Rescued);
    });
    Outcome::Done(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::commands::dispatch::request::run_named;
    use agent_base::config::Config;

    const HASH: &str = "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA";

    #[test]
    fn hashed_passwords_are_checked_and_plain_ones_hashed() {
        let p = |pw: &str, hashed| FinalizeRescue {
            rescue_password: pw.into(),
            hashed,
        };
        assert_eq!(rescue_hash(&p(HASH, true)).unwrap(), HASH);
        let h = rescue_hash(&p("s3cret", false)).unwrap();
        assert!(crypt::verify("s3cret", &h), "{h}");
        let e = rescue_hash(&p("s3cret", true)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidCommandParams);
        assert!(e.details.contains("crypt hash"), "{e:?}");
        assert!(rescue_hash(&p("", false)).is_err());
        assert!(rescue_hash(&p(&format!("{HASH}\nx"), true)).is_err());
    }

    #[tokio::test]
    async fn host_mode_changes_nothing_and_stops_the_agent() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let s = Arc::new(AgentState::new(Config::default(), Some(tx)));
        let machine = || {
            (
                std::fs::read("/etc/passwd").ok(),
                Path::new("/etc/.rescued").exists(),
                Path::new("/etc/ipa-rescue-config").exists(),
            )
        };
        let before = machine();
        let o = run_named(
            s.clone(),
            "rescue.finalize_rescue",
            json!({"rescue_password": HASH, "hashed": true}),
        )
        .await;
        assert!(matches!(o, Outcome::Done(Value::Null)), "{o:?}");
        let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap();
        assert!(matches!(ev, Some(AgentEvent::Rescued)), "{ev:?}");
        assert_eq!(
            machine(),
            before,
            "host mode changed this machine's accounts"
        );
        let o = run_named(
            s,
            "rescue.finalize_rescue",
            json!({"rescue_password": "plain", "hashed": true}),
        )
        .await;
        assert!(matches!(o, Outcome::Failed(_)), "{o:?}");
    }
}
