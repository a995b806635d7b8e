//! QEMU's machine protocol (QMP) over the unix socket a bed machine opens
//! when its spec asks (`VmSpec::qmp`): one command per connection, the
//! guest's real-time clock read through it (`/machine`'s `rtc-time`, the
//! date in the emulated MC146818's registers), and a multipath disk's paths
//! taken away and given back (hot-unplug and hotplug of its `scsi-hd`s).

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

/// Takes path `path` of multipath disk `disk` (the `disk`-th of
/// `VmSpec::multipath_disks`, as `vm.rs` names its devices) away, as a
/// SAN loses a path: `device_del` of its `scsi-hd` (QEMU drops its drive).
pub fn remove_path(socket: &Path, disk: usize, path: u32) -> Result<()> {
    command(
        socket,
        "device_del",
        json!({"id": format!("mp{disk}p{path}d")}),
    )?;
    Ok(())
}

/// Gives multipath disk `disk` (backed by `d`) a path again, as a new
/// `scsi-hd` on SCSI target `target` of its controller (one no present path
/// uses), over a new drive on the same file: the guest sees a new disk with
/// the LUN's serial and WWN.
pub fn add_path(socket: &Path, disk: usize, d: &super::MultipathDisk, target: u32) -> Result<()> {
    // Named as vm.rs names a path on target `target`, so [`remove_path`]
    // takes it away again.
    let node = format!("mp{disk}p{target}");
    command(
        socket,
        "blockdev-add",
        json!({"driver": "raw", "node-name": node,
               "file": {"driver": "file", "filename": d.path, "locking": "off"}}),
    )?;
    let wwn = u64::from_str_radix(d.wwn.trim_start_matches("0x"), 16)
        .with_context(|| format!("WWN {}", d.wwn))?;
    command(
        socket,
        "device_add",
        json!({"driver": "scsi-hd", "id": format!("{node}d"), "drive": node,
               "bus": format!("mp{disk}.0"), "scsi-id": target, "lun": 0,
               "share-rw": true, "serial": d.serial, "wwn": wwn}),
    )?;
    Ok(())
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
