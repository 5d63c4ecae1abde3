#!/usr/bin/env bash
# Remove what scripts/kmod/install.sh installed and restore the stock
# modules.
#
#   sudo scripts/kmod/uninstall.sh [--dry-run] [--vendor all|nvidia|amd]
#                                  [--reload]
#
# Reads /var/lib/sluice-kmod/VENDOR.state (written by install.sh); a sluice
# DKMS package found without a state file (e.g. installed by hand) is
# removed too.
#   NVIDIA  builds Debian's stock nvidia-current-open for the kernel first
#           (while the patched one is still installed), then removes
#           sluice-nvidia-open from DKMS and installs the stock build in its
#           place; if that fails, the patched one is put back. Then unholds
#           nvidia-open-kernel-dkms (if install.sh held it) and deletes
#           /usr/src/sluice-nvidia-open-*.
#   AMD     removes sluice-amdgpu from DKMS, so depmod picks the in-tree
#           amdgpu.ko again, refreshes the initramfs if it carries amdgpu,
#           and deletes /usr/src/sluice-amdgpu-* and /var/cache/sluice-kmod.
# Prerequisites install.sh added with apt (dkms, headers) stay installed.
# The stock module is used from the next boot, or now with --reload.
#
# --dry-run prints each command it would run and why, changing nothing.
# Exit status: 0 done (or nothing to do), 1 failed, 64 bad usage.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

dry=0 which=all reload=0
while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) dry=1 ;;
	--vendor) which=${2:?--vendor needs all, nvidia or amd}; shift ;;
	--vendor=*) which=${1#*=} ;;
	--reload) reload=1 ;;
	-h | --help) sed -n '/^set -euo/q; 2,$p' "$0"; exit 0 ;;
	*) printf 'error: unknown argument %s (see --help)\n' "$1" >&2; exit 64 ;;
	esac
	shift
done
case $which in all | nvidia | amd) ;; *) printf 'error: --vendor %s: use all, nvidia or amd\n' "$which" >&2; exit 64 ;; esac
if [ $dry -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
	die "must run as root (or pass --dry-run)"
fi

refusals=()
undo=()
say "sluice kmod uninstall$([ $dry -eq 1 ] && echo ' --dry-run (nothing is changed)')"

# DKMS versions of NAME registered, one per line.
dkms_versions() {
	command -v dkms >/dev/null || return 0
	dkms status -m "$1" 2>/dev/null | sed -n "s|^$1/\\([^,:]*\\).*|\\1|p" | sort -u
}

# The first kernel DKMS has NAME/VERSION installed for (empty if none).
dkms_installed_kernel() {
	dkms status -m "$1" -v "$2" 2>/dev/null |
		awk -F', *' '/: installed/ { sub(/:.*/, "", $2); print $2; exit }'
}

did=0

uninstall_nvidia() {
	local krel ver stock held src sname sver
	krel=$(state_get nvidia KREL)
	ver=$(state_get nvidia DKMS_VERSION)
	stock=$(state_get nvidia STOCK_DKMS)
	held=$(state_get nvidia HELD)
	src=$(state_get nvidia SRC)
	if [ -z "$ver" ]; then
		ver=$(dkms_versions "$NV_SLUICE_DKMS_NAME" | head -n1)
		[ -n "$ver" ] || { say ""; say "NVIDIA: nothing installed by install.sh"; return 0; }
		note "no $KMOD_STATE_DIR/nvidia.state, but DKMS has $NV_SLUICE_DKMS_NAME/$ver: removing it"
		krel=$(dkms_installed_kernel "$NV_SLUICE_DKMS_NAME" "$ver")
		stock=$NV_DKMS_NAME/$NV_VERSION held=0
		src=/usr/src/$NV_SLUICE_DKMS_NAME-$ver
	fi
	sname=${stock%/*} sver=${stock#*/}
	did=1
	say ""
	say "NVIDIA (remove $NV_SLUICE_DKMS_NAME/$ver${krel:+, restore $stock on $krel}):"
	local have_stock=1
	if [ -z "$krel" ]; then
		have_stock=0
		note "$NV_SLUICE_DKMS_NAME/$ver is not installed for any kernel: nothing to restore"
	elif [ ! -d "/usr/src/$sname-$sver" ]; then
		have_stock=0
		note "/usr/src/$sname-$sver is gone (nvidia-open-kernel-dkms removed?): the stock module cannot be rebuilt; reinstall nvidia-open-kernel-dkms=$NV_DEB_VERSION afterwards"
	fi
	if [ $have_stock -eq 1 ]; then
		step "build the stock module first, while the patched one stays installed" \
			dkms build -m "$sname" -v "$sver" -k "$krel"
	fi
	step "remove the patched modules from every kernel and from DKMS" \
		dkms remove -m "$NV_SLUICE_DKMS_NAME" -v "$ver" --all
	[ $dry -eq 1 ] || on_undo "dkms add -m '$NV_SLUICE_DKMS_NAME' -v '$ver' && dkms install -m '$NV_SLUICE_DKMS_NAME' -v '$ver' -k '$krel'"
	if [ $have_stock -eq 1 ]; then
		if ! step "install the stock build as /lib/modules/$krel/updates/dkms/$NV_DKMS_NAME*.ko" \
			dkms install -m "$sname" -v "$sver" -k "$krel"; then
			rollback
			die "installing the stock $stock failed; the patched module was put back"
		fi
	fi
	undo=()
	if [ "$held" = 1 ]; then
		step "install.sh held it: let apt upgrade it again" apt-mark unhold nvidia-open-kernel-dkms
	fi
	step "delete the patched source" rm -rf "$src"
	step "forget the install" rm -f "$KMOD_STATE_DIR/nvidia.state"
	if [ $reload -eq 1 ]; then
		step "unload the patched modules (fails while a display server or CUDA process holds them)" \
			modprobe -r nvidia_drm nvidia_modeset nvidia_uvm nvidia || note "could not unload: reboot to use the stock module"
		step "load the stock module" modprobe nvidia || true
	fi
}

uninstall_amd() {
	local krel ver src
	krel=$(state_get amd KREL)
	ver=$(state_get amd DKMS_VERSION)
	src=$(state_get amd SRC)
	if [ -z "$ver" ]; then
		ver=$(dkms_versions sluice-amdgpu | head -n1)
		[ -n "$ver" ] || { say ""; say "AMD: nothing installed by install.sh"; return 0; }
		note "no $KMOD_STATE_DIR/amd.state, but DKMS has sluice-amdgpu/$ver: removing it"
		krel=$(dkms_installed_kernel sluice-amdgpu "$ver") src=/usr/src/sluice-amdgpu-$ver
	fi
	did=1
	say ""
	say "AMD (remove sluice-amdgpu/$ver; the in-tree amdgpu.ko of $krel takes over again):"
	step "remove updates/dkms/amdgpu.ko from every kernel and the package from DKMS (dkms runs depmod)" \
		dkms remove -m sluice-amdgpu -v "$ver" --all
	if [ -n "$krel" ] && { [ $dry -eq 1 ] || lsinitramfs "/boot/initrd.img-$krel" 2>/dev/null | grep -q '/amdgpu\.ko'; }; then
		step "only if /boot/initrd.img-$krel carries amdgpu.ko: refresh it with the stock module" \
			update-initramfs -u -k "$krel"
	fi
	step "delete the staged source" rm -rf "$src"
	step "delete the build cache (the prepared kernel tree)" rm -rf /var/cache/sluice-kmod
	step "forget the install" rm -f "$KMOD_STATE_DIR/amd.state"
	if [ $reload -eq 1 ]; then
		step "unload the patched amdgpu (fails while a display server or ROCm process holds it)" \
			modprobe -r amdgpu || note "could not unload: reboot to use the stock module"
		step "load the stock module" modprobe amdgpu || true
	fi
}

on_exit() {
	local rc=$?
	[ $rc -eq 0 ] || log "uninstall stopped on an error (status $rc); see the lines above"
}
trap on_exit EXIT
[ "$which" = amd ] || uninstall_nvidia
[ "$which" = nvidia ] || uninstall_amd

say ""
if [ $did -eq 0 ]; then
	say "Nothing to remove."
elif [ $reload -eq 0 ]; then
	say "Done$([ $dry -eq 1 ] && echo ' (dry run)'). The stock module loads at the next boot (or rerun with --reload)."
fi
