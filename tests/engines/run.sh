#!/usr/bin/env bash
# Real-engine tests: gpu-quota-runtime under every engine we support, each the
# real daemon, on a fake GPU host (mknod'd device nodes, fake driver libraries,
# a static inventory of two 16 GiB GPUs). Two rounds:
#
#   Debian 12 (the machine's packages): containerd 1.6 (ctr + CRI), Docker 20.10
#     (env fallback, env_requests = true), podman 4.3;
#   Debian 13 (trixie, unpacked into a private prefix by tests/engines/trixie.sh):
#     containerd 1.7 (ctr + CRI), Docker 26 (annotations: the README's headline
#     command as written there), Docker Compose 2.26.
#
# Every case name starts with the engine and the version that ran it.
# The CRI cases drive containerd's CRI socket as kubelet does, with tests/cri's
# gq-cri (RunPodSandbox/CreateContainer/StartContainer/StopPodSandbox/
# RemovePodSandbox), host network, a locally imported sandbox image and the
# runtime handler written by `gpu-quota install containerd`.
#
# Everything lives under one temp dir $T: private containerd (--config/--root/
# --state/--address), private dockerd (--config-file/--data-root/--exec-root/
# --pidfile/-H), podman with --root/--runroot/--tmpdir and CONTAINERS_CONF, run in
# a private mount namespace whose /etc carries gpu-quota/config.toml (podman does
# not pass GPU_QUOTA_CONFIG to the runtime). The machine's /etc and daemons are
# never used or touched; what the daemons create outside $T by hard-coded paths
# (/run/containerd, /run/runc, /run/docker, /etc/docker/key.json) is removed
# again when it was not there before, and the last case checks that.
# docs/engines.md describes what is tested and why.
#
# Needs root, runc, busybox (static), dockerd, containerd, ctr, podman, conmon,
# unshare/nsenter (util-linux), apt-get + dpkg (the trixie download), cargo (gq-cri).
# Binaries: target/release (built when missing or older than the sources), or
# GPU_QUOTA_BIN_DIR. GQ_TRIXIE_DIR=DIR reuses (or fills) an unpacked trixie prefix
# instead of downloading into $T; GQ_ENGINES_ROUNDS="12 13" picks rounds.
# Each check is a named case; the last line is "N passed, M failed".
# GQ_ENGINES_KEEP=1 keeps $T (daemons are still stopped) for debugging.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REL=${GPU_QUOTA_BIN_DIR:-$ROOT/target/release}   # gpu-quota, gpu-quota-runtime, gpu-quota-hook, libgpuquota.so
RT=$REL/gpu-quota-runtime
GIB=$((1 << 30))
START=$SECONDS
ROUNDS=${GQ_ENGINES_ROUNDS:-12 13}
passed=0; failed=0

# a case's notes (shown under its result line); the rest of its output is shown only on failure
note() { printf '%s\n' "$*" | head -c 600 | sed -E 's/([0-9]) (passed|failed)/\1_\2/g; s/^/     > /' >>"$CASE_OUT.notes"; }
ok()   { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 25 | sed -E 's/([0-9]) (passed|failed)/\1_\2/g; s/^/     | /'; return 0; }
# check NAME FUNC ARGS...: FUNC prints diagnostics and returns non-zero on failure
# (runs in this shell, not a subshell: cases may set variables, e.g. daemon pids)
check() {
  local name=$1 rc; shift
  : >"$CASE_OUT.notes"
  "$@" >"$CASE_OUT" 2>&1 </dev/null; rc=$?
  if [ $rc -eq 0 ]; then ok "$name"; else fail "$name" "$(cat "$CASE_OUT")"; fi
  cat "$CASE_OUT.notes" 2>/dev/null
}
FINISHED=0
finish() {
  FINISHED=1
  echo "engines suite: $((SECONDS - START))s"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit $?
}
die() { fail "$1" "${2:-}"; finish; }

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "prerequisites" "needs root"
missing=()
for b in runc busybox dockerd containerd ctr containerd-shim-runc-v2 podman conmon mknod timeout unshare nsenter tar sha256sum apt-get dpkg cargo; do
  command -v "$b" >/dev/null 2>&1 || missing+=("$b")
done
[ ${#missing[@]} -eq 0 ] || die "prerequisites" "missing: ${missing[*]} (apt-get install runc busybox-static docker.io containerd podman)"
BB=$(command -v busybox)
file_static() { ! LC_ALL=C readelf -d "$1" 2>/dev/null | grep -q NEEDED; }
file_static "$BB" || { [ -x /bin/busybox ] && file_static /bin/busybox && BB=/bin/busybox; }
SYS_PATH=$PATH

stale() {  # a release binary is missing, or older than a source file
  local b; for b in "$RT" "$REL/gpu-quota-hook" "$REL/gpu-quota" "$REL/libgpuquota.so"; do [ -e "$b" ] || return 0; done
  [ -z "${GPU_QUOTA_BIN_DIR:-}" ] || return 1
  [ -n "$(cd "$ROOT" && find shim hook core install interceptor -newer "$RT" \( -name '*.rs' -o -name Cargo.toml -o -name '*.c' \) -not -path '*/target/*' 2>/dev/null | head -1)" ]
}
if stale; then
  echo "== make build (release binaries missing or older than the sources)"
  make -C "$ROOT" -s build >/dev/null 2>&1 || die "build" "$(make -C "$ROOT" -s build 2>&1 | tail -20)"
fi
GQCRI=${GQ_CRI_BIN:-$ROOT/target/debug/gq-cri}
if [ -z "${GQ_CRI_BIN:-}" ]; then
  (cd "$ROOT" && cargo build -q -p gpu-quota-cri-test) >/dev/null 2>&1 ||
    die "build gq-cri" "$(cd "$ROOT" && cargo build -p gpu-quota-cri-test 2>&1 | tail -20)"
fi

# ---------------------------------------------------------------- the temp host
T=$(mktemp -d /tmp/gqe.XXXXXX)          # short: unix socket paths live under it
chmod 755 "$T"
CASE_OUT=$T/case.out
GQ=$T/gq
IMG=gq-engines-bb:latest
CIMG=docker.io/library/$IMG
# the same image whose default user is 1000 (ctr run has no --user): a
# compute share is served to a user that cannot become host root
CIMG_U=docker.io/library/gq-engines-bb:user1000
PAUSE=docker.io/library/gq-engines-pause:latest   # the CRI sandbox image
NS=gqtest                                 # ctr namespace (the CRI one is k8s.io)
LOG=$T/logs; mkdir -p "$LOG"
CTD_PID=""; DOCKERD_PID=""; PNS=""
# Paths containerd-shim-runc-v2 (runc root, socket dir), podman (runc's default root)
# and dockerd (plugin socket dir; 20.10's trust key) create by hard-coded names:
# removed afterwards when they were not there before.
HOST_PATHS=(); for d in /run/containerd /run/runc /run/docker /etc/docker/key.json; do [ -e "$d" ] || HOST_PATHS+=("$d"); done
# and anything an engine might leave in the usual places: names before the suite
host_scan() { find /etc /var/lib /var/cache /run /opt /root -maxdepth 2 2>/dev/null | grep -iE 'docker|containerd|runc|containers|cni|crio|podman|gpu-quota|compose' | sort; }
HOST_BEFORE=$(host_scan)
# Parent cgroups the engines make by name and never remove (dockerd's docker/, ctr's and
# CRI's namespaces gqtest/ and k8s.io/, podman's libpod_parent/ with conmon/ under it),
# in every hierarchy (hybrid v1 + v2 here): removed at the end when new and empty.
cg_scan() { find /sys/fs/cgroup -mindepth 1 -maxdepth 4 -type d 2>/dev/null | grep -E '/(docker|gqtest|k8s\.io|libpod_parent)(/|$)' | sort; }
CG_BEFORE=$(cg_scan)
export DOCKER_CONFIG=$T/docker-cli       # the CLI's own config, not ~/.docker

# Per-round names (set by round_env): R (the round's dir), CSOCK, DSOCK, DOCKER_BIN,
# COMPOSE, versions for case names, and GPU_QUOTA_CONFIG = $R/etc/gpu-quota/config.toml
# (the file `gpu-quota install` edits under --root $R).
round_env() {
  ROUND=$1; R=$T/r$1
  CSOCK=$R/ctd/containerd.sock; DSOCK=$R/docker.sock
  export DOCKER_HOST=unix://$DSOCK
  export GPU_QUOTA_CONFIG=$R/etc/gpu-quota/config.toml
  mkdir -p "$R/ctd" "$R/etc/gpu-quota" "$R/fifo"
  if [ "$1" = 13 ]; then
    export PATH=$TRIXIE/usr/bin:$TRIXIE/usr/sbin:$SYS_PATH
    DOCKER_BIN=$TRIXIE/usr/bin/docker
  else
    export PATH=$SYS_PATH
    DOCKER_BIN=/usr/bin/docker   # the docker.io CLI, not a newer one elsewhere on PATH
  fi
  CV=$(containerd --version | awk '{print $3}' | sed 's/~.*//')
  DV=$(dockerd --version | sed -E 's/^Docker version ([0-9.]+).*/\1/')
  CTD="containerd $CV"; DK="docker $DV"; CRI="CRI (containerd $CV)"
  cp "$GQ/config.toml" "$GPU_QUOTA_CONFIG"
  # dockerd runs with --exec-root $R/exec: its runc root is the suite's Docker root
  sed -i "1a docker_runc_roots = [\"$R/exec/runtime-runc/moby\"]" "$GPU_QUOTA_CONFIG"
}

D()   { timeout 90 "$DOCKER_BIN" "$@"; }
C()   { timeout 60 ctr --address "$CSOCK" -n "$NS" "$@"; }
K()   { timeout 60 ctr --address "$CSOCK" -n k8s.io "$@"; }
Q()   { timeout 90 "$GQCRI" --socket "$CSOCK" "$@"; }
# podman 4.3 passes no environment to the OCI runtime (create gets only LC_*,
# CONTAINERS_CONF, HOME and containers.conf's conmon_env_vars; start/kill/delete
# get next to nothing), so GPU_QUOTA_CONFIG cannot reach gpu-quota-runtime and
# the runtime reads /etc/gpu-quota/config.toml. To keep the machine's /etc
# untouched, podman runs inside a private mount namespace (held by one sleeping
# process, $PNS) whose /etc is an overlay with gpu-quota/config.toml added.
PODMAN_CONF=$T/podman/empty.conf
P()   {
  [ -n "$PNS" ] || { echo "no podman namespace"; return 1; }
  nsenter -t "$PNS" -m -- env -u DOCKER_CONFIG -u DOCKER_HOST -u GPU_QUOTA_CONFIG CONTAINERS_CONF="$PODMAN_CONF" \
  CONTAINERS_STORAGE_CONF=$T/podman/storage.conf CONTAINERS_REGISTRIES_CONF=$T/podman/registries.conf \
  timeout 90 podman --root "$T/podman/root" --runroot "$T/podman/runroot" --tmpdir "$T/podman/tmp" \
    --storage-driver vfs --cgroup-manager cgroupfs --events-backend file \
    --network-config-dir "$T/podman/net" "$@"
}
podman_ns() {
  unshare -m --propagation private sleep 100000 </dev/null >/dev/null 2>&1 &
  PNS=$!
  local i; for i in $(seq 1 50); do
    [ "$(readlink /proc/$PNS/ns/mnt)" != "$(readlink /proc/self/ns/mnt)" ] && break; sleep 0.1
  done
  [ "$(readlink /proc/$PNS/ns/mnt 2>/dev/null)" != "$(readlink /proc/self/ns/mnt)" ] || { echo "unshare -m failed"; return 1; }
  # /etc gets gpu-quota/config.toml; /var/lib, /var/cache and /run catch what podman writes
  # outside --root/--runroot/--tmpdir (/var/lib/containers/cache, /run/containers/networks,
  # /var/cache/containers/short-name-aliases.conf and its .lock,
  # runc's default root /run/runc): overlays with their upper dirs on a tmpfs of the namespace
  mkdir -p "$T/podman/ns" || return 1
  nsenter -t "$PNS" -m -- sh -ec "
    mount -t tmpfs -o mode=755 gq-ns '$T/podman/ns'
    for d in etc var/lib var/cache run; do
      u='$T/podman/ns/'\$(echo \$d | tr / _)
      mkdir -p \$u/up \$u/work
      mount -t overlay gq-ns -o lowerdir=/\$d,upperdir=\$u/up,workdir=\$u/work /\$d
    done
    mkdir -p /etc/gpu-quota
    cp '$GPU_QUOTA_CONFIG' /etc/gpu-quota/config.toml" || return 1
  if [ -e /etc/gpu-quota/config.toml ] && cmp -s "$GPU_QUOTA_CONFIG" /etc/gpu-quota/config.toml; then
    echo "the host sees the namespace's /etc"; return 1
  fi
}
PODMAN_RUN=(--network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

# stop PID NAME: SIGTERM, wait up to 20s, then SIGKILL
stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null; sleep 0.2
}
# pids of processes (other than us) whose command line mentions $T
procs_of_T() {
  local p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = $$ ] && continue
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF "$T/" && echo "${p#/proc/}"
  done
}
mounts_of_T() { awk -v t="$T/" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo; }

# Orderly teardown of a round's daemons and containers (idempotent).
teardown_round() {
  if [ -n "$DOCKERD_PID" ] && [ -S "$DSOCK" ]; then
    local ids; ids=$(timeout 30 "$DOCKER_BIN" ps -aq 2>/dev/null)
    [ -n "$ids" ] && timeout 60 "$DOCKER_BIN" rm -f $ids >/dev/null 2>&1
  fi
  if [ -n "$CTD_PID" ] && [ -S "$CSOCK" ]; then
    local c n f
    for f in "$R"/pod-*.json; do
      [ -e "$f" ] || continue
      timeout 30 "$GQCRI" --socket "$CSOCK" stop-pod "$f" >/dev/null 2>&1
      timeout 30 "$GQCRI" --socket "$CSOCK" remove-pod "$f" >/dev/null 2>&1
    done
    for n in "$NS" k8s.io; do
      for c in $(timeout 20 ctr --address "$CSOCK" -n "$n" tasks ls -q 2>/dev/null); do
        timeout 20 ctr --address "$CSOCK" -n "$n" tasks kill -s KILL "$c" >/dev/null 2>&1; sleep 0.3
        timeout 20 ctr --address "$CSOCK" -n "$n" tasks delete -f "$c" >/dev/null 2>&1
      done
      for c in $(timeout 20 ctr --address "$CSOCK" -n "$n" containers ls -q 2>/dev/null); do
        timeout 20 ctr --address "$CSOCK" -n "$n" containers rm "$c" >/dev/null 2>&1
      done
    done
  fi
  stop_pid "$DOCKERD_PID"; DOCKERD_PID=""
  stop_pid "$CTD_PID"; CTD_PID=""
}
teardown() {
  [ -n "${R:-}" ] && teardown_round
  if [ -n "$PNS" ] && [ -d "$T/podman/root" ]; then P rm -af -t 0 >/dev/null 2>&1; fi
  stop_pid "$PNS"; PNS=""
  local d
  for d in $(comm -13 <(printf '%s\n' "$CG_BEFORE") <(cg_scan) | sort -r); do rmdir "$d" 2>/dev/null; done
  for d in "${HOST_PATHS[@]}"; do
    if [ -d "$d" ]; then find "$d" -depth -type d -empty -delete 2>/dev/null
    elif [ "$d" = /etc/docker/key.json ] && [ -f "$d" ]; then rm -f "$d"; fi
  done
}
# Last resort on any exit: kill what is left, unmount, remove $T.
cleanup() {
  local rc=$? p m
  if [ "$FINISHED" = 0 ]; then echo "interrupted"; echo "$passed passed, $((failed + 1)) failed"; [ $rc -ne 0 ] || rc=1; fi
  teardown
  for p in $(procs_of_T); do kill -KILL "$p" 2>/dev/null; done
  for m in $(mounts_of_T | sort -r); do umount -l "$m" 2>/dev/null; done
  if [ "${GQ_ENGINES_KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ledger helpers
ledger()     { python3 "$ROOT/tests/ledger_view.py" "$GQ/ledger"; }  # ledger.json and the boot's records, one spelling ("key": value)
ledger_n()   { ledger | grep -o '"container_id"' | wc -l; }
expect_ledger() {  # N [what]
  local n; n=$(ledger_n)
  [ "$n" -eq "$1" ] || { echo "ledger has $n reservation(s), expected $1 ${2:-}"; ledger; return 1; }
}
wait_ledger() {  # N SECS: the ledger reaches N reservations within SECS
  local i
  for i in $(seq 1 $(($2 * 10))); do [ "$(ledger_n)" -eq "$1" ] && return 0; sleep 0.1; done
  expect_ledger "$1" "after ${2}s"
}
# GPU index of the (only) reservation
ledger_gpu() { ledger | grep -o '"index": *[0-9]*' | head -1 | grep -o '[0-9]*$'; }
has() { grep -qF -- "$2" <<<"$1" || { echo "expected '$2' in:"; echo "$1"; return 1; }; }
hasnt() { ! grep -qF -- "$2" <<<"$1" || { echo "did not expect '$2' in:"; echo "$1"; return 1; }; }
# a compute share's container: its MPS variables and pipe directory (TEXT is
# what SHARE_PROBE prints inside it), and its GPU's daemon up. The
# variables are read from the container's init: a process an engine execs
# gets the environment of the engine's own copy of the spec (ctr's does not
# have them; the interceptor sets them at cuInit there)
SHARE_PROBE='tr "\0" "\n" < /proc/1/environ; ls /run/gpu-quota/mps'
share_seen() {  # TEXT
  has "$1" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" && has "$1" "CUDA_MPS_PIPE_DIRECTORY=/run/gpu-quota/mps" &&
    has "$1" "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M" && has "$1" "control" || return 1
  ls "$GQ"/state/mps/GPU-*/pipe/control >/dev/null 2>&1 || { echo "no MPS daemon under $GQ/state/mps"; return 1; }
}
# after the last share: no daemon directory left (the daemon quit)
share_gone() {
  local i; for i in $(seq 1 50); do ls -d "$GQ"/state/mps/GPU-* >/dev/null 2>&1 || return 0; sleep 0.1; done
  echo "MPS daemon directory left: $(ls "$GQ/state/mps")"; return 1
}
no_state_dirs() { [ -z "$(ls "$GQ/state/containers" 2>/dev/null)" ] || { echo "state dirs left: $(ls "$GQ/state/containers")"; return 1; }; }

source "$ROOT/tests/engines/oci-image.sh"   # oci_image ROOTFS OUT.tar NAME CMD_JSON ENV_JSON
source "$ROOT/tests/engines/fakehost.sh"    # fake_gpu_host DIR BIN [CDI_DIR]

# ---------------------------------------------------------------- fake GPU host
setup_host() {
  fake_gpu_host "$GQ" "$REL" || return 1
  make -s -C "$ROOT/tests/fake" && cp "$ROOT/tests/fake/build/nvidia-smi" "$GQ/bin/nvidia-smi" || return 1   # static ELF stand-in
  # busybox rootfs -> OCI archives: the test image and the CRI sandbox image (sleeps)
  local r=$T/rootfs a
  mkdir -p "$r"/{bin,etc,proc,sys,dev,tmp,run,root} && cp "$BB" "$r/bin/busybox" || return 1
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"; echo 'root:x:0:' >"$r/etc/group"
  # gq-limits: what gpu-quota gave the container, as it reads it (limit0: the first GPU's
  # burst limit, 0 for a guaranteed slice): the limits file, then the
  # live slice of its first GPU from its grant (formats::grant: a 64-byte header, 64-byte
  # entries, vram_bytes at +24 of the entry: byte 88) as grant0=BYTES
  printf '#!/bin/sh\ncat /run/gpu-quota/limits || exit 1\necho "grant0=$(od -An -tu8 -j88 -N8 /run/gpu-quota/grant | tr -d " ")"\necho "limit0=$(od -An -tu8 -j112 -N8 /run/gpu-quota/grant | tr -d " ")"\n' >"$r/bin/gq-limits"
  chmod 0755 "$r/bin/gq-limits"
  oci_image "$r" "$T/bb.tar" "$CIMG" null '["PATH=/bin"]' || return 1
  oci_image "$r" "$T/bbu.tar" "$CIMG_U" null '["PATH=/bin"]' 1000 || return 1
  oci_image "$r" "$T/pause.tar" "$PAUSE" '["/bin/sleep","2147483647"]' '["PATH=/bin"]' || return 1
  mkdir -p "$T/podman"/{root,runroot,tmp,net} "$DOCKER_CONFIG"
  : >"$PODMAN_CONF"
  printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n' "$T/podman/runroot" "$T/podman/root" >"$T/podman/storage.conf"
  printf 'unqualified-search-registries = []\n' >"$T/podman/registries.conf"
}
check "host: fake GPU host (mknod nodes, driver libs, static inventory), OCI images of a busybox rootfs" setup_host

if [[ " $ROUNDS " == *" 13 "* ]]; then
  trixie_fetch() {
    TRIXIE=${GQ_TRIXIE_DIR:-$T/trixie}
    bash "$ROOT/tests/engines/trixie.sh" "$TRIXIE" >"$LOG/trixie.log" 2>&1 || { tail -20 "$LOG/trixie.log"; return 1; }
    note "$("$TRIXIE/usr/sbin/dockerd" --version); $("$TRIXIE/usr/bin/containerd" --version | cut -d' ' -f1,3); compose $("$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" version --short)"
  }
  check "host: Debian 13 docker.io/docker-cli/containerd/docker-compose unpacked into \$T (apt download + dpkg -x; the machine's packages untouched)" trixie_fetch
fi

# ---------------------------------------------------------------- daemons of a round
start_containerd() {
  mkdir -p "$R/etc/containerd" "$R/cni"
  # Debian's stock config.toml (it defines the CRI section), made private to $R.
  # CRI: host-network pods only (no CNI), the local sandbox image, the native
  # snapshotter (no overlay mounts), and no oom_score_adj below containerd's own
  # (the machines lack CAP_SYS_RESOURCE; the pause container asks for -998).
  cat >"$R/etc/containerd/config.toml" <<EOF
version = 2
root = "$R/ctd/root"
state = "$R/ctd/state"

[grpc]
  address = "$CSOCK"

[ttrpc]
  address = "$CSOCK.ttrpc"

[debug]
  address = "$R/ctd/debug.sock"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE"
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$R/cni"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$R/ctd/opt"
EOF
  # register the runtime the way a user does; containerd then starts with that file
  "$REL/gpu-quota" install containerd --root "$R" --runtime-path "$RT" >"$LOG/install-containerd-$ROUND.log" 2>&1 ||
    { cat "$LOG/install-containerd-$ROUND.log"; return 1; }
  has "$(cat "$GPU_QUOTA_CONFIG")" "env_requests = false" || return 1
  has "$(cat "$GPU_QUOTA_CONFIG")" "# gpu-quota configuration of the engine suite's fake host" || return 1
  containerd --config "$R/etc/containerd/config.toml" >"$LOG/containerd-$ROUND.log" 2>&1 &
  CTD_PID=$!
  local i
  for i in $(seq 1 300); do
    timeout 5 ctr --address "$CSOCK" version >/dev/null 2>&1 && break
    kill -0 "$CTD_PID" 2>/dev/null || { echo "containerd exited:"; tail -20 "$LOG/containerd-$ROUND.log"; return 1; }
    sleep 0.1
  done
  timeout 5 ctr --address "$CSOCK" version >/dev/null 2>&1 || { echo "containerd not ready after 30s"; tail -20 "$LOG/containerd-$ROUND.log"; return 1; }
  # the test image for ctr, test + sandbox images for CRI (namespace k8s.io)
  C images import --snapshotter native "$T/bb.tar" >/dev/null &&
    C images import --snapshotter native "$T/bbu.tar" >/dev/null &&
    K images import --snapshotter native "$T/bb.tar" >/dev/null &&
    K images import --snapshotter native "$T/pause.tar" >/dev/null || return 1
  note "$(containerd --version)"
}
start_dockerd() {
  mkdir -p "$R/etc/docker"
  # Docker < 23 writes a trust key to /etc/docker/key.json unless told another path
  # (daemon.json only: there is no such flag)
  local key=""; [ "${DV%%.*}" -lt 23 ] && key=$',\n  "deprecated-key-path": "'"$R/key.json"'"'
  # round 13: the NVIDIA Container Toolkit stand-ins on dockerd's PATH, CDI on
  local tkpath=""
  if [ "$ROUND" = 13 ]; then
    toolkit_setup || return 1
    key+=$',\n  "features": {"cdi": true},\n  "cdi-spec-dirs": ["'"$R/cdi"'"]'
    tkpath=$TK:
  fi
  printf '{\n  "storage-driver": "vfs"%s\n}\n' "$key" >"$R/etc/docker/daemon.json"
  PATH=$tkpath$PATH dockerd --config-file "$R/etc/docker/daemon.json" --data-root "$R/docker" --exec-root "$R/exec" \
    --pidfile "$R/dockerd.pid" -H "unix://$DSOCK" --containerd "$CSOCK" \
    --bridge none --iptables=false --ip-masq=false --userland-proxy=false >"$LOG/dockerd-$ROUND.log" 2>&1 &
  DOCKERD_PID=$!
  local i
  for i in $(seq 1 600); do
    timeout 5 "$DOCKER_BIN" version >/dev/null 2>&1 && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || { echo "dockerd exited:"; tail -20 "$LOG/dockerd-$ROUND.log"; return 1; }
    sleep 0.1
  done
  timeout 5 "$DOCKER_BIN" version >/dev/null 2>&1 || { echo "dockerd not ready after 60s"; tail -20 "$LOG/dockerd-$ROUND.log"; return 1; }
  tar -C "$T/rootfs" -c . | D import -c 'ENV PATH=/bin' - "$IMG" >/dev/null || return 1
  # an image whose own env carries a request (hostile or not, it is not an annotation)
  tar -C "$T/rootfs" -c . | D import -c 'ENV PATH=/bin' -c 'ENV GPU_QUOTA_VRAM=2g' - gq-engines-envreq:latest >/dev/null || return 1
  note "$("$DOCKER_BIN" version --format 'docker client {{.Client.Version}}, dockerd {{.Server.Version}} (API {{.Server.APIVersion}})')"
}

# ================================================================ Docker
source "$ROOT/tests/engines/docker.sh"

# ================================================================ beside the NVIDIA Container Toolkit
source "$ROOT/tests/engines/toolkit.sh"

# ================================================================ Docker Compose
source "$ROOT/tests/engines/compose.sh"

# ================================================================ containerd / ctr
source "$ROOT/tests/engines/ctr.sh"

# ================================================================ CRI (kubelet's path)
source "$ROOT/tests/engines/cri.sh"

# ================================================================ Kubernetes cluster mode
source "$ROOT/tests/engines/kubernetes.sh"
source "$ROOT/tests/engines/dra.sh"

# ================================================================ podman 4.3
source "$ROOT/tests/engines/podman.sh"

# ================================================================ a round, end of a round
round_empty() {
  local bad=""
  [ -n "$DOCKERD_PID" ] && [ -n "$(D ps -aq)" ] && bad+="docker: $(D ps -a)"$'\n'
  local n; for n in "$NS" k8s.io; do
    [ -n "$(timeout 20 ctr --address "$CSOCK" -n $n containers ls -q)" ] && bad+="ctr -n $n containers: $(timeout 20 ctr --address "$CSOCK" -n $n containers ls -q)"$'\n'
    [ -n "$(timeout 20 ctr --address "$CSOCK" -n $n tasks ls -q)" ] && bad+="ctr -n $n tasks: $(timeout 20 ctr --address "$CSOCK" -n $n tasks ls -q)"$'\n'
  done
  [ -z "$bad" ] || { echo "$bad"; return 1; }
  expect_ledger 0 "at the end of the round" && no_state_dirs || return 1
  teardown_round
  local p; for p in $(procs_of_T); do [ "$p" = "$PNS" ] || bad+="process $p: $(tr '\0' ' ' </proc/$p/cmdline)"$'\n'; done
  for p in "$R/exec/runtime-runc/moby" "/run/containerd/runc/$NS" /run/containerd/runc/k8s.io; do
    [ -d "$p" ] && runc --root "$p" list 2>/dev/null | grep -qF "$R/" && bad+="runc state in $p: $(runc --root "$p" list)"$'\n'
  done
  [ -z "$bad" ] || { echo "$bad"; return 1; }
}
for round in $ROUNDS; do
  round_env "$round"
  echo "== round: Debian $round engines: $CTD, $DK$([ "$round" = 13 ] && echo ", compose")$([ "$round" = 12 ] && echo ", podman $(podman --version | awk '{print $3}')"); $(runc --version | head -1)"
  # podman's namespace first: mounts made later by the daemons (dockerd binds its data root) stay out of it
  [ "$round" = 12 ] && check "podman $(podman --version | awk '{print $3}'): private mount namespace with its own /etc, /var/lib, /run overlays" podman_ns
  check "$CTD: starts with its own --config/--root/--state/--address; installed config; images imported" start_containerd
  if [ -z "$CTD_PID" ] || ! kill -0 "$CTD_PID" 2>/dev/null; then fail "$CTD: every case of this round skipped" "containerd did not start"; continue; fi
  check "$DK: dockerd starts with its own config/data/exec root, on the private containerd" start_dockerd
  if [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    docker_cases
    [ "$round" = 13 ] && compose_cases
    [ "$round" = 13 ] && toolkit_cases
  else
    fail "$DK: cases skipped" "dockerd did not start"
  fi
  ctr_cases
  cri_cases
  k8s_cases
  [ "$round" = 13 ] && dra_cases
  [ "$round" = 12 ] && podman_cases
  check "$CTD, $DK: round's end: no container left, ledger empty, daemons stopped, no runc state" round_empty
done

# ================================================================ nothing left behind
final_nothing_left() {
  local bad="" p r
  # podman's namespace: nothing of the suite mounted there but its own tmpfs; no runc state
  if [ -n "$PNS" ]; then
    [ -n "$(P ps -aq)" ] && bad+="podman: $(P ps -a)"$'\n'
    p=$(awk -v t="$T/" 'index($5, t) == 1 && $5 != t "podman/ns"' /proc/$PNS/mountinfo)
    [ -z "$p" ] || bad+="mounts in podman's namespace: $p"$'\n'
    nsenter -t "$PNS" -m -- runc --root /run/runc list 2>/dev/null | grep -qF "$T/" && bad+="runc state of podman's containers"$'\n'
  fi
  teardown
  for p in $(procs_of_T); do bad+="process $p: $(tr '\0' ' ' </proc/$p/cmdline)"$'\n'; done
  [ -n "$(mounts_of_T)" ] && bad+="mounts: $(mounts_of_T)"$'\n'
  [ -d /run/runc ] && runc --root /run/runc list 2>/dev/null | grep -qF "$T/" && bad+="runc state in /run/runc"$'\n'
  for r in "${HOST_PATHS[@]}"; do [ -e "$r" ] && bad+="left on the host: $(find "$r")"$'\n'; done
  # engine-named paths under /etc, /var/lib, /var/cache, /run, /opt, /root that are new
  local new; new=$(comm -13 <(printf '%s\n' "$HOST_BEFORE") <(host_scan))
  [ -z "$new" ] || bad+="new on the host: $new"$'\n'
  new=$(comm -13 <(printf '%s\n' "$CG_BEFORE") <(cg_scan))
  [ -z "$new" ] || bad+="engine cgroups left: $new"$'\n'

  [ -z "$bad" ] || { echo "$bad"; return 1; }
  note "not there before and not there now: ${HOST_PATHS[*]}"
}
check "end: daemons stopped; no process, mount, runc state of the suite; nothing new on the host (/run/containerd, /run/runc, /run/docker, /etc/docker/key.json, any engine-named path under /etc /var/lib /var/cache /run /opt /root, the engines' parent cgroups)" final_nothing_left
finish
