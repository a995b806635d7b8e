//! Reading a file out of an ISO 9660 image in memory (Joliet, Rock Ridge,
//! primary names), as the Ignition config is read from a config drive.
#![no_main]

use agent_contents::ignition::iso::read_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for path in [
        "openstack/latest/user_data",
        "/ec2/latest/meta-data.json",
        "a/b/c/d/e/f/g/h",
        "",
    ] {
        if let Some(f) = read_file(data, path) {
            assert!(f.len() <= data.len(), "a file larger than the image");
        }
    }
});
