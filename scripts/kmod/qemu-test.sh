#!/usr/bin/env bash
# Kernel-level test of sluice's amdkfd patches without a GPU: boot Debian's
# pinned kernel in QEMU with the patched amdgpu.ko and the static
# kfd_selftest (ioctl/examples/kfd_selftest.rs), which checks every
# validation path of the new ioctls through sluice_ioctl::amd.
#
#   scripts/kmod/qemu-test.sh [6.1|6.12]      (default 6.1)
#
# Environment:
#   SLUICE_QEMU_ACCEL  tcg (default) or kvm; kvm is opt-in because nested
#                      KVM on the development machine hung before the guest's
#                      first console line, while TCG boots and tests in under a minute
#   SLUICE_QEMU_TIMEOUT  seconds the guest may run (default 600)
#   SLUICE_KMOD_CACHE  cache directory (default ~/.cache/sluice/kmod)
#
# Exits 0 only when the guest printed `kfd selftest: N passed, 0 failed`.
# The serial console log is kept in $SLUICE_KMOD_CACHE/qemu-KREL.log.
set -euo pipefail
. "$(dirname "$0")/qemu/common.sh"

want=${1:-6.1}
case $want in -h | --help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;; esac
kmod_series "$want"
accel=${SLUICE_QEMU_ACCEL:-tcg}
guest_timeout=${SLUICE_QEMU_TIMEOUT:-600}
t_start=$(now)

kmod_apt_sources
kmod_apt_install busybox-static cpio kmod gzip
if ! command -v qemu-system-x86_64 >/dev/null; then
	# bookworm's qemu-system-x86 conflicts with bookworm-backports'
	# qemu-utils when that is installed; take backports' then.
	if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo; then
		kmod_apt_install -t bookworm-backports -- qemu-system-x86
	else
		kmod_apt_install qemu-system-x86
	fi
fi

# 1. the patched module (cached by series hash and kernel release)
t=$(now)
ko=$("$KMOD_REPO/scripts/kmod/build-amdgpu.sh" "$SERIES")
t_module=$(($(now) - t))

# 2. the static selftest
t=$(now)
log "building the static kfd_selftest"
(cd "$KMOD_REPO" && RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -q \
	-p sluice-ioctl --example kfd_selftest --target x86_64-unknown-linux-gnu)
selftest=${CARGO_TARGET_DIR:-$KMOD_REPO/target}/x86_64-unknown-linux-gnu/release/examples/kfd_selftest
[ -x "$selftest" ] || die "cargo did not produce $selftest"
t_selftest=$(($(now) - t))

# 3. the pinned kernel image, its modules, and the initramfs
t=$(now)
img_deb=$(kmod_fetch_deb "linux-image-$KREL" "$KVERSION")
img=$KMOD_CACHE/image-$KREL
if [ ! -f "$img/.sluice-unpacked" ]; then
	log "unpacking $(basename "$img_deb")"
	rm -rf "$img"
	dpkg-deb -x "$img_deb" "$img"
	touch "$img/.sluice-unpacked"
fi
vmlinuz=$img/boot/vmlinuz-$KREL
[ -f "$vmlinuz" ] || die "$img_deb has no boot/vmlinuz-$KREL"

# Put the patched module where depmod looks first and let modules.dep name
# its dependencies, in load order (a dependency after what needs it).
mkdir -p "$img/lib/modules/$KREL/updates"
cp "$ko" "$img/lib/modules/$KREL/updates/amdgpu.ko"
depmod -b "$img" "$KREL"
dep_line=$(grep '^updates/amdgpu.ko:' "$img/lib/modules/$KREL/modules.dep") ||
	die "depmod did not list updates/amdgpu.ko in $img/lib/modules/$KREL/modules.dep"
read -r -a deps <<<"${dep_line#*:}"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,tmp,modules}
cp /bin/busybox "$root/bin/busybox"
cp "$KMOD_REPO/scripts/kmod/qemu/init.sh" "$root/init"
chmod +x "$root/init"
cp "$selftest" "$root/kfd_selftest"
order=()
for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
	src=$img/lib/modules/$KREL/${deps[i]}
	name=$(basename "${deps[i]}")
	case $name in
	*.ko.xz) xz -dc "$src" >"$root/modules/${name%.xz}"; name=${name%.xz} ;;
	*.ko.zst) zstd -qdc "$src" >"$root/modules/${name%.zst}"; name=${name%.zst} ;;
	*) cp "$src" "$root/modules/$name" ;;
	esac
	order+=("$name")
done
cp "$ko" "$root/modules/amdgpu.ko"
order+=(amdgpu.ko)
printf '%s\n' "${order[@]}" >"$root/modules/order"
initrd=$KMOD_CACHE/initramfs-$KREL.cpio.gz
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$initrd")
t_initrd=$(($(now) - t))
log "initramfs: ${order[*]} + busybox + kfd_selftest ($(du -h "$initrd" | cut -f1))"

# 4. boot
case $accel in
kvm | tcg) ;;
*) die "SLUICE_QEMU_ACCEL must be tcg or kvm, not '$accel'" ;;
esac
serial=$KMOD_CACHE/qemu-$KREL.log
log "booting $KREL in QEMU ($accel), console in $serial"
t=$(now)
rc=0
timeout "$guest_timeout" qemu-system-x86_64 \
	-accel "$accel" -m 2048 -smp 2 -no-reboot \
	-display none -monitor none -serial "file:$serial" \
	-kernel "$vmlinuz" -initrd "$initrd" \
	-append "console=ttyS0 panic=-1 quiet loglevel=4" </dev/null || rc=$?
t_boot=$(($(now) - t))

grep -E '^(ok|FAIL) |^sluice-qemu:|^kfd selftest:' "$serial" | tr -d '\r' || true
result=$(grep -aE '^kfd selftest: [0-9]+ passed, [0-9]+ failed' "$serial" | tail -n1 | tr -d '\r' || true)
echo "timings: module ${t_module}s, selftest build ${t_selftest}s, initramfs ${t_initrd}s, boot+test ${t_boot}s ($accel), total $(($(now) - t_start))s"
if [ $rc -eq 124 ]; then
	die "the guest did not finish within ${guest_timeout}s (SLUICE_QEMU_TIMEOUT); console log: $serial"
fi
[ -n "$result" ] || die "the guest printed no 'kfd selftest: N passed, M failed' line (qemu exit $rc); console log: $serial"
echo "$result"
case $result in
*" 0 failed") exit 0 ;;
*) die "kfd selftest failed; console log: $serial" ;;
esac
