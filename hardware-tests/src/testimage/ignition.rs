//! The CoreOS-like image's stand-in for Ignition (Debian has no Ignition,
//! and its Go sources cannot be fetched here): on a first boot the test
//! image's `/init` runs [`APPLY_SH`] on `ignition/config.ign`, which applies
//! the two stages an OpenShift deploy's config uses, as Ignition's files
//! stage does on CoreOS: `storage.files` (each `contents.source` a `data:`
//! URL, percent-encoded or base64; `mode`) and `passwd.users` (each user's
//! `sshAuthorizedKeys` into `/home/<name>/.ssh/authorized_keys.d/ignition`),
//! into a root it is given (the first boot: a tmpfs). It then prints every
//! file it wrote between [`APPLIED_BEGIN`] and [`APPLIED_END`], each after
//! a `== <path>` line; [`applied`] reads that back. Anything else in the
//! config (another source scheme, an unreadable config) fails the stand-in
//! with a line saying so, and the test sees no applied files.

use std::collections::BTreeMap;

/// Printed before the files the stand-in wrote.
pub const APPLIED_BEGIN: &str = "testimage: ignition applied begin";
/// Printed after them.
pub const APPLIED_END: &str = "testimage: ignition applied end";

/// busybox awk: a JSON document on stdin or in the file argument → one
/// line per scalar, its path (object keys and array indices joined by
/// dots), a tab, its value (strings unescaped; `\n` and `\t` kept escaped
/// so each value stays on its line).
pub const FLATTEN_AWK: &str = r#"
function ws() { while (i <= n && index(" \t\r\n", substr(s, i, 1))) i++ }
function hex(h,   v, j) {
    v = 0
    for (j = 1; j <= length(h); j++) v = v * 16 + index("0123456789abcdef", tolower(substr(h, j, 1))) - 1
    return v
}
function str(   out, c, e) {
    i++
    out = ""
    while (i <= n) {
        c = substr(s, i, 1); i++
        if (c == "\"") return out
        if (c == "\\") {
            e = substr(s, i, 1); i++
            if (e == "n" || e == "t") out = out "\\" e
            else if (e == "u") { out = out sprintf("%c", hex(substr(s, i, 4))); i += 4 }
            else out = out e
        } else out = out c
    }
    bad = 1
    return out
}
function join(path, k) { return path == "" ? k : path "." k }
function value(path,   c, k, idx) {
    ws(); c = substr(s, i, 1)
    if (c == "{") {
        i++; ws()
        if (substr(s, i, 1) == "}") { i++; return }
        while (i <= n) {
            ws()
            if (substr(s, i, 1) != "\"") { bad = 1; return }
            k = str(); ws()
            if (substr(s, i, 1) != ":") { bad = 1; return }
            i++
            value(join(path, k)); ws()
            c = substr(s, i, 1); i++
            if (c == "}") return
            if (c != ",") { bad = 1; return }
        }
        bad = 1; return
    }
    if (c == "[") {
        i++; ws()
        if (substr(s, i, 1) == "]") { i++; return }
        idx = 0
        while (i <= n) {
            value(join(path, idx)); idx++; ws()
            c = substr(s, i, 1); i++
            if (c == "]") return
            if (c != ",") { bad = 1; return }
        }
        bad = 1; return
    }
    if (c == "\"") { k = str(); print path "\t" k; return }
    k = ""
    while (i <= n && !index(",}] \t\r\n", substr(s, i, 1))) { k = k substr(s, i, 1); i++ }
    if (k == "") { bad = 1; return }
    print path "\t" k
}
{ s = s $0 "\n" }
END { n = length(s); i = 1; value(""); ws(); if (bad || i <= n) exit 1 }
"#;

/// busybox sh: `ignition-apply CONFIG ROOT` (see the module's text).
pub const APPLY_SH: &str = r#"#!/bin/sh
# The bed's stand-in for Ignition's files and users stages (see
# hardware-tests/src/testimage/ignition.rs): CONFIG applied under ROOT.
conf=$1
root=$2
flat=$(mktemp) || exit 1
if ! awk -f /lib/ignition-flatten.awk "$conf" > "$flat"; then
    echo "testimage: ignition: $conf is not a JSON document"
    exit 1
fi
get() {
    awk -F '\t' -v k="$1" '$1 == k { print substr($0, length(k) + 2); f = 1 } END { exit !f }' "$flat"
}
decode() {
    case "$1" in
        data:*\;base64,*) echo "${1#*,}" | base64 -d ;;
        data:*) awk -v s="${1#*,}" 'function hex(h,   v, j) {
                v = 0
                for (j = 1; j <= 2; j++) v = v * 16 + index("0123456789abcdef", tolower(substr(h, j, 1))) - 1
                return v
            }
            BEGIN {
                while ((p = index(s, "%")) > 0) {
                    printf "%s%c", substr(s, 1, p - 1), hex(substr(s, p + 1, 2))
                    s = substr(s, p + 3)
                }
                printf "%s", s
            }' ;;
        *) return 1 ;;
    esac
}
i=0
while p=$(get "storage.files.$i.path"); do
    src=$(get "storage.files.$i.contents.source") || src=data:,
    mkdir -p "$root$(dirname "$p")"
    if ! decode "$src" > "$root$p"; then
        echo "testimage: ignition: $p: only data: URLs are applied here, not $src"
        exit 1
    fi
    if m=$(get "storage.files.$i.mode"); then
        chmod "$(printf %o "$m")" "$root$p"
    fi
    i=$((i + 1))
done
u=0
while name=$(get "passwd.users.$u.name"); do
    keys=$root/home/$name/.ssh/authorized_keys.d/ignition
    k=0
    while key=$(get "passwd.users.$u.sshAuthorizedKeys.$k"); do
        mkdir -p "$(dirname "$keys")"
        echo "$key" >> "$keys"
        k=$((k + 1))
    done
    u=$((u + 1))
done
rm -f "$flat"
for f in $(cd "$root" && find . -type f | sort); do
    echo "== ${f#.}"
    cat "$root/$f"
    echo
done
"#;

/// The files the stand-in wrote, by path, as a first boot printed them
/// (each content without its final newline), if it printed any.
pub fn applied(console: &str) -> Option<BTreeMap<String, String>> {
    let start = console.find(APPLIED_BEGIN)?;
    let body = &console[start..];
    let body = &body[body.find('\n')? + 1..];
    let body = &body[..body.find(APPLIED_END)?];
    let mut files: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut current = None;
    for line in body.lines().map(|l| l.trim_end_matches('\r')) {
        if let Some(path) = line.strip_prefix("== ") {
            current = Some(path.to_string());
            files.entry(path.to_string()).or_default();
        } else if let Some(lines) = current.as_ref().and_then(|p| files.get_mut(p)) {
            lines.push(line);
        }
    }
    Some(
        files
            .into_iter()
            .map(|(p, lines)| {
                let text = lines.join("\n");
                let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
                (p, text)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// busybox-static (ci/install-deps), the one the image carries.
    const BUSYBOX: &str = "/bin/busybox";

    /// Runs the stand-in with `config` under busybox (its sh, awk, base64),
    /// the awk program at the path the script reads it from replaced by a
    /// file in the temporary directory.
    fn apply(config: &str) -> (bool, String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let awk = dir.path().join("flatten.awk");
        std::fs::write(&awk, FLATTEN_AWK).unwrap();
        let script = APPLY_SH.replace("/lib/ignition-flatten.awk", awk.to_str().unwrap());
        let sh = dir.path().join("apply.sh");
        std::fs::write(&sh, script).unwrap();
        let conf = dir.path().join("config.ign");
        std::fs::write(&conf, config).unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for a in [
            "sh", "awk", "base64", "mkdir", "dirname", "chmod", "printf", "find", "sort", "cat",
            "rm", "mktemp",
        ] {
            std::os::unix::fs::symlink(BUSYBOX, bin.join(a)).unwrap();
        }
        let out = Command::new(BUSYBOX)
            .arg("sh")
            .arg(&sh)
            .arg(&conf)
            .arg(&root)
            .env("PATH", &bin)
            .env("TMPDIR", dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text, dir)
    }

    fn listing(text: &str) -> String {
        format!("boot\r\n{APPLIED_BEGIN}\r\n{text}{APPLIED_END}\r\n")
    }

    #[test]
    fn files_and_ssh_keys_are_written_as_ignition_writes_them() {
        assert!(Path::new(BUSYBOX).exists(), "{BUSYBOX}: ci/install-deps");
        let config = r#"{"ignition": {"version": "3.2.0"},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA k1", "ssh-ed25519 BBBB k2"]}]},
            "storage": {"files": [
                {"path": "/etc/hostname", "mode": 420, "overwrite": true, "contents": {"source": "data:,worker-0"}},
                {"path": "/etc/bed/motd", "mode": 384, "contents": {"source": "data:,written%20by%20%22Ignition%22%0A"}},
                {"path": "/etc/bed/b64", "contents": {"source": "data:text/plain;base64,aGVsbG8="}}]}}"#;
        let (ok, out, dir) = apply(config);
        assert!(ok, "{out}");
        let root = dir.path().join("root");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/hostname")).unwrap(),
            "worker-0"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("etc/bed/motd")).unwrap(),
            "written by \"Ignition\"\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("etc/bed/b64")).unwrap(),
            "hello"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| {
            std::fs::metadata(root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("etc/hostname"), 0o644);
        assert_eq!(mode("etc/bed/motd"), 0o600);
        let keys = "home/core/.ssh/authorized_keys.d/ignition";
        assert_eq!(
            std::fs::read_to_string(root.join(keys)).unwrap(),
            "ssh-ed25519 AAAA k1\nssh-ed25519 BBBB k2\n"
        );
        // The listing, read back as the test reads a console.
        let files = applied(&listing(&out)).unwrap();
        assert_eq!(files["/etc/hostname"], "worker-0");
        assert_eq!(files["/etc/bed/motd"], "written by \"Ignition\"");
        assert_eq!(files["/etc/bed/b64"], "hello");
        assert_eq!(
            files[&format!("/{keys}")],
            "ssh-ed25519 AAAA k1\nssh-ed25519 BBBB k2"
        );
        assert_eq!(files.len(), 4, "{files:?}");
    }

    #[test]
    fn what_it_cannot_apply_fails_with_a_line_saying_so() {
        let (ok, out, _dir) = apply(
            r#"{"storage": {"files": [{"path": "/etc/x", "contents": {"source": "https://h/x"}}]}}"#,
        );
        assert!(!ok, "{out}");
        assert!(
            out.contains("/etc/x: only data: URLs are applied here, not https://h/x"),
            "{out}"
        );
        for bad in [
            r#"{"storage": "#,
            r#"{"a" 1}"#,
            "not json",
            r#"{"a": [1 2]}"#,
        ] {
            let (ok, out, _dir) = apply(bad);
            assert!(!ok, "{bad}: {out}");
            assert!(out.contains("is not a JSON document"), "{bad}: {out}");
        }
    }

    #[test]
    fn no_listing_reads_as_none() {
        assert!(applied("booted\r\nnothing\r\n").is_none());
        assert!(applied(&format!("{APPLIED_BEGIN}\r\n== /a\r\nx\r\n")).is_none());
    }
}
