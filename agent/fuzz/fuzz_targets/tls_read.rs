//! The direct image path's TLS read side (`agent_contents::image::fetch::connect_tls`,
//! rustls's unbuffered client) against a scripted in-memory rustls server:
//! the client never reads a byte the server did not send as application
//! data, reads all of it from a server that only behaved, keeps its first
//! error and ends (`agent_fuzz::tls_peer`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    agent_fuzz::tls_peer::run(data);
});
