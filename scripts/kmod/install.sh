#!/usr/bin/env bash
# Install sluice's driver patches on a testbed with DKMS, so the patched
# modules take precedence over the stock ones.
#
#   sudo scripts/kmod/install.sh [--dry-run] [--vendor auto|nvidia|amd]
#                                [--kernel KREL] [--reload]
#
# What it does, per GPU vendor found (/sys/class/drm/*/device/vendor, else
# lspci: 0x10de NVIDIA, 0x1002 AMD):
#   checks  Debian 12; the kernel (uname -r, or --kernel) is one of the
#           pinned ones in kmod-patches/pins.env and comes from Debian's
#           package of the pinned version; NVIDIA: the open kernel modules
#           of the pinned version (or none yet), not the closed ones, and no
#           other driver version loaded or in user space; Secure Boot state.
#           Any failed check refuses the whole install, before any change.
#   installs prerequisites with apt: dkms, the kernel's headers, NVIDIA:
#           nvidia-open-kernel-dkms=PIN; AMD: linux-source-SERIES=PIN and
#           the kernel build tools.
#   stages  a DKMS source tree under /usr/src (NVIDIA: Debian's
#           nvidia-current-open tree + kmod-patches/nvidia-open/*.patch; AMD:
#           kmod-patches/amdgpu/SERIES/ + the build recipe
#           scripts/kmod/build-amdgpu.sh), `dkms add` and `dkms build` it.
#           Nothing the running system loads has changed yet.
#   commits NVIDIA: removes Debian's nvidia-current-open build for this
#           kernel and installs sluice-nvidia-open in its place (same module
#           file names, /lib/modules/KREL/updates/dkms), holds
#           nvidia-open-kernel-dkms so an upgrade cannot put the stock build
#           back. AMD: installs sluice-amdgpu (updates/dkms/amdgpu.ko, which
#           depmod prefers to the in-tree kernel/.../amdgpu.ko) and updates
#           the initramfs when it carries amdgpu. Records what it did in
#           /var/lib/sluice-kmod/VENDOR.state for uninstall.sh.
#   Any failure after the first change rolls every change back, in reverse
#   order, so the machine is left as it was (apt prerequisites stay).
#
# SLUICE_KMOD_SYSFS=DIR reads DIR instead of /sys for the GPU and Secure
# Boot checks (for testing the checks; it does not fake anything else).
#
# Loading the patched module needs the old one unloaded: reboot, or pass
# --reload to try `modprobe -r` and `modprobe` now (fails while a display
# server or CUDA process holds the GPU).
#
# --dry-run runs every check and prints each command it would run and why,
# changing nothing; it exits as the real run would at the checks.
# Exit status: 0 done (or would be), 1 failed (rolled back), 2 refused by a
# check, 64 bad usage.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

dry=0 vendor=auto krel=$(uname -r) reload=0
while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) dry=1 ;;
	--vendor) vendor=${2:?--vendor needs auto, nvidia or amd}; shift ;;
	--vendor=*) vendor=${1#*=} ;;
	--kernel) krel=${2:?--kernel needs a kernel release}; shift ;;
	--kernel=*) krel=${1#*=} ;;
	--reload) reload=1 ;;
	-h | --help) sed -n '/^set -euo/q; 2,$p' "$0"; exit 0 ;;
	*) printf 'error: unknown argument %s (see --help)\n' "$1" >&2; exit 64 ;;
	esac
	shift
done
case $vendor in auto | nvidia | amd) ;; *) printf 'error: --vendor %s: use auto, nvidia or amd\n' "$vendor" >&2; exit 64 ;; esac

refusals=()
undo=()
committed=0
finish() {
	local rc=$?
	if [ $rc -ne 0 ] && [ $dry -eq 1 ]; then
		log "the dry run stopped on an error (status $rc); nothing was changed"
	fi
	if [ $rc -ne 0 ] && [ $dry -eq 0 ] && [ $committed -eq 0 ]; then
		rollback
		log "install failed; the changes above were rolled back"
		exit 1
	fi
}
trap finish EXIT

# --- checks ------------------------------------------------------------------
say "sluice kmod install$([ $dry -eq 1 ] && echo ' --dry-run (nothing is changed)')"
say ""
say "Checks:"

if [ $dry -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
	refuse "must run as root (or pass --dry-run)"
fi

codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [ "$codename" = bookworm ]; then
	ok "Debian 12 (bookworm)"
else
	refuse "this is '${codename:-unknown}', not Debian 12 (bookworm): the pins in kmod-patches/pins.env are bookworm packages"
fi

series="" kversion=""
for s in 6.1 6.12; do
	v=LINUX_${s//./_}
	kr=${v}_KREL kv=${v}_VERSION
	if [ "$krel" = "${!kr}" ]; then
		series=$s
		kversion=${!kv}
	fi
done
if [ -z "$series" ]; then
	refuse "kernel $krel is not a pinned one: install and boot $LINUX_6_1_KREL (linux-image-$LINUX_6_1_KREL=$LINUX_6_1_VERSION) or $LINUX_6_12_KREL (linux-image-$LINUX_6_12_KREL=$LINUX_6_12_VERSION, bookworm-backports)"
else
	img=$(deb_installed_version "linux-image-$krel")
	[ -n "$img" ] || img=$(deb_installed_version "linux-image-$krel-unsigned")
	if [ "$img" = "$kversion" ]; then
		ok "kernel $krel from Debian's linux-image $img (pinned, series $series)"
	else
		refuse "kernel $krel: Debian's linux-image-$krel is ${img:-not installed}, the pin is $kversion; sluice's patches are only built and tested for Debian's packaged kernels"
	fi
fi

vendors=$(gpu_vendors)
have_nv=0 have_amd=0
grep -qx 0x10de <<<"$vendors" && have_nv=1
grep -qx 0x1002 <<<"$vendors" && have_amd=1
say "  info    display devices' PCI vendors: $(printf '%s' "${vendors:-none}" | tr '\n' ' ')"
do_nv=0 do_amd=0
case $vendor in
auto) do_nv=$have_nv do_amd=$have_amd ;;
nvidia) do_nv=1 ;;
amd) do_amd=1 ;;
esac
if [ $do_nv -eq 1 ] && [ $have_nv -eq 0 ]; then
	refuse "--vendor nvidia, but no NVIDIA GPU (PCI vendor 0x10de) is present"
elif [ $do_amd -eq 1 ] && [ $have_amd -eq 0 ]; then
	refuse "--vendor amd, but no AMD GPU (PCI vendor 0x1002) is present"
elif [ $do_nv -eq 0 ] && [ $do_amd -eq 0 ]; then
	refuse "no supported GPU: no display device with PCI vendor 0x10de (NVIDIA) or 0x1002 (AMD) in /sys/class/drm/*/device/vendor or lspci"
fi

nv_open_have=$(deb_installed_version nvidia-open-kernel-dkms)
if [ $do_nv -eq 1 ] || [ $dry -eq 1 ]; then
	closed=$(deb_installed_version nvidia-kernel-dkms)
	if [ -n "$closed" ]; then
		refuse "nvidia: the closed NVIDIA kernel modules (nvidia-kernel-dkms $closed) are installed; sluice patches the open ones: apt-get install nvidia-open-kernel-dkms=$NV_DEB_VERSION (it replaces them), then rerun"
	fi
	if [ -n "$nv_open_have" ] && [ "$nv_open_have" != "$NV_DEB_VERSION" ]; then
		refuse "nvidia: nvidia-open-kernel-dkms $nv_open_have is installed, the pin is $NV_DEB_VERSION: apt-get install nvidia-open-kernel-dkms=$NV_DEB_VERSION first"
	elif [ -n "$nv_open_have" ]; then
		ok "nvidia: nvidia-open-kernel-dkms $nv_open_have (pinned)"
	else
		note "nvidia: nvidia-open-kernel-dkms is not installed; it will be ($NV_DEB_VERSION)"
	fi
	loaded=$(cat /sys/module/nvidia/version 2>/dev/null || true)
	if [ -n "$loaded" ] && [ "$loaded" != "$NV_VERSION" ]; then
		refuse "nvidia: the loaded nvidia module is version $loaded, not $NV_VERSION: another driver (e.g. a .run install) is in use; remove it first"
	fi
	cuda=$(deb_installed_version libcuda1)
	if [ -n "$cuda" ] && [ "${cuda%-*}" != "$NV_VERSION" ]; then
		refuse "nvidia: libcuda1 $cuda does not match the kernel driver $NV_VERSION: CUDA refuses a kernel module of another version; install libcuda1=$NV_DEB_VERSION"
	elif [ -z "$cuda" ]; then
		note "nvidia: libcuda1 is not installed: the module loads, but CUDA programs need libcuda1=$NV_DEB_VERSION (apt-get install nvidia-driver or libcuda1)"
	fi
fi

if [ $do_amd -eq 1 ] || [ $dry -eq 1 ]; then
	for s in ${series:-6.1 6.12}; do
		compgen -G "$KMOD_REPO/kmod-patches/amdgpu/$s/*.patch" >/dev/null ||
			refuse "amd: no amdgpu series for kernel $s in kmod-patches/amdgpu/$s"
	done
fi

for v in nvidia amd; do
	if [ -f "$KMOD_STATE_DIR/$v.state" ]; then
		refuse "$v: already installed by install.sh ($KMOD_STATE_DIR/$v.state); run scripts/kmod/uninstall.sh first"
	fi
done
for d in /usr/src/"$NV_SLUICE_DKMS_NAME"-* /usr/src/sluice-amdgpu-*; do
	[ -e "$d" ] && refuse "$d is left from an earlier install; run scripts/kmod/uninstall.sh (or remove it) first"
done
if command -v dkms >/dev/null; then
	for m in "$NV_SLUICE_DKMS_NAME" sluice-amdgpu; do
		left=$(dkms status -m "$m" 2>/dev/null || true)
		[ -z "$left" ] || refuse "DKMS still has $m ($left); run scripts/kmod/uninstall.sh first"
	done
fi

sb=$(secure_boot_state)
case $sb in
enabled)
	note "Secure Boot is enabled: the kernel only loads modules signed with an enrolled key."
	note "  DKMS signs what it builds with /var/lib/dkms/mok.key (created on first use)."
	note "  Enroll its certificate once: mokutil --import /var/lib/dkms/mok.pub, choose a"
	note "  one-time password, reboot, and confirm 'Enroll MOK' in the blue MOK manager."
	note "  Until then modprobe answers 'Key was rejected by service'."
	;;
unknown) note "Secure Boot state unknown (EFI system without mokutil/efivars); if it is on, see the MOK notes in kmod-patches/README.md" ;;
*) ok "Secure Boot disabled (unsigned modules load)" ;;
esac

# --- plan --------------------------------------------------------------------
plan_nvidia() {
	local krel=$1 ver src stage patches
	ver=$(nv_sluice_dkms_version)
	src=/usr/src/$NV_DKMS_NAME-$NV_VERSION
	stage=/usr/src/$NV_SLUICE_DKMS_NAME-$ver
	patches=$(nv_patches | sed "s|^$KMOD_REPO/||" | tr '\n' ' ')
	say ""
	say "NVIDIA (open kernel modules $NV_VERSION, kernel $krel):"
	SHOW="write /etc/apt/sources.list.d/sluice-extra.sources if missing; apt-get update" \
		step "bookworm contrib (nvidia-open-kernel-dkms) and backports as apt sources" kmod_apt_sources
	SHOW="apt-get install -y --no-install-recommends dkms patch linux-headers-$krel nvidia-open-kernel-dkms=$NV_DEB_VERSION" \
		step "prerequisites (Debian's DKMS builds its stock module for $krel as it installs)" \
		kmod_apt_install dkms patch "linux-headers-$krel" "nvidia-open-kernel-dkms=$NV_DEB_VERSION"
	[ $dry -eq 1 ] || [ -d "$src/nvidia" ] || die "$src is missing after installing nvidia-open-kernel-dkms"
	[ $dry -eq 1 ] || on_undo "rm -rf '$stage.tmp' '$stage'"
	SHOW="cp -a $src $stage.tmp; patch -d $stage.tmp -p1 < each of: $patches(each checked with --dry-run first); write $stage.tmp/dkms.conf:" \
		step "stage Debian's tree with sluice's patch" nv_stage_dkms "$src" "$stage.tmp" "$krel"
	nv_dkms_conf "$krel" | show_file
	step "publish the staged tree" mv "$stage.tmp" "$stage"
	step "register it with DKMS" dkms add -m "$NV_SLUICE_DKMS_NAME" -v "$ver"
	[ $dry -eq 1 ] || on_undo "dkms remove -m '$NV_SLUICE_DKMS_NAME' -v '$ver' --all"
	step "build it before touching the stock module (a failure stops and rolls back here)" \
		dkms build -m "$NV_SLUICE_DKMS_NAME" -v "$ver" -k "$krel"
	if [ $dry -eq 1 ] || dkms status -m "$NV_DKMS_NAME" -v "$NV_VERSION" -k "$krel" 2>/dev/null | grep -q installed; then
		step "commit: take Debian's stock build for $krel out (it installs the same module file names)" \
			dkms remove -m "$NV_DKMS_NAME" -v "$NV_VERSION" -k "$krel"
		[ $dry -eq 1 ] || on_undo "dkms install -m '$NV_DKMS_NAME' -v '$NV_VERSION' -k '$krel'"
	fi
	step "commit: install the patched modules as /lib/modules/$krel/updates/dkms/$NV_DKMS_NAME*.ko" \
		dkms install -m "$NV_SLUICE_DKMS_NAME" -v "$ver" -k "$krel"
	[ $dry -eq 1 ] || on_undo "dkms uninstall -m '$NV_SLUICE_DKMS_NAME' -v '$ver' -k '$krel'"
	local held=0
	if ! apt-mark showhold 2>/dev/null | grep -qx nvidia-open-kernel-dkms; then
		held=1
		step "keep an upgrade of nvidia-open-kernel-dkms from rebuilding the stock module over the patched one" \
			apt-mark hold nvidia-open-kernel-dkms
		[ $dry -eq 1 ] || on_undo "apt-mark unhold nvidia-open-kernel-dkms"
	fi
	SHOW="write $KMOD_STATE_DIR/nvidia.state (KREL=$krel DKMS_VERSION=$ver STOCK_DKMS=$NV_DKMS_NAME/$NV_VERSION HELD=$held)" \
		step "record what was done, for uninstall.sh and status.sh" write_state nvidia \
		"KREL=$krel" "DKMS_NAME=$NV_SLUICE_DKMS_NAME" "DKMS_VERSION=$ver" \
		"STOCK_DKMS=$NV_DKMS_NAME/$NV_VERSION" "HELD=$held" "SRC=$stage"
}

plan_amd() {
	local krel=$1 series=$2 kversion=$3 ver stage h
	h=$(kmod_amdgpu_hash "$series" | cut -c1-8)
	ver="${kversion%%-*}.sluice$h"
	stage=/usr/src/sluice-amdgpu-$ver
	say ""
	say "AMD (amdgpu with kmod-patches/amdgpu/$series, kernel $krel):"
	SHOW="write /etc/apt/sources.list.d/sluice-extra.sources if missing; apt-get update" \
		step "bookworm contrib and backports as apt sources" kmod_apt_sources
	SHOW="apt-get install -y --no-install-recommends dkms patch gcc-12 make flex bison bc libelf-dev libssl-dev kmod xz-utils linux-headers-$krel" \
		step "prerequisites (kernel build tools, the headers of $krel)" \
		kmod_apt_install dkms patch gcc-12 make flex bison bc libelf-dev libssl-dev kmod xz-utils \
		"linux-headers-$krel"
	[ $dry -eq 1 ] || on_undo "rm -rf '$stage.tmp' '$stage'"
	SHOW="mkdir $stage.tmp; copy kmod-patches/amdgpu/$series/ kmod-patches/amdgpu/uapi/ kmod-patches/pins.env scripts/kmod/build-amdgpu.sh scripts/kmod/qemu/common.sh into it; write sluice-dkms-build.sh and dkms.conf:" \
		step "stage the series with its build recipe" amd_stage_dkms "$stage.tmp" "$krel" "$series" "$ver"
	amd_dkms_conf "$krel" "$ver" | show_file
	step "publish the staged tree" mv "$stage.tmp" "$stage"
	step "register it with DKMS" dkms add -m sluice-amdgpu -v "$ver"
	[ $dry -eq 1 ] || on_undo "dkms remove -m sluice-amdgpu -v '$ver' --all"
	step "build it: scripts/kmod/build-amdgpu.sh downloads linux-source-$series=$kversion to /var/cache/sluice-kmod, configures it with Debian's config, builds amdgpu.ko (a failure stops and rolls back here)" \
		dkms build -m sluice-amdgpu -v "$ver" -k "$krel"
	step "commit: install /lib/modules/$krel/updates/dkms/amdgpu.ko, which depmod prefers to the in-tree one (--force: DKMS keeps the in-tree module when the version strings match, and amdgpu has none)" \
		dkms install --force -m sluice-amdgpu -v "$ver" -k "$krel"
	[ $dry -eq 1 ] || on_undo "dkms uninstall -m sluice-amdgpu -v '$ver' -k '$krel'; update-initramfs -u -k '$krel' || true"
	if [ $dry -eq 1 ] || lsinitramfs "/boot/initrd.img-$krel" 2>/dev/null | grep -q '/amdgpu\.ko'; then
		step "only if /boot/initrd.img-$krel carries amdgpu.ko (early KMS): refresh it so boot loads the patched one" \
			update-initramfs -u -k "$krel"
	fi
	SHOW="write $KMOD_STATE_DIR/amd.state (KREL=$krel DKMS_VERSION=$ver SERIES=$series)" \
		step "record what was done, for uninstall.sh and status.sh" write_state amd \
		"KREL=$krel" "DKMS_NAME=sluice-amdgpu" "DKMS_VERSION=$ver" "SERIES=$series" "SRC=$stage"
}

# amd_stage_dkms DEST KREL SERIES VERSION: the DKMS source of sluice-amdgpu.
# Its build runs scripts/kmod/build-amdgpu.sh (the same recipe CI and the
# QEMU test use) with its cache in /var/cache/sluice-kmod.
amd_stage_dkms() {
	local dest=$1 krel=$2 series=$3 ver=$4
	[ ! -e "$dest" ] || die "$dest exists; remove it first"
	mkdir -p "$dest/scripts/kmod/qemu" "$dest/kmod-patches/amdgpu"
	cp "$KMOD_REPO/scripts/kmod/build-amdgpu.sh" "$dest/scripts/kmod/"
	cp "$KMOD_REPO/scripts/kmod/qemu/common.sh" "$dest/scripts/kmod/qemu/"
	cp "$KMOD_REPO/kmod-patches/pins.env" "$dest/kmod-patches/"
	cp -r "$KMOD_REPO/kmod-patches/amdgpu/$series" "$KMOD_REPO/kmod-patches/amdgpu/uapi" \
		"$dest/kmod-patches/amdgpu/"
	printf '%s\n' '#!/bin/sh' \
		'# DKMS build step of sluice-amdgpu: builds amdgpu.ko for kernel $1 into out/.' \
		'set -eu' \
		'ko=$(SLUICE_KMOD_CACHE=/var/cache/sluice-kmod ./scripts/kmod/build-amdgpu.sh "$1")' \
		'mkdir -p out' \
		'cp "$ko" out/amdgpu.ko' >"$dest/sluice-dkms-build.sh"
	chmod +x "$dest/sluice-dkms-build.sh"
	amd_dkms_conf "$krel" "$ver" >"$dest/dkms.conf"
}

amd_dkms_conf() {
	local krel=$1 ver=$2
	printf '%s\n' \
		"# dkms.conf of sluice's patched amdgpu, written by scripts/kmod/install.sh" \
		"PACKAGE_NAME=\"sluice-amdgpu\"" \
		"PACKAGE_VERSION=\"$ver\"" \
		"BUILD_EXCLUSIVE_KERNEL=\"^${krel//./\\.}\$\"" \
		"AUTOINSTALL=yes" \
		"MAKE[0]=\"./sluice-dkms-build.sh \${kernelver}\"" \
		"CLEAN=\"rm -rf out\"" \
		"BUILT_MODULE_NAME[0]=\"amdgpu\"" \
		"BUILT_MODULE_LOCATION[0]=\"out/\"" \
		"DEST_MODULE_LOCATION[0]=\"/updates/dkms\""
}

write_state() {
	local name=$1
	shift
	mkdir -p "$KMOD_STATE_DIR"
	{
		echo "# written by scripts/kmod/install.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		printf '%s\n' "$@"
	} >"$KMOD_STATE_DIR/$name.state.tmp"
	mv "$KMOD_STATE_DIR/$name.state.tmp" "$KMOD_STATE_DIR/$name.state"
	on_undo "rm -f '$KMOD_STATE_DIR/$name.state'"
}

# reload WHAT UNLOAD... : modprobe -r UNLOAD..., then modprobe WHAT.
reload() {
	local what=$1
	shift
	if ! step "unload the stock modules (fails while a display server, nvidia-persistenced or a CUDA/ROCm process holds them)" \
		modprobe -r -a "$@"; then
		say "could not unload $*: reboot to load the patched module"
		return 1
	fi
	step "load the patched module" modprobe "$what"
}

if [ ${#refusals[@]} -gt 0 ]; then
	say ""
	say "Refused: ${#refusals[@]} check(s) failed; nothing was changed."
	for r in "${refusals[@]}"; do say "  - $r"; done
	if [ $dry -eq 1 ]; then
		say ""
		say "For reference, the steps install.sh runs once the checks pass:"
		k61=$LINUX_6_1_KREL
		kr=${series:+$krel}
		kr=${kr:-$k61}
		ks=${series:-6.1}
		kv=${kversion:-$LINUX_6_1_VERSION}
		if [ $do_nv -eq 0 ] && [ $do_amd -eq 0 ]; then do_nv=1 do_amd=1; fi
		if [ $do_nv -eq 1 ]; then plan_nvidia "$kr"; fi
		if [ $do_amd -eq 1 ]; then plan_amd "$kr" "$ks" "$kv"; fi
		say ""
		say "Then: reboot (or rerun with --reload), and check with scripts/kmod/status.sh."
	fi
	trap - EXIT
	exit 2
fi

say ""
say "Plan$([ $dry -eq 1 ] && echo ' (dry run)'):"
if [ $do_nv -eq 1 ]; then plan_nvidia "$krel"; fi
if [ $do_amd -eq 1 ]; then plan_amd "$krel" "$series" "$kversion"; fi
committed=1
trap - EXIT

say ""
if [ $reload -eq 1 ]; then
	rc=0
	if [ $do_nv -eq 1 ]; then reload nvidia nvidia_drm nvidia_modeset nvidia_uvm nvidia || rc=1; fi
	if [ $do_amd -eq 1 ]; then reload amdgpu amdgpu || rc=1; fi
	say "Installed$([ $rc -eq 0 ] && echo ' and loaded'). Check with scripts/kmod/status.sh."
else
	say "Done$([ $dry -eq 1 ] && echo ' (dry run)'). The patched module loads at the next boot; to load it now,"
	say "stop what uses the GPU and rerun with --reload (or modprobe -r, then modprobe). Check with"
	say "scripts/kmod/status.sh."
fi
