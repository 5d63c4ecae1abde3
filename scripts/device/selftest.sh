#!/usr/bin/env bash
# Checks scripts/device/run.sh without a GPU: a stub kit whose `sluice` and
# test binary only echo (and whose `check` can fail), run in a scratch OUT.
# What it checks: every step is reported in summary.txt, a failed correctness
# check skips the real-layer profiles and nothing else, the budget skips the
# steps that no longer fit and says so, the kit's NVRTC is unpacked when the
# machine has none, the results come back packed (the device tool returns at
# most 8 files from $OUT), and a missing kit is refused with exit 2.
# Usage: scripts/device/selftest.sh   (CI runs it)
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
kit="$tmp/kit"
mkdir -p "$kit" "$tmp/nvrtc-src"
cat > "$kit/sluice" <<'STUB'
#!/bin/sh
if [ "$1" = check ]; then echo "stub check"; exit "${STUB_CHECK_RC:-0}"; fi
echo "stub sluice $*"
STUB
printf '#!/bin/sh\necho "stub tests $*"\n' > "$kit/sluice-cuda-tests"
chmod +x "$kit/sluice" "$kit/sluice-cuda-tests"
echo "0123456789abcdef" > "$kit/commit"
echo "stub glibc" > "$kit/glibc"
touch "$tmp/nvrtc-src/libnvrtc.so.12" "$tmp/nvrtc-src/libnvrtc-builtins.so.12.4"
tar -cJf "$kit/nvrtc.tar.xz" -C "$tmp/nvrtc-src" libnvrtc.so.12 libnvrtc-builtins.so.12.4

fail=0
expect() { # expect FILE PATTERN WHAT
  if ! grep -qE "$2" "$1"; then
    echo "selftest: FAIL: $3 (no line matching /$2/ in $1):" >&2
    sed 's/^/  /' "$1" >&2
    fail=1
  fi
}
reject() { # reject FILE PATTERN WHAT
  if grep -qE "$2" "$1"; then
    echo "selftest: FAIL: $3 (a line matches /$2/ in $1)" >&2
    fail=1
  fi
}

# 1. The whole run, the correctness check failing.
out1="$tmp/res1"
SLUICE_DEVICE_KIT="$kit" OUT="$tmp/ret1" SLUICE_RESULTS="$out1" TMPDIR="$tmp" STUB_CHECK_RC=1 \
  scripts/device/run.sh --budget 2000 > "$tmp/run1.log"
s="$out1/summary.txt"
expect "$s" '^check-small rc=1 ' "the failed check is reported with its exit status"
for p in vgg19 resnet152 bert_base gpt2; do
  expect "$s" "^profile-$p skipped: check-small did not pass" "profile-$p is skipped after a failed check"
done
for n in machine driver-test flag-cost preempt partitions-resnet152 disb demo partitions-vgg19; do
  expect "$s" "^$n rc=0 " "$n still runs after a failed check"
done
expect "$out1/preempt.out" 'stub sluice bench preempt --device cuda --json' "a step's stdout lands in NAME.out"
expect "$out1/driver-test.out" 'stub tests real' "the driver test runs from the kit"
expect "$s" '^nvrtc: (the kit.s, unpacked|the machine.s)' "NVRTC is set up"
expect "$s" '^done in ' "the run ends with its time"
expect "$tmp/run1.log" '^  \[preempt\] stub sluice bench preempt' "a step's last lines are echoed"
# What the device tool brings back: two files, the pack holding every step's output.
returned=$(find "$tmp/ret1" -type f | wc -l)
[ "$returned" -eq 2 ] || { echo "selftest: FAIL: OUT holds $returned files, not results.tar.gz and summary.txt" >&2; fail=1; }
mkdir -p "$tmp/unpacked"
tar -xzf "$tmp/ret1/results.tar.gz" -C "$tmp/unpacked"
expect "$tmp/unpacked/partitions-vgg19.out" 'stub sluice profile --device cuda vgg19' "the pack holds the last step's output"
expect "$tmp/ret1/summary.txt" '^done in ' "the returned summary is the whole one"

# 2. A budget that fits only some steps: the rest are skipped, saying why.
out2="$tmp/res2"
SLUICE_DEVICE_KIT="$kit" SLUICE_RESULTS="$out2" TMPDIR="$tmp" \
  scripts/device/run.sh --budget 100 > "$tmp/run2.log"
s="$out2/summary.txt"
expect "$s" '^driver-test rc=0 ' "a step within the budget runs"
expect "$s" '^check-small skipped: needs up to 120s, [0-9]+s of the budget left' "a step over the budget is skipped"
reject "$s" '^disb rc=' "disb (150 s) must not run on a 100 s budget"

# 3. --only: just the named steps run; the rest say they were not asked for.
out5="$tmp/res5"
SLUICE_DEVICE_KIT="$kit" SLUICE_RESULTS="$out5" TMPDIR="$tmp" \
  scripts/device/run.sh --budget 2000 --only driver-test,flag-cost > "$tmp/run5.log"
s="$out5/summary.txt"
expect "$s" '^flag-cost rc=0 ' "a step named in --only runs"
expect "$out5/flag-cost.out" 'stub tests flag_cost --ignored' "the flag-cost step runs the ignored measurement"
expect "$s" '^preempt skipped: not in --only' "a step not named in --only is skipped, saying so"
reject "$s" '^machine rc=' "machine is not in --only"

# 4. No kit: refused, naming the fix.
rc=0
SLUICE_DEVICE_KIT="$tmp/none" SLUICE_RESULTS="$tmp/res3" scripts/device/run.sh > "$tmp/run3.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "selftest: FAIL: a missing kit exits $rc, not 2" >&2; fail=1; }
expect "$tmp/run3.log" 'scripts/device/kit.sh' "a missing kit names the command that builds it"

# 5. A bad budget is refused.
rc=0
SLUICE_DEVICE_KIT="$kit" SLUICE_RESULTS="$tmp/res4" scripts/device/run.sh --budget soon > "$tmp/run4.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { echo "selftest: FAIL: --budget soon exits $rc, not 2" >&2; fail=1; }

if [ "$fail" -eq 0 ]; then
  echo "device run selftest: ok (5 cases)"
fi
exit "$fail"
