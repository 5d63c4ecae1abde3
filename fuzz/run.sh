#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (CI: `.ci/run`; by hand: see
# README.md). Installs what it needs: a nightly toolchain (rustup) and
# cargo-fuzz (`cargo install cargo-fuzz --locked`) when missing.
#
#   fuzz/run.sh [SECONDS_PER_TARGET]     default 60
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-${FUZZ_SECONDS:-60}}"

# The toolchain: nightly (cargo-fuzz passes -Z flags). Where none is
# installed and rustup cannot fetch one (a machine that reaches only the
# package registries), the default toolchain with RUSTC_BOOTSTRAP=1 accepts
# the same flags.
tc=(+nightly)
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: installing the nightly toolchain"
  if ! rustup toolchain install nightly --profile minimal; then
    echo "fuzz: no nightly toolchain; using $(rustc --version) with RUSTC_BOOTSTRAP=1"
    tc=()
    export RUSTC_BOOTSTRAP=1
  fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# Seeds: the shipped example config and two frame bodies (kind u16,
# reserved u16, fields): a status request and a lookup of "resnet".
mkdir -p corpus/config_parse corpus/control_decode corpus/request_validate
cp ../daemon/service/systemd/sluiced.toml corpus/config_parse/example.toml
printf '\x07\x00\x00\x00' > corpus/control_decode/status_request
printf '\x04\x00\x00\x00\x06\x00resnet' > corpus/control_decode/lookup

# ONNX seeds: the small operator models scripts/onnx/make-fixtures.py
# writes (CI makes them before the tests), when they are there.
mkdir -p corpus/onnx_import
seeds="${SLUICE_ONNX_SEEDS:-../target/onnx-fixtures/ops}"
if [ -d "$seeds" ]; then
  find "$seeds" -name '*.onnx' -size -64k -exec cp {} corpus/onnx_import/ \;
fi

targets=(control_decode request_validate config_parse onnx_import)
# Build outputs: fuzz/target, or $SLUICE_FUZZ_TARGET_DIR (CI keeps them in
# ~/.cache/sluice/fuzz-target so that a warm run only rebuilds what changed;
# cold, the fuzz crate and its dependencies take ~10 min on 2 cores).
tdir=()
[ -n "${SLUICE_FUZZ_TARGET_DIR:-}" ] && tdir=(--target-dir "$SLUICE_FUZZ_TARGET_DIR")
# -a: debug assertions (and so overflow checks) on, in an optimised build.
if ! cargo "${tc[@]}" fuzz build -a "${tdir[@]}"; then
  if [ "${#tc[@]}" -eq 0 ]; then
    echo "fuzz: SKIPPED: the fuzz targets do not build without a nightly toolchain here"
    exit 0
  fi
  exit 1
fi
mkdir -p logs
for t in "${targets[@]}"; do
  echo "fuzz: $t for ${secs}s"
  rc=0
  # -print_final_stats: the executions run (stat::number_of_executed_units).
  dict=()
  [ -f "$t.dict" ] && dict=(-dict="$t.dict")
  cargo "${tc[@]}" fuzz run -a "${tdir[@]}" "$t" corpus/"$t" -- "${dict[@]}" \
    -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    >"logs/$t.log" 2>&1 || rc=$?
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "logs/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "logs/$t.log"
    echo "fuzz: $t failed (exit $rc); failing inputs: $(ls "artifacts/$t" 2>/dev/null | tr '\n' ' ')"
    echo "reproduce: cd fuzz && cargo +nightly fuzz run -a $t artifacts/$t/<file>"
    exit 1
  fi
done
