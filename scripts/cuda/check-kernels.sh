#!/usr/bin/env bash
# Compiles sluice's CUDA kernel library (daemon/cuda/kernels/) with NVRTC through
# `sluice kernels ptx`, then assembles every PTX with ptxas for sm_80 (A100)
# and sm_90 (H100). Needs no GPU and no CUDA install: NVRTC and ptxas come
# from NVIDIA's pinned PyPI wheels, installed once into a venv.
#
# Usage: scripts/cuda/check-kernels.sh      (from anywhere in the checkout)
# Env:   SLUICE_CUDA_VENV  the venv (default ~/.cache/sluice/cuda-venv)
#        CARGO_TARGET_DIR  as for cargo; the PTX and cubins land in
#                          $CARGO_TARGET_DIR/cuda-kernels (default target/)
# Prints each kernel's registers and shared memory as ptxas reports them,
# then `kernels: N compiled, N assembled for sm_80 and sm_90, 0 failed`;
# exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

# CUDA 12.4.1's NVRTC and ptxas (the cudarc bindings are pinned to 12.4).
ARCHES=(80 90)
# shellcheck source=scripts/cuda/venv.sh
. scripts/cuda/venv.sh

out="${CARGO_TARGET_DIR:-target}/cuda-kernels"
rm -rf "$out"
mkdir -p "$out"

echo "==> building sluice with --features cuda"
if ! cargo build --quiet --release --features sluice-cli/cuda --bin sluice; then
  echo "error: building sluice with --features cuda failed (see above)" >&2
  echo "kernels: 0 compiled, 0 assembled for sm_80 and sm_90, 1 failed"
  exit 1
fi
sluice="${CARGO_TARGET_DIR:-target}/release/sluice"
expected=$("$sluice" kernels list | grep -c '^sluice_')

failed=0
declare -A compiled assembled
for a in "${ARCHES[@]}"; do
  echo "==> NVRTC: compute_$a"
  if LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$sluice" kernels ptx --arch "compute_$a" --out "$out" > "$out/nvrtc.$a.log" 2>&1; then
    cat "$out/nvrtc.$a.log"
    compiled[$a]=$(grep -o '^kernels: [0-9]* compiled' "$out/nvrtc.$a.log" | grep -o '[0-9]*' || echo 0)
  else
    cat "$out/nvrtc.$a.log" >&2
    echo "error: NVRTC failed for compute_$a" >&2
    compiled[$a]=0
    failed=$((failed + 1))
  fi

  echo "==> ptxas -arch=sm_$a"
  assembled[$a]=0
  for ptx in "$out"/*.compute_$a.ptx; do
    [ -e "$ptx" ] || continue
    cubin="${ptx%.compute_$a.ptx}.sm_$a.cubin"
    if "$ptxas" -arch="sm_$a" -v "$ptx" -o "$cubin" > "$cubin.log" 2>&1; then
      n=$(grep -c "Compiling entry function" "$cubin.log" || true)
      assembled[$a]=$((assembled[$a] + n))
    else
      cat "$cubin.log" >&2
      echo "error: ptxas failed on $ptx" >&2
      failed=$((failed + 1))
    fi
  done
  # One line per kernel: name, registers, static shared memory, spills.
  { cat "$out"/*.sm_$a.cubin.log 2>/dev/null || true; } | awk -v arch="sm_$a" '
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); k = substr($0, RSTART + 1, RLENGTH - 2) }
    /spill stores/ { spill = $5 + $9 }
    /Used [0-9]+ registers/ {
      smem = 0
      for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i
      printf "  %-6s %-22s %3d registers  %6d bytes smem  %d bytes spilled\n", arch, k, $5, smem, spill
    }'
done

# A step that ran but covered fewer kernels than the table lists fails too.
n_compiled=$expected
n_assembled=$expected
for a in "${ARCHES[@]}"; do
  if [ "${compiled[$a]}" != "$expected" ] || [ "${assembled[$a]}" != "$expected" ]; then
    if [ "$failed" -eq 0 ]; then
      echo "error: sm_$a: ${compiled[$a]} kernels compiled, ${assembled[$a]} assembled; the table lists $expected" >&2
      failed=1
    fi
  fi
  if [ "${compiled[$a]}" -lt "$n_compiled" ]; then n_compiled=${compiled[$a]}; fi
  if [ "${assembled[$a]}" -lt "$n_assembled" ]; then n_assembled=${assembled[$a]}; fi
done

echo "kernels: $n_compiled compiled, $n_assembled assembled for sm_80 and sm_90, $failed failed"
[ "$failed" -eq 0 ]
