#!/usr/bin/env bash
# Checks the Debian package end to end (docs/install.md):
#   1. builds it (scripts/deb/build.sh)
#   2. lintian: fails on any error; warnings are printed (the accepted ones
#      carry an override with its reason in scripts/deb/lintian-overrides)
#   3. in a throwaway Debian bookworm root (debootstrap --variant=minbase,
#      cached as a tarball in ${XDG_CACHE_HOME:-~/.cache}/sluice/): dpkg -i;
#      the user, group, directories and enabled unit are there; sluiced runs
#      as the unit would run it (user sluice, /run/sluice, the installed
#      /etc/sluice/sluiced.toml), its socket is group sluice, mode 0660, and
#      `sluice status` answers on it; SIGTERM stops it; dpkg -r, dpkg -P, and
#      nothing the package or its scripts made is left
# There is no systemd in the root: policy-rc.d forbids starting services,
# so the maintainer scripts enable the unit but start nothing.
#
#   scripts/deb/check.sh        (as root: chroot and mount /proc)
#
# SLUICE_DEB=FILE checks that .deb instead of building one.
#
# Installs lintian, debootstrap and patchelf with apt-get when missing.
# SLUICE_DEB_MIRROR overrides the Debian mirror (http://deb.debian.org/debian).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
t0=$(date +%s)
phase() { echo "==> [$(($(date +%s) - t0)) s] $*"; }
die() { echo "check.sh: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root to chroot into the throwaway root and mount /proc there; run it as root (sudo scripts/deb/check.sh)"

missing=()
for tool in lintian debootstrap patchelf; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  phase "apt-get install ${missing[*]}"
  # The lock other scripts of the project take around apt-get (CI runs some side by side).
  flock /tmp/sluice-apt.lock sh -c 'apt-get install -y "$@" >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y "$@" >/dev/null; }' sh "${missing[@]}" ||
    die "cannot install ${missing[*]} with apt-get; install them and run again"
fi

if [[ -n ${SLUICE_DEB:-} ]]; then
  deb=$SLUICE_DEB
  [[ -f $deb ]] || die "SLUICE_DEB=$deb is not a file; name a .deb that scripts/deb/build.sh built, or unset it to build one"
else
  phase "scripts/deb/build.sh"
  build_log=$(mktemp)
  bash scripts/deb/build.sh 2>&1 | tee "$build_log"
  deb=$(grep -o '/[^ ]*/sluice_[^ /]*\.deb' "$build_log" | tail -n 1 || true)
  rm -f "$build_log"
  [[ -n $deb && -f $deb ]] || die "build.sh printed no .deb path (cargo deb prints it last)"
fi
phase "built $deb ($(du -k "$deb" | cut -f1) KiB)"

phase "lintian $deb"
lintian --fail-on error "$deb" || die "lintian reports errors in $deb (above); fix them, or override one in scripts/deb/lintian-overrides with the reason"

# The throwaway root.
arch=$(dpkg --print-architecture)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/sluice
tarball=$cache/bookworm-minbase-$arch.tar.gz
work=$(mktemp -d "${TMPDIR:-/var/tmp}/sluice-deb-check.XXXXXX")
chroot_dir=$work/root
daemon_pid=
cleanup() {
  local rc=$?
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if mountpoint -q "$chroot_dir/proc"; then
    umount "$chroot_dir/proc" || umount -l "$chroot_dir/proc" || true
  fi
  if mountpoint -q "$chroot_dir/proc"; then
    echo "check.sh: $chroot_dir/proc is still mounted; left $work in place" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$chroot_dir"
if [[ -f $tarball ]]; then
  phase "unpacking the cached root $tarball"
  tar -xzf "$tarball" -C "$chroot_dir"
else
  phase "debootstrap --variant=minbase bookworm (cached afterwards as $tarball)"
  debootstrap --variant=minbase bookworm "$chroot_dir" "${SLUICE_DEB_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above); check the mirror, or set SLUICE_DEB_MIRROR"; }
  rm -rf "$chroot_dir"/var/cache/apt/archives/*.deb
  mkdir -p "$cache"
  tar -czf "$tarball.tmp" -C "$chroot_dir" . && mv "$tarball.tmp" "$tarball"
fi
in_root() { chroot "$chroot_dir" "$@"; }
mount -t proc proc "$chroot_dir/proc"
printf '#!/bin/sh\n# No services are started in this throwaway root.\nexit 101\n' >"$chroot_dir/usr/sbin/policy-rc.d"
chmod 755 "$chroot_dir/usr/sbin/policy-rc.d"

# Every path of the root before the install, to compare after the purge;
# not dpkg's database and logs, nor adduser's lock file /run/adduser.
snapshot() {
  in_root find / -xdev \( -path /proc -o -path /tmp -o -path /var/lib/dpkg -o -path /var/log -o -path /var/cache/debconf -o -path /run/adduser \) -prune -o -print |
    grep -v -E '^/etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$' | sort
}
snapshot >"$work/before"

phase "dpkg -i $(basename "$deb")"
cp "$deb" "$chroot_dir/tmp/sluice.deb"
in_root dpkg -i /tmp/sluice.deb || die "dpkg -i failed (output above)"

phase "checking the installed layout"
in_root getent group sluice >/dev/null || die "postinst did not create the group sluice"
in_root getent passwd sluice >/dev/null || die "postinst did not create the user sluice"
for p in /usr/bin/sluiced /usr/bin/sluice /etc/sluice/sluiced.toml /usr/lib/libsluice_client.a \
  /usr/lib/libsluice_client.so /usr/include/sluice.h /usr/lib/pkgconfig/sluice-client.pc \
  /usr/share/man/man8/sluiced.8.gz /usr/share/man/man1/sluice.1.gz \
  /usr/share/bash-completion/completions/sluice /etc/systemd/system/multi-user.target.wants/sluiced.service; do
  in_root test -e "$p" || die "the installed package lacks $p"
done
[[ -d $chroot_dir/var/lib/sluice/models ]] || die "postinst did not create /var/lib/sluice/models"
# shellcheck disable=SC2016 # dpkg-query's own ${...} format
in_root dpkg-query -W -f='${Conffiles}\n' sluice | grep -q /etc/sluice/sluiced.toml ||
  die "/etc/sluice/sluiced.toml is not a conffile of the package"
unit=$(in_root dpkg -L sluice | grep '/systemd/system/sluiced.service$') || die "the package has no sluiced.service"
grep -q '^ExecStart=/usr/bin/sluiced --config /etc/sluice/sluiced.toml$' "$chroot_dir$unit" ||
  die "$unit does not start /usr/bin/sluiced --config /etc/sluice/sluiced.toml"
# shellcheck disable=SC2016 # pkg-config's ${prefix}, literally
grep -q '^libdir=${prefix}/lib$' "$chroot_dir/usr/lib/pkgconfig/sluice-client.pc" ||
  die "sluice-client.pc has no libdir=\${prefix}/lib"
in_root /usr/bin/sluiced --check-config /etc/sluice/sluiced.toml >/dev/null ||
  die "sluiced --check-config rejects the installed /etc/sluice/sluiced.toml (error above)"

# As the unit runs it: User=sluice, Group=sluice, RuntimeDirectory=sluice
# (mode 0750), ExecStart= as in the unit.
phase "starting sluiced as user sluice with /etc/sluice/sluiced.toml"
sock=/run/sluice/sluiced.sock
install -d -m 0750 "$chroot_dir/run/sluice"
in_root chown sluice:sluice /run/sluice
# chroot itself, not in_root: a function would run in a subshell, and $!
# would be the subshell's pid, not the daemon's (chroot and setpriv exec).
chroot "$chroot_dir" setpriv --reuid=sluice --regid=sluice --init-groups \
  /usr/bin/sluiced --config /etc/sluice/sluiced.toml >"$work/sluiced.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 300); do
  [[ -S $chroot_dir$sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/sluiced.log" >&2; die "sluiced exited before listening on $sock (log above)"; }
  sleep 0.1
done
[[ -S $chroot_dir$sock ]] || { cat "$work/sluiced.log" >&2; die "sluiced did not create $sock within 30 s (log above)"; }
owner=$(in_root stat -c '%U:%G %a' "$sock")
[[ $owner == "sluice:sluice 660" ]] || die "$sock is $owner; expected sluice:sluice 660"
echo "$sock: $owner"
in_root /usr/bin/sluice status --socket "$sock" | head -n 8 || die "sluice status --socket $sock failed (above)"
kill -TERM "$daemon_pid"
daemon_rc=0
for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
wait "$daemon_pid" || daemon_rc=$?
daemon_pid=
[[ $daemon_rc == 0 ]] || { cat "$work/sluiced.log" >&2; die "sluiced exited with status $daemon_rc on SIGTERM; expected 0 (log above)"; }
phase "sluiced stopped on SIGTERM (exit status 0); its log:"
sed 's/^/    /' "$work/sluiced.log"
# systemd removes the RuntimeDirectory when the service stops.
rm -rf "$chroot_dir/run/sluice"

phase "dpkg -r sluice"
in_root dpkg -r sluice || die "dpkg -r sluice failed (output above)"
[[ ! -e $chroot_dir/usr/bin/sluiced ]] || die "dpkg -r left /usr/bin/sluiced"
[[ -f $chroot_dir/etc/sluice/sluiced.toml ]] || die "dpkg -r removed the conffile /etc/sluice/sluiced.toml; only a purge may"
phase "dpkg -P sluice"
in_root dpkg -P sluice || die "dpkg -P sluice failed (output above)"
in_root getent passwd sluice >/dev/null && die "dpkg -P left the user sluice"
in_root getent group sluice >/dev/null && die "dpkg -P left the group sluice"
snapshot >"$work/after"
if ! diff -u "$work/before" "$work/after" >"$work/left"; then
  cat "$work/left" >&2
  die "the root differs after dpkg -P from before dpkg -i (+: left behind, -: removed)"
fi
phase "install, start, remove and purge: clean"
phase "done in $(($(date +%s) - t0)) s"
