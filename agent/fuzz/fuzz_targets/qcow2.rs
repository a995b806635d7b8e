//! The streaming qcow2 converter on arbitrary input, read again from the
//! same bytes. Oracle: on success, data and zero ranges cover the virtual
//! size exactly once ([`agent_fuzz::CoverageSink`]).
#![no_main]

use agent_contents::image::qcow2::{convert, Limits};
use agent_fuzz::{CoverageSink, MemReread};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        lookahead_bytes: 64 << 10,
        // Small enough that a run stays fast; the header checks are the same.
        max_virtual_size: 256 << 20,
        max_ranges: 4096,
    };
    let mut sink = CoverageSink::default();
    let mut again = MemReread(data);
    if let Ok(summary) = convert(data, &mut again, &mut sink, &limits) {
        assert_eq!(sink.size, Some(summary.virtual_size));
        assert_eq!(summary.input_bytes, data.len() as u64);
        sink.check_complete();
    }
});
