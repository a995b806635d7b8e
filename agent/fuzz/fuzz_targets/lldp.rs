//! An LLDP Ethernet frame as received on a NIC: TLVs, the neighbour's
//! fields and the raw form sent to Ironic.
#![no_main]

use agent_devices::lldp::tlv::{parse_frame, parse_neighbor, parse_tlvs, raw_form};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = parse_frame(data) {
        let _ = parse_neighbor(&frame);
        let raw = raw_form(&frame);
        assert_eq!(raw.len(), frame.tlvs.len() + usize::from(frame.ended));
    }
    let frame = parse_tlvs(data);
    let _ = parse_neighbor(&frame);
});
