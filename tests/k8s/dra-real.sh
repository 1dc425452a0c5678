#!/usr/bin/env bash
# gpu-quota's DRA driver on a real control plane, by hand.
#
#   K8S_BIN=DIR ETCD=FILE CTD_PREFIX=DIR [GQ_BIN=DIR] [OUT=FILE] tests/k8s/dra-real.sh
#
#   K8S_BIN     kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
#               and kubectl, all built from one Kubernetes tree (>= 1.34: the
#               resource.k8s.io/v1 API with consumable capacity)
#   ETCD        an etcd server binary (>= 3.5)
#   CTD_PREFIX  containerd 1.7 unpacked by tests/engines/trixie.sh PREFIX
#   GQ_BIN      gpu-quota release binaries (default target/release): gpu-quota,
#               gpu-quota-runtime, gpu-quota-hook, gpu-quota-driver, gpu-quota-dra, libgpuquota.so
#   GQ_DRA_KEEP_LOGS=DIR keeps every daemon's log there
#
# Says SKIP and exits 0 when one of them is missing: this is not part of CI
# (CI has no control plane; docs/kubernetes.md says how the binaries were
# built). Needs root, runc, busybox (static) and openssl.
#
# One node ("gq-node-a") with the engines suite's fake GPU host: two simulated
# 16 GiB GPUs, no real driver. etcd, kube-apiserver (Node,RBAC),
# kube-controller-manager, kube-scheduler and the kubelet run on loopback;
# containerd 1.7 with CDI on and gpu-quota installed in cluster mode
# (`gpu-quota install containerd --kubernetes`); gpu-quota-dra runs as the
# service account of deploy/kubernetes/dra/ (a client certificate with its
# user name, so the manifests' RBAC is what it gets). Cases:
#   1. the driver publishes one ResourceSlice for the node, a device per GPU
#      with capacity.memory; a container outside Kubernetes shrinks it
#   2. two pods with 8 GiB claims share one 16 GiB GPU, each container sees
#      exactly 8 GiB on the allocated GPU (ledger and /run/gpu-quota/limits)
#   3. a third 8 GiB pod stays Pending: the scheduler, not the node, says no
#   4. deleting one of the two lets the third run
#   5. a pod that sets gpu-quota annotations, env requests and a forged claim
#      variable gets nothing
#   6. fragmentation: two GPUs with 6 GiB offered each do not take an 8 GiB
#      claim (Pending), a 6 GiB claim runs
#   7. SIGTERM: the driver exits 0 and leaves its slice to the kubelet
#      (docs/kubernetes.md, "Stopping"), which withdraws it when the driver
#      does not register again
#   8. the kubelet's health stream (NodeWatchResources) is served without error
#   9. slices deleted by hand are published again within 15 s
#  10. a kubelet restart with claim pods running: they keep running, the slice
#      the kubelet wiped comes back, a new claim pod schedules and runs
#  11. one claim, every consumer: two containers, a sidecar and the main
#      container, an init and the main container, two pods on a named claim
#  12. a force-deleted pod's replacement (which needs its bytes) runs within 15 s
#  13. a claim below the context charge: the scheduler rounds it up to the
#      published minimum (charge + one allocation, on the step), which the
#      container gets
# Everything runs in a private mount namespace over tmpfs directories, and
# containerd listens on a socket under the run's own directory, so its shims
# (whose command lines name that socket) are told apart from any other
# containerd's on the host. Cleanup ends only what this run started, by pid:
# its daemons, its containerd's shims and every process below them. The
# host keeps nothing (checked at the end: files, processes, mounts, cgroups).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GQ_BIN=${GQ_BIN:-$ROOT/target/release}
OUT=${OUT:-}
NODE=gq-node-a
GIB=$((1024 * 1024 * 1024))

skip() { echo "SKIP: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
[ -n "${K8S_BIN:-}" ] || skip "K8S_BIN not set (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl)"
[ -n "${ETCD:-}" ] && [ -x "${ETCD:-}" ] || skip "ETCD not set or not executable"
[ -n "${CTD_PREFIX:-}" ] && [ -x "${CTD_PREFIX:-}/usr/bin/containerd" ] || skip "CTD_PREFIX has no usr/bin/containerd (tests/engines/trixie.sh PREFIX)"
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [ -x "$K8S_BIN/$b" ] || skip "$K8S_BIN/$b missing"
done
for b in gpu-quota gpu-quota-runtime gpu-quota-hook gpu-quota-driver gpu-quota-dra libgpuquota.so; do
  [ -e "$GQ_BIN/$b" ] || skip "$GQ_BIN/$b missing (make build; cargo build --release -p gpu-quota-dra)"
done
for b in runc openssl mknod unshare python3; do command -v $b >/dev/null || skip "$b missing"; done
BB=$(command -v busybox) || skip "busybox missing"

# ---------------------------------------------------------------- private mount namespace
if [ -z "${GQ_DRA_INNER:-}" ]; then
  before=$(mktemp); after=$(mktemp)
  GQ_DRA_T=$(mktemp -d /tmp/gq-dra.XXXXXX)
  snap() {
    find /etc /var/lib /var/log /var/run /run /opt -maxdepth 2 2>/dev/null | grep -iE 'kube|containerd|cdi|gpu-quota|etcd|cni' | sort
    # cgroups: the top levels, and the kubelet's and containerd's anywhere near them
    ls /sys/fs/cgroup/*/ 2>/dev/null | sort -u
    find /sys/fs/cgroup -maxdepth 4 -type d \( -name 'kubepods*' -o -name 'k8s.io' -o -name 'gq-dra' \
      -o -name 'cri-containerd-*' -o -name 'pod*-*' \) 2>/dev/null | sort
    ps -eo comm= | grep -E '^(kube|etcd|containerd|gpu-quota)' | sort
    # processes of this run: anything naming its directory (its containerd's
    # shims name its socket; the containers' bundles are under it)
    local p
    for p in /proc/[0-9]*; do
      tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$GQ_DRA_T" && echo "process: $(tr '\0' ' ' 2>/dev/null <"$p/cmdline")"
    done
    # the host's mounts (the run's own are in its private namespace)
    grep -E "kube|containerd|gpu-quota|cdi|$GQ_DRA_T" /proc/self/mounts | cut -d' ' -f2 | sort
  }
  snap >"$before"
  GQ_DRA_INNER=1 GQ_DRA_T=$GQ_DRA_T unshare -m --propagation private "$0" "$@"; rc=$?
  snap >"$after"
  if ! diff -u "$before" "$after"; then echo "FAIL: the host kept something (above)"; rc=1; else echo "host: nothing left behind"; fi
  rm -f "$before" "$after"
  rmdir "$GQ_DRA_T" 2>/dev/null
  exit $rc
fi

T=$GQ_DRA_T
LOG=$T/log; mkdir -p "$LOG"
PIDS=()
PASS=0; FAIL=0; RESULTS=()
# the kubelet's and containerd's fixed paths, private to this namespace
for d in /var/lib/kubelet /var/log/pods /var/log/containers /run/containerd /var/run/cdi /etc/cdi /etc/cni /var/lib/containerd /etc/kubernetes; do
  [ -d "$d" ] || { mkdir -p "$d" && echo "$d" >>"$T/made"; }
  mount -t tmpfs -o mode=0755 tmpfs "$d"
done
# the mount the host's containerd would use: if it stops being this run's
# (seen once: containerd wrote into the host's /run/containerd), stop at once
CTD_MNT=$(awk '$5 == "/run/containerd" {print $1}' /proc/self/mountinfo | tail -1)
private_ok() {
  [ "$(awk '$5 == "/run/containerd" {print $1}' /proc/self/mountinfo | tail -1)" = "$CTD_MNT" ] ||
    { echo "FAIL: /run/containerd is no longer this run's private tmpfs: stopping"; exit 1; }
}

export PATH=$CTD_PREFIX/usr/bin:$K8S_BIN:$PATH
KC() { timeout 30 kubectl --kubeconfig "$T/pki/admin.kubeconfig" "$@"; }
note() { echo "    $*"; if [ -n "$OUT" ]; then echo "    $*" >>"$OUT"; fi; }
check() {  # NAME FN...
  local name=$1 out rc; shift
  private_ok
  # not in a subshell: the steps start daemons whose pids cleanup needs
  "$@" >"$T/check.out" 2>&1; rc=$?; out=$(cat "$T/check.out")
  if [ $rc -eq 0 ]; then PASS=$((PASS + 1)); RESULTS+=("PASS $name"); echo "PASS $name"
  else FAIL=$((FAIL + 1)); RESULTS+=("FAIL $name"); echo "FAIL $name"; fi
  [ -n "$out" ] && sed 's/^/    /' <<<"$out"
  [ -n "$OUT" ] && { echo "$([ $rc -eq 0 ] && echo PASS || echo FAIL) $name"; [ -n "$out" ] && sed 's/^/    /' <<<"$out"; } >>"$OUT"
  return $rc
}
has() { grep -qF -- "$2" <<<"$1" || { echo "expected '$2' in:"; echo "$1"; return 1; }; }
waitfor() {  # SECS 'SHELL CONDITION': true within SECS (evaluated anew each time)
  local n=$(($1 * 5)) i; shift
  for i in $(seq 1 "$n"); do eval "$*" >/dev/null 2>&1 && return 0; sleep 0.2; done
  eval "$*"
}

# the shims of this run's containerd: their command lines name its socket
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "-address $CSOCK " && echo "${p#/proc/}"
  done
}
# PIDS... and every process below them (a container's processes are below its shim)
tree() {
  local todo=("$@") all=() p c
  while [ ${#todo[@]} -gt 0 ]; do
    p=${todo[0]}; todo=("${todo[@]:1}"); all+=("$p")
    for c in $(ps -eo pid=,ppid= | awk -v p="$p" '$2 == p {print $1}'); do todo+=("$c"); done
  done
  echo "${all[@]}"
}

# a process's start time (field 22 of /proc/PID/stat, after the command in
# parentheses), empty once it has ended
started() { local s; s=$(cat /proc/"$1"/stat 2>/dev/null) && awk '{print $20}' <<<"${s##*) }"; }
still() {  # PID:START...: whether one of them still runs
  local p
  for p in "$@"; do [ -n "${p#*:}" ] && [ "$(started "${p%%:*}")" = "${p#*:}" ] && return 0; done
  return 1
}
cleanup() {
  set +e
  if [ -n "${GQ_DRA_KEEP_LOGS:-}" ]; then mkdir -p "$GQ_DRA_KEEP_LOGS" && cp -r "$LOG"/. "$GQ_DRA_KEEP_LOGS"/; fi
  KC delete pods --all --grace-period=0 --force >/dev/null 2>&1
  [ -n "${DRA_PID:-}" ] && kill "$DRA_PID" 2>/dev/null
  # what this run started, by pid, read before anything is stopped (a shim
  # whose containerd is gone is still found by its command line)
  local p mine i
  # each as PID:START (its start time): a pid that ended is not killed again
  # after it may have been reused by someone else's process
  mine=$(for p in $(tree "${PIDS[@]}" $(our_shims)); do echo "$p:$(started "$p")"; done)
  for p in $mine; do kill "${p%%:*}" 2>/dev/null; done
  # the API server takes a few seconds to stop on SIGTERM
  for i in $(seq 1 50); do still $mine || break; sleep 0.2; done
  for p in $mine $(for p in $(tree $(our_shims)); do echo "$p:$(started "$p")"; done); do
    [ "$(started "${p%%:*}")" = "${p#*:}" ] && [ -n "${p#*:}" ] && kill -9 "${p%%:*}" 2>/dev/null
  done
  sleep 0.5
  local c
  for c in /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/*/gq-dra /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/*/default; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  grep -o " $T[^ ]*" /proc/self/mounts | sort -r | while read -r m; do umount -l "$m"; done
  for d in /var/lib/kubelet /var/log/pods /var/log/containers /run/containerd /var/run/cdi /etc/cdi /etc/cni /var/lib/containerd /etc/kubernetes; do
    while mountpoint -q "$d"; do umount -l "$d" || break; done   # the kubelet binds its root dir onto itself
  done
  [ -f "$T/made" ] && tac "$T/made" | while read -r d; do rmdir "$d" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

# ---------------------------------------------------------------- PKI
pki() {
  local p=$T/pki; mkdir -p "$p" && cd "$p" || return 1
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=gq-dra-ca" 2>/dev/null || return 1
  cert() {  # NAME CN [O] [SAN]
    local san=${4:-}
    # X.509 v3 always (rustls, kube-rs's TLS, refuses v1 certificates)
    printf "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s" "${san:+subjectAltName=$san}" >"$1.ext"
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2${3:+/O=$3}" 2>/dev/null &&
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 -extfile "$1.ext" 2>/dev/null
  }
  cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" || return 1
  cert admin admin system:masters || return 1
  cert kubelet "system:node:$NODE" system:nodes || return 1
  cert dra "system:serviceaccount:$DRA_NS:$DRA_SA" || return 1
  openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null || return 1
  local n
  for n in admin kubelet dra; do
    cat >"$n.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: gq, cluster: {server: "https://127.0.0.1:$APIPORT", certificate-authority: "$p/ca.crt"}}]
users: [{name: $n, user: {client-certificate: "$p/$n.crt", client-key: "$p/$n.key"}}]
contexts: [{name: gq, context: {cluster: gq, user: $n}}]
current-context: gq
EOF
  done
}

# the driver's identity, as deploy/kubernetes/dra/ names it
DRA_YAML=$ROOT/deploy/kubernetes/dra
DRA_SA=$(awk '/^kind: ServiceAccount/{f=1} f&&/^  name:/{print $2; exit}' "$DRA_YAML"/*.yaml)
DRA_NS=$(awk '/^kind: ServiceAccount/{f=1} f&&/^  namespace:/{print $2; exit}' "$DRA_YAML"/*.yaml)
[ -n "$DRA_SA" ] && [ -n "$DRA_NS" ] || { echo "FAIL: no ServiceAccount (name, namespace) in $DRA_YAML"; exit 1; }
APIPORT=16443; ETCDPORT=23790

start() {  # NAME CMD...: in the background, logged, remembered
  local n=$1; shift
  "$@" >"$LOG/$n.log" 2>&1 &
  PIDS+=($!)
}

kubelet_start() {  # the kubelet, its pid in KUBELET_PID (and in PIDS, for cleanup)
  start kubelet kubelet --config "$T/kubelet.yaml" --kubeconfig "$T/pki/kubelet.kubeconfig" \
    --hostname-override "$NODE" --node-ip 127.0.0.1 --root-dir /var/lib/kubelet
  KUBELET_PID=${PIDS[-1]}
}

control_plane() {
  pki || return 1
  start etcd "$ETCD" --data-dir "$T/etcd" --listen-client-urls "http://127.0.0.1:$ETCDPORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCDPORT" --listen-peer-urls http://127.0.0.1:23800 \
    --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster default=http://127.0.0.1:23800
  local p=$T/pki
  start apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$ETCDPORT" --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 --secure-port "$APIPORT" --tls-cert-file "$p/apiserver.crt" \
    --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.0.0.0/24 \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
    --feature-gates DRAConsumableCapacity=true,DRAPartitionableDevices=true
  waitfor 90 KC get --raw /readyz || { tail -30 "$LOG/apiserver.log"; return 1; }
  start controller-manager kube-controller-manager --kubeconfig "$p/admin.kubeconfig" \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --controllers '*,-nodelifecycle' --leader-elect=false --feature-gates DRAConsumableCapacity=true,DRAPartitionableDevices=true
  start scheduler kube-scheduler --kubeconfig "$p/admin.kubeconfig" --leader-elect=false \
    --feature-gates DRAConsumableCapacity=true,DRAPartitionableDevices=true
  note "$(KC version 2>/dev/null | tr '\n' ' ')"
  note "etcd $("$ETCD" --version | head -1)"
}

# ---------------------------------------------------------------- node: fake GPU host, containerd, kubelet
GQ=$T/gq
# under the run's directory: its shims' command lines name it (our_shims)
CSOCK=$T/containerd.sock
RT=$GQ_BIN/gpu-quota-runtime
export GPU_QUOTA_CONFIG=$T/etc/gpu-quota/config.toml
IMG=docker.io/library/gq-dra-busybox:latest
PAUSE=docker.io/library/gq-dra-pause:latest
ledger() { python3 "$ROOT/tests/ledger_view.py" "$GQ/ledger"; }
# what a container printed: its CRI log file (/var/log/pods/NS_POD_UID/CTR/0.log)
# without each line's "TIME STREAM TAG " prefix
printed() { cat /var/log/pods/default_"$1"_*/"$2"/0.log 2>/dev/null | cut -d' ' -f4-; }
# the slice a container printed: the number after "grant0" (its grant's first vram_bytes)
limits_of() { printed "$1" "$2" | grep -A1 '^grant0$' | sed -n 2p | tr -d ' '; }

node() {
  mkdir -p "$T/etc/gpu-quota" "$T/etc/containerd" || return 1
  source "$ROOT/tests/engines/fakehost.sh"
  fake_gpu_host "$GQ" "$GQ_BIN" /var/run/cdi && cp "$GQ/config.toml" "$GPU_QUOTA_CONFIG" || return 1
  cat >"$T/etc/containerd/config.toml" <<EOF
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "$CSOCK"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE"
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = ["/var/run/cdi"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$T/ctd-opt"
EOF
  "$GQ_BIN/gpu-quota" install containerd --kubernetes --root "$T" --runtime-path "$RT" >"$LOG/install.log" 2>&1 ||
    { cat "$LOG/install.log"; return 1; }
  has "$(cat "$LOG/install.log")" "cluster mode" || return 1
  start containerd containerd --config "$T/etc/containerd/config.toml"
  waitfor 30 ctr --address "$CSOCK" version || { tail -20 "$LOG/containerd.log"; return 1; }
  # images: a busybox rootfs, run as the test image and the sandbox
  local r=$T/rootfs a
  mkdir -p "$r"/{bin,etc,proc,sys,dev,tmp,run,root} && cp "$BB" "$r/bin/busybox" || return 1
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$r/etc/passwd"; echo 'root:x:0:' >"$r/etc/group"
  source "$ROOT/tests/engines/oci-image.sh"   # oci_image
  oci_image "$r" "$T/bb.tar" "$IMG" null '["PATH=/bin"]' && oci_image "$r" "$T/pause.tar" "$PAUSE" '["/bin/sleep","2147483647"]' '["PATH=/bin"]' || return 1
  local ns
  for ns in k8s.io default; do
    ctr --address "$CSOCK" -n $ns images import --snapshotter native "$T/bb.tar" >/dev/null &&
      ctr --address "$CSOCK" -n $ns images import --snapshotter native "$T/pause.tar" >/dev/null || return 1
  done
  cat >"$T/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$T/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://$CSOCK
failSwapOn: false
failCgroupV1: false
evictionHard: {}
imageGCHighThresholdPercent: 100
featureGates: {DRAConsumableCapacity: true, DRAPartitionableDevices: true}
EOF
  kubelet_start
  waitfor 90 KC get node "$NODE" || { tail -30 "$LOG/kubelet.log"; return 1; }
  note "$(KC get node "$NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}')"
  KC apply -f "$ROOT/deploy/kubernetes/runtimeclass.yaml" >/dev/null || return 1
  # the RuntimeClass schedules onto nodes with gpu-quota installed (docs/kubernetes.md)
  KC label node "$NODE" gpu-quota.io/runtime=true >/dev/null || return 1
}

# ---------------------------------------------------------------- the driver
slice_json() { KC get resourceslices -o json; }
cap_of() {  # GPU-INDEX: the published capacity.memory of gpu-N
  slice_json | python3 -c '
import json,sys
d=json.load(sys.stdin)
for s in d["items"]:
    for dev in s["spec"].get("devices",[]):
        if dev["name"]=="gpu-"+sys.argv[1]: print(dev["capacity"]["memory"]["value"])' "$1"
}
driver() {
  # the shipped RBAC, DeviceClass and DaemonSet, validated by the real API server;
  # the DaemonSet is then removed: the host process below plays its pod
  KC apply -f "$DRA_YAML/driver.yaml" -f "$DRA_YAML/deviceclass.yaml" >"$LOG/apply.log" 2>&1 || { cat "$LOG/apply.log"; return 1; }
  cat "$LOG/apply.log"
  KC -n "$DRA_NS" delete daemonset --all >/dev/null 2>&1
  "$GQ_BIN/gpu-quota-dra" --config "$GPU_QUOTA_CONFIG" --node-name "$NODE" --kubeconfig "$T/pki/dra.kubeconfig" \
    --plugin-dir /var/lib/kubelet/plugins/vram.gpu-quota.io --registry-dir /var/lib/kubelet/plugins_registry \
    --poll-ms 500 >"$LOG/dra.log" 2>&1 &
  DRA_PID=$!
  waitfor 30 '[ -n "$(cap_of 0)" ]'  || { tail -20 "$LOG/dra.log"; return 1; }
  # the kubelet registered it: its NotifyRegistrationStatus(plugin_registered=true),
  # which the driver logs; and no registration error on the kubelet's side
  waitfor 30 'grep -q "registered with the kubelet" "$LOG/dra.log"' || { grep -i "plugin" "$LOG/kubelet.log" | tail -20; tail -20 "$LOG/dra.log"; return 1; }
  grep "registered with the kubelet" "$LOG/dra.log" | cut -c1-200
  ! grep "RegisterPlugin error" "$LOG/kubelet.log" | grep -q vram.gpu-quota.io || { grep "RegisterPlugin error" "$LOG/kubelet.log" | tail -3; return 1; }
  KC get resourceslices -o yaml | sed -n '/^  spec:/,$p' | head -40
}

# a container outside Kubernetes (ctr, namespace default: not a cluster runc root)
outside() {  # NAME GPU SIZE
  ctr --address "$CSOCK" -n default run -d --snapshotter native --runc-binary "$RT" \
    --annotation "vram=$3" --annotation "gpu=$2" "$IMG" "$1" sleep 3600 >/dev/null
}
outside_rm() {
  ctr --address "$CSOCK" -n default tasks kill -s KILL "$1" >/dev/null 2>&1; sleep 0.5
  ctr --address "$CSOCK" -n default tasks delete "$1" >/dev/null 2>&1
  ctr --address "$CSOCK" -n default containers rm "$1" >/dev/null
}

# a ResourceClaimTemplate TEMPLATE of this driver's class asking for
# REQUESTS (a YAML map), with CONFIG (the claim's devices.config entries,
# YAML lines indented for it; may be empty), and a pod NAME on it whose one
# container runs COMMAND with SECURITY (a pod securityContext map, or {})
template_pod() {  # NAME TEMPLATE REQUESTS CONFIG SECURITY COMMAND
  cat <<EOF | KC apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $2}
spec:
  spec:
    devices:
      requests:
      - name: vram
        exactly:
          deviceClassName: vram.gpu-quota.io
          capacity: {requests: $3}
$4
---
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  runtimeClassName: gpu-quota
  restartPolicy: Never
  hostNetwork: true
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  securityContext: $5
  resourceClaims: [{name: vram, resourceClaimTemplateName: $2}]
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "$6"]
    resources: {claims: [{name: vram}]}
EOF
}
claim_pod() {  # NAME SIZE: a pod with a claim from a template of SIZE
  template_pod "$1" "vram-$(tr A-Z a-z <<<"$2")" "{memory: $2}" "" "{}" \
    "cat /run/gpu-quota/limits; echo grant0; od -An -tu8 -j88 -N8 /run/gpu-quota/grant; sleep 3600"
}
phase() { KC get pod "$1" -o jsonpath='{.status.phase}'; }
running() { [ "$(phase "$1")" = Running ]; }
pod_claim_alloc() {  # POD: "device consumed" of its claim
  local c; c=$(KC get pod "$1" -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')
  KC get resourceclaim "$c" -o jsonpath='{.status.allocation.devices.results[0].device} {.status.allocation.devices.results[0].consumedCapacity.memory}'
}

case_slice() {
  local c0 c1
  c0=$(cap_of 0); c1=$(cap_of 1)
  note "published: gpu-0 memory $c0, gpu-1 memory $c1"
  [ -n "$c0" ] && [ -n "$c1" ] || return 1
  outside gq-out1 1 12g || return 1
  waitfor 10 '[ "$(cap_of 1)" != "$c1" ]'  || { echo "gpu-1 still offers $(cap_of 1) with 12g held outside Kubernetes"; return 1; }
  note "with 12 GiB held by a ctr container on GPU 1: gpu-1 memory $(cap_of 1), gpu-0 $(cap_of 0)"
}
case_share() {
  claim_pod p1 8Gi && claim_pod p2 8Gi || return 1
  waitfor 90 running p1 || { KC describe pod p1 | tail -20; return 1; }
  waitfor 60 running p2 || { KC describe pod p2 | tail -20; return 1; }
  local a1 a2; a1=$(pod_claim_alloc p1); a2=$(pod_claim_alloc p2)
  note "p1 claim: $a1; p2 claim: $a2"
  has "$a1" "gpu-0 8Gi" && has "$a2" "gpu-0 8Gi" || return 1
  # what the container itself printed (its CRI log file): its limits and, after "grant0",
  # the live slice of its GPU from /run/gpu-quota/grant (entry 0's vram_bytes, byte 88)
  local l; waitfor 20 '[ -n "$(limits_of p1 c)" ]' || return 1
  l=$(printed p1 c)
  note "p1's container printed: $(grep -o '^gpus=[^ ]*' <<<"$l") grant0 $(limits_of p1 c)"
  has "$l" "GPU-00000000-0000-4000-8000-000000000000" && [ "$(limits_of p1 c)" = "$((8 * GIB))" ] || return 1
  ledger | grep -c '"claim' | sed 's/^/ledger claim fields: /'
}
case_pending() {
  claim_pod p3 8Gi || return 1
  sleep 8
  [ "$(phase p3)" = Pending ] || { echo "p3 is $(phase p3)"; return 1; }
  local n m; n=$(KC get pod p3 -o jsonpath='{.spec.nodeName}')
  m=$(KC get pod p3 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
  note "p3: Pending, nodeName '${n}', scheduler: $m"
  [ -z "$n" ] || { echo "p3 was bound to $n: the node, not the scheduler, would refuse"; return 1; }
  has "$m" "cannot allocate all claims"
}
case_release() {
  KC delete pod p1 --grace-period=1 >/dev/null || return 1
  waitfor 120 running p3 || { KC describe pod p3 | tail -20; return 1; }
  note "after p1's deletion p3 runs: $(pod_claim_alloc p3)"
}
case_forge() {
  local uid; uid=$(KC get resourceclaim -o jsonpath='{.items[0].metadata.uid}' | tr - _)
  cat <<EOF | KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: forge
  annotations: {gpu-quota.io/vram: "4g", gpu-quota.io/gpu: "0", vram: "4g"}
spec:
  runtimeClassName: gpu-quota
  restartPolicy: Never
  hostNetwork: true
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "cat /run/gpu-quota/limits 2>&1; ls /dev | grep nvidia; sleep 3600"]
    env:
    - {name: GPU_QUOTA_VRAM, value: "4g"}
    - {name: GPU_QUOTA_CLAIM_$uid, value: "0000000000000000000000000000000000000000000000000000000000000000"}
EOF
  local before; before=$(ledger | grep -c '"container_id"')
  waitfor 60 '[ -n "$(KC get pod forge -o jsonpath="{.status.containerStatuses[0].state.terminated}{.status.containerStatuses[0].state.waiting.message}{.status.containerStatuses[0].state.running}")" ]' || return 1
  sleep 3
  local st l; st=$(KC get pod forge -o jsonpath='{.status.phase} {.status.containerStatuses[0].state}')
  l=$(printed forge c)
  note "forge: $(cut -c1-400 <<<"$st")"
  [ -n "$l" ] && note "forge's container printed: $(tr '\n' ' ' <<<"$l" | cut -c1-200)"
  ! grep -q "container_id=" <<<"$l" || { echo "the forging pod has a slice"; return 1; }
  ! grep -q nvidia <<<"$l" || { echo "the forging pod has GPU nodes"; return 1; }
  [ "$(ledger | grep -c '"container_id"')" -eq "$before" ] || { echo "the ledger changed"; ledger; return 1; }
  grep -q "gpu-quota:" <<<"$st" || { echo "no gpu-quota refusal in the pod's status"; return 1; }
  KC delete pod forge --grace-period=0 --force >/dev/null 2>&1; true
}
case_fragment() {
  KC delete pod p2 p3 --grace-period=1 >/dev/null; outside_rm gq-out1
  waitfor 60 '[ -z "$(KC get pods -o name)" ]'  || return 1
  outside gq-out2 0 10g && outside gq-out3 1 10g || return 1
  waitfor 10 '[ "$(cap_of 0)" != 16Gi ]'  || return 1
  note "10 GiB held outside on each GPU: gpu-0 $(cap_of 0), gpu-1 $(cap_of 1)"
  claim_pod p5 8Gi || return 1
  sleep 8
  [ "$(phase p5)" = Pending ] && [ -z "$(KC get pod p5 -o jsonpath='{.spec.nodeName}')" ] || { echo "p5: $(phase p5) on '$(KC get pod p5 -o jsonpath='{.spec.nodeName}')'"; return 1; }
  note "p5 (8Gi): Pending: $(KC get pod p5 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
  claim_pod p6 6Gi || return 1
  waitfor 90 running p6 || { KC describe pod p6 | tail -20; return 1; }
  note "p6 (6Gi) runs: $(pod_claim_alloc p6)"
}
# ---------------------------------------------------------------- a living cluster
reset_pods() {  # no pod and no container outside Kubernetes left
  KC delete pods --all --grace-period=1 >/dev/null 2>&1
  local o; for o in gq-out1 gq-out2 gq-out3; do outside_rm "$o" >/dev/null 2>&1; done
  waitfor 60 '[ -z "$(KC get pods -o name)" ]'
}
slice_uid() { KC get resourceslices -o jsonpath='{.items[*].metadata.uid}'; }
gone_seen() { grep -c "is gone from the API server" "$LOG/dra.log"; }
case_slices_deleted() {  # deleted by hand: published again within seconds
  reset_pods || return 1
  # the offer settled first (both GPUs whole again, then two polls more): a
  # slice written because the offer changed would hide a driver that never
  # notices a deletion (run 1 of 2026-12-02 passed that way)
  waitfor 20 '[ "$(cap_of 0)" = 16Gi ] && [ "$(cap_of 1)" = 16Gi ]' || { echo "offer: $(cap_of 0) $(cap_of 1)"; return 1; }
  sleep 2
  local uid gone; uid=$(slice_uid); gone=$(gone_seen)
  KC delete resourceslices --all >/dev/null || return 1
  local t0=$SECONDS
  waitfor 15 '[ -n "$(cap_of 0)" ]' || { echo "no slice 15 s after the deletion"; tail -5 "$LOG/dra.log"; return 1; }
  note "deleted by hand: published again after $((SECONDS - t0)) s (gpu-0 $(cap_of 0), gpu-1 $(cap_of 1)); uid $uid -> $(slice_uid)"
  [ "$(slice_uid)" != "$uid" ] || { echo "the slice was not deleted"; return 1; }
  [ "$(gone_seen)" -gt "$gone" ] || { echo "the driver did not see the deletion: its log"; tail -5 "$LOG/dra.log"; return 1; }
  grep "is gone from the API server" "$LOG/dra.log" | tail -1 | cut -c1-200
}
case_kubelet_restart() {  # claim pods keep running; the wiped slice comes back; a new pod schedules
  claim_pod k1 4Gi && claim_pod k2 4Gi || return 1
  waitfor 90 running k1 && waitfor 60 running k2 || { KC describe pod k2 | tail -20; return 1; }
  local regs uid gone; regs=$(grep -c "registered with the kubelet" "$LOG/dra.log"); uid=$(slice_uid); gone=$(gone_seen)
  kill -TERM "$KUBELET_PID"; wait "$KUBELET_PID" 2>/dev/null
  kubelet_start
  local t0=$SECONDS
  waitfor 30 '[ "$(grep -c "registered with the kubelet" "$LOG/dra.log")" -gt "$regs" ]' || { echo "not registered again"; return 1; }
  waitfor 20 '[ -n "$(cap_of 0)" ]' || { echo "no slice 20 s after the kubelet's restart"; return 1; }
  note "kubelet restarted: slice back after $((SECONDS - t0)) s; k1 $(phase k1), k2 $(phase k2)"
  # the kubelet wipes its node's slices at startup: a new slice, published by the driver
  note "slice uid $uid -> $(slice_uid); the driver logged its absence $(( $(gone_seen) - gone )) time(s)"
  running k1 && running k2 || return 1
  claim_pod k3 4Gi || return 1
  waitfor 60 running k3 || { KC describe pod k3 | tail -20; return 1; }
  note "a new 4Gi pod after the restart runs: $(pod_claim_alloc k3)"
}
shared_pod() {  # NAME CLAIM-SOURCE CONTAINERS-YAML: a pod whose containers use claim "vram"
  cat <<EOF | KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  runtimeClassName: gpu-quota
  restartPolicy: Never
  hostNetwork: true
  automountServiceAccountToken: false
  tolerations: [{operator: Exists}]
  resourceClaims: [{name: vram, $2}]
$3
EOF
}
ctr_yaml() {  # NAME RESTART-POLICY SCRIPT: one container on claim "vram" printing its limits first
  echo "  - name: $1"
  echo "    image: $IMG"
  echo "    imagePullPolicy: Never"
  [ -n "$2" ] && echo "    restartPolicy: $2"
  echo "    command: [\"/bin/sh\", \"-c\", \"cat /run/gpu-quota/limits; echo grant0; od -An -tu8 -j88 -N8 /run/gpu-quota/grant; $3\"]"
  echo "    resources: {claims: [{name: vram}]}"
}
case_shared() {  # one claim, every consumer: two containers, sidecar + main, init + main, two pods
  reset_pods || return 1
  # the template vram-4gi (claim_pod makes it), then four pods on claims of their own, two on a named one
  claim_pod s-tpl 4Gi && KC delete pod s-tpl --grace-period=0 --force >/dev/null 2>&1
  local tpl='resourceClaimTemplateName: vram-4gi'
  shared_pod s-two "$tpl" "  containers:
$(ctr_yaml a "" "sleep 3600")
$(ctr_yaml b "" "sleep 3600")" || return 1
  shared_pod s-side "$tpl" "  initContainers:
$(ctr_yaml side Always "sleep 3600")
  containers:
$(ctr_yaml main "" "sleep 3600")" || return 1
  shared_pod s-init "$tpl" "  initContainers:
$(ctr_yaml init "" "true")
  containers:
$(ctr_yaml main "" "sleep 3600")" || return 1
  cat <<EOF | KC apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: named-4gi}
spec:
  devices:
    requests:
    - name: vram
      exactly:
        deviceClassName: vram.gpu-quota.io
        capacity: {requests: {memory: 4Gi}}
EOF
  shared_pod s-p1 "resourceClaimName: named-4gi" "  containers:
$(ctr_yaml c "" "sleep 3600")" || return 1
  shared_pod s-p2 "resourceClaimName: named-4gi" "  containers:
$(ctr_yaml c "" "sleep 3600")" || return 1
  local p bad=0
  for p in s-two s-side s-init s-p1 s-p2; do
    waitfor 90 running "$p" || { echo "$p: $(phase "$p")"; KC describe pod "$p" | tail -15; bad=1; }
  done
  [ $bad -eq 0 ] || return 1
  local want="$((4 * GIB))" pc
  for pc in s-two/a s-two/b s-side/side s-side/main s-init/init s-init/main s-p1/c s-p2/c; do
    waitfor 20 '[ -n "$(limits_of "${pc%/*}" "${pc#*/}")" ]'
    [ "$(limits_of "${pc%/*}" "${pc#*/}")" = "$want" ] || { echo "$pc: '$(limits_of "${pc%/*}" "${pc#*/}")', want $want"; bad=1; }
  done
  [ $bad -eq 0 ] || return 1
  note "two containers, sidecar + main, init + main and two pods on a named claim: every consumer runs with $want"
  # the node holds each claim once, whatever its number of consumers: four
  # claim reservations of 4 GiB (16 GiB), every live consumer bound to one of them
  local led; led=$(ledger | python3 -c '
import json,sys
rs=json.load(sys.stdin)["reservations"]
cl=[r for r in rs if r.get("claim")]
bd=[r for r in rs if r.get("bound_claim")]
print(len(cl), sum(s["bytes"] for r in cl for s in r["slices"]), len(bd), len({r["bound_claim"] for r in bd}))')
  read -r nclaims claimbytes nbound nboundto <<<"$led"
  note "ledger: $nclaims claim reservations holding $claimbytes bytes; $nbound containers bound to $nboundto of them"
  [ "$nclaims" = 4 ] && [ "$claimbytes" = $((16 * GIB)) ] && [ "$nboundto" = 4 ] && [ "$nbound" -ge 7 ] ||
    { echo "want 4 claims of 4 GiB, 7 or 8 live consumers bound to the 4"; return 1; }
  # a container of an unrelated pod presenting the claim is refused: case 5 (forge)
}
case_force_delete() {  # the replacement of a force-deleted pod runs within 15 s
  reset_pods || return 1
  outside gq-out1 1 12g || return 1   # gpu-1 offers 4Gi: f2 can only go where f1 is
  waitfor 10 '[ "$(cap_of 1)" = 4Gi ]' || { echo "gpu-1 offers $(cap_of 1)"; return 1; }
  claim_pod f1 12Gi && waitfor 90 running f1 || return 1
  claim_pod f2 12Gi || return 1
  sleep 3
  [ "$(phase f2)" = Pending ] || { echo "f2 is $(phase f2) before f1 is gone"; return 1; }
  KC delete pod f1 --grace-period=0 --force >/dev/null 2>&1
  local t0=$SECONDS
  waitfor 30 running f2 || { KC describe pod f2 | tail -15; return 1; }
  note "force-deleted f1 (12Gi): f2 (12Gi) ran after $((SECONDS - t0)) s"
  [ $((SECONDS - t0)) -le 15 ] || { grep "prepare" "$LOG/dra.log" | tail -3; return 1; }
}
case_below_context() {  # a claim below the context charge is rounded up to the smallest useful size
  reset_pods || return 1
  # the fake host configures no context_overhead: the built-in 616 MiB and one
  # 2 MiB allocation, rounded up to the 256Mi step, is the published minimum
  local min; min=$(slice_json | python3 -c '
import json,sys
for s in json.load(sys.stdin)["items"]:
    for dev in s["spec"].get("devices",[]):
        if dev["name"]=="gpu-0": print(dev["capacity"]["memory"]["requestPolicy"]["validRange"]["min"])')
  note "gpu-0's request minimum: $min"
  [ "$min" = 768Mi ] || { echo "want 768Mi (616Mi charge + 2Mi, rounded up to 256Mi)"; return 1; }
  claim_pod b1 256Mi || return 1
  waitfor 90 running b1 || { KC describe pod b1 | tail -15; return 1; }
  local a; a=$(pod_claim_alloc b1)
  waitfor 20 '[ -n "$(limits_of b1 c)" ]'
  note "a 256Mi claim: allocated $a, the container's slice $(limits_of b1 c) bytes"
  has "$a" " 768Mi" || return 1
  [ "$(limits_of b1 c)" = $((768 * 1024 * 1024)) ] || { echo "the container's slice is $(limits_of b1 c)"; return 1; }
}
case_sigterm() {
  reset_pods || return 1
  kill -TERM "$DRA_PID"; local rc=0; wait "$DRA_PID" || rc=$?; DRA_PID=""
  [ $rc -eq 0 ] || { echo "gpu-quota-dra exited $rc"; tail -5 "$LOG/dra.log"; return 1; }
  # the slice is left to the kubelet: it withdraws it once the driver has
  # not registered again within its grace period (30 s in 1.36)
  [ -n "$(KC get resourceslices -o name)" ] || { echo "the slice was deleted at stop"; return 1; }
  waitfor 60 '[ -z "$(KC get resourceslices -o name)" ]' || { echo "the kubelet did not withdraw the slice: $(KC get resourceslices -o name)"; return 1; }
  waitfor 10 '[ -z "$(ls /var/run/cdi)" ]'  || { echo "CDI files left: $(ls /var/run/cdi)"; return 1; }
  [ "$(ledger | grep -c '"container_id"')" = 0 ] || { ledger; return 1; }
}

check "control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler on loopback" control_plane || exit 1
check "node: fake GPU host, containerd 1.7 (CDI on) with gpu-quota in cluster mode, kubelet registered" node || exit 1
check "driver: gpu-quota-dra registered with the kubelet and published its ResourceSlice" driver || exit 1
check "1. capacity.memory per GPU; a container outside Kubernetes shrinks what is offered" case_slice
check "2. two pods with 8Gi claims share one 16 GiB GPU, each container gets exactly 8 GiB there" case_share
check "3. a third 8Gi pod is left Pending by the scheduler (never bound to the node)" case_pending
check "4. deleting one of the two lets the third run" case_release
check "5. a pod setting gpu-quota annotations, env requests and a forged claim variable gets nothing" case_forge
check "6. fragmentation: two GPUs offering 6 GiB each leave an 8Gi claim Pending; a 6Gi claim runs" case_fragment
check "9. slices deleted by hand are published again within 15 s" case_slices_deleted
check "10. a kubelet restart with claim pods running: the slice is back, the pods run, a new pod schedules" case_kubelet_restart
check "11. one claim, every consumer: two containers, sidecar + main, init + main, two pods on a named claim" case_shared
check "12. a force-deleted pod's replacement runs within 15 s" case_force_delete
check "13. a claim below the context charge is rounded up to the smallest claim that holds a context" case_below_context
source "$ROOT/tests/k8s/dra-compute.sh"
check "14. a claim of 8Gi and 25 % runs; its container (uid 1000) is an MPS client at that share; a root container on a compute claim is refused" case_compute_client
check "15. two claims of 50 % share one GPU (one split over smProcs 2); a third compute claim stays Pending" case_compute_pending
check "16. a claim without compute is kept off the GPU that serves shares, and runs there once they end" case_compute_kept_off
check "7. SIGTERM: the driver exits 0, claims unprepared, the slice left to the kubelet, which withdraws it" case_sigterm
health() {  # the kubelet watched the driver's device health without an error
  ! grep -q "Error receiving from WatchResources stream" "$LOG/kubelet.log" ||
    { grep "WatchResources" "$LOG/kubelet.log" | tail -3; return 1; }
}
check "8. the kubelet's DRA health stream (NodeWatchResources) is served: no error in its log" health
echo "== $PASS passed, $FAIL failed"
[ -n "$OUT" ] && echo "== $PASS passed, $FAIL failed" >>"$OUT"
[ "$FAIL" -eq 0 ]
