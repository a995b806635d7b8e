//! The fuzz target `tls_read`'s harness (agent/fuzz/src/tls_peer.rs: the
//! direct path's TLS client against a scripted in-memory rustls server),
//! run on stable over its committed seeds and a few hundred random
//! scripts, so the harness and its checks keep working between fuzz runs.

// Public in the fuzz crate, whose tls_read target runs it.
#[allow(unreachable_pub)]
#[path = "../fuzz/src/tls_peer.rs"]
mod tls_peer;

#[test]
fn the_committed_seeds_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/tls_read");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let o = tls_peer::run(&std::fs::read(&path).unwrap());
        // What each kind of seed must come to (the harness works).
        let err = o.error.as_deref().unwrap_or("");
        match name.split_once('-').map_or("", |(_, kind)| kind) {
            "body" | "no-close" | "keyupdate" | "small-reads" | "one-byte-reads" => {
                assert!(
                    o.error.is_none() && o.read == o.sent && o.read > 0,
                    "{name}: {o:?}"
                )
            }
            "flip" => assert!(
                err.contains("bad_record_mac") && o.read < o.sent,
                "{name}: {o:?}"
            ),
            // 20000 bytes of the wire: the first 16 KiB record, not the second.
            "cut" => assert!(o.error.is_none() && o.read == 1 << 14, "{name}: {o:?}"),
            "raw" | "oversized" => assert!(!err.is_empty(), "{name}: {o:?}"),
            _ => {}
        }
        n += 1;
    }
    assert!(n >= 16, "{n} seeds in {}", dir.display());
}

#[test]
fn random_scripts_pass() {
    let mut rng = fastrand::Rng::with_seed(36);
    for _ in 0..300 {
        let len = rng.usize(3..200);
        let mut data: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        // Mostly application data, as a real reply is.
        for b in data.iter_mut().skip(3).step_by(3) {
            if rng.bool() {
                *b &= !7;
            }
        }
        tls_peer::run(&data);
    }
}
