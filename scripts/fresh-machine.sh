#!/usr/bin/env bash
# `make test` (and `make demo`) on a machine nobody prepared: a throw-away
# Debian 12 root built from Debian's packages (debootstrap --variant=minbase:
# no engine, runc, busybox, tmux, compiler or git ever installed in it), a
# fresh clone of HEAD, and the README's commands run in it as root — the way
# a newcomer's first hour goes. See docs/testing.md.
#
#   scripts/fresh-machine.sh [--demo] [--runs N] [--keep]
#
# --demo    time `make demo` from the fresh clone first (the README's figure)
# --runs N  run .ci/run N times in a row in the same root (default 2: the
#           second run finds what the first left, as a reused machine does)
# --keep    keep the root (default: removed at the end)
#
# Only the Rust toolchain comes from the host (rustup's toolchains and
# cargo's download cache, bound read-write at /root/.rustup and /root/.cargo):
# there is no other way to get it here. Everything else the suite uses it must
# install itself (.ci/run → scripts/test.sh → apt-get).
# The root becomes / (pivot_root) in its own mount and PID namespaces, with
# the host's /dev, /sys and cgroups and a /proc of its own (runc and the
# engines need them); its processes end with it. Needs root, debootstrap, network access to Debian's mirror.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
DEMO=0; RUNS=2; KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --demo) DEMO=1 ;;
    --runs) RUNS=$2; shift ;;
    --keep) KEEP=1 ;;
    *) echo "usage: $0 [--demo] [--runs N] [--keep]"; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 1; }
command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)"; exit 1; }
MIRROR=${GQ_DEBIAN_MIRROR:-http://deb.debian.org/debian}
F=$(mktemp -d /var/tmp/gq-fresh.XXXXXX)
cleanup() { [ "$KEEP" = 1 ] && echo "kept: $F" || rm -rf --one-file-system "$F"; }
trap cleanup EXIT

echo "== a Debian 12 root from packages (debootstrap --variant=minbase) in $F"
t=$SECONDS
debootstrap --variant=minbase --include=ca-certificates,git,make,gcc,libc6-dev,python3,iproute2,procps,sudo \
  bookworm "$F/root" "$MIRROR" >"$F/debootstrap.log" 2>&1 || { tail -20 "$F/debootstrap.log"; exit 1; }
echo "   ($((SECONDS - t)) s)"
for b in runc busybox tmux docker dockerd containerd podman; do
  [ ! -e "$F/root/usr/bin/$b" ] && [ ! -e "$F/root/usr/sbin/$b" ] || { echo "the fresh root already has $b"; exit 1; }
done
git clone -q "$ROOT" "$F/root/root/gpu-quota"
git -C "$F/root/root/gpu-quota" log --oneline -1

# inside the root: what a newcomer types, timed
cat >"$F/root/root/first-hour.sh" <<EOF
#!/bin/bash
set -u
export PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
cd /root/gpu-quota
if [ $DEMO = 1 ]; then
  s=\$SECONDS
  make demo >/root/demo.log 2>&1; rc=\$?
  tail -25 /root/demo.log
  echo "fresh-machine: make demo exit \$rc in \$((SECONDS - s)) s"
  # the demo's build is not the suite's: start the suite from a clean clone
  cd /root && rm -rf gpu-quota && git clone -q /root/clone.git gpu-quota && cd gpu-quota
fi
for i in \$(seq 1 $RUNS); do
  s=\$SECONDS
  CI=true bash .ci/run </dev/null >/root/ci-\$i.log 2>&1; rc=\$?
  grep -E '^(ok  |FAIL|== |failing suites|[0-9]+ passed|ci: |left|  )' /root/ci-\$i.log | grep -vE '^ok  ' | tail -60
  echo "fresh-machine: run \$i: exit \$rc in \$((SECONDS - s)) s"
done
EOF
chmod +x "$F/root/root/first-hour.sh"
git clone -q --bare "$ROOT" "$F/root/root/clone.git"

echo "== in the root: $([ $DEMO = 1 ] && echo "make demo, then ")$RUNS × .ci/run"
unshare --mount --pid --fork --propagation private -- bash -ec "
  r='$F/root'
  # the root is a mount of its own and becomes / by pivot_root, as on a
  # booted machine (runc and unshare need / to be a mount point)
  mount --bind \"\$r\" \"\$r\"
  mount --rbind /dev \"\$r/dev\"
  mount --rbind /sys \"\$r/sys\"
  mount -t tmpfs -o mode=1777 tmpfs \"\$r/dev/shm\"
  cp /etc/resolv.conf \"\$r/etc/resolv.conf\"
  mkdir -p \"\$r/root/.cargo\" \"\$r/root/.rustup\" \"\$r/.oldroot\"
  mount --bind /root/.cargo \"\$r/root/.cargo\"; mount --bind /root/.rustup \"\$r/root/.rustup\"
  cd \"\$r\"; pivot_root . .oldroot
  mount -t proc proc /proc
  umount -l /.oldroot; rmdir /.oldroot
  mount --make-rshared /
  exec /root/first-hour.sh
" 2>&1 | tee "$F/first-hour.log"
