//! What a request is parsed and run with besides its parameters: the node
//! cached from the conductor's last command, the agent's HTTP settings,
//! and the conductor's image settings from its lookup answer (MD5,
//! permitted formats, deep inspection), and the hardware managers.

use std::sync::Arc;

use crate::state::AgentState;
use agent_base::config::image_server::ImageServerAuth;
use agent_base::config::Config;
use agent_conductor::conductor::lookup::LookupConfig;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::policy::IPA_DEFAULT_PERMITTED;
use agent_contents::image::FormatPolicy;
use ironic_types::node::Node;

/// What parsing a request may draw from the agent: the node cached from
/// an earlier command (`prepare_image` carries none) and the settings an
/// image check needs.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The node the conductor sent last.
    pub cached_node: Option<Node>,
    /// The agent's HTTP settings for image downloads.
    pub http: HttpOptions,
    /// The conductor allows MD5 image checksums.
    pub md5_allowed: bool,
    /// What the hardware managers the steps come from are loaded from.
    pub managers: ManagerSources,
}

/// What the hardware managers are loaded from
/// ([`crate::commands::managers::Managers::load`]): the agent's configuration (where
/// an operator's managers are) and the conductor's lookup answer (its
/// `agent_containers` settings).
#[derive(Debug, Clone, Default)]
pub struct ManagerSources {
    /// The agent's configuration.
    pub config: Arc<Config>,
    /// The conductor's lookup answer, once there is one.
    pub lookup: Option<LookupConfig>,
}

impl ManagerSources {
    /// The sources of `state`.
    pub fn of(state: &AgentState) -> Self {
        ManagerSources {
            config: Arc::new(state.config.clone()),
            lookup: state.lookup_config(),
        }
    }
}

impl Context {
    /// The context of a request to `state`.
    pub fn of(state: &AgentState) -> Self {
        Context {
            cached_node: state.node(),
            http: http_options(state),
            md5_allowed: md5_allowed(state),
            managers: ManagerSources::of(state),
        }
    }
}

/// The agent's HTTP settings for downloads (images, config drives).
pub fn http_options(state: &AgentState) -> HttpOptions {
    let c = &state.config;
    let mut http = HttpOptions {
        insecure: c.insecure,
        cafile: c.cafile.clone(),
        client_certificate: c.client_certificate(),
        total_timeout: c.image_download_max_duration,
        stall_timeout: c.image_download_connection_timeout,
        retries: c.image_download_connection_retries,
        retry_interval: c.image_download_connection_retry_interval,
        connections: c.image_download_connections as usize,
        ..HttpOptions::default()
    };
    // The files' image server credentials; an image_info's own replace
    // them (image::info::parse), as in IPA.
    if let ImageServerAuth::Basic { user, password } = &c.image_server_auth {
        http.set_basic_auth(user, password);
    }
    http
}

/// The conductor's deep image inspection settings from its lookup answer
/// (IPA's defaults before any lookup).
pub fn format_policy(state: &AgentState, disk_format: Option<&str>) -> FormatPolicy {
    let c = state.lookup_config();
    let permitted = c.as_ref().map_or_else(
        || IPA_DEFAULT_PERMITTED.map(String::from).to_vec(),
        |c| c.permitted_image_formats.clone(),
    );
    let deep = c.as_ref().is_none_or(|c| c.deep_image_inspection);
    FormatPolicy::from_conductor(deep, &permitted, disk_format)
}

/// The conductor allows MD5 image checksums.
pub fn md5_allowed(state: &AgentState) -> bool {
    state.lookup_config().is_some_and(|c| c.md5_allowed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SHA: &str = "1b265f9dbb875c7efe7a36aede88e97fc9606beb54674bdc997b405a99bc9d31";

    #[test]
    fn the_files_image_server_credentials_go_unless_image_info_brings_its_own() {
        let config = Config {
            image_server_auth: ImageServerAuth::Basic {
                user: "glance".into(),
                password: "pw".into(),
            },
            ..Config::default()
        };
        let http = http_options(&AgentState::new(config, None));
        let parse = |info| agent_contents::image::info::parse(&info, http.clone(), false).unwrap();
        let plain = parse(json!({"id": "a", "urls": ["http://h/u"], "checksum": SHA}));
        assert_eq!(
            plain.request.http.authorization.as_deref(),
            Some("Basic Z2xhbmNlOnB3")
        );
        let own = parse(json!({"id": "a", "urls": ["http://h/u"], "checksum": SHA,
            "image_server_auth_strategy": "http_basic",
            "image_server_user": "u", "image_server_password": "p"}));
        assert_eq!(
            own.request.http.authorization.as_deref(),
            Some("Basic dTpw")
        );
        let none = http_options(&AgentState::new(Config::default(), None));
        assert_eq!(none.authorization, None);
    }
}
