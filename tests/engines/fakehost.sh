# fake_gpu_host DIR BIN [CDI_DIR]: the engine suites' fake GPU host under DIR,
# shared by tests/engines/run.sh and tests/k8s/dra-real.sh (sourced):
# device nodes made with mknod (195:0, 195:1, nvidiactl, nvidia-uvm, -tools),
# stand-in driver libraries, and DIR/config.toml, a gpu-quota configuration
# with the hook and interceptor from BIN and two simulated 16 GiB GPUs
# (static inventory); CDI_DIR sets `cdi_dir` (DRA claims' CDI specs). Compute
# shares (sm=) use the fake MPS control daemon of tests/fake (built by the
# caller with `make -C tests/fake`).
FAKEHOST_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fake_gpu_host() {
  local g=$1 bin=$2 cdi=""
  [ -n "${3:-}" ] && cdi="cdi_dir = \"$3\""
  mkdir -p "$g"/{dev,lib,bin,ledger,state} || return 1
  mknod -m 666 "$g/dev/nvidia0" c 195 0 && mknod -m 666 "$g/dev/nvidia1" c 195 1 &&
    mknod -m 666 "$g/dev/nvidiactl" c 195 255 && mknod -m 666 "$g/dev/nvidia-uvm" c 237 0 &&
    mknod -m 666 "$g/dev/nvidia-uvm-tools" c 237 1 || return 1
  echo "fake libcuda" >"$g/lib/libcuda.so.580.1"; ln -s libcuda.so.580.1 "$g/lib/libcuda.so.1"
  echo "fake nvml" >"$g/lib/libnvidia-ml.so.580.1"; ln -s libnvidia-ml.so.580.1 "$g/lib/libnvidia-ml.so.1"
  cat >"$g/config.toml" <<EOT
# gpu-quota configuration of the engine suite's fake host
ledger_dir = "$g/ledger"
state_dir = "$g/state"
log_file = "$g/gq.log"
interceptor = "$bin/libgpuquota.so"
hook = "$bin/gpu-quota-hook"
create_grace_secs = 5
mps_control = "$FAKEHOST_REPO/tests/fake/build/nvidia-cuda-mps-control"
$cdi

[driver]
dev_root = "$g/dev"
lib_dirs = ["$g/lib"]
bin_dirs = ["$g/bin"]

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
EOT
}
