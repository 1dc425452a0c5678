#!/usr/bin/env bash
# The H200 GPU suite of gpu-quota: one command, run on the device machine as
# root from the repository root, after `make gpu-carry` here:
#   bash tests/gpu/run-suite.sh            (carry .gpu-carry)
# Writes $OUT/summary.md (one row per check), suite.log, containers.log,
# bench.txt. Nothing is built there. Single-GPU checks use GPU 0; the 2-GPU
# checks run when 2 GPUs are visible. Every step has a timeout; the suite
# skips the benchmarks it has no time left for (SUITE_BUDGET seconds, def. 540).
# This file holds the settings, the helpers and the container setup; the
# sections are in suite/ beside it (tests/gpu/suite/, or .gpu-carry/gpu/suite/
# when the carried copy runs), sourced in the order PARTS gives.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SUITE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/suite
PARTS="probe admission standalone keepalive resize mps mpsshare mpsbench graphs bench burst"
for PART in $PARTS; do
  [ -f "$SUITE/$PART.sh" ] || { echo "missing $SUITE/$PART.sh: the suite's sections sit in suite/ beside run-suite.sh (make gpu-carry copies them)" >&2; exit 1; }
done
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
# mpslock, mpsuser, mpsshare, mpsbench and burst run only when named (SECTIONS=graphs: the CUDA-graph
# checks alone, < 6 min). Which file holds which section: the list where they are sourced, below.
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
bundle() { # ID HOST KIND ANN... -- CMD (KIND overlay|busybox|plain-overlay|plain-busybox; BMEM=SIZE: memory.max)
  local id=$1 kind=$2; shift 2; local anns=() extra=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do anns+=(--ann "$1"); shift; done; shift
  case $kind in plain-*) extra=(--plain-gpu 0); kind=${kind#plain-};; esac
  mkroot $W/b/$id $kind || return 1
  $PY $BUNDLE $W/b/$id --rootfs $W/b/$id/rootfs "${anns[@]}" "${extra[@]}" ${BUSER:+--user $BUSER} ${BMEM:+--memory $BMEM} $PYBINDS --bind $REPO/tests/gpu:/gq:ro -- "$@"; }
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

# The sections, in the order they run, from the files in $PARTS:
#   probe.sh: probe small        admission.sh: seed gpu2      standalone.sh: standalone mp
#   keepalive.sh: i9             resize.sh: resize            mps.sh: mps mpsfault mpslock mpsuser
#   mpsshare.sh: mpsshare        mpsbench.sh: mpsbench        graphs.sh: graphs
#   bench.sh: bench              burst.sh: burst
# Each file asks want() itself: some print their header, or set up what a
# later section uses (mps.sh's MPS host), whether or not they are chosen.
# Sourced at the top level (not in a function), so they share this script's
# variables and functions as if written here.
for PART in $PARTS; do . "$SUITE/$PART.sh"; done

sec "done"
{ echo; echo "**$PASS passed, $FAIL failed, $SKIP info/skipped** in ${SECONDS}s"; echo; cat "$SUM.head"; } >> "$SUM"
rm -f "$SUM.head"
cat "$SUM"
for m in $(findmnt -rn -o TARGET | grep "^$W/b/.*/rootfs$"); do umount $m 2>/dev/null; done
