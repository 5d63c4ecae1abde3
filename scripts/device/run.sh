#!/usr/bin/env bash
# The measurements to take on a lent GPU machine, as one prepared run: from the
# repository root, with device-kit/ carried (build it here first with
# scripts/device/kit.sh; the device machine has no network and no Rust build).
#
#   run(command="scripts/device/run.sh --budget 420", carry=["device-kit"], timeout_s=540)
#
# Steps go most valuable first (docs/hardware.md lists them and where each
# figure goes); each runs under its own timeout, and a step whose timeout would
# overrun the budget is skipped and said so. A failing step does not stop the
# ones after it, except that real-layer profiles are skipped when the
# correctness check fails (they would time wrong kernels). Everything is
# written under the results folder (results/hardware/, or SLUICE_RESULTS):
# NAME.out (stdout), NAME.err (stderr) per step, the manifests under models/,
# and summary.txt with one line per step: `NAME rc=N Ss` or `NAME skipped: why`.
# The device tool brings back at most 8 files from $OUT, so when OUT is set the
# results folder is packed into $OUT/results.tar.gz (with summary.txt beside
# it) after every step: a run cut off by its limit still returns what it
# measured. Each step's last lines are echoed too, for the tool's output tail.
#
# Usage: scripts/device/run.sh [--budget SECONDS] [--only STEP,...] [--dry-run]
#        --only runs just the named steps (e.g. a follow-up run that retakes
#        two measurements); the others are reported as not asked for.
# Env:   SLUICE_DEVICE_KIT  the kit (default device-kit)
#        SLUICE_RESULTS     the results folder (default results/hardware)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

budget=420
dry=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --only) only=",${2:?--only needs step names, comma-separated},"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1; see --help" >&2; exit 2 ;;
  esac
done
case "$budget" in
  ''|*[!0-9]*) echo "error: --budget $budget is not a whole number of seconds" >&2; exit 2 ;;
esac

kit="${SLUICE_DEVICE_KIT:-device-kit}"
out="${SLUICE_RESULTS:-results/hardware}"
mkdir -p "$out/models"
summary="$out/summary.txt"
: > "$summary"
# pack: the results folder into $OUT (when the device tool set it).
pack() {
  if [ -n "${OUT:-}" ] && [ "$dry" -eq 0 ]; then
    mkdir -p "$OUT"
    tar -czf "$OUT/results.tar.gz.part" -C "$out" . && mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
    cp "$summary" "$OUT/summary.txt"
  fi
}
start=$(date +%s)
# --dry-run: a virtual clock that charges each step its whole timeout.
dry_spent=0

say() { echo "$*" | tee -a "$summary"; }

if [ ! -x "$kit/sluice" ]; then
  say "error: $kit/sluice is missing; run scripts/device/kit.sh here and carry device-kit"
  exit 2
fi
sluice="$kit/sluice"
say "kit: $(head -c 12 "$kit/commit" 2>/dev/null || echo unknown) built on $(cat "$kit/glibc" 2>/dev/null || echo unknown); budget ${budget}s"

# step NAME TIMEOUT CMD...: runs CMD under TIMEOUT seconds if the budget allows.
step() {
  local name=$1 t=$2
  shift 2
  if [ -n "$only" ] && [[ "$only" != *",$name,"* ]]; then
    say "$name skipped: not in --only"
    return 1
  fi
  local left=$((budget - ($(date +%s) - start) - dry_spent))
  if [ "$t" -gt "$left" ]; then
    say "$name skipped: needs up to ${t}s, ${left}s of the budget left"
    return 1
  fi
  if [ "$dry" -eq 1 ]; then
    say "$name would run (up to ${t}s): $*"
    dry_spent=$((dry_spent + t))
    return 0
  fi
  local t0 rc
  t0=$(date +%s)
  timeout -k 5 "$t" "$@" > "$out/$name.out" 2> "$out/$name.err"
  rc=$?
  say "$name rc=$rc $(($(date +%s) - t0))s$([ "$rc" -eq 124 ] && echo ' (timed out)')"
  tail -c 1500 "$out/$name.out" | sed "s/^/  [$name] /"
  [ "$rc" -eq 0 ] || tail -c 1500 "$out/$name.err" | sed "s/^/  [$name err] /"
  pack
  return "$rc"
}

# shellcheck disable=SC2016  # expanded by the inner shell
step machine 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv
  nvidia-smi; uname -a; nproc; ldd --version 2>&1 | sed -n 1p
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; true'

# The driver library: the machine's loader path, else the usual driver folders.
if [ "$dry" -eq 0 ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu; do
    if [ -e "$d/libcuda.so.1" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      say "libcuda: $d (not in ldconfig's cache)"
      break
    fi
  done
fi

# NVRTC: the machine's own if it has one, else the kit's (CUDA 12.4.1).
if [ "$dry" -eq 1 ]; then
  say "nvrtc: would use the machine's libnvrtc.so.12, else unpack $kit/nvrtc.tar.xz"
elif ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.12 '; then
  nv="${TMPDIR:-/tmp}/sluice-nvrtc"
  mkdir -p "$nv"
  if tar -xJf "$kit/nvrtc.tar.xz" -C "$nv" 2>> "$out/machine.err"; then
    export LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "nvrtc: the kit's, unpacked in $nv"
  else
    say "nvrtc: none on the machine and the kit's did not unpack; real layers will fail"
  fi
else
  say "nvrtc: the machine's"
fi

# 0. The driver on hardware (launch, prologue, flag, VirtualQueue; green
#    contexts on CUDA >= 12.4).
step driver-test 90 "$kit/sluice-cuda-tests" real --test-threads=1 --nocapture
# 0b. Where the synthetic kernels' per-kernel time goes (the preemption
#     flag's memory: none, device, host-mapped), a printed table.
step flag-cost 60 "$kit/sluice-cuda-tests" flag_cost --ignored --nocapture
# 1. Correctness of the real layers (Small builds).
correct=1
step check-small 120 "$sluice" check --device cuda --small || correct=0
# 1c. Users' models: torchvision's resnet50, mobilenet_v2 and vgg16 exported to ONNX
# here (random weights), run by `sluice run --device cuda` against torch's outputs.
step onnx-torchvision 240 python3 scripts/device/torchvision-onnx.py --sluice "$sluice" --out "$out/onnx"
# 3. Preemption latency (REEF Fig. 19): synthetic kernels, not the real layers.
step preempt 90 "$sluice" bench preempt --device cuda --json
# 2. Measured kernel profiles (manifests), two models first.
profile() {
  if [ "$correct" -eq 0 ]; then
    say "profile-$1 skipped: check-small did not pass (failed or skipped)"
    return 1
  fi
  step "profile-$1" 60 "$sluice" profile --device cuda "$1" --reps 10 --out "$out/models/$1.json"
}
profile vgg19
profile resnet152
# 7. Green-context partitions: latency curve and switch cost.
step partitions-resnet152 90 "$sluice" profile --device cuda resnet152 \
  --partitions 10,25,50,75,100 --batches 1,8 --reps 10 --json
# 7b. L(b, p) tables of gpulet's scen3 models (mobilenet, resnet50, vgg16) on green contexts,
# batches 1-32 and every 10 % (the sizes the planners choose from), written into manifests
# under tables/ that `sluice bench cluster|trace|gpulet --tables DIR --tables-device NAME` read.
# shellcheck disable=SC2016  # expanded by the inner shell
step tables-scen3 150 bash -c 'mkdir -p "$2/tables" && for m in mobilenet resnet50 vgg16; do
    "$1" profile --device cuda "$m" --partitions 10,20,30,40,50,60,70,80,90,100 \
      --batches 1,2,4,8,16,32 --reps 3 --json --out "$2/tables/$m.json" || exit 1; done' _ "$sluice" "$out"
# 7c. Pairwise interference of the same models: two partitions of one GPU busy at once, each
# model at batch 8 timed alone and beside the other, for each pair and split (JSON per run).
# shellcheck disable=SC2016  # expanded by the inner shell
step interference-scen3 150 bash -c 'mkdir -p "$2/interference" && ms="mobilenet resnet50 vgg16"
  for a in $ms; do for b in $ms; do
    if [ "$a" = "$b" ]; then splits="20 50"; elif [[ "$a" < "$b" ]]; then splits="20 50 80"; else continue; fi
    for p in $splits; do
      "$1" profile --device cuda "$a" --pair "$b" --split "$p" --batches 8,8 --reps 5 --json \
        > "$2/interference/$a+$b-$p.json" || exit 1
    done; done; done' _ "$sluice" "$out"
# 4. DISB on the device.
step disb 150 "$sluice" bench disb --device cuda --workload all --policy reef,streams --json
# 4b. DISB on the DISB models' ONNX files (seeded weights, made here; 1.9 GiB, kept out of the
# results folder): their real layers through the daemon's CUDA server, per policy.
onnx_models="${TMPDIR:-/tmp}/sluice-disb-onnx"
step disb-onnx-models 90 python3 scripts/onnx/make-disb-models.py --out "$onnx_models"
step disb-onnx 180 "$sluice" bench disb --device cuda --models "$onnx_models/models" \
  --workload all --policy reef,streams --json
profile bert_base
profile gpt2
# 5. The daemon's job path with real layers and client processes.
step demo 60 "$sluice" demo --backend cuda --seconds 10 --json
step demo-onnx 90 "$sluice" demo --backend cuda --models "$onnx_models/models" \
  --be-model resnet152,yolov3 --seconds 10 --json
step partitions-vgg19 90 "$sluice" profile --device cuda vgg19 \
  --partitions 10,25,50,75,100 --batches 1,8 --reps 10 --json
step partitions-bert_base 90 "$sluice" profile --device cuda bert_base \
  --partitions 10,25,50,75,100 --batches 1,8 --reps 10 --json
step partitions-gpt2 90 "$sluice" profile --device cuda gpt2 \
  --partitions 10,25,50,75,100 --batches 1,8 --reps 10 --json
# 1b. One Full model against the CPU reference (the reference takes minutes).
step check-vgg19 180 "$sluice" check --device cuda vgg19

say "done in $(($(date +%s) - start + dry_spent))s of ${budget}s$([ "$dry" -eq 1 ] && echo ' (dry run: every step charged its timeout)')"
pack
exit 0
