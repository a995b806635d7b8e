//! The qemu-img variants of the source disk, each checked by
//! `qemu-img check` and converted to raw as the reference.

use super::*;

// ---------------------------------------------------------------------------
// The variants

#[derive(Clone, Copy, Debug)]
pub(crate) enum Make {
    /// `qemu-img convert -f raw -O qcow2 ARGS`.
    Convert(&'static [&'static str]),
    /// The default `-c` image, an internal snapshot, then data written.
    Snapshot,
    /// The default `-c` image grown to 3 GiB and shrunk back: the L1
    /// table now sits at the end of the file, behind every L2 table.
    L1AtEnd,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Variant {
    pub(crate) name: &'static str,
    pub(crate) make: Make,
    /// Also over a server that ignores Range.
    pub(crate) ignore_range: bool,
}

pub(crate) const fn v(name: &'static str, make: Make) -> Variant {
    Variant {
        name,
        make,
        ignore_range: false,
    }
}

/// A variant made and checked by qemu-img, ready to be written.
pub(crate) struct Ready {
    pub(crate) variant: Variant,
    pub(crate) qcow2: PathBuf,
    pub(crate) sha: String,
    pub(crate) size: u64,
    pub(crate) virtual_size: u64,
    /// sha256 of `qemu-img convert -O raw` of it.
    pub(crate) reference: String,
    pub(crate) furthest_back: (u64, usize),
    pub(crate) make_secs: f64,
}

pub(crate) fn make_variant(
    variant: Variant,
    source: &Path,
    default_c: &Path,
    dir: &Path,
) -> Result<Ready, String> {
    let started = Instant::now();
    let qcow2 = dir.join(format!("{}.qcow2", variant.name));
    let q = qcow2.to_str().unwrap();
    let src = source.to_str().unwrap();
    let sh = |args: &[&str]| {
        run(Command::new(args[0]).args(&args[1..]))
            .map(|_| ())
            .map_err(|e| format!("{}: {e:#}", variant.name))
    };
    match variant.make {
        Make::Convert(args) => {
            let mut all = vec!["qemu-img", "convert"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["-f", "raw", "-O", "qcow2", src, q]);
            sh(&all)?;
        }
        Make::Snapshot => {
            std::fs::copy(default_c, &qcow2).map_err(|e| e.to_string())?;
            sh(&["qemu-img", "snapshot", "-c", "snap1", q])?;
            // qemu-io comes with qemu-img (qemu-utils).
            sh(&[
                "qemu-io",
                "-f",
                "qcow2",
                "-c",
                "write -P 0x5a 1M 1M",
                "-c",
                "write -P 0xa5 1500M 192k",
                q,
            ])?;
            sh(&["qemu-img", "snapshot", "-c", "snap2", q])?;
            let list = run(Command::new("qemu-img").args(["snapshot", "-l", q]))
                .map_err(|e| e.to_string())?;
            if !list.contains("snap1") || !list.contains("snap2") {
                return Err(format!("snapshots missing: {list}"));
            }
        }
        Make::L1AtEnd => {
            std::fs::copy(default_c, &qcow2).map_err(|e| e.to_string())?;
            sh(&["qemu-img", "resize", "-f", "qcow2", q, "3G"])?;
            sh(&["qemu-img", "resize", "-f", "qcow2", "--shrink", q, "2G"])?;
        }
    }
    sh(&["qemu-img", "check", "-q", "-f", "qcow2", q])?;
    let reference_raw = dir.join(format!("{}.reference.raw", variant.name));
    sh(&[
        "qemu-img",
        "convert",
        "-f",
        "qcow2",
        "-O",
        "raw",
        q,
        reference_raw.to_str().unwrap(),
    ])?;
    let virtual_size = virtual_size(&qcow2);
    let reference = sha256_prefix(&reference_raw, u64::MAX).map_err(|e| e.to_string())?;
    let raw_len = std::fs::metadata(&reference_raw).unwrap().len();
    std::fs::remove_file(&reference_raw).ok();
    if raw_len != virtual_size {
        return Err(format!(
            "qemu-img's raw output is {raw_len} bytes, the virtual size {virtual_size}"
        ));
    }
    Ok(Ready {
        variant,
        sha: sha256_file(&qcow2),
        size: std::fs::metadata(&qcow2).unwrap().len(),
        virtual_size,
        reference,
        furthest_back: furthest_back(&qcow2),
        qcow2,
        make_secs: started.elapsed().as_secs_f64(),
    })
}
