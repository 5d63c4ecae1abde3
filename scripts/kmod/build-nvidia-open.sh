#!/usr/bin/env bash
# Build nvidia.ko from Debian's NVIDIA open kernel modules with sluice's
# trap-escape patch (kmod-patches/nvidia-open/) against a pinned Debian
# kernel's headers, and print the path of the cached module.
#
#   scripts/kmod/build-nvidia-open.sh [--all-modules] [--sparse]
#                                     [--checkpatch] [6.1|6.12|KREL]
#
# The source is the pinned nvidia-open-kernel-dkms .deb (kmod-patches/
# pins.env): its /usr/src/nvidia-current-open-VERSION tree is the
# kernel-open part of the source package with Debian's own patches already
# applied, plus the RM core that Debian's build compiled (nv-kernel.o_binary),
# which is exactly what DKMS builds on a testbed. Steps, each skipped when its
# result is already in the cache (${SLUICE_KMOD_CACHE:-~/.cache/sluice/kmod}):
#   1. install the pinned linux-headers-KREL (default 6.1) and gcc-12, make;
#   2. apt-get download and unpack nvidia-open-kernel-dkms;
#   3. keep a build tree per (driver, kernel): revert the series applied
#      last time, apply this one (each patch checked with --dry-run first);
#   4. `make modules` (incremental; only nvidia.ko unless --all-modules),
#      check vermagic and the sluice_abi parameter, and copy the module,
#      stripped of debug info, to nvidia-open/VERSION/KREL/HASH/, HASH being
#      the hash of the series, the uapi header and the build scripts. A
#      module already there is reused as it is.
# --sparse runs sparse (C=2) over nvidia.ko and fails on any report in the
# files the series adds (reports in NVIDIA's own files are counted, not
# fatal). --checkpatch runs the pinned kernel's scripts/checkpatch.pl
# --no-tree on each patch and fails on any error or warning outside
# nvidia/nv.c, whose hooks keep NVIDIA's 4-space style on purpose.
#
# Logs go to stderr; stdout is the module's path alone.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

all=0 sparse=0 checkpatch=0
args=()
for a in "$@"; do
	case $a in
	--all-modules) all=1 ;;
	--sparse) sparse=1 ;;
	--checkpatch) checkpatch=1 ;;
	-h | --help) sed -n '/^set -euo/q; 2,$p' "$0"; exit 0 ;;
	-*) die "unknown option $a (see --help)" ;;
	*) args+=("$a") ;;
	esac
done
[ ${#args[@]} -le 1 ] || die "usage: $0 [--all-modules] [--sparse] [--checkpatch] [6.1|6.12|KREL]"
kmod_series "${args[0]:-6.1}"
[ -n "$(nv_patches)" ] || die "no patches in $NV_PATCH_DIR"

modules=nvidia
[ $all -eq 1 ] && modules="nvidia nvidia-uvm nvidia-modeset nvidia-drm nvidia-peermem"

t0=$(now)
hash=$(nv_hash)
out=$KMOD_CACHE/nvidia-open/$NV_DEB_VERSION/$KREL/$hash
[ $all -eq 1 ] && out=$out-all
if [ -f "$out/nvidia.ko" ] && [ $sparse -eq 0 ] && [ $checkpatch -eq 0 ]; then
	log "cached: $out/nvidia.ko (nvidia-open $NV_DEB_VERSION, $KREL, hash $hash)"
	printf '%s\n' "$out/nvidia.ko"
	exit 0
fi

kmod_apt_sources
kmod_apt_install gcc-12 make kmod xz-utils patch binutils "linux-headers-$KREL"
[ $sparse -eq 1 ] && kmod_apt_install sparse
have=$(dpkg-query -W -f='${Version}' "linux-headers-$KREL")
[ "$have" = "$KVERSION" ] ||
	die "linux-headers-$KREL is $have, the pin is $KVERSION (kmod-patches/pins.env)"
[ -e "/lib/modules/$KREL/build" ] || die "/lib/modules/$KREL/build is missing after installing linux-headers-$KREL"

# Checkpatch first: it needs no build.
if [ $checkpatch -eq 1 ]; then
	cp_dir=$KMOD_CACHE/checkpatch-$KVERSION
	amd_tree=$KMOD_CACHE/tree-$KREL/scripts
	if [ ! -f "$cp_dir/checkpatch.pl" ] && [ -f "$amd_tree/checkpatch.pl" ]; then
		# build-amdgpu.sh unpacked the same linux-source already.
		mkdir -p "$cp_dir"
		cp "$amd_tree/checkpatch.pl" "$amd_tree/spelling.txt" "$amd_tree/const_structs.checkpatch" "$cp_dir/"
	fi
	if [ ! -f "$cp_dir/checkpatch.pl" ]; then
		src_deb=$(kmod_fetch_deb "linux-source-$SERIES" "$KVERSION")
		log "extracting scripts/checkpatch.pl from $(basename "$src_deb")"
		rm -rf "$cp_dir.tmp"
		mkdir -p "$cp_dir.tmp"
		dpkg-deb --fsys-tarfile "$src_deb" |
			tar -xO "./usr/src/linux-source-$SERIES.tar.xz" |
			tar -xJ -C "$cp_dir.tmp" --strip-components=2 --wildcards \
				'*/scripts/checkpatch.pl' '*/scripts/spelling.txt' \
				'*/scripts/const_structs.checkpatch'
		rm -rf "$cp_dir"
		mv "$cp_dir.tmp" "$cp_dir"
	fi
	bad=0
	for p in $(nv_patches); do
		rep=$(cd "$(mktemp -d)" && perl "$cp_dir/checkpatch.pl" --no-tree \
			--ignore FILE_PATH_CHANGES "$p" 2>&1 || true)
		# Each report is "ERROR|WARNING: ..." followed by "#N: FILE: path:line:".
		own=$(printf '%s\n' "$rep" | awk '
			/^(ERROR|WARNING):/ { msg = $0; next }
			msg != "" && /FILE:/ { if ($0 !~ /FILE: nvidia\/nv\.c:/) print msg " (" $3 ")"; msg = "" }')
		nvc=$(printf '%s\n' "$rep" | grep -c 'FILE: nvidia/nv.c:' || true)
		if [ -n "$own" ]; then
			printf '%s\n' "$own" >&2
			bad=1
		fi
		log "checkpatch $(basename "$p"): $(printf '%s\n' "$rep" | grep '^total:' || echo 'no summary'); $nvc of them in nvidia/nv.c (NVIDIA's 4-space style)"
	done
	[ $bad -eq 0 ] || die "checkpatch reports the lines above"
fi

deb_tree=$(nv_debian_tree)
tree=$KMOD_CACHE/nvidia-open/build-$NV_DEB_VERSION-$KREL
if [ ! -f "$tree/.sluice-copied" ]; then
	log "copying Debian's tree to $tree"
	rm -rf "$tree"
	cp -a "$deb_tree" "$tree.tmp"
	touch "$tree.tmp/.sluice-copied"
	mv "$tree.tmp" "$tree"
fi
# shellcheck disable=SC2046 # one word per patch path
if ! cmp -s <(cat "$tree"/.sluice-series/*.patch 2>/dev/null) <(cat $(nv_patches)); then
	nv_revert_series "$tree"
	log "applying $(nv_patches | xargs -n1 basename | tr '\n' ' ')"
	nv_apply_series "$tree"
fi
cmp -s "$tree/common/inc/nv-sluice-ioctl.h" "$NV_UAPI" ||
	die "kmod-patches/nvidia-open/uapi/nv-sluice-ioctl.h differs from the header the patch adds; copy it from $tree/common/inc/nv-sluice-ioctl.h"

if [ $sparse -eq 1 ]; then
	log "sparse (C=2) over nvidia.ko"
	rep=$(mktemp)
	make -C "$tree" -j"$(nproc)" modules KERNEL_UNAME="$KREL" NV_KERNEL_MODULES=nvidia C=2 >"$rep" 2>&1 ||
		{ tail -n 40 "$rep" >&2; die "build with sparse failed"; }
	reports=$(grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):' "$rep" || true)
	if printf '%s\n' "$reports" | grep -E 'nv-sluice' >&2; then
		die "sparse reports the lines above in sluice's files"
	fi
	log "sparse: no reports in sluice's files; $(printf '%s' "$reports" | grep -c . || true) in NVIDIA's own files (not introduced by the patch)"
	rm -f "$rep"
fi

t2=$(now)
log "make modules NV_KERNEL_MODULES='$modules' ($NV_DKMS_NAME $NV_VERSION, $KREL)"
buildlog=$KMOD_CACHE/nvidia-open/build-$KREL.log
if ! make -C "$tree" -j"$(nproc)" modules KERNEL_UNAME="$KREL" NV_KERNEL_MODULES="$modules" >"$buildlog" 2>&1; then
	tail -n 40 "$buildlog" >&2
	die "nvidia-open build failed; full log in $buildlog"
fi
ko=$tree/nvidia.ko
vermagic=$(modinfo -F vermagic "$ko")
case $vermagic in
"$KREL "*) ;;
*) die "$ko has vermagic '$vermagic', not $KREL" ;;
esac
modinfo -F parm "$ko" | grep -q '^sluice_abi:' ||
	die "$ko has no sluice_abi parameter: the patch did not make it into the build"
mkdir -p "$out.tmp"
for m in $modules; do
	strip --strip-debug -o "$out.tmp/$m.ko" "$tree/$m.ko"
done
# shellcheck disable=SC2046 # one word per patch path
cp $(nv_patches) "$out.tmp/"
rm -rf "$out"
mv "$out.tmp" "$out"
log "built in $(($(now) - t2)) s, $(($(now) - t0)) s in all: $out/nvidia.ko"
printf '%s\n' "$out/nvidia.ko"
