#!/usr/bin/env bash
# Builds the Debian package sluice_<version>-1_<arch>.deb (docs/install.md):
#   1. the release binaries: sluiced (without the InSS planner, as a plain
#      `cargo build -p sluice-service` makes it), sluice, and the C client
#      library (static and shared)
#   2. what the package ships that is generated, never committed:
#      target/deb-assets/  the systemd unit with the packaged paths, man
#                          pages (sluice.1 and its subcommands', sluiced.8),
#                          bash/zsh/fish completions, sluice-client.pc, the
#                          package's Debian changelog
#      <profile dir>/deb-assets/  libsluice_client.so.<abi> with its SONAME
#   3. cargo deb --no-build -p sluice-service, which writes the .deb into
#      <target dir>/debian/ and prints its path
#
#   scripts/deb/build.sh [--target TRIPLE]
#   SLUICE_DEB_HOST_BIN=target/release scripts/deb/build.sh --target TRIPLE
#
# --target is passed to cargo build and cargo deb (cross builds need the
# target's linker and strip configured for cargo; see cargo-deb's README).
# The man pages and completions come from binaries built for this machine.
# Needs cargo-deb (`cargo install cargo-deb --locked`) and patchelf
# (`apt-get install patchelf`).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

usage="usage: scripts/deb/build.sh [--target TRIPLE]"
triple=
while [[ $# -gt 0 ]]; do
  case $1 in
    --target)
      [[ $# -ge 2 && -n $2 ]] || { echo "build.sh: --target needs a target triple, e.g. --target aarch64-unknown-linux-gnu; $usage" >&2; exit 2; }
      triple=$2
      shift 2
      ;;
    --target=*) triple=${1#--target=}; shift ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done

for tool in cargo-deb patchelf; do
  command -v "$tool" >/dev/null 2>&1 || {
    case $tool in
      cargo-deb) fix="cargo install cargo-deb --locked" ;;
      *) fix="apt-get install $tool" ;;
    esac
    echo "build.sh: $tool is not installed; install it with \`$fix\`" >&2
    exit 1
  }
done

target_dir=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)
host=$(rustc -vV | sed -n 's/^host: //p')
target_args=()
profile_dir=$target_dir/release
if [[ -n $triple ]]; then
  target_args=(--target "$triple")
  profile_dir=$target_dir/$triple/release
fi
version=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "sluice-client"))')
# The shared library's ABI: major.minor before 1.0 (0.1.x), major after.
major=${version%%.*}
if [[ $major == 0 ]]; then
  abi=$(cut -d. -f1,2 <<<"$version")
else
  abi=$major
fi
soname=libsluice_client.so.$abi

# One package per cargo invocation: built together, sluiced would get the
# CLI's features (the InSS planner and its ML framework) by unification.
build() {
  echo "==> cargo build --release $*"
  cargo build --release "$@"
}
build "${target_args[@]}" -p sluice-service --bin sluiced
# The CLI and the client library in one invocation: built apart, each run
# rewrites the library the other depends on and the next one rebuilds it.
build "${target_args[@]}" -p sluice-cli --bin sluice -p sluice-client --lib
for f in sluiced sluice libsluice_client.a libsluice_client.so; do
  [[ -f $profile_dir/$f ]] || { echo "build.sh: $profile_dir/$f is missing after the build" >&2; exit 1; }
done

# The generators run here, so they need binaries for this machine.
# SLUICE_DEB_HOST_BIN=DIR: use this machine's sluiced and sluice from DIR
# (e.g. target/release) instead of building them again for a cross build.
bin_dir=$profile_dir
if [[ -n ${SLUICE_DEB_HOST_BIN:-} ]]; then
  bin_dir=$(cd "$SLUICE_DEB_HOST_BIN" && pwd)
  for f in sluiced sluice; do
    [[ -x $bin_dir/$f ]] || { echo "build.sh: SLUICE_DEB_HOST_BIN=$SLUICE_DEB_HOST_BIN has no $f; build it with \`cargo build --release -p sluice-service --bin sluiced\` and \`-p sluice-cli --bin sluice\`, or unset SLUICE_DEB_HOST_BIN" >&2; exit 1; }
  done
elif [[ -n $triple && $triple != "$host" ]]; then
  build -p sluice-service --bin sluiced
  build -p sluice-cli --bin sluice
  bin_dir=$target_dir/release
fi

assets=$root/target/deb-assets
echo "==> generating $assets"
rm -rf "$assets"
mkdir -p "$assets/systemd" "$assets/man" "$assets/completions"

# The unit with the packaged path of the daemon; the repository's unit is
# written for binaries installed by hand in /usr/local/bin.
unit=daemon/service/systemd/sluiced.service
grep -q '^ExecStart=/usr/local/bin/sluiced ' "$unit" || {
  echo "build.sh: $unit has no 'ExecStart=/usr/local/bin/sluiced ' line to point at /usr/bin/sluiced; update this script with the unit" >&2
  exit 1
}
sed -e 's|^ExecStart=/usr/local/bin/sluiced |ExecStart=/usr/bin/sluiced |' \
  -e 's|^# Install: see daemon/service/systemd/README.md.*|# Installed by the sluice Debian package (docs/install.md).|' \
  "$unit" >"$assets/systemd/sluiced.service"

"$bin_dir/sluice" man --out "$assets/man" >/dev/null
"$bin_dir/sluiced" --man "$assets/man" >/dev/null
# gzip -n: no name or time stamp in the archive, so rebuilds are identical.
gzip -9n "$assets"/man/*.[18]

"$bin_dir/sluice" completions bash >"$assets/completions/sluice"
"$bin_dir/sluice" completions zsh >"$assets/completions/_sluice"
"$bin_dir/sluice" completions fish >"$assets/completions/sluice.fish"

# pkg-config file for the installed library: the repository's template,
# filled with the packaged paths (client-lib/build.rs fills it with the
# build tree's for uninstalled use). ${prefix} is pkg-config's, not ours.
# shellcheck disable=SC2016
sed -e 's|@PREFIX@|/usr|' -e 's|@LIBDIR@|${prefix}/lib|' \
  -e 's|@INCLUDEDIR@|${prefix}/include|' -e "s|@VERSION@|$version|" \
  -e 's|^# pkg-config template.*|# pkg-config file of the sluice client library, installed by the sluice|' \
  -e 's|^# fills in the @...@ fields.*|# Debian package: `pkg-config --cflags --libs sluice-client`.|' \
  client-lib/sluice.pc.in >"$assets/sluice-client.pc"
if grep -q '@[A-Z]*@' "$assets/sluice-client.pc"; then
  echo "build.sh: client-lib/sluice.pc.in has a field this script does not fill: $(grep -o '@[A-Z]*@' "$assets/sluice-client.pc" | head -1)" >&2
  exit 1
fi

# Debian's changelog of the package (lintian requires one); what changed in
# sluice itself is CHANGELOG.md. Dated by the last commit, so that a rebuild
# of one commit is identical.
date=$(git log -1 --format=%cD 2>/dev/null || date -R)
cat >"$assets/changelog" <<CHANGELOG
sluice ($version-1) unstable; urgency=medium

  * Package of sluice $version, built by scripts/deb/build.sh.

 -- sluice maintainers <sluice@example.invalid>  $date
CHANGELOG

# The shared library as installed: a SONAME, so that programs linked with
# -lsluice_client record libsluice_client.so.<abi>. A copy: the build
# tree's library stays as the C example links it.
mkdir -p "$profile_dir/deb-assets"
cp "$profile_dir/libsluice_client.so" "$profile_dir/deb-assets/libsluice_client.so.$abi"
patchelf --set-soname "$soname" "$profile_dir/deb-assets/libsluice_client.so.$abi"
# cargo deb strips what cargo built, not this copy. STRIP names the tool for
# another architecture (default: the GNU triple's, aarch64-linux-gnu-strip).
strip_tool=${STRIP:-strip}
if [[ -z ${STRIP:-} && -n $triple && $triple != "$host" ]]; then
  strip_tool=${triple/-unknown-/-}-strip
fi
"$strip_tool" --strip-unneeded "$profile_dir/deb-assets/libsluice_client.so.$abi" ||
  { echo "build.sh: $strip_tool failed on libsluice_client.so.$abi; set STRIP to a strip for $triple" >&2; exit 1; }
grep -q "libsluice_client.so.$abi\"" daemon/service/Cargo.toml || {
  echo "build.sh: daemon/service/Cargo.toml does not package libsluice_client.so.$abi; set the library's file names in [package.metadata.deb] assets to version $abi" >&2
  exit 1
}

# --strip: the release profile keeps line tables (debug = 1) for
# backtraces in the build tree; the package ships stripped binaries.
echo "==> cargo deb --no-build --strip -p sluice-service ${target_args[*]}"
cargo deb --no-build --strip -p sluice-service "${target_args[@]}"
