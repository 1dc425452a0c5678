#!/usr/bin/env bash
# The H200 GPU suite of gpu-quota: one command, run on the device machine as
# root from the repository root, after `make gpu-carry` here:
#   bash tests/gpu/run-suite.sh            (carry .gpu-carry)
# Writes $OUT/summary.md (one row per check), suite.log, containers.log,
# bench.txt. Nothing is built there. Single-GPU checks use GPU 0; the 2-GPU
# checks run when 2 GPUs are visible. Every step has a timeout; the suite
# skips the benchmarks it has no time left for (SUITE_BUDGET seconds, def. 540).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
C=$REPO/.gpu-carry; B=$C/bin; SO=$C/lib/libgpuquota.so
WORK=$REPO/tests/gpu/work.py; BUNDLE=$REPO/tests/gpu/bundle.py; I9=$REPO/tests/gpu/issue9.py
OUT=${OUT:-/tmp/gq-out}; mkdir -p "$OUT"
SUM=$OUT/summary.md; CLOG=$OUT/containers.log; BENCH=$OUT/bench.txt
BUDGET=${SUITE_BUDGET:-540}
exec > >(tee -a "$OUT/suite.log") 2>&1
PY=$(command -v python3)
GIB=1073741824
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
T=$(mktemp -d /tmp/gqt.XXXX)
PASS=0; FAIL=0; SKIP=0
sec() { echo; echo "== [t=${SECONDS}s] $*"; }
res() { # STATUS ID NAME FIGURES
  case $1 in PASS) PASS=$((PASS+1));; FAIL) FAIL=$((FAIL+1));; *) SKIP=$((SKIP+1));; esac
  echo "| $2 | $3 | **$1** | ${4//|//} |" >> "$SUM"; echo "[$1] $2 $3 — $4"; }
rjson() { grep '^RESULT ' "$1" 2>/dev/null | tail -1 | cut -c8-; }      # RESULT json of a work.py log
rok() { [ "$(rjson "$1" | $PY -c 'import json,sys; print(json.load(sys.stdin)["ok"])' 2>/dev/null)" = True ]; }
rget() { rjson "$1" | $PY -c "import json,sys; d=json.load(sys.stdin); print($2)" 2>/dev/null; }
wait_for() { local f=$1 s=$2 i; for ((i = 0; i < s * 10; i++)); do [ -e "$f" ] && return 0; sleep 0.1; done; return 1; }
left() { echo $((BUDGET - SECONDS)); }
# SECTIONS="probe small seed gpu2 standalone mp i9 resize mps graphs bench" is the default; mpsfault,
# mpslock, mpsuser, mpsshare and mpsbench run only when named (SECTIONS=graphs: the CUDA-graph
# checks alone, < 6 min).
# PROBE_LIGHT=1: probe runs only the nvidia-smi parts.
# I9_PROCS="1 4" I9_SCEN="fill vmm ..." narrow section i9 (what the driver keeps alive stays in
# the slice); AB_ROUNDS scales the A/B benchmarks (default 3).
# GQ_BIN_DIRS='"/usr/local/nvidia/bin", "/usr/bin"' puts [driver] bin_dirs in every config (workaround, see docs/gpu-evidence.md).
# GQ_EXTRA_CFG (printf %b) is appended to every config; I9_DRY=1 runs section i9's containers without CUDA
# (orchestration only: a CPU dry run with the fake driver, see docs/gpu-evidence.md).
want() { case " ${SECTIONS:-probe small seed gpu2 standalone mp i9 resize mps graphs bench} " in *" $1 "*) return 0;; esac; return 1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
apps_mib() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -i "${1:-0}" 2>/dev/null; }
sum_apps() { apps_mib "${1:-0}" | awk -F, '{s+=$2} END {print s+0}'; }
{ echo "# gpu-quota H200 suite — $(date -u +%FT%TZ)"; echo
  echo "| issue | check | result | figures |"; echo "| --- | --- | --- | --- |"; } > "$SUM"

sec "machine"
nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,driver_version --format=csv,noheader
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
DRV=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)
CUDAV=$(nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | head -1)
VERS=$($PY -c '
import importlib
out = []
for m in ("torch", "torchvision", "jax", "jaxlib", "cupy"):
    try: out.append(f"{m} {importlib.import_module(m).__version__}")
    except Exception as e: out.append(f"{m} missing")
print(", ".join(out))' 2>/dev/null)
TOTAL0_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
echo "NGPU=$NGPU driver=$DRV $CUDAV; $VERS; python $PY; kernel $(uname -r)"
echo "- machine: $NGPU × $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0) (${TOTAL0_MIB} MiB), driver $DRV, $CUDAV, kernel $(uname -r); $VERS" >> "$SUM.head"
ldconfig -p | grep -E 'libcuda.so.1|libnvidia-ml.so.1'; command -v nvidia-smi; findmnt -n / ; findmnt -n -T /usr/local/nvidia
for f in gpu-quota-runtime gpu-quota-hook runc busybox bench_alloc; do [ -x "$B/$f" ] || echo "MISSING $B/$f (run make gpu-carry here)"; done
LD_LIBRARY_PATH=$C/lib $B/runc --version | head -1
HOSTCUDA=$(readlink -f "$(ldconfig -p | awk '$1 == "libcuda.so.1" {print $NF; exit}')")
HOSTNVML=$(readlink -f "$(ldconfig -p | awk '$1 == "libnvidia-ml.so.1" {print $NF; exit}')")
UUID0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)

############################ containers: setup ############################
sec "container setup"
W=/tmp/gqw; mkdir -p $W; mount -t tmpfs -o size=32g tmpfs $W
printf '#!/bin/sh\nexport LD_LIBRARY_PATH=%s\nexec %s "$@"\n' "$C/lib" "$B/runc" > $W/runc; chmod +x $W/runc
mkcfg() { # NAME toml-lines...
  local n=$1; shift; mkdir -p $W/$n/ledger $W/$n/state $W/$n/root
  { echo "ledger_dir = \"$W/$n/ledger\""; echo "state_dir = \"$W/$n/state\""; echo "runc = \"$W/runc\""
    echo "hook = \"$B/gpu-quota-hook\""; echo "interceptor = \"$SO\""; printf '%s\n' "$@"
    [ -n "${GQ_BIN_DIRS:-}" ] && printf '[driver]\nbin_dirs = [%s]\n' "$GQ_BIN_DIRS"
    [ -n "${GQ_EXTRA_CFG:-}" ] && printf '%b\n' "$GQ_EXTRA_CFG"; } > $W/$n/config.toml; }
ctr() { local n=$1; shift; GPU_QUOTA_CONFIG=$W/$n/config.toml timeout 90 $B/gpu-quota-runtime --root $W/$n/root "$@"; }
plainrunc() { timeout 90 $W/runc --root $W/plain/root "$@"; }
mkdir -p $W/plain/root $W/b
# Python env and the suite's scripts as volumes: every mount under which python lives that is not /
PYBINDS=""
for d in $($PY -c 'import sys, os, torch; print(sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(torch.__file__)), os.path.realpath(sys.executable))'); do
  m=$(findmnt -n -o TARGET -T "$d"); [ "$m" != / ] && case " $PYBINDS " in *" --bind $m:$m:ro "*) ;; *) PYBINDS="$PYBINDS --bind $m:$m:ro";; esac
done
echo "python mounts to bind: ${PYBINDS:-none (python is on the root fs)}"
WHITEOUT=""
OVERLAY_OK=0
mkroot() { # DIR overlay|busybox
  local d=$1; mkdir -p $d
  if [ "$2" = overlay ]; then
    mkdir -p $d/upper $d/work $d/rootfs
    mount -t overlay overlay -o lowerdir=/,upperdir=$d/upper,workdir=$d/work $d/rootfs || return 1
    for f in $WHITEOUT; do rm -f "$d/rootfs/$f"; done
  else
    mkdir -p $d/rootfs/bin $d/rootfs/etc $d/rootfs/proc $d/rootfs/dev $d/rootfs/sys $d/rootfs/tmp
    cp $B/busybox $d/rootfs/bin/busybox
    for a in sh true ls cat sleep echo touch; do ln -sf busybox $d/rootfs/bin/$a; done
  fi; }
bundle() { # ID HOST KIND ANN... -- CMD (KIND overlay|busybox|plain-overlay|plain-busybox)
  local id=$1 kind=$2; shift 2; local anns=() extra=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do anns+=(--ann "$1"); shift; done; shift
  case $kind in plain-*) extra=(--plain-gpu 0); kind=${kind#plain-};; esac
  mkroot $W/b/$id $kind || return 1
  $PY $BUNDLE $W/b/$id --rootfs $W/b/$id/rootfs "${anns[@]}" "${extra[@]}" ${BUSER:+--user $BUSER} $PYBINDS --bind $REPO/tests/gpu:/gq:ro -- "$@"; }
clog() { { echo "----- $1"; for f in $W/b/$1/out/* $W/b/$1/*.err $W/b/$1/*.out; do [ -f "$f" ] && { echo "--- $(basename $f)"; head -c 3000 "$f"; echo; }; done; } >> "$CLOG" 2>/dev/null; }
ledger() { $PY $REPO/tests/ledger_view.py $W/$1/ledger 2>/dev/null; }
nres() { ledger $1 | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["reservations"]))' 2>/dev/null || echo 0; }
state_of() { ctr $1 state $2 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])' 2>/dev/null || echo gone; }

# overlay of / must work and must not reach the driver
mkroot $W/b/probe0 overlay && OVERLAY_OK=1
if [ $OVERLAY_OK = 1 ]; then
  R=$W/b/probe0/rootfs
  echo "rootfs check: /usr/local/nvidia in the overlay holds: [$(ls -A $R/usr/local/nvidia 2>&1 | head -5 | tr '\n' ' ')]"
  WHITEOUT=$(cd $R && timeout 120 find usr lib lib64 opt etc root -xdev \( -name 'libcuda.so*' -o -name 'libnvidia-ml.so*' -o -name 'libnvidia-ptxjitcompiler.so*' -o -name 'libcudadebugger.so*' -o -name 'libnvidia-nvvm.so*' \) 2>/dev/null | tr '\n' ' ')
  echo "driver-library names found in the overlay rootfs (whited out in every container rootfs): [${WHITEOUT}]"
  umount $R
  rm -rf $W/b/probe0
  # proof without gpu-quota: plain runc, same rootfs, no GPU -> libcuda.so.1 cannot load
  bundle nodrv overlay -- $PY -c 'import ctypes,sys
try: ctypes.CDLL("libcuda.so.1"); print("LIBCUDA LOADED"); sys.exit(1)
except OSError as e: print("no libcuda:", e)'
  plainrunc run --bundle $W/b/nodrv nodrv > $W/b/nodrv/run.out 2>&1; r=$?
  cat $W/b/nodrv/run.out
  if [ $r = 0 ] && grep -q 'no libcuda' $W/b/nodrv/run.out; then res PASS setup "rootfs (overlay of /) has no driver: libcuda.so.1 does not load under plain runc" "python runs in it; whiteouts: ${WHITEOUT:-none needed}"
  else res FAIL setup "rootfs without driver" "$(tail -3 $W/b/nodrv/run.out | tr '\n' ' ')"; OVERLAY_OK=0; fi
else
  res FAIL setup "overlayfs rootfs (lowerdir=/)" "mount failed; container python checks not run"
fi

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

############################ seed: admission until GPU 0 is full, then release on exit, SIGKILL and delete ############################
sec "seed: vram=24g containers on GPU 0 until full"
AVAIL=$((TOTAL0_MIB * 1048576 - 2 * GIB)); EXP=$((AVAIL / (24 * GIB)))
echo "GPU 0: ${TOTAL0_MIB} MiB, reserve 2g -> expect $EXP containers of 24g"
if [ $OVERLAY_OK = 1 ] && want seed; then
  TJOB="$PY /gq/work.py torch --gib 24 --ready /out/ready --hold /out/release --hold-secs 240 > /out/log 2>&1; echo \$? > /out/rc"
  ADM=(); REFMSG=""
  for i in $(seq 1 $((EXP + 1))); do
    bundle s$i overlay vram=24g -- sh -c "$TJOB"
    if ctr h1 create --bundle $W/b/s$i s$i > $W/b/s$i/create.out 2> $W/b/s$i/create.err < /dev/null; then ADM+=(s$i)
    else REFMSG=$(tr '\n' ' ' < $W/b/s$i/create.err); echo "s$i refused: $REFMSG"; umount $W/b/s$i/rootfs; break; fi
  done
  for id in "${ADM[@]}"; do ctr h1 start $id < /dev/null; done
  for id in "${ADM[@]}"; do wait_for $W/b/$id/out/ready 120 || echo "$id: no ready"; done
  sleep 1
  STATES=$(for id in "${ADM[@]}"; do echo -n "$id=$(state_of h1 $id) "; done); echo "states after all OOMs: $STATES"
  NGOOD=0; for id in "${ADM[@]}"; do grep -q '"refused": true' $W/b/$id/out/ready 2>/dev/null && grep -q "\"total\": $((24 * GIB))" $W/b/$id/out/ready && NGOOD=$((NGOOD + 1)); done
  NRUN=$(echo "$STATES" | grep -o '=running' | wc -l)
  USED0=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0)
  if [ ${#ADM[@]} = $EXP ] && [ -n "$REFMSG" ]; then res PASS "4#1" "$EXP × vram=24g admitted on GPU 0 (reserve 2g), the next refused" "refusal: ${REFMSG:0:260}"
  else res FAIL "4#1" "admission until full" "admitted ${#ADM[@]} (expected $EXP); refusal: ${REFMSG:0:300}"; fi
  if [ $NGOOD = ${#ADM[@]} ] && [ $NRUN = ${#ADM[@]} ]; then res PASS "4#1" "each admitted container's PyTorch job sees 24 GiB, gets OutOfMemoryError past it, all keep running" "$NGOOD/${#ADM[@]} ok, $NRUN running; GPU 0 used ${USED0} MiB (host)"
  else res FAIL "4#1" "PyTorch jobs in the admitted containers" "$NGOOD/${#ADM[@]} ok, $NRUN running: $STATES"; fi
  sec "release: normal exit and SIGKILL"
  touch $W/b/s1/out/release; wait_for $W/b/s1/out/rc 60; sleep 0.5
  echo "s1 rc=$(cat $W/b/s1/out/rc 2>/dev/null) state=$(state_of h1 s1); $(rjson $W/b/s1/out/log)"
  N1OK=0; bundle n1 overlay vram=24g -- sh -c "$TJOB"
  if ctr h1 create --bundle $W/b/n1 n1 > $W/b/n1/create.out 2> $W/b/n1/create.err < /dev/null; then ctr h1 start n1 < /dev/null; N1OK=1; else echo "n1 refused: $(cat $W/b/n1/create.err)"; fi
  ctr h1 kill s2 KILL < /dev/null; for k in $(seq 50); do [ "$(state_of h1 s2)" = stopped ] && break; sleep 0.1; done
  echo "s2 state after SIGKILL: $(state_of h1 s2)"
  N2OK=0; bundle n2 overlay vram=24g -- sh -c "$TJOB"
  if ctr h1 create --bundle $W/b/n2 n2 > $W/b/n2/create.out 2> $W/b/n2/create.err < /dev/null; then ctr h1 start n2 < /dev/null; N2OK=1; else echo "n2 refused: $(cat $W/b/n2/create.err)"; fi
  for id in n1 n2; do wait_for $W/b/$id/out/ready 120; done
  echo "ledger: $(ledger h1)"
  fig="normal exit (s1 rc $(cat $W/b/s1/out/rc 2>/dev/null)) -> n1 admitted=$N1OK job $(grep -o '"total": [0-9]*' $W/b/n1/out/ready 2>/dev/null); SIGKILL s2 -> n2 admitted=$N2OK job $(grep -o '"total": [0-9]*' $W/b/n2/out/ready 2>/dev/null); ledger holds $(nres h1)"
  if [ $N1OK = 1 ] && [ $N2OK = 1 ] && grep -q '"refused": true' $W/b/n1/out/ready $W/b/n2/out/ready 2>/dev/null && [ "$(grep -l '"refused": true' $W/b/n1/out/ready $W/b/n2/out/ready | wc -l)" = 2 ]; then res PASS "4#3" "slice returns on normal exit and on SIGKILL (no delete); new containers take it" "$fig"
  else res FAIL "4#3" "release on exit / SIGKILL" "$fig"; fi
  for id in "${ADM[@]}" n1 n2; do touch $W/b/$id/out/release; done
  sleep 2
  for id in "${ADM[@]}" n1 n2; do ctr h1 delete --force $id < /dev/null; clog $id; umount $W/b/$id/rootfs 2>/dev/null; done
  sleep 1
  if [ "$(nres h1)" = 0 ]; then res PASS "4#3" "delete of all containers empties the ledger" "GPU 0 used after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader -i 0)"
  else res FAIL "4#3" "ledger after delete" "$(ledger h1 | cut -c1-300)"; fi
else res SKIP "4#1" "seed" "no rootfs, or not in SECTIONS"; fi

############################ gpu2: placement over 2 GPUs (gpus=2, spread, pinned to a full GPU), multi-GPU jobs ############################
sec "2 GPUs"
if [ "$NGPU" -ge 2 ] && [ $OVERLAY_OK = 1 ] && want gpu2; then
  mkcfg h2 'reserve = "2g"' 'placement = "spread"'
  bundle g2 overlay vram=4g gpus=2 -- sh -c "nvidia-smi -L > /out/smiL 2>&1; cat /run/gpu-quota/limits > /out/limits; ls /dev > /out/dev; $PY /gq/work.py devices --gib 4 --n 2 > /out/devs 2>&1; touch /out/done"
  if ctr h2 create --bundle $W/b/g2 g2 > $W/b/g2/create.out 2> $W/b/g2/create.err < /dev/null; then
    ctr h2 start g2 < /dev/null; wait_for $W/b/g2/out/done 90
    L=$(ledger h2 | $PY -c 'import json,sys; print([s["index"] for r in json.load(sys.stdin)["reservations"] for s in r["slices"]])')
    if rok $W/b/g2/out/devs && [ "$(grep -c '^GPU' $W/b/g2/out/smiL)" = 2 ]; then res PASS "4#4" "gpus=2 vram=4g: both GPUs, a 4 GiB slice on each" "ledger GPUs $L; torch $(rget $W/b/g2/out/devs 'd["totals"]')"
    else res FAIL "4#4" "gpus=2 gets both GPUs with a slice each" "ledger $L; $(cat $W/b/g2/out/smiL | tr '\n' ' '); $(rjson $W/b/g2/out/devs) $(tail -2 $W/b/g2/out/devs | tr '\n' ' ' | cut -c1-300)"; fi
  else res FAIL "4#4" "gpus=2 create" "$(tr '\n' ' ' < $W/b/g2/create.err)"; fi
  ctr h2 delete --force g2 < /dev/null; clog g2
  for id in a1 a2; do bundle $id busybox vram=100g -- sleep 300; ctr h2 create --bundle $W/b/$id $id > $W/b/$id/create.out 2> $W/b/$id/create.err < /dev/null || echo "$id refused: $(cat $W/b/$id/create.err)"; done
  L=$(ledger h2 | $PY -c 'import json,sys; print(sorted(s["index"] for r in json.load(sys.stdin)["reservations"] for s in r["slices"]))')
  bundle a3 busybox vram=100g gpu=0 -- sleep 300
  ctr h2 create --bundle $W/b/a3 a3 > $W/b/a3/create.out 2> $W/b/a3/create.err < /dev/null; r3=$?; M3=$(tr '\n' ' ' < $W/b/a3/create.err)
  echo "spread ledger GPUs: $L; a3 rc=$r3: $M3"
  if [ "$L" = "[0, 1]" ]; then res PASS "4#4" "two vram=100g containers under spread land on different GPUs" "GPUs $L"; else res FAIL "4#4" "spread placement" "GPUs $L"; fi
  if [ $r3 != 0 ] && echo "$M3" | grep -q 'GPU 0'; then res PASS "4#4" "vram=100g pinned gpu=0 (full) refused, message names GPU 0" "${M3:0:260}"
  else res FAIL "4#4" "pinned to a full GPU refused naming it" "rc=$r3 ${M3:0:300}"; fi
  for id in a1 a2 a3; do ctr h2 delete --force $id < /dev/null; clog $id; done
  # NCCL all-reduce, tensor parallel, one rank past its slice, release (tests/gpu/multigpu.sh)
  . $REPO/tests/gpu/multigpu.sh
else res SKIP "4#4" "2-GPU placement" "NOT RUN: $NGPU GPU(s) visible"
  res SKIP "13" "NCCL and tensor-parallel jobs in one gpus=2 container (tests/gpu/multigpu.sh)" "not run: $NGPU GPU(s) visible"; fi

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

############################ i9: what the driver keeps alive stays in the slice ############################
if want i9 && [ $OVERLAY_OK = 1 ]; then
sec "issue 9: context cost, VMM, pools, context reset/destroy, exec, zombie, fork (1 and 4 processes per container)"
# the hook's measurement, run by hand on the host (the same child the hook starts)
timeout 30 env -i $B/gpu-quota-driver measure-context --cuda "$HOSTCUDA" --nvml "$HOSTNVML" --uuid "$UUID0" > $T/ctxm 2> $T/ctxm.err; r=$?
echo "measure-context rc=$r: $(cat $T/ctxm $T/ctxm.err)"
CTXM=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["context_bytes"] >> 20)' $T/ctxm 2>/dev/null)
if [ $r = 0 ] && [ -n "$CTXM" ]; then res PASS "9#ctx" "gpu-quota-driver measure-context on the real driver (cuInit, primary context, 2 MiB, NVML per-process)" "context ${CTXM} MiB; charge = +96 MiB margin = $((CTXM + 96)) MiB (rounded to 2 MiB); $(cut -c1-200 $T/ctxm)"
else res FAIL "9#ctx" "measure-context on the real driver" "rc=$r $(cat $T/ctxm.err | tr '\n' ' ' | cut -c1-300)"; fi
DET=$(grep -c 'nvmlDeviceSetMemoryLimits_v1' "$HOSTNVML" 2>/dev/null); CG2=$([ -f /sys/fs/cgroup/cgroup.controllers ] && echo yes || echo no)
res INFO "9#drv" "driver-enforced limits (nvmlDeviceSetMemoryLimits_v1, r615+)" "symbol name in $(basename "$HOSTNVML"): $([ "${DET:-0}" -gt 0 ] && echo present || echo absent) (driver $DRV); cgroup v2: $CG2 — on r580 the hook sets nothing (one file read, no child)"
$PY $I9 selftest > $T/i9self 2>&1 || res FAIL "9#judge" "issue9.py judge on synthetic results" "$(grep -v '^ok' $T/i9self | tr '\n' ' ' | cut -c1-300)"
mkcfg h9 'reserve = "2g"' 'gpus = ["0"]'
ctr_nvml() { # ID -> "MiB nprocs" of the container's processes (host NVML, cgroup v2 membership)
  local pid cg
  pid=$(ctr h9 state $1 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
  cg=$(sed -n 's/^0:://p' /proc/$pid/cgroup 2>/dev/null)
  apps_mib 0 | $PY -c 'import sys
pids = set(open(sys.argv[1]).read().split()) if sys.argv[1] else set()
m = n = 0
for l in sys.stdin:
    p, u = [x.strip() for x in l.split(",")][:2]
    if p in pids: m += int(u); n += 1
print(m, n)' "${cg:+/sys/fs/cgroup$cg/cgroup.procs}"; }
for N in ${I9_PROCS:-1 4}; do
  S=$([ $N = 1 ] && echo 4 || echo 8)
  for sc in ${I9_SCEN:-fill vmm pool_torch pool_raw reset destroy contexts exec zombie fork}; do
    if [ "$(left)" -lt 150 ]; then res SKIP "9#$sc" "$sc, $N proc(s), vram=${S}g" "no time left ($(left)s)"; continue; fi
    id=i9$sc$N; O=$W/b/$id/out
    bundle $id overlay vram=${S}g -- sh -c "timeout 100 $PY /gq/issue9.py drive $sc --procs $N --gib $S ${I9_DRY:+--dry} > /out/drive.log 2>&1"
    if ! ctr h9 create --bundle $W/b/$id $id > $W/b/$id/create.out 2> $W/b/$id/create.err < /dev/null; then
      res FAIL "9#$sc" "$sc, $N proc(s), vram=${S}g" "create: $(tr '\n' ' ' < $W/b/$id/create.err | cut -c1-300)"; continue; fi
    ctr h9 start $id < /dev/null
    for ph in 1 2; do
      if wait_for $O/ready$ph 45; then sleep 0.3; M=$(ctr_nvml $id); sleep 0.2; M2=$(ctr_nvml $id)
        # the larger of two samples
        [ "${M2%% *}" -gt "${M%% *}" ] 2>/dev/null && M=$M2; echo "$M" > $O/nvml$ph; fi
      touch $O/go$ph
    done
    wait_for $O/result.json 20
    J=$($PY $I9 judge --result $O/result.json --nvml1 $O/nvml1 --nvml2 $O/nvml2)
    echo "$sc N=$N: $J"; [ -f $O/result.json ] && cut -c1-1500 $O/result.json; echo
    ST=${J%%$'\t'*}; [ "$ST" = PASS ] || ST=FAIL
    res $ST "9#$sc" "$sc, $N proc(s) in one vram=${S}g container: NVML ≤ slice+1%, slice usable after" "${J#*$'\t'}"
    ctr h9 delete --force $id < /dev/null; clog $id; umount $W/b/$id/rootfs 2>/dev/null
  done
done
echo "context-cost cache: $(cat $W/h9/ledger/context-cost.json 2>/dev/null | tr -s ' \n' ' ' | cut -c1-600)"
# driver-limit ordering on real runc + cgroup v2: the fake r615 NVML logs its calls (it refuses, and
# logs nothing, when the cgroup directory no longer exists)
if [ -f $C/fake/libnvidia-ml.so.1 ]; then
  FK=$W/fakedrv; mkdir -p $FK/lib; cp $C/fake/libcuda.so.1 $C/fake/libnvidia-ml.so.1 $FK/lib/; : > $FK/lib/fake-nvml-limits.log
  GQ_EXTRA_CFG= mkcfg h9f 'context_overhead = "256m"' "[driver]" "lib_dirs = [\"$FK/lib\"]" "[[inventory.gpu]]" "index = 0" 'uuid = "GPU-face3344-5566-7788-99aa-bbccddeeff00"' 'memory = "16g"'
  bundle dl1 busybox vram=4g -- true
  ctr h9f create --bundle $W/b/dl1 dl1 > $W/b/dl1/create.out 2> $W/b/dl1/create.err < /dev/null && ctr h9f start dl1 < /dev/null
  sleep 1; ctr h9f delete dl1 < /dev/null; sleep 0.2
  LOG=$(cat $FK/lib/fake-nvml-limits.log)
  echo "fake NVML log (create/start/delete): $LOG; create.err: $(cat $W/b/dl1/create.err)"
  if echo "$LOG" | grep -q 'ns=/sys/fs/cgroup/.* soft=0 hard=4294967296' && echo "$LOG" | grep -q 'soft=0 hard=18446744073709551615'; then
    res PASS "9#drv" "r615 path with the fake NVML on real runc + cgroup v2: hard limit set on the container's cgroup at createRuntime, cleared by the runtime's delete while the cgroup still exists" "$(echo "$LOG" | sed 's/ pid=[0-9]*//' | tr '\n' ';' | cut -c1-400)"
  else res FAIL "9#drv" "r615 path with the fake NVML (set, then clear before runc removes the cgroup)" "log: $(echo "$LOG" | tr '\n' ';' | cut -c1-300) err: $(tr '\n' ' ' < $W/b/dl1/create.err | cut -c1-200)"; fi
  : > $FK/lib/fake-nvml-limits.log
  bundle dl2 busybox vram=4g -- true
  ctr h9f run --bundle $W/b/dl2 dl2 > $W/b/dl2/run.out 2>&1 < /dev/null
  LOG=$(cat $FK/lib/fake-nvml-limits.log)
  if echo "$LOG" | grep -q 'soft=0 hard=4294967296' && echo "$LOG" | grep -q 'soft=0 hard=18446744073709551615' && [ "$(nres h9f)" = 0 ]; then
    res PASS "9#drv" "same, foreground \`run\`: the runtime adds --keep (limits active on this host), clears, then deletes" "$(echo "$LOG" | sed 's/ pid=[0-9]*//' | tr '\n' ';' | cut -c1-300); ledger empty after"
  else res FAIL "9#drv" "same, foreground \`run\` (set, clear before the cgroup goes, ledger empty)" "log: $(echo "$LOG" | tr '\n' ';' | cut -c1-300); ledger $(nres h9f); $(tail -2 $W/b/dl2/run.out | tr '\n' ' ')"; fi
  # one grant per GPU: vram=50% over a 16 GiB and an 8 GiB (fake) GPU sets 8 and 4 GiB
  # a device root of its own: this host may have one GPU, the inventory names two
  D=$W/h9pdev; mkdir -p $D; for m in 0 1; do mknod $D/nvidia$m c 195 $m 2>/dev/null; done
  mknod $D/nvidiactl c 195 255 2>/dev/null; mknod $D/nvidia-uvm c 237 0 2>/dev/null; mknod $D/nvidia-uvm-tools c 237 1 2>/dev/null
  GQ_EXTRA_CFG= mkcfg h9p 'context_overhead = "256m"' "[driver]" "lib_dirs = [\"$FK/lib\"]" "dev_root = \"$D\"" "[[inventory.gpu]]" "index = 0" 'uuid = "GPU-face3344-5566-7788-99aa-bbccddeeff00"' 'memory = "16g"' "[[inventory.gpu]]" "index = 1" 'uuid = "GPU-face3344-5566-7788-99aa-bbccddeeff01"' 'memory = "8g"'
  : > $FK/lib/fake-nvml-limits.log; echo 2 > $FK/lib/fake-nvml-devices
  bundle dl3 busybox vram=50% gpus=2 -- true
  ctr h9p create --bundle $W/b/dl3 dl3 > $W/b/dl3/create.out 2> $W/b/dl3/create.err < /dev/null && ctr h9p start dl3 < /dev/null
  sleep 1; LOG=$(cat $FK/lib/fake-nvml-limits.log); ctr h9p delete dl3 < /dev/null; rm -f $FK/lib/fake-nvml-devices
  if echo "$LOG" | grep -q 'uuid=GPU-face3344-5566-7788-99aa-bbccddeeff00 .*soft=0 hard=8589934592' && echo "$LOG" | grep -q 'uuid=GPU-face3344-5566-7788-99aa-bbccddeeff01 .*soft=0 hard=4294967296'; then
    res PASS "28#grant" "vram=50% over a 16 GiB and an 8 GiB GPU (fake r615 NVML, real runc + cgroup v2): the driver-level limit is each GPU's own grant" "$(echo "$LOG" | grep 'soft=0 hard=[0-9]' | grep -v 18446744073709551615 | sed 's/ pid=[0-9]*//' | tr '\n' ';' | cut -c1-300)"
  else res FAIL "28#grant" "per-GPU driver-level limits from one grant" "log: $(echo "$LOG" | tr '\n' ';' | cut -c1-300) err: $(tr '\n' ' ' < $W/b/dl3/create.err | cut -c1-200)"; fi
fi
else res SKIP "9#" "issue 9 section" "not in SECTIONS, or no rootfs"; fi
############################ resize: grow and shrink a running container's slice ############################
if want resize && [ $OVERLAY_OK = 1 ]; then
sec "issue 29: gpu-quota resize of a running container (PyTorch default, cudaMallocAsync, CuPy)"
mkcfg rz 'reserve = "2g"' 'gpus = ["0"]'
gq() { GPU_QUOTA_CONFIG=$W/rz/config.toml timeout 60 $B/gpu-quota "$@"; }
rz_nvml() { local pid cg; pid=$(ctr rz state $1 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
  cg=$(sed -n 's/^0:://p' /proc/$pid/cgroup 2>/dev/null)
  apps_mib 0 | $PY -c 'import sys
pids = set(open(sys.argv[1]).read().split()) if sys.argv[1] else set()
print(sum(int(l.split(",")[1]) for l in sys.stdin if l.split(",")[0].strip() in pids))' "${cg:+/sys/fs/cgroup$cg/cgroup.procs}"; }
RZT=$OUT/resize-transcript.txt; : > $RZT
for v in "torch:" "torch:backend:cudaMallocAsync" "cupy:"; do
  kind=${v%%:*}; conf=${v#*:}; id=rz${kind}$([ -n "$conf" ] && echo async); O=$W/b/$id/out
  bundle $id overlay vram=4g -- sh -c "${conf:+PYTORCH_CUDA_ALLOC_CONF=$conf }timeout 200 $PY /gq/resize.py $kind --out /out > /out/log 2>&1"
  ctr rz create --bundle $W/b/$id $id > $W/b/$id/create.out 2> $W/b/$id/create.err < /dev/null && ctr rz start $id < /dev/null
  step() { echo "\$ gpu-quota $*" >> $RZT; gq "$@" >> $RZT 2>&1; local r=$?; echo "(exit $r)" >> $RZT; return $r; }
  echo "## $kind ${conf:-default allocator}" >> $RZT
  ok=1; why=""
  wait_for $O/ready1 90 || { ok=0; why="no ready1"; }
  step ls; step resize $id 8g || { ok=0; why="$why; grow failed"; }; step ls
  touch $O/go1; wait_for $O/ready2 60 || { ok=0; why="$why; no ready2"; }
  N2=$(rz_nvml $id)
  step resize $id 4g && { ok=0; why="$why; shrink below the held 5 GiB was not refused"; }
  touch $O/go2; wait_for $O/ready3 60 || { ok=0; why="$why; no ready3"; }
  step resize $id 4g || { ok=0; why="$why; shrink after free refused"; }; step ls
  touch $O/go3; wait_for $O/result.json 60 || { ok=0; why="$why; no result"; }
  J=$(cat $O/result.json 2>/dev/null)
  CHK=$(echo "$J" | $PY -c 'import json,sys
G = 1 << 30
try: r = json.load(sys.stdin)
except Exception as e: print("no result"); sys.exit()
bad = [k for k, ok in (("held 3 GiB", r["held3"]), ("2 GiB refused at 4g", r["refused1"]), ("total 4 GiB", r["total1"] == 4 * G),
    ("total 8 GiB after grow", r["total2"] == 8 * G), ("nvidia-smi 8192 MiB", r["smi2"] == 8192), ("2 GiB fit after grow", r["alloc2_ok"]),
    ("total 4 GiB after shrink", r["total4"] == 4 * G), ("2 GiB refused again", r["refused4"])) if not ok]
print("; ".join(bad))' 2>&1)
  [ -n "$CHK" ] && { ok=0; why="$why; $CHK"; }
  [ -n "$N2" ] && [ "$N2" -gt $((8192 * 101 / 100)) ] && { ok=0; why="$why; NVML $N2 MiB > 8 GiB + 1%"; }
  fig="NVML while holding 5 GiB under 8g: ${N2:-?} MiB; $(echo "$J" | cut -c1-400)"
  if [ $ok = 1 ]; then res PASS "29#resize" "$kind ${conf:-default}: 3 GiB held, 2 more refused at 4g; resize 8g -> same process gets them, nvidia-smi 8192 MiB; shrink to 4g refused while 5 GiB held, accepted after freeing 2; 2 GiB refused again" "$fig"
  else res FAIL "29#resize" "$kind ${conf:-default} resize cycle" "${why#; }; $fig; $(tail -3 $O/log 2>/dev/null | tr '\n' ' ' | cut -c1-300)"; fi
  ctr rz delete --force $id < /dev/null; clog $id; umount $W/b/$id/rootfs 2>/dev/null
done
else res SKIP "29#resize" "resize section" "not in SECTIONS, or no rootfs"; fi
# compute shares (sm=): a host for the MPS sections and their helpers
mkcfg mps 'gpus = ["0"]'
MD=$W/mps/state/mps/$UUID0; MPSR=$OUT/mps.txt; : > $MPSR
mpsres() { grep '^RESULT ' "$1" 2>/dev/null | tail -1 | cut -c8-; }
tf() { mpsres "$1" | $PY -c 'import json,sys; print(json.load(sys.stdin)["tflops"])' 2>/dev/null || echo 0; }
mrun() { # ID ANN... -- CMD: create+start a container on the mps host, detached
  local id=$1; shift; bundle $id overlay "$@" || return 1
  ctr mps create --bundle $W/b/$id $id > $W/b/$id/create.out 2> $W/b/$id/create.err < /dev/null && ctr mps start $id < /dev/null; }
mwait() { local id=$1 s=${2:-120} i; for ((i = 0; i < s * 10; i++)); do [ "$(state_of mps $id)" = stopped ] && return 0; sleep 0.1; done; return 1; }
mdel() { ctr mps delete --force $1 < /dev/null; clog $1; umount $W/b/$1/rootfs 2>/dev/null; }
daemons() { pgrep -f nvidia-cuda-mps-control | wc -l; }
# the SM clock while a run computes: a share's throughput is its SMs times
# their clock, and the clock is the power limit's (fewer SMs, higher clock)
clkon() { nvidia-smi -i 0 --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 500 > "$1" 2>/dev/null & CLKPID=$!; }
clkoff() { kill $CLKPID 2>/dev/null; wait $CLKPID 2>/dev/null; }
# median SM clock (MHz) and power (W) of the samples drawing over 200 W (computing, not starting)
clkmed() { $PY -c '
import sys, statistics as s
r = [tuple(float(x) for x in l.split(",")) for l in open(sys.argv[1]) if l.count(",") == 1 and "N/A" not in l]
r = [x for x in r if x[1] > 200]
print(f"{s.median(x[0] for x in r):.0f} {s.median(x[1] for x in r):.0f}" if r else "0 0")' "$1" 2>/dev/null || echo "0 0"; }

if want mps && [ $OVERLAY_OK = 1 ]; then
sec "issue 30: compute shares (sm=) through MPS"
echo "power limit: $(nvidia-smi -i 0 --query-gpu=power.limit,clocks.max.sm --format=csv,noheader)" | tee -a $MPSR
clkon $T/clk-solo
SOLO=$(timeout 120 $PY $REPO/tests/gpu/mps.py mm 15 2>&1 | tee -a $MPSR | grep '^RESULT' | cut -c8- | $PY -c 'import json,sys; print(json.load(sys.stdin)["tflops"])' 2>/dev/null || echo 0)
clkoff; read CSOLO PSOLO <<< "$(clkmed $T/clk-solo)"
echo "solo (host, no MPS, no gpu-quota): $SOLO TFLOPS at $CSOLO MHz, $PSOLO W" | tee -a $MPSR
D0=$(daemons)
for p in 25 50 100; do
  id=mm$p; clkon $T/clk-$p; mrun $id vram=16g sm=$p% -- sh -c "timeout 150 $PY /gq/mps.py mm 15 > /out/log 2>&1; env | grep CUDA_MPS > /out/env"
  [ $p = 25 ] && { sleep 3; UP=$(daemons); [ -e $MD/pipe/control ] && CTL1=yes || CTL1=no; }
  mwait $id 150; clkoff; read CK PW <<< "$(clkmed $T/clk-$p)"
  TT=$(tf $W/b/$id/out/log); echo "sm=$p%: $TT TFLOPS at $CK MHz, $PW W; $(tr '\n' ' ' < $W/b/$id/out/env 2>/dev/null)" | tee -a $MPSR
  eval "T$p=$TT C$p=$CK"; mdel $id
done
# judged per SM clock: a share bounds the SMs, not their clock, and a lone
# share under the power limit runs its few SMs faster than solo runs all of
# them (raw throughput overstates the share); the raw ratios stay as figures
SH=$($PY -c "
s, c = float('$SOLO' or 0), float('$CSOLO' or 0)
rows = [(p, float(t or 0), float(k or 0)) for p, t, k in ((25, '$T25', '$C25'), (50, '$T50', '$C50'), (100, '$T100', '$C100'))]
raw = ' '.join(f'{p}%: {t / s:.3f}' for p, t, _ in rows) + ' of solo' if s else ''
if not s:
    print('FAIL no solo figure')
elif not c or not all(k for _, _, k in rows):
    print(f'FAIL no clock samples; raw {raw}')
else:
    pc = [(p, t / k / (s / c)) for p, t, k in rows]
    ok = all(abs(r - p / 100) <= 0.05 for p, r in pc)
    print(('PASS' if ok else 'FAIL') + ' per SM clock ' + ' '.join(f'{p}%: {r:.3f}' for p, r in pc) + f'; raw {raw}')" 2>/dev/null || echo "FAIL no figures")
res "${SH%% *}" "30#share" "matmul in one container at sm=25/50/100%, per SM clock ((TFLOPS / MHz) against solo's) within ±0.05 of the share" "${SH#* }; solo $SOLO TFLOPS at $CSOLO MHz; clocks 25% $C25, 50% $C50, 100% $C100 MHz (raw in mps.txt)"
mrun two1 vram=16g sm=50% -- sh -c "timeout 150 $PY /gq/mps.py mm 20 > /out/log 2>&1"
mrun two2 vram=16g sm=50% -- sh -c "timeout 150 $PY /gq/mps.py mm 20 > /out/log 2>&1"
mwait two1 150; mwait two2 150; A=$(tf $W/b/two1/out/log); Bt=$(tf $W/b/two2/out/log); mdel two1; mdel two2
echo "two at 50%: $A + $Bt" | tee -a $MPSR
$PY -c "import sys; s=float('$SOLO' or 0); sys.exit(0 if s and float('$A')/s >= 0.40 and float('$Bt')/s >= 0.40 else 1)" && res PASS "30#two" "two containers at sm=50% at once, each >= 0.40 of solo" "$A + $Bt of $SOLO TFLOPS" || res FAIL "30#two" "two at sm=50%, each >= 0.40 of solo" "$A + $Bt of $SOLO TFLOPS"
AFTER=$(daemons); [ -e $MD ] && DIRLEFT=yes || DIRLEFT=no
[ "$UP" -gt "$D0" ] && [ "$CTL1" = yes ] && [ "$AFTER" = "$D0" ] && [ $DIRLEFT = no ] && res PASS "30#daemon" "the GPU's MPS daemon starts with the first share and is gone after the last" "daemons before $D0, with a share $UP (control socket: $CTL1), after $AFTER; directory left: $DIRLEFT" || res FAIL "30#daemon" "daemon lifecycle" "before $D0, with share ${UP:-?} (control $CTL1), after $AFTER, dir left $DIRLEFT"
mrun nosm vram=16g -- sh -c "timeout 150 $PY /gq/mps.py mm 15 > /out/log 2>&1"
mwait nosm 150; N=$(tf $W/b/nosm/out/log); mdel nosm; echo "sliced, no sm, alone: $N" | tee -a $MPSR
$PY -c "import sys; s=float('$SOLO' or 0); sys.exit(0 if s and float('$N')/s >= 0.95 else 1)" && res PASS "30#nosm" "a sliced container without sm, alone on the GPU, runs at native speed (no MPS)" "$N of $SOLO TFLOPS" || res FAIL "30#nosm" "sliced without sm at native speed" "$N of $SOLO TFLOPS"
mrun mem vram=4g sm=50% -- sh -c "timeout 120 $PY /gq/mps.py alloc 3 2 > /out/torch 2>&1; timeout 120 $PY -c 'import cupy as cp, json
out = []
held = []
for g in (3, 2):
    try: held.append(cp.empty(g << 30, dtype=cp.uint8)); out.append([g, \"ok\"])
    except Exception as e: out.append([g, type(e).__name__])
print(\"RESULT \" + json.dumps({\"allocs\": out}))' > /out/cupy 2>&1
  ($PY -c 'import torch, time; x = torch.empty(1 << 30, dtype=torch.uint8, device=\"cuda\"); open(\"/out/held\", \"w\").write(\"1\"); time.sleep(25)' &) ; for i in \$(seq 150); do [ -e /out/held ] && break; sleep 0.2; done
  nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader > /out/smi 2>&1; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > /out/apps 2>&1; nvidia-smi > /out/smi-full 2>&1; echo \$\$ > /out/mypid; sleep 2"
sleep 20; NV=$(apps_mib 0 | awk -F, '{s+=$2} END {print s+0}'); mwait mem 120
TJ=$(mpsres $W/b/mem/out/torch); CJ=$(mpsres $W/b/mem/out/cupy); SMI=$(tr '\n' ' ' < $W/b/mem/out/smi); APPS=$(tr '\n' ' ' < $W/b/mem/out/apps)
echo "memory under MPS: torch $TJ; cupy $CJ; nvidia-smi $SMI; apps $APPS; host NVML during: $NV MiB" | tee -a $MPSR; cat $W/b/mem/out/smi-full >> $MPSR
echo "$TJ" | grep -q '\["3", "ok"\], \["2", "OutOfMemoryError"\]' && echo "$CJ" | grep -q '\[3, "ok"\], \[2, "OutOfMemoryError"\]' && echo "$SMI" | grep -q '^4096 MiB' && res PASS "30#mem" "the memory slice holds under MPS: vram=4g sm=50%, PyTorch and CuPy 3 GiB ok, 2 more refused; nvidia-smi in the container shows 4096 MiB" "torch $TJ; cupy $CJ; smi $SMI; apps in the container: $APPS; host NVML while 1 GiB held: $NV MiB" || res FAIL "30#mem" "memory slice under MPS" "torch $TJ; cupy $CJ; smi $SMI; apps $APPS"
mdel mem
fi
if want mpsfault && [ $OVERLAY_OK = 1 ]; then
sec "issue 30: a fault in one sm= container, beside another client and a process outside MPS"
# the process outside MPS starts first and is computing before the client
# initialises (the order mps-facts2.txt measured)
( timeout 90 $PY $REPO/tests/gpu/mps.py mm 40 > $W/outside.log 2>&1 ) &
OUTSIDE=$!
sleep 12; echo "[t=${SECONDS}s] outside process running"
mrun fa vram=16g sm=50% -- sh -c "timeout 90 $PY /gq/mps.py mm 20 > /out/log 2>&1"
sleep 14; echo "[t=${SECONDS}s] client fa running; starting the faulting client"
mrun fb vram=4g sm=25% -- sh -c "timeout 60 $PY /gq/mps.py fault > /out/log 2>&1"
mwait fb 70; echo "[t=${SECONDS}s] fb: $(state_of mps fb)"; mwait fa 90; echo "[t=${SECONDS}s] fa: $(state_of mps fa)"
# its pid: a bare `wait` also waits for the tee of this script's own output
# (a process substitution), which never ends; that hung this section twice
wait $OUTSIDE
FA=$(mpsres $W/b/fa/out/log); FB=$(mpsres $W/b/fb/out/log); FO=$(mpsres $W/outside.log)
FAERR=$(grep -m1 -o 'illegal memory access\|CUDA error: [a-z ]*' $W/b/fa/out/log 2>/dev/null || true)
echo "fault: faulting client $FB; other client $FA; process outside MPS $FO" | tee -a $MPSR
mdel fa; mdel fb
mrun fc vram=16g sm=50% -- sh -c "timeout 60 $PY /gq/mps.py mm 5 > /out/log 2>&1"; mwait fc 60; FC=$(tf $W/b/fc/out/log); mdel fc
# NVIDIA documents that on Volta and later a fatal fault in one MPS client
# may end the other clients of its server; what happened to the other
# client is recorded, not judged (docs/security.md says it)
res INFO "30#fault-peer" "the other sm= client on the GPU while one faults" "$([ -n "$FA" ] && echo "ran to the end: $FA" || echo "ended by the fault: ${FAERR:-no result, no error line}")"
echo "$FB" | grep -qi illegal && [ -n "$FO" ] && [ "$FC" != 0 ] && res PASS "30#fault" "an illegal address in one sm= container: its own error; a process outside MPS runs to the end; a new sm= container afterwards computes" "faulting: $FB; outside: $FO; new client: $FC TFLOPS" || res FAIL "30#fault" "fault containment" "faulting: ${FB:-no result}; outside: ${FO:-no result}; new client: $FC"
echo "daemons at the end: $(daemons)" | tee -a $MPSR
fi

if want mpslock && [ $OVERLAY_OK = 1 ]; then
sec "issue 30: an sm= container writes into its GPU daemon's FIFOs and flocks its files while another share starts"
# the read-only bind stops writes to files, not to a FIFO nor a flock
mrun la vram=4g sm=25% -- sh -c "timeout 60 $PY /gq/mps.py hostile /run/gpu-quota/mps 25 > /out/log 2>&1"
for i in $(seq 100); do grep -q '^HELD' $W/b/la/out/log 2>/dev/null && break; sleep 0.2; done
P0=$(cat $MD/pipe/nvidia-cuda-mps-control.pid 2>/dev/null)
echo "[t=${SECONDS}s] hostile: $(grep '^HELD' $W/b/la/out/log | cut -c6-)" | tee -a $MPSR
T0=$(now_ms); mrun lb vram=16g sm=50% -- sh -c "timeout 90 $PY /gq/mps.py mm 5 > /out/log 2>&1"; T1=$(now_ms)
mwait lb 90; T2=$(now_ms); LB=$(tf $W/b/lb/out/log); P1=$(cat $MD/pipe/nvidia-cuda-mps-control.pid 2>/dev/null)
LBERR=$(tail -2 $W/b/lb/out/log 2>/dev/null | tr '\n' ' ' | cut -c1-200)
mwait la 60; mdel la; mdel lb
echo "locks held: other share created in $((T1 - T0)) ms, ended after $((T2 - T0)) ms, $LB TFLOPS; daemon pid $P0 -> $P1; $LBERR" | tee -a $MPSR
res INFO "30#lock" "while an sm= container writes into the daemon's FIFO and flocks its files, another sm= container on the GPU" "create $((T1 - T0)) ms, run to end $((T2 - T0)) ms, $LB TFLOPS; daemon pid before $P0, after $P1 (raw in mps.txt)"
fi

if want mpsuser && [ $OVERLAY_OK = 1 ]; then
sec "issue 30: host users and the MPS daemon: a non-root share, a process of another uid in a share, a non-root slice"
# BUSER: bundle()'s process uid (and gid). Under gpu-quota's root daemon a
# server for uid 1000 exits at once (docs/gpu-runs/2026-12-02-h200-mps-user):
# admission refuses a non-root share
BUSER=1000 mrun nu1 vram=8g sm=50% -- sh -c "true"; NUO=$(tr '\n' ' ' < $W/b/nu1/create.err 2>/dev/null | cut -c1-400)
echo "sm= as uid 1000: $NUO" | tee -a $MPSR; mdel nu1 2>/dev/null
echo "$NUO" | grep -q "host uid 0 only" && res PASS "30#user" "a share for a process of uid 1000 is refused at create, naming why" "$NUO" || res FAIL "30#user" "non-root share refused" "$NUO"
# two CUDA processes: the matmul and the root exec below (sm-procs)
mrun ru1 vram=8g sm=50% sm-procs=2 -- sh -c "timeout 90 $PY /gq/mps.py mm 20 > /out/log 2>&1"
sleep 12
# a process of another uid exec'd into it: refused at cuInit by the
# interceptor (MPS would hold it there until root's clients end)
X0=$(now_ms); ctr mps exec --user 1001:1001 ru1 timeout 60 $PY -c 'import torch; torch.cuda.init(); print("EXEC-OK", torch.cuda.mem_get_info())' > $W/exec1001.log 2>&1 < /dev/null; X1=$(now_ms)
XO=$({ grep -m1 '^gpu-quota:' $W/exec1001.log; tail -1 $W/exec1001.log; } | tr '\n' ' ' | cut -c1-600); cat $W/exec1001.log >> $MPSR
R0=$(now_ms); RO=$(ctr mps exec ru1 timeout 60 $PY -c 'import torch; torch.cuda.init(); print("EXEC-OK", torch.cuda.mem_get_info())' 2>&1 < /dev/null | tail -2 | tr '\n' ' ' | cut -c1-300); R1=$(now_ms)
echo "exec as uid 1001 into a root share: $((X1 - X0)) ms: $XO; exec as root: $((R1 - R0)) ms: $RO" | tee -a $MPSR
mwait ru1 120; RU=$(tf $W/b/ru1/out/log); mdel ru1
echo "$XO" | grep -q "runs as host uid 1001" && ! echo "$XO" | grep -q EXEC-OK && [ $((X1 - X0)) -lt 30000 ] && echo "$RO" | grep -q EXEC-OK && res PASS "30#exec-user" "a process exec'd as uid 1001 into a root sm= container is refused at cuInit, not held; one exec'd as root is a client" "uid 1001: $((X1 - X0)) ms: $XO; root: $RO; the container's matmul: $RU TFLOPS" || res FAIL "30#exec-user" "exec as another uid" "uid 1001: $((X1 - X0)) ms: $XO; root: $RO; matmul $RU"
BUSER=1000 mrun nu2 vram=4g -- sh -c "timeout 90 $PY /gq/mps.py alloc 3 2 > /out/log 2>&1"
mwait nu2 100; NJ=$(mpsres $W/b/nu2/out/log); NJERR=$(tail -2 $W/b/nu2/out/log 2>/dev/null | tr '\n' ' ' | cut -c1-200); mdel nu2
echo "$NJ" | grep -q '\["3", "ok"\], \["2", "OutOfMemoryError"\]' && res PASS "30#user-slice" "vram=4g (no sm) as uid 1000: 3 GiB ok, 2 more refused" "$NJ" || res FAIL "30#user-slice" "vram=4g as uid 1000" "${NJ:-no result} $NJERR"
fi

if want mpsshare && [ $OVERLAY_OK = 1 ]; then
sec "issue 37: a share bounds its container; nothing inside steers, stops or leaves MPS"
CTLBIN=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)
# the supervisor, as its service runs it
GPU_QUOTA_CONFIG=$W/mps/config.toml setsid $B/gpu-quota mps-supervise --interval 1 > $W/supervise.log 2>&1 < /dev/null &
SUPPID=$!
sleep 1; kill -0 $SUPPID 2>/dev/null && echo "supervisor running ($SUPPID)" || { echo "supervisor did not start:"; cat $W/supervise.log; }
if [ -z "${SOLO:-}" ] || [ "$SOLO" = 0 ]; then
  SOLO=$(timeout 120 $PY $REPO/tests/gpu/mps.py mm 10 2>&1 | grep '^RESULT' | cut -c8- | $PY -c 'import json,sys; print(json.load(sys.stdin)["tflops"])' 2>/dev/null || echo 0)
fi
echo "solo: $SOLO TFLOPS" | tee -a $MPSR
frac() { $PY -c "s=float('$SOLO' or 0); print(round(float('${1:-0}' or 0)/s, 3) if s else 0)"; }
ge() { $PY -c "import sys; sys.exit(0 if float('${1:-0}' or 0) >= float('$2') else 1)"; }
le() { $PY -c "import sys; sys.exit(0 if float('${1:-0}' or 0) <= float('$2') else 1)"; }
# MPSSHARE_ITEMS picks items (a short device call): procs 7525 envi control killed
item() { case " ${MPSSHARE_ITEMS:-procs 7525 envi control killed} " in *" $1 "*) return 0;; esac; return 1; }
# shares run as a user that cannot become host root (BUSER=1000) unless the
# host's config allows root's shares
echo "share containers run as uid ${BUSER:-0}" | tee -a $MPSR
if item procs; then
# 1. an sm=25% container of four processes beside an sm=75% container of one
mrun p4 vram=32g sm=25% sm-procs=4 -- sh -c "for i in 1 2 3 4; do timeout 150 $PY /gq/mps.py mm 25 > /out/log\$i 2>&1 & done; wait"
mrun p1 vram=32g sm=75% -- sh -c "timeout 150 $PY /gq/mps.py mm 25 > /out/log 2>&1"
mwait p4 150; mwait p1 150
S4=0; for i in 1 2 3 4; do S4=$($PY -c "print(round($S4 + float('$(tf $W/b/p4/out/log$i)' or 0), 1))"); done
S1=$(tf $W/b/p1/out/log); PCTS=$(for i in 1 2 3 4; do mpsres $W/b/p4/out/log$i | $PY -c 'import json,sys; print(json.load(sys.stdin)["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])' 2>/dev/null; done | tr '\n' ' ')
echo "sm=25% x4 processes: $S4 ($(for i in 1 2 3 4; do tf $W/b/p4/out/log$i; done | tr '\n' ' ')); percentages $PCTS; sm=75% x1: $S1" | tee -a $MPSR
mdel p4; mdel p1
ge "$(frac $S1)" 0.65 && le "$(frac $S4)" 0.35 && res PASS "37#procs" "sm=25% with 4 processes beside sm=75% with 1: the 75% container >= 0.65 of solo, the 25% container's processes together <= 0.35" "75%: $S1 ($(frac $S1)); 25% x4: $S4 ($(frac $S4)), per-process percentage $PCTS" || res FAIL "37#procs" "4 processes in sm=25% beside sm=75%" "75%: $S1 ($(frac $S1)); 25% x4: $S4 ($(frac $S4)); $PCTS"
fi
if item 7525; then
# 2. 75 + 25, one process each (as before)
mrun q75 vram=32g sm=75% -- sh -c "timeout 150 $PY /gq/mps.py mm 20 > /out/log 2>&1"
mrun q25 vram=32g sm=25% -- sh -c "timeout 150 $PY /gq/mps.py mm 20 > /out/log 2>&1"
mwait q75 150; mwait q25 150; Q75=$(tf $W/b/q75/out/log); Q25=$(tf $W/b/q25/out/log); mdel q75; mdel q25
echo "75 + 25: $Q75 + $Q25" | tee -a $MPSR
ge "$(frac $Q75)" 0.65 && le "$(frac $Q25)" 0.35 && res PASS "37#75-25" "sm=75% and sm=25%, one process each, at once" "$Q75 ($(frac $Q75)) + $Q25 ($(frac $Q25))" || res FAIL "37#75-25" "75 + 25" "$Q75 ($(frac $Q75)) + $Q25 ($(frac $Q25))"
fi
if item envi; then
# 3. a child started with env -i, and CUDA-graph replay, in an sm=25% container
mrun eg vram=16g sm=25% -- sh -c "env -i PATH=/usr/local/bin:/usr/bin:/bin timeout 100 $PY /gq/mps.py mm 10 > /out/envi 2>&1; timeout 100 $PY /gq/mps.py graph 10 > /out/graph 2>&1"
mwait eg 150; EI=$(tf $W/b/eg/out/envi); GR=$(tf $W/b/eg/out/graph)
EIM=$(mpsres $W/b/eg/out/envi | $PY -c 'import json,sys; print(json.load(sys.stdin)["mps"])' 2>/dev/null); GRM=$(mpsres $W/b/eg/out/graph | $PY -c 'import json,sys; print(json.load(sys.stdin)["mps"])' 2>/dev/null)
echo "sm=25%: env -i child $EI (mps $EIM), graph replay $GR (mps $GRM)" | tee -a $MPSR; mdel eg
[ "$EIM" = 1 ] && [ "$GRM" = 1 ] && ge "$EI" 1 && ge "$GR" 1 && le "$(frac $EI)" 0.40 && le "$(frac $GR)" 0.40 && res PASS "37#envi-graph" "in an sm=25% container, an env -i child and CUDA-graph replay are MPS clients at the share (a lone share runs at a higher clock: ~0.35 of solo)" "env -i $EI ($(frac $EI)), graph $GR ($(frac $GR))" || res FAIL "37#envi-graph" "env -i and graphs at the share" "env -i $EI mps=$EIM; graph $GR mps=$GRM"
fi
if item control; then
# 4. control commands from inside a share container (the image brings the control program)
mrun nb vram=16g sm=50% -- sh -c "timeout 150 $PY /gq/mps.py mm 30 > /out/log 2>&1"
sleep 12
hui() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY=$MD/pipe timeout 10 $CTLBIN 2>&1 | tr '\n' ' '; }
SRV=$(hui get_server_list | awk '{print $1}'); H0="default $(hui get_default_active_thread_percentage); server $SRV at $(hui "get_active_thread_percentage $SRV"); daemon $(cat $MD/pipe/nvidia-cuda-mps-control.pid 2>/dev/null)"
bundle cc overlay vram=4g sm=25% -- sh -c "P=/run/gpu-quota/mps; C=/usr/bin/nvidia-cuda-mps-control; ls -la \$P > /out/view 2>&1
  ui() { echo \"\$1\" | CUDA_MPS_PIPE_DIRECTORY=\$P timeout 10 \$C 2>&1 | tr '\n' ' '; }
  S=\$(ui get_server_list | awk '{print \$1}'); CL=\$(ui \"get_client_list \$S\")
  { echo \"server: \$S clients: \$CL\"
    for c in 'set_default_active_thread_percentage 100' 'set_default_device_pinned_mem_limit 0 100G' \"set_active_thread_percentage \$S 100\" 'set_default_client_priority 0'; do echo \"\$c => \$(ui \"\$c\")\"; done
    for p in \$CL; do echo \"terminate_client \$S \$p => \$(ui \"terminate_client \$S \$p\")\"; done
    echo \"quit => \$(ui quit)\"; } > /out/ctl 2>&1"
cp "$CTLBIN" $W/b/cc/rootfs/usr/bin/nvidia-cuda-mps-control
ctr mps create --bundle $W/b/cc cc > $W/b/cc/create.out 2> $W/b/cc/create.err < /dev/null && ctr mps start cc < /dev/null
mwait cc 60; sleep 2
H1="default $(hui get_default_active_thread_percentage); server $SRV at $(hui "get_active_thread_percentage $SRV"); daemon $(cat $MD/pipe/nvidia-cuda-mps-control.pid 2>/dev/null)"
mwait nb 150; NB=$(tf $W/b/nb/out/log)
CTLOUT=$(tr '\n' ';' < $W/b/cc/out/ctl 2>/dev/null | cut -c1-900); VIEW=$(tr '\n' ' ' < $W/b/cc/out/view 2>/dev/null | cut -c1-300)
echo "control from inside: view: $VIEW; $CTLOUT; host before: $H0; after: $H1; neighbour $NB" | tee -a $MPSR
mdel cc; mdel nb
[ "$H0" = "$H1" ] && ge "$(frac $NB)" 0.45 && res PASS "37#control" "control commands from inside a share container (set_default_*, set_active_thread_percentage, terminate_client, quit) change nothing; the neighbour finishes at its share" "$CTLOUT; daemon and settings before = after ($H1); neighbour sm=50%: $NB ($(frac $NB))" || res FAIL "37#control" "control commands from a container" "$CTLOUT; before $H0; after $H1; neighbour $NB"
fi
if item killed; then
# 5. the daemon killed while shares run
attr_in() { ctr mps exec $1 timeout 20 $PY /gq/mps.py attr 2>&1 < /dev/null | tr '\n' ' ' | cut -c1-300; }
mrun ka vram=16g sm=50% -- sh -c "timeout 150 $PY /gq/mps.py mm 40 > /out/log 2>&1"
mrun kb vram=8g sm=25% -- sh -c "sleep 120"
sleep 12; DP=$(cat $MD/pipe/nvidia-cuda-mps-control.pid 2>/dev/null)
kill -9 $DP; K0=$(now_ms); SEQ=""; SERVED=""
for i in $(seq 60); do
  o=$(attr_in kb); t=$(( $(now_ms) - K0 ))
  if echo "$o" | grep -q '"mps_enabled": 1'; then SERVED=$t; SEQ="$SEQ | ${t}ms served"; break; fi
  SEQ="$SEQ | ${t}ms $(echo "$o" | grep -o 'gpu-quota: cuInit refused[^(]*([a-z ]*' | cut -c1-60)$(echo "$o" | grep -o '"init": [0-9]*, "mps_enabled": [0-9a-z]*')"
  sleep 0.3
done
OUTSIDE=$(echo "$SEQ" | grep -c '"mps_enabled": 0' || true)
echo "daemon $DP killed: $SEQ" | tee -a $MPSR
# with the supervisor paused: a new process is refused for as long as no daemon runs
kill -STOP $SUPPID; DP=$(cat $MD/pipe/nvidia-cuda-mps-control.pid 2>/dev/null); kill -9 $DP; sleep 3
R1=$(attr_in kb); R2=$(ctr mps exec kb timeout 60 $PY /gq/mps.py mm 3 2>&1 < /dev/null | grep -E '^RESULT|gpu-quota:|Error' | tr '\n' ' ' | cut -c1-300)
kill -CONT $SUPPID; C0=$(now_ms); CS=""
for i in $(seq 60); do attr_in kb | grep -q '"mps_enabled": 1' && { CS=$(( $(now_ms) - C0 )); break; }; sleep 0.3; done
KA=$(mpsres $W/b/ka/out/log); KAERR=$(grep -m1 -o 'cudaErrorMps[A-Za-z]*\|CUDA error: [a-zA-Z ]*' $W/b/ka/out/log 2>/dev/null)
echo "supervisor paused, daemon killed: attr $R1; mm $R2; served ${CS:-never} ms after the supervisor resumed; the client running through the first kill: ${KA:-no result} $KAERR" | tee -a $MPSR
mdel ka; mdel kb
echo "$R1" | grep -q 'gpu-quota:' && ! echo "$R2" | grep -q '^RESULT' && [ "$OUTSIDE" = 0 ] && [ -n "$SERVED" ] && [ -n "$CS" ] && ! echo "$KA" | grep -q '"mps": 0' && res PASS "37#daemon-killed" "the daemon killed while shares run: no share process computes outside MPS, a new process is refused at cuInit, and is served once the supervisor has restarted the daemon" "supervisor running: served ${SERVED} ms after the kill ($SEQ); supervisor paused: refused ($R1), mm refused ($R2); served ${CS} ms after it resumed; the running client: ${KAERR:-$KA}" || res FAIL "37#daemon-killed" "daemon killed" "seq $SEQ; paused: $R1 / $R2; resumed: ${CS:-never}; outside=$OUTSIDE; running client ${KA:-} $KAERR"
fi
kill $SUPPID 2>/dev/null; wait $SUPPID 2>/dev/null
echo "supervisor log:"; tail -20 $W/supervise.log | tee -a $MPSR
echo "the daemon's control.log:"; tail -40 $MD/log/control.log 2>/dev/null | tee -a $MPSR
fi

if want mpsbench; then
sec "issue 30: containers without sm, this build against the build before sm= (OLD=$C/old), interleaved"
O=$C/old
if [ -x $O/gpu-quota-runtime ] && [ -f $O/libgpuquota.so ]; then
  bal() { grep -o 'ns_per_pair=[0-9.]*' | tail -1 | cut -d= -f2; }
  a1() { GPU_QUOTA_VRAM=64g GPU_QUOTA_USAGE_FILE=$T/ab_usage_$1 LD_PRELOAD=$2 timeout 60 $B/bench_alloc 5000 1048576 1 | bal; }
  a8() { GPU_QUOTA_VRAM=64g GPU_QUOTA_USAGE_FILE=$T/ab8_usage_$1 LD_PRELOAD=$2 timeout 60 $B/bench_alloc 1500 1048576 8 | bal; }
  med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
  for f in a1 a8; do
    nv=(); ov=(); for r in $(seq ${MB_ROUNDS:-10}); do nv+=($($f new $SO)); ov+=($($f old $O/libgpuquota.so)); done
    echo "$f new: ${nv[*]} | old: ${ov[*]}" | tee -a $BENCH
    MN=$(med "${nv[@]}"); MO=$(med "${ov[@]}")
    res INFO "30#bench" "1 MiB alloc+free pair, $([ $f = a1 ] && echo 1 process || echo 8 processes), no sm: this build vs the build before, median of ${MB_ROUNDS:-10} interleaved" "new $MN ns, old $MO ns, ratio $($PY -c "print(round($MN/$MO, 3))")"
  done
  mkcfg mbn 'gpus = ["0"]'; mkcfg mbo 'gpus = ["0"]'
  sed -i "s#hook = \"$B/gpu-quota-hook\"#hook = \"$O/gpu-quota-hook\"#; s#interceptor = \"$SO\"#interceptor = \"$O/libgpuquota.so\"#" $W/mbo/config.toml
  bundle stn busybox vram=1g -- true; bundle sto busybox vram=1g -- true
  tn=(); to=()
  for k in $(seq ${MB_START:-20}); do
    a=$(now_ms); GPU_QUOTA_CONFIG=$W/mbn/config.toml timeout 60 $B/gpu-quota-runtime --root $W/mbn/root run --bundle $W/b/stn n$k > /dev/null 2>&1 < /dev/null; b=$(now_ms); tn+=($((b - a)))
    a=$(now_ms); GPU_QUOTA_CONFIG=$W/mbo/config.toml timeout 60 $O/gpu-quota-runtime --root $W/mbo/root run --bundle $W/b/sto o$k > /dev/null 2>&1 < /dev/null; b=$(now_ms); to+=($((b - a)))
  done
  echo "start new: ${tn[*]} | old: ${to[*]}" | tee -a $BENCH
  res INFO "30#bench" "container start+run of \`true\` with vram=1g (no sm), busybox rootfs: this build vs the build before, p50 of ${MB_START:-20} interleaved" "new $(med "${tn[@]}") ms, old $(med "${to[@]}") ms; ledgers after: $(nres mbn) and $(nres mbo) reservations"
else res SKIP "30#bench" "old build" "no $O (make gpu-carry GQ_OLD=DIR)"; fi
fi

############################ graphs: CUDA graphs, graph memory, odd calls, standalone context ############################
if want graphs; then
sec "issue 17: graphs under both allocators (host preload + container), graph memory, odd calls, standalone context charge"
G=$REPO/tests/gpu/graphs.py; GT=$T/g17; mkdir -p $GT
SLICE_MIB=4096; LIM_MIB=$((SLICE_MIB * 101 / 100))
used0() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1; }
# phased LOG READY GO CMD...: run CMD in the background; when READY appears sample the device's used
# memory (host NVML, minus the idle baseline), then create GO; prints the delta in MiB ("" if never ready)
phased() {
  local log=$1 rd=$2 go=$3; shift 3
  local base m=""; base=$(used0)
  "$@" > "$log" 2>&1 < /dev/null & local pid=$!
  if wait_for "$rd" 150; then sleep 0.5; m=$(( $(used0) - base )); fi
  touch "$go"; wait $pid
  echo "$m"; }
nv_ok() { [ -n "$1" ] && [ "$1" -le $LIM_MIB ]; }
g17row() { # ID NAME LOG [NVML_MIB]
  local st=FAIL fig; fig="$(rjson $3 | cut -c1-420)"
  rok $3 && st=PASS
  if [ $# -ge 4 ]; then nv_ok "$4" || st=FAIL; fig="NVML +${4:-?} MiB (limit $LIM_MIB); $fig"; fi
  [ -z "$(rjson $3)" ] && fig="$fig $(grep -v '^RESULT' $3 | tail -3 | tr '\n' ' ' | cut -c1-300)"
  res $st "$1" "$2" "$fig"; }
# 1. native control: the repro without gpu-quota
if [ "$(left)" -gt 60 ]; then
  timeout 150 $PY $G suite --alloc async > $GT/native_async.log 2>&1
  res INFO "17#1" "native control (no gpu-quota), cudaMallocAsync: capture, allocating capture, 8 graphs/1 pool, torch.compile reduce-overhead (PyTorch refuses it with this backend by itself)" "$(rjson $GT/native_async.log | cut -c1-520)"
fi
# 2. host, standalone preload, vram=4g, both allocators
for al in native async; do
  [ "$(left)" -gt 60 ] || { res SKIP "17#1" "host preload $al" "no time left ($(left)s)"; continue; }
  timeout 170 env LD_PRELOAD=$SO GPU_QUOTA_VRAM=4g $PY $G suite --alloc $al > $GT/suite_$al.log 2>&1
  g17row "17#1" "host preload vram=4g, $al allocator: capture+replay (issue repro), allocating capture, 8 graphs sharing a pool, torch.compile reduce-overhead 6 steps" $GT/suite_$al.log
  [ "$(left)" -gt 40 ] || continue
  M=$(phased $GT/hold_$al.log $GT/rd_$al $GT/go_$al timeout 120 env LD_PRELOAD=$SO GPU_QUOTA_VRAM=4g $PY $G hold3 --alloc $al --gib 4 --ready $GT/rd_$al --go $GT/go_$al)
  g17row "17#2" "host preload vram=4g, $al: graph allocating 3 GiB replayed+kept, CuPy 2 GiB refused, fits after the graph went" $GT/hold_$al.log "$M"
done
if [ "$(left)" -gt 30 ]; then
  M=$(phased $GT/memnodes.log $GT/rd_mn $GT/go_mn timeout 60 env LD_PRELOAD=$SO GPU_QUOTA_VRAM=4g $PY $G memnodes --gib 4 --ready $GT/rd_mn --go $GT/go_mn)
  g17row "17#2" "host preload vram=4g: raw memory nodes (driver API): kept 3 GiB node -> cuMemAlloc 2 GiB refused; free+trim gives it back; node beyond slice refused" $GT/memnodes.log "$M"
fi
# 3. odd calls: native vs intercepted, identical codes
if [ -x $B/oddcalls ]; then
  $B/oddcalls > $GT/odd.native 2>&1; GPU_QUOTA_VRAM=4g LD_PRELOAD=$SO $B/oddcalls > $GT/odd.quota 2> $GT/odd.err
  cat $GT/odd.native
  if [ -s $GT/odd.native ] && diff $GT/odd.native $GT/odd.quota > $GT/odd.diff; then res PASS "17#3" "odd calls: identical codes native vs intercepted ($(wc -l < $GT/odd.native) calls)" "$(awk '{print $NF}' $GT/odd.native | sort | uniq -c | tr -s ' \n' ' ')"
  else res FAIL "17#3" "odd calls: native vs intercepted" "$(tr '\n' ' ' < $GT/odd.diff | cut -c1-400) $(head -2 $GT/odd.err | tr '\n' ' ')"; fi
else res SKIP "17#3" "odd calls" "no $B/oddcalls (make gpu-carry)"; fi
# 4. standalone context charge: a "4 GiB card" filled holds <= 4 GiB by NVML
if [ "$(left)" -gt 30 ]; then
  M=$(phased $GT/fill.log $GT/rd_fill $GT/go_fill timeout 90 env -u GPU_QUOTA_CONTEXT_OVERHEAD LD_PRELOAD=$SO GPU_QUOTA_VRAM=4g $PY $G fill --gib 4 --ready $GT/rd_fill --go $GT/go_fill)
  g17row "17#4" "standalone vram=4g, no GPU_QUOTA_CONTEXT_OVERHEAD: filled with 256 MiB tensors, the context is inside the slice" $GT/fill.log "$M"
fi
# 5. the same in a container (vram=4g), both allocators
if [ $OVERLAY_OK = 1 ]; then
  mkcfg h17 'reserve = "2g"' 'gpus = ["0"]'
  for al in native async; do
    [ "$(left)" -gt 70 ] || { res SKIP "17#1" "container $al" "no time left ($(left)s)"; continue; }
    id=g17s$al; O=$W/b/$id/out
    bundle $id overlay vram=4g -- sh -c "timeout 170 $PY /gq/graphs.py suite --alloc $al > /out/suite.log 2>&1"
    ctr h17 run --bundle $W/b/$id $id > $W/b/$id/run.out 2>&1 < /dev/null
    g17row "17#1" "container vram=4g, $al allocator: capture+replay, allocating capture, 8 graphs/1 pool, torch.compile reduce-overhead" $O/suite.log
    ctr h17 delete --force $id < /dev/null 2>/dev/null; clog $id; umount $W/b/$id/rootfs 2>/dev/null
    [ "$(left)" -gt 50 ] || continue
    id=g17h$al; O=$W/b/$id/out
    bundle $id overlay vram=4g -- sh -c "timeout 120 $PY /gq/graphs.py hold3 --alloc $al --gib 4 --ready /out/ready --go /out/go > /out/hold.log 2>&1"
    M=$(phased $W/b/$id/run.out $O/ready $O/go ctr h17 run --bundle $W/b/$id $id)
    g17row "17#2" "container vram=4g, $al: graph allocating 3 GiB kept, CuPy 2 GiB refused, fits after" $O/hold.log "$M"
    ctr h17 delete --force $id < /dev/null 2>/dev/null; clog $id; umount $W/b/$id/rootfs 2>/dev/null
  done
  if [ "$(left)" -gt 30 ]; then
    id=g17mn; O=$W/b/$id/out
    bundle $id overlay vram=4g -- sh -c "timeout 60 $PY /gq/graphs.py memnodes --gib 4 --ready /out/ready --go /out/go > /out/mn.log 2>&1"
    M=$(phased $W/b/$id/run.out $O/ready $O/go ctr h17 run --bundle $W/b/$id $id)
    g17row "17#2" "container vram=4g: raw memory nodes (driver API)" $O/mn.log "$M"
    ctr h17 delete --force $id < /dev/null 2>/dev/null; clog $id; umount $W/b/$id/rootfs 2>/dev/null
  fi
else res SKIP "17#" "issue 17 container checks" "no rootfs"; fi
cp $GT/*.log $GT/odd.* "$OUT/" 2>/dev/null
fi
############################ bench: the interceptor's and the runtime's costs against native ############################
if want bench; then
sec "benchmarks"
{ echo "# benchmarks ($(date -u +%FT%TZ), GPU 0)"; } > $BENCH
bal() { grep -o 'ns_per_pair=[0-9.]*' | tail -1 | cut -d= -f2; }
rn() { grep -o '"median_ms": [0-9.]*' "$1" 2>/dev/null | cut -d' ' -f2; }
PRE="GPU_QUOTA_VRAM=64g GPU_QUOTA_USAGE_FILE=$T/ab_usage LD_PRELOAD=$SO"
# one measurement per call: native (A) or intercepted (B)
m_alloc1() { env ${1:+$PRE} timeout 60 $B/bench_alloc 5000 1048576 1 | tee -a $BENCH | bal; }
m_alloc8() { env ${1:+$PRE} timeout 60 $B/bench_alloc 1500 1048576 8 | tee -a $BENCH | bal; }
m_resnet() { env ${1:+$PRE} timeout 90 $PY $WORK resnet --bf16 --steps 30 --warmup 8 > $T/abr 2>&1; rn $T/abr; }
m_decode() { env ${1:+$PRE} timeout 90 $PY $WORK decode > $T/abd 2>&1; rget $T/abd 'round(d["tokens_per_s"], 1)'; }
m_start32() { local a b k; a=$(now_ms)
  for k in $(seq 32); do env ${1:+$PRE} timeout 60 $B/bench_alloc 1 1048576 1 > /dev/null 2>&1 & done; wait; b=$(now_ms); echo $((b - a)); }
abbench() { # ID NAME ROUNDS MEASURE TARGET(max ratio B/A, or min for "ge") KIND(le|ge) UNIT
  local id=$1 name=$2 n=$3 f=$4 tgt=$5 kind=$6 unit=$7 r a b av=() bv=()
  for r in $(seq $n); do a=$($f); b=$($f pre); av+=("${a:-nan}"); bv+=("${b:-nan}"); done
  echo "$name: A(native) ${av[*]} | B(gpu-quota) ${bv[*]}" | tee -a $BENCH
  local out; out=$($PY - "${av[*]}" "${bv[*]}" "$tgt" "$kind" <<'PYEOF'
import statistics, sys
a = [float(x) for x in sys.argv[1].split() if x != "nan"]; b = [float(x) for x in sys.argv[2].split() if x != "nan"]
t, kind = float(sys.argv[3]), sys.argv[4]
if not a or not b: print("FAIL\tno figures"); sys.exit()
ma, mb = statistics.median(a), statistics.median(b); r = mb / ma
ok = r <= t if kind == "le" else r >= t
print(("PASS" if ok else "FAIL") + f"\t{ma:g}\t{mb:g}\t{r:.3f}\t{min(a):g}-{max(a):g}\t{min(b):g}-{max(b):g}")
PYEOF
)
  IFS=$'\t' read -r st ma mb ratio sa sb <<< "$out"
  res "$st" "$id" "$name, $n interleaved A/B rounds, medians" "native $ma $unit, gpu-quota $mb $unit, ratio $ratio (target $([ $kind = le ] && echo '≤' || echo '≥') $tgt); spread native $sa, gpu-quota $sb"; }
R=${AB_ROUNDS:-3}
[ "$(left)" -gt 60 ] && abbench "9#bench" "1 MiB cuMemAlloc+cuMemFree pair, 1 process (ns/pair)" $((R * 2)) m_alloc1 1.01 le ns || res SKIP "9#bench" "alloc 1 proc" "no time"
[ "$(left)" -gt 60 ] && abbench "9#bench" "1 MiB alloc+free pair, 8 processes, one shared budget (ns/pair)" $R m_alloc8 1.01 le ns || res SKIP "9#bench" "alloc 8 procs" "no time"
[ "$(left)" -gt 60 ] && abbench "9#bench" "32 processes starting CUDA at once (dlopen, cuInit, context, 1 alloc): wall time" $R m_start32 1.05 le ms || res SKIP "9#bench" "32 starts" "no time"
[ "$(left)" -gt 100 ] && abbench "9#bench" "ResNet-50 bf16 training step, batch 64 (median of 30)" $R m_resnet 1.01 le ms || res SKIP "9#bench" "ResNet-50 bf16" "no time"
[ "$(left)" -gt 60 ] && abbench "9#bench" "small-model decode loop (12-layer d768 GPT, random weights, bf16, batch 8): tokens/s" $R m_decode 0.99 ge tok/s || res SKIP "9#bench" "decode" "no time"
t0=$(now_ms); for k in $(seq 200); do GPU_QUOTA_VRAM=8g /bin/true; done; t1=$(now_ms)
for k in $(seq 200); do GPU_QUOTA_VRAM=8g LD_PRELOAD=$SO /bin/true; done; t2=$(now_ms)
for k in 1 2 3 4 5; do $B/bench_alloc 1 1048576 1 > /dev/null; done; t3=$(now_ms)
for k in 1 2 3 4 5; do GPU_QUOTA_VRAM=8g LD_PRELOAD=$SO $B/bench_alloc 1 1048576 1 > /dev/null; done; t4=$(now_ms)
res INFO "3#9" "interceptor start-up per process" "/bin/true: $(( (t1 - t0) * 5 )) µs native vs $(( (t2 - t1) * 5 )) µs preloaded (mean of 200); CUDA process (dlopen+cuInit+ctx+1 alloc): $(( (t3 - t2) / 5 )) ms native vs $(( (t4 - t3) / 5 )) ms preloaded (mean of 5)"
unset CUDA_VISIBLE_DEVICES
if [ $OVERLAY_OK = 1 ] && [ "$(left)" -gt 200 ]; then
  bundle rq overlay vram=40g -- $PY /gq/work.py resnet
  ctr h1 run --bundle $W/b/rq rq > $W/b/rq/run.out 2>&1 < /dev/null
  bundle rp plain-overlay -- $PY /gq/work.py resnet
  plainrunc run --bundle $W/b/rp rp > $W/b/rp/run.out 2>&1 < /dev/null
  clog rq; clog rp
  A=$(rn $W/b/rq/run.out); Bp=$(rn $W/b/rp/run.out)
  res INFO "4#5" "ResNet step in a sliced container (vram=40g) vs plain runc container with the GPU bound by hand" "sliced $A ms, plain $Bp ms, ratio $($PY -c "print(round($A/$Bp,3))" 2>/dev/null) (one sample each)"
else res SKIP "4#5" "ResNet in containers" "no rootfs or no time left ($(left)s)"; fi
startbench() { # KIND N
  local kind=$1 n=$2 k a b ta=() tb=()
  bundle stq$kind $kind vram=1g -- true; bundle stp$kind $kind -- true
  for k in $(seq $n); do
    a=$(now_ms); ctr h1 run --bundle $W/b/stq$kind q$kind$k > /dev/null 2>$W/b/stq$kind/last.err < /dev/null || echo "gq run failed: $(cat $W/b/stq$kind/last.err)"; b=$(now_ms); ta+=($((b - a)))
    a=$(now_ms); plainrunc run --bundle $W/b/stp$kind p$kind$k > /dev/null 2>&1 < /dev/null; b=$(now_ms); tb+=($((b - a)))
  done
  MQ=$(printf '%s\n' "${ta[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  MP=$(printf '%s\n' "${tb[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  echo "start $kind gq: ${ta[*]}" >> $BENCH; echo "start $kind plain: ${tb[*]}" >> $BENCH
  local st=PASS; [ $((MQ - MP)) -le 10 ] || st=FAIL
  res $st "4#5" "container start+run of \`true\`, $kind rootfs, p50 of $n interleaved (target +10 ms)" "gpu-quota vram=1g $MQ ms vs plain runc $MP ms, ratio $($PY -c "print(round($MQ/$MP,2))" 2>/dev/null), +$((MQ - MP)) ms; ledger after: $(nres h1) reservations"; }
[ "$(left)" -gt 30 ] && startbench busybox 20 || res SKIP "4#5" "start time busybox" "no time"
[ $OVERLAY_OK = 1 ] && [ "$(left)" -gt 40 ] && startbench overlay 20 || res SKIP "4#5" "start time glibc (overlay) rootfs" "no rootfs or time"
fi

sec "done"
{ echo; echo "**$PASS passed, $FAIL failed, $SKIP info/skipped** in ${SECONDS}s"; echo; cat "$SUM.head"; } >> "$SUM"
rm -f "$SUM.head"
cat "$SUM"
for m in $(findmnt -rn -o TARGET | grep "^$W/b/.*/rootfs$"); do umount $m 2>/dev/null; done
