//! The operator's BMC as the demo sees it over Redfish, apart from Ironic:
//! the checks before anything starts (reachable, certificate trusted,
//! credentials accepted, the system there, a virtual media CD that is
//! free), what the server looked like then (power, boot override), and
//! putting that back at the end (media ejected, boot override and power
//! restored).

use std::time::Duration;

use serde_json::{json, Value};

use super::error::Problem;
use super::options::{Options, Trust};

/// A Redfish client with the operator's credentials.
#[derive(Debug, Clone)]
pub struct BmcClient {
    base: String,
    system: String,
    user: String,
    password: String,
    http: reqwest::Client,
}

/// What the checks found.
#[derive(Debug, Clone)]
pub struct Found {
    /// `Manufacturer Model` of the system, with its BIOS version.
    pub system: String,
    /// The managing BMC's model and firmware version.
    pub bmc: String,
    /// The virtual media CD's resource path; empty with `--boot pxe`
    /// (not looked for).
    pub cd: String,
    /// The server as it was.
    pub before: Snapshot,
}

/// The server's state the demo restores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `On` or `Off`.
    pub power: String,
    /// `BootSourceOverrideEnabled`.
    pub enabled: Option<String>,
    /// `BootSourceOverrideTarget`.
    pub target: Option<String>,
    /// `BootSourceOverrideMode`.
    pub mode: Option<String>,
}

impl Snapshot {
    fn of(system: &Value) -> Self {
        let s = |v: &Value| v.as_str().map(str::to_string);
        let boot = &system["Boot"];
        Self {
            power: s(&system["PowerState"]).unwrap_or_default(),
            enabled: s(&boot["BootSourceOverrideEnabled"]),
            target: s(&boot["BootSourceOverrideTarget"]),
            mode: s(&boot["BootSourceOverrideMode"]),
        }
    }
}

/// Every message in an error's source chain, joined.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

impl BmcClient {
    /// A client for `opts`' BMC.
    pub fn new(opts: &Options) -> anyhow::Result<Self> {
        let (insecure, ca) = match &opts.trust {
            Trust::System => (false, None),
            Trust::Ca(p) => (false, Some(p.as_path())),
            Trust::Insecure => (true, None),
        };
        Ok(Self {
            base: opts.bmc_address.clone(),
            system: opts.system_path.clone(),
            user: opts.user.clone(),
            password: opts.password.clone(),
            http: agent_base::tls::http_client(insecure, ca, Duration::from_secs(20))?,
        })
    }

    /// The system's path (`/redfish/v1/Systems/ID`).
    pub fn system_path(&self) -> &str {
        &self.system
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), Problem> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .basic_auth(&self.user, Some(&self.password));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            let reason = chain(&e);
            if reason.contains("certificate") || reason.contains("UnknownIssuer") {
                Problem::BmcCertificate {
                    url: self.base.clone(),
                    reason,
                }
            } else {
                Problem::BmcUnreachable {
                    url: self.base.clone(),
                    reason,
                }
            }
        })?;
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Err(Problem::BmcCredentials {
                url: self.base.clone(),
                user: self.user.clone(),
                status,
            });
        }
        let text = resp.text().await.unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok((status, v))
    }

    async fn get(&self, path: &str) -> Result<Value, Problem> {
        let (status, v) = self.call(reqwest::Method::GET, path, None).await?;
        if !(200..300).contains(&status) || !v.is_object() {
            return Err(Problem::BmcAnswer {
                what: format!("GET {path}"),
                reason: format!("HTTP {status}: {v}"),
            });
        }
        Ok(v)
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> Result<(), Problem> {
        let what = format!("{method} {path}");
        let (status, v) = self.call(method, path, Some(body)).await?;
        if !(200..300).contains(&status) {
            return Err(Problem::BmcAnswer {
                what,
                reason: format!("HTTP {status}: {v}"),
            });
        }
        Ok(())
    }

    /// The checks before anything starts: the service root answers over
    /// trusted TLS, the credentials work, the system exists, and (with
    /// `virtual_media`) it has a virtual media CD with nothing inserted.
    pub async fn check(&self, virtual_media: bool) -> Result<Found, Problem> {
        // The service root needs no credentials: unreachable and
        // certificate problems show here first.
        self.call(reqwest::Method::GET, "/redfish/v1/", None)
            .await?;
        let (status, system) = self.call(reqwest::Method::GET, &self.system, None).await?;
        if !(200..300).contains(&status) {
            let members = self
                .get("/redfish/v1/Systems")
                .await
                .map(|v| ids(&v["Members"]).collect::<Vec<_>>().join(", "))
                .unwrap_or_else(|e| format!("nothing ({e})"));
            return Err(Problem::NoSystem {
                path: self.system.clone(),
                status,
                members,
            });
        }
        let text = |v: &Value, k: &str| v[k].as_str().unwrap_or("?").to_string();
        let mut found = Found {
            system: format!(
                "{} {} (BIOS {})",
                text(&system, "Manufacturer"),
                text(&system, "Model"),
                text(&system, "BiosVersion")
            ),
            bmc: "?".into(),
            cd: String::new(),
            before: Snapshot::of(&system),
        };
        let mut collections: Vec<String> = Vec::new();
        if let Some(p) = system["VirtualMedia"]["@odata.id"].as_str() {
            collections.push(p.to_string());
        }
        for mp in ids(&system["Links"]["ManagedBy"]) {
            let manager = self.get(mp).await?;
            if found.bmc == "?" {
                found.bmc = format!(
                    "{} firmware {}",
                    text(&manager, "Model"),
                    text(&manager, "FirmwareVersion")
                );
            }
            // sushy-tools, like some BMCs, links the system's own
            // collection from its manager too: look at it once.
            if let Some(p) = manager["VirtualMedia"]["@odata.id"].as_str() {
                if !collections.iter().any(|c| c == p) {
                    collections.push(p.to_string());
                }
            }
        }
        if !virtual_media {
            return Ok(found);
        }
        for c in &collections {
            let list = self.get(c).await?;
            for p in ids(&list["Members"]) {
                let vm = self.get(p).await?;
                let types = vm["MediaTypes"].to_string();
                if !(types.contains("\"CD\"") || types.contains("\"DVD\"")) {
                    continue;
                }
                if vm["Inserted"] == json!(true)
                    || vm["Image"].as_str().is_some_and(|i| !i.is_empty())
                {
                    return Err(Problem::VirtualMediaBusy {
                        device: p.to_string(),
                        image: vm["Image"].as_str().unwrap_or("?").to_string(),
                    });
                }
                found.cd = p.to_string();
                return Ok(found);
            }
        }
        Err(Problem::VirtualMediaUnsupported {
            system: self.system.clone(),
            looked: if collections.is_empty() {
                "no VirtualMedia collection on the system or its managers".into()
            } else {
                collections.join(", ")
            },
        })
    }

    /// The newest entry of the logs the BMC keeps for the server (the
    /// system's and its managers' `LogServices`: SEL, event and console
    /// logs), as `LogService: Created Message`; `None` when it offers
    /// none (sushy-tools) or they are empty. For the no-heartbeat error:
    /// the last thing the server or BMC said.
    pub async fn newest_log_entry(&self) -> Option<String> {
        let system = self.get(&self.system).await.ok()?;
        let mut services: Vec<String> = system["LogServices"]["@odata.id"]
            .as_str()
            .map(str::to_string)
            .into_iter()
            .collect();
        for mp in ids(&system["Links"]["ManagedBy"]) {
            if let Some(p) = self
                .get(mp)
                .await
                .ok()
                .and_then(|v| v["LogServices"]["@odata.id"].as_str().map(str::to_string))
            {
                services.push(p);
            }
        }
        let mut newest: Option<(String, String)> = None;
        for collection in services {
            let Ok(list) = self.get(&collection).await else {
                continue;
            };
            for p in ids(&list["Members"]) {
                let Ok(service) = self.get(p).await else {
                    continue;
                };
                let Some(entries) = service["Entries"]["@odata.id"].as_str() else {
                    continue;
                };
                let Ok(entries) = self.get(entries).await else {
                    continue;
                };
                if let Some((when, msg)) = newest_entry(&entries) {
                    if newest.as_ref().is_none_or(|(w, _)| when > *w) {
                        let name = service["Id"].as_str().unwrap_or(p);
                        newest = Some((when, format!("{name}: {msg}")));
                    }
                }
            }
        }
        newest.map(|(when, msg)| format!("{msg} ({when})"))
    }

    /// The server's power state and boot override now.
    pub async fn snapshot(&self) -> Result<Snapshot, Problem> {
        Ok(Snapshot::of(&self.get(&self.system).await?))
    }

    /// Whether the CD at `cd` holds an image now (its `Image`, if so).
    pub async fn inserted(&self, cd: &str) -> Result<Option<String>, Problem> {
        let vm = self.get(cd).await?;
        let image = vm["Image"].as_str().unwrap_or_default().to_string();
        Ok((vm["Inserted"] == json!(true) || !image.is_empty()).then_some(image))
    }

    /// Puts the server back as `before` showed it: the CD ejected, the
    /// boot override restored and, unless `keep_power` (a deployed
    /// server booting its system), the power state. Returns what it did,
    /// one line each.
    pub async fn restore(
        &self,
        cd: &str,
        before: &Snapshot,
        keep_power: bool,
    ) -> Result<Vec<String>, Problem> {
        let mut done = Vec::new();
        if cd.is_empty() {
            // --boot pxe: no virtual media was used.
        } else if let Some(image) = self.inserted(cd).await? {
            self.send(
                reqwest::Method::POST,
                &format!("{cd}/Actions/VirtualMedia.EjectMedia"),
                json!({}),
            )
            .await?;
            done.push(format!("ejected {image:?} from {cd}"));
        } else {
            done.push(format!("{cd}: nothing inserted"));
        }
        let now = self.snapshot().await?;
        if now.power != before.power && !keep_power && before.power == "Off" {
            self.send(
                reqwest::Method::POST,
                &format!("{}/Actions/ComputerSystem.Reset", self.system),
                json!({"ResetType": "ForceOff"}),
            )
            .await?;
            done.push("powered the server off, as it was".to_string());
        }
        if (now.target.as_ref(), now.enabled.as_ref(), now.mode.as_ref())
            != (
                before.target.as_ref(),
                before.enabled.as_ref(),
                before.mode.as_ref(),
            )
        {
            let mut boot = serde_json::Map::new();
            if let Some(e) = &before.enabled {
                boot.insert("BootSourceOverrideEnabled".into(), json!(e));
            }
            if let Some(t) = &before.target {
                boot.insert("BootSourceOverrideTarget".into(), json!(t));
            }
            if before.mode.is_some() && before.mode != now.mode {
                boot.insert("BootSourceOverrideMode".into(), json!(before.mode));
            }
            self.send(
                reqwest::Method::PATCH,
                &self.system,
                json!({ "Boot": boot }),
            )
            .await?;
            done.push(format!(
                "boot override back to {} ({}) from {} ({})",
                before.target.as_deref().unwrap_or("-"),
                before.enabled.as_deref().unwrap_or("-"),
                now.target.as_deref().unwrap_or("-"),
                now.enabled.as_deref().unwrap_or("-"),
            ));
        } else {
            done.push(format!(
                "boot override as before: {} ({})",
                now.target.as_deref().unwrap_or("-"),
                now.enabled.as_deref().unwrap_or("-")
            ));
        }
        Ok(done)
    }
}

/// The `@odata.id`s of a list of links (`Members`, `Links.ManagedBy`).
fn ids(links: &Value) -> impl Iterator<Item = &str> {
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["@odata.id"].as_str())
}

/// The newest entry (by `Created`, else the last listed) of a Redfish
/// `LogEntryCollection` whose members are expanded, as (`Created`,
/// `Message`); entries without a message are skipped.
fn newest_entry(collection: &Value) -> Option<(String, String)> {
    collection["Members"]
        .as_array()?
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let msg = e["Message"].as_str().filter(|m| !m.trim().is_empty())?;
            let when = e["Created"].as_str().unwrap_or_default().to_string();
            Some((when, i, msg.trim().to_string()))
        })
        .max_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)))
        .map(|(when, _, msg)| (when, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of DMTF's public Redfish mockups (a SEL with expanded
    /// members); sushy-tools offers no log services at all.
    #[test]
    fn the_newest_log_entry_is_found_by_its_time() {
        let sel = json!({
            "@odata.id": "/redfish/v1/Systems/1/LogServices/SEL/Entries",
            "Members": [
                {"Id": "1", "Created": "2026-11-27T10:00:00Z", "Message": "System boot"},
                {"Id": "3", "Created": "2026-11-27T10:05:00Z", "Message": "PXE-E18: Server response timeout. "},
                {"Id": "2", "Created": "2026-11-27T10:01:00Z", "Message": "Power on"},
                {"Id": "4", "Created": "2026-11-27T10:09:00Z"}
            ]
        });
        assert_eq!(
            newest_entry(&sel),
            Some((
                "2026-11-27T10:05:00Z".into(),
                "PXE-E18: Server response timeout.".into()
            ))
        );
        // No times: the last listed.
        let plain = json!({"Members": [{"Message": "a"}, {"Message": "b"}]});
        assert_eq!(newest_entry(&plain), Some((String::new(), "b".into())));
        assert_eq!(newest_entry(&json!({"Members": []})), None);
        assert_eq!(newest_entry(&json!({"Members": "x"})), None);
        assert_eq!(newest_entry(&json!(null)), None);
    }
}
