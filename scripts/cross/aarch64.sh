#!/usr/bin/env bash
# sluice for arm64 edge boxes (Jetson-class aarch64 Linux), built on an x86-64 Debian host:
#
#   1. sluiced, sluice and the client library (libsluice_client.so/.a) cross-built for
#      aarch64-unknown-linux-gnu in release;
#   2. the shared-memory protocol's, the client library's and the request path's tests
#      (a real sluiced process and real client processes) run under qemu-user;
#   3. the arm64 Debian package (scripts/deb/build.sh --target), checked by lintian.
#
# The compiler is Debian's rustc-web with Debian's aarch64 standard library
# (libstd-rust-web-dev:arm64, the same source package, so the two always agree); rustup's
# aarch64 target is not needed. Linking uses Debian's aarch64-linux-gnu-gcc. Child processes
# the tests start (the daemon, client roles) run under qemu through binfmt_misc, registered
# here when the kernel lets root do it.
#
# What qemu-user cannot show: it runs the aarch64 code on this x86-64 host, whose memory
# model (TSO) is stronger than aarch64's, so a missing Acquire/Release would still pass
# here. The loom models of the rings and the wake protocol (scripts/test-all.sh) are the
# check of the memory orderings. Timing under qemu is not the device's either.
#
# Usage: scripts/cross/aarch64.sh [--no-tests] [--no-deb] [--build-only]   (root: apt-get, binfmt_misc)
#   --build-only  compile the binaries and the test executables, run nothing, build no package
#                 (CI compiles in the background this way, then runs the script again whole)
# Output: target/cross/aarch64-unknown-linux-gnu/release/{sluiced,sluice,libsluice_client.*}
#         and target/cross/aarch64-unknown-linux-gnu/debian/sluice_<version>-1_arm64.deb
# The package's man pages and completions come from this machine's binaries:
# target/release/{sluiced,sluice} when built (scripts/deb/check.sh builds them), else
# build.sh builds them.
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGET=aarch64-unknown-linux-gnu
RUN_TESTS=1
BUILD_DEB=1
BUILD_ONLY=0
for a in "$@"; do
  case "$a" in
    --no-tests) RUN_TESTS=0 ;;
    --no-deb) BUILD_DEB=0 ;;
    --build-only) BUILD_ONLY=1; BUILD_DEB=0 ;;
    -h|--help) sed -n '2,/^set -e/{/^set -e/!p}' "$0"; exit 0 ;;
    *) echo "aarch64.sh: unknown argument '$a' (use --no-tests, --no-deb, --build-only or --help)" >&2; exit 2 ;;
  esac
done

step() { printf '\n==> %s\n' "$*"; }

step "toolchain (Debian rustc-web + its arm64 std, aarch64-linux-gnu-gcc, qemu-user)"
if ! dpkg-query -W -f='${Status}' libstd-rust-web-dev:arm64 2>/dev/null | grep -q "ok installed" \
   || ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null \
   || ! command -v file >/dev/null; then
  flock /tmp/sluice-apt.lock sh -c '
    dpkg --add-architecture arm64 &&
    apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustc-web libstd-rust-web-dev:arm64 \
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user qemu-user-binfmt \
      libc6:arm64 libgcc-s1:arm64 file >/dev/null'
fi
RUSTC_DEB=/usr/bin/rustc
host_v=$("$RUSTC_DEB" --version | awk '{print $2}')
std_v=$(dpkg-query -W -f='${Version}' libstd-rust-web-dev:arm64)
echo "rustc $host_v (Debian rustc-web), aarch64 std $std_v"
case "$std_v" in "$host_v"+*) ;; *)
  echo "aarch64.sh: Debian's rustc ($host_v) and its arm64 std ($std_v) differ; run apt-get install --only-upgrade rustc-web libstd-rust-web-dev:arm64" >&2
  exit 1 ;;
esac

# Children the tests start are aarch64 programs too: the kernel hands them to qemu.
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
fi
if [ -e /proc/sys/fs/binfmt_misc/register ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register || true
fi
if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then echo "binfmt_misc: aarch64 programs run under qemu"
else echo "binfmt_misc: not available (tests that start child processes will fail)"; fi

export RUSTC="$RUSTC_DEB"
export RUSTDOC=/usr/bin/rustdoc   # doctests: Debian's rustdoc knows its aarch64 std
export CARGO_TARGET_DIR=target/cross
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# No debug info in the arm64 build: the package strips it anyway, and generating it roughly
# doubles the binaries (55 MiB sluiced) and lengthens the build and the link.
export CARGO_PROFILE_RELEASE_DEBUG=0
# The loader and C library come from Debian's arm64 packages (libc6:arm64 in /lib), not from the
# cross toolchain's /usr/aarch64-linux-gnu: under `qemu-aarch64 -L /usr/aarch64-linux-gnu` the
# clock test hangs in its first clock read.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar

step "cross-build sluiced, sluice and the client library for $TARGET (release)"
# As scripts/deb/build.sh builds them: sluiced on its own (built with the CLI it would get the
# CLI's InSS planner and its ML framework by feature unification), then the CLI with the
# client library's shared and static libraries.
cargo build --release --target "$TARGET" -p sluice-service --bin sluiced
cargo build --release --target "$TARGET" -p sluice-cli --bin sluice -p sluice-client --lib
out="$CARGO_TARGET_DIR/$TARGET/release"
for f in sluiced sluice libsluice_client.so; do
  file -b "$out/$f" | grep -q "ARM aarch64" || { echo "aarch64.sh: $out/$f is not an aarch64 ELF: $(file -b "$out/$f")" >&2; exit 1; }
  echo "$out/$f: $(file -b "$out/$f" | cut -d, -f1-2), $(du -h "$out/$f" | cut -f1)"
done
"$out/sluice" --version

# The tests under qemu: the shared-memory protocol's and the client library's, and the request
# path's (a real sluiced, the one built above, and real client processes).
unit_tests=(-p shm-proto -p sluice-client)
# (--no-default-features: without the tests that call the CLI's library, the tests crate links
# no CLI, benchmarks or ML framework, which would otherwise be compiled again for aarch64.)
path_tests=(-p sluice-tests --no-default-features --test sluiced_binary --test typed_tensors --test ring_full_backpressure
  --test client_killed_in_flight --test hostile_client)
if [ "$BUILD_ONLY" = 1 ]; then
  step "compiling the test executables for $TARGET (not run: --build-only)"
  cargo test --release --target "$TARGET" "${unit_tests[@]}" --no-run -q
  cargo test --release --target "$TARGET" "${path_tests[@]}" --no-run -q
  exit 0
fi
if [ "$RUN_TESTS" = 1 ]; then
step "under qemu-user: shm-proto, the client library, and the request path (real daemon and client processes)"
# One test thread: spin-waiting tests sharing two emulated cores make no progress otherwise.
cargo test --release --target "$TARGET" "${unit_tests[@]}" -q -- --test-threads=1
SLUICE_REQUIRE_BINARIES=1 cargo test --release --target "$TARGET" "${path_tests[@]}" -q -- --test-threads=1
fi

[ "$BUILD_DEB" = 1 ] || exit 0
step "the arm64 Debian package"
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked
command -v patchelf >/dev/null && command -v lintian >/dev/null || \
  flock /tmp/sluice-apt.lock sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf lintian >/dev/null'
host_bin=
if [ -x target/release/sluiced ] && [ -x target/release/sluice ]; then host_bin=target/release; fi
log=$(mktemp)
SLUICE_DEB_HOST_BIN="$host_bin" STRIP=aarch64-linux-gnu-strip \
  bash scripts/deb/build.sh --target "$TARGET" 2>&1 | tee "$log" | grep -vE '^ *(Compiling|Finished)|Only source paths' || true
deb=$(grep -o '/[^ ]*/sluice_[^ /]*_arm64\.deb' "$log" | tail -n 1 || true)
rm -f "$log"
[ -n "$deb" ] && [ -f "$deb" ] || { echo "aarch64.sh: scripts/deb/build.sh --target $TARGET wrote no arm64 .deb" >&2; exit 1; }
dpkg-deb --field "$deb" Package Version Architecture Depends
dpkg-deb -c "$deb" | awk '{print $6}' | grep -E 'usr/bin/|\.so|\.a$' 
for f in usr/bin/sluiced usr/bin/sluice; do
  dpkg-deb --fsys-tarfile "$deb" | tar -xO "./$f" > "$CARGO_TARGET_DIR/deb-check-$(basename "$f")"
  file -b "$CARGO_TARGET_DIR/deb-check-$(basename "$f")" | grep -q "ARM aarch64" || { echo "aarch64.sh: $f in $deb is not aarch64" >&2; exit 1; }
done
echo "lintian $deb:"
lintian --fail-on error "$deb" || \
  { echo "aarch64.sh: lintian reports errors on $deb" >&2; exit 1; }
echo "arm64 package: $deb ($(du -h "$deb" | cut -f1))"
