# The interceptor without a container (LD_PRELOAD on the host, GPU 0):
# section standalone (PyTorch under three allocators, JAX, CuPy, contexts,
# nvidia-smi) and section mp (4 processes sharing one budget).
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

############################ standalone: the interceptor preloaded on the host, no container, GPU 0 ############################
sec "standalone interceptor (LD_PRELOAD) on GPU 0"
export CUDA_VISIBLE_DEVICES=0
i=0
want standalone && for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
  i=$((i + 1))
  env ${conf:+PYTORCH_CUDA_ALLOC_CONF=$conf} GPU_QUOTA_VRAM=4g LD_PRELOAD=$SO timeout 120 $PY $WORK torch --gib 4 > $T/torch$i 2>&1
  if rok $T/torch$i; then res PASS "3#5" "PyTorch vram=4g ${conf:-default allocator}: total 4 GiB, 3 GiB fits, 2 GiB more -> OutOfMemoryError" "$(rget $T/torch$i '(d["total"], d["err"][:90])')"
  else res FAIL "3#5" "PyTorch vram=4g ${conf:-default}" "$(rjson $T/torch$i | cut -c1-300) $(grep -v '^RESULT' $T/torch$i | tail -3 | tr '\n' ' ' | cut -c1-300)"; fi
done
if want standalone; then
GPU_QUOTA_VRAM=4g LD_PRELOAD=$SO timeout 120 $PY $WORK jax --gib 4 > $T/jax 2>&1
if rok $T/jax; then res PASS "3#6" "JAX vram=4g: preallocation 75% of the slice, beyond -> RESOURCE_EXHAUSTED" "$(rget $T/jax '(d["bytes_limit"], round(d["ratio"],3), d["err"][:100])')"
else res FAIL "3#6" "JAX standalone" "$(rjson $T/jax | cut -c1-300) $(grep -v '^RESULT' $T/jax | tail -3 | tr '\n' ' ' | cut -c1-300)"; fi
GPU_QUOTA_VRAM=4g LD_PRELOAD=$SO timeout 120 $PY $WORK cupy --gib 4 > $T/cupy 2>&1
if rok $T/cupy; then res PASS "3#6" "CuPy vram=4g: memGetInfo shows the slice, pool fails beyond" "$(rget $T/cupy '(d["total"], d["err"][:100])')"
else res FAIL "3#6" "CuPy standalone" "$(rjson $T/cupy | cut -c1-300) $(grep -v '^RESULT' $T/cupy | tail -3 | tr '\n' ' ' | cut -c1-300)"; fi
# a program that makes contexts of its own (cuCtxCreate, 64 MiB in each) until refused: every
# context is charged what it costs, so NVML stays within the slice (the container form: 9#contexts)
GPU_QUOTA_VRAM=4g LD_PRELOAD=$SO timeout 90 $PY $I9 worker contexts --ready $T/ctxs.r --hold $T/ctxs.h > $T/ctxs 2>&1 &
CXP=$!
if wait_for $T/ctxs.r 60; then sleep 0.3; CXPID=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' $T/ctxs.r 2>/dev/null)
  CXM=$(apps_mib 0 | awk -F, -v p="$CXPID" '$1+0==p {print $2+0}'); fi
touch $T/ctxs.h; wait $CXP
CXR=$(cat $T/ctxs.r 2>/dev/null | cut -c1-300)
if [ -n "$CXM" ] && [ "$CXM" -le $((4096 * 101 / 100)) ] && grep -q '"refused": "cu' $T/ctxs.r 2>/dev/null; then
  res PASS "28#ctx" "host preload, vram=4g: a program making contexts (64 MiB each) until refused stays within the slice" "NVML ${CXM} MiB <= $((4096 * 101 / 100)); $CXR; $(grep gpu-quota $T/ctxs | head -1 | cut -c1-200)"
else res FAIL "28#ctx" "host preload, vram=4g: contexts until refused within slice + 1%" "NVML ${CXM:-?} MiB; $CXR; $(tail -3 $T/ctxs | tr '\n' ' ' | cut -c1-300)"; fi
SMI=$(GPU_QUOTA_VRAM=4g LD_PRELOAD=$SO nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader -i 0 2>&1)
if echo "$SMI" | grep -q '^4096 MiB'; then res PASS "3#7" "nvidia-smi under the preload shows the slice" "$SMI"; else res FAIL "3#7" "nvidia-smi under preload" "$SMI"; fi
fi
if want mp; then
sec "4 processes × 3 GiB under vram=8g (shared usage file)"
# context size NVML reports for one bare torch process (no preload)
timeout 60 $PY $WORK ctx --ready $T/ctxr --hold $T/ctxh --hold-secs 40 > $T/ctx 2>&1 &
CTXP=$!
wait_for $T/ctxr 40; CTXPID=$(cat $T/ctxr 2>/dev/null); CTX=$(apps_mib 0 | awk -F, -v p="$CTXPID" '$1+0==p {print $2+0}'); touch $T/ctxh; wait $CTXP
echo "bare torch context: ${CTX:-?} MiB"
U=$T/usage8
GPU_QUOTA_VRAM=8g GPU_QUOTA_USAGE_FILE=$U LD_PRELOAD=$SO timeout 150 $PY $WORK mp --gib 8 --each 3 --ready $T/r8 --hold $T/h8 --hold-secs 60 > $T/mp 2>&1 &
MPP=$!
(cd $T && timeout 100 $PY $WORK usage --usage-file $U --hold $T/h8 --hold-secs 90 > $T/u8 2>&1) &
UPP=$!
wait_for $T/r8 90; sleep 1
apps_mib 0 > $T/apps8; SUM8=$(awk -F, '{s+=$2} END {print s+0}' $T/apps8); NP8=$(wc -l < $T/apps8)
SMI8=$(GPU_QUOTA_VRAM=8g GPU_QUOTA_USAGE_FILE=$U LD_PRELOAD=$SO nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader -i 0 2>&1)
touch $T/h8; wait $MPP; wait $UPP
cat $T/apps8; echo "nvidia-smi under the same budget: $SMI8"
UMAX8=$(grep -o 'USAGE_MAX [0-9]*' $T/u8 | cut -d' ' -f2); TOL=$(( NP8 * ${CTX:-600} * 11 / 10 ))
fig="$(rget $T/mp 'd["held_ok"]') of 4 hold 3 GiB; max charged (usage file, sampled 20 ms) $((${UMAX8:-0} >> 20)) MiB; host NVML sum over $NP8 procs $SUM8 MiB <= 8192 + ${NP8}×ctx(${CTX:-?} MiB)+10% = $((8192 + TOL)) MiB; nvidia-smi under the budget: $SMI8"
if rok $T/mp && [ "${UMAX8:-99999999999}" -le $((8 * GIB)) ] && [ "$SUM8" -le $((8192 + TOL)) ]; then res PASS "3#8" "4 processes × 3 GiB under vram=8g" "$fig"
else res FAIL "3#8" "4 processes × 3 GiB under vram=8g" "$fig; $(grep worker $T/mp | tr '\n' ' ' | cut -c1-400)"; fi
fi
