#!/usr/bin/env bash
# Report whether sluice's patched modules are installed and loaded, their
# versions, and whether the capability ioctls answer.
#
#   scripts/kmod/status.sh [--dry-run] [--vendor all|nvidia|amd]
#
# Per vendor: what install.sh recorded (/var/lib/sluice-kmod/VENDOR.state),
# the DKMS status of sluice's package, the module file depmod resolves, the
# loaded module (NVIDIA: /sys/module/nvidia/parameters/sluice_abi exists only
# in the patched module; AMD: the loaded srcversion against the installed
# patched file's), and the capability ioctl, asked by
# ioctl/examples/sluice_kmod_status.rs (built with cargo, or the binary named
# by SLUICE_KMOD_STATUS_BIN). Reading /dev/nvidiactl and /dev/kfd needs the
# daemon's permissions (root, or the video/render groups).
#
# --dry-run lists the checks without running them (status changes nothing
# either way; the dry run also skips building the ioctl example).
# Exit status: 0 when for every vendor checked the patched module is loaded
# and its ioctl answers, 3 otherwise, 64 bad usage.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

dry=0 which=all
while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) dry=1 ;;
	--vendor) which=${2:?--vendor needs all, nvidia or amd}; shift ;;
	--vendor=*) which=${1#*=} ;;
	-h | --help) sed -n '/^set -euo/q; 2,$p' "$0"; exit 0 ;;
	*) printf 'error: unknown argument %s (see --help)\n' "$1" >&2; exit 64 ;;
	esac
	shift
done
case $which in all | nvidia | amd) ;; *) printf 'error: --vendor %s: use all, nvidia or amd\n' "$which" >&2; exit 64 ;; esac

krel=$(uname -r)
sys=${SLUICE_KMOD_SYSFS:-/sys}
row() { printf '  %-22s %s\n' "$1" "$2"; }

if [ $dry -eq 1 ]; then
	say "sluice kmod status --dry-run: the checks it runs (all read-only):"
	say "  - kernel: uname -r against kmod-patches/pins.env"
	say "  - GPUs: PCI vendors in $sys/class/drm/*/device/vendor (else lspci -n)"
	say "  - per vendor: $KMOD_STATE_DIR/VENDOR.state; dkms status -m sluice-nvidia-open|sluice-amdgpu;"
	say "    modinfo -n nvidia|amdgpu -k KREL (the file depmod resolves); $sys/module/nvidia/{version,parameters/sluice_abi},"
	say "    $sys/module/amdgpu/srcversion against modinfo -F srcversion of the installed patched amdgpu.ko"
	say "  - capability ioctls: ${SLUICE_KMOD_STATUS_BIN:-cargo run --release -p sluice-ioctl --example sluice_kmod_status} $which"
	exit 0
fi

pinned=no
for s in 6.1 6.12; do
	v=LINUX_${s//./_}_KREL
	[ "$krel" = "${!v}" ] && pinned="yes (series $s)"
done
say "sluice kmod status"
row "kernel" "$krel, pinned: $pinned"
vendors=$(gpu_vendors)
row "GPU PCI vendors" "$(printf '%s' "${vendors:-none}" | tr '\n' ' ')"

bad=0

# `dkms status -m NAME` on one line, "none" when DKMS does not know NAME.
dkms_line() {
	local l
	l=$(dkms status -m "$1" 2>/dev/null | tr '\n' ';' | sed 's/;$//')
	printf '%s\n' "${l:-none}"
}

status_nvidia() {
	local ver loaded abi file
	say ""
	say "NVIDIA"
	ver=$(state_get nvidia DKMS_VERSION)
	if [ -n "$ver" ]; then
		row "install.sh record" "$NV_SLUICE_DKMS_NAME/$ver for $(state_get nvidia KREL)"
	else
		row "install.sh record" "none"
	fi
	if command -v dkms >/dev/null; then
		row "dkms" "$(dkms_line "$NV_SLUICE_DKMS_NAME")"
		row "dkms (stock)" "$(dkms_line "$NV_DKMS_NAME")"
	else
		row "dkms" "not installed"
	fi
	file=$(modinfo -k "$krel" -n nvidia 2>/dev/null || true)
	if [ -n "$file" ]; then
		if modinfo -F parm "$file" 2>/dev/null | grep -q '^sluice_abi:'; then
			row "module file" "$file (patched)"
		else
			row "module file" "$file (stock)"
		fi
	else
		row "module file" "none for $krel"
	fi
	if [ -d "$sys/module/nvidia" ]; then
		loaded=$(cat "$sys/module/nvidia/version" 2>/dev/null || echo '?')
		if [ -r "$sys/module/nvidia/parameters/sluice_abi" ]; then
			abi=$(cat "$sys/module/nvidia/parameters/sluice_abi")
			row "loaded module" "nvidia $loaded, patched (sluice ABI $((abi >> 16)).$((abi & 0xffff)))"
		else
			row "loaded module" "nvidia $loaded, stock (no sluice_abi parameter)"
			bad=1
		fi
	else
		row "loaded module" "nvidia is not loaded"
		bad=1
	fi
}

status_amd() {
	local ver file installed loaded
	say ""
	say "AMD"
	ver=$(state_get amd DKMS_VERSION)
	if [ -n "$ver" ]; then
		row "install.sh record" "sluice-amdgpu/$ver for $(state_get amd KREL)"
	else
		row "install.sh record" "none"
	fi
	if command -v dkms >/dev/null; then
		row "dkms" "$(dkms_line sluice-amdgpu)"
	else
		row "dkms" "not installed"
	fi
	file=$(modinfo -k "$krel" -n amdgpu 2>/dev/null || true)
	case $file in
	*/updates/dkms/*) row "module file" "$file (sluice-amdgpu, preferred by depmod)" ;;
	"") row "module file" "none for $krel" ;;
	*) row "module file" "$file (in-tree, stock)" ;;
	esac
	if [ -r "$sys/module/amdgpu/srcversion" ]; then
		loaded=$(cat "$sys/module/amdgpu/srcversion")
		installed=$(modinfo -F srcversion "/lib/modules/$krel/updates/dkms/amdgpu.ko" 2>/dev/null ||
			modinfo -F srcversion "/lib/modules/$krel/updates/dkms/amdgpu.ko.xz" 2>/dev/null || true)
		if [ -n "$installed" ] && [ "$loaded" = "$installed" ]; then
			row "loaded module" "amdgpu srcversion $loaded, the patched one"
		else
			row "loaded module" "amdgpu srcversion $loaded, not the patched one${installed:+ ($installed)}"
			bad=1
		fi
	else
		row "loaded module" "amdgpu is not loaded"
		bad=1
	fi
}

[ "$which" = amd ] || status_nvidia
[ "$which" = nvidia ] || status_amd

say ""
say "Capability ioctls"
out=""
if [ -n "${SLUICE_KMOD_STATUS_BIN:-}" ]; then
	out=$("$SLUICE_KMOD_STATUS_BIN" "$which" 2>&1) || true
elif command -v cargo >/dev/null; then
	out=$(cd "$KMOD_REPO" && cargo run -q --release -p sluice-ioctl --example sluice_kmod_status -- "$which" 2>&1) || true
else
	out="skipped: no cargo; build ioctl/examples/sluice_kmod_status.rs elsewhere and set SLUICE_KMOD_STATUS_BIN"
fi
printf '%s\n' "$out" | sed 's/^/  /'
for v in nvidia amd; do
	[ "$which" = all ] || [ "$which" = "$v" ] || continue
	grep -q "^$v device=.* state=patched" <<<"$out" || bad=1
done

exit $((bad ? 3 : 0))
