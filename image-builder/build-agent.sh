#!/usr/bin/env bash
# Builds the static agent for the ramdisk: glibc with crt-static (Debian's
# libblkid.a cannot be linked into a musl binary; see
# ../shared/ramdisk-notes.md §1) and checks it has no dynamic section.
# relocation-model=static: a plain static executable, not static-pie, so
# there is no dynamic section at all (static-pie keeps one to relocate itself).
# --target keeps these flags off build scripts and off the normal builds.
# OPENSSL_STATIC: openssl-sys links Debian's libcrypto.a (libssl-dev), not
# the shared library.
# Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu
OPENSSL_STATIC=1 RUSTFLAGS='-C target-feature=+crt-static -C relocation-model=static' \
    cargo build --release --locked --target "$target" -p agent --bin agent >&2
bin=${CARGO_TARGET_DIR:-target}/$target/release/agent
if readelf -d "$bin" | grep -q 'Dynamic section'; then
    echo "build-agent.sh: $bin has a dynamic section" >&2
    exit 1
fi
realpath "$bin"
