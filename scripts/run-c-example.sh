#!/usr/bin/env bash
# Builds the C example (static and shared, scripts/build-c-example.sh) and
# sluiced, starts sluiced on a temporary socket, runs both example binaries
# against it, and stops the daemon. Exits non-zero if anything failed; the
# daemon is stopped and the temporary directory removed on any exit.
#
#   scripts/run-c-example.sh [MODEL [N]]     (defaults: echo_small 200)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
model=${1:-echo_small}
n=${2:-200}

# The daemon first: its build also compiles sluice-client (with the
# workspace's unified features) into target/release, and the example must
# link and load the library that build-c-example.sh builds, not that one.
echo "==> cargo build --release --bin sluiced"
cargo build --release --bin sluiced
bash scripts/build-c-example.sh

target=${CARGO_TARGET_DIR:-$root/target}
target=$(cd "$target" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-c-example.XXXXXX")
sock=$tmp/sluiced.sock
daemon_pid=

cleanup() {
  local rc=$?
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if [[ $rc != 0 && -f $tmp/sluiced.log ]]; then
    echo "---- sluiced log (last 40 lines) ----" >&2
    tail -n 40 "$tmp/sluiced.log" >&2 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==> starting sluiced on $sock"
"$target/release/sluiced" --socket "$sock" >"$tmp/sluiced.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 300); do
  [[ -S $sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || { echo "run-c-example: sluiced exited before listening" >&2; exit 1; }
  sleep 0.1
done
[[ -S $sock ]] || { echo "run-c-example: sluiced did not create $sock within 30 s" >&2; exit 1; }

failed=0
for kind in static shared; do
  echo "==> hello-$kind $sock $model $n"
  if ! timeout 120 "$target/c-example/hello-$kind" "$sock" "$model" "$n"; then
    echo "run-c-example: hello-$kind failed" >&2
    failed=1
  fi
done
kill -0 "$daemon_pid" 2>/dev/null || { echo "run-c-example: sluiced died during the run" >&2; exit 1; }
if [[ $failed != 0 ]]; then
  exit 1
fi
echo "==> C example passed (static and shared)"
