//! The virtual floppy (`ir-vfd-dev`, FAT12/16 with `parameters.txt`) read
//! from memory and from a device (an in-memory cursor), as PID 1 reads
//! Ironic's virtual media before the network.
#![no_main]

use agent_contents::vmedia::floppy::{parameters, read_device};
use agent_contents::vmedia::MAX_FILE_BYTES;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = parameters(data);
    if let Ok(text) = &parsed {
        assert!(text.len() <= data.len(), "a file larger than the image");
        assert!(text.len() <= MAX_FILE_BYTES, "a file over the bound");
    }
    let read = read_device(&mut std::io::Cursor::new(data));
    assert_eq!(read, parsed, "the device and the image disagree");
});
