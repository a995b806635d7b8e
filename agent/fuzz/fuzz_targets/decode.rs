//! The decode stage (format detection, gzip/zstd/xz, a qcow2 inside a
//! compressed stream, trailing data) on arbitrary input cut into blocks as
//! the download would deliver them. The image is also a `file://` URL so a
//! qcow2 that must be read again can be. Oracle: a success reports writes
//! that never overlap and lie within the announced size.
#![no_main]

use std::sync::mpsc::sync_channel;
use std::sync::Arc;

use agent_contents::image::buffers::Pool;
use agent_contents::image::checksum::{ChecksumSource, ChecksumSpec};
use agent_contents::image::decode::{decode, WriteOp};
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::progress::Progress;
use agent_contents::image::WriteRequest;
use agent_fuzz::CoverageSink;
use libfuzzer_sys::fuzz_target;

const BLOCK: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("agent-fuzz-decode-{}.img", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let http = HttpOptions {
        retries: 0,
        ..HttpOptions::default()
    };
    let req = WriteRequest {
        urls: vec![format!("file://{}", path.display())],
        checksum: ChecksumSpec {
            algo: None,
            source: ChecksumSource::Literal(String::new()),
        },
        md5_allowed: false,
        format: None,
        formats: Default::default(),
        http,
    };
    let blocks = data.len().div_ceil(BLOCK);
    let in_pool = Pool::new(blocks.max(1), BLOCK);
    let (btx, brx) = sync_channel(blocks.max(1));
    for chunk in data.chunks(BLOCK) {
        let mut b = in_pool.take();
        b.fill_from(chunk);
        btx.send(Arc::new(b)).expect("room for every block");
    }
    drop(btx);
    let out_pool = Pool::new(4, 64 << 10);
    let progress = Progress::default();
    progress.set_download_total(data.len() as u64);
    let (otx, orx) = sync_channel::<WriteOp>(4);
    let result = std::thread::scope(|s| {
        let writer = s.spawn(move || {
            // Raw images never announce zeros; qcow2 ones announce the size.
            let mut sink = CoverageSink {
                size: Some(u64::MAX),
                ..CoverageSink::default()
            };
            let mut announced = None;
            let mut written: u64 = 0;
            for op in orx {
                match op {
                    WriteOp::Size(n) => {
                        assert!(announced.is_none(), "size announced twice");
                        announced = Some(n);
                    }
                    WriteOp::Shared { offset, block } => {
                        agent_contents::image::qcow2::Sink::data(&mut sink, offset, &block).unwrap();
                        written += block.len() as u64;
                    }
                    WriteOp::Owned { offset, buf } => {
                        agent_contents::image::qcow2::Sink::data(&mut sink, offset, &buf).unwrap();
                        written += buf.len() as u64;
                    }
                    WriteOp::Zero { offset, len } => {
                        agent_contents::image::qcow2::Sink::zero(&mut sink, offset, len).unwrap();
                    }
                }
            }
            (announced, sink, written)
        });
        let r = decode(brx, otx, &req, &out_pool, "fuzz", &progress);
        (r, writer.join().expect("writer"))
    });
    let _ = std::fs::remove_file(&path);
    let (r, (announced, sink, _written)) = result;
    if r.is_ok() {
        if let Some(size) = announced {
            // Every write and zero range lies within the announced size.
            if let Some((_, &end)) = sink.covered.iter().next_back() {
                assert!(end <= size, "writes end at {end}, beyond the size {size}");
            }
        }
    }
});
