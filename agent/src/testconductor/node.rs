//! The test conductor's node model: provision states as Ironic names them,
//! the token and agent URL rules of Ironic 39, and the operation in progress.

use serde_json::{json, Value};

/// What the node is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Cleaning with these steps (`None`: automated, from the agent's priorities).
    Clean {
        /// Requested steps (manual cleaning).
        requested: Option<Vec<Value>>,
        /// Steps still to run, first is current once started.
        queue: Vec<Value>,
        /// Whether a step was sent to the agent.
        started: bool,
    },
    /// In-band inspection: waiting for the agent's `continue_inspection`.
    Inspect,
}

/// One node.
#[derive(Debug, Clone)]
pub struct Node {
    /// UUID.
    pub uuid: String,
    /// Port MACs.
    pub macs: Vec<String>,
    /// Ironic provision state (`manageable`, `clean wait`, …).
    pub provision_state: String,
    /// State to reach when the operation ends well.
    pub target_state: Option<String>,
    /// Current agent token.
    pub token: Option<String>,
    /// Recorded callback URL.
    pub agent_url: Option<String>,
    /// Recorded agent certificate.
    pub agent_verify_ca: Option<String>,
    /// Lock held by a conductor task.
    pub locked: bool,
    /// Operation in progress.
    pub operation: Option<Operation>,
    /// Last failure.
    pub last_error: Option<String>,
    /// `driver_internal_info` as sent to the agent.
    pub driver_internal_info: Value,
    /// Heartbeats accepted.
    pub heartbeats: u64,
    /// Lookups answered with a token.
    pub tokens_issued: u64,
    /// `properties` (inspection fills `cpus`, `memory_mb`, `local_gb`, `cpu_arch`).
    pub properties: Value,
    /// The last inspection document received.
    pub inspection_data: Option<Value>,
}

impl Node {
    /// A node in `manageable` with these MACs.
    pub fn new(macs: Vec<String>) -> Self {
        Self {
            uuid: uuid::Uuid::new_v4().to_string(),
            macs: macs.into_iter().map(|m| m.to_ascii_lowercase()).collect(),
            provision_state: "manageable".into(),
            target_state: None,
            token: None,
            agent_url: None,
            agent_verify_ca: None,
            locked: false,
            operation: None,
            last_error: None,
            driver_internal_info: json!({
                "agent_erase_devices_iterations": 1,
                "agent_erase_devices_zeroize": true,
                "agent_continue_if_secure_erase_failed": false,
                "agent_enable_nvme_secure_erase": true,
                "agent_enable_ata_secure_erase": true,
                "disk_erasure_concurrency": 4,
                "agent_erase_skip_read_only": false,
            }),
            heartbeats: 0,
            tokens_issued: 0,
            properties: json!({"cpu_arch": "x86_64"}),
            inspection_data: None,
        }
    }

    /// States in which Ironic answers lookups (`[api]restrict_lookup`).
    pub fn lookup_allowed(&self) -> bool {
        matches!(
            self.provision_state.as_str(),
            "cleaning"
                | "clean wait"
                | "deploying"
                | "wait call-back"
                | "inspecting"
                | "inspect wait"
        )
    }

    /// States in which a heartbeat makes the conductor act.
    pub fn is_waiting(&self) -> bool {
        matches!(
            self.provision_state.as_str(),
            "clean wait" | "wait call-back"
        )
    }

    /// What Ironic does at every power action: forget the token and agent.
    pub fn wipe_token(&mut self) {
        self.token = None;
        self.agent_url = None;
        self.agent_verify_ca = None;
    }

    /// The node as sent to the agent in command parameters (secrets masked).
    pub fn as_agent_dict(&self) -> Value {
        let mut dii = self.driver_internal_info.clone();
        if self.token.is_some() {
            dii["agent_secret_token"] = json!("******");
        }
        json!({
            "uuid": self.uuid,
            "properties": self.properties,
            "instance_info": {},
            "driver_internal_info": dii,
            "provision_state": self.provision_state,
        })
    }

    /// The ports as sent to the agent.
    pub fn ports(&self) -> Value {
        Value::Array(
            self.macs
                .iter()
                .map(|m| json!({"address": m, "pxe_enabled": true, "node_uuid": self.uuid}))
                .collect(),
        )
    }
}
