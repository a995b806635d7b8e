//! `agent inventory --human`: the inventory as a few readable tables.

use std::fmt::Write;

use super::Inventory;

fn or_dash(v: &Option<String>) -> &str {
    v.as_deref().filter(|s| !s.is_empty()).unwrap_or("-")
}

/// Sizes as `465.8 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Renders the inventory for a terminal.
pub fn render(inv: &Inventory) -> String {
    let mut o = String::new();
    let sv = &inv.system_vendor;
    let _ = writeln!(
        o,
        "System   {} {} (serial {}), firmware {} {} {}",
        sv.manufacturer,
        sv.product_name,
        sv.serial_number,
        sv.firmware.vendor,
        sv.firmware.version,
        sv.firmware.build_date
    );
    let _ = writeln!(
        o,
        "Host     {}, boot mode {}, PXE interface {}",
        inv.hostname,
        inv.boot.current_boot_mode,
        or_dash(&inv.boot.pxe_interface)
    );
    let _ = writeln!(
        o,
        "CPU      {} x {} ({}), {} socket(s), {} MHz, {} flags",
        inv.cpu.count,
        or_dash(&inv.cpu.model_name),
        inv.cpu.architecture,
        inv.cpu.socket_count,
        or_dash(&inv.cpu.frequency),
        inv.cpu.flags.len()
    );
    let _ = writeln!(
        o,
        "Memory   {} usable, {} installed",
        size(inv.memory.total),
        inv.memory
            .physical_mb
            .map(|m| size(m << 20))
            .unwrap_or_else(|| "unknown".into())
    );
    let _ = writeln!(
        o,
        "BMC      {} / {} / {}",
        or_dash(&inv.bmc_address),
        or_dash(&inv.bmc_v6address),
        or_dash(&inv.bmc_mac)
    );
    let _ = writeln!(o, "\nDisks");
    let _ = writeln!(
        o,
        "  {:<14} {:>10} {:<7} {:<5} {:<20} {:<20} {:<20} {:<10} BY-PATH",
        "NAME", "SIZE", "TRAN", "ROTA", "MODEL", "SERIAL", "WWN", "HCTL"
    );
    for d in &inv.disks {
        let _ = writeln!(
            o,
            "  {:<14} {:>10} {:<7} {:<5} {:<20} {:<20} {:<20} {:<10} {}{}{}",
            d.name,
            size(d.size),
            or_dash(&d.tran),
            if d.rotational { "yes" } else { "no" },
            or_dash(&d.model),
            or_dash(&d.serial),
            or_dash(&d.wwn),
            or_dash(&d.hctl),
            or_dash(&d.by_path),
            if d.read_only { " [read-only]" } else { "" },
            if d.removable { " [removable]" } else { "" },
        );
    }
    let _ = writeln!(o, "\nNetwork interfaces");
    let _ = writeln!(
        o,
        "  {:<12} {:<18} {:<7} {:>7} {:<16} {:<28} {:<14} {:<10} LLDP",
        "NAME", "MAC", "CARRIER", "SPEED", "IPV4", "IPV6", "PCI", "DRIVER"
    );
    for i in &inv.interfaces {
        let _ = writeln!(
            o,
            "  {:<12} {:<18} {:<7} {:>7} {:<16} {:<28} {:<14} {:<10} {}",
            i.name,
            i.mac_address,
            if i.has_carrier { "yes" } else { "no" },
            i.speed_mbps
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            or_dash(&i.ipv4_address),
            or_dash(&i.ipv6_address),
            or_dash(&i.pci_address),
            or_dash(&i.driver),
            match &i.lldp {
                None => "-".to_string(),
                Some(t) if t.is_empty() => "none".to_string(),
                Some(t) => format!("{} TLVs", t.len()),
            }
        );
    }
    o
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::size(512), "512 B");
        assert_eq!(super::size(536870912), "512.0 MiB");
        assert_eq!(super::size(10 << 30), "10.0 GiB");
    }
}
