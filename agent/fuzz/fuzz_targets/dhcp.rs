//! DHCPv4 and DHCPv6 replies as the agent parses them (the transaction id
//! is taken from the input so the checks behind it are reached; the DHCPv6
//! client id must be the DUID of MAC 52:54:00:12:34:56).
#![no_main]

use agent_devices::netconf::{dhcp, dhcp6};
use libfuzzer_sys::fuzz_target;

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

fuzz_target!(|data: &[u8]| {
    let Some((&which, msg)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        let xid = msg
            .get(4..8)
            .map_or(0, |b| u32::from_be_bytes(b.try_into().unwrap()));
        use dhcproto::v4::MessageType;
        let want = if which & 2 == 0 {
            MessageType::Offer
        } else {
            MessageType::Ack
        };
        let _ = dhcp::parse_reply(msg, xid, want);
    } else {
        let xid: [u8; 3] = msg.get(1..4).map_or([0; 3], |b| b.try_into().unwrap());
        use dhcproto::v6::MessageType;
        let want = if which & 2 == 0 {
            MessageType::Advertise
        } else {
            MessageType::Reply
        };
        let _ = dhcp6::parse_reply(msg, xid, MAC, want);
    }
});
