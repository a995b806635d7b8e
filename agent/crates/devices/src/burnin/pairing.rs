//! Dynamic pairing for the network burn-in: IPA's
//! `agent_burnin_fio_network_pairing_backend_url`, where nodes find a
//! partner through a tooz coordinator. This speaks tooz's `etcd3+http(s)`
//! driver (etcd's JSON gateway, `/v3/kv/*` and `/v3/lease/*`) with tooz's
//! own keys and IPA's algorithm, so our nodes and IPA nodes pair with each
//! other (tested against IPA 13's own function and a real etcd):
//!
//! * group `G` is the key `tooz/groups/G/`, a member `M` the key
//!   `tooz/groups/G/M` under a membership lease kept alive meanwhile;
//! * the pairing lock is the key `/tooz/locksgroup_lock` (tooz's prefix
//!   and name joined as tooz does), taken by a create-if-absent
//!   transaction under its own lease;
//! * under the lock a node reads the members and joins: the first (no
//!   members) is the *writer* and releases the lock at once, waiting for a
//!   second; the second is the *reader*, pairs with the member it saw, waits
//!   for the writer to leave, then leaves and releases the lock. A
//!   group with three members or no partner within the timeout fails.
//!
//! Our member id is the address the agent advertises (IPA uses its host
//! name): the partner connects to it without needing DNS. Other tooz
//! backends (zookeeper, redis, …) are refused naming the URL.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};

use super::network::Role;

/// tooz's group key prefix.
const GROUP_PREFIX: &str = "tooz/groups/";
/// tooz's lock key prefix (the lock name follows without a separator).
const LOCK_PREFIX: &str = "/tooz/locks";
/// The lock IPA takes.
const LOCK_NAME: &str = "group_lock";
/// tooz's default lease TTLs (`membership_timeout`, `lock_timeout`).
const DEFAULT_TTL: u64 = 30;
/// msgpack of `None`: the capabilities tooz stores for a member.
const NO_CAPABILITIES: &[u8] = &[0xc0];

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn unb64(v: &Value) -> Vec<u8> {
    v.as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// An etcd number (the gateway writes int64 as strings).
fn num(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The smallest key after every key starting with `prefix`.
fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A tooz etcd3 gateway URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendUrl {
    /// `http://host:port`.
    pub root: String,
    /// Membership lease TTL (`membership_timeout`).
    pub membership_ttl: u64,
    /// Lock lease TTL (`lock_timeout`).
    pub lock_ttl: u64,
    /// Gateway request timeout (`timeout`).
    pub timeout: Duration,
}

impl BackendUrl {
    /// Parses `etcd3+http(s)://[host[:port]][?timeout=…&lock_timeout=…&membership_timeout=…]`.
    pub fn parse(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .with_context(|| format!("{url:?} is not a URL"))?;
        let protocol = match scheme {
            "etcd3+http" => "http",
            "etcd3+https" => "https",
            other => bail!(
                "the tooz backend {other}:// is not supported by this agent: it pairs through etcd's gateway, etcd3+http:// or etcd3+https://"
            ),
        };
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = authority.trim_end_matches('/');
        if authority.contains('/') || authority.contains('@') {
            bail!("{url:?}: only host and port are understood");
        }
        let host_port = match authority {
            "" => "localhost:2379".to_string(),
            a if a.ends_with(']') || !a.contains(':') => format!("{a}:2379"),
            a => a.to_string(),
        };
        let mut out = Self {
            root: format!("{protocol}://{host_port}"),
            membership_ttl: DEFAULT_TTL,
            lock_ttl: DEFAULT_TTL,
            timeout: Duration::from_secs(DEFAULT_TTL),
        };
        let mut lock_given = false;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let n = || -> Result<u64> {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("{url:?}: {k}={v:?} is not a positive number"))
            };
            match k {
                "timeout" => out.timeout = Duration::from_secs(n()?),
                "lock_timeout" => {
                    out.lock_ttl = n()?;
                    lock_given = true;
                }
                "membership_timeout" => out.membership_ttl = n()?,
                // TLS client options and the API path are not needed to
                // reach a gateway trusted through the agent's CA file.
                _ => tracing::info!(option = k, "tooz URL option ignored"),
            }
        }
        if !lock_given {
            out.lock_ttl = out.timeout.as_secs();
        }
        Ok(out)
    }
}

/// A connection to etcd's JSON gateway.
#[derive(Debug, Clone)]
struct Gateway {
    client: reqwest::Client,
    /// `http://host:port/v3`.
    base: String,
}

impl Gateway {
    async fn connect(client: reqwest::Client, root: &str) -> Result<Self> {
        let version: Value = client
            .get(format!("{root}/version"))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .with_context(|| format!("asking etcd at {root} for its version"))?
            .json()
            .await
            .with_context(|| format!("{root}/version is not etcd's answer"))?;
        let server = version["etcdserver"].as_str().unwrap_or_default();
        let mut parts = server.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let api = match (parts.next(), parts.next()) {
            (Some(3), Some(m)) if m >= 4 => "v3",
            (Some(3), Some(3)) => "v3beta",
            (Some(3), _) => "v3alpha",
            (Some(n), _) if n > 3 => "v3",
            _ => bail!("{root} answers {version} to /version: not an etcd 3 server"),
        };
        Ok(Self {
            client,
            base: format!("{root}/{api}"),
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let url = format!("{}/{path}", self.base);
        let r = self
            .client
            .post(&url)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("POST {url}: {status}: {v}");
        }
        Ok(v)
    }

    async fn grant(&self, ttl: u64) -> Result<String> {
        let v = self.post("lease/grant", json!({"TTL": ttl})).await?;
        match &v["ID"] {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            _ => bail!("etcd granted no lease: {v}"),
        }
    }

    async fn keepalive(&self, id: &str) -> Result<()> {
        self.post("lease/keepalive", json!({"ID": id}))
            .await
            .map(drop)
    }

    /// Keys under `prefix` with their versions.
    async fn prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        let v = self
            .post(
                "kv/range",
                json!({"key": b64(prefix), "range_end": b64(&range_end(prefix))}),
            )
            .await?;
        Ok(v["kvs"]
            .as_array()
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| (unb64(&kv["key"]), num(&kv["version"])))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn txn(&self, body: Value) -> Result<bool> {
        let v = self.post("kv/txn", body).await?;
        Ok(v["succeeded"].as_bool() == Some(true))
    }

    async fn delete(&self, key: &[u8]) -> Result<()> {
        self.post("kv/deleterange", json!({"key": b64(key)}))
            .await
            .map(drop)
    }
}

/// The pairing's state in etcd, for one node.
struct Pairing {
    gw: Gateway,
    group_key: Vec<u8>,
    member_key: Vec<u8>,
    member_id: String,
    membership: String,
    lock_key: Vec<u8>,
    lock_value: Vec<u8>,
}

impl Pairing {
    async fn members(&self) -> Result<Vec<String>> {
        let keys = self.gw.prefix(&self.group_key).await?;
        if !keys.iter().any(|(k, _)| *k == self.group_key) {
            bail!(
                "the group {} vanished",
                String::from_utf8_lossy(&self.group_key)
            );
        }
        // Whatever the server answers, only keys under the group count.
        Ok(keys
            .iter()
            .filter_map(|(k, _)| k.strip_prefix(self.group_key.as_slice()))
            .filter(|m| !m.is_empty())
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect())
    }

    async fn create_group(&self) -> Result<()> {
        let key = b64(&self.group_key);
        // Absent (version 0): create; present: nothing to do.
        self.gw
            .txn(json!({
                "compare": [{"key": key, "result": "EQUAL", "target": "VERSION", "version": 0}],
                "success": [{"request_put": {"key": key, "value": key}}],
                "failure": []
            }))
            .await
            .map(drop)
    }

    async fn lock(&self, ttl: u64, until: Instant) -> Result<String> {
        let key = b64(&self.lock_key);
        loop {
            let lease = self.gw.grant(ttl).await?;
            let got = self
                .gw
                .txn(json!({
                    "compare": [{"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
                    "success": [{"request_put": {"key": key, "value": b64(&self.lock_value), "lease": lease}}],
                    "failure": [{"request_range": {"key": key}}]
                }))
                .await?;
            if got {
                return Ok(lease);
            }
            if Instant::now() >= until {
                bail!("the pairing lock stayed taken by other nodes");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn unlock(&self) -> Result<()> {
        let key = b64(&self.lock_key);
        self.gw
            .txn(json!({
                "compare": [{"key": key, "result": "EQUAL", "target": "VALUE", "value": b64(&self.lock_value)}],
                "success": [{"request_delete_range": {"key": key}}],
                "failure": []
            }))
            .await
            .map(drop)
    }

    async fn join(&self) -> Result<()> {
        let group = b64(&self.group_key);
        for _ in 0..20 {
            let keys = self.gw.prefix(&self.group_key).await?;
            if keys.iter().any(|(k, _)| *k == self.member_key) {
                bail!("member {} is already in the group", self.member_id);
            }
            let version = keys
                .iter()
                .find(|(k, _)| *k == self.group_key)
                .map(|(_, v)| *v)
                .context("the group vanished before joining")?;
            let joined = self
                .gw
                .txn(json!({
                    "compare": [{"key": group, "result": "EQUAL", "target": "VERSION", "version": version}],
                    "success": [{"request_put": {"key": b64(&self.member_key),
                        "value": b64(NO_CAPABILITIES), "lease": self.membership}}],
                    "failure": []
                }))
                .await?;
            if joined {
                return Ok(());
            }
        }
        bail!("could not join the group: it kept changing")
    }

    async fn leave(&self) -> Result<()> {
        self.gw.delete(&self.member_key).await
    }
}

/// Finds a partner through the tooz backend at `url`: the partner's member
/// id (its address, or an IPA node's host name) and our role. Waits up to
/// `timeout` for a second node.
pub async fn find_partner(
    client: reqwest::Client,
    url: &str,
    group: &str,
    member_id: &str,
    timeout: Duration,
) -> Result<(String, Role)> {
    let backend = BackendUrl::parse(url)?;
    if group.is_empty() || group.contains('/') {
        bail!("the pairing group name {group:?} is empty or contains '/'");
    }
    let gw = Gateway::connect(client, &backend.root).await?;
    let group_key = format!("{GROUP_PREFIX}{group}/").into_bytes();
    let mut lock_value = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut lock_value)
        .map_err(|_| anyhow::anyhow!("no randomness for the lock's value"))?;
    let membership = gw.grant(backend.membership_ttl).await?;
    let p = Pairing {
        member_key: [group_key.as_slice(), member_id.as_bytes()].concat(),
        group_key,
        member_id: member_id.to_string(),
        membership,
        lock_key: format!("{LOCK_PREFIX}{LOCK_NAME}").into_bytes(),
        lock_value: lock_value.to_vec(),
        gw,
    };
    // Leases live while we pair.
    let leases = std::sync::Arc::new(std::sync::Mutex::new(vec![p.membership.clone()]));
    let beat = {
        let gw = p.gw.clone();
        let leases = leases.clone();
        let every = Duration::from_secs((backend.membership_ttl.min(backend.lock_ttl) / 3).max(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let ids = leases.lock().map(|l| l.clone()).unwrap_or_default();
                for id in ids {
                    if let Err(e) = gw.keepalive(&id).await {
                        tracing::warn!("pairing: keeping lease {id} alive: {e:#}");
                    }
                }
            }
        })
    };
    let out = pair(&p, backend.lock_ttl, timeout, &leases).await;
    beat.abort();
    out
}

async fn pair(
    p: &Pairing,
    lock_ttl: u64,
    timeout: Duration,
    leases: &std::sync::Mutex<Vec<String>>,
) -> Result<(String, Role)> {
    let start = Instant::now();
    p.create_group().await?;
    let lock_lease = p.lock(lock_ttl, start + timeout).await?;
    if let Ok(mut l) = leases.lock() {
        l.push(lock_lease);
    }
    let result = async {
        let initial = p.members().await?;
        tracing::info!(members = ?initial, "pairing: group members before joining");
        p.join().await?;
        let first = initial.is_empty();
        let role = if first { Role::Writer } else { Role::Reader };
        if first {
            p.unlock().await?;
        }
        loop {
            let members = if first {
                p.members().await?
            } else {
                initial.clone()
            };
            if members.len() > 2 || (!first && members.len() > 1) {
                let _ = p.leave().await;
                bail!("the pairing group holds more than two nodes: {members:?}");
            }
            if members.len() == 2 || !first {
                let partner = members.iter().find(|m| **m != p.member_id).cloned();
                let Some(partner) = partner else {
                    let _ = p.leave().await;
                    bail!("no partner to pair found");
                };
                if !first {
                    // Wait for the writer to leave, then make room for
                    // the next pair.
                    while p.members().await?.len() == 2 {
                        if start.elapsed() > timeout {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                p.leave().await?;
                return Ok((partner, role));
            }
            if start.elapsed() >= timeout {
                let _ = p.leave().await;
                bail!("timed out to find partner after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    .await;
    // The reader holds the lock until here; releasing twice is harmless
    // (the value no longer matches).
    let _ = p.unlock().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_urls() {
        let u = BackendUrl::parse("etcd3+http://10.0.0.5:2379").unwrap();
        assert_eq!(u.root, "http://10.0.0.5:2379");
        assert_eq!((u.membership_ttl, u.lock_ttl), (30, 30));
        let u = BackendUrl::parse("etcd3+https://etcd.example?timeout=10&membership_timeout=60")
            .unwrap();
        assert_eq!(u.root, "https://etcd.example:2379");
        assert_eq!((u.membership_ttl, u.lock_ttl), (60, 10));
        assert_eq!(
            BackendUrl::parse("etcd3+http://").unwrap().root,
            "http://localhost:2379"
        );
        assert_eq!(
            BackendUrl::parse("etcd3+http://[fd00::1]").unwrap().root,
            "http://[fd00::1]:2379"
        );
        let e = BackendUrl::parse("zookeeper://zk:2181")
            .unwrap_err()
            .to_string();
        assert!(e.contains("zookeeper:// is not supported"), "{e}");
        assert!(BackendUrl::parse("etcd3+http://h?timeout=0").is_err());
        assert!(BackendUrl::parse("etcd3+http://u@h").is_err());
        assert!(BackendUrl::parse("no url").is_err());
    }

    #[test]
    fn prefix_range_ends() {
        assert_eq!(range_end(b"tooz/groups/g/"), b"tooz/groups/g0".to_vec());
        assert_eq!(range_end(&[0x61, 0xff]), vec![0x62]);
        assert_eq!(range_end(&[0xff]), vec![0]);
    }
}
