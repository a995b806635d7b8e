#!/usr/bin/env bash
# Builds the static agent for the ramdisk: glibc with crt-static (Debian's
# libblkid.a cannot be linked into a musl binary; see
# ../shared/ramdisk-notes.md §1) and checks it has no dynamic section.
# relocation-model=static: a plain static executable, not static-pie, so
# there is no dynamic section at all (static-pie keeps one to relocate itself).
# --target keeps these flags off build scripts and off the normal builds.
# OPENSSL_STATIC: openssl-sys links Debian's libcrypto.a (libssl-dev), not
# the shared library.
#   image-builder/build-agent.sh [--arch x86_64|aarch64]   -> prints the binary's path
# aarch64 (issue 33) is cross-built with Debian's Rust (/usr/bin/cargo and
# /usr/bin/rustc from cargo-web and rustc-web, whose libstd-rust-web-dev:arm64
# is the aarch64 standard library rustup's toolchains here lack), linked by
# aarch64-linux-gnu-gcc against the arm64 multiarch libblkid.a and
# libcrypto.a (ci/install-aarch64 installs all of it).
# The compiler is rustc itself: a RUSTC_WORKSPACE_WRAPPER (ci/test lints
# its debug build through clippy-driver) would change the binary's symbol
# hashes, and with them the ramdisk's bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTC_WORKSPACE_WRAPPER
arch=x86_64
if [ "${1:-}" = --arch ]; then arch=${2:?--arch needs x86_64 or aarch64}; fi
flags='-C target-feature=+crt-static -C relocation-model=static'
case $arch in
    x86_64)
        target=x86_64-unknown-linux-gnu
        OPENSSL_STATIC=1 RUSTFLAGS="$flags" \
            cargo build --release --locked --target "$target" -p agent --bin agent >&2
        ;;
    aarch64)
        target=aarch64-unknown-linux-gnu
        # shellcheck source=image-builder/aarch64-env.sh
        . image-builder/aarch64-env.sh
        OPENSSL_STATIC=1 RUSTFLAGS="$flags" \
            /usr/bin/cargo build --release --locked --target "$target" -p agent --bin agent >&2
        ;;
    *)
        echo "build-agent.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2
        exit 1
        ;;
esac
bin=${CARGO_TARGET_DIR:-target}/$target/release/agent
if readelf -d "$bin" | grep -q 'Dynamic section'; then
    echo "build-agent.sh: $bin has a dynamic section" >&2
    exit 1
fi
realpath "$bin"
