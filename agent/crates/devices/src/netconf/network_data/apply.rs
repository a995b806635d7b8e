//! Applying a [`Plan`] to the running kernel: NICs (MTU, up), bonds, VLANs,
//! then static addresses and routes. Each interface reports on its own; one
//! that fails leaves the others configured.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{Iface, LinkKind, Plan};
use crate::netconf::{bond, iface, vlan};

/// How one planned interface ended up.
#[derive(Debug)]
pub(crate) struct Applied {
    /// The plan for it.
    pub iface: Iface,
    /// Success, or the first step that failed.
    pub outcome: Result<()>,
}

/// Applies `plan` (bonds through `sys`, normally `/sys`).
pub(crate) fn apply(plan: &Plan, sys: &Path) -> Vec<Applied> {
    let mut out: Vec<Applied> = plan
        .ifaces
        .iter()
        .map(|f| Applied {
            iface: f.clone(),
            outcome: link(f, sys),
        })
        .collect();
    // Addresses and routes once every link exists (a route may need
    // another interface's address).
    for a in out.iter_mut().filter(|a| a.outcome.is_ok()) {
        a.outcome = addresses(&a.iface);
    }
    out
}

fn link(f: &Iface, sys: &Path) -> Result<()> {
    match &f.kind {
        LinkKind::Phy => {}
        LinkKind::Bond(b) => bond::create(sys, &f.name, b, &mut iface::set_down)
            .with_context(|| format!("creating bond {}", f.name))?,
        LinkKind::Vlan { parent, vid } => {
            vlan::create(parent, *vid)?;
        }
    }
    if let Some(mtu) = f.mtu {
        iface::set_mtu(&f.name, mtu).with_context(|| format!("{}: MTU {mtu}", f.name))?;
    }
    iface::set_up(&f.name).with_context(|| format!("{}: link up", f.name))
}

/// How long duplicate address detection may take before the agent goes on
/// (the kernel's default is one probe a second after a random delay of up
/// to a second; no carrier keeps an address tentative).
const DAD_WAIT: Duration = Duration::from_secs(5);

/// Waits until `f`'s static IPv6 addresses have passed duplicate address
/// detection: a tentative address is no source address, so a connection
/// opened meanwhile leaves from the link-local one (and an HTTP client
/// keeps it). Fails naming an address another host on the link uses;
/// goes on with a warning after [`DAD_WAIT`].
fn wait_for_dad(f: &Iface) -> Result<()> {
    let wanted: Vec<std::net::Ipv6Addr> = f
        .addrs
        .iter()
        .filter_map(|(a, _)| match a {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        })
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    loop {
        match iface::dad_state(&iface::ipv6_addrs(&f.name), &wanted) {
            iface::Dad::Done => {
                tracing::debug!(iface = %f.name, waited = ?started.elapsed(), "IPv6 addresses past DAD");
                return Ok(());
            }
            iface::Dad::Failed(a) => anyhow::bail!(
                "{}: address {a} is already in use on the network (duplicate address detection failed)",
                f.name
            ),
            iface::Dad::Pending(left) if started.elapsed() >= DAD_WAIT => {
                tracing::warn!(
                    iface = %f.name,
                    "IPv6 addresses {left:?} still tentative after {} s (no carrier?); going on",
                    DAD_WAIT.as_secs()
                );
                return Ok(());
            }
            iface::Dad::Pending(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn addresses(f: &Iface) -> Result<()> {
    let mut v4 = 0;
    for (addr, prefix) in &f.addrs {
        match addr {
            IpAddr::V4(a) => {
                // A second IPv4 address goes on an alias label (`eth0:1`).
                let label = if v4 == 0 {
                    f.name.clone()
                } else {
                    format!("{}:{v4}", f.name)
                };
                iface::set_ipv4(&label, *a, *prefix)
                    .with_context(|| format!("{label}: address {a}/{prefix}"))?;
                v4 += 1;
            }
            IpAddr::V6(a) => iface::add_ipv6(&f.name, *a, *prefix)
                .with_context(|| format!("{}: address {a}/{prefix}", f.name))?,
        }
    }
    wait_for_dad(f)?;
    for r in &f.routes {
        match (r.network, r.gateway) {
            (IpAddr::V4(n), IpAddr::V4(g)) => iface::add_route4(&f.name, n, r.prefix, g)?,
            (IpAddr::V6(n), IpAddr::V6(g)) => {
                // The prefix route of a new IPv6 address appears while
                // duplicate address detection runs; retry for a moment.
                let until = Instant::now() + Duration::from_secs(3);
                loop {
                    match iface::add_route6(&f.name, n, r.prefix, g) {
                        Ok(()) => break,
                        Err(_) if Instant::now() < until => {
                            std::thread::sleep(Duration::from_millis(200))
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}
