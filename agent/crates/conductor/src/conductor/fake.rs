//! A scripted conductor for unit tests of the agent's session and of the
//! inspection's retries: answers lookups, heartbeats and inspection
//! callbacks from queues and records every call with the (tokio) time it
//! came, so back-off and heartbeat timing are tested without sockets, on
//! paused time.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::lookup::parse_lookup;
use super::{ApiVersion, Conductor, ConductorError, Heartbeat, InspectionAnswer, LookupResult};

/// One call the agent made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `GET /`.
    MaxVersion,
    /// A lookup.
    Lookup,
    /// A heartbeat with this token.
    Heartbeat(String),
    /// An inspection callback to this URL with this document.
    Inspection {
        /// The callback URL.
        url: String,
        /// The document posted.
        doc: serde_json::Value,
    },
}

/// Answers from scripts; when a script runs out, lookups and inspection
/// callbacks fail (unreachable) and heartbeats succeed.
#[derive(Debug)]
pub struct ScriptedConductor {
    urls: Vec<String>,
    lookups: Mutex<VecDeque<Result<LookupResult, ConductorError>>>,
    heartbeats: Mutex<VecDeque<Result<(), ConductorError>>>,
    inspections: Mutex<VecDeque<Result<InspectionAnswer, ConductorError>>>,
    calls: Mutex<Vec<(Call, Instant)>>,
}

impl Default for ScriptedConductor {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedConductor {
    /// A conductor with empty scripts.
    pub fn new() -> Self {
        ScriptedConductor {
            urls: vec!["http://conductor.test:6385".into()],
            lookups: Mutex::default(),
            heartbeats: Mutex::default(),
            inspections: Mutex::default(),
            calls: Mutex::default(),
        }
    }

    /// Queues a lookup answer.
    pub fn then_lookup(&self, answer: Result<LookupResult, ConductorError>) -> &Self {
        self.lookups.lock().expect("lookups").push_back(answer);
        self
    }

    /// Queues a heartbeat answer.
    pub fn then_heartbeat(&self, answer: Result<(), ConductorError>) -> &Self {
        self.heartbeats
            .lock()
            .expect("heartbeats")
            .push_back(answer);
        self
    }

    /// Queues an answer to an inspection callback.
    pub fn then_inspection(&self, answer: Result<InspectionAnswer, ConductorError>) -> &Self {
        self.inspections
            .lock()
            .expect("inspections")
            .push_back(answer);
        self
    }

    /// The calls so far, with when they came.
    pub fn calls(&self) -> Vec<(Call, Instant)> {
        self.calls.lock().expect("calls").clone()
    }

    /// When the calls of one kind came.
    pub fn times(&self, which: fn(&Call) -> bool) -> Vec<Instant> {
        self.calls()
            .into_iter()
            .filter(|(c, _)| which(c))
            .map(|(_, t)| t)
            .collect()
    }

    fn record(&self, call: Call) {
        self.calls
            .lock()
            .expect("calls")
            .push((call, Instant::now()));
    }
}

/// A lookup answer for node `uuid` with `heartbeat_timeout` and `token`.
pub fn found(uuid: &str, heartbeat_timeout: Duration, token: &str) -> LookupResult {
    parse_lookup(&json!({
        "node": {"uuid": uuid},
        "config": {
            "heartbeat_timeout": heartbeat_timeout.as_secs_f64(),
            "agent_token": token,
        },
    }))
    .expect("a valid lookup answer")
}

/// [`found`] for a node whose deploy is under way (its
/// `driver_internal_info.deploy_steps` set, as Ironic sets it during a
/// deploy).
pub fn found_deploying(uuid: &str, heartbeat_timeout: Duration, token: &str) -> LookupResult {
    parse_lookup(&json!({
        "node": {"uuid": uuid, "driver_internal_info": {"deploy_steps": [
            {"step": "boot_instance", "interface": "deploy", "priority": 20, "args": {}}
        ]}},
        "config": {
            "heartbeat_timeout": heartbeat_timeout.as_secs_f64(),
            "agent_token": token,
        },
    }))
    .expect("a valid lookup answer")
}

/// An HTTP error answer.
pub fn http(status: u16, message: &str) -> ConductorError {
    ConductorError::Http {
        url: "http://conductor.test:6385".into(),
        status,
        message: message.into(),
    }
}

impl Conductor for ScriptedConductor {
    fn urls(&self) -> &[String] {
        &self.urls
    }

    async fn max_version(&self) -> Result<ApiVersion, ConductorError> {
        self.record(Call::MaxVersion);
        Ok(ApiVersion::AUTO_TLS)
    }

    async fn lookup(
        &self,
        _version: ApiVersion,
        _macs: &[String],
        _node_uuid: Option<&str>,
    ) -> Result<LookupResult, ConductorError> {
        self.record(Call::Lookup);
        self.lookups
            .lock()
            .expect("lookups")
            .pop_front()
            .unwrap_or_else(|| {
                Err(ConductorError::Unreachable {
                    url: "http://conductor.test:6385".into(),
                    reason: "the script has no more lookups".into(),
                })
            })
    }

    async fn heartbeat(
        &self,
        _version: ApiVersion,
        _node_uuid: &str,
        hb: &Heartbeat<'_>,
    ) -> Result<(), ConductorError> {
        self.record(Call::Heartbeat(hb.agent_token.to_string()));
        self.heartbeats
            .lock()
            .expect("heartbeats")
            .pop_front()
            .unwrap_or(Ok(()))
    }

    async fn continue_inspection(
        &self,
        url: &str,
        body: &str,
    ) -> Result<InspectionAnswer, ConductorError> {
        self.record(Call::Inspection {
            url: url.to_string(),
            doc: serde_json::from_str(body).expect("the agent posts JSON"),
        });
        self.inspections
            .lock()
            .expect("inspections")
            .pop_front()
            .unwrap_or_else(|| {
                Err(ConductorError::Unreachable {
                    url: url.to_string(),
                    reason: "the script has no more inspection answers".into(),
                })
            })
    }
}
