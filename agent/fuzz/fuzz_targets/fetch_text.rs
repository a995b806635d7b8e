//! Text the image download reads from servers: a checksum file, a
//! Content-Range value, the image HTTP client's response head and chunked
//! bodies (fed in pieces of the sizes the input chooses, decoded in place:
//! no panic, and never more data out than bytes in), and the checksum
//! forms of the CLI and of `image_info`.
#![no_main]

use agent_contents::image::checksum::{file_name_of, find_in_checksum_file, Algo, ChecksumSpec, Expected};
use agent_contents::image::fetch::{parse_content_range, parse_response_head, ChunkedDecoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            let _ = parse_response_head(rest);
        }
        4 => {
            let mut d = ChunkedDecoder::default();
            let step = usize::from(which >> 3).max(1);
            for piece in rest.chunks(step) {
                let mut buf = piece.to_vec();
                match d.decode_in_place(&mut buf) {
                    Ok(n) => assert!(n <= buf.len()),
                    Err(_) => break,
                }
                if d.done() {
                    break;
                }
            }
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
