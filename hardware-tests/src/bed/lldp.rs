//! A switch port's LLDP announcements on the bed's bridge: frames sent from
//! a veth whose peer is a bridge port, every half second until dropped, so
//! every guest NIC on the bridge hears them (the bridge forwards LLDP
//! because the bed sets `group_fwd_mask`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use agent_devices::lldp::socket::PacketSocket;
use agent_devices::lldp::tlv::{build_frame, switch_tlvs, ETHERTYPE};
use anyhow::{Context, Result};

use super::net::Net;

/// The announcing switch; stops on drop.
#[derive(Debug)]
pub struct Switch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Switch {
    /// Announces `chassis` (a MAC, chassis ID subtype 4), port ID `port`
    /// (interface name subtype) and `system_name`.
    pub fn start(net: &Net, chassis: [u8; 6], port: &str, system_name: &str) -> Result<Self> {
        Self::start_with(net, chassis, port, system_name, &[])
    }

    /// [`Switch::start`] with `extra` TLVs after the usual ones (e.g. a
    /// management address, [`agent_devices::lldp::tlv::management_address_tlv`]).
    pub fn start_with(
        net: &Net,
        chassis: [u8; 6],
        port: &str,
        system_name: &str,
        extra: &[(u8, Vec<u8>)],
    ) -> Result<Self> {
        net.ns.ip(&[
            "link", "add", "lldp0", "type", "veth", "peer", "name", "lldp0p",
        ])?;
        net.ns
            .ip(&["link", "set", "lldp0p", "master", "br0", "up"])?;
        net.ns.ip(&["link", "set", "lldp0", "up"])?;
        let sock = net.ns.enter(|| -> Result<PacketSocket> {
            let idx = nix::net::if_::if_nametoindex("lldp0").context("lldp0's index")?;
            PacketSocket::open(idx, ETHERTYPE).context("a packet socket on lldp0")
        })??;
        let mut tlvs = switch_tlvs(chassis, port, system_name);
        tlvs.extend_from_slice(extra);
        let frame = build_frame(chassis, &tlvs);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Err(e) = sock.send(&frame) {
                    eprintln!("warning: sending an LLDP frame: {e}");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
