#!/usr/bin/env bash
# The test run's private host: runs a command where the places a test can leave
# state in are fresh, so that what a machine already holds can neither hide a
# leftover nor cause a failure, and nothing the run leaves can outlive it.
#
#   scripts/sandbox.sh -- CMD ARGS...   run CMD (as root) in the private host;
#                                       exit: CMD's status, or 3 when CMD passed
#                                       but left something behind (named)
#   scripts/sandbox.sh --self-test      the check's own tests: a clean command
#                                       passes, leftovers are caught and named
#
# CMD runs in its own mount and PID namespaces (unshare), where
#   - /tmp, /var/tmp and /run are empty directories (/run gets only /run/lock),
#   - /etc, /var/lib, /var/cache, /var/log, /opt and /root are overlays of the
#     host's (the host's files are there, every write goes to an upper layer of
#     the run's),
#   - the engines' state and configuration directories (FRESH_DIRS below) are
#     fresh: empty, but for the files the installed Debian packages ship there
#     (/etc/containers/policy.json and the like, as on a machine where the
#     package was just installed),
#   - /root/.cargo and /root/.rustup are the host's (the toolchain and its
#     download cache; not test state), and so is the checkout, wherever it is.
# The backing directories live in one directory on the host's disk, made here
# and removed here. Before the namespaces go (their processes killed, their
# mounts gone), the private host is compared with how it looked before CMD:
# its mount table, every entry of the fresh directories three levels down,
# every file written through an overlay (at any depth), the cgroups, and every
# process still running in the PID namespace; anything new is named and the
# exit status is 3. The host outside is left to the caller's own check
# (scripts/test.sh compares the whole host before and after).
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

EMPTY_DIRS=(/tmp /var/tmp /run)
OVERLAYS=(/etc /var/lib /var/cache /var/log /opt /root)
FRESH_DIRS=(/var/lib/docker /var/lib/containerd /var/lib/containers /var/lib/cni /var/lib/kubelet
  /etc/docker /etc/containerd /etc/containers /etc/cni /etc/gpu-quota /var/cache/containers
  /var/lib/gpu-quota /root/.docker /root/.config/containers /root/.local/share/containers)
HOST_DIRS=(/root/.cargo /root/.rustup)
# What the private host's own plumbing changes, not the test run: util-linux
# keeps its table of mounts in /run/mount (made by the first mount(8) of a boot).
IGNORE='^path /run/mount(/|$)'

# ------------------------------------------------------------------ inside
# procs: every process of the namespace but this shell (PID 1), one line each;
# builtins only, so that the listing sees no process of its own
procs() {
  local p st c
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = 1 ] && continue
    read -r st <"$p/stat" 2>/dev/null || continue
    st=${st##*) }; [ "${st%% *}" = Z ] && continue   # the dead are not left
    mapfile -d '' c <"$p/cmdline" 2>/dev/null || continue
    echo "process ${c[*]}"
  done
}

# snapshot OUT: the private host as one sorted text (run inside the namespaces)
snapshot() {
  local p
  procs >"$1.procs"
  {
    cat "$1.procs"; rm -f "$1.procs"
    bash "$HERE/host-snapshot.sh" | grep -vE "^(process|cgroup) "
    for p in /tmp /var/tmp /run; do find "$p" -mindepth 1 -maxdepth 3 2>/dev/null | sed 's/^/path /'; done
    for p in "$RUN"/ovl/*/up; do
      (cd "$p" && find . -mindepth 1 | sed "s|^\.|wrote $(cat ../target)|")
    done
  } | grep -vE "$IGNORE" | grep -vF " $ROOT/" | LC_ALL=C sort -u >"$1"
}

# the entries Debian's packages ship under the fresh directories (their
# conffiles among them), copied from the host tree at $RUN/host
seed_from_packages() {
  local f re; re=$(IFS='|'; echo "${FRESH_DIRS[*]}")
  { cat /var/lib/dpkg/info/*.list 2>/dev/null || true; } | { grep -E "^($re)/" || true; } | LC_ALL=C sort -u |
  while read -r f; do
    if [ -d "$RUN/host$f" ] && [ ! -L "$RUN/host$f" ]; then mkdir -p "$f"
    elif [ -e "$RUN/host$f" ] || [ -L "$RUN/host$f" ]; then mkdir -p "$(dirname "$f")"; cp -a "$RUN/host$f" "$f"
    fi
  done
}

inside() {
  set -e
  mount --make-rprivate /
  # $RUN lies under a directory about to be covered: reach it through /mnt
  # (this namespace's own), and hold what is kept before anything is covered
  mount --bind "$RUN" /mnt; RUN=/mnt
  mkdir -p "$RUN/host"; mount --bind / "$RUN/host"
  local d n i=0
  for d in "${HOST_DIRS[@]}" "$ROOT"; do
    i=$((i + 1)); [ -d "$d" ] || continue
    mkdir -p "$RUN/keep/$i"; mount --rbind "$d" "$RUN/keep/$i"
  done
  for d in "${OVERLAYS[@]}"; do
    n=$RUN/ovl/$(echo "${d#/}" | tr / _); mkdir -p "$n/up" "$n/work"; echo "$d" >"$n/target"
    mount -t overlay gq-sandbox -o "lowerdir=$d,upperdir=$n/up,workdir=$n/work" "$d"
  done
  for d in "${EMPTY_DIRS[@]}" "${FRESH_DIRS[@]}"; do
    n=$RUN/fresh/$(echo "${d#/}" | tr / _); mkdir -p "$n" "$d"
    chmod "$(stat -c %a "$RUN/host$d" 2>/dev/null || echo 755)" "$n"
    mount --bind "$n" "$d"
  done
  chmod 1777 /tmp /var/tmp; mkdir -m 1777 /run/lock
  seed_from_packages
  i=0
  for d in "${HOST_DIRS[@]}" "$ROOT"; do
    i=$((i + 1)); [ -d "$RUN/keep/$i" ] || continue
    mkdir -p "$d"; mount --rbind "$RUN/keep/$i" "$d"
  done
  # a booted host's mounts are shared (systemd makes / rshared), and engines
  # act on it: dockerd makes a private data root a shared mount of its own.
  # Shared here means among this namespace's mounts only: they were all made
  # private to the host first.
  mount --make-rshared /
  # the upper layers now hold the mount points made above: part of the baseline
  snapshot "$RUN/before"
  set +e
  local rc; "$@"; rc=$?
  snapshot "$RUN/after"
  local new; new=$(LC_ALL=C comm -13 "$RUN/before" "$RUN/after")
  if [ -n "$new" ]; then
    echo "sandbox: left in the private host by the run (not there before it):"
    printf '%s\n' "$new" | head -60 | sed 's/^/  /'
    [ "$(printf '%s\n' "$new" | wc -l)" -le 60 ] || echo "  … and more"
    [ "$rc" != 0 ] || rc=3
  else
    echo "sandbox: nothing left in the private host"
  fi
  return "$rc"
}

if [ "${1:-}" = --inside ]; then
  RUN=$2; shift 3   # --inside RUN --
  inside "$@"; exit $?
fi

# ------------------------------------------------------------------ outside
run_sandboxed() {
  [ "$(id -u)" = 0 ] || { echo "sandbox: needs root (mount and PID namespaces)"; return 1; }
  command -v unshare >/dev/null || { echo "sandbox: needs unshare (util-linux)"; return 1; }
  RUN=$(mktemp -d /var/tmp/gq-sandbox.XXXXXX) || return 1
  chmod 700 "$RUN"
  local rc
  unshare --mount --pid --fork --mount-proc --propagation private -- \
    bash "$HERE/sandbox.sh" --inside "$RUN" -- "$@"
  rc=$?
  # the namespaces are gone: nothing is mounted under $RUN any more
  if grep -qF " $RUN/" /proc/self/mountinfo; then
    echo "sandbox: $RUN still has mounts on the host; not removed"; return 1
  fi
  rm -rf "$RUN"
  return $rc
}

self_test() {
  local out passed=0 failed=0
  t() { # NAME WANT_RC PATTERN CMD...: the sandbox's verdict on CMD
    local name=$1 want=$2 pat=$3 rc; shift 3
    out=$(run_sandboxed "$@" 2>&1); rc=$?
    if [ "$rc" = "$want" ] && printf '%s\n' "$out" | grep -qE -- "$pat"; then
      echo "ok   sandbox: $name"; passed=$((passed + 1))
    else
      echo "FAIL sandbox: $name (exit $rc, wanted $want)"; printf '%s\n' "$out" | tail -15 | sed 's/^/     | /'; failed=$((failed + 1))
    fi
  }
  local mark=gq-sandbox-probe-$$
  # what a used machine holds must not be seen by the run
  touch "/var/tmp/$mark"
  t "a clean run passes: fresh /tmp, /var/tmp (a host file there unseen) and /run, the host's /etc" 0 'nothing left in the private host' \
    sh -c "[ -z \"\$(find /tmp /var/tmp -mindepth 1)\" ] && [ -z \"\$(ls -A /run | grep -vxE 'lock|mount')\" ] && [ -s /etc/passwd ] && [ ! -e /var/tmp/$mark ] &&
           f=\$(mktemp -d /tmp/x.XXXXXX) && mount -t tmpfs t \"\$f\" && umount \"\$f\" && rmdir \"\$f\""
  t "a file left under the private /run is named" 3 "path /run/$mark" sh -c "touch /run/$mark"
  t "a mount left in the private host is named" 3 "mount /tmp/$mark tmpfs" \
    sh -c "mkdir /tmp/$mark && mount -t tmpfs gq /tmp/$mark"
  t "a file written deep under /etc is named, and the host's /etc is untouched" 3 "wrote /etc/gq/$mark/a/b" \
    sh -c "mkdir -p /etc/gq/$mark/a && touch /etc/gq/$mark/a/b"
  t "a process left running is named" 3 "process (setsid )?sleep 1234" sh -c "setsid sleep 1234 </dev/null >/dev/null 2>&1 & sleep 0.2"
  t "a failing command keeps its status" 7 'nothing left' sh -c 'exit 7'
  rm -f "/var/tmp/$mark"
  if [ -e "/run/$mark" ] || [ -e "/tmp/$mark" ] || [ -e /etc/gq ] || pgrep -f 'sleep 1234' >/dev/null; then
    echo "FAIL sandbox: the host saw the private host's files or processes"; failed=$((failed + 1))
  else
    echo "ok   sandbox: the host saw none of it"; passed=$((passed + 1))
  fi
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}

case "${1:-}" in
  --self-test) self_test ;;
  --) shift; run_sandboxed "$@" ;;
  *) echo "usage: $0 -- CMD ARGS... | --self-test" >&2; exit 2 ;;
esac
