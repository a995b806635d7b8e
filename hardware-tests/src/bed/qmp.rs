//! QEMU's machine protocol (QMP) over the unix socket a bed machine opens
//! when its spec asks (`VmSpec::qmp`): one command per connection, and the
//! guest's real-time clock read through it (`/machine`'s `rtc-time`, the
//! date in the emulated MC146818's registers).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// Runs `execute` with `arguments` on the QMP socket at `socket`; its
/// `return` value.
pub fn command(socket: &Path, execute: &str, arguments: Value) -> Result<Value> {
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("connecting to QMP at {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let greeting = reply(&mut reader)?;
    anyhow::ensure!(greeting.get("QMP").is_some(), "no QMP greeting: {greeting}");
    writeln!(writer, "{}", json!({"execute": "qmp_capabilities"}))?;
    reply(&mut reader)?;
    writeln!(
        writer,
        "{}",
        json!({"execute": execute, "arguments": arguments})
    )?;
    let answer = reply(&mut reader)?;
    match answer.get("return") {
        Some(v) => Ok(v.clone()),
        None => bail!("QMP {execute}: {answer}"),
    }
}

/// The next line that is not an asynchronous event.
fn reply(reader: &mut impl BufRead) -> Result<Value> {
    loop {
        let mut line = String::new();
        anyhow::ensure!(
            reader.read_line(&mut line)? > 0,
            "QMP closed the connection"
        );
        let v: Value = serde_json::from_str(&line).with_context(|| format!("QMP sent {line:?}"))?;
        if v.get("event").is_none() {
            return Ok(v);
        }
    }
}

/// The guest's RTC as (year, month 1-12, day, hour, minute, second).
pub fn rtc_time(socket: &Path) -> Result<(i64, i64, i64, i64, i64, i64)> {
    let tm = command(
        socket,
        "qom-get",
        json!({"path": "/machine", "property": "rtc-time"}),
    )?;
    let field = |k: &str| {
        tm.get(k)
            .and_then(Value::as_i64)
            .with_context(|| format!("rtc-time without {k}: {tm}"))
    };
    Ok((
        field("tm_year")? + 1900,
        field("tm_mon")? + 1,
        field("tm_mday")?,
        field("tm_hour")?,
        field("tm_min")?,
        field("tm_sec")?,
    ))
}
