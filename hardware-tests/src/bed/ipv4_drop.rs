//! The IPv6-only bed's IPv4 filter ([`super::NetOptions::ipv6_only`]): the
//! ebtables rules that drop every IPv4 and ARP frame on the bridge, and
//! the count of frames they dropped from the bed's machines.

use std::process::Command;

use anyhow::{Context, Result};

use crate::netns::NetNs;

/// ebtables rules (nft backend, in the namespace's own bridge table) that
/// drop every IPv4 and ARP frame entering the bridge's host side or
/// crossing between its ports.
pub(super) fn drop_ipv4(ns: &NetNs) -> Result<()> {
    for (chain, proto) in [
        ("INPUT", "IPv4"),
        ("INPUT", "ARP"),
        ("FORWARD", "IPv4"),
        ("FORWARD", "ARP"),
        ("OUTPUT", "IPv4"),
        ("OUTPUT", "ARP"),
    ] {
        crate::run(Command::new("ip").args([
            "netns",
            "exec",
            &ns.name,
            "ebtables-nft",
            "-A",
            chain,
            "-p",
            proto,
            "-j",
            "DROP",
        ]))
        .context("ebtables-nft (ci/install-deps installs iptables)")?;
    }
    Ok(())
}

/// The sum of `pcnt = N` over the rules of the INPUT and FORWARD chains in
/// `ebtables -L --Lc` output: frames that entered the bridge from its
/// ports, i.e. that a machine on the bed sent. OUTPUT's rules drop what
/// the namespace's own kernel sends (IGMP reports of the bridge, which has
/// no IPv4 address) and are not counted.
pub(super) fn dropped_frames(listing: &str) -> u64 {
    let mut counted = false;
    let mut sum = 0;
    for line in listing.lines() {
        if let Some(chain) = line.strip_prefix("Bridge chain: ") {
            counted = chain.starts_with("INPUT,") || chain.starts_with("FORWARD,");
        } else if let Some(n) = line
            .split("pcnt = ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
        {
            if counted {
                sum += n;
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::dropped_frames;

    #[test]
    fn dropped_frames_counts_what_entered_the_bridge() {
        let listing = "Bridge table: filter\n\n\
            Bridge chain: INPUT, entries: 1, policy: ACCEPT\n\
            -p IPv4 -j DROP , pcnt = 3 -- bcnt = 180\n\n\
            Bridge chain: FORWARD, entries: 2, policy: ACCEPT\n\
            -p IPv4 -j DROP , pcnt = 0 -- bcnt = 0\n\
            -p ARP -j DROP , pcnt = 12 -- bcnt = 504\n\n\
            Bridge chain: OUTPUT, entries: 1, policy: ACCEPT\n\
            -p IPv4 -j DROP , pcnt = 2 -- bcnt = 80\n";
        assert_eq!(dropped_frames(listing), 15);
        assert_eq!(dropped_frames("Bridge table: filter\n"), 0);
    }
}
