#!/usr/bin/env bash
# The Python client (client-py/) against a live daemon: builds the release
# sluiced and libsluice_client.so, pip-installs ./client-py (and pytest) into
# the current python3, then runs
#   1. the pytest suite (client-py/tests; its fixture starts sluiced on the
#      CPU backend serving scripts/onnx/make-serving-model.py's model and
#      compares outputs with onnxruntime's), and
#   2. the README's Python example, taken from README.md between the
#      "python-example" marker comments, against a daemon started here,
#      from a folder outside the checkout with no SLUICE_CLIENT_LIB set (the
#      installed package finds the library on its own).
#
#   scripts/python-client-check.sh      (needs python3 with pip, numpy, onnx
#                                        and onnxruntime)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The same two builds as scripts/onnx/serve-check.sh, so that after it (in CI) both are fresh:
# libsluice_client's files carry no hash, so a build of it with other features (or of a
# binary that links it) would rebuild it and what depends on it.
cargo build --release -q --bin sluiced
cargo build --release -q -p sluice-client --lib --example serve_check
target=${CARGO_TARGET_DIR:-$root/target}
target=$(cd "$target" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-python-check.XXXXXX")
daemon_pid=''
cleanup() {
  local rc=$?
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

if ! python3 -m pip install --quiet --disable-pip-version-check ./client-py pytest==9.2.0 >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "python-client-check: pip install ./client-py failed" >&2
  exit 1
fi
grep -v "Running pip as the 'root' user" "$tmp/pip.log" || true

# The installed package, not the source tree: run from outside the checkout.
(cd "$tmp" && env -u SLUICE_CLIENT_LIB python3 -c \
  'import sluice; print(f"python-client-check: sluice {sluice.__version__} from {sluice.__file__}, library {sluice.library_path()}")')

echo "python-client-check: pytest client-py/tests"
(cd client-py && env -u SLUICE_CLIENT_LIB SLUICE_TEST_REQUIRE_DAEMON=1 SLUICED="$target/release/sluiced" \
  python3 -m pytest -q -p no:cacheprovider tests)

# The README's example, exactly as written there.
awk '/<!-- python-example:start -->/{on=1; next} /<!-- python-example:end -->/{on=0} on' README.md \
  | sed '/^```/d' >"$tmp/readme_example.py"
[[ -s $tmp/readme_example.py ]] || { echo "python-client-check: no python-example block in README.md" >&2; exit 1; }

python3 scripts/onnx/make-serving-model.py --out "$tmp/data" >/dev/null
mkdir "$tmp/models"
cp "$tmp/data/v1/typed.onnx" "$tmp/data/typed.toml" "$tmp/models/"
cat >"$tmp/sluiced.toml" <<TOML
[device]
backend = "cpu"
cpu_threads = 2

[models]
dir = "$tmp/models"
TOML
sock=$tmp/sluiced.sock
"$target/release/sluiced" --config "$tmp/sluiced.toml" --socket "$sock" >"$tmp/sluiced.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 300); do
  [[ -S $sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || { echo "python-client-check: sluiced exited before listening" >&2; exit 1; }
  sleep 0.1
done
[[ -S $sock ]] || { echo "python-client-check: sluiced did not listen within 30 s" >&2; exit 1; }

echo "python-client-check: the README's Python example ($(wc -l <"$tmp/readme_example.py") lines)"
(cd "$tmp" && env -u SLUICE_CLIENT_LIB SLUICE_SOCKET="$sock" timeout 60 python3 readme_example.py) | tee "$tmp/example.out"
python3 - "$tmp/example.out" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
sums = [float(x) for x in lines[-1].strip("[] ").split()]
if len(sums) != 2 or any(abs(s - 1) > 1e-5 for s in sums):
    sys.exit(f"python-client-check: the example's softmax rows do not sum to 1: {lines[-1]}")
print("python-client-check: the README example ran; its probabilities sum to 1 per row")
PY
