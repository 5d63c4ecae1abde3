#!/usr/bin/env bash
# Serves an ONNX model from a model repository (device.backend = "cpu") to a
# C client and a Rust client at once, with named, typed tensors at batch 2,
# while the model file is replaced by its other version and the repository
# reloaded (SIGHUP) ten times. Each client checks every output against
# onnxruntime's outputs for one of the two versions (1e-4 x max |reference|)
# and fails on any request that failed or matched neither; the script fails
# if a client stopped before the reloads ended or if no client saw both
# versions.
#
#   scripts/onnx/serve-check.sh [RELOADS]     (default 10; needs python3 with
#                                             onnx and onnxruntime)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
reloads=${1:-10}

# The daemon first, then the client library and the examples built by
# themselves (see scripts/run-c-example.sh for why the order matters). sluiced and sluice in
# separate invocations, as they ship: built together, sluiced would get the CLI's InSS planner by
# feature unification, a build of its own that nothing else here reuses.
cargo build --release -q --bin sluiced
cargo build --release -q --bin sluice
cargo build --release -q -p sluice-client --lib --example serve_check
target=${CARGO_TARGET_DIR:-$root/target}
target=$(cd "$target" && pwd)
mkdir -p "$target/c-example"
"${CC:-cc}" -Wall -Wextra -Werror -std=c11 -O2 -Iclient-lib/include \
  client-lib/examples/serve_check.c -o "$target/c-example/serve_check" \
  -L"$target/release" -lsluice_client -Wl,-rpath,"$target/release" -lm

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-serve-check.XXXXXX")
sock=$tmp/sluiced.sock
daemon_pid='' c_pid='' rust_pid=''
cleanup() {
  local rc=$?
  for p in $c_pid $rust_pid; do kill "$p" 2>/dev/null || true; done
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
  if [[ $rc != 0 && -f $tmp/sluiced.log ]]; then
    echo "---- sluiced log (last 40 lines) ----" >&2
    tail -n 40 "$tmp/sluiced.log" >&2 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

python3 scripts/onnx/make-serving-model.py --out "$tmp/data"
mkdir "$tmp/models"
cp "$tmp/data/v1/typed.onnx" "$tmp/data/typed.toml" "$tmp/models/"
cat >"$tmp/sluiced.toml" <<TOML
[device]
backend = "cpu"
cpu_threads = 2

[models]
dir = "$tmp/models"
TOML

"$target/release/sluiced" --config "$tmp/sluiced.toml" --socket "$sock" >"$tmp/sluiced.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 300); do
  [[ -S $sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || { echo "serve-check: sluiced exited before listening" >&2; exit 1; }
  sleep 0.1
done
[[ -S $sock ]] || { echo "serve-check: sluiced did not listen within 30 s" >&2; exit 1; }
"$target/release/sluice" models --socket "$sock" list

# Both clients run until $tmp/data/stop exists.
"$target/c-example/serve_check" "$sock" typed "$tmp/data" 0 >"$tmp/c.out" 2>"$tmp/c.err" &
c_pid=$!
"$target/release/examples/serve_check" "$sock" typed "$tmp/data" 0 >"$tmp/rust.out" 2>"$tmp/rust.err" &
rust_pid=$!
sleep 0.5
for i in $(seq "$reloads"); do
  v=v$(( i % 2 + 1 ))
  # Replace the file in one step (a rename), then re-scan.
  cp "$tmp/data/$v/typed.onnx" "$tmp/models/.typed.onnx.part"
  mv -f "$tmp/models/.typed.onnx.part" "$tmp/models/typed.onnx"
  kill -HUP "$daemon_pid"
  sleep 0.4
  for p in $c_pid $rust_pid; do
    kill -0 "$p" 2>/dev/null || { echo "serve-check: a client stopped during reload $i" >&2; cat "$tmp"/*.err >&2; exit 1; }
  done
done
touch "$tmp/data/stop"
rc=0
wait "$c_pid" || rc=1
wait "$rust_pid" || rc=1
c_pid='' rust_pid=''
cat "$tmp/c.out" "$tmp/rust.out"
if [[ $rc != 0 ]]; then
  echo "serve-check: a client failed:" >&2
  head -n 20 "$tmp/c.err" "$tmp/rust.err" >&2
  exit 1
fi
"$target/release/sluice" models --socket "$sock" list
python3 - "$tmp/c.out" "$tmp/rust.out" "$reloads" <<'PY'
import re, sys
seen = [list(map(int, re.search(r"(\d+) requests .*: (\d+) on v1, (\d+) on v2", open(f).read()).groups()))
        for f in sys.argv[1:3]]
total = sum(s[0] for s in seen)
both = any(s[1] > 0 and s[2] > 0 for s in seen)
print(f"serve-check: {total} requests from the C and Rust clients through {sys.argv[3]} reloads, "
      f"none failed or mismatched; both versions seen: {both}")
if not both:
    sys.exit("serve-check: no client saw both versions: the reloads did not take effect")
PY
