# The slice as a container sees it: section probe (nvidia-smi and the
# frameworks inside a vram=8g container) and section small (a slice too small
# for a CUDA context).
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

############################ probe: what a vram=8g container sees of its slice (nvidia-smi, JAX, CuPy, a DataLoader job), inventory from NVML ############################
sec "probe container vram=8g (NVML inventory, real ldcache and nodes)"
mkcfg h1 'reserve = "2g"' 'gpus = ["0"]' 'placement = "binpack"'
WA=""; [ -n "${GQ_BIN_DIRS:-}" ] && WA=" [with config driver.bin_dirs=[${GQ_BIN_DIRS//\"/}]]"
PROBE_PY="$PY /gq/work.py jax --gib 8 > /out/jax 2>&1; $PY /gq/work.py cupy --gib 8 > /out/cupy 2>&1;
    $PY /gq/work.py dl --gib 8 --each 3 --ready /out/dlready --hold /out/dlrelease --hold-secs 60 > /out/dl 2>&1;"
[ "${PROBE_LIGHT:-0}" = 1 ] && PROBE_PY="touch /out/dlready;"
if [ $OVERLAY_OK = 1 ] && want probe; then
  bundle p1 overlay vram=8g -- sh -c "nvidia-smi -L > /out/smiL 2>&1; nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader > /out/smiq 2>&1;
    cat /run/gpu-quota/limits > /out/limits; cat /etc/ld.so.preload > /out/preload; ls /run/gpu-quota/driver > /out/driver; ls /dev > /out/dev;
    $PROBE_PY touch /out/done"
  ctr h1 create --bundle $W/b/p1 p1 > $W/b/p1/create.out 2> $W/b/p1/create.err < /dev/null; r=$?
  echo "create rc=$r"; cat $W/b/p1/create.err; ledger h1; echo
  if [ $r = 0 ]; then
    ctr h1 start p1 < /dev/null
    if wait_for $W/b/p1/out/dlready 150; then
      sleep 1
      (cd $T && $PY $WORK usage --usage-file "$(ls -d $W/h1/state/containers/p1-* | head -1)/rw/usage" --hold $W/b/p1/out/dlrelease --hold-secs 5 > $T/p1usage)
      apps_mib 0 > $T/p1apps; cat $T/p1apps
      touch $W/b/p1/out/dlrelease
    fi
    wait_for $W/b/p1/out/done 60
    O=$W/b/p1/out
    echo "smiL: $(cat $O/smiL)"; echo "smiq: $(cat $O/smiq)"; cat $O/limits; echo "driver: $(tr '\n' ' ' < $O/driver)"
    if grep -q '^GPU 0: NVIDIA H200' $O/smiL && [ "$(grep -c '^GPU' $O/smiL)" = 1 ]; then res PASS "2#10" "no static inventory: vram=8g container starts, nvidia-smi -L inside lists the GPU$WA" "$(head -1 $O/smiL | cut -c1-60); NVML inventory, host ldcache, real nodes"
    else res FAIL "2#10" "nvidia-smi -L inside a vram=8g container" "$(head -3 $O/smiL | tr '\n' ' ')"; fi
    if grep -q '^8192 MiB' $O/smiq; then res PASS "4#2" "nvidia-smi inside shows the slice$WA" "$(cat $O/smiq)"; else res FAIL "4#2" "nvidia-smi inside shows the slice" "$(head -2 $O/smiq | tr '\n' ' ')"; fi
    if [ "${PROBE_LIGHT:-0}" = 1 ]; then :; elif rok $O/jax; then res PASS "4#2" "JAX inside preallocates 75% of the 8 GiB slice; beyond it RESOURCE_EXHAUSTED" "$(rget $O/jax '"bytes_limit=%d (%.3f of the slice)" % (d["bytes_limit"], d["ratio"])')"
    else res FAIL "4#2" "JAX inside (75% of slice, RESOURCE_EXHAUSTED)" "$(rjson $O/jax | cut -c1-300) $(tail -2 $O/jax | tr '\n' ' ' | cut -c1-300)"; fi
    if [ "${PROBE_LIGHT:-0}" = 1 ]; then :; elif rok $O/cupy; then res PASS "4#2" "CuPy inside sees the 8 GiB slice, pool fails beyond it" "$(rget $O/cupy 'd["total"]')"
    else res FAIL "4#2" "CuPy inside" "$(rjson $O/cupy | cut -c1-300) $(tail -2 $O/cupy | tr '\n' ' ' | cut -c1-300)"; fi
    UMAX=$(grep -o 'USAGE_MAX [0-9]*' $T/p1usage 2>/dev/null | cut -d' ' -f2)
    if [ "${PROBE_LIGHT:-0}" = 1 ]; then :; elif rok $O/dl; then res PASS "4#2" "DataLoader job, 4 spawn workers × 3 GiB under vram=8g: one budget" "$(rget $O/dl '"%d of 4 workers hold 3 GiB" % d["held_ok"]'); container usage file $((${UMAX:-0} >> 20)) MiB; host NVML sum $(awk -F, '{s+=$2} END {print s+0}' $T/p1apps) MiB over $(wc -l < $T/p1apps) procs"
    else res FAIL "4#2" "DataLoader job within one budget" "$(rjson $O/dl | cut -c1-400) $(tail -3 $O/dl | tr '\n' ' ' | cut -c1-300)"; fi
  else
    res FAIL "2#10" "create of a vram=8g container" "$(tr '\n' ' ' < $W/b/p1/create.err | cut -c1-400)"
  fi
  ctr h1 delete --force p1 < /dev/null; clog p1
  echo "ledger after delete: $(ledger h1)"
else res SKIP "2#10" "probe container" "no rootfs, or not in SECTIONS"; fi

############################ small: a slice below one CUDA context ############################
sec "small: vram=512m, before and after this host measured its context"
if [ $OVERLAY_OK = 1 ] && want small; then
  # a fresh ledger directory: nothing measured, so the first 512m container is
  # admitted (its hook measures the context) and its first CUDA call gets the
  # one line; the second is refused at admission with the measured figure
  mkcfg hs 'reserve = "2g"' 'gpus = ["0"]'
  SMALL_PY="$PY -c 'import cupy; cupy.zeros(1)' > /out/small 2>&1; echo rc=\$? >> /out/small; touch /out/done"
  bundle s1 overlay vram=512m -- sh -c "$SMALL_PY"
  ctr hs create --bundle $W/b/s1 s1 > $W/b/s1/create.out 2> $W/b/s1/create.err < /dev/null; r=$?
  [ $r = 0 ] && ctr hs start s1 < /dev/null
  O=$W/b/s1/out; wait_for $O/done 90; echo "create rc=$r"; cat $W/b/s1/create.err; tail -4 $O/small 2>/dev/null
  if grep -q "gpu-quota: this container's slice (512.00 MiB on GPU 0) cannot hold a CUDA context" $O/small 2>/dev/null && ! grep -q 'rc=0' $O/small; then
    res PASS "26#4" "vram=512m, context cost not yet known: admitted; CuPy's first CUDA call fails with the one gpu-quota line" "$(grep '^gpu-quota:' $O/small | head -1 | cut -c1-200)"
  else res FAIL "26#4" "vram=512m, unknown context cost: the first CUDA call names the quota" "rc=$r $(tail -3 $O/small 2>/dev/null | tr '\n' ' ' | cut -c1-300)"; fi
  ctr hs delete --force s1 < /dev/null 2>&1; clog s1
  echo "context-cost.json: $(tr -d ' \n' < $W/hs/ledger/context-cost.json 2>/dev/null | cut -c1-300)"
  bundle s2 overlay vram=512m -- sh -c "touch /out/done"
  ctr hs create --bundle $W/b/s2 s2 > $W/b/s2/create.out 2> $W/b/s2/create.err < /dev/null; r=$?
  cat $W/b/s2/create.err
  if [ $r != 0 ] && grep -q "cannot hold a CUDA context" $W/b/s2/create.err && grep -q "measured on this host" $W/b/s2/create.err && [ "$(nres hs)" = 0 ]; then
    res PASS "26#4" "vram=512m after the host measured its context: refused before runc, naming the charge and the smallest useful slice" "$(grep -o 'charged [0-9.]* MiB[^;]*; ask[^)]*)' $W/b/s2/create.err | head -1 | cut -c1-200)"
  else res FAIL "26#4" "vram=512m refused at admission once the context cost is measured" "rc=$r $(tr '\n' ' ' < $W/b/s2/create.err | cut -c1-300)"; fi
  ctr hs delete --force s2 < /dev/null 2>/dev/null; clog s2
else res SKIP "26#4" "small slices" "no rootfs, or not in SECTIONS"; fi
