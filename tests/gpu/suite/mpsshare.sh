# Section mpsshare (only when named in SECTIONS): a share bounds its
# container, and nothing inside it steers, stops or leaves MPS (several
# processes in one share, 75 + 25, env -i and graphs, control commands, the
# daemon killed under the supervisor). MPSSHARE_ITEMS picks the items.
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
