//! Real Ironic 39.0.0 (`require_tls = true`) drives an agent whose command
//! API serves the operator's own certificate (IPA's `listen_tls` with
//! `tls_cert_file`/`tls_key_file`, given here in a configuration file as
//! operators set them) instead of auto-TLS: the agent sends no
//! `agent_verify_ca`, Ironic verifies it with its `[agent] verify_ca` (the
//! operator's CA), and a manual clean goes through. The certificates are
//! made here with openssl.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent_base::config::{files, Config, KernelParams};
use hardware_tests::ironic::{settled_in, Ironic, Watch, POLL_SETTLED};
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:51";

/// Every `agent_url` Ironic kept while the clean ran, and whether it ever
/// held an `agent_verify_ca` (auto-TLS's certificate).
#[derive(Default)]
struct AgentUrls(Vec<String>, bool);

impl Watch for AgentUrls {
    async fn seen(&mut self, _: &Ironic, node: &serde_json::Value) {
        self.1 |= !node["driver_internal_info"]["agent_verify_ca"].is_null();
        if let Some(u) = node["driver_internal_info"]["agent_url"].as_str() {
            if !self.0.iter().any(|x| x == u) {
                self.0.push(u.to_string());
            }
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    hardware_tests::run(Command::new("openssl").current_dir(dir).args(args)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ironic_verifies_the_agents_own_certificate_with_its_ca() {
    hardware_tests::require_root("the real-Ironic own-certificate test");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=operator CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=agent",
            "-keyout",
            "agent.key",
            "-out",
            "agent.csr",
        ],
    );
    std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "agent.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "agent.pem",
        ],
    );
    // The operator's configuration file, as in IPA's ramdisk.
    let root = d.join("root");
    std::fs::create_dir_all(root.join(files::DIR)).unwrap();
    std::fs::write(
        root.join(files::DIR).join("tls.conf"),
        format!(
            "[DEFAULT]\nlisten_tls = true\ntls_cert_file = {}\ntls_key_file = {}\n",
            d.join("agent.pem").display(),
            d.join("agent.key").display()
        ),
    )
    .unwrap();
    let mut params = KernelParams::default();
    files::read(&root).apply_to(&mut params);
    let (parsed, errors) = Config::from_kernel_params(&params);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        parsed.own_server_certificate().unwrap().is_some(),
        "the configuration file's listen_tls was not taken"
    );

    let disk = LoopDevice::new(64 << 20).unwrap();
    disk.partition_and_format().unwrap();
    let ironic = Ironic::start_with(&format!(
        "[agent]\nverify_ca = {}\n",
        d.join("ca.pem").display()
    ))
    .expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("own-tls", MAC, false).await.unwrap();
    let agent = agent::agent::start_detached(Config {
        listen_tls: parsed.listen_tls,
        tls_cert_file: parsed.tls_cert_file,
        tls_key_file: parsed.tls_key_file,
        ..host_config(&ironic.url, MAC, &disk.path)
    });
    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
                   "clean_steps": [{"interface": "deploy", "step": "erase_devices_metadata"}]}),
        )
        .await
        .unwrap();
    let mut urls = AgentUrls::default();
    let node = ironic
        .poll_node(
            &uuid,
            POLL_SETTLED,
            Duration::from_secs(180),
            &mut urls,
            settled_in("manageable"),
        )
        .await
        .unwrap_or_else(|e| panic!("manual clean: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert!(
        !urls.1,
        "the agent sent an auto-TLS certificate as agent_verify_ca"
    );
    assert!(
        disk.signatures().unwrap().is_empty(),
        "the clean did not run"
    );
    assert!(
        !urls.0.is_empty() && urls.0.iter().all(|u| u.starts_with("https://127.0.0.1:")),
        "the agent's URL as Ironic kept it: {:?}",
        urls.0
    );
    agent.abort();
}
