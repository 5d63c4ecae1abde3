# shellcheck shell=bash
# Shared helpers for the NVIDIA build and the testbed scripts
# (build-nvidia-open.sh, install.sh, uninstall.sh, status.sh). Source it; it
# defines functions and variables and runs nothing else.
#
# It sources scripts/kmod/qemu/common.sh for the pins (kmod-patches/pins.env),
# the apt helpers (kmod_apt_sources, kmod_apt_install, kmod_fetch_deb), the
# kernel series lookup (kmod_series) and log/die/now.

# shellcheck source=qemu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/qemu/common.sh"

: "${NVIDIA_OPEN_KERNEL_DKMS_VERSION:?kmod-patches/pins.env must set NVIDIA_OPEN_KERNEL_DKMS_VERSION}"

# Debian package version (535.261.03-1) and the upstream driver version
# (535.261.03) that names the DKMS source directory.
NV_DEB_VERSION=$NVIDIA_OPEN_KERNEL_DKMS_VERSION
NV_VERSION=${NV_DEB_VERSION%-*}
# Debian's DKMS module: /usr/src/$NV_DKMS_NAME-$NV_VERSION.
NV_DKMS_NAME=nvidia-current-open
NV_PATCH_DIR=$KMOD_REPO/kmod-patches/nvidia-open
NV_UAPI=$NV_PATCH_DIR/uapi/nv-sluice-ioctl.h
# sluice's DKMS package for the patched modules.
NV_SLUICE_DKMS_NAME=sluice-nvidia-open

# Where install.sh records what it did, for uninstall.sh and status.sh.
KMOD_STATE_DIR=${SLUICE_KMOD_STATE_DIR:-/var/lib/sluice-kmod}

# The patches of the NVIDIA series, in order.
nv_patches() {
	ls "$NV_PATCH_DIR"/*.patch 2>/dev/null | sort
}

# "MAJOR.MINOR" of the escape ABI, read from the uapi header.
nv_abi() {
	local major minor
	major=$(sed -n 's/^#define SLUICE_NV_ABI_MAJOR[[:space:]]*\([0-9]*\).*/\1/p' "$NV_UAPI")
	minor=$(sed -n 's/^#define SLUICE_NV_ABI_MINOR[[:space:]]*\([0-9]*\).*/\1/p' "$NV_UAPI")
	[ -n "$major" ] && [ -n "$minor" ] || die "cannot read the ABI version from $NV_UAPI"
	printf '%s.%s\n' "$major" "$minor"
}

# DKMS version of sluice's NVIDIA package: driver version + escape ABI.
nv_sluice_dkms_version() {
	printf '%s.sluice%s\n' "$NV_VERSION" "$(nv_abi)"
}

# Cache key of a built module: the series, the uapi header, the build
# recipe and these helpers.
nv_hash() {
	# shellcheck disable=SC2046 # one word per patch path
	cat $(nv_patches) "$NV_UAPI" "$KMOD_REPO/scripts/kmod/build-nvidia-open.sh" \
		"$KMOD_REPO/scripts/kmod/lib.sh" | sha256sum | cut -c1-16
}

# Unpacks the pinned nvidia-open-kernel-dkms .deb once; prints the directory
# of Debian's DKMS source tree (Debian's patches applied, prebuilt RM core
# nv-kernel.o_binary included).
nv_debian_tree() {
	local deb dir=$KMOD_CACHE/nvidia-open/deb-$NV_DEB_VERSION
	local tree=$dir/usr/src/$NV_DKMS_NAME-$NV_VERSION
	if [ ! -f "$dir/.sluice-unpacked" ]; then
		deb=$(kmod_fetch_deb nvidia-open-kernel-dkms "$NV_DEB_VERSION")
		log "unpacking $(basename "$deb")"
		rm -rf "$dir"
		mkdir -p "$dir"
		dpkg-deb -x "$deb" "$dir"
		[ -f "$tree/nvidia/nv-kernel.o_binary" ] ||
			die "$deb has no usr/src/$NV_DKMS_NAME-$NV_VERSION/nvidia/nv-kernel.o_binary"
		touch "$dir/.sluice-unpacked"
	fi
	printf '%s\n' "$tree"
}

# Applies the series to TREE, each patch checked with --dry-run first; when
# one does not apply, the ones applied before it are reverted, so TREE is
# never left half-patched. The patches applied are copied to
# TREE/.sluice-series.
nv_apply_series() {
	local tree=$1 p
	mkdir -p "$tree/.sluice-series"
	for p in $(nv_patches); do
		if ! patch -d "$tree" -p1 -s -N --dry-run <"$p" >/dev/null; then
			nv_revert_series "$tree"
			die "$(basename "$p") does not apply to $tree ($NV_DKMS_NAME $NV_VERSION)"
		fi
		patch -d "$tree" -p1 -s -N <"$p" >&2
		cp "$p" "$tree/.sluice-series/"
	done
}

# Reverts the series recorded in TREE/.sluice-series (newest first).
nv_revert_series() {
	local tree=$1 p
	compgen -G "$tree/.sluice-series/*.patch" >/dev/null || return 0
	for p in $(ls "$tree"/.sluice-series/*.patch | sort -r); do
		patch -d "$tree" -p1 -R -s --dry-run <"$p" >/dev/null ||
			die "cannot revert $(basename "$p") in $tree; remove $tree and rerun"
		patch -d "$tree" -p1 -R -s <"$p" >&2
		rm -f "$p"
	done
}

# Writes the dkms.conf of sluice's NVIDIA package for kernel release KREL
# to stdout. It mirrors Debian's (same MAKE line, same module file names, so
# Debian's modprobe configuration keeps working) and only builds for KREL.
nv_dkms_conf() {
	local krel=$1 version i=0 m
	version=$(nv_sluice_dkms_version)
	printf '%s\n' \
		"# dkms.conf of sluice's patched NVIDIA open kernel modules, written by" \
		"# scripts/kmod/install.sh from Debian's $NV_DKMS_NAME $NV_VERSION" \
		"# (nvidia-open-kernel-dkms $NV_DEB_VERSION) plus kmod-patches/nvidia-open/." \
		"PACKAGE_NAME=\"$NV_SLUICE_DKMS_NAME\"" \
		"PACKAGE_VERSION=\"$version\"" \
		"" \
		"# Only the kernel install.sh checked: on any other kernel Debian's stock" \
		"# module is built as before." \
		"BUILD_EXCLUSIVE_KERNEL=\"^${krel//./\\.}\$\"" \
		"BUILD_EXCLUSIVE_CONFIG=\"!CONFIG_PREEMPT_RT !CONFIG_PREEMPT_RT_FULL\"" \
		"AUTOINSTALL=yes" \
		"" \
		"MAKE[0]=\"env NV_VERBOSE=1 make \${parallel_jobs+-j\$parallel_jobs} modules KERNEL_UNAME=\${kernelver}\"" \
		"CLEAN=\"true\""
	for m in nvidia nvidia-modeset nvidia-drm nvidia-uvm nvidia-peermem; do
		printf '%s\n' "" \
			"BUILT_MODULE_NAME[$i]=\"$m\"" \
			"BUILT_MODULE_LOCATION[$i]=\"./\"" \
			"DEST_MODULE_NAME[$i]=\"${m/nvidia/$NV_DKMS_NAME}\"" \
			"DEST_MODULE_LOCATION[$i]=\"/updates/dkms\""
		i=$((i + 1))
	done
}

# Stages sluice's NVIDIA DKMS source in DEST from Debian's tree SRC: a copy
# with the series applied (each patch checked first) and the dkms.conf for
# KREL. DEST must not exist.
nv_stage_dkms() {
	local src=$1 dest=$2 krel=$3
	[ -d "$src/nvidia" ] || die "$src is not Debian's $NV_DKMS_NAME tree"
	[ ! -e "$dest" ] || die "$dest exists; remove it first"
	cp -a "$src" "$dest"
	rm -rf "$dest/.sluice-series"
	nv_apply_series "$dest"
	nv_dkms_conf "$krel" >"$dest/dkms.conf"
	cmp -s "$dest/common/inc/nv-sluice-ioctl.h" "$NV_UAPI" ||
		die "the staged tree's nv-sluice-ioctl.h differs from $NV_UAPI"
}

# PCI vendor ids of the display devices present, one per line (0x1002,
# 0x10de, ...), from /sys/class/drm/*/device/vendor, else lspci -n.
# SLUICE_KMOD_SYSFS replaces /sys (and turns lspci off), for tests.
gpu_vendors() {
	local sys=${SLUICE_KMOD_SYSFS:-/sys} f out=""
	for f in "$sys"/class/drm/*/device/vendor; do
		[ -r "$f" ] || continue
		out+="$(tr -d '[:space:]' <"$f")"$'\n'
	done
	if [ -z "$out" ] && [ -z "${SLUICE_KMOD_SYSFS:-}" ] && command -v lspci >/dev/null; then
		# Class 03xx: display controllers.
		out=$(lspci -n 2>/dev/null | awk '$2 ~ /^03/ { split($3, id, ":"); print "0x" id[1] }')
	fi
	printf '%s\n' "$out" | sed '/^$/d' | tr 'A-F' 'a-f' | sort -u
}

# Prints a state file's VAR=value lines (nothing if there is none).
state_read() {
	local f=$KMOD_STATE_DIR/$1.state
	[ -f "$f" ] && grep -E '^[A-Z_0-9]+=' "$f" || true
}

# The value of VAR in state file NAME, empty if absent.
state_get() {
	state_read "$1" | sed -n "s/^$2=//p" | tail -n1
}

# The version of an installed Debian package, empty if it is not installed.
deb_installed_version() {
	{ dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null || true; } |
		awk '$1 == "install" && $3 == "installed" { print $4 }'
}

# Secure Boot state: "enabled", "disabled" or "unknown".
secure_boot_state() {
	local sys=${SLUICE_KMOD_SYSFS:-/sys} f b
	if [ -z "${SLUICE_KMOD_SYSFS:-}" ] && command -v mokutil >/dev/null; then
		case $(mokutil --sb-state 2>/dev/null) in
		*enabled*) echo enabled; return ;;
		*disabled*) echo disabled; return ;;
		esac
	fi
	for f in "$sys"/firmware/efi/efivars/SecureBoot-*; do
		[ -r "$f" ] || continue
		# 4 bytes of attributes, then the value byte.
		b=$(od -An -t u1 -j 4 -N 1 "$f" 2>/dev/null | tr -d ' ')
		[ "$b" = 1 ] && echo enabled || echo disabled
		return
	done
	[ -d "$sys/firmware/efi" ] && echo unknown || echo disabled
}

# --- testbed script helpers (install.sh, uninstall.sh, status.sh) -----------
# They read the caller's $dry (1 for --dry-run) and append to $refusals and
# $undo.

say() { printf '%s\n' "$*"; }
refuse() { refusals+=("$*"); say "  REFUSE  $*"; }
ok() { say "  ok      $*"; }
note() { say "  note    $*"; }

# step WHY CMD...: runs CMD (or prints it with --dry-run). When CMD is one of
# the scripts' functions, SHOW (set for the call) is what is printed
# instead: the commands the function runs.
step() {
	local why=$1
	shift
	if [ "${dry:-0}" -eq 1 ]; then
		say "  - $why"
		say "      ${SHOW:-$*}"
	else
		log "$why: ${SHOW:-$*}"
		"$@"
	fi
}

# Indents stdin under the previous dry-run step (listings of generated
# files); prints nothing on a real run.
show_file() {
	if [ "${dry:-0}" -eq 1 ]; then sed 's/^/        | /'; else cat >/dev/null; fi
}

# on_undo CMD: remember a shell command that reverts the step just done.
on_undo() { undo+=("$*"); }

# Runs the remembered undo commands, newest first, going on past failures.
rollback() {
	local i
	[ ${#undo[@]} -eq 0 ] && return 0
	log "rolling back ${#undo[@]} step(s)"
	for ((i = ${#undo[@]} - 1; i >= 0; i--)); do
		log "undo: ${undo[i]}"
		bash -c "${undo[i]}" >&2 || log "undo step failed (continuing): ${undo[i]}"
	done
}
