//! Image checksums (PROTOCOL.md §5.3): which algorithm and digest to expect, from
//! `os_hash_algo`/`os_hash_value` or `checksum` (a hex digest or the URL of a
//! checksum file in sha256sum or BSD format), and the running hash over the
//! bytes exactly as downloaded.
//!
//! SHA-1/256 come from `ring` (already linked for TLS; it uses the CPU's SHA
//! extensions and is as fast as OpenSSL). SHA-384/512 — Glance's default
//! `os_hash_algo` is sha512 — come from OpenSSL's libcrypto (the `openssl`
//! crate; Debian's libcrypto.a in the static ramdisk agent): no x86 CPU has
//! SHA-512 instructions in common use, and OpenSSL's AVX2 (`rorx`) code hashes
//! ~1.4x faster than ring, aws-lc-rs or RustCrypto `sha2` (measured on an AMD
//! EPYC with 1 MiB updates: ~860 MB/s against ~610). For a raw image the hash
//! is the one limit, so this is the write's speed. MD5 from `md-5`, and only
//! when the conductor allows it (`agent_md5_checksum_enable`).

use md5::Digest as _;

use super::ImageError;

/// A supported digest algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// MD5 (only when allowed).
    Md5,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl Algo {
    /// Parses Glance's `os_hash_algo` names; `None` for unknown ones.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().replace('-', "").as_str() {
            "md5" => Some(Self::Md5),
            "sha1" => Some(Self::Sha1),
            "sha256" => Some(Self::Sha256),
            "sha384" => Some(Self::Sha384),
            "sha512" => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The algorithm a bare hex digest of this length implies (as IPA infers).
    pub fn from_hex_len(len: usize) -> Option<Self> {
        match len {
            32 => Some(Self::Md5),
            64 => Some(Self::Sha256),
            128 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// Length of the hex digest.
    pub fn hex_len(self) -> usize {
        match self {
            Self::Md5 => 32,
            Self::Sha1 => 40,
            Self::Sha256 => 64,
            Self::Sha384 => 96,
            Self::Sha512 => 128,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Md5 => "md5",
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }
}

/// Where the expected digest comes from, before any checksum file is fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChecksumSource {
    /// A hex digest given inline.
    Literal(String),
    /// A checksum file to fetch.
    Url(String),
    /// None: the image is written unverified (coreos-installer's
    /// `--insecure`, for `install_coreos` only; see `info::parse_allowing_unverified`).
    Unverified,
}

/// What the caller asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChecksumSpec {
    /// The algorithm if named (`os_hash_algo`, or `sha256:` on the CLI).
    pub algo: Option<Algo>,
    /// The digest or where to find it.
    pub source: ChecksumSource,
}

impl ChecksumSpec {
    /// Parses the CLI form: `ALGO:HEX`, `HEX`, or a URL (`http(s)://`, `file://`).
    pub fn parse_cli(text: &str) -> Result<Self, ImageError> {
        if is_url(text) {
            return Ok(Self {
                algo: None,
                source: ChecksumSource::Url(text.to_string()),
            });
        }
        let (algo, value) = match text.split_once(':') {
            Some((a, v)) => {
                let algo = Algo::parse(a).ok_or_else(|| {
                    ImageError::InvalidParams(format!("checksum {text:?}: unknown algorithm {a:?}"))
                })?;
                (Some(algo), v)
            }
            None => (None, text),
        };
        if is_url(value) {
            return Ok(Self {
                algo,
                source: ChecksumSource::Url(value.to_string()),
            });
        }
        Ok(Self {
            algo,
            source: ChecksumSource::Literal(value.to_string()),
        })
    }
}

/// True for the URL schemes a checksum or image may use.
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://") || s.starts_with("file://")
}

/// The digest the image must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Algorithm.
    pub algo: Algo,
    /// Lower-case hex digest.
    pub hex: String,
}

impl Expected {
    /// Validates a hex digest against an algorithm (named, or inferred from
    /// the length); MD5 only when `md5_allowed`.
    pub fn new(algo: Option<Algo>, hex: &str, md5_allowed: bool) -> Result<Self, ImageError> {
        let hex = hex.trim().to_ascii_lowercase();
        let algo = match algo {
            Some(a) => a,
            None => Algo::from_hex_len(hex.len()).ok_or_else(|| {
                ImageError::InvalidParams(format!(
                    "checksum {hex:?}: cannot tell the algorithm from a {}-character digest \
                     (expected 64 for sha256 or 128 for sha512)",
                    hex.len()
                ))
            })?,
        };
        if algo == Algo::Md5 && !md5_allowed {
            return Err(ImageError::InvalidParams(format!(
                "checksum {hex:?} is MD5, which is disabled (the conductor's \
                 agent_md5_checksum_enable is false); give a sha256 or sha512 checksum"
            )));
        }
        if hex.len() != algo.hex_len() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ImageError::InvalidParams(format!(
                "checksum {hex:?} is not a {} digest ({} hex digits)",
                algo.name(),
                algo.hex_len()
            )));
        }
        Ok(Self { algo, hex })
    }

    /// No digest to match: the image's SHA-256 is computed and reported,
    /// never compared ([`ChecksumSource::Unverified`]).
    pub fn unverified() -> Self {
        Self {
            algo: Algo::Sha256,
            hex: String::new(),
        }
    }

    /// Whether this is [`Expected::unverified`] ([`Expected::new`] never
    /// makes an empty digest).
    pub fn is_unverified(&self) -> bool {
        self.hex.is_empty()
    }
}

/// Finds the digest for `file_name` in a checksum file. A file holding a
/// single word is the digest itself; otherwise lines are `HEX  NAME`,
/// `HEX *NAME` (sha256sum) or `ALGO (NAME) = HEX` (BSD); `#` lines are
/// comments. Names match on the full text or on their last path segment.
pub fn find_in_checksum_file(text: &str, file_name: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() == 1 && !lines[0].contains(char::is_whitespace) {
        return Some(lines[0].to_string());
    }
    let matches = |name: &str| {
        let name = name.trim().trim_start_matches('*');
        name == file_name || name.rsplit('/').next() == Some(file_name)
    };
    for line in lines.iter().filter(|l| !l.starts_with('#')) {
        // BSD: ALGO (NAME) = HEX
        if let (Some(open), Some(close)) = (line.find(" ("), line.rfind(") = ")) {
            if open < close && matches(&line[open + 2..close]) {
                return Some(line[close + 4..].trim().to_string());
            }
            continue;
        }
        // GNU: HEX  NAME  or  HEX *NAME
        let mut parts = line.splitn(2, char::is_whitespace);
        if let (Some(hex), Some(name)) = (parts.next(), parts.next()) {
            if matches(name) {
                return Some(hex.to_string());
            }
        }
    }
    None
}

/// The last path segment of a URL or path, without query or fragment.
pub fn file_name_of(url: &str) -> String {
    let no_query = url.split(['?', '#']).next().unwrap_or(url);
    no_query
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(no_query)
        .to_string()
}

/// A running hash.
pub enum Hasher {
    /// SHA-1 and SHA-256.
    Ring(ring::digest::Context),
    /// SHA-384 (OpenSSL).
    Sha384(openssl::sha::Sha384),
    /// SHA-512 (OpenSSL).
    Sha512(openssl::sha::Sha512),
    /// MD5.
    Md5(md5::Md5),
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hasher")
    }
}

impl Hasher {
    /// A fresh hash of `algo`.
    pub fn new(algo: Algo) -> Self {
        use ring::digest;
        match algo {
            Algo::Md5 => Self::Md5(md5::Md5::new()),
            Algo::Sha1 => Self::Ring(digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY)),
            Algo::Sha256 => Self::Ring(digest::Context::new(&digest::SHA256)),
            Algo::Sha384 => Self::Sha384(openssl::sha::Sha384::new()),
            Algo::Sha512 => Self::Sha512(openssl::sha::Sha512::new()),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Ring(c) => c.update(data),
            Self::Sha384(c) => c.update(data),
            Self::Sha512(c) => c.update(data),
            Self::Md5(c) => c.update(data),
        }
    }

    /// Lower-case hex digest.
    pub fn finish_hex(self) -> String {
        let bytes: Vec<u8> = match self {
            Self::Ring(c) => c.finish().as_ref().to_vec(),
            Self::Sha384(c) => c.finish().to_vec(),
            Self::Sha512(c) => c.finish().to_vec(),
            Self::Md5(c) => c.finalize().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA256_ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn hashes_match_known_vectors() {
        for (algo, want) in [
            (Algo::Sha256, SHA256_ABC),
            (Algo::Md5, "900150983cd24fb0d6963f7d28e17f72"),
            (Algo::Sha1, "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ] {
            let mut h = Hasher::new(algo);
            h.update(b"a");
            h.update(b"bc");
            assert_eq!(h.finish_hex(), want, "{algo:?}");
        }
    }

    /// FIPS 180-2 vectors for the OpenSSL-backed SHA-384/512 ("abc", the
    /// two-block 112-byte message, a million 'a's), each fed whole and in
    /// 97-byte pieces.
    #[test]
    fn sha384_and_sha512_match_fips_vectors() {
        let two_block = b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn\
hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
        let million = vec![b'a'; 1_000_000];
        let cases: [(Algo, &[u8], &str); 6] = [
            (
                Algo::Sha512,
                b"abc",
                "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
                 2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
            ),
            (
                Algo::Sha512,
                two_block,
                "8e959b75dae313da8cf4f72814fc143f8f7779c6eb9f7fa17299aeadb6889018\
                 501d289e4900f7e4331b99dec4b5433ac7d329eeb6dd26545e96e55b874be909",
            ),
            (
                Algo::Sha512,
                &million,
                "e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973eb\
                 de0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa2e4eadb217ad8cc09b",
            ),
            (
                Algo::Sha384,
                b"abc",
                "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed\
                 8086072ba1e7cc2358baeca134c825a7",
            ),
            (
                Algo::Sha384,
                two_block,
                "09330c33f71147e83d192fc782cd1b4753111b173b3b05d22fa08086e3b0f712\
                 fcc7c71a557e2db966c3e9fa91746039",
            ),
            (
                Algo::Sha384,
                &million,
                "9d0e1809716474cb086e834e310a4a1ced149e9c00f248527972cec5704c2a5b\
                 07b8b3dc38ecc4ebae97ddd87f3d8985",
            ),
        ];
        for (algo, msg, want) in cases {
            let whole = {
                let mut h = Hasher::new(algo);
                h.update(msg);
                h.finish_hex()
            };
            assert_eq!(whole, want, "{algo:?} over {} bytes", msg.len());
            let mut h = Hasher::new(algo);
            for piece in msg.chunks(97) {
                h.update(piece);
            }
            assert_eq!(h.finish_hex(), want, "{algo:?} in 97-byte pieces");
        }
    }

    #[test]
    fn algorithm_is_inferred_from_length_and_md5_needs_permission() {
        assert_eq!(
            Expected::new(None, SHA256_ABC, false).unwrap().algo,
            Algo::Sha256
        );
        assert_eq!(
            Expected::new(None, &"A".repeat(128), false).unwrap().hex,
            "a".repeat(128)
        );
        let md5 = "900150983cd24fb0d6963f7d28e17f72";
        let err = Expected::new(None, md5, false).unwrap_err().to_string();
        assert!(
            err.contains("MD5") && err.contains("agent_md5_checksum_enable"),
            "{err}"
        );
        assert_eq!(Expected::new(None, md5, true).unwrap().algo, Algo::Md5);
        let err = Expected::new(Some(Algo::Sha512), SHA256_ABC, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a sha512 digest"), "{err}");
        let err = Expected::new(None, "abc", false).unwrap_err().to_string();
        assert!(err.contains("3-character"), "{err}");
        let err = Expected::new(None, &"g".repeat(64), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a sha256 digest"), "{err}");
    }

    #[test]
    fn checksum_files_in_every_format() {
        let gnu = format!(
            "# made by sha256sum\n{}  other.img\n{SHA256_ABC}  disk.img\n",
            "0".repeat(64)
        );
        assert_eq!(
            find_in_checksum_file(&gnu, "disk.img").as_deref(),
            Some(SHA256_ABC)
        );
        let star = format!("{SHA256_ABC} *images/disk.img\n");
        assert_eq!(
            find_in_checksum_file(&star, "disk.img").as_deref(),
            Some(SHA256_ABC)
        );
        let bsd = format!(
            "SHA256 (other.img) = {}\nSHA256 (disk.img) = {SHA256_ABC}\n",
            "1".repeat(64)
        );
        assert_eq!(
            find_in_checksum_file(&bsd, "disk.img").as_deref(),
            Some(SHA256_ABC)
        );
        assert_eq!(
            find_in_checksum_file(&format!("\n{SHA256_ABC}\n\n"), "x").as_deref(),
            Some(SHA256_ABC)
        );
        assert_eq!(find_in_checksum_file(&gnu, "missing.img"), None);
        assert_eq!(find_in_checksum_file(&gnu, "disk"), None);
    }

    #[test]
    fn cli_forms_and_file_names() {
        let s = ChecksumSpec::parse_cli(&format!("sha256:{SHA256_ABC}")).unwrap();
        assert_eq!(s.algo, Some(Algo::Sha256));
        assert_eq!(s.source, ChecksumSource::Literal(SHA256_ABC.into()));
        let s = ChecksumSpec::parse_cli("http://h/x.sha256sum").unwrap();
        assert_eq!(s.source, ChecksumSource::Url("http://h/x.sha256sum".into()));
        let s = ChecksumSpec::parse_cli("sha512:https://h/SUMS").unwrap();
        assert_eq!(
            (s.algo, s.source),
            (
                Some(Algo::Sha512),
                ChecksumSource::Url("https://h/SUMS".into())
            )
        );
        assert!(ChecksumSpec::parse_cli("crc32:abcd").is_err());
        assert_eq!(file_name_of("http://h/a/b/disk.img?token=1"), "disk.img");
        assert_eq!(file_name_of("/srv/disk.qcow2"), "disk.qcow2");
    }
}
