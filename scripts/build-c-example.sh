#!/usr/bin/env bash
# Builds the C client example twice, against the static and the shared
# sluice client library:
#   1. cargo build --release -p sluice-client, which also writes
#      <target>/release/sluice.pc from client-lib/sluice.pc.in (build.rs)
#   2. checks that the libraries and sluice.pc are there
#   3. cc client-lib/examples/hello.c -> target/c-example/hello-static
#                                      -> target/c-example/hello-shared (rpath)
# using pkg-config when it is installed (installed with apt-get when missing
# and running as root), explicit flags otherwise (or when SLUICE_NO_PKG_CONFIG=1).
# CC overrides the compiler. See docs/c-api.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

target=${CARGO_TARGET_DIR:-$root/target}
mkdir -p "$target"
target=$(cd "$target" && pwd)
libdir=$target/release
includedir=$root/client-lib/include
outdir=$target/c-example
CC=${CC:-cc}
CFLAGS=(-Wall -Wextra -Werror -std=c11 -O2)

echo "==> cargo build --release -p sluice-client"
cargo build --release -p sluice-client
for f in libsluice_client.a libsluice_client.so; do
  [[ -f $libdir/$f ]] || { echo "build-c-example: $libdir/$f is missing after the build" >&2; exit 1; }
done

# client-lib/build.rs writes sluice.pc next to the libraries on every build.
[[ -f $libdir/sluice.pc ]] || { echo "build-c-example: $libdir/sluice.pc is missing after the build (client-lib/build.rs writes it)" >&2; exit 1; }
echo "==> using $libdir/sluice.pc (written by client-lib/build.rs)"

use_pkg_config=1
[[ ${SLUICE_NO_PKG_CONFIG:-0} == 1 ]] && use_pkg_config=0
if [[ $use_pkg_config == 1 ]] && ! command -v pkg-config >/dev/null 2>&1 &&
   [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "==> installing pkg-config"
  (apt-get install -y pkg-config || { apt-get update && apt-get install -y pkg-config; }) >/dev/null 2>&1 ||
    echo "build-c-example: could not install pkg-config; using explicit flags" >&2
fi

if [[ $use_pkg_config == 1 ]] && command -v pkg-config >/dev/null 2>&1; then
  export PKG_CONFIG_PATH=$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  echo "==> flags from pkg-config ($(pkg-config --modversion sluice))"
  read -r -a cflags <<<"$(pkg-config --cflags sluice)"
  read -r -a shared_libs <<<"$(pkg-config --libs sluice)"
  pc_libdir=$(pkg-config --variable=libdir sluice)
  # --static adds Libs.private; -Bstatic makes -lsluice_client pick the .a.
  read -r -a static_libs <<<"$(pkg-config --static --libs sluice |
    sed 's/-lsluice_client/-Wl,-Bstatic -lsluice_client -Wl,-Bdynamic/')"
else
  echo "==> without pkg-config: explicit flags"
  private=$(sed -n 's/^Libs.private: *//p' client-lib/sluice.pc.in)
  cflags=(-I"$includedir")
  shared_libs=(-L"$libdir" -lsluice_client)
  pc_libdir=$libdir
  read -r -a static_libs <<<"-L$libdir -Wl,-Bstatic -lsluice_client -Wl,-Bdynamic $private"
fi

mkdir -p "$outdir"
set -x
"$CC" "${CFLAGS[@]}" "${cflags[@]}" client-lib/examples/hello.c -o "$outdir/hello-static" "${static_libs[@]}"
"$CC" "${CFLAGS[@]}" "${cflags[@]}" client-lib/examples/hello.c -o "$outdir/hello-shared" "${shared_libs[@]}" \
  -Wl,-rpath,"$pc_libdir"
{ set +x; } 2>/dev/null

# The static binary must not need the shared library, and the shared one must.
if command -v readelf >/dev/null 2>&1; then
  if readelf -d "$outdir/hello-static" | grep -q 'NEEDED.*libsluice_client'; then
    echo "build-c-example: hello-static depends on libsluice_client.so" >&2
    exit 1
  fi
  if ! readelf -d "$outdir/hello-shared" | grep -q 'NEEDED.*libsluice_client'; then
    echo "build-c-example: hello-shared does not link libsluice_client.so" >&2
    exit 1
  fi
fi
echo "==> built $outdir/hello-static and $outdir/hello-shared"
