#!/usr/bin/env bash
# Build amdgpu.ko with sluice's amdkfd series (kmod-patches/amdgpu/SERIES/)
# for a pinned Debian kernel, and print the path of the cached module.
#
#   scripts/kmod/build-amdgpu.sh [--check] 6.1|6.12|KREL
#
# Steps, each skipped when its result is already in the cache
# (${SLUICE_KMOD_CACHE:-~/.cache/sluice/kmod}):
#   1. download the pinned linux-source and linux-headers packages
#      (kmod-patches/pins.env) with apt-get download;
#   2. unpack the source into tree-KREL/, configure it with the .config of the
#      pinned linux-headers package (checked to come out unchanged), copy that
#      package's Module.symvers and UTS release, `make modules_prepare`;
#   3. revert the series applied last time, apply this one (checked with
#      --dry-run first, so the tree is never left half-patched);
#   4. `make M=drivers/gpu/drm/amd/amdgpu modules` (incremental) and copy
#      amdgpu.ko to amdgpu/KREL/HASH/, HASH being the series, uapi header and
#      this script's hash. A module already there is reused as it is.
# --check also runs the kernel's checkpatch.pl (--strict) on every patch and
# sparse (C=2) on the C files the series touches, and fails on any report
# (see the comment there about amdgv_sriovmsg.h).
#
# Logs go to stderr; stdout is the module's path alone.
set -euo pipefail
. "$(dirname "$0")/qemu/common.sh"

check=0
args=()
for a in "$@"; do
	case $a in
	--check) check=1 ;;
	-h | --help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
	-*) die "unknown option $a (see --help)" ;;
	*) args+=("$a") ;;
	esac
done
[ ${#args[@]} -eq 1 ] || die "usage: $0 [--check] 6.1|6.12|KREL"
kmod_series "${args[0]}"

t0=$(now)
hash=$(kmod_amdgpu_hash "$SERIES")
out=$KMOD_CACHE/amdgpu/$KREL/$hash
if [ -f "$out/amdgpu.ko" ] && [ $check -eq 0 ]; then
	log "cached: $out/amdgpu.ko (series $SERIES, $KREL, hash $hash)"
	printf '%s\n' "$out/amdgpu.ko"
	exit 0
fi

kmod_apt_sources
kmod_apt_install gcc-12 make flex bison bc libelf-dev libssl-dev dwarves kmod xz-utils patch
[ $check -eq 1 ] && kmod_apt_install sparse perl

src_deb=$(kmod_fetch_deb "linux-source-$SERIES" "$KVERSION")
hdr_deb=$(kmod_fetch_deb "linux-headers-$KREL" "$KVERSION")

# Debian's compiler (CONFIG_CC_VERSION_TEXT names it, e.g. gcc-12 or
# x86_64-linux-gnu-gcc-12) and no Rust (Debian's configs have none), so
# that Kconfig's toolchain probes give back Debian's .config unchanged.
# KCFLAGS=-g0 drops the debug info Debian's config asks for: nothing the
# module's code or layouts depend on, and the build is much faster.
cc=$(dpkg-deb --fsys-tarfile "$hdr_deb" |
	tar -xO "./usr/src/linux-headers-$KREL/.config" |
	sed -n 's/^CONFIG_CC_VERSION_TEXT="\([^ ]*\) .*/\1/p')
[ -n "$cc" ] || die "no CONFIG_CC_VERSION_TEXT in $hdr_deb"
command -v "$cc" >/dev/null || die "the pinned kernel was built with $cc, which is not installed"
kmake=(CC="$cc" RUSTC=false HOSTRUSTC=false KCFLAGS=-g0)

tree=$KMOD_CACHE/tree-$KREL
stamp=$tree/.sluice-prepared
# bump "prepared-by" when the preparation below changes
stamp_text="prepared-by 2: linux-source-$SERIES $KVERSION, $KREL, $cc"
if [ "$(cat "$stamp" 2>/dev/null)" != "$stamp_text" ]; then
	t1=$(now)
	log "unpacking linux-source-$SERIES $KVERSION into $tree"
	rm -rf "$tree" "$tree.tmp"
	mkdir -p "$tree.tmp"
	dpkg-deb --fsys-tarfile "$src_deb" |
		tar -xO "./usr/src/linux-source-$SERIES.tar.xz" |
		tar -xJ -C "$tree.tmp" --strip-components=1
	hdr=$tree.tmp/.sluice-headers
	mkdir -p "$hdr"
	dpkg-deb -x "$hdr_deb" "$hdr"
	h=$hdr/usr/src/linux-headers-$KREL
	[ -f "$h/.config" ] || die "$hdr_deb has no usr/src/linux-headers-$KREL/.config"
	cp "$h/.config" "$tree.tmp/.config"
	cp "$h/Module.symvers" "$tree.tmp/Module.symvers"
	(
		cd "$tree.tmp"
		log "make modules_prepare (CC=$cc)"
		make -s "${kmake[@]}" olddefconfig >&2
		make -s "${kmake[@]}" -j"$(nproc)" modules_prepare >&2
		# The module must see the exact configuration Debian built the
		# image with: struct module and many other layouts depend on it
		# (e.g. DEBUG_INFO_BTF_MODULES adds fields the loader relocates).
		if ! diff <(grep -v '^#' "$h/.config" | sort) <(grep -v '^#' .config | sort) >&2; then
			die "the configured tree differs from Debian's .config (lines above); is the toolchain (gcc-12, binutils, pahole/dwarves) the one the pinned kernel was built with?"
		fi
		# modules_prepare writes the upstream release (6.1.176); modules
		# must carry the Debian one (6.1.0-50-amd64) in their vermagic.
		cp "$h/include/generated/utsrelease.h" include/generated/utsrelease.h
		printf '%s\n' "$KREL" >include/config/kernel.release
	)
	rm -rf "$hdr"
	mv "$tree.tmp" "$tree"
	mkdir -p "$tree/.sluice-series"
	printf '%s\n' "$stamp_text" >"$stamp"
	log "tree prepared in $(($(now) - t1)) s"
fi
grep -q "\"$KREL\"" "$tree/include/generated/utsrelease.h" ||
	die "$tree/include/generated/utsrelease.h does not name $KREL; remove $tree and rerun"

# Swap the applied series for this one.
applied=$tree/.sluice-series
want=("$KMOD_REPO"/kmod-patches/amdgpu/"$SERIES"/*.patch)
if ! cmp -s <(cat "$applied"/*.patch 2>/dev/null) <(cat "${want[@]}"); then
	if compgen -G "$applied/*.patch" >/dev/null; then
		log "reverting the series applied before"
		mapfile -t old < <(ls "$applied"/*.patch | sort -r)
		for p in "${old[@]}"; do
			patch -d "$tree" -p1 -R -s --dry-run <"$p" >/dev/null ||
				die "cannot revert $(basename "$p") in $tree; remove $tree and rerun"
			patch -d "$tree" -p1 -R -s <"$p" >&2
		done
		rm -f "$applied"/*.patch
	fi
	for p in "${want[@]}"; do
		log "applying $(basename "$p")"
		patch -d "$tree" -p1 -s -N --dry-run <"$p" >/dev/null ||
			die "$(basename "$p") does not apply to linux-source-$SERIES $KVERSION"
		patch -d "$tree" -p1 -s -N <"$p" >&2
		cp "$p" "$applied/"
	done
fi
cmp -s "$tree/include/uapi/linux/kfd_sluice.h" "$KMOD_REPO/kmod-patches/amdgpu/uapi/kfd_sluice.h" ||
	die "kmod-patches/amdgpu/uapi/kfd_sluice.h differs from the header series $SERIES adds; copy it from $tree/include/uapi/linux/kfd_sluice.h"

m=drivers/gpu/drm/amd/amdgpu
if [ $check -eq 1 ]; then
	for p in "${want[@]}"; do
		perl "$tree/scripts/checkpatch.pl" --no-tree --strict --quiet "$p" >&2 ||
			die "checkpatch.pl reports the lines above for $(basename "$p")"
	done
	log "checkpatch.pl --strict: ${#want[@]} patches clean"
	# sparse ignores #pragma pack, so it sizes amdgv_sriovmsg.h's packed
	# structs wrongly and fails their _Static_assert; after that first error
	# it prints no more warnings at all. Filtering that line out would hide
	# every real report, so the sparse pass (only) defines _Static_assert
	# away; gcc still checks those asserts in the real build below.
	log "sparse (C=2) on the files the series touches"
	rep=$(mktemp)
	make -C "$tree" -s "${kmake[@]}" C=2 CF="-D'_Static_assert(...)='" M=$m -j"$(nproc)" \
		../amdkfd/kfd_sluice.o ../amdkfd/kfd_chardev.o >"$rep" 2>&1 ||
		{ cat "$rep" >&2; die "build with sparse failed"; }
	if grep -v 'amdgv_sriovmsg.h' "$rep" | grep -E 'warning|error' >&2; then
		die "sparse reports the lines above"
	fi
	log "sparse: kfd_sluice.c and kfd_chardev.c clean"
	rm -f "$rep"
fi

t2=$(now)
log "make M=$m modules (series $SERIES, $KREL)"
buildlog=$KMOD_CACHE/build-$KREL.log
if ! make -C "$tree" "${kmake[@]}" M=$m -j"$(nproc)" modules >"$buildlog" 2>&1; then
	tail -n 40 "$buildlog" >&2
	die "amdgpu build failed; full log in $buildlog"
fi
ko=$tree/$m/amdgpu.ko
vermagic=$(modinfo -F vermagic "$ko")
case $vermagic in
"$KREL "*) ;;
*) die "$ko has vermagic '$vermagic', not $KREL" ;;
esac
mkdir -p "$out.tmp"
cp "$ko" "$out.tmp/amdgpu.ko"
cp "${want[@]}" "$out.tmp/"
rm -rf "$out"
mv "$out.tmp" "$out"
# keep only this series' module for this kernel
find "$KMOD_CACHE/amdgpu/$KREL" -mindepth 1 -maxdepth 1 ! -name "$hash" -exec rm -rf {} +
log "built in $(($(now) - t2)) s, $(($(now) - t0)) s in all: $out/amdgpu.ko"
printf '%s\n' "$out/amdgpu.ko"
