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
    /// A `direct` deploy of a whole-disk image.
    Deploy(DeployPhase),
    /// Rescue (Ironic's `agent` rescue interface): the crypt hash of the
    /// rescue password, sent with `rescue.finalize_rescue`.
    Rescue(String),
}

/// Where a deploy stands (the conductor's deploy step, PROTOCOL.md §1.8 (a)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployPhase {
    /// Waiting for the agent's first heartbeat (`deploy.deploy` done).
    Boot,
    /// `write_image` sent; each heartbeat polls the command list.
    WriteImage,
}

/// Boot mode of the node (Ironic's `boot_mode` capability; Ironic 39's
/// default is UEFI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BootMode {
    /// Legacy BIOS: no `install_bootloader` for whole-disk images.
    Bios,
    /// UEFI: `install_bootloader` with `target_boot_mode: uefi`.
    #[default]
    Uefi,
}

impl BootMode {
    /// Ironic's name.
    pub fn as_str(self) -> &'static str {
        match self {
            BootMode::Bios => "bios",
            BootMode::Uefi => "uefi",
        }
    }
}

/// The image fields of `instance_info` (what `baremetal node set
/// --instance-info` sets for an HTTP image).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageInfo {
    /// `image_source`: the HTTP(S) URL of the image.
    pub url: String,
    /// `image_disk_format` (`raw`, `qcow2`, …; `None`: not set).
    pub disk_format: Option<String>,
    /// `image_checksum`: a hex digest or the URL of a checksum file.
    pub checksum: Option<String>,
    /// `image_os_hash_algo` (`sha256`, `sha512`, …).
    pub os_hash_algo: Option<String>,
    /// `image_os_hash_value`.
    pub os_hash_value: Option<String>,
}

impl ImageInfo {
    /// A raw image at `url` with its sha256 hex digest.
    pub fn raw_sha256(url: &str, sha256: &str) -> Self {
        Self {
            url: url.to_string(),
            disk_format: Some("raw".into()),
            checksum: None,
            os_hash_algo: Some("sha256".into()),
            os_hash_value: Some(sha256.to_string()),
        }
    }
}

/// What a deploy is asked to do: the node's `instance_info` and the
/// `configdrive` of `PUT .../states/provision {"target": "active"}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeployRequest {
    /// The image.
    pub image_info: ImageInfo,
    /// The config drive as the agent gets it: gzip+base64 text or a URL.
    pub configdrive: Option<String>,
    /// Boot mode.
    pub boot_mode: BootMode,
    /// `instance_info.root_device` hints, if any.
    pub root_device: Option<Value>,
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
    /// `driver_info` as sent to the agent (burn-in knobs live here).
    pub driver_info: Value,
    /// Heartbeats accepted.
    pub heartbeats: u64,
    /// Lookups answered with a token.
    pub tokens_issued: u64,
    /// `properties` (inspection fills `cpus`, `memory_mb`, `local_gb`, `cpu_arch`).
    pub properties: Value,
    /// `target_raid_config` (software RAID steps read it).
    pub target_raid_config: Value,
    /// The last inspection document received.
    pub inspection_data: Option<Value>,
    /// The deploy in progress or done (`instance_info`).
    pub deploy: Option<DeployRequest>,
    /// What the agent reported by `get_partition_uuids` in the last deploy.
    pub partition_uuids: Option<Value>,
    /// Logs collected from the agent after failures (base64 tar.gz), as
    /// Ironic keeps them in its deploy-logs directory.
    pub agent_logs: Vec<String>,
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
            driver_info: json!({}),
            heartbeats: 0,
            tokens_issued: 0,
            properties: json!({"cpu_arch": "x86_64"}),
            target_raid_config: json!({}),
            inspection_data: None,
            deploy: None,
            partition_uuids: None,
            agent_logs: Vec::new(),
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
                | "rescuing"
                | "rescue wait"
        )
    }

    /// States in which a heartbeat makes the conductor act.
    pub fn is_waiting(&self) -> bool {
        matches!(
            self.provision_state.as_str(),
            "clean wait" | "wait call-back" | "rescue wait"
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
            "target_raid_config": self.target_raid_config,
            "instance_info": self.instance_info(),
            "driver_internal_info": dii,
            "driver_info": self.driver_info,
            "provision_state": self.provision_state,
        })
    }

    /// `instance_info` as Ironic holds it for a deploy (the config drive is
    /// not masked, PROTOCOL.md §1.7).
    pub fn instance_info(&self) -> Value {
        let Some(d) = &self.deploy else {
            return json!({});
        };
        let i = &d.image_info;
        let mut info = json!({"image_source": i.url, "image_url": i.url, "image_type": "whole-disk",
                              "root_gb": 1, "deploy_boot_mode": d.boot_mode.as_str()});
        let fields = [
            ("image_disk_format", &i.disk_format),
            ("image_checksum", &i.checksum),
            ("image_os_hash_algo", &i.os_hash_algo),
            ("image_os_hash_value", &i.os_hash_value),
            ("configdrive", &d.configdrive),
        ];
        for (k, v) in fields {
            if let Some(v) = v {
                info[k] = json!(v);
            }
        }
        if let Some(hints) = &d.root_device {
            info["root_device"] = hints.clone();
        }
        info
    }

    /// `instance_info` with the config drive masked, as in lookup answers.
    pub fn instance_info_masked(&self) -> Value {
        let mut info = self.instance_info();
        if info.get("configdrive").is_some() {
            info["configdrive"] = json!("******");
        }
        info
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

/// What a conductor action decided.
pub(super) enum Next {
    /// Keep waiting for more heartbeats (operation state updated).
    Wait(Operation),
    /// All steps done.
    Finished,
    /// The operation failed with this message.
    Failed(String),
}
