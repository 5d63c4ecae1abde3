#!/usr/bin/env bash
# Builds device-kit/: what a lent GPU machine needs to run scripts/device/run.sh
# with no network (the device tool's machine reaches nothing outside it, so it
# cannot fetch crates or wheels, and a cargo build there has no registry).
#
#   device-kit/sluice              the CLI with --features cuda, stripped
#   device-kit/sluice-cuda-tests   sluice-cuda's lib tests with --features cuda
#                                  (the `real` tests: the driver on hardware)
#   device-kit/nvrtc.tar.xz        NVRTC 12.4.1 (pinned wheel), used on the device
#                                  only when it has no libnvrtc.so.12 of its own
#   device-kit/commit              the commit it was built from
#
# The kit is git-ignored; the device tool carries it with `carry: ["device-kit"]`
# (64 MiB in all; the kit is ~35 MiB). It is built for this machine's glibc
# (run.sh prints both sides' versions). Usage: scripts/device/kit.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

kit=device-kit
limit_mib=60

echo "==> building sluice with --features cuda"
cargo build --quiet --release --features sluice-cli/cuda -p sluice-cli --bin sluice
echo "==> building sluice-cuda's tests with --features cuda"
tests_bin=$(cargo test --quiet --release -p sluice-cuda --features cuda --lib --no-run \
  --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "sluice_cuda" and m["profile"]["test"]:
        print(m["executable"])
')
if [ -z "$tests_bin" ] || [ ! -x "$tests_bin" ]; then
  echo "error: could not find sluice-cuda's test binary (cargo test --no-run)" >&2
  exit 1
fi

# shellcheck source=scripts/cuda/venv.sh
. scripts/cuda/venv.sh

rm -rf "$kit"
mkdir -p "$kit"
cp "${CARGO_TARGET_DIR:-target}/release/sluice" "$kit/sluice"
cp "$tests_bin" "$kit/sluice-cuda-tests"
strip "$kit/sluice" "$kit/sluice-cuda-tests"
echo "==> packing NVRTC from $nvrtc_lib"
tar -cJf "$kit/nvrtc.tar.xz" -C "$nvrtc_lib" libnvrtc.so.12 libnvrtc-builtins.so.12.4
git rev-parse HEAD > "$kit/commit"
if [ -n "$(git status --porcelain)" ]; then
  echo "(with uncommitted changes)" >> "$kit/commit"
fi
glibc=$(ldd --version 2>&1 || true)
echo "${glibc%%$'\n'*}" > "$kit/glibc"

size_kib=$(du -sk "$kit" | cut -f1)
echo "device-kit: $(du -sh "$kit" | cut -f1), built from $(head -c 12 "$kit/commit"), $(cat "$kit/glibc")"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "error: device-kit is ${size_kib} KiB, over the ${limit_mib} MiB the device tool can carry" >&2
  exit 1
fi
