# shellcheck shell=bash
# Shared helpers for scripts/kmod/build-amdgpu.sh and scripts/kmod/qemu-test.sh.
# Source it; it defines functions and variables, and runs nothing else.

KMOD_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
KMOD_CACHE=${SLUICE_KMOD_CACHE:-$HOME/.cache/sluice/kmod}
KMOD_APT_LOCK=/tmp/sluice-apt.lock

# shellcheck source=../../../kmod-patches/pins.env
. "$KMOD_REPO/kmod-patches/pins.env"

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Seconds since the epoch, for the timings the scripts print.
now() { date +%s; }

# Resolve a kernel series ("6.1", "6.12") or its release ("6.1.0-50-amd64")
# to the pins: sets SERIES, KVERSION (Debian package version), KREL (uname -r
# of the pinned image), KCOMMON (suffix of the -common headers package) and
# KSUITE.
kmod_series() {
	local want=$1 s var
	for s in 6.1 6.12; do
		var=LINUX_${s//./_}
		local krel_var=${var}_KREL
		if [ "$want" = "$s" ] || [ "$want" = "${!krel_var}" ]; then
			# shellcheck disable=SC2034 # read by the scripts that source this
			SERIES=$s
			local v=${var}_VERSION c=${var}_COMMON su=${var}_SUITE
			# shellcheck disable=SC2034
			KVERSION=${!v} KREL=${!krel_var} KCOMMON=${!c} KSUITE=${!su}
			return 0
		fi
	done
	die "unsupported kernel '$want': the pinned ones are 6.1 ($LINUX_6_1_KREL) and 6.12 ($LINUX_6_12_KREL), see kmod-patches/pins.env"
}

# bookworm-backports and bookworm contrib (deb and deb-src), on the same
# mirror as the machine's own Debian source. Idempotent: an existing file is
# left as it is.
kmod_apt_sources() {
	local f=/etc/apt/sources.list.d/sluice-extra.sources uri
	[ -e "$f" ] && return 0
	uri=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)[[:space:]]*$/\1/p' \
		/etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
	if [ -z "$uri" ]; then
		uri=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' \
			/etc/apt/sources.list 2>/dev/null)
	fi
	[ -n "$uri" ] || die "cannot find this machine's Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
	log "adding bookworm-backports and bookworm contrib from $uri to $f"
	flock "$KMOD_APT_LOCK" tee "$f" >/dev/null <<EOF
Types: deb deb-src
URIs: $uri
Suites: bookworm-backports
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: $uri
Suites: bookworm
Components: contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	flock "$KMOD_APT_LOCK" apt-get update -qq >&2
}

# Install the Debian packages named (binary names) that are missing. Extra
# apt-get options may come first, ending with "--".
kmod_apt_install() {
	local opts=() missing=() p
	if [[ " $* " == *" -- "* ]]; then
		while [ "$1" != "--" ]; do opts+=("$1"); shift; done
		shift
	fi
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "apt-get install ${missing[*]}"
	if ! DEBIAN_FRONTEND=noninteractive flock "$KMOD_APT_LOCK" \
		apt-get install -y -qq --no-install-recommends "${opts[@]}" "${missing[@]}" >&2; then
		flock "$KMOD_APT_LOCK" apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive flock "$KMOD_APT_LOCK" \
			apt-get install -y -qq --no-install-recommends "${opts[@]}" "${missing[@]}" >&2 ||
			die "apt-get install ${missing[*]} failed"
	fi
}

# Download NAME=VERSION into $KMOD_CACHE/debs unless it is there; prints the
# .deb's path.
kmod_fetch_deb() {
	local name=$1 version=$2 dir=$KMOD_CACHE/debs f
	mkdir -p "$dir"
	f=$(ls "$dir/${name}_${version//:/%3a}_"*.deb 2>/dev/null | head -n1)
	if [ -z "$f" ]; then
		log "apt-get download $name=$version"
		if ! (cd "$dir" && flock "$KMOD_APT_LOCK" apt-get download -qq "$name=$version" >&2 2>/dev/null); then
			flock "$KMOD_APT_LOCK" apt-get update -qq >&2
			(cd "$dir" && flock "$KMOD_APT_LOCK" apt-get download -qq "$name=$version" >&2) ||
				die "cannot download $name=$version: the pin in kmod-patches/pins.env may have left the mirror (check 'apt-cache madison $name' and bump it)"
		fi
		f=$(ls "$dir/${name}_${version//:/%3a}_"*.deb | head -n1)
	fi
	printf '%s\n' "$f"
}

# Hash of the amdgpu series for SERIES plus the uapi header and the build
# recipe: the cache key of a built module.
kmod_amdgpu_hash() {
	local series=$1
	cat "$KMOD_REPO"/kmod-patches/amdgpu/"$series"/*.patch \
		"$KMOD_REPO/kmod-patches/amdgpu/uapi/kfd_sluice.h" \
		"$KMOD_REPO/scripts/kmod/build-amdgpu.sh" |
		sha256sum | cut -c1-16
}
