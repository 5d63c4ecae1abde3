#!/usr/bin/env bash
# The whole sluice test suite: the README's test command (CI runs it, and more: see .ci/run).
#
#   1. every workspace test (unit, multi-process, C-ABI header check) with cargo-nextest
#   2. the loom models of the rings and the wake protocol (--cfg loom)
#   3. Miri on shm-proto's heap-backed ring tests (skipped, loudly, without nightly Miri)
#   4. the C example, built static and shared, run against a live sluiced
#
# Usage: scripts/test-all.sh            (from anywhere in the checkout)
# Env:   SLUICE_SKIP_MIRI=1  skip step 3;  SLUICE_SKIP_LOOM=1  skip step 2.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! cargo nextest --version >/dev/null 2>&1; then
  step "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

step "loom models (shm-proto rings and wake protocol)"
if [ "${SLUICE_SKIP_LOOM:-0}" != 1 ]; then
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p shm-proto --release --lib loom
else
  echo "skipped (SLUICE_SKIP_LOOM=1)"
fi

step "Miri (shm-proto heap-backed ring tests)"
# Never prompts: rust-src is installed here first (cargo-miri otherwise asks
# "Proceed? [Y/n]" before installing it), the sysroot is built by an explicit
# `cargo miri setup`, and standard input is /dev/null throughout.
if [ "${SLUICE_SKIP_MIRI:-0}" = 1 ]; then
  echo "skipped (SLUICE_SKIP_MIRI=1)"
elif rustup component add --toolchain nightly miri rust-src </dev/null >/dev/null 2>&1 \
     && cargo +nightly miri --version </dev/null >/dev/null 2>&1; then
  CARGO_TARGET_DIR=target/miri cargo +nightly miri setup </dev/null
  MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR=target/miri \
    cargo +nightly miri test -p shm-proto --lib </dev/null
else
  echo "SKIPPED: no nightly toolchain with Miri here (rustup toolchain install nightly --component miri,rust-src)"
fi

step "C example against a live daemon"
bash scripts/run-c-example.sh

step "workspace tests (cargo nextest)"
# The cross-process tests run the real sluiced and sluice binaries (sluiced_binary, top_screen);
# a test build does not make sluiced (its package has no integration tests), so build them all,
# and let a missing one fail those tests instead of skipping them.
cargo build --workspace --bins
SLUICE_REQUIRE_BINARIES=1 cargo nextest run --workspace --no-fail-fast

# nextest does not run doctests; the examples in the docs must still compile and pass.
step "doctests"
cargo test --workspace --doc
