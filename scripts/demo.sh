#!/usr/bin/env bash
# `make demo`: build gpu-quota and run real runc containers with GPU slices.
# On a host with an NVIDIA driver it uses NVML, the real loader cache and
# device nodes; elsewhere a SIMULATED host (two 16 GiB GPUs: mknod'd nodes,
# the fake driver from tests/fake) — labelled as such everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
[ "$(id -u)" = 0 ] || { echo "the demo creates containers and device nodes: run it as root (sudo make demo)"; exit 1; }
need=()
for p in runc:runc busybox:busybox-static cc:gcc make:make; do command -v "${p%%:*}" >/dev/null || need+=("${p##*:}"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
echo "== building what the demo runs (make build-demo; the first build compiles every dependency: about 2 minutes on 2 cores)"
make -s build-demo CARGO_Q=
make -s -C tests/fake

D=$(mktemp -d /tmp/gpu-quota-demo.XXXXXX)
R="$ROOT/target/demo"
RUNC_ROOT="$D/runc-root"
cleanup() {
  for id in $(runc --root "$RUNC_ROOT" list -q 2>/dev/null); do "$R/gpu-quota-runtime" --root "$RUNC_ROOT" delete --force "$id" >/dev/null 2>&1 || true; done
  rm -rf "$D"
}
trap cleanup EXIT
export GPU_QUOTA_CONFIG="$D/config.toml"

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  MODE=real
  cat > "$GPU_QUOTA_CONFIG" <<EOT
ledger_dir = "$D/ledger"
state_dir = "$D/state"
hook = "$R/gpu-quota-hook"
interceptor = "$R/libgpuquota.so"
runc = "$(command -v runc)"
EOT
  CENV=""
else
  MODE=simulated
  mkdir -p "$D/dev" "$D/bin"
  mknod "$D/dev/nvidia0" c 195 0; mknod "$D/dev/nvidia1" c 195 1
  mknod "$D/dev/nvidiactl" c 195 255; mknod "$D/dev/nvidia-uvm" c 237 0
  cp tests/fake/build/nvidia-smi "$D/bin/nvidia-smi"   # a static stand-in
  cat > "$GPU_QUOTA_CONFIG" <<EOT
ledger_dir = "$D/ledger"
state_dir = "$D/state"
hook = "$R/gpu-quota-hook"
interceptor = "$R/libgpuquota.so"
runc = "$(command -v runc)"
[driver]
dev_root = "$D/dev"
lib_dirs = ["$ROOT/tests/fake/build"]
bin_dirs = ["$D/bin"]
[[inventory.gpu]]
index = 0
uuid = "GPU-face3344-5566-7788-99aa-bbccddeeff00"
name = "Simulated GPU"
memory = "16g"
[[inventory.gpu]]
index = 1
uuid = "GPU-face3344-5566-7788-99aa-bbccddeeff01"
name = "Simulated GPU"
memory = "16g"
EOT
  CENV='"FAKE_CUDA_MEM_BYTES=17179869184",'
fi
echo "== host: $MODE GPUs"
"$R/gpu-quota" doctor

# A small glibc image: busybox, a CUDA probe program and the libraries it
# needs — no NVIDIA library: the hook injects the driver's.
mkbundle() { # NAME ANNOTATIONS_JSON SCRIPT
  local b="$D/bundles/$1" rootfs="$D/bundles/$1/rootfs"
  mkdir -p "$rootfs/bin" "$rootfs/tmp"
  cp "$(command -v busybox)" "$rootfs/bin/busybox"
  for a in sh cat grep sleep ls sed od; do ln -sf busybox "$rootfs/bin/$a"; done
  cp "$D/cuda_probe" "$rootfs/bin/cuda_probe"
  for l in $(ldd "$D/cuda_probe" "$R/libgpuquota.so" | grep -v ":$" | grep -o "/[^ ]*" | sort -u); do
    mkdir -p "$rootfs$(dirname "$l")"; cp -L "$l" "$rootfs$l"
  done
  cat > "$b/config.json" <<EOT
{"ociVersion":"1.0.2-dev","annotations":$2,
 "process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["sh","-c","$3"],"env":[$CENV"PATH=/usr/bin:/bin"],"cwd":"/",
  "capabilities":{"bounding":["CAP_KILL"],"effective":["CAP_KILL"],"permitted":["CAP_KILL"]},"noNewPrivileges":true},
 "root":{"path":"rootfs"},"hostname":"demo",
 "mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs","options":["nosuid","mode=755"]}],
 "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"},{"type":"ipc"},{"type":"uts"}]}}
EOT
  echo "$b"
}
cc -O2 -o "$D/cuda_probe" tests/e2e/cuda_probe.c -ldl
rt() { "$R/gpu-quota-runtime" --root "$RUNC_ROOT" "$@"; }

echo; echo "== 1. a container with vram=4g: CUDA sees 4 GiB, 3 GiB fit, 2 GiB more is refused"
echo "   (inside the container; GiB = 2^30 bytes)"
# the script runs as sh -c inside config.json: no double quotes in it
B=$(mkbundle probe '{"vram":"4g"}' 'v=$(od -An -tu8 -j88 -N8 /run/gpu-quota/grant); v=$((v)); echo grant file /run/gpu-quota/grant, written by gpu-quota-hook and read-only here: $v bytes on GPU 0, that is $((v >> 30)) GiB; echo nvidia-smi -L:; nvidia-smi -L | sed s/^/__/; echo cuMemGetInfo through the interceptor, total and free bytes:; cuda_probe info | sed s/^/__/; echo cuMemAlloc of 3 GiB, then 2 GiB more, rc 0 = success, rc 2 = CUDA_ERROR_OUT_OF_MEMORY:; cuda_probe alloc 3 2 2>&1 | sed s/^/__/')
OUT1=$(cd "$B" && rt run demo-probe 2>&1)
sed 's/^__/      /; s/^/   /' <<<"$OUT1"
# the demo shows what it claims, or says it does not
for want in "total=4294967296" "alloc 3 GiB rc=0" "alloc 2 GiB rc=2"; do
  grep -qF "$want" <<<"$OUT1" || { echo "demo: step 1 did not show '$want' (see above)" >&2; exit 1; }
done
echo; echo "== 2. two containers take half of GPU 0 each (vram=50%, gpu=0); gpu-quota ls shows the ledger"
for i in 1 2; do
  B=$(mkbundle half$i '{"vram":"50%","gpu":"0"}' 'sleep 600')
  rt create --bundle "$B" demo-half$i >/dev/null 2>&1 && rt start demo-half$i && echo "demo-half$i started"
done
"$R/gpu-quota" ls

echo; echo "== 3. a third one on GPU 0 does not fit: refused before it starts"
B=$(mkbundle half3 '{"vram":"50%","gpu":"0"}' 'sleep 600')
rt create --bundle "$B" demo-half3 >/dev/null || echo "(refused, as expected)"

echo; echo "== 4. deleting the containers releases their slices"
for i in 1 2; do rt delete --force demo-half$i; done
"$R/gpu-quota" ls
echo; echo "demo finished ($MODE GPUs)"
