#!/usr/bin/env bash
# Real-engine tests: gpu-quota-runtime under Docker (dockerd 20.10 + containerd),
# containerd 1.6 (ctr) and podman 4.3, on a fake GPU host (mknod'd device nodes,
# fake driver libraries, a static inventory of two 16 GiB GPUs).
#
# Everything lives under one temp dir $T: private containerd (--config/--root/
# --state/--address), private dockerd (--config-file/--data-root/--exec-root/
# --pidfile/-H), podman with --root/--runroot/--tmpdir and CONTAINERS_CONF, run in
# a private mount namespace whose /etc carries gpu-quota/config.toml (podman does
# not pass GPU_QUOTA_CONFIG to the runtime). The machine's /etc and daemons are
# never used or touched. docs/engines.md describes what is tested and why.
#
# Needs root, runc, busybox (static), dockerd, containerd, ctr, podman, conmon,
# unshare/nsenter (util-linux). Binaries: target/release (built when missing or
# older than the sources), or GPU_QUOTA_BIN_DIR.
# Each check is a named case; the last line is "N passed, M failed".
# GQ_ENGINES_KEEP=1 keeps $T (daemons are still stopped) for debugging.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REL=${GPU_QUOTA_BIN_DIR:-$ROOT/target/release}   # gpu-quota, gpu-quota-runtime, gpu-quota-hook, libgpuquota.so
RT=$REL/gpu-quota-runtime
GIB=$((1 << 30))
START=$SECONDS
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
for b in runc busybox dockerd containerd ctr containerd-shim-runc-v2 podman conmon mknod timeout unshare nsenter tar; do
  command -v "$b" >/dev/null 2>&1 || missing+=("$b")
done
[ ${#missing[@]} -eq 0 ] || die "prerequisites" "missing: ${missing[*]} (apt-get install runc busybox-static docker.io containerd podman)"
# the docker.io CLI (a newer CLI elsewhere on PATH negotiates down too, but keep to the package's)
DOCKER_BIN=/usr/bin/docker; [ -x "$DOCKER_BIN" ] || DOCKER_BIN=$(command -v docker) || die "prerequisites" "no docker CLI"
BB=$(command -v busybox)
file_static() { ! LC_ALL=C readelf -d "$1" 2>/dev/null | grep -q NEEDED; }
file_static "$BB" || { [ -x /bin/busybox ] && file_static /bin/busybox && BB=/bin/busybox; }

stale() {  # a release binary is missing, or older than a source file
  local b; for b in "$RT" "$REL/gpu-quota-hook" "$REL/gpu-quota" "$REL/libgpuquota.so"; do [ -e "$b" ] || return 0; done
  [ -z "${GPU_QUOTA_BIN_DIR:-}" ] || return 1
  [ -n "$(cd "$ROOT" && find shim hook core install interceptor -newer "$RT" \( -name '*.rs' -o -name Cargo.toml -o -name '*.c' \) -not -path '*/target/*' 2>/dev/null | head -1)" ]
}
if stale; then
  echo "== make build (release binaries missing or older than the sources)"
  make -C "$ROOT" -s build >/dev/null 2>&1 || die "build" "$(make -C "$ROOT" -s build 2>&1 | tail -20)"
fi

# ---------------------------------------------------------------- the temp host
T=$(mktemp -d /tmp/gqe.XXXXXX)          # short: unix socket paths live under it
chmod 755 "$T"
CASE_OUT=$T/case.out
GQ=$T/gq
CSOCK=$T/ctd/containerd.sock
DSOCK=$T/docker.sock
NS=gqtest                                 # ctr namespace
IMG=gq-engines-bb:latest
CIMG=docker.io/library/$IMG
LOG=$T/logs; mkdir -p "$LOG"
CTD_PID=""; DOCKERD_PID=""
# containerd-shim-runc-v2 (runc root, socket dir) and podman (runc's default root)
# create these; remove them afterwards when they were not there before
RUN_DIRS=(); for d in /run/containerd /run/runc; do [ -e "$d" ] || RUN_DIRS+=("$d"); done

export GPU_QUOTA_CONFIG=$GQ/config.toml
export DOCKER_CONFIG=$T/docker-cli       # the CLI's own config, not ~/.docker
export DOCKER_HOST=unix://$DSOCK

D()   { timeout 90 "$DOCKER_BIN" "$@"; }
C()   { timeout 60 ctr --address "$CSOCK" -n "$NS" "$@"; }
# podman 4.3 passes no environment to the OCI runtime (create gets only LC_*,
# CONTAINERS_CONF, HOME and containers.conf's conmon_env_vars; start/kill/delete
# get next to nothing), so GPU_QUOTA_CONFIG cannot reach gpu-quota-runtime and
# the runtime reads /etc/gpu-quota/config.toml. To keep the machine's /etc
# untouched, podman runs inside a private mount namespace (held by one sleeping
# process, $PNS) whose /etc is an overlay with gpu-quota/config.toml added.
PODMAN_CONF=$T/podman/empty.conf
PNS=""
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
  # /etc gets gpu-quota/config.toml; /var/lib and /run catch what podman writes outside
  # --root/--runroot/--tmpdir (/var/lib/containers/cache, /run/containers/networks,
  # runc's default root /run/runc): overlays with their upper dirs on a tmpfs of the namespace
  mkdir -p "$T/podman/ns" || return 1
  nsenter -t "$PNS" -m -- sh -ec "
    mount -t tmpfs -o mode=755 gq-ns '$T/podman/ns'
    for d in etc var/lib run; do
      u='$T/podman/ns/'\$(echo \$d | tr / _)
      mkdir -p \$u/up \$u/work
      mount -t overlay gq-ns -o lowerdir=/\$d,upperdir=\$u/up,workdir=\$u/work /\$d
    done
    mkdir -p /etc/gpu-quota
    cp '$GQ/config.toml' /etc/gpu-quota/config.toml" || return 1
  if [ -e /etc/gpu-quota/config.toml ] && cmp -s "$GQ/config.toml" /etc/gpu-quota/config.toml; then
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

# Orderly teardown of everything the suite created (idempotent).
teardown() {
  if [ -S "$DSOCK" ]; then
    local ids; ids=$(timeout 30 "$DOCKER_BIN" ps -aq 2>/dev/null)
    [ -n "$ids" ] && timeout 60 "$DOCKER_BIN" rm -f $ids >/dev/null 2>&1
  fi
  if [ -S "$CSOCK" ]; then
    local c
    for c in $(timeout 20 ctr --address "$CSOCK" -n "$NS" tasks ls -q 2>/dev/null); do
      timeout 20 ctr --address "$CSOCK" -n "$NS" tasks kill -s KILL "$c" >/dev/null 2>&1; sleep 0.3
      timeout 20 ctr --address "$CSOCK" -n "$NS" tasks delete -f "$c" >/dev/null 2>&1
    done
    for c in $(timeout 20 ctr --address "$CSOCK" -n "$NS" containers ls -q 2>/dev/null); do
      timeout 20 ctr --address "$CSOCK" -n "$NS" containers rm "$c" >/dev/null 2>&1
    done
  fi
  if [ -n "$PNS" ] && [ -d "$T/podman/root" ]; then P rm -af -t 0 >/dev/null 2>&1; fi
  stop_pid "$PNS"; PNS=""
  stop_pid "$DOCKERD_PID"; DOCKERD_PID=""
  stop_pid "$CTD_PID"; CTD_PID=""
  local d; for d in "${RUN_DIRS[@]}"; do [ -d "$d" ] && find "$d" -depth -type d -empty -delete 2>/dev/null; done
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
ledger()     { cat "$GQ/ledger/ledger.json" 2>/dev/null || echo '{"version":1,"reservations":[]}'; }
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
  # busybox rootfs -> image
  local r=$T/rootfs a
  mkdir -p "$r"/{bin,etc,proc,sys,dev,tmp,run,root} && cp "$BB" "$r/bin/busybox" || return 1
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"; echo 'root:x:0:' >"$r/etc/group"
  mkdir -p "$T/podman"/{root,runroot,tmp,net} "$DOCKER_CONFIG" "$T/ctd"
  : >"$PODMAN_CONF"
  printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n' "$T/podman/runroot" "$T/podman/root" >"$T/podman/storage.conf"
  printf 'unqualified-search-registries = []\n' >"$T/podman/registries.conf"
}
check "fake GPU host (mknod nodes, driver libs, static inventory)" setup_host
check "podman: private mount namespace whose /etc has gpu-quota/config.toml (host /etc untouched)" podman_ns

# ---------------------------------------------------------------- containerd
start_containerd() {
  mkdir -p "$T/etc/containerd" "$T/cni"
  # Debian's stock config.toml (it defines the CRI section), made private to $T
  cat >"$T/etc/containerd/config.toml" <<EOF
version = 2
root = "$T/ctd/root"
state = "$T/ctd/state"

[grpc]
  address = "$CSOCK"

[ttrpc]
  address = "$CSOCK.ttrpc"

[debug]
  address = "$T/ctd/debug.sock"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$T/cni"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$T/ctd/opt"
EOF
  # register the runtime the way a user does; containerd then starts with that file
  "$REL/gpu-quota" install containerd --root "$T" --runtime-path "$RT" >"$LOG/install-containerd.log" 2>&1 ||
    { cat "$LOG/install-containerd.log"; return 1; }
  containerd --config "$T/etc/containerd/config.toml" --root "$T/ctd/root" --state "$T/ctd/state" \
    --address "$CSOCK" >"$LOG/containerd.log" 2>&1 &
  CTD_PID=$!
  local i
  for i in $(seq 1 300); do
    timeout 5 ctr --address "$CSOCK" version >/dev/null 2>&1 && return 0
    kill -0 "$CTD_PID" 2>/dev/null || { echo "containerd exited:"; tail -20 "$LOG/containerd.log"; return 1; }
    sleep 0.1
  done
  echo "containerd not ready after 30s"; tail -20 "$LOG/containerd.log"; return 1
}
check "containerd: starts with its own --config/--root/--state/--address" start_containerd
[ -n "$CTD_PID" ] && kill -0 "$CTD_PID" 2>/dev/null || die "containerd is required by every engine below"

# ---------------------------------------------------------------- dockerd
start_dockerd() {
  mkdir -p "$T/etc/docker"
  printf '{\n  "storage-driver": "vfs"\n}\n' >"$T/etc/docker/daemon.json"
  dockerd --config-file "$T/etc/docker/daemon.json" --data-root "$T/docker" --exec-root "$T/exec" \
    --pidfile "$T/dockerd.pid" -H "unix://$DSOCK" --containerd "$CSOCK" \
    --bridge none --iptables=false --ip-masq=false --userland-proxy=false >"$LOG/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  local i
  for i in $(seq 1 600); do
    timeout 5 "$DOCKER_BIN" version >/dev/null 2>&1 && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || { echo "dockerd exited:"; tail -20 "$LOG/dockerd.log"; return 1; }
    sleep 0.1
  done
  echo "dockerd not ready after 60s"; tail -20 "$LOG/dockerd.log"; return 1
}
check "dockerd: starts with its own config/data/exec root, on the private containerd" start_dockerd
docker_up=0; [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null && docker_up=1

make_image() {
  [ "$docker_up" = 1 ] || { echo "no dockerd"; return 1; }
  tar -C "$T/rootfs" -c . | D import -c 'ENV PATH=/bin' - "$IMG" >/dev/null || return 1
  D save -o "$T/bb.tar" "$IMG" || return 1
  C images import --snapshotter native "$T/bb.tar" >/dev/null || return 1
  P load -i "$T/bb.tar" >/dev/null 2>"$LOG/podman-load.log" || { cat "$LOG/podman-load.log"; return 1; }
}
check "image: busybox rootfs -> docker import -> docker save -> ctr import / podman load" make_image

echo "versions: $("$DOCKER_BIN" version --format 'docker client {{.Client.Version}}, dockerd {{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null);" \
  "$(containerd --version | awk '{print "containerd", $3}');" "$(podman --version);" "$(runc --version | head -1)"

# ================================================================ 1. Docker 20.10
docker_install() {
  "$REL/gpu-quota" install docker --root "$T" --runtime-path "$RT" >"$LOG/install-docker.log" 2>&1 ||
    { cat "$LOG/install-docker.log"; return 1; }
  has "$(cat "$T/etc/docker/daemon.json")" "\"path\": \"$RT\"" || return 1
  D info --format '{{json .Runtimes}}' | grep -q gpu-quota && { echo "gpu-quota listed before SIGHUP"; return 1; }
  kill -HUP "$(cat "$T/dockerd.pid")" || return 1
  local i
  for i in $(seq 1 100); do
    D info --format '{{json .Runtimes}}' 2>/dev/null | grep -qF "\"gpu-quota\":{\"path\":\"$RT\"" && return 0
    sleep 0.1
  done
  echo "docker info does not list gpu-quota after SIGHUP:"; D info --format '{{json .Runtimes}}'; return 1
}
DRUN=(run --runtime gpu-quota --network none)
docker_rm_releases() {
  # detached container keeps its slice; limits visible through docker exec
  D "${DRUN[@]}" -d --name gq-d1 -e GPU_QUOTA_VRAM=2g "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after docker run -d" || return 1
  has "$(ledger)" "\"bytes\":$((2 * GIB))" || has "$(ledger)" "\"bytes\": $((2 * GIB))" || return 1
  local l; l=$(D exec gq-d1 cat /run/gpu-quota/limits) || return 1
  has "$l" "vram_bytes=$((2 * GIB))" || return 1
  D exec gq-d1 sh -c 'ls /dev; cat /etc/ld.so.preload; ls /run/gpu-quota/driver' >"$T/d1.probe" || return 1
  has "$(cat "$T/d1.probe")" "nvidiactl" && has "$(cat "$T/d1.probe")" "libgpuquota.so" && has "$(cat "$T/d1.probe")" "libcuda.so.1" || return 1
}
docker_refusal() {
  # gq-d1 holds 2 GiB on one GPU; 15 GiB pinned to that GPU cannot fit
  local g out rc; g=$(ledger_gpu)
  out=$(D "${DRUN[@]}" --rm --name gq-d2 -e GPU_QUOTA_VRAM=15g -e GPU_QUOTA_GPU="$g" "$IMG" true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "docker run succeeded: $out"; return 1; }
  has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! D ps -a --format '{{.Names}}' | grep -qx gq-d2 || { echo "refused --rm container left behind"; return 1; }
}
docker_rm() {
  D rm -f gq-d1 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  [ -z "$(ls "$GQ/state/containers" 2>/dev/null)" ] || { echo "state dirs left: $(ls "$GQ/state/containers")"; return 1; }
}
docker_run_rm() {
  local out; out=$(D "${DRUN[@]}" --rm -e GPU_QUOTA_VRAM=2g "$IMG" cat /run/gpu-quota/limits) || { echo "$out"; return 1; }
  has "$out" "vram_bytes=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
docker_stop_start() {
  # a stopped container holds no slice; start admits it again
  D "${DRUN[@]}" -d --name gq-d3 -e GPU_QUOTA_VRAM=3g "$IMG" sleep 600 >/dev/null || return 1
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
if [ "$docker_up" = 1 ]; then
  check "docker: install --root + SIGHUP registers runtime gpu-quota (docker info)" docker_install
  check "docker: run -d --runtime gpu-quota -e GPU_QUOTA_VRAM=2g gets a 2 GiB slice (limits, devices, preload, libs)" docker_rm_releases
  check "docker: a request that does not fit fails with the gpu-quota message in docker's error" docker_refusal
  check "docker: rm -f releases the slice (ledger empty, state dir gone)" docker_rm
  check "docker: run --rm sees 2 GiB and releases on exit" docker_run_rm
  check "docker: stop releases the slice, start admits it again, rm -f releases" docker_stop_start
  check "docker: container without a request passes through untouched" docker_plain
  check "docker: 20.10 refuses --annotation (needs API 1.43), so -e GPU_QUOTA_VRAM is the way" docker_annotation_refused
else
  fail "docker: cases skipped" "dockerd did not start"
fi

# ================================================================ 2. containerd 1.6 / ctr
ctd_config_dump() {
  local out; out=$(timeout 30 containerd --config "$T/etc/containerd/config.toml" config dump 2>&1) || { echo "$out"; return 1; }
  grep -A24 'containerd.runtimes.gpu-quota\]' <<<"$out" >"$T/dump.txt"
  has "$(cat "$T/dump.txt")" 'runtime_type = "io.containerd.runc.v2"' &&
    has "$(cat "$T/dump.txt")" "BinaryName = \"$RT\"" &&
    has "$(cat "$T/dump.txt")" 'pod_annotations = ["vram", "gpu", "gpus", "gpu-quota.io/*"]' || return 1
  # and the running daemon was started from that very file
  has "$(tr '\0' ' ' </proc/"$CTD_PID"/cmdline)" "--config $T/etc/containerd/config.toml"
}
CRUN=(run --snapshotter native --fifo-dir "$T/fifo" --runc-binary "$RT")
ctr_slice() {
  C "${CRUN[@]}" -d --annotation vram=2g "$CIMG" gq-c1 sleep 600 >/dev/null || return 1
  expect_ledger 1 "after ctr run -d" || return 1
  local l; l=$(C tasks exec --exec-id probe gq-c1 cat /run/gpu-quota/limits) || return 1
  has "$l" "vram_bytes=$((2 * GIB))" || return 1
  has "$(ledger)" "$T/ctd/state/io.containerd.runtime.v2.task/$NS/gq-c1"
}
ctr_refusal() {
  local g out rc; g=$(ledger_gpu)
  out=$(C "${CRUN[@]}" --rm --annotation vram=15g --annotation gpu="$g" "$CIMG" gq-c2 true 2>&1); rc=$?
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
  local out; out=$(C "${CRUN[@]}" --rm --annotation gpu-quota.io/vram=2g "$CIMG" gq-c3 cat /run/gpu-quota/limits) || { echo "$out"; return 1; }
  has "$out" "vram_bytes=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
check "containerd: config dump of the installed config shows runtime gpu-quota with BinaryName" ctd_config_dump
check "ctr: run --runc-binary gpu-quota-runtime --annotation vram=2g gets a 2 GiB slice" ctr_slice
check "ctr: a request that does not fit fails with the gpu-quota message" ctr_refusal
check "ctr: task kill keeps, task delete releases, container rm removes" ctr_release
check "ctr: run --rm --annotation gpu-quota.io/vram=2g sees 2 GiB and releases" ctr_run_rm

# ================================================================ 3. podman 4.3
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
  has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
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
check "podman: --runtime /abs/gpu-quota-runtime --annotation vram=2g gets a 2 GiB slice" podman_slice "$RT" gq-p1
check "podman: (abs path) a request that does not fit fails with the gpu-quota message" podman_refusal "$RT" gq-p2
check "podman: (abs path) rm -f releases the slice" podman_rm gq-p1
check "podman: (abs path) run --rm sees 2 GiB and releases" podman_run_rm "$RT"
check "podman: install --root registers runtime name gpu-quota (isolated CONTAINERS_CONF)" podman_install
check "podman: --runtime gpu-quota (installed name) gets a 2 GiB slice" podman_slice gpu-quota gq-p3
check "podman: (name) a request that does not fit fails with the gpu-quota message" podman_refusal gpu-quota gq-p4
check "podman: (name) rm -f releases the slice" podman_rm gq-p3
check "podman: (name) run --rm sees 2 GiB and releases" podman_run_rm gpu-quota
check "podman: (name) stop releases the slice, start admits it again, rm -f releases" podman_stop_start gpu-quota

# ================================================================ 5. nothing left behind
final_engines_empty() {
  local bad=""
  [ "$docker_up" = 1 ] && [ -n "$(D ps -aq)" ] && bad+="docker: $(D ps -a)"$'\n'
  [ -n "$(C containers ls -q)" ] && bad+="ctr containers: $(C containers ls -q)"$'\n'
  [ -n "$(C tasks ls -q)" ] && bad+="ctr tasks: $(C tasks ls -q)"$'\n'
  [ -n "$(P ps -aq)" ] && bad+="podman: $(P ps -a)"$'\n'
  [ -z "$bad" ] || { echo "$bad"; return 1; }
  expect_ledger 0 "at the end" || return 1
  [ -z "$(ls "$GQ/state/containers" 2>/dev/null)" ] || { echo "state dirs left: $(ls "$GQ/state/containers")"; return 1; }
}
final_nothing_left() {
  local bad="" p r
  # podman's namespace: nothing of the suite mounted there but its own tmpfs; no runc state
  if [ -n "$PNS" ]; then
    p=$(awk -v t="$T/" 'index($5, t) == 1 && $5 != t "podman/ns"' /proc/$PNS/mountinfo)
    [ -z "$p" ] || bad+="mounts in podman's namespace: $p"$'\n'
    nsenter -t "$PNS" -m -- runc --root /run/runc list 2>/dev/null | grep -qF "$T/" && bad+="runc state of podman's containers"$'\n'
  fi
  teardown
  for p in $(procs_of_T); do bad+="process $p: $(tr '\0' ' ' </proc/$p/cmdline)"$'\n'; done
  [ -n "$(mounts_of_T)" ] && bad+="mounts: $(mounts_of_T)"$'\n'
  for r in "$T/exec/runtime-runc/moby" "/run/containerd/runc/$NS" /run/runc; do   # docker, ctr, podman
    [ -d "$r" ] && runc --root "$r" list 2>/dev/null | grep -qF "$T/" && bad+="runc state in $r: $(runc --root "$r" list)"$'\n'
  done
  for r in "${RUN_DIRS[@]}"; do [ -e "$r" ] && bad+="left in $r: $(find "$r")"$'\n'; done
  [ -z "$bad" ] || { echo "$bad"; return 1; }
}
check "end: no container in docker, ctr or podman; ledger empty; no state dirs" final_engines_empty
check "end: daemons stopped; no process, mount or runc state of the suite left" final_nothing_left
finish
