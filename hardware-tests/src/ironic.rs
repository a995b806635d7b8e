//! Real Ironic 39.0.0 (`ci/ironic/start.sh`) on 127.0.0.1 or on an address
//! inside a network namespace the test created, stopped on drop by the PID
//! in its state directory, and a client of its admin API (`noauth`, API
//! 1.95) for enrolling nodes and moving them through states.

use std::future::Future;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::netns::NetNs;

/// `[DEFAULT]` lines of an ironic.conf for the `redfish` hardware type with
/// virtual-media boot next to `fake-hardware` (whose interfaces it accepts,
/// so the defaults are the ones `redfish` supports); each line ends with a
/// newline.
pub const REDFISH_VMEDIA_INTERFACES: &str = "enabled_hardware_types = fake-hardware,redfish
enabled_boot_interfaces = fake,redfish-virtual-media
enabled_power_interfaces = fake,redfish
enabled_management_interfaces = noop,fake,redfish
default_boot_interface = redfish-virtual-media
default_power_interface = redfish
default_management_interface = redfish
";

/// A running Ironic.
#[derive(Debug)]
pub struct Ironic {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: tempfile::TempDir,
    http: reqwest::Client,
    /// How `start.sh` was run, to start it again ([`Ironic::restart`]).
    launch: Launch,
}

/// `ci/ironic/start.sh`'s environment for one Ironic.
#[derive(Debug, Clone)]
struct Launch {
    netns: Option<String>,
    host: String,
    port: u16,
    extra_conf: bool,
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl Launch {
    /// Runs `start.sh` on `state` (a fresh directory, or the one of an
    /// Ironic that stopped: the same database and configuration).
    fn run(&self, state: &std::path::Path) -> Result<()> {
        let script = crate::repo_root().join("ci/ironic/start.sh");
        let mut cmd = Command::new(&script);
        cmd.arg(state)
            .env("IRONIC_PORT", self.port.to_string())
            .env("IRONIC_HOST", &self.host)
            .env("IRONIC_NETNS", self.netns.as_deref().unwrap_or_default());
        // Ironic took 80 s to come up once on this loaded 2-core machine;
        // start.sh's default of 90 s is too close.
        if std::env::var_os("IRONIC_START_TIMEOUT").is_none() {
            cmd.env("IRONIC_START_TIMEOUT", "240");
        }
        if let Some((cert, key)) = &self.tls {
            cmd.env("IRONIC_TLS_CERT", cert).env("IRONIC_TLS_KEY", key);
        }
        if self.extra_conf {
            cmd.env("IRONIC_EXTRA_CONF", state.join("extra.conf"));
        }
        crate::run(&mut cmd)?;
        Ok(())
    }
}

const ADMIN_VERSION: &str = "1.95";

impl Ironic {
    /// Starts Ironic on a free loopback port with a fresh state directory.
    pub fn start() -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Self::launch(None, "127.0.0.1", port, None, None)
    }

    /// [`Ironic::start`] with `extra_conf` (an ironic.conf fragment) loaded
    /// last.
    pub fn start_with(extra_conf: &str) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Self::launch(None, "127.0.0.1", port, Some(extra_conf), None)
    }

    /// Starts Ironic inside the network namespace `ns`, listening on
    /// `host:port` (an address of the namespace), with `extra_conf` (an
    /// ironic.conf fragment) loaded last. The API is only reachable from
    /// inside the namespace: call it from a runtime whose threads entered it.
    pub fn start_in(ns: &NetNs, host: &str, port: u16, extra_conf: Option<&str>) -> Result<Self> {
        Self::launch(Some(&ns.name), host, port, extra_conf, None)
    }

    /// Starts Ironic in this process's network namespace on `host:port`
    /// (an address of this machine), with `extra_conf` loaded last: the
    /// own-server demo, where the operator's server and BMC reach it.
    pub fn start_at(host: &str, port: u16, extra_conf: Option<&str>) -> Result<Self> {
        Self::launch(None, host, port, extra_conf, None)
    }

    /// [`Ironic::start_in`] with the API served over HTTPS (`[api]
    /// enable_ssl_api`) with the PEM certificate `cert` and key `key`; the
    /// client trusts `cert` as its CA, and [`Ironic::url`] is `https://`.
    pub fn start_tls_in(
        ns: &NetNs,
        host: &str,
        port: u16,
        extra_conf: Option<&str>,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<Self> {
        Self::launch(Some(&ns.name), host, port, extra_conf, Some((cert, key)))
    }

    fn launch(
        netns: Option<&str>,
        host: &str,
        port: u16,
        extra_conf: Option<&str>,
        tls: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<Self> {
        // Everything that can fail before the server runs comes first, so a
        // started Ironic is always owned by a value whose drop stops it.
        let http = agent_base::tls::http_client(
            false,
            tls.map(|(cert, _)| cert),
            Duration::from_secs(60),
        )?;
        let state = tempfile::Builder::new().prefix("ironic-state-").tempdir()?;
        if let Some(conf) = extra_conf {
            std::fs::write(state.path().join("extra.conf"), conf)?;
        }
        let launch = Launch {
            netns: netns.map(str::to_string),
            host: host.to_string(),
            port,
            extra_conf: extra_conf.is_some(),
            tls: tls.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
        };
        launch.run(state.path())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        Ok(Self {
            url: format!("{scheme}://{}:{port}", crate::url_host(host)),
            state,
            http,
            launch,
        })
    }

    /// Kills every Ironic process (SIGKILL to its process group, as the
    /// OOM killer or a power cut would) and waits until its main process
    /// is gone. [`Ironic::restart`] starts it again.
    pub fn kill(&self) -> Result<()> {
        let pid = self.pid()?;
        self.signal_group(nix::sys::signal::Signal::SIGKILL)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok() {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "Ironic (pid {pid}) still there 30 s after SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Starts Ironic again after [`Ironic::kill`] (or a stop) on the same
    /// state directory: the same database, configuration, address and
    /// port, as an operator restarting the service would.
    pub fn restart(&self) -> Result<()> {
        self.launch.run(self.state.path())
    }

    /// The PID of Ironic's main process (the leader of its process group).
    pub fn pid(&self) -> Result<i32> {
        let p = self.state.path().join("ironic.pid");
        std::fs::read_to_string(&p)
            .with_context(|| format!("reading {}", p.display()))?
            .trim()
            .parse()
            .context("ironic.pid is not a PID")
    }

    /// Freezes every Ironic process (SIGSTOP to its process group): the
    /// kernel still accepts connections, nothing answers, as a hung or
    /// unreachable conductor. [`Ironic::thaw`] resumes it; drop thaws too.
    pub fn freeze(&self) -> Result<()> {
        self.signal_group(nix::sys::signal::Signal::SIGSTOP)
    }

    /// Resumes a frozen Ironic (SIGCONT to its process group).
    pub fn thaw(&self) -> Result<()> {
        self.signal_group(nix::sys::signal::Signal::SIGCONT)
    }

    fn signal_group(&self, signal: nix::sys::signal::Signal) -> Result<()> {
        let pgid = nix::unistd::Pid::from_raw(self.pid()?);
        nix::sys::signal::killpg(pgid, signal).with_context(|| format!("{signal} to Ironic"))
    }

    /// Ironic's stdout and stderr (start.sh's console log). Every process
    /// Ironic forks inherits it as its stdout, which is how stop.sh finds
    /// one that left Ironic's process group.
    pub fn console_log_path(&self) -> std::path::PathBuf {
        self.state.path().join("ironic.log")
    }

    /// Path of Ironic's own log, for failure messages.
    pub fn log_path(&self) -> std::path::PathBuf {
        self.state.path().join("log/ironic.log")
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .header("X-OpenStack-Ironic-API-Version", ADMIN_VERSION);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            bail!("{method} {path}: HTTP {status}: {text}");
        }
        Ok(if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)?
        })
    }

    /// Enrolls a fake-hardware node with a port for `mac`; returns its UUID.
    pub async fn enroll(&self, name: &str, mac: &str) -> Result<String> {
        let node = self
            .call(
                reqwest::Method::POST,
                "/v1/nodes",
                Some(json!({"name": name, "driver": "fake-hardware",
                    "boot_interface": "fake", "deploy_interface": "direct", "power_interface": "fake",
                    "management_interface": "noop", "inspect_interface": "agent", "network_interface": "noop",
                    "automated_clean": false,
                    "properties": {"cpu_arch": "x86_64", "capabilities": "boot_mode:uefi"}})),
            )
            .await?;
        let uuid = node["uuid"]
            .as_str()
            .context("node without uuid")?
            .to_string();
        self.call(
            reqwest::Method::POST,
            "/v1/ports",
            Some(json!({"node_uuid": uuid, "address": mac, "pxe_enabled": true})),
        )
        .await?;
        Ok(uuid)
    }

    /// `PUT /v1/nodes/{uuid}/states/raid`: sets the node's
    /// `target_raid_config`.
    pub async fn set_target_raid_config(&self, uuid: &str, config: Value) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("/v1/nodes/{uuid}/states/raid"),
            Some(config),
        )
        .await
        .map(|_| ())
    }

    /// `POST /v1/nodes` with `body` as it is (any driver and interfaces);
    /// returns the node document.
    pub async fn create_node(&self, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, "/v1/nodes", Some(body))
            .await
    }

    /// `POST /v1/ports`: a PXE-enabled port for `mac` on the node.
    pub async fn create_port(&self, uuid: &str, mac: &str) -> Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/v1/ports",
            Some(json!({"node_uuid": uuid, "address": mac, "pxe_enabled": true})),
        )
        .await
    }

    /// The node's ports' MAC addresses (`GET /v1/ports?node=`), sorted.
    pub async fn port_macs(&self, uuid: &str) -> Result<Vec<String>> {
        let doc = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/ports?node={uuid}"),
                None,
            )
            .await?;
        let mut macs: Vec<String> = doc["ports"]
            .as_array()
            .context("no ports list")?
            .iter()
            .filter_map(|p| p["address"].as_str().map(str::to_string))
            .collect();
        macs.sort();
        Ok(macs)
    }

    /// `DELETE /v1/nodes/{uuid}/maintenance`: an operator taking the node
    /// out of maintenance (Ironic 39 puts a node there when a clean fails).
    pub async fn unset_maintenance(&self, uuid: &str) -> Result<()> {
        self.call(
            reqwest::Method::DELETE,
            &format!("/v1/nodes/{uuid}/maintenance"),
            None,
        )
        .await
        .map(|_| ())
    }

    /// `PUT /v1/nodes/{uuid}/states/power` with `target` (`power on`,
    /// `power off`, `rebooting`); Ironic changes it asynchronously.
    pub async fn set_power(&self, uuid: &str, target: &str) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("/v1/nodes/{uuid}/states/power"),
            Some(json!({ "target": target })),
        )
        .await
        .map(|_| ())
    }

    /// Polls until Ironic reports `power_state` = `state` with no power
    /// change pending; fails early when the node gets a `last_error`.
    pub async fn wait_power(&self, uuid: &str, state: &str, timeout: Duration) -> Result<Value> {
        let start = Instant::now();
        loop {
            let node = self.node(uuid).await?;
            if node["power_state"] == state && node["target_power_state"].is_null() {
                return Ok(node);
            }
            if node["target_power_state"].is_null() && !node["last_error"].is_null() {
                bail!("power change failed: {}", node["last_error"]);
            }
            if start.elapsed() > timeout {
                bail!(
                    "power_state still {} (target {}) after {timeout:?}, waiting for {state:?}; last_error {}; log: {}",
                    node["power_state"],
                    node["target_power_state"],
                    node["last_error"],
                    self.log_path().display()
                );
            }
            tokio::time::sleep(POLL_ANY).await;
        }
    }

    /// `PUT /v1/nodes/{uuid}/management/boot_device` (`pxe`, `disk`,
    /// `cdrom`, …), persistent or for the next boot only.
    pub async fn set_boot_device(&self, uuid: &str, device: &str, persistent: bool) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("/v1/nodes/{uuid}/management/boot_device"),
            Some(json!({ "boot_device": device, "persistent": persistent })),
        )
        .await
        .map(|_| ())
    }

    /// `PUT /v1/nodes/{uuid}/states/provision`.
    pub async fn provision(&self, uuid: &str, body: Value) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("/v1/nodes/{uuid}/states/provision"),
            Some(body),
        )
        .await
        .map(|_| ())
    }

    /// Files in Ironic's `deploy_logs_local_path` (ramdisk logs it stored).
    pub fn deploy_logs(&self) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(self.state.path().join("deploy-logs"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    }

    /// `PATCH /v1/nodes/{uuid}` with JSON-patch operations.
    pub async fn patch(&self, uuid: &str, ops: Value) -> Result<Value> {
        self.call(
            reqwest::Method::PATCH,
            &format!("/v1/nodes/{uuid}"),
            Some(ops),
        )
        .await
    }

    /// The node document.
    pub async fn node(&self, uuid: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, &format!("/v1/nodes/{uuid}"), None)
            .await
    }

    /// The inventory and plugin data inspection stored (`GET /v1/nodes/{uuid}/inventory`).
    pub async fn inventory(&self, uuid: &str) -> Result<Value> {
        self.call(
            reqwest::Method::GET,
            &format!("/v1/nodes/{uuid}/inventory"),
            None,
        )
        .await
    }

    /// Polls until the node's provision state is `state`, whatever its
    /// target (for wait states such as `inspect wait`).
    pub async fn wait_for_any_target(
        &self,
        uuid: &str,
        state: &str,
        timeout: Duration,
    ) -> Result<Value> {
        self.poll_node(uuid, POLL_ANY, timeout, &mut (), reached(state))
            .await
    }

    /// Turns automated cleaning on for the node ([`Ironic::enroll`] enrolls
    /// nodes with it off).
    pub async fn enable_automated_clean(&self, uuid: &str) -> Result<()> {
        self.patch(
            uuid,
            serde_json::json!([{"op": "replace", "path": "/automated_clean", "value": true}]),
        )
        .await
        .map(|_| ())
    }

    /// Asks for `target` and waits until the node is in `state`.
    pub async fn move_to(
        &self,
        uuid: &str,
        target: &str,
        state: &str,
        timeout: Duration,
    ) -> Result<Value> {
        self.provision(uuid, serde_json::json!({ "target": target }))
            .await?;
        self.wait_for(uuid, state, timeout).await
    }

    /// The patch that gives a node the whole-disk image at `url` with
    /// sha256 `sha256` (`root_gb` 1), as the host-mode deploy tests set
    /// it, followed by the operations in `extra` (a JSON array).
    pub fn image_patch(url: &str, sha256: &str, extra: Value) -> Value {
        let mut ops = vec![
            serde_json::json!({"op": "add", "path": "/instance_info/image_source", "value": url}),
            serde_json::json!({"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"}),
            serde_json::json!({"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha256}),
            serde_json::json!({"op": "add", "path": "/instance_info/root_gb", "value": 1}),
        ];
        if let Value::Array(more) = extra {
            ops.extend(more);
        }
        Value::Array(ops)
    }

    /// The `driver_info` patch for short CPU and memory burn-ins (IPA's
    /// knob names and value forms: one CPU worker for 3 s, one memory
    /// worker over 32 MiB for "3s").
    pub fn short_burnin_patch() -> Value {
        serde_json::json!([
            {"op": "add", "path": "/driver_info/agent_burnin_cpu_cpu", "value": 1},
            {"op": "add", "path": "/driver_info/agent_burnin_cpu_timeout", "value": 3},
            {"op": "add", "path": "/driver_info/agent_burnin_vm_vm", "value": 1},
            {"op": "add", "path": "/driver_info/agent_burnin_vm_vm-bytes", "value": "32M"},
            {"op": "add", "path": "/driver_info/agent_burnin_vm_timeout", "value": "3s"},
        ])
    }

    /// `POST /v1/deploy_templates`: a deploy template named `name` (a
    /// `CUSTOM_` trait) with these steps.
    pub async fn create_deploy_template(&self, name: &str, steps: Value) -> Result<Value> {
        self.call(
            reqwest::Method::POST,
            "/v1/deploy_templates",
            Some(serde_json::json!({"name": name, "steps": steps})),
        )
        .await
    }

    /// `PUT /v1/nodes/{uuid}/traits`.
    pub async fn set_traits(&self, uuid: &str, traits: &[&str]) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("/v1/nodes/{uuid}/traits"),
            Some(serde_json::json!({ "traits": traits })),
        )
        .await
        .map(drop)
    }

    /// `GET /v1/lookup?addresses=MAC`, as a ramdisk looks its node up (only
    /// answered while Ironic waits for an agent, e.g. in `clean wait`).
    pub async fn lookup(&self, mac: &str) -> Result<Value> {
        self.call(
            reqwest::Method::GET,
            &format!("/v1/lookup?addresses={mac}"),
            None,
        )
        .await
    }

    /// Enrolls a node and takes it through `manage` (and `provide` when
    /// `available` is set), 30 s allowed per step. Returns its UUID.
    pub async fn enroll_ready(&self, name: &str, mac: &str, available: bool) -> Result<String> {
        let uuid = self.enroll(name, mac).await?;
        self.move_to(&uuid, "manage", "manageable", Duration::from_secs(30))
            .await?;
        if available {
            self.move_to(&uuid, "provide", "available", Duration::from_secs(30))
                .await?;
        }
        Ok(uuid)
    }

    /// A manual clean with `steps` (a JSON list): asks for it and waits
    /// until the node is `manageable` again, failing on a `clean failed`
    /// with Ironic's `last_error` and when the node ends with one.
    pub async fn manual_clean(&self, uuid: &str, steps: Value, timeout: Duration) -> Result<Value> {
        self.provision(
            uuid,
            serde_json::json!({"target": "clean", "clean_steps": steps}),
        )
        .await?;
        let node = self.wait_for(uuid, "manageable", timeout).await?;
        anyhow::ensure!(
            node["last_error"].is_null(),
            "manual clean: {}",
            node["last_error"]
        );
        Ok(node)
    }

    /// Polls until the node's provision state is `state`; fails early on a
    /// `* failed` state with Ironic's `last_error`.
    pub async fn wait_for(&self, uuid: &str, state: &str, timeout: Duration) -> Result<Value> {
        self.poll_node(uuid, POLL_SETTLED, timeout, &mut (), settled_in(state))
            .await
    }

    /// Polls the node every `every` until `done` says the wait is over (an
    /// error from `done` ends it too), showing each document to `watch`
    /// first. Fails at the timeout, naming the state the node was in and
    /// what `done` waited for.
    pub async fn poll_node(
        &self,
        uuid: &str,
        every: Duration,
        timeout: Duration,
        watch: &mut impl Watch,
        done: Until,
    ) -> Result<Value> {
        let start = Instant::now();
        loop {
            let node = self.node(uuid).await?;
            watch.seen(self, &node).await;
            if done.check(&node)? {
                return Ok(node);
            }
            if start.elapsed() > timeout {
                bail!(
                    "node still {} (target {}) after {timeout:?}, waiting for {}; last_error {}; log: {}",
                    node["provision_state"],
                    node["target_provision_state"],
                    done.what(),
                    node["last_error"],
                    self.log_path().display()
                );
            }
            tokio::time::sleep(every).await;
        }
    }

    /// The node's `driver_internal_info` as Ironic stored it, unmasked (its
    /// API shows `agent_secret_token` as `******`): read from its sqlite
    /// database with the venv's Python, so an observer can call the agent's
    /// command API as the conductor does (`agent_url`, the token,
    /// `agent_verify_ca`). `Null` when the node is not there.
    pub fn stored_driver_internal_info(&self, uuid: &str) -> Result<Value> {
        const READ: &str = "import sqlite3, sys\n\
            db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True, timeout=5)\n\
            row = db.execute('SELECT driver_internal_info FROM nodes WHERE uuid = ?', (sys.argv[2],)).fetchone()\n\
            print(row[0] if row and row[0] else '')\n";
        let venv = std::env::var_os("IRONIC_VENV")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| crate::repo_root().join("target/ironic-venv"));
        let out = crate::run(
            Command::new(venv.join("bin/python"))
                .args(["-c", READ])
                .arg(self.state.path().join("ironic.sqlite"))
                .arg(uuid),
        )?;
        Ok(if out.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&out).context("driver_internal_info is not JSON")?
        })
    }
}

/// How often [`Ironic::wait_for`] polls.
pub const POLL_SETTLED: Duration = Duration::from_millis(500);
/// How often [`Ironic::wait_for_any_target`] polls (wait states are short
/// steps the caller must react to quickly).
pub const POLL_ANY: Duration = Duration::from_millis(300);

/// What a node document must show to end a [`Ironic::poll_node`] wait.
#[derive(Debug, Clone)]
pub enum Until {
    /// The provision state is this one and no target is left; a `* failed`
    /// state (unless waited for) is an error carrying `last_error`.
    Settled(String),
    /// The provision state is this one, whatever the target.
    Reached(String),
    /// Ironic reports the node powered off.
    PowerOff,
}

/// [`Until::Settled`].
pub fn settled_in(state: &str) -> Until {
    Until::Settled(state.to_string())
}

/// [`Until::Reached`].
pub fn reached(state: &str) -> Until {
    Until::Reached(state.to_string())
}

impl Until {
    fn check(&self, node: &Value) -> Result<bool> {
        let current = node["provision_state"].as_str().unwrap_or_default();
        Ok(match self {
            Until::Settled(state) => {
                if current.ends_with("failed") && !state.ends_with("failed") {
                    bail!("node went to {current:?}: {}", node["last_error"]);
                }
                current == state.as_str() && node["target_provision_state"].is_null()
            }
            Until::Reached(state) => current == state.as_str(),
            Until::PowerOff => node["power_state"] == "power off",
        })
    }

    fn what(&self) -> String {
        match self {
            Until::Settled(s) | Until::Reached(s) => format!("{s:?}"),
            Until::PowerOff => "power off".into(),
        }
    }
}

/// Looks at every node document a [`Ironic::poll_node`] wait reads (the
/// demo prints transitions and the agent's progress with one); `()` looks
/// at nothing.
pub trait Watch: Send {
    /// Called with each polled node document, before the wait checks it.
    fn seen(&mut self, ironic: &Ironic, node: &Value) -> impl Future<Output = ()> + Send;
}

impl Watch for () {
    async fn seen(&mut self, _: &Ironic, _: &Value) {}
}

impl Ironic {
    /// After `stop.sh`: nothing of this Ironic (process group `group`, or
    /// any process whose stdout is its console log, as everything it forks
    /// inherits) may still listen on its API port (the next Ironic, or the
    /// operator's next demo, needs it). Checked in this process's
    /// namespace only (Ironic started without one); a process of this
    /// Ironic still listening is named and killed by its PID, anything
    /// else only named.
    fn let_go_of_the_port(&self, group: Option<i32>) {
        if self.launch.netns.is_some() {
            return;
        }
        let proc = std::path::Path::new("/proc");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let held = crate::listeners::listening_on(proc, self.launch.port);
            if held.is_empty() {
                return;
            }
            if Instant::now() > deadline {
                let console = self.console_log_path();
                let ours = |pid: i32, pgid: Option<i32>| {
                    let stdout = std::fs::read_link(proc.join(pid.to_string()).join("fd/1"));
                    (group.is_some() && pgid == group) || stdout.is_ok_and(|p| p == console)
                };
                let mut holder_is_ours = false;
                for h in &held {
                    eprintln!(
                        "warning: after ci/ironic/stop.sh, port {} is still held by {h}",
                        self.launch.port
                    );
                    holder_is_ours |= ours(h.pid, h.pgid);
                }
                if holder_is_ours {
                    // Every process of this Ironic, not only the listener: a
                    // surviving master would fork a new one.
                    for pid in crate::listeners::processes(proc) {
                        if ours(pid, crate::listeners::pgid(proc, pid)) {
                            eprintln!("warning: killing pid {pid} of this Ironic (SIGKILL)");
                            let _ = nix::sys::signal::kill(
                                nix::unistd::Pid::from_raw(pid),
                                nix::sys::signal::SIGKILL,
                            );
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(500));
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Ironic {
    fn drop(&mut self) {
        // A frozen Ironic would not act on stop.sh's TERM.
        let _ = self.thaw();
        let group = self.pid().ok();
        let script = crate::repo_root().join("ci/ironic/stop.sh");
        // A process group of its own: a Ctrl-C on the terminal (or a
        // second SIGINT to the demo's group) while Ironic is being stopped
        // must not kill stop.sh halfway and leave Ironic running. A signal
        // can still reach it before it leaves the caller's group: `timeout`
        // passes a SIGINT on to its whole group right after the demo, which
        // may by then have forked stop.sh. stop.sh is idempotent, so a run a
        // signal ended is run again.
        for attempt in 1..=3 {
            match Command::new(&script)
                .arg(self.state.path())
                .process_group(0)
                .status()
            {
                Ok(s) if s.success() => break,
                Ok(s) if s.signal().is_some() && attempt < 3 => {
                    eprintln!(
                        "warning: {} ended by {s}; running it again",
                        script.display()
                    )
                }
                other => {
                    eprintln!("warning: {} failed: {other:?}", script.display());
                    break;
                }
            }
        }
        self.let_go_of_the_port(group);
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- last lines of Ironic's log ---");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}
