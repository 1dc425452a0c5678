# Section i9: what the driver keeps alive (contexts, VMM, pools, reset,
# exec, zombies, forks) stays inside a container's slice; $I9 drives each
# scenario in the container and judges it against host NVML. Then the
# driver-level limit's ordering with the fake r615 NVML on real runc.
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
