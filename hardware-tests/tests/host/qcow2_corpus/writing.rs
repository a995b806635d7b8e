//! Writing a variant through `agent write-image`, the deploy step and
//! the in-process pipeline, with the outcome of each write.

use super::*;

// ---------------------------------------------------------------------------
// Writing

/// One write and what it showed.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) variant: String,
    pub(crate) how: String,
    pub(crate) image_size: u64,
    pub(crate) virtual_size: u64,
    /// Requests after the first (the re-reads), and how many had a Range.
    pub(crate) rereads: usize,
    pub(crate) ranged: usize,
    /// Rounds of reading again the agent logged (CLI only).
    pub(crate) rounds: Option<usize>,
    pub(crate) peak_rss_mib: Option<f64>,
    pub(crate) secs: f64,
    /// `Err(why)` when this write did not do what it should.
    pub(crate) ok: Result<(), String>,
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome {
            variant: String::new(),
            how: String::new(),
            image_size: 0,
            virtual_size: 0,
            rereads: 0,
            ranged: 0,
            rounds: None,
            peak_rss_mib: None,
            secs: 0.0,
            ok: Ok(()),
        }
    }
}

impl Outcome {
    pub(crate) fn line(&self) -> String {
        format!(
            "{:<14} {:<22} {:>9.1} {:>7.0} {:>8} {:>7} {:>7} {:>9} {:>7.1}  {}",
            self.variant,
            self.how,
            mib(self.image_size),
            mib(self.virtual_size),
            self.rereads,
            self.ranged,
            self.rounds
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
            self.peak_rss_mib
                .map(|r| format!("{r:.1}"))
                .unwrap_or_else(|| "-".into()),
            self.secs,
            match &self.ok {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("FAILED: {e}"),
            }
        )
    }
}

pub(crate) const HEADER: &str = "variant        write                  qcow2 MiB  virt MiB  re-reqs  ranged  rounds  peak MiB    secs  result";

/// The requests the server saw for `path`.
pub(crate) fn requests(server: &ImageServer, path: &str) -> Vec<Seen> {
    server
        .seen()
        .into_iter()
        .filter(|s| s.path == path)
        .collect()
}

pub(crate) fn count_rereads(outcome: &mut Outcome, seen: &[Seen]) {
    outcome.rereads = seen.len().saturating_sub(1);
    outcome.ranged = seen.iter().filter(|s| s.range.is_some()).count();
}

/// Checks that the target holds exactly qemu-img's raw output.
pub(crate) fn compare(target: &Path, virtual_size: u64, reference: &str) -> Result<(), String> {
    let len = std::fs::metadata(target).map_err(|e| e.to_string())?.len();
    if len != virtual_size {
        return Err(format!("target is {len} bytes, not {virtual_size}"));
    }
    let got = sha256_prefix(target, virtual_size).map_err(|e| e.to_string())?;
    if got != reference {
        return Err(format!(
            "target differs from qemu-img's raw output (sha256 {got}, want {reference})"
        ));
    }
    Ok(())
}

pub(crate) fn request(url: String, sha: &str) -> WriteRequest {
    WriteRequest {
        urls: vec![url],
        checksum: ChecksumSpec::parse_cli(&format!("sha256:{sha}")).unwrap(),
        md5_allowed: false,
        format: None,
        formats: Default::default(),
        http: HttpOptions {
            stall_timeout: Duration::from_secs(30),
            retries: 2,
            retry_interval: Duration::from_millis(200),
            // One stream: the corpus counts the requests that read parts
            // again, and a parallel download's segments would count too.
            connections: 1,
            ..HttpOptions::default()
        },
    }
}

pub(crate) fn policy(target: &Path) -> WritePolicy {
    WritePolicy::from_config(&Config {
        mode: RunMode::Host,
        allowed_devices: vec![target.to_path_buf()],
        ..Config::default()
    })
}

/// The agent binary: `$QCOW2_CORPUS_AGENT` as it is, else the one next to
/// this test's directory (`target/debug/agent`, which ci/test builds before
/// it runs hardware-tests; `cargo test -p hardware-tests` alone does not),
/// refused when older than the agent's sources.
pub(crate) fn agent_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("QCOW2_CORPUS_AGENT") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/debug/deps")
        .join("agent");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: build it with `cargo build -p agent --bin agent`",
                bin.display()
            )
        });
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    let mut stack = vec![hardware_tests::repo_root().join("agent/src")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                // Not part of the binary unless built with the
                // test-conductor feature; write-image never uses it.
                if !p.ends_with("testconductor") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                let t = e.metadata().and_then(|m| m.modified()).unwrap();
                newest = newest.max(t);
            }
        }
    }
    assert!(
        built >= newest,
        "{} is older than agent/src: rebuild it with `cargo build -p agent --bin agent`",
        bin.display()
    );
    bin
}

/// `VmHWM` of a running process, in KiB.
pub(crate) fn vm_hwm_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Runs `agent write-image` as a child process; returns its combined
/// output, whether it succeeded, and its peak RSS in MiB (the larger of
/// VmHWM polled here and the figure the agent prints).
pub(crate) fn cli_write(agent: &Path, url: &str, sha: &str, target: &Path) -> (bool, String, f64) {
    let mut child = Command::new(agent)
        .args(["write-image", "--image", url, "--checksum"])
        .arg(format!("sha256:{sha}"))
        .arg("--device")
        .arg(target)
        .args([
            "--retries",
            "2",
            "--stall-timeout",
            "30",
            "--connections",
            "1",
        ])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running agent write-image");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut polled = 0u64;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if let Some(k) = vm_hwm_kib(child.id()) {
            polled = polled.max(k);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!("{}{}", out.join().unwrap(), err.join().unwrap());
    let reported = text
        .split("peak memory ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    (status.success(), text, reported.max(polled as f64 / 1024.0))
}

/// The `write_image` deploy step as Ironic 39 sends it for a qcow2 image.
pub(crate) fn deploy_step(name: &str, url: &str, sha: &str) -> Value {
    let node = "d0838b0d-0000-4000-8000-00000000c0c2";
    json!({
        "step": {"interface": "deploy", "step": "write_image", "args": {
            "image_info": {"id": name, "urls": [url], "disk_format": "qcow2",
                           "container_format": "bare", "stream_raw_images": true,
                           "os_hash_algo": "sha256", "os_hash_value": sha, "node_uuid": node},
            "configdrive": null}},
        "node": {"uuid": node, "properties": {}},
        "ports": [],
        "deploy_version": {"generic_hardware_manager": "1.2"}})
}

/// Writes the variants as they become ready.
pub(crate) struct Writer {
    pub(crate) server: ImageServer,
    pub(crate) agent: PathBuf,
    pub(crate) api: AgentApi,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) target: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) runs: usize,
    pub(crate) outcomes: Vec<Outcome>,
}

impl Writer {
    pub(crate) fn new(work: &Path, agent: PathBuf) -> Writer {
        let target = work.join("target.disk");
        fresh_target(&target, MIB);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let api = rt
            .block_on(AgentApi::start(Config {
                mode: RunMode::Host,
                allowed_devices: vec![target.clone()],
                // One stream, as for write-image above.
                image_download_connections: 1,
                ..Config::default()
            }))
            .unwrap();
        Writer {
            server: ImageServer::start().unwrap(),
            agent,
            api,
            rt,
            target,
            work: work.to_path_buf(),
            runs: 0,
            outcomes: Vec::new(),
        }
    }

    /// Serves `file` at a path of its own; returns (path, URL).
    fn serve(&mut self, file: &Path, script: &[Fault], then: Fault) -> (String, String) {
        self.runs += 1;
        let path = format!(
            "/run{}/{}",
            self.runs,
            file.file_name().unwrap().to_str().unwrap()
        );
        self.server.route(&path, file, script, then);
        let url = self.server.url(&path);
        (path, url)
    }

    pub(crate) fn record(&mut self, o: Outcome) {
        eprintln!("{}", o.line());
        self.outcomes.push(o);
    }

    fn outcome(r: &Ready, how: &str) -> Outcome {
        Outcome {
            variant: r.variant.name.to_string(),
            how: how.to_string(),
            image_size: r.size,
            virtual_size: r.virtual_size,
            ok: Ok(()),
            ..Outcome::default()
        }
    }

    /// `agent write-image` over a server honouring Range. Returns the
    /// requests the server saw.
    fn cli(&mut self, r: &Ready) -> Vec<Seen> {
        let (path, url) = self.serve(&r.qcow2, &[], Fault::None);
        fresh_target(&self.target, r.virtual_size);
        let mut o = Self::outcome(r, "write-image, Range");
        let started = Instant::now();
        let (ok, text, rss) = cli_write(&self.agent, &url, &r.sha, &self.target);
        o.secs = started.elapsed().as_secs_f64();
        o.peak_rss_mib = Some(rss);
        o.rounds = Some(text.matches("qcow2: reading again").count());
        let seen = requests(&self.server, &path);
        count_rereads(&mut o, &seen);
        o.ok = if ok {
            compare(&self.target, r.virtual_size, &r.reference).and_then(|()| {
                if rss < RSS_BOUND_MIB {
                    Ok(())
                } else {
                    Err(format!("peak RSS {rss:.1} MiB over {RSS_BOUND_MIB} MiB"))
                }
            })
        } else {
            Err(format!("agent write-image failed:\n{text}"))
        };
        self.record(o);
        seen
    }

    /// The `write_image` deploy step through the command API (Range).
    fn deploy(&mut self, r: &Ready) {
        let (path, url) = self.serve(&r.qcow2, &[], Fault::None);
        fresh_target(&self.target, r.virtual_size);
        let mut o = Self::outcome(r, "deploy step, Range");
        let started = Instant::now();
        let name = r.qcow2.file_name().unwrap().to_str().unwrap().to_string();
        let result = self.rt.block_on(self.api.run(
            "deploy.execute_deploy_step",
            deploy_step(&name, &url, &r.sha),
        ));
        o.secs = started.elapsed().as_secs_f64();
        count_rereads(&mut o, &requests(&self.server, &path));
        o.ok = match result {
            Ok(v) if v["command_status"] == "SUCCEEDED" => {
                compare(&self.target, r.virtual_size, &r.reference)
            }
            Ok(v) => Err(format!("deploy step: {v}")),
            Err(e) => Err(format!("deploy step: {e:#}")),
        };
        self.record(o);
    }

    /// `write_image` in this process, serving `file` (the qcow2 or a
    /// compressed copy) with `script`/`then`; `Ok` when it was written and
    /// equals qemu-img's output.
    fn library(
        &mut self,
        r: &Ready,
        how: &str,
        file: &Path,
        script: &[Fault],
        then: Fault,
    ) -> Outcome {
        let (path, url) = self.serve(file, script, then);
        fresh_target(&self.target, r.virtual_size);
        let mut o = Self::outcome(r, how);
        o.image_size = std::fs::metadata(file).unwrap().len();
        let sha = if file == r.qcow2 {
            r.sha.clone()
        } else {
            sha256_file(file)
        };
        let started = Instant::now();
        let res = write_image(
            &request(url, &sha),
            &self.target,
            &policy(&self.target),
            &Progress::default(),
        );
        o.secs = started.elapsed().as_secs_f64();
        count_rereads(&mut o, &requests(&self.server, &path));
        o.ok = match res {
            Ok(_) => compare(&self.target, r.virtual_size, &r.reference),
            Err(e) => Err(e.to_string()),
        };
        o
    }

    /// Everything for one variant; the default `-c` image gets the extra
    /// transports and the changed-bytes server.
    pub(crate) fn write(&mut self, r: &Ready) {
        let seen = self.cli(r);
        self.deploy(r);
        if r.variant.ignore_range {
            let mut o = self.library(r, "library, no Range", &r.qcow2, &[], Fault::IgnoreRange);
            if o.ok.is_ok() && o.rereads == 0 && o.ranged == 0 && r.furthest_back.1 > 0 {
                o.ok = Err("no second download although data lies behind its table".into());
            }
            self.record(o);
        }
        if r.variant.name != "c" {
            return;
        }
        // The layout that used to fail ("not streamable") needs a re-read.
        let mut o = Self::outcome(r, "(re-read expected)");
        o.rereads = seen.len().saturating_sub(1);
        o.ranged = seen.iter().filter(|s| s.range.is_some()).count();
        if o.ranged == 0 {
            o.ok = Err(format!(
                "no Range request for the default -c image (furthest back {:.1} MiB, {} entries beyond the lookahead)",
                mib(r.furthest_back.0),
                r.furthest_back.1
            ));
            self.record(o);
        }

        // Inside zstd: the re-read downloads and decompresses again.
        let zst = self.work.join("c.qcow2.zst");
        let zst_made = run(Command::new("zstd")
            .args(["-q", "-T2", "-f", "-o"])
            .arg(&zst)
            .arg(&r.qcow2));
        let mut o = match zst_made {
            Ok(_) => self.library(r, "library, .zst no Range", &zst, &[], Fault::IgnoreRange),
            Err(e) => Outcome {
                ok: Err(format!("zstd: {e:#}")),
                ..Self::outcome(r, "library, .zst no Range")
            },
        };
        if o.ok.is_ok() && o.rereads == 0 {
            o.ok = Err("the .zst was not downloaded again for the re-read".into());
        }
        self.record(o);
        std::fs::remove_file(&zst).ok();

        // A server whose bytes change after the first download.
        self.changed_bytes(r, &seen);
    }

    /// Serves the image normally for the first download and with one byte
    /// flipped inside the first re-read range afterwards: the write must
    /// fail, say the image changed, and leave no partition table.
    fn changed_bytes(&mut self, r: &Ready, seen: &[Seen]) {
        let mut o = Self::outcome(r, "changed on re-read");
        let Some((first_ranged, range)) = seen
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.range.as_ref().map(|x| (i, x.clone())))
        else {
            o.ok = Err("no re-read range to change".into());
            self.record(o);
            return;
        };
        let (a, b) = range
            .strip_prefix("bytes=")
            .and_then(|r| r.split_once('-'))
            .map(|(a, b)| {
                (
                    a.parse::<u64>().unwrap(),
                    b.parse::<u64>().unwrap_or(r.size - 1),
                )
            })
            .unwrap_or_else(|| panic!("range {range}"));
        let at = a + (b - a) / 2;
        // An old disk with a partition table, to see it gone afterwards.
        fresh_target(&self.target, r.virtual_size);
        let mut sf = Command::new("sfdisk")
            .args(["--quiet", "--no-reread", "--no-tell-kernel"])
            .arg(&self.target)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        sf.stdin
            .take()
            .unwrap()
            .write_all(b"label: gpt\n,64MiB\n,\n")
            .unwrap();
        assert!(sf.wait().unwrap().success());
        let script = vec![Fault::None; first_ranged];
        let (path, url) = self.serve(&r.qcow2, &script, Fault::FlipByteAt(at));
        let started = Instant::now();
        let res = write_image(
            &request(url, &r.sha),
            &self.target,
            &policy(&self.target),
            &Progress::default(),
        );
        o.secs = started.elapsed().as_secs_f64();
        count_rereads(&mut o, &requests(&self.server, &path));
        o.ok = match res {
            Ok(_) => Err(format!("written although byte {at} changed on re-read")),
            Err(e) if !e.to_string().contains("changed while it was read") => {
                Err(format!("unexpected error: {e}"))
            }
            Err(e) => {
                eprintln!("changed bytes, as expected: {e}");
                wiped(&self.target)
            }
        };
        self.record(o);
    }
}

/// No signature libblkid knows, and a zero first MiB.
pub(crate) fn wiped(target: &Path) -> Result<(), String> {
    let f = std::fs::File::open(target).map_err(|e| e.to_string())?;
    let sigs = agent_devices::disk::erase::probe_signatures(&f).map_err(|e| format!("{e:#}"))?;
    if !sigs.is_empty() {
        return Err(format!("signatures left: {sigs:?}"));
    }
    let mut head = vec![0u8; MIB as usize];
    f.read_exact_at(&mut head, 0).map_err(|e| e.to_string())?;
    if head.iter().any(|b| *b != 0) {
        return Err("first MiB not zero".into());
    }
    Ok(())
}
