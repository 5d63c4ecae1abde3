#!/usr/bin/env bash
# The whole sluice test suite: what CI runs and what the README tells you to run.
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
if [ "${SLUICE_SKIP_MIRI:-0}" = 1 ]; then
  echo "skipped (SLUICE_SKIP_MIRI=1)"
elif cargo +nightly miri --version >/dev/null 2>&1 \
     || rustup component add --toolchain nightly miri >/dev/null 2>&1; then
  MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR=target/miri \
    cargo +nightly miri test -p shm-proto --lib
else
  echo "SKIPPED: no nightly toolchain with Miri here (rustup toolchain install nightly --component miri)"
fi

step "C example against a live daemon"
bash scripts/run-c-example.sh

step "workspace tests (cargo nextest)"
cargo nextest run --workspace --no-fail-fast
