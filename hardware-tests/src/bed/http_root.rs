//! Ironic's `http_root` on the bed's network: a directory served over HTTP
//! on the bridge address by Python's `http.server` (from the BMC's venv,
//! `ci/redfish/install.sh`), its access log kept in the bed's log
//! directory. Ironic writes there what it publishes: the virtual-media ISOs
//! it builds, and for its `ipxe` boot interface `boot.ipxe`,
//! `pxelinux.cfg/<MAC>` and each node's iPXE config, kernel and ramdisk.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::net::{Net, Proc, BRIDGE_IP};
use crate::netns::NetNs;

/// The server; killed by its PID when dropped.
#[derive(Debug)]
pub struct HttpRoot {
    url: String,
    log: PathBuf,
    _server: Proc,
}

/// One request in the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The client's address.
    pub client: String,
    /// `GET`, `HEAD`, ….
    pub method: String,
    /// The path asked for.
    pub path: String,
    /// The status answered.
    pub status: u16,
}

impl HttpRoot {
    /// Serves `dir` on [`BRIDGE_IP`]:`port` inside the bed's namespace; the
    /// access log goes to `<net.logs>/http-<port>.log`. Returns once the
    /// server accepts connections.
    pub fn serve(net: &Net, dir: &Path, port: u16) -> Result<Self> {
        Self::serve_on(net, BRIDGE_IP, dir, port)
    }

    /// [`HttpRoot::serve`] on the bed's address `ip` (an IPv6 bed's
    /// [`super::BRIDGE_IP6`]); the URL brackets an IPv6 literal.
    pub fn serve_on(net: &Net, ip: &str, dir: &Path, port: u16) -> Result<Self> {
        let log = net.logs.join(format!("http-{port}.log"));
        let python = super::redfish::venv().join("bin/python");
        Self::start(Some(&net.ns), &python, ip, dir, port, log)
    }

    /// Serves `dir` on `ip`:`port` in this process's network namespace
    /// with the system's `python3` (the own-server demo, whose machine has
    /// no BMC venv); the access log goes to `log`.
    pub fn serve_here(ip: &str, dir: &Path, port: u16, log: PathBuf) -> Result<Self> {
        Self::start(None, Path::new("python3"), ip, dir, port, log)
    }

    fn start(
        ns: Option<&NetNs>,
        python: &Path,
        ip: &str,
        dir: &Path,
        port: u16,
        log: PathBuf,
    ) -> Result<Self> {
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name]).arg(python);
                c
            }
            None => Command::new(python),
        };
        let child = cmd
            // Unbuffered: every request is in the log as it is answered.
            .args(["-u", "-m", "http.server", "--bind", ip, "--directory"])
            .arg(dir)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {} -m http.server", python.display()))?;
        let mut server = Proc::new(child, "http.server for Ironic's http_root");
        let addr = crate::socket_addr(ip, port)?;
        let connects =
            || std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = server.child().try_wait()? {
                bail!(
                    "http.server exited ({status}) while starting; its log: {}",
                    log.display()
                );
            }
            let up = match ns {
                Some(ns) => ns.enter(connects)?,
                None => connects(),
            };
            if up {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "http.server did not listen within 30 s; its log: {}",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Self {
            url: format!("http://{}:{port}", crate::url_host(ip)),
            log,
            _server: server,
        })
    }

    /// `http://<ip>:<port>`, Ironic's `[deploy] http_url`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The access log's path.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The requests answered so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(parse_access_line)
            .collect()
    }
}

/// `10.99.0.50 - - [24/Nov/2026 21:00:00] "GET /boot.ipxe HTTP/1.1" 200 -`;
/// `None` for other lines (http.server's error notes, its start banner).
fn parse_access_line(line: &str) -> Option<Request> {
    let (client, rest) = line.split_once(' ')?;
    let mut quoted = rest.splitn(3, '"');
    quoted.next()?;
    let request = quoted.next()?;
    let status = quoted.next()?.split_whitespace().next()?.parse().ok()?;
    let mut parts = request.split_whitespace();
    Some(Request {
        client: client.to_string(),
        method: parts.next()?.to_string(),
        path: parts.next()?.to_string(),
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_access_line, Request};

    #[test]
    fn access_lines_are_read_and_other_lines_skipped() {
        assert_eq!(
            parse_access_line(
                "10.99.0.50 - - [24/Nov/2026 21:00:00] \"GET /pxelinux.cfg/52-54-00-1c-0a-01 HTTP/1.1\" 200 -"
            ),
            Some(Request {
                client: "10.99.0.50".into(),
                method: "GET".into(),
                path: "/pxelinux.cfg/52-54-00-1c-0a-01".into(),
                status: 200,
            })
        );
        assert_eq!(
            parse_access_line(
                "10.99.0.50 - - [24/Nov/2026 21:00:01] code 404, message File not found"
            ),
            None
        );
        assert_eq!(
            parse_access_line("Serving HTTP on 10.99.0.1 port 8088 (http://10.99.0.1:8088/) ..."),
            None
        );
    }
}
