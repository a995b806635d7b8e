# Sourced (not run) by the aarch64 builds (image-builder/build-agent.sh
# --arch aarch64, ci/test-aarch64-unit): the environment that cross-builds
# the workspace for aarch64-unknown-linux-gnu with Debian's Rust and C cross
# toolchain (ci/install-aarch64). rustup's cargo and rustc (first on PATH)
# have no aarch64 standard library, so Debian's are named explicitly; C
# code (ring, zstd, xz) is compiled by aarch64-linux-gnu-gcc, bindgen
# (blkid) parses the headers for the target, and pkg-config finds the arm64
# multiarch .pc files (libblkid, libcrypto) only.
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export PKG_CONFIG_ALLOW_CROSS_aarch64_unknown_linux_gnu=1
export PKG_CONFIG_LIBDIR_aarch64_unknown_linux_gnu=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
export BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu="--target=aarch64-linux-gnu -I/usr/include/aarch64-linux-gnu"
export AARCH64_UNKNOWN_LINUX_GNU_OPENSSL_LIB_DIR=/usr/lib/aarch64-linux-gnu
export AARCH64_UNKNOWN_LINUX_GNU_OPENSSL_INCLUDE_DIR=/usr/include
