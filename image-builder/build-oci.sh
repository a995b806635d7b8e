#!/usr/bin/env bash
# Builds the agent's OCI image for OpenShift's `ironic-agent` unit
# (agent/docs/container-form.md) into OUT (default target/oci): OUT/oci (an
# OCI image layout, tag `latest`), OUT/ironic-agent.oci.tar (oci-archive)
# and OUT/ironic-agent.docker.tar (docker-archive, for `podman load`):
#   image-builder/build-oci.sh [OUT]
# The static agent is build-agent.sh's release build, the ramdisk's: after
# a ramdisk build from the same sources cargo rebuilds nothing. AGENT_BIN=PATH
# takes that binary instead. AGENT_BIN_AARCH64=PATH (from
# `build-agent.sh --arch aarch64`, ci/test-aarch64's cross build) adds the
# aarch64 image under the same image index; without it the image is x86_64
# only. Equal inputs give equal bytes (fixed times, owners and order).
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTC_WORKSPACE_WRAPPER
out=${1:-target/oci}
agent=${AGENT_BIN:-$(image-builder/build-agent.sh)}
extra=()
if [ -n "${AGENT_BIN_AARCH64:-}" ]; then
    extra=(--agent-aarch64 "$AGENT_BIN_AARCH64")
fi
cargo run --release --locked -q -p image-builder -- oci --out "$out" --agent "$agent" "${extra[@]}"
