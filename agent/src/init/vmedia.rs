//! The ramdisk's virtual-media step, before the network: when Ironic booted
//! it from virtual media (`boot_method=vmedia`), take the floppy's
//! parameters, copy the ISO's agent configuration into `/etc`, and read
//! `network_data.json` into a network plan. Everything is reported on the
//! console; a failure leaves the network to DHCP.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_base::config::KernelParams;
use agent_contents::vmedia;
use agent_devices::netconf::network_data;

use super::say;

/// How long to wait for the virtual CD drive to appear after coldplug (and
/// for one to appear when only a USB disk carries a disc with Ironic's
/// label).
const MEDIA_WAIT: Duration = Duration::from_secs(10);

/// Whether Ironic says the ramdisk came from virtual media.
pub(crate) fn booted_from_vmedia(params: &KernelParams) -> bool {
    params.get("boot_method") == Some("vmedia")
}

/// Reads the virtual media; returns `network_data.json`'s bytes if the ISO
/// has it. Floppy parameters are written where the agent's configuration
/// reads them ([`agent_base::config::VMEDIA_PARAMS`]) and merged into `params`.
pub(crate) fn read(params: &mut KernelParams) -> Option<Vec<u8>> {
    let (sys, dev, root) = (Path::new("/sys"), Path::new("/dev"), Path::new("/"));
    let started = Instant::now();
    let until = started + MEDIA_WAIT;
    // A disc on a CD/DVD drive ends the wait at once; one on a USB disk
    // only when no CD/DVD drive has shown one by the end of it, as the
    // BMC's virtual CD can appear after a USB stick left in the machine.
    let (candidates, iso) = loop {
        let c = vmedia::candidates(sys);
        let found = vmedia::find_iso(dev, &c);
        let on_cd = found
            .as_ref()
            .is_some_and(|d| d.candidate.kind == vmedia::Kind::CdDvd);
        if on_cd || Instant::now() >= until {
            break (c, found);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let names: Vec<String> = candidates
        .iter()
        .map(|c| format!("{} ({})", c.name, c.why))
        .collect();
    say(&format!("vmedia: candidates: {}", names.join(", ")));
    let waited = started.elapsed();
    let floppy = vmedia::floppy_parameters(dev, &candidates);
    for note in &floppy.notes {
        say(&format!("vmedia: {note}"));
    }
    if let Some((from, text)) = floppy.found {
        let path = root.join(agent_base::config::VMEDIA_PARAMS);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, &text));
        match written {
            Ok(()) => say(&format!(
                "vmedia: parameters from the {} floppy on {} ({})",
                vmedia::FLOPPY_LABEL,
                dev.join(&from.name).display(),
                from.why
            )),
            Err(e) => say(&format!("vmedia: cannot keep the floppy's parameters: {e}")),
        }
        for (k, v) in KernelParams::parse(&text).iter() {
            params.set(k, v);
        }
    }
    let Some(vmedia::Disc {
        candidate,
        path,
        file: disc,
    }) = iso
    else {
        say(&format!(
            "vmedia: no disc labelled {} found; network by DHCP",
            vmedia::ISO_LABELS.join(" or ")
        ));
        return None;
    };
    say(&format!(
        "vmedia: boot ISO on {} ({})",
        path.display(),
        candidate.why
    ));
    match vmedia::copy_config(&disc, root) {
        Ok(files) => {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            say(&format!(
                "vmedia: {}: configuration copied: [{}]",
                path.display(),
                names.join(", ")
            ));
        }
        Err(e) => say(&format!(
            "vmedia: {}: copying configuration: {e:#}",
            path.display()
        )),
    }
    let nd = agent_contents::ignition::iso::read_file_from(
        &disc,
        network_data::PATH_ON_MEDIA,
        network_data::MAX_BYTES,
    );
    // What reading the media cost once the devices were there (the floppy
    // search over every candidate included): a malformed device must not
    // make it long.
    say(&format!(
        "vmedia: media waited for {:.2} s, read in {:.2} s",
        waited.as_secs_f64(),
        (started.elapsed() - waited).as_secs_f64()
    ));
    if nd.is_none() {
        say(&format!(
            "vmedia: {}: no {}",
            path.display(),
            network_data::PATH_ON_MEDIA
        ));
    }
    nd
}

/// The plan for this machine from `bytes`, or the reason there is none.
pub(crate) fn plan(bytes: &[u8]) -> Option<network_data::Plan> {
    let nics = agent_devices::netconf::physical_nics(Path::new("/sys"));
    match network_data::plan(bytes, &nics) {
        Ok(p) => Some(p),
        Err(e) => {
            say(&format!("vmedia: {e}; network by DHCP"));
            None
        }
    }
}
