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
ledger()     { { cat "$GQ/ledger/ledger.json" 2>/dev/null || echo '{"version":1,"reservations":[]}'; } | python3 -m json.tool; }  # one spelling ("key": value) whatever the file's spacing
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
no_state_dirs() { [ -z "$(ls "$GQ/state/containers" 2>/dev/null)" ] || { echo "state dirs left: $(ls "$GQ/state/containers")"; return 1; }; }

# oci_image ROOTFS OUT.tar NAME CMD_JSON ENV_JSON: a one-layer OCI image archive
# (ctr images import and podman load read it), without docker or a registry
oci_image() {
  local r=$1 out=$2 name=$3 cmd=$4 env=$5 d lsha lsz csha csz msha msz
  d=$(mktemp -d "$T/oci.XXXXXX"); mkdir -p "$d/blobs/sha256"
  tar -C "$r" -c . >"$d/layer" || return 1
  lsha=$(sha256sum "$d/layer" | cut -d' ' -f1); lsz=$(stat -c %s "$d/layer"); mv "$d/layer" "$d/blobs/sha256/$lsha"
  printf '{"architecture":"amd64","os":"linux","config":{"Env":%s,"Cmd":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$env" "$cmd" "$lsha" >"$d/c"
  csha=$(sha256sum "$d/c" | cut -d' ' -f1); csz=$(stat -c %s "$d/c"); mv "$d/c" "$d/blobs/sha256/$csha"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$csha" "$csz" "$lsha" "$lsz" >"$d/m"
  msha=$(sha256sum "$d/m" | cut -d' ' -f1); msz=$(stat -c %s "$d/m"); mv "$d/m" "$d/blobs/sha256/$msha"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"%s"}}]}' \
    "$msha" "$msz" "${name##*:}" "$name" >"$d/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$d/oci-layout"
  tar -C "$d" -cf "$out" oci-layout index.json blobs && rm -rf "$d"
}

# ---------------------------------------------------------------- fake GPU host
setup_host() {
  mkdir -p "$GQ"/{dev,lib,bin,ledger,state} || return 1
  mknod -m 666 "$GQ/dev/nvidia0" c 195 0 && mknod -m 666 "$GQ/dev/nvidia1" c 195 1 &&
  mknod -m 666 "$GQ/dev/nvidiactl" c 195 255 && mknod -m 666 "$GQ/dev/nvidia-uvm" c 237 0 &&
  mknod -m 666 "$GQ/dev/nvidia-uvm-tools" c 237 1 || return 1
  echo "fake libcuda" >"$GQ/lib/libcuda.so.580.1"; ln -s libcuda.so.580.1 "$GQ/lib/libcuda.so.1"
  echo "fake nvml" >"$GQ/lib/libnvidia-ml.so.580.1"; ln -s libnvidia-ml.so.580.1 "$GQ/lib/libnvidia-ml.so.1"
  make -s -C "$ROOT/tests/fake" && cp "$ROOT/tests/fake/build/nvidia-smi" "$GQ/bin/nvidia-smi"   # static ELF stand-in
  cat >"$GQ/config.toml" <<EOF
# gpu-quota configuration of the engine suite's fake host
ledger_dir = "$GQ/ledger"
state_dir = "$GQ/state"
interceptor = "$REL/libgpuquota.so"
hook = "$REL/gpu-quota-hook"
create_grace_secs = 5

[driver]
dev_root = "$GQ/dev"
lib_dirs = ["$GQ/lib"]
bin_dirs = ["$GQ/bin"]

[inventory]
source = "static"

[[inventory.gpu]]
index = 0
uuid = "GPU-00000000-0000-4000-8000-000000000000"
memory = "16g"

[[inventory.gpu]]
index = 1
uuid = "GPU-00000001-0000-4000-8000-000000000001"
memory = "16g"
EOF
  # busybox rootfs -> OCI archives: the test image and the CRI sandbox image (sleeps)
  local r=$T/rootfs a
  mkdir -p "$r"/{bin,etc,proc,sys,dev,tmp,run,root} && cp "$BB" "$r/bin/busybox" || return 1
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"; echo 'root:x:0:' >"$r/etc/group"
  oci_image "$r" "$T/bb.tar" "$CIMG" null '["PATH=/bin"]' || return 1
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
    K images import --snapshotter native "$T/bb.tar" >/dev/null &&
    K images import --snapshotter native "$T/pause.tar" >/dev/null || return 1
  note "$(containerd --version)"
}
start_dockerd() {
  mkdir -p "$R/etc/docker"
  # Docker < 23 writes a trust key to /etc/docker/key.json unless told another path
  # (daemon.json only: there is no such flag)
  local key=""; [ "${DV%%.*}" -lt 23 ] && key=$',\n  "deprecated-key-path": "'"$R/key.json"'"'
  # round 13: the NVIDIA Container Toolkit stand-ins on dockerd's PATH, CDI on (issue 19)
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
docker_install() {
  "$REL/gpu-quota" install docker --root "$R" --runtime-path "$RT" >"$LOG/install-docker-$ROUND.log" 2>&1 ||
    { cat "$LOG/install-docker-$ROUND.log"; return 1; }
  has "$(cat "$R/etc/docker/daemon.json")" "\"path\": \"$RT\"" || return 1
  # Docker < 24 cannot pass annotations: install turns env requests on; Docker >= 24: off
  local want=false; [ "${DV%%.*}" -lt 24 ] && want=true
  has "$(cat "$GPU_QUOTA_CONFIG")" "env_requests = $want" || { cat "$LOG/install-docker-$ROUND.log"; return 1; }
  note "$(grep -i 'env_requests\|docker' "$LOG/install-docker-$ROUND.log" | head -3)"
  D info --format '{{json .Runtimes}}' | grep -q gpu-quota && { echo "gpu-quota listed before SIGHUP"; return 1; }
  kill -HUP "$(cat "$R/dockerd.pid")" || return 1
  local i
  for i in $(seq 1 100); do
    D info --format '{{json .Runtimes}}' 2>/dev/null | grep -qF "\"gpu-quota\":{\"path\":\"$RT\"" && return 0
    sleep 0.1
  done
  echo "docker info does not list gpu-quota after SIGHUP:"; D info --format '{{json .Runtimes}}'; return 1
}
DRUN=(run --runtime gpu-quota --network none)
# request args for this daemon: annotations (Docker >= 24) or the env fallback
dreq() {  # VRAM [GPU]
  if [ "${DV%%.*}" -ge 24 ]; then
    echo "--annotation vram=$1"; [ -n "${2:-}" ] && echo "--annotation gpu=$2"
  else
    echo "-e GPU_QUOTA_VRAM=$1"; [ -n "${2:-}" ] && echo "-e GPU_QUOTA_GPU=$2"
  fi
  return 0
}
docker_slice() {
  # detached container keeps its slice; limits visible through docker exec
  D "${DRUN[@]}" -d --name gq-d1 $(dreq 2g) "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after docker run -d" || return 1
  has "$(ledger)" "\"bytes\": $((2 * GIB))" || return 1
  local l; l=$(D exec gq-d1 cat /run/gpu-quota/limits) || return 1
  has "$l" "vram_bytes=$((2 * GIB))" || return 1
  D exec gq-d1 sh -c 'ls /dev; cat /etc/ld.so.preload; ls /run/gpu-quota/driver' >"$T/d1.probe" || return 1
  has "$(cat "$T/d1.probe")" "nvidiactl" && has "$(cat "$T/d1.probe")" "libgpuquota.so" && has "$(cat "$T/d1.probe")" "libcuda.so.1" || return 1
}
docker_refusal() {
  # gq-d1 holds 2 GiB on one GPU; 15 GiB pinned to that GPU cannot fit
  local g out rc; g=$(ledger_gpu)
  out=$(D "${DRUN[@]}" --rm --name gq-d2 $(dreq 15g "$g") "$IMG" true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "docker run succeeded: $out"; return 1; }
  has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! D ps -a --format '{{.Names}}' | grep -qx gq-d2 || { echo "refused --rm container left behind"; return 1; }
}
docker_rm() {
  D rm -f gq-d1 >/dev/null || return 1
  wait_ledger 0 5 && no_state_dirs
}
docker_run_rm() {
  local out; out=$(D "${DRUN[@]}" --rm $(dreq 2g) "$IMG" cat /run/gpu-quota/limits) || { echo "$out"; return 1; }
  has "$out" "vram_bytes=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
docker_stop_start() {
  # a stopped container holds no slice; start admits it again
  D "${DRUN[@]}" -d --name gq-d3 $(dreq 3g) "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after run -d" || return 1
  D stop -t 1 gq-d3 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  D start gq-d3 >/dev/null || return 1
  expect_ledger 1 "after docker start" || return 1
  has "$(D exec gq-d3 cat /run/gpu-quota/limits)" "vram_bytes=$((3 * GIB))" || return 1
  D rm -f gq-d3 >/dev/null || return 1
  wait_ledger 0 5
}
docker_plain() {
  # no request: the same runtime passes the container through untouched
  local out; out=$(D "${DRUN[@]}" --rm "$IMG" sh -c 'ls /dev; test -e /run/gpu-quota && echo HAS_GQ; true') || { echo "$out"; return 1; }
  ! grep -q 'nvidia\|HAS_GQ' <<<"$out" || { echo "$out"; return 1; }
  expect_ledger 0
}
docker_annotation_refused() {
  # Docker 20.10 (API 1.41) cannot pass --annotation (API 1.43, Docker >= 24): hence -e GPU_QUOTA_VRAM.
  # Its own CLI has no such flag; a newer CLI elsewhere on PATH (if any) is refused by the daemon.
  local cli out
  for cli in $(for c in "$DOCKER_BIN" $(type -ap docker); do readlink -f "$c"; done | awk '!seen[$0]++'); do
    out=$(timeout 60 "$cli" "${DRUN[@]}" --rm --annotation vram=2g "$IMG" true 2>&1) && { echo "$cli accepted: $out"; return 1; }
    grep -qiE 'API version 1\.43|unknown flag: --annotation' <<<"$out" || { echo "$cli: $out"; return 1; }
    note "$cli ($("$cli" --version | cut -d, -f1)): $(head -1 <<<"$out")"
  done
  expect_ledger 0
}
# The README's headline command, taken from README.md (not retyped): the first
# `docker run … --annotation …` line of its first code block that has one.
readme_headline() {
  awk '/^```/{inb=!inb; next} inb && /^docker run .*--annotation/ {sub(/[[:space:]]+#.*/, ""); print; exit}' "$ROOT/README.md"
}
docker_headline() {
  local cmd; cmd=$(readme_headline)
  [ -n "$cmd" ] || { echo "no 'docker run … --annotation' line in a code block of README.md"; return 1; }
  [[ "$cmd" == *" IMAGE" ]] || { echo "the headline does not end in IMAGE: $cmd"; return 1; }
  note "README: $cmd"
  local vram; vram=$(grep -oE 'vram=[0-9]+g' <<<"$cmd" | head -1 | cut -d= -f2 | tr -d g)
  [ -n "$vram" ] || { echo "no vram=Ng in: $cmd"; return 1; }
  # exactly the README's words; IMAGE becomes the test image and a command that prints the limits
  local -a argv; read -r -a argv <<<"${cmd% IMAGE}"
  [ "${argv[0]}" = docker ] || return 1
  local out; out=$(D "${argv[@]:1}" --name gq-head "$IMG" sh -c 'cat /run/gpu-quota/limits; nvidia-smi -L 2>&1 | head -2') ||
    { echo "$out"; D rm -f gq-head >/dev/null 2>&1; return 1; }
  note "$(grep vram_bytes= <<<"$out" | head -1)"
  has "$out" "vram_bytes=$((vram * GIB))" || { D rm -f gq-head >/dev/null 2>&1; return 1; }
  D rm gq-head >/dev/null || return 1
  wait_ledger 0 5
}
docker_env_ignored() {
  # Docker >= 24 passes annotations, so install left env_requests = false: a request in the
  # image's env or in -e is not a request (no slice, no /run/gpu-quota, ledger empty)
  local out
  out=$(D "${DRUN[@]}" --rm -e GPU_QUOTA_VRAM=2g "$IMG" sh -c 'test -e /run/gpu-quota && echo HAS_GQ; true') || { echo "$out"; return 1; }
  hasnt "$out" HAS_GQ || return 1
  expect_ledger 0 "after -e GPU_QUOTA_VRAM=2g" || return 1
  out=$(D "${DRUN[@]}" --rm gq-engines-envreq:latest sh -c 'echo env=$GPU_QUOTA_VRAM; test -e /run/gpu-quota && echo HAS_GQ; true') || { echo "$out"; return 1; }
  has "$out" "env=2g" && hasnt "$out" HAS_GQ || return 1
  expect_ledger 0 "after an image with ENV GPU_QUOTA_VRAM=2g"
}
docker_cases() {
  check "$DK: install --root + SIGHUP registers runtime gpu-quota (docker info); config.toml env_requests set for this version" docker_install
  if [ "${DV%%.*}" -ge 24 ]; then
    check "$DK: the README's headline command, copied from README.md, gets its slice and releases on rm" docker_headline
    check "$DK: run -d --runtime gpu-quota --annotation vram=2g gets a 2 GiB slice (limits, devices, preload, libs)" docker_slice
    check "$DK: --annotation vram=15g --annotation gpu=N that does not fit fails with the gpu-quota message" docker_refusal
  else
    check "$DK: run -d --runtime gpu-quota -e GPU_QUOTA_VRAM=2g gets a 2 GiB slice (limits, devices, preload, libs)" docker_slice
    check "$DK: -e GPU_QUOTA_VRAM=15g -e GPU_QUOTA_GPU=N that does not fit fails with the gpu-quota message" docker_refusal
  fi
  check "$DK: rm -f releases the slice (ledger empty, state dir gone)" docker_rm
  check "$DK: run --rm sees 2 GiB and releases on exit" docker_run_rm
  check "$DK: stop releases the slice, start admits it again, rm -f releases" docker_stop_start
  check "$DK: container without a request passes through untouched" docker_plain
  if [ "${DV%%.*}" -ge 24 ]; then
    check "$DK: with env_requests = false, -e GPU_QUOTA_VRAM and an image's ENV GPU_QUOTA_VRAM are ignored" docker_env_ignored
  else
    check "$DK: refuses --annotation (needs API 1.43), so -e GPU_QUOTA_VRAM is the way" docker_annotation_refused
  fi
}

# ================================================================ beside the NVIDIA Container Toolkit (issue 19)
# dockerd 26 finds tests/toolkit/nvidia-container-runtime-hook (a stand-in: it makes the
# /dev/nvidiaN nodes NVIDIA_VISIBLE_DEVICES names in the container, as the toolkit's legacy
# hook does, and logs each run) on its PATH, so `--gpus` and Compose device reservations
# write the real spec (NVIDIA_VISIBLE_DEVICES + the prestart hook). CDI: a spec shaped like
# `nvidia-ctk cdi generate` for the fake host in $R/cdi, its nvidia-cdi-hook a logging stand-in.
TK=$T/toolkit
toolkit_setup() {
  mkdir -p "$TK" "$R/cdi" || return 1
  cp "$ROOT/tests/toolkit/nvidia-container-runtime-hook" "$TK/" || return 1
  printf '#!/bin/sh\necho "nvidia-cdi-hook $*" >>%s/standin.log\n' "$TK" >"$TK/nvidia-cdi-hook" && chmod 755 "$TK/nvidia-cdi-hook" || return 1
  printf 'dev_root=%s\nlog=%s\n' "$GQ/dev" "$TK/standin.log" >"$TK/standin.conf"
  : >"$TK/standin.log"
  local i devs=""
  for i in 0 1; do
    devs+="- name: \"$i\"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia$i
      hostPath: $GQ/dev/nvidia$i
"
  done
  cat >"$R/cdi/nvidia.yaml" <<EOF
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
${devs}- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: $GQ/dev/nvidia0
    - path: /dev/nvidia1
      hostPath: $GQ/dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: $GQ/dev/nvidiactl
  - path: /dev/nvidia-uvm
    hostPath: $GQ/dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
    hostPath: $GQ/dev/nvidia-uvm-tools
  hooks:
  - hookName: createContainer
    path: $TK/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
  mounts:
  - hostPath: $GQ/lib/libcuda.so.580.1
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.1
    options: [ro, nosuid, nodev, bind]
EOF
}
ledger_indices() { ledger | grep -o '"index": *[0-9]*' | grep -o '[0-9]*$' | sort -n | tr '\n' ' ' | sed 's/ $//'; }
# tk_probe NAME|ID: the GPU nodes in the container, its limits, the bundle's config.json
tk_probe() {
  TK_ID=$(D inspect -f '{{.Id}}' "$1") || return 1
  TK_NODES=$(D exec "$1" sh -c 'ls /dev | grep -E "^nvidia[0-9]+$" | tr "\n" " "' | sed 's/ $//')
  TK_LIMITS=$(D exec "$1" sh -c 'cat /run/gpu-quota/limits 2>/dev/null; echo "env NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"')
  TK_CFG=$(cat "$R/ctd/state/io.containerd.runtime.v2.task/moby/$TK_ID/config.json" 2>/dev/null)
  [ -n "$TK_CFG" ] || { echo "no config.json for $TK_ID"; return 1; }
  printf '%s\n' "$TK_CFG" >"$LOG/toolkit-$1.config.json"
}
tk_run() {  # NAME docker-run-args… (ending in the image)
  local n=$1; shift
  D run -d --runtime gpu-quota --network none --name "$n" "$@" sleep 600 >"$LOG/toolkit-$n.run" 2>&1 || { cat "$LOG/toolkit-$n.run"; return 1; }
  tk_probe "$n"
}
tk_env() { grep -o 'NVIDIA_VISIBLE_DEVICES=[^"]*' <<<"$TK_CFG" | tr '\n' ' '; }
# a request: the ledger holds one reservation of NSLICES 2 GiB slices (on GPUs WANT, or
# any); the container has exactly those GPUs' nodes; the toolkit's hook never ran
tk_owned_check() {  # NSLICES WANT|-
  local rc=0 idx; idx=$(ledger_indices)
  [ "$(ledger_n)" = 1 ] && [ "$(wc -w <<<"$idx")" = "$1" ] || { echo "want 1 reservation, $1 slice(s):"; ledger; rc=1; }
  [ "$2" = - ] || [ "$idx" = "$2" ] || { echo "ledger GPUs '$idx', want '$2'"; rc=1; }
  local want="" i; for i in $idx; do want+="nvidia$i "; done; want=${want% }
  [ "$TK_NODES" = "$want" ] || { echo "GPU nodes in the container '$TK_NODES', want the slice's '$want'"; rc=1; }
  has "$TK_LIMITS" "vram_bytes=$((2 * GIB))" || rc=1
  [ "$(grep '^gpus=' <<<"$TK_LIMITS" | grep -o 'GPU-[0-9a-f-]*' | wc -l)" = "$1" ] || { echo "limits gpus= does not name $1 GPU(s): $TK_LIMITS"; rc=1; }
  hasnt "$(cat "$TK/standin.log")" "ran $TK_ID" || rc=1
  hasnt "$TK_CFG" "nvidia-container-runtime-hook" || rc=1
  note "GPU nodes: ${TK_NODES:-none}; ledger GPUs: $idx; config.json $(tk_env)"
  return $rc
}
# no request: untouched; the stand-in ran when the engine added its hook; nodes WANT
tk_untouched_check() {  # WANT HOOK(yes|no)
  local rc=0
  [ "$TK_NODES" = "$1" ] || { echo "GPU nodes in the container '$TK_NODES', want '$1'"; rc=1; }
  expect_ledger 0 || rc=1
  hasnt "$TK_CFG" "gpu-quota-hook" || rc=1
  if [ "$2" = yes ]; then
    has "$TK_CFG" "nvidia-container-runtime-hook" && has "$(cat "$TK/standin.log")" "ran $TK_ID" || rc=1
  else
    hasnt "$(cat "$TK/standin.log")" "ran $TK_ID" || rc=1
  fi
  note "GPU nodes: ${TK_NODES:-none}; config.json $(tk_env)"
  return $rc
}
tk_rm() { D rm -f "$1" >/dev/null; wait_ledger 0 5; }
tk_gpus() {  # NAME NSLICES WANT --gpus-value
  tk_run "$1" --annotation vram=2g --gpus "$4" "$IMG" || return 1
  tk_owned_check "$2" "$3"; local rc=$?; tk_rm "$1" || rc=1; return $rc
}
tk_gpus_plain() {  # NAME WANT --gpus-value
  tk_run "$1" --gpus "$3" "$IMG" || return 1
  tk_untouched_check "$2" yes; local rc=$?; tk_rm "$1" || rc=1; return $rc
}
tk_cdi() {  # NAME VRAM(yes|no)
  local rc=0
  if [ "$2" = yes ]; then
    tk_run "$1" --annotation vram=2g --device nvidia.com/gpu=all "$IMG" || return 1
    tk_owned_check 1 - || rc=1
  else
    tk_run "$1" --device nvidia.com/gpu=all "$IMG" || return 1
    tk_untouched_check "nvidia0 nvidia1" no || rc=1
  fi
  has "$TK_CFG" "nvidia-cdi-hook" || rc=1
  tk_rm "$1" || rc=1; return $rc
}
tk_image_env() {  # NAME VRAM(yes|no): ENV NVIDIA_VISIBLE_DEVICES=all in the image, no --gpus
  local rc=0
  if [ "$2" = yes ]; then
    tk_run "$1" --annotation vram=2g gq-engines-cuda:latest || return 1
    tk_owned_check 1 - || rc=1
    has "$TK_LIMITS" "env NVIDIA_VISIBLE_DEVICES=all" || rc=1
  else
    tk_run "$1" gq-engines-cuda:latest || return 1
    tk_untouched_check "" no || rc=1
  fi
  tk_rm "$1" || rc=1; return $rc
}
# the README's Compose example with a device reservation (the yaml block naming driver: nvidia)
readme_compose_reservation() {
  awk '/^```yaml/{inb=1; buf=""; next} /^```/{if (inb && buf ~ /driver: nvidia/) {printf "%s", buf; exit} inb=0; next} inb {buf = buf $0 "\n"}' "$ROOT/README.md"
}
DCT() { D compose --project-directory "$R/compose-tk" -p gqtoolkit "$@"; }
tk_compose() {  # VRAM(yes|no)
  mkdir -p "$R/compose-tk" || return 1
  local y; y=$(readme_compose_reservation)
  has "$y" "runtime: gpu-quota" && has "$y" "count: 1" && has "$y" "vram: " || return 1
  y=$(sed -E "s|^( *)image: IMAGE\$|\1image: $IMG\n\1command: [\"sleep\", \"600\"]\n\1network_mode: none|; s|vram: *[0-9]+g|vram: 2g|" <<<"$y")
  [ "$1" = yes ] || y=$(grep -vE '^ *(annotations:|vram:)' <<<"$y")
  printf '%s\n' "$y" >"$R/compose-tk/compose.yaml"
  DCT up -d >"$LOG/compose-tk-up.log" 2>&1 || { cat "$LOG/compose-tk-up.log"; cat "$R/compose-tk/compose.yaml"; return 1; }
  local c; c=$(DCT ps -q | head -1)
  tk_probe "$c" || { DCT down -t 1 >/dev/null 2>&1; return 1; }
  local rc=0
  if [ "$1" = yes ]; then tk_owned_check 1 - || rc=1; else tk_untouched_check nvidia0 yes || rc=1; fi
  DCT down -t 1 >"$LOG/compose-tk-down.log" 2>&1 || rc=1
  wait_ledger 0 5 || rc=1
  return $rc
}
toolkit_cases() {
  local CV2; CV2="docker compose $("$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" version --short 2>/dev/null)"
  tar -C "$T/rootfs" -c . | D import -c 'ENV PATH=/bin' -c 'ENV NVIDIA_VISIBLE_DEVICES=all' -c 'ENV CUDA_VERSION=12.4.1' - gq-engines-cuda:latest >/dev/null ||
    { fail "$DK: toolkit cases skipped" "cannot import the CUDA-style image"; return; }
  check "$DK: --runtime gpu-quota --gpus all --annotation vram=2g: one GPU, the slice's nodes only, toolkit hook removed" tk_gpus tk-all 1 - all
  check "$DK: --gpus '\"device=1\"' --annotation vram=2g: GPU 1 is the slice" tk_gpus tk-dev1 1 1 '"device=1"'
  check "$DK: --gpus 2 --annotation vram=2g: gpus=2, two 2 GiB slices" tk_gpus tk-two 2 "0 1" 2
  check "$DK: --device nvidia.com/gpu=all (CDI, nvidia-ctk-shaped spec) --annotation vram=2g: narrowed to the slice" tk_cdi tk-cdi yes
  check "$DK: image with ENV NVIDIA_VISIBLE_DEVICES=all, no --gpus, vram=2g: an ordinary one-GPU slice (the ENV is no request)" tk_image_env tk-img yes
  check "$CV2 + $DK: the README's device reservation (driver nvidia, count 1) + runtime gpu-quota + vram: one slice" tk_compose yes
  check "$DK: --runtime gpu-quota --gpus all without vram: untouched, the toolkit hook ran (both GPUs)" tk_gpus_plain tk-p-all "nvidia0 nvidia1" all
  check "$DK: --gpus '\"device=1\"' without vram: untouched, the toolkit hook ran (GPU 1)" tk_gpus_plain tk-p-dev1 nvidia1 '"device=1"'
  check "$DK: --gpus 2 without vram: untouched, the toolkit hook ran (GPUs 0, 1)" tk_gpus_plain tk-p-two "nvidia0 nvidia1" 2
  check "$DK: --device nvidia.com/gpu=all without vram: untouched (both GPUs)" tk_cdi tk-p-cdi no
  check "$DK: image with ENV NVIDIA_VISIBLE_DEVICES=all without vram or --gpus: untouched, no GPU" tk_image_env tk-p-img no
  check "$CV2 + $DK: the device reservation without vram: untouched, the toolkit hook ran (GPU 0)" tk_compose no
}

# ================================================================ Docker Compose
# The README's Compose example (its ```yaml block with `runtime: gpu-quota`), with the
# test image for IMAGE, a command that keeps it running, and no network.
readme_compose() {
  awk '/^```yaml/{inb=1; buf=""; next} /^```/{if (inb && buf ~ /runtime: gpu-quota/) {printf "%s", buf; exit} inb=0; next} inb {buf = buf $0 "\n"}' "$ROOT/README.md"
}
compose_setup() {
  mkdir -p "$DOCKER_CONFIG/cli-plugins" "$R/compose" || return 1
  cp "$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" "$DOCKER_CONFIG/cli-plugins/" || return 1
  local y; y=$(readme_compose)
  [ -n "$y" ] || { echo "no yaml block with 'runtime: gpu-quota' in README.md"; return 1; }
  has "$y" "annotations:" && has "$y" "image: IMAGE" || return 1
  sed -E "s|^( *)image: IMAGE\$|\1image: $IMG\n\1command: [\"sleep\", \"600\"]\n\1network_mode: none|" <<<"$y" >"$R/compose/compose.yaml"
  COMPOSE_VRAM=$(grep -oE 'vram: *[0-9]+g' <<<"$y" | head -1 | grep -oE '[0-9]+')
  [ -n "$COMPOSE_VRAM" ] || { echo "no 'vram: Ng' in the README's compose example"; echo "$y"; return 1; }
  note "$(D compose version)"
}
DC() { D compose --project-directory "$R/compose" -p gqcompose "$@"; }
compose_up() {
  DC up -d >"$LOG/compose-up.log" 2>&1 || { cat "$LOG/compose-up.log"; cat "$R/compose/compose.yaml"; return 1; }
  expect_ledger 1 "after docker compose up -d" || return 1
  local c; c=$(DC ps -q | head -1)
  has "$(D exec "$c" cat /run/gpu-quota/limits)" "vram_bytes=$((COMPOSE_VRAM * GIB))"
}
compose_down() {
  DC down -t 1 >"$LOG/compose-down.log" 2>&1 || { cat "$LOG/compose-down.log"; return 1; }
  wait_ledger 0 5 && no_state_dirs || return 1
  [ -z "$(D ps -aq)" ] || { D ps -a; return 1; }
}
compose_cases() {
  local v; v=$("$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" version --short 2>/dev/null)
  check "docker compose $v: the README's example (runtime: gpu-quota + annotations) is a valid project" compose_setup
  check "docker compose $v: up -d gets the README's slice (limits inside the service's container)" compose_up
  check "docker compose $v: down releases the slice" compose_down
}

# ================================================================ containerd / ctr
ctd_config_dump() {
  local out; out=$(timeout 30 containerd --config "$R/etc/containerd/config.toml" config dump 2>&1) || { echo "$out"; return 1; }
  grep -A24 'containerd.runtimes.gpu-quota\]' <<<"$out" >"$R/dump.txt"
  has "$(cat "$R/dump.txt")" 'runtime_type = "io.containerd.runc.v2"' &&
    has "$(cat "$R/dump.txt")" "BinaryName = \"$RT\"" &&
    has "$(cat "$R/dump.txt")" 'pod_annotations = ["vram", "gpu", "gpus", "gpu-quota.io/*"]' || return 1
  # and the running daemon was started from that very file
  has "$(tr '\0' ' ' </proc/"$CTD_PID"/cmdline)" "--config $R/etc/containerd/config.toml"
}
ctr_run() { C run --snapshotter native --fifo-dir "$R/fifo" --runc-binary "$RT" "$@"; }
ctr_slice() {
  ctr_run -d --annotation vram=2g "$CIMG" gq-c1 sleep 600 >/dev/null || return 1
  expect_ledger 1 "after ctr run -d" || return 1
  local l; l=$(C tasks exec --exec-id probe gq-c1 cat /run/gpu-quota/limits) || return 1
  has "$l" "vram_bytes=$((2 * GIB))" || return 1
  has "$(ledger)" "$R/ctd/state/io.containerd.runtime.v2.task/$NS/gq-c1"
}
ctr_refusal() {
  local g out rc; g=$(ledger_gpu)
  out=$(ctr_run --rm --annotation vram=15g --annotation gpu="$g" "$CIMG" gq-c2 true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "ctr run succeeded: $out"; return 1; }
  has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! C tasks ls -q | grep -qx gq-c2 || { echo "refused task left behind"; return 1; }
  C containers rm gq-c2 >/dev/null 2>&1; true
}
ctr_release() {
  C tasks kill -s KILL gq-c1 >/dev/null || return 1
  local i; for i in $(seq 1 50); do C tasks ls | grep -q 'gq-c1.*STOPPED' && break; sleep 0.1; done
  expect_ledger 1 "after kill (the container still exists until delete)" || return 1
  C tasks delete gq-c1 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  C containers rm gq-c1 >/dev/null || return 1
  ! C containers ls -q | grep -qx gq-c1
}
ctr_run_rm() {
  local out; out=$(ctr_run --rm --annotation gpu-quota.io/vram=2g "$CIMG" gq-c3 cat /run/gpu-quota/limits) || { echo "$out"; return 1; }
  has "$out" "vram_bytes=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
ctr_cases() {
  check "$CTD: config dump of the installed config shows runtime gpu-quota with BinaryName and pod_annotations" ctd_config_dump
  check "$CTD: ctr run --runc-binary gpu-quota-runtime --annotation vram=2g gets a 2 GiB slice" ctr_slice
  check "$CTD: ctr run of a request that does not fit fails with the gpu-quota message" ctr_refusal
  check "$CTD: ctr task kill keeps, task delete releases, container rm removes" ctr_release
  check "$CTD: ctr run --rm --annotation gpu-quota.io/vram=2g sees 2 GiB and releases" ctr_run_rm
}

# ================================================================ CRI (kubelet's path)
TASKS=io.containerd.runtime.v2.task/k8s.io
bundle_annotations() { grep -o '"annotations":{[^}]*}' "$R/ctd/state/$TASKS/$1/config.json" 2>/dev/null; }
pod_id() { sed -E 's/^\{"id":"([0-9a-f]+)".*/\1/' "$1"; }
cri_version() {
  local v; v=$(Q version) || { echo "$v"; return 1; }
  note "$v"
  has "$v" "containerd"
}
cri_sandbox_free() {
  # a pod asking for 2 GiB: its sandbox (pause) container is created by the runtime with the
  # request annotation in its config.json, and is not charged
  Q run-pod --name gq-pod1 --handler gpu-quota --annotation gpu-quota.io/vram=2g --out "$R/pod-1.json" >/dev/null || return 1
  local a; a=$(bundle_annotations "$(pod_id "$R/pod-1.json")") || { echo "no sandbox bundle"; return 1; }
  has "$a" '"gpu-quota.io/vram":"2g"' && has "$a" '"io.kubernetes.cri.container-type":"sandbox"' || return 1
  has "$(cat "/proc/$CTD_PID/cmdline" | tr '\0' ' ')" containerd || return 1
  expect_ledger 0 "after RunPodSandbox (the pause container must not be charged)"
}
cri_slice() {
  CRI_C1=$(Q create --pod "$R/pod-1.json" --name main --image "$CIMG" -- sleep 600) || { echo "$CRI_C1"; return 1; }
  expect_ledger 0 "after CreateContainer (containerd runs the runtime only at StartContainer)" || return 1
  Q start "$CRI_C1" || return 1
  expect_ledger 1 "after StartContainer" || return 1
  has "$(ledger)" "\"bytes\": $((2 * GIB))" || return 1
  has "$(bundle_annotations "$CRI_C1")" '"gpu-quota.io/vram":"2g"' || return 1
  local l; l=$(Q exec "$CRI_C1" -- cat /run/gpu-quota/limits) || { echo "$l"; return 1; }
  has "$l" "vram_bytes=$((2 * GIB))"
}
cri_refusal() {
  # 15 GiB pinned to the GPU that holds the first pod's 2 GiB
  local g out rc c; g=$(ledger_gpu)
  Q run-pod --name gq-pod2 --handler gpu-quota --annotation gpu-quota.io/vram=15g --annotation gpu-quota.io/gpu="$g" \
    --out "$R/pod-2.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-2.json" --name main --image "$CIMG" -- sleep 600) || { echo "$c"; return 1; }
  out=$(Q start "$c" 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "StartContainer succeeded"; return 1; }
  has "$out" "StartContainer:" && has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB (annotation gpu-quota.io/vram)" || return 1
  note "$out"
  [ "$(Q state "$c")" != CONTAINER_RUNNING ] || { echo "refused container is running"; return 1; }
  expect_ledger 1 "after the refusal"
}
cri_release() {
  Q stop-pod "$R/pod-1.json" || return 1
  wait_ledger 0 5 || return 1
  Q remove-pod "$R/pod-1.json" && Q stop-pod "$R/pod-2.json" && Q remove-pod "$R/pod-2.json" || return 1
  rm -f "$R"/pod-[12].json
  [ -z "$(K containers ls -q)" ] || { echo "containers left: $(K containers ls -q)"; return 1; }
  expect_ledger 0 && no_state_dirs
}
cri_allowlist() {
  # keys outside pod_annotations (a pod annotation, and container annotations, for which
  # install allows nothing) never reach the runtime: not in config.json, no slice
  Q run-pod --name gq-pod3 --handler gpu-quota --annotation example.com/vram=4g --out "$R/pod-3.json" >/dev/null || return 1
  local c a out; c=$(Q create --pod "$R/pod-3.json" --name main --image "$CIMG" --annotation vram=4g \
    --annotation gpu-quota.io/vram=4g -- sleep 600) || { echo "$c"; return 1; }
  Q start "$c" || return 1
  for id in "$(pod_id "$R/pod-3.json")" "$c"; do
    a=$(bundle_annotations "$id") || { echo "no bundle for $id"; return 1; }
    hasnt "$a" "example.com/vram" && hasnt "$a" '"vram"' && hasnt "$a" "gpu-quota.io/vram" || return 1
  done
  has "$a" '"io.kubernetes.cri.container-type":"container"' || return 1
  out=$(Q exec "$c" -- sh -c 'test -e /run/gpu-quota && echo HAS_GQ; true')
  hasnt "$out" HAS_GQ || return 1
  expect_ledger 0 || return 1
  Q stop-pod "$R/pod-3.json" && Q remove-pod "$R/pod-3.json" && rm -f "$R/pod-3.json"
}
# Beside NVIDIA's device plugin (issue 19): kubelet passes its Allocate response as
# ContainerConfig.devices (the GPU's node) and envs (NVIDIA_VISIBLE_DEVICES); the gpu-quota
# request comes from the pod annotation. The GPU NVIDIA's plugin allocated becomes the
# slice's GPU and the container sees only that GPU's node; a contradiction is refused.
cri_nvidia_plugin() {
  Q run-pod --name gq-pod4 --handler gpu-quota --annotation gpu-quota.io/vram=2g --out "$R/pod-4.json" >/dev/null || return 1
  local c out; c=$(Q create --pod "$R/pod-4.json" --name main --image "$CIMG" \
    --device "$GQ/dev/nvidia1:/dev/nvidia1" --env NVIDIA_VISIBLE_DEVICES=GPU-00000001-0000-4000-8000-000000000001 \
    -- sleep 600) || { echo "$c"; return 1; }
  Q start "$c" || return 1
  expect_ledger 1 "after StartContainer" || return 1
  [ "$(ledger_gpu)" = 1 ] || { echo "the slice is on GPU $(ledger_gpu), NVIDIA's plugin allocated GPU 1"; ledger; return 1; }
  out=$(Q exec "$c" -- ls /dev) || { echo "$out"; return 1; }
  has "$out" nvidia1 && hasnt "$out" nvidia0 || return 1
  out=$(Q exec "$c" -- cat /run/gpu-quota/limits) || { echo "$out"; return 1; }
  has "$out" "GPU-00000001-0000-4000-8000-000000000001" && hasnt "$out" "GPU-00000000-0000-4000-8000-000000000000" || return 1
  Q stop-pod "$R/pod-4.json" && wait_ledger 0 5 && Q remove-pod "$R/pod-4.json" && rm -f "$R/pod-4.json"
}
cri_nvidia_contradiction() {
  Q run-pod --name gq-pod5 --handler gpu-quota --annotation gpu-quota.io/vram=2g \
    --annotation gpu-quota.io/gpu=GPU-00000000-0000-4000-8000-000000000000 --out "$R/pod-5.json" >/dev/null || return 1
  local c out rc; c=$(Q create --pod "$R/pod-5.json" --name main --image "$CIMG" \
    --device "$GQ/dev/nvidia1:/dev/nvidia1" -- sleep 600) || { echo "$c"; return 1; }
  out=$(Q start "$c" 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "StartContainer succeeded"; return 1; }
  has "$out" "gpu-quota" && has "$out" "nvidia1" || return 1
  note "$out"
  expect_ledger 0 "after the refusal" || return 1
  Q stop-pod "$R/pod-5.json" && Q remove-pod "$R/pod-5.json" && rm -f "$R/pod-5.json"
}
cri_cases() {
  check "$CRI: Version over the CRI socket answers" cri_version
  check "$CRI: RunPodSandbox (handler gpu-quota, pod annotation gpu-quota.io/vram=2g): the sandbox (pause) is not charged" cri_sandbox_free
  check "$CRI: CreateContainer + StartContainer in that pod: the container sees its 2 GiB slice" cri_slice
  check "$CRI: a pod request that does not fit is refused with the gpu-quota message (at StartContainer: CreateContainer does not run the runtime)" cri_refusal
  check "$CRI: StopPodSandbox releases the slice; RemovePodSandbox removes the pods" cri_release
  check "$CRI: a pod annotation outside the pod_annotations allowlist (and container annotations) never reach the runtime" cri_allowlist
  check "$CRI: beside NVIDIA's device plugin (devices + NVIDIA_VISIBLE_DEVICES of its Allocate for GPU 1) the slice is on GPU 1 and only its node is in the container" cri_nvidia_plugin
  check "$CRI: NVIDIA's plugin's GPU 1 with gpu-quota.io/gpu naming GPU 0 is refused at StartContainer, naming both, nothing reserved" cri_nvidia_contradiction
}

# ================================================================ Kubernetes cluster mode
source "$ROOT/tests/engines/kubernetes.sh"
source "$ROOT/tests/engines/dra.sh"

# ================================================================ podman 4.3
podman_slice() {  # RUNTIME NAME
  P run "${PODMAN_RUN[@]}" -d --name "$2" --runtime "$1" --annotation vram=2g "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after podman run -d" || return 1
  local l; l=$(P exec "$2" cat /run/gpu-quota/limits) || return 1
  has "$l" "vram_bytes=$((2 * GIB))"
}
podman_refusal() {  # RUNTIME NAME
  local g out rc; g=$(ledger_gpu)
  out=$(P run "${PODMAN_RUN[@]}" --rm --name "$2" --runtime "$1" --annotation vram=15g --annotation gpu="$g" "$IMG" true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "podman run succeeded: $out"; return 1; }
  # one prefix: podman puts the runtime's name (or path) before the runtime's stderr itself
  has "$out" "OCI runtime error: $1: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  hasnt "$out" "gpu-quota: gpu-quota:" && hasnt "$out" "$1: gpu-quota:" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! P ps -a --format '{{.Names}}' | grep -qx "$2" || { echo "refused --rm container left behind"; return 1; }
}
podman_rm() {  # NAME
  P rm -f -t 0 "$1" >/dev/null || return 1
  wait_ledger 0 5
}
podman_run_rm() {  # RUNTIME
  local out; out=$(P run "${PODMAN_RUN[@]}" --rm --runtime "$1" --annotation vram=2g "$IMG" cat /run/gpu-quota/limits) || { echo "$out"; return 1; }
  has "$out" "vram_bytes=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
podman_stop_start() {  # RUNTIME
  P run "${PODMAN_RUN[@]}" -d --name gq-p5 --runtime "$1" --annotation vram=3g "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after run -d" || return 1
  P stop -t 1 gq-p5 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  P start gq-p5 >/dev/null || return 1
  expect_ledger 1 "after podman start" || return 1
  has "$(P exec gq-p5 cat /run/gpu-quota/limits)" "vram_bytes=$((3 * GIB))" || return 1
  P rm -f -t 0 gq-p5 >/dev/null || return 1
  wait_ledger 0 5
}
podman_install() {
  # CONTAINERS_CONF isolates podman from /etc (podman 4.3 then reads only that file):
  # before install the name is unknown, after install the installed file is what defines it
  P --runtime gpu-quota info >/dev/null 2>&1 && { echo "runtime gpu-quota known before install: not isolated"; return 1; }
  "$REL/gpu-quota" install podman --root "$T" --runtime-path "$RT" >"$LOG/install-podman.log" 2>&1 ||
    { cat "$LOG/install-podman.log"; return 1; }
  PODMAN_CONF=$T/etc/containers/containers.conf.d/gpu-quota.conf
  local out; out=$(P --runtime gpu-quota info --format '{{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Path}}' 2>&1) || { echo "$out"; return 1; }
  has "$out" "gpu-quota $RT"
}
podman_config() {  # the round's config as it is now (install docker changed it)
  nsenter -t "$PNS" -m -- cp "$GPU_QUOTA_CONFIG" /etc/gpu-quota/config.toml || return 1
  ! cmp -s "$GPU_QUOTA_CONFIG" /etc/gpu-quota/config.toml 2>/dev/null || { echo "the host sees the namespace's /etc"; return 1; }
}
podman_load() { P load -i "$T/bb.tar" >/dev/null 2>"$LOG/podman-load.log" || { cat "$LOG/podman-load.log"; return 1; }; }
podman_cases() {
  local PV; PV="podman $(podman --version | awk '{print $3}')"
  check "$PV: the namespace's /etc/gpu-quota/config.toml is this round's (host /etc untouched); image loaded" eval 'podman_config && podman_load'
  check "$PV: --runtime /abs/gpu-quota-runtime --annotation vram=2g gets a 2 GiB slice" podman_slice "$RT" gq-p1
  check "$PV: (abs path) a request that does not fit fails with the gpu-quota message, one prefix" podman_refusal "$RT" gq-p2
  check "$PV: (abs path) rm -f releases the slice" podman_rm gq-p1
  check "$PV: (abs path) run --rm sees 2 GiB and releases" podman_run_rm "$RT"
  check "$PV: install --root registers runtime name gpu-quota (isolated CONTAINERS_CONF)" podman_install
  check "$PV: --runtime gpu-quota (installed name) gets a 2 GiB slice" podman_slice gpu-quota gq-p3
  check "$PV: (name) a request that does not fit fails with the gpu-quota message, one prefix" podman_refusal gpu-quota gq-p4
  check "$PV: (name) rm -f releases the slice" podman_rm gq-p3
  check "$PV: (name) run --rm sees 2 GiB and releases" podman_run_rm gpu-quota
  check "$PV: (name) stop releases the slice, start admits it again, rm -f releases" podman_stop_start gpu-quota
}

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
