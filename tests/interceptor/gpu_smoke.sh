#!/usr/bin/env bash
# Smoke test of libgpuquota.so on a real NVIDIA machine (H200: libcuda 580 /
# CUDA 13). Needs only artifacts built elsewhere:
#   SO=path/to/libgpuquota.so BENCH=path/to/bench_alloc bash tests/interceptor/gpu_smoke.sh
# Uses the real driver from the ldcache (never put tests/fake/build on
# LD_LIBRARY_PATH here). Prints one "ok"/"FAIL" line per check and a final
# "N passed, M failed". Python parts are skipped when torch/jax are missing.
set -u
SO="${SO:-interceptor/target/release/libgpuquota.so}"; SO="$(readlink -f "$SO")"
BENCH="${BENCH:-tests/fake/build/bench_alloc}"
pass=0; fail=0
res() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok   $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }
T=$(mktemp -d)
echo "== machine"; nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader; ldconfig -p | grep -m1 'libcuda.so.1'
echo "== ELF"; readelf -d "$SO" | grep NEEDED; objdump -T "$SO" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tr '\n' ' '; echo
echo "== preload into plain processes"
LD_PRELOAD="$SO" /bin/true && LD_PRELOAD="$SO" sh -c 'ls / >/dev/null'; res $? "non-CUDA processes"
echo "== bench (1 MiB alloc+free pairs)"
"$BENCH" 20000 1048576 1 | tee "$T/native"
GPU_QUOTA_VRAM=64g LD_PRELOAD="$SO" "$BENCH" 20000 1048576 1 | tee "$T/pre"
GPU_QUOTA_VRAM=64g BENCH_GPA=1 GPU_QUOTA_DEBUG=1 LD_PRELOAD="$SO" "$BENCH" 20000 1048576 1 2>"$T/gpa.dbg" | tee "$T/pregpa"
cat "$T/gpa.dbg"
grep -q 'mode=libgpuquota' "$T/pre"; res $? "dlsym path wrapped on the real driver"
grep -q 'mode=libgpuquota+gpa' "$T/pregpa"; res $? "cuGetProcAddress path wrapped on the real driver"
grep -q 'total=68719476736' "$T/pregpa"; res $? "cuMemGetInfo total = slice (64 GiB)"
GPU_QUOTA_VRAM=64g LD_PRELOAD="$SO" "$BENCH" 5000 1048576 4 | tail -1
echo "== nvidia-smi"
GPU_QUOTA_VRAM=4g LD_PRELOAD="$SO" nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv,noheader | tee "$T/smi"
grep -q '^4096 MiB' "$T/smi"; res $? "nvidia-smi shows the 4 GiB slice"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== torch"
  cat >"$T/t.py" <<'PY'
import sys, torch
free, total = torch.cuda.mem_get_info()
print("mem_get_info", free, total)
assert total == 4 << 30, total
a = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
try:
    b = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    print("second allocation was NOT refused"); sys.exit(1)
except torch.OutOfMemoryError as e:
    print("refused as expected")
del a
torch.cuda.empty_cache()
b = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
print("torch ok")
PY
  GPU_QUOTA_DEBUG=1 GPU_QUOTA_VRAM=4g LD_PRELOAD="$SO" python3 "$T/t.py" 2>"$T/torch.err"; r=$?
  grep -E 'gpu-quota: |cuMem|dlsym cuGetProc|cuGetProcAddress cuGetProc' "$T/torch.err" | head -30
  res $r "torch sees and respects a 4 GiB slice"
  GPU_QUOTA_VRAM=4g PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_PRELOAD="$SO" python3 "$T/t.py" 2>"$T/torch2.err"; r=$?
  grep 'gpu-quota: ' "$T/torch2.err" | head -3
  res $r "torch with expandable_segments (VMM) respects the slice"
  echo "== shared budget across processes, kill -9"
  export GPU_QUOTA_VRAM=4g GPU_QUOTA_USAGE_FILE="$T/usage"
  LD_PRELOAD="$SO" python3 -c '
import torch, time, pathlib, sys
a = torch.empty(3 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
pathlib.Path(sys.argv[1]).touch(); time.sleep(120)' "$T/held" &
  hp=$!
  for i in $(seq 300); do [ -e "$T/held" ] && break; sleep 0.1; done
  LD_PRELOAD="$SO" python3 -c '
import torch, sys
f, t = torch.cuda.mem_get_info(); print("second process sees", f, t)
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); sys.exit(1)
except torch.OutOfMemoryError:
    print("second process refused as expected")' 2>&1 | grep -v '^gpu-quota'; res ${PIPESTATUS[0]} "two processes share one 4 GiB budget"
  kill -9 $hp; wait $hp 2>/dev/null
  LD_PRELOAD="$SO" python3 -c '
import torch
f, t = torch.cuda.mem_get_info(); print("after kill -9", f, t); assert f == t == 4 << 30
torch.empty(3 << 30, dtype=torch.uint8, device="cuda"); print("ok")'; res $? "a SIGKILLed holder gives its 3 GiB back"
  unset GPU_QUOTA_VRAM GPU_QUOTA_USAGE_FILE
fi
if python3 -c 'import jax' 2>/dev/null; then
  echo "== jax"
  GPU_QUOTA_VRAM=4g LD_PRELOAD="$SO" python3 -c '
import jax, jax.numpy as jnp
d = jax.devices()[0]; s = d.memory_stats() or {}
print("bytes_limit", s.get("bytes_limit"))
x = jnp.ones((256, 1024, 1024), jnp.float32).block_until_ready()
assert s.get("bytes_limit", 0) <= 4 << 30, s.get("bytes_limit")
print("jax ok")' 2>&1 | grep -vE '^(W|I)[0-9]' | tail -5; res ${PIPESTATUS[0]} "jax preallocates within the slice"
fi
rm -rf "$T"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
