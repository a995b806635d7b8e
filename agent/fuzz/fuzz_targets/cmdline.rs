//! The kernel command line: parameters, the agent's configuration from
//! them, the conductor URLs, a static `ip=` and the VLAN plan.
#![no_main]

use agent_base::config::{parse_api_urls, parse_version, Config, KernelParams};
use agent_devices::netconf::{bootif_mac, static_ip, vlan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let params = KernelParams::parse(text);
    let (_config, _errors) = Config::from_kernel_params(&params);
    for key in ["ipa-api-url", "ip", "ipa-enable-vlan-interfaces", "BOOTIF"] {
        let _ = params.get(key);
        let _ = params.bool(key);
        let _ = params.number::<u64>(key);
    }
    if let Some(v) = params.get("ipa-api-url") {
        let _ = parse_api_urls(v);
    }
    if let Some(v) = params.get("ip") {
        if let Some(s) = static_ip::parse(v) {
            assert!(s.prefix <= 32);
        }
    }
    if let Some(v) = params.get("ipa-enable-vlan-interfaces") {
        let plan = vlan::VlanPlan::parse(v);
        for (_, vid) in &plan.explicit {
            assert!((1..=4094).contains(vid));
        }
        let _ = plan.needs_lldp();
    }
    if let Some(v) = params.get("BOOTIF") {
        let _ = bootif_mac(v);
    }
    // The raw text as each value too.
    let _ = parse_api_urls(text);
    let _ = static_ip::parse(text);
    let _ = vlan::VlanPlan::parse(text);
    let _ = vlan::parse_spec(text);
    let _ = parse_version(text);
});
