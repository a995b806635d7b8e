//! SHA-crypt (`$5$` SHA-256, `$6$` SHA-512, Ulrich Drepper's specification,
//! the schemes Ironic's `rescue_password_hash_algorithm` chooses from):
//! hashing a plain rescue password, and checking a hash Ironic sent before
//! it goes into `/etc/shadow` (one field: no `:` or line break can pass).

use ring::digest::{Algorithm, Context, SHA256, SHA512};

/// The characters of crypt's base-64 alphabet, in value order.
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Rounds when the salt names none.
const DEFAULT_ROUNDS: u32 = 5000;
/// Longest salt used (longer ones are cut).
const MAX_SALT: usize = 16;

/// Why a text is not a hash this agent accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// Not `$5$…` or `$6$…`.
    #[error("not a SHA-256 ($5$) or SHA-512 ($6$) crypt hash")]
    Scheme,
    /// The right prefix, but not the form `$N$[rounds=R$]salt$digest`.
    #[error("a malformed crypt hash: {0}")]
    Malformed(&'static str),
}

/// The two schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `$5$`
    Sha256,
    /// `$6$`
    Sha512,
}

impl Scheme {
    fn algorithm(self) -> &'static Algorithm {
        match self {
            Self::Sha256 => &SHA256,
            Self::Sha512 => &SHA512,
        }
    }

    fn id(self) -> &'static str {
        match self {
            Self::Sha256 => "$5$",
            Self::Sha512 => "$6$",
        }
    }

    /// The digest's bytes in the order they are encoded, three at a time.
    fn order(self) -> &'static [[usize; 3]] {
        match self {
            Self::Sha256 => &[
                [0, 10, 20],
                [21, 1, 11],
                [12, 22, 2],
                [3, 13, 23],
                [24, 4, 14],
                [15, 25, 5],
                [6, 16, 26],
                [27, 7, 17],
                [18, 28, 8],
                [9, 19, 29],
            ],
            Self::Sha512 => &[
                [0, 21, 42],
                [22, 43, 1],
                [44, 2, 23],
                [3, 24, 45],
                [25, 46, 4],
                [47, 5, 26],
                [6, 27, 48],
                [28, 49, 7],
                [50, 8, 29],
                [9, 30, 51],
                [31, 52, 10],
                [53, 11, 32],
                [12, 33, 54],
                [34, 55, 13],
                [56, 14, 35],
                [15, 36, 57],
                [37, 58, 16],
                [59, 17, 38],
                [18, 39, 60],
                [40, 61, 19],
                [62, 20, 41],
            ],
        }
    }
}

fn digest(scheme: Scheme, parts: &[&[u8]]) -> Vec<u8> {
    let mut c = Context::new(scheme.algorithm());
    for p in parts {
        c.update(p);
    }
    c.finish().as_ref().to_vec()
}

/// `len` bytes of `block` repeated.
fn repeated(block: &[u8], len: usize) -> Vec<u8> {
    block.iter().copied().cycle().take(len).collect()
}

fn encode(out: &mut String, b2: u8, b1: u8, b0: u8, n: usize) {
    let mut w = u32::from(b2) << 16 | u32::from(b1) << 8 | u32::from(b0);
    for _ in 0..n {
        out.push(ITOA64[(w & 0x3f) as usize] as char);
        w >>= 6;
    }
}

/// The hash of `password` with `salt` (at most 16 bytes used) and `rounds`
/// (`None`: the default 5000, not written into the hash).
pub fn hash_with(scheme: Scheme, password: &[u8], salt: &[u8], rounds: Option<u32>) -> String {
    let salt = &salt[..salt.len().min(MAX_SALT)];
    let r = rounds.map_or(DEFAULT_ROUNDS, |r| r.clamp(1000, 999_999_999));
    let l = scheme.algorithm().output_len();
    let b = digest(scheme, &[password, salt, password]);
    let mut ctx = Context::new(scheme.algorithm());
    ctx.update(password);
    ctx.update(salt);
    ctx.update(&repeated(&b, password.len()));
    let mut n = password.len();
    while n > 0 {
        ctx.update(if n & 1 == 1 { &b } else { password });
        n >>= 1;
    }
    let a = ctx.finish().as_ref().to_vec();
    let dp = digest(scheme, &vec![password; password.len()]);
    let p = repeated(&dp, password.len());
    let ds = digest(scheme, &vec![salt; 16 + usize::from(a[0])]);
    let s = &ds[..salt.len()];
    let mut c = a;
    for i in 0..r {
        let mut ctx = Context::new(scheme.algorithm());
        ctx.update(if i % 2 == 1 { &p } else { &c });
        if i % 3 != 0 {
            ctx.update(s);
        }
        if i % 7 != 0 {
            ctx.update(&p);
        }
        ctx.update(if i % 2 == 1 { &c } else { &p });
        c = ctx.finish().as_ref().to_vec();
    }
    debug_assert_eq!(c.len(), l);
    let mut out = String::from(scheme.id());
    if rounds.is_some() {
        out.push_str(&format!("rounds={r}$"));
    }
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    for [x, y, z] in scheme.order() {
        encode(&mut out, c[*x], c[*y], c[*z], 4);
    }
    match scheme {
        Scheme::Sha256 => encode(&mut out, 0, c[31], c[30], 3),
        Scheme::Sha512 => encode(&mut out, 0, 0, c[63], 2),
    }
    out
}

/// A SHA-512 hash of `password` with a random 16-character salt.
pub fn hash_password(password: &str) -> String {
    let salt: String = (0..MAX_SALT)
        .map(|_| ITOA64[fastrand::usize(..64)] as char)
        .collect();
    hash_with(Scheme::Sha512, password.as_bytes(), salt.as_bytes(), None)
}

/// Checks that `hash` is `$5$` or `$6$`, `[rounds=N$]`, a salt and a digest
/// of the right length, all in crypt's alphabet; returns its scheme.
pub fn check_hash(hash: &str) -> Result<Scheme, HashError> {
    let (scheme, rest) = if let Some(r) = hash.strip_prefix("$5$") {
        (Scheme::Sha256, r)
    } else if let Some(r) = hash.strip_prefix("$6$") {
        (Scheme::Sha512, r)
    } else {
        return Err(HashError::Scheme);
    };
    let rest = match rest.strip_prefix("rounds=") {
        Some(r) => {
            let (n, after) = r
                .split_once('$')
                .ok_or(HashError::Malformed("rounds= without its $"))?;
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 9 {
                return Err(HashError::Malformed("rounds is not a number"));
            }
            after
        }
        None => rest,
    };
    let (salt, digest) = rest
        .split_once('$')
        .ok_or(HashError::Malformed("no $ between salt and digest"))?;
    let ok = |s: &str| s.bytes().all(|b| ITOA64.contains(&b));
    if salt.len() > MAX_SALT || !ok(salt) {
        return Err(HashError::Malformed(
            "the salt is not 0-16 crypt characters",
        ));
    }
    let want = match scheme {
        Scheme::Sha256 => 43,
        Scheme::Sha512 => 86,
    };
    if digest.len() != want || !ok(digest) {
        return Err(HashError::Malformed(
            "the digest has the wrong length or characters",
        ));
    }
    Ok(scheme)
}

/// Whether `password` matches `hash` (a `$5$`/`$6$` hash).
pub fn verify(password: &str, hash: &str) -> bool {
    let Ok(scheme) = check_hash(hash) else {
        return false;
    };
    let rest = &hash[3..];
    let (rounds, rest) = match rest.strip_prefix("rounds=") {
        Some(r) => match r.split_once('$') {
            Some((n, after)) => (n.parse().ok(), after),
            None => return false,
        },
        None => (None, rest),
    };
    let Some((salt, _)) = rest.split_once('$') else {
        return false;
    };
    hash_with(scheme, password.as_bytes(), salt.as_bytes(), rounds) == hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_libxcrypt_and_busybox() {
        // Made with Python's crypt (libxcrypt) and `busybox mkpasswd`.
        let cases = [
            ("Hello world!", "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1"),
            ("Hello world!", "$5$saltstring$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZaBBGWEc5"),
            ("Hello world!", "$5$rounds=10000$saltstringsaltst$3xv.VbSHBb41AL9AvLeujZkZRBAwqFMz2.opqey6IcA"),
            ("we have a short salt string but not a short password", "$6$rounds=77777$short$WuQyW2YR.hBNpjjRhpYD/ifIw05xdfeEyQoMxIXbkvr0gge1a1x3yRULJ5CCaUeOxFmtlcGZelFl5CxtgfiAc0"),
            ("", "$6$rounds=1000$x$JUgHESfT/mKR2X.Qz/PrkEgBINN.wbH/GsJhhFRcgrb0a4MjVYFixxXtKicccBbv9PSG/n1kVdpVqZiR7Brv1."),
            ("secret", "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1"),
            ("secret", "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA"),
        ];
        for (pw, hash) in cases {
            assert!(check_hash(hash).is_ok(), "{hash}");
            assert!(verify(pw, hash), "{pw:?} {hash}");
            assert!(!verify("wrong", hash), "{hash}");
        }
        // A salt longer than 16 is cut, as libxcrypt does.
        assert_eq!(
            hash_with(
                Scheme::Sha256,
                b"Hello world!",
                b"saltstringsaltstring",
                Some(10000)
            ),
            cases[2].1
        );
    }

    #[test]
    fn hashes_a_plain_password_with_a_random_salt() {
        let a = hash_password("pw");
        let b = hash_password("pw");
        assert_ne!(a, b);
        assert!(a.starts_with("$6$"));
        assert!(verify("pw", &a) && verify("pw", &b));
        assert_eq!(check_hash(&a), Ok(Scheme::Sha512));
    }

    #[test]
    fn refuses_what_is_not_a_hash_for_shadow() {
        let good = "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1";
        assert_eq!(check_hash("plaintext"), Err(HashError::Scheme));
        assert_eq!(check_hash("$1$abc$def"), Err(HashError::Scheme));
        assert!(check_hash(&good.replace("saltsalt", "salt:x")).is_err());
        assert!(check_hash(&format!("{good}\nroot::0:0")).is_err());
        assert!(check_hash(&good[..good.len() - 1]).is_err());
        assert!(check_hash("$6$rounds=$s$x").is_err());
        assert!(check_hash("$5$nodigest").is_err());
    }
}
