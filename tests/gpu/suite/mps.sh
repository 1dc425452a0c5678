# Compute shares (sm=) through MPS: the host and helpers every MPS section
# uses (set up whatever SECTIONS says), then section mps (throughput at a
# share, two shares at once, the daemon's lifecycle, no sm at native speed,
# the memory slice under MPS), mpsfault (a fault in one share), mpslock (a
# share writing into the daemon's FIFOs and flocking its files) and mpsuser
# (host uids and the daemon). mps is a default section; the other three run
# only when named in SECTIONS.
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
