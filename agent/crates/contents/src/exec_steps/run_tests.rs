//! Running hooks with real processes (`sh`, `cat`, `sleep`): the result
//! line, stdin, failures with their tail, the time limit and abort killing
//! the whole process group, the erase protocol's decline and the root-disk
//! hook's answers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::manifest::Hook;
use super::run::*;

fn sh(script: &str, timeout: Duration) -> Hook {
    Hook {
        executable: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script.into()],
        timeout,
    }
}

fn never() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

const LONG: Duration = Duration::from_secs(60);

/// Whether `pid` is running (a zombie waiting for its reaper is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// Waits up to 5 s for `pid` to stop running.
async fn gone(pid: u32) -> bool {
    for _ in 0..50 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The pids (one per line) a script wrote to `file`, once there are `n`.
async fn pids(file: &Path, n: usize) -> Vec<u32> {
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(file) {
            let p: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if p.len() >= n {
                return p;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never had {n} pids", file.display());
}

#[tokio::test]
async fn the_result_is_the_last_json_line_of_stdout() {
    let hook = sh(
        "echo starting; echo '{\"bad\": 1}' >&2; echo '{\"done\": [1, 2]}'; echo; echo >&2 noise",
        LONG,
    );
    let v = run(&hook, "step t", &json!({}), never()).await.unwrap();
    assert_eq!(v, json!({"done": [1, 2]}));
    let v = run(
        &sh("echo '{\"x\": 1}'; echo all done", LONG),
        "step t",
        &json!({}),
        never(),
    )
    .await
    .unwrap();
    assert_eq!(v, Value::Null);
    let v = run(&sh("true", LONG), "step t", &json!({}), never())
        .await
        .unwrap();
    assert_eq!(v, Value::Null);
}

#[tokio::test]
async fn the_hook_is_told_where_the_agent_binary_is() {
    let hook = sh("printf '{\"exe\": \"%s\"}\\n' \"$AGENT_EXE\"", LONG);
    let v = run(&hook, "step t", &json!({}), never()).await.unwrap();
    let exe = std::env::current_exe().unwrap();
    assert_eq!(v["exe"], exe.to_str().unwrap());
}

#[tokio::test]
async fn the_input_arrives_on_stdin_and_then_ends() {
    let input =
        json!({"node": {"uuid": "u1"}, "args": {"level": "1"}, "disks": [{"name": "/dev/sda"}]});
    let cat = Hook {
        executable: PathBuf::from("/bin/cat"),
        args: vec![],
        timeout: LONG,
    };
    // `cat` ends only when stdin is closed, and echoes it as its result.
    assert_eq!(run(&cat, "step cat", &input, never()).await.unwrap(), input);
    // A hook that never reads its input is not blocked by a large one.
    let big = json!({"blob": "x".repeat(1 << 20)});
    assert_eq!(
        run(&sh("echo 7", LONG), "step t", &big, never())
            .await
            .unwrap(),
        json!(7)
    );
}

#[tokio::test]
async fn a_failure_reports_its_status_and_last_lines() {
    let script = "for i in $(seq 1 30); do echo line $i; done; echo 'disk on fire' >&2; exit 3";
    let e = run(
        &sh(script, LONG),
        "step burn of manager acme",
        &json!({}),
        never(),
    )
    .await
    .unwrap_err();
    let RunError::Failed { status, tail, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*status, Exit::Code(3));
    assert_eq!(tail.0.len(), TAIL_LINES);
    assert_eq!(tail.0.first().map(String::as_str), Some("line 12"));
    assert_eq!(tail.0.last().map(String::as_str), Some("disk on fire"));
    let msg = e.to_string();
    assert!(
        msg.starts_with("step burn of manager acme exited with status 3; last output:\nline 12\n"),
        "{msg}"
    );
    assert!(msg.ends_with("line 30\ndisk on fire"), "{msg}");

    let e = run(&sh("kill -TERM $$", LONG), "step t", &json!({}), never())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "step t exited with signal 15 (SIGTERM); no output"
    );
}

#[tokio::test]
async fn a_missing_executable_is_a_spawn_error() {
    let missing = Hook {
        executable: PathBuf::from("/nonexistent/hook"),
        args: vec![],
        timeout: LONG,
    };
    let e = run(&missing, "step t", &json!({}), never())
        .await
        .unwrap_err();
    assert!(matches!(e, RunError::Spawn { .. }), "{e}");
    assert!(
        e.to_string().starts_with("cannot run /nonexistent/hook: "),
        "{e}"
    );
}

#[tokio::test]
async fn the_time_limit_kills_the_process() {
    let sleep = Hook {
        executable: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), "echo napping; exec sleep 30".into()],
        timeout: Duration::from_secs(1),
    };
    let start = Instant::now();
    let e = run(&sleep, "step nap", &json!({}), never())
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let RunError::TimedOut { after, tail, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*after, Duration::from_secs(1));
    assert_eq!(tail.0, ["napping"]);
    assert_eq!(
        e.to_string(),
        "step nap timed out after 1 s and was killed; last output:\nnapping"
    );
}

#[tokio::test]
async fn abort_kills_the_whole_process_group() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("pids");
    // The shell starts a child `sleep`, writes both pids, and waits.
    let script = format!(
        "sleep 60 & echo $! > {f}; echo $$ >> {f}; wait",
        f = file.display()
    );
    let hook = sh(&script, LONG);
    let abort = never();
    let task = tokio::spawn({
        let abort = abort.clone();
        async move { run(&hook, "step long", &json!({}), abort).await }
    });
    let p = pids(&file, 2).await;
    assert!(p.iter().all(|&pid| alive(pid)), "{p:?}");
    let start = Instant::now();
    abort.store(true, Ordering::SeqCst);
    let e = task.await.unwrap().unwrap_err();
    assert!(matches!(e, RunError::Aborted { .. }), "{e}");
    assert_eq!(e.to_string(), "step long was aborted and killed");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    for pid in p {
        assert!(gone(pid).await, "{pid} still runs");
    }
}

#[tokio::test]
async fn what_a_hook_leaves_behind_is_killed_when_it_exits() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("pids");
    // The background `sleep` keeps stdout open: without the group kill the
    // output would never end.
    let script = format!(
        "sleep 60 & echo $! > {}; echo '{{\"ok\": true}}'",
        file.display()
    );
    let start = Instant::now();
    let v = run(&sh(&script, LONG), "step t", &json!({}), never())
        .await
        .unwrap();
    assert_eq!(v, json!({"ok": true}));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let p = pids(&file, 1).await;
    assert!(gone(p[0]).await);
}

#[tokio::test]
async fn an_erase_hook_claims_or_declines_a_disk() {
    let input = json!({"node": {}, "block_device": {"name": "/dev/sdb"}});
    let decline = sh("echo checking; echo '{\"claimed\": false}'", LONG);
    assert_eq!(
        erase_block_device(&decline, "erase", &input, never())
            .await
            .unwrap(),
        None
    );
    let claim = sh("echo '{\"method\": \"vendor secure erase\"}'", LONG);
    assert_eq!(
        erase_block_device(&claim, "erase", &input, never())
            .await
            .unwrap(),
        Some(json!({"method": "vendor secure erase"}))
    );
    let silent = sh("true", LONG);
    assert_eq!(
        erase_block_device(&silent, "erase", &input, never())
            .await
            .unwrap(),
        Some(Value::Null)
    );
    // A decline must exit 0: a failure stays a failure.
    let failing = sh("echo '{\"claimed\": false}'; exit 1", LONG);
    assert!(erase_block_device(&failing, "erase", &input, never())
        .await
        .is_err());
}

#[tokio::test]
async fn a_root_disk_hook_chooses_declines_or_is_an_error_naming_its_answer() {
    let input = json!({"node": {}, "disks": [{"name": "/dev/sda"}, {"name": "/dev/sdb"}]});
    let choose = sh("echo looking; echo '{\"name\": \"/dev/sdb\"}'", LONG);
    assert_eq!(
        os_install_device(&choose, "root", &input, never())
            .await
            .unwrap(),
        Some(PathBuf::from("/dev/sdb"))
    );
    let decline = sh("echo '{\"claimed\": false}'", LONG);
    assert_eq!(
        os_install_device(&decline, "root", &input, never())
            .await
            .unwrap(),
        None
    );
    // No choice at all, a relative name, extra keys, a name of the wrong
    // type: each is the hook's error, with what it printed.
    for (script, printed) in [
        ("true", "null"),
        ("echo '{\"name\": \"sdb\"}'", r#"{"name":"sdb"}"#),
        (
            "echo '{\"name\": \"/dev/sdb\", \"wipe\": true}'",
            r#"{"name":"/dev/sdb","wipe":true}"#,
        ),
        ("echo '{\"name\": 3}'", r#"{"name":3}"#),
        ("echo '\"/dev/sdb\"'", r#""/dev/sdb""#),
    ] {
        let e = os_install_device(&sh(script, LONG), "root", &input, never())
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, RunError::Answer { .. }), "{script}: {text}");
        assert!(
            text.starts_with(&format!("root answered {printed}, which is not {{\"name\"")),
            "{script}: {text}"
        );
    }
    let failing = sh("echo '{\"name\": \"/dev/sdb\"}'; exit 2", LONG);
    assert!(matches!(
        os_install_device(&failing, "root", &input, never()).await,
        Err(RunError::Failed { .. })
    ));
}
