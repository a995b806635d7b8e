//! Text the image download reads from servers: a checksum file, a
//! Content-Range value, the direct HTTP client's response head, and the
//! checksum forms of the CLI and of `image_info`.
#![no_main]

use agent::image::checksum::{file_name_of, find_in_checksum_file, Algo, ChecksumSpec, Expected};
use agent::image::fetch::{parse_content_range, parse_response_head};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let _ = parse_response_head(rest);
        }
        1 => {
            if let Ok(v) = std::str::from_utf8(rest) {
                if let Some((start, total)) = parse_content_range(v) {
                    let _ = total.map(|t| t.checked_sub(start));
                }
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            let (file, name) = text.split_once('\n').unwrap_or((text, "disk.img"));
            for n in [name, file_name_of(name).as_str(), "disk.img"] {
                if let Some(hex) = find_in_checksum_file(file, n) {
                    let _ = Algo::from_hex_len(hex.len());
                    let _ = Expected::new(None, &hex, which & 4 != 0);
                }
            }
            let _ = ChecksumSpec::parse_cli(name);
            if let Some(a) = Algo::parse(name) {
                let _ = Expected::new(Some(a), file, true);
            }
        }
    }
});
