# Section burst (only when named in SECTIONS): burstable slices under
# gpu-quota (docs/burst.md, section 7). PyTorch in every container
# (tests/gpu/burst.py):
#   1. A vram=60g holds 2 GiB; B vram=10g vram-limit=120g fills 100 GiB and
#      runs passes; A takes 50 GiB as one tensor (BURST_ROUNDS, default 10),
#      then as 50 x 1 GiB while the budget lasts: no out-of-memory in A, B's
#      rate before/during/after, B alive at the end or ended with its line;
#      what nvidia-smi shows in A and B, and `gpu-quota ls` while B bursts.
#   2. B1 vram-priority=0 and B2 vram-priority=100, 10g..60g, 55 GiB each
#      (B1 filled first: the driver's oldest, B2 the newest): A's 50 GiB and
#      their rates; then the same pair with a container memory limit
#      (BURST_MEMMAX, default 8g: their burst cannot go to the host): the
#      fallback must end B1 (its stderr line, exit status 137) and keep B2.
#   NVML is sampled every 0.25 s on the host throughout: used <= total.
# `gpu-quota burst-supervise` runs from the start (BURST_SUP=fallback: only
# for the fallback). The section stays within BURST_BUDGET s (default 440)
# plus its clean-up; every wait is bounded. Raw data: $OUT/burst-raw/,
# transcript $OUT/burst-transcript.txt, NVML samples $OUT/burst-nvml.txt.
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

if want burst && [ $OVERLAY_OK = 1 ]; then
sec "issue 40: burstable slices (vram-limit): eviction, priority, the fallback"
BT0=$SECONDS; BBUD=${BURST_BUDGET:-440}
bleft() { echo $((BBUD - (SECONDS - BT0))); }
bmin() { local m=$1 x; for x in "$@"; do [ "$x" -lt "$m" ] && m=$x; done; [ "$m" -lt 1 ] && m=1; echo $m; }
BP=$REPO/tests/gpu/burst.py; BR=$OUT/burst-transcript.txt; NVF=$OUT/burst-nvml.txt; BRAW=$OUT/burst-raw; BEV=$W/bu/events.log
: > $BR; mkdir -p $BRAW
mkcfg bu 'reserve = "2g"' 'gpus = ["0"]' 'burst_reclaim_wait_ms = 30000' 'log = "file"' "log_file = \"$BEV\""
bnote() { echo "$*" | tee -a $BR; }
bq() { GPU_QUOTA_CONFIG=$W/bu/config.toml timeout 30 $B/gpu-quota "$@"; }
BIDS=""; BJOBS=""; SUPB=""; CGW=""
# A container in the foreground of a background job, `run --keep`: its exit
# status lands in $W/b/ID/rc and its cgroup stays after it ends (for
# memory.events) until the delete; its stderr (where the supervisor's line
# goes) is $W/b/ID/run.err.
brun() { # ID SECS
  local id=$1 t=$2; rm -f $W/b/$id/rc
  ( GPU_QUOTA_CONFIG=$W/bu/config.toml timeout -k 5 $t $B/gpu-quota-runtime --root $W/bu/root run --keep --bundle $W/b/$id $id \
      > $W/b/$id/run.out 2> $W/b/$id/run.err < /dev/null; echo $? > $W/b/$id/rc ) &
  BJOBS="$BJOBS $!"; BIDS="$BIDS $id"; }
brc() { cat $W/b/$1/rc 2>/dev/null; }
balive() { [ ! -e $W/b/$1/rc ] && [ "$(state_of bu $1)" = running ]; }
bwait() { # ID FILE SECS: FILE under the container's /out, or the container ended, or SECS
  local i; for ((i = 0; i < $3 * 10; i++)); do [ -e $W/b/$1/out/$2 ] && return 0; [ -e $W/b/$1/rc ] && return 1; sleep 0.1; done; return 1; }
bstop() { # ID...: ask them to stop (B checks its data first), then delete; the GPU given back
  local id i; for id in "$@"; do touch $W/b/$id/out/stop; done
  for id in "$@"; do for ((i = 0; i < 250; i++)); do [ -e $W/b/$id/rc ] && break; sleep 0.1; done; done
  for id in "$@"; do bdel $id; done
  for ((i = 0; i < 100; i++)); do [ "$(nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null)" -lt 8000 ] 2>/dev/null && break; sleep 0.1; done; }
bdel() { ctr bu delete --force $1 < /dev/null > /dev/null 2>&1; clog $1; mkdir -p $BRAW/$1
  cp $W/b/$1/out/* $W/b/$1/run.out $W/b/$1/run.err $W/b/$1/rc $BRAW/$1/ 2>/dev/null; umount $W/b/$1/rootfs 2>/dev/null; }
bpid() { ctr bu state $1 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null; }
bcg() { local p; p=$(bpid $1); [ -n "$p" ] && sed -n 's/^0:://p' /proc/$p/cgroup 2>/dev/null; }
cgsnap() { # CGROUP (as /proc/PID/cgroup names it): memory figures, or 1 when it is gone
  local c=/sys/fs/cgroup$1; [ -n "$1" ] && [ -f $c/memory.current ] || return 1
  echo "current $(( $(cat $c/memory.current) >> 20 )) MiB, max $(cat $c/memory.max 2>/dev/null), $(awk '$1=="anon"||$1=="kernel"||$1=="file"||$1=="shmem"||$1=="unevictable"{printf "%s %d MiB, ", $1, $2/1048576}' $c/memory.stat 2>/dev/null)events: $(tr '\n' ' ' < $c/memory.events 2>/dev/null)"; }
cgwatch() { # CGROUP FILE SECS: its last figures kept in FILE every 0.25 s while it exists
  ( end=$((SECONDS + $3)); while [ $SECONDS -lt $end ] && cgsnap $1 > $2.tmp 2>/dev/null; do mv -f $2.tmp $2; sleep 0.25; done ) &
  CGW="$CGW $!"; }
bsup() { # start the supervisor, as its service would run it
  GPU_QUOTA_CONFIG=$W/bu/config.toml setsid $B/gpu-quota burst-supervise >> $OUT/burst-supervise.log 2>&1 < /dev/null &
  SUPB=$!; sleep 1
  if kill -0 $SUPB 2>/dev/null; then bnote "burst-supervise running (pid $SUPB)"
  else bnote "burst-supervise did not start: $(tail -3 $OUT/burst-supervise.log | tr '\n' ' ' | cut -c1-300)"; SUPB=""; fi; }
jget() { $PY -c "import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception: d={}
print($2)" "$1" 2>/dev/null; }
dres() { grep '^RESULT ' "$1" 2>/dev/null | tail -1 | cut -c8- > "$1.json"; [ -s "$1.json" ]; }
bline() { grep -m1 'gpu-quota: container ended:' $W/b/$1/run.err 2>/dev/null | cut -c1-400; }
bend() { # ID: "running", or how it ended
  if balive $1; then echo running; else echo "ended: exit $(brc $1 || echo '?'), line: $(bline $1 | grep -q . && echo yes || echo no)"; fi; }
bnote "section burst, $(date -u +%FT%TZ); budget ${BBUD}s; config: $(grep -E 'reserve|gpus|burst|log' $W/bu/config.toml | tr '\n' ' ')"
timeout $((BBUD + 60)) $PY $BP nvml $NVF --secs $((BBUD + 40)) > /dev/null 2>&1 & NVPID=$!
[ "${BURST_SUP:-all}" = fallback ] || bsup

#### 1. one burster, 100 GiB; A takes 50 GiB
bundle bA overlay vram=60g -- $PY /gq/burst.py guaranteed /out --hold-gib 2 --secs $((BBUD + 30))
bundle bB overlay vram=10g vram-limit=120g -- $PY /gq/burst.py burster /out 100 --secs $((BBUD + 30))
brun bA $((BBUD + 40)); brun bB $((BBUD + 40))
bwait bA ready.json 120 || bnote "A not ready: exit $(brc bA); $(tail -c 600 $W/b/bA/run.err | tr '\n' ' ')"
bwait bB ready.json 150 || bnote "B not ready: exit $(brc bB); $(tail -c 600 $W/b/bB/run.err | tr '\n' ' ')"
if [ -e $W/b/bB/out/ready.json ]; then
  { echo "\$ gpu-quota ls   (B bursting: $(jget $W/b/bB/out/ready.json 'd["got_gib"]') GiB)"; bq ls 2>&1; echo "(exit $?)"; } >> $BR
  BLS=$(sed -n '/^\$ gpu-quota ls/,/^(exit/p' $BR)
  grep -qF '10.00 GiB..120.00 GiB' <<< "$BLS" && grep -qw ABOVE <<< "$BLS" \
    && res PASS "40#ls" "gpu-quota ls while B bursts: its slice 10.00 GiB..120.00 GiB and a column ABOVE" "$(grep -F 'bB' <<< "$BLS" | head -1 | tr -s ' ' | cut -c1-200) (transcript: burst-transcript.txt)" \
    || res FAIL "40#ls" "gpu-quota ls while B bursts" "no '10.00 GiB..120.00 GiB' or no ABOVE: $(tr '\n' ';' <<< "$BLS" | tr -s ' ' | cut -c1-400)"
else res FAIL "40#ls" "gpu-quota ls while B bursts" "B not ready"; fi
BV=$(jget $W/b/bB/out/ready.json '[d.get("smi"), d.get("total"), d.get("free"), d.get("got_gib"), d.get("fill_error"), d.get("fill_s"), d.get("base_gbps")]')
AV=$(jget $W/b/bA/out/ready.json '[d.get("smi"), d.get("total"), d.get("free")]')
bnote "views: B [nvidia-smi total,used MiB; cuMemGetInfo total; free; got GiB; fill error; fill s; GB/s] $BV; A [nvidia-smi; total; free] $AV"
VIEWOK=$(jget $W/b/bB/out/ready.json 'int(isinstance(d.get("smi"), list) and d["smi"][0] == 122880 and d.get("total") == 120 << 30)')$(jget $W/b/bA/out/ready.json 'int(isinstance(d.get("smi"), list) and d["smi"][0] == 61440 and d.get("total") == 60 << 30)')
[ "$VIEWOK" = 11 ] && res PASS "40#view" "nvidia-smi and cuMemGetInfo show the limit in a burster (122880 MiB, 120 GiB), the guarantee in A (61440 MiB, 60 GiB)" "B: $BV; A: $AV" \
  || res FAIL "40#view" "total in the burster (120 GiB) and in A (60 GiB)" "B: ${BV:-no ready.json}; A: ${AV:-no ready.json}"
if [ -e $W/b/bA/out/ready.json ] && [ -e $W/b/bB/out/ready.json ] && balive bB; then
  sleep 2  # B's passes before A asks
  SB=$(bmin 180 $(( $(bleft) - 240 )))
  timeout $((SB + 70)) $PY $BP drive $W/b/bA/out --rounds ${BURST_ROUNDS:-10} --gib 50 --hold 2 \
    --budget $SB --cap 60 --bursters $W/b/bB/out --nvml $NVF --label single > $T/bs1 2>> $BR
  if dres $T/bs1; then
    J=$T/bs1.json; S1=$(jget $J 'd["summary"]'); bnote "1-single: $S1"
    [ "$(jget $J 'int(d["rounds"] >= 1 and d["oom_rounds"] == 0 and not d["errors"] and all(g == 50 for g in d["got_gib"]))')" = 1 ] \
      && res PASS "40#evict-single" "A (vram=60g) takes 50 GiB as one torch.empty beside B's 100 GiB burst, ${BURST_ROUNDS:-10} rounds (as the budget allows): no out-of-memory" "$S1" \
      || res FAIL "40#evict-single" "A's 50 GiB as one tensor beside B's burst" "$S1"
  else res FAIL "40#evict-single" "A's 50 GiB as one tensor beside B's burst" "no result from the rounds: $(tail -3 $T/bs1 | tr '\n' ' ' | cut -c1-300)"; fi
  CB=$(bmin 40 $(( $(bleft) - 265 )))
  if [ "$CB" -ge 15 ] && balive bB; then
    timeout $((CB + 50)) $PY $BP drive $W/b/bA/out --rounds ${BURST_CHUNK_ROUNDS:-5} --gib 50 --chunk 1 --hold 2 --budget $CB --first-est 5 \
      --cap 40 --bursters $W/b/bB/out --nvml $NVF --label chunks > $T/bs2 2>> $BR
    if dres $T/bs2; then
      J=$T/bs2.json; S2=$(jget $J 'd["summary"] + "; slowest 1 GiB per round (ms) " + str(d.get("slowest_chunk_ms"))'); bnote "1-chunks: $S2"
      [ "$(jget $J 'int(d["rounds"] >= 1 and d["oom_rounds"] == 0 and not d["errors"])')" = 1 ] \
        && res PASS "40#evict-chunks" "A takes 50 GiB as 50 x 1 GiB beside B's burst (rounds as time allows): no out-of-memory" "$S2" \
        || res FAIL "40#evict-chunks" "A's 50 x 1 GiB beside B's burst" "$S2"
    else res FAIL "40#evict-chunks" "A's 50 x 1 GiB beside B's burst" "no result: $(tail -3 $T/bs2 | tr '\n' ' ' | cut -c1-300)"; fi
  else res SKIP "40#evict-chunks" "A's 50 x 1 GiB beside B's burst" "no time ($(bleft)s left) or B not running"; fi
else res FAIL "40#evict-single" "A's 50 GiB beside B's burst" "A or B not ready (A exit $(brc bA), B exit $(brc bB)): $(tail -c 400 $W/b/bB/run.err | tr '\n' ' ')"; fi
# B at the end: spilled and alive, or ended with its line and exit status 137
BE=$(bend bB); BPASS=$(wc -l < $W/b/bB/out/passes 2>/dev/null)
if [ "$BE" = running ]; then
  bstop bB; BRES=$(cat $W/b/bB/out/result.json 2>/dev/null | cut -c1-300)
  [ "$(jget $W/b/bB/out/result.json 'int(d.get("pass_error") is None and d.get("inconsistent_gib") == 0)')" = 1 ] \
    && res PASS "40#b-end" "B at the end: running (spilled and back), passes on, its data consistent" "running; ${BPASS:-0} passes; at its stop: $BRES" \
    || res FAIL "40#b-end" "B at the end: running, but its passes or data went wrong" "$BRES; $(tail -c 300 $W/b/bB/run.err | tr '\n' ' ')"
else
  BL=$(bline bB)
  [ "$(brc bB)" = 137 ] && [ -n "$BL" ] && res PASS "40#b-end" "B at the end: ended by the fallback (its line, exit status 137)" "$BE; ${BPASS:-0} passes; line: $BL" \
    || res FAIL "40#b-end" "B at the end: neither running nor ended by the fallback" "$BE; ${BPASS:-0} passes; stderr: $(tail -c 400 $W/b/bB/run.err | tr '\n' ' ')"
  bdel bB
fi

#### 2. two bursters: priority 0 (older) and 100 (newest)
b2start() { # PREFIX MEMMAX(or empty): B1 then B2, filled one after the other
  local p=$1
  BMEM=$2 bundle ${p}1 overlay vram=10g vram-limit=60g vram-priority=0 -- $PY /gq/burst.py burster /out ${BURST_FILL2:-55} --secs $((BBUD + 30))
  BMEM=$2 bundle ${p}2 overlay vram=10g vram-limit=60g vram-priority=100 -- $PY /gq/burst.py burster /out ${BURST_FILL2:-55} --wait-go --secs $((BBUD + 30))
  brun ${p}1 $((BBUD + 40)); brun ${p}2 $((BBUD + 40))
  bwait ${p}1 ready.json 120 || bnote "${p}1 not ready: exit $(brc ${p}1); $(tail -c 600 $W/b/${p}1/run.err | tr '\n' ' ')"
  touch $W/b/${p}2/out/go
  bwait ${p}2 ready.json 90 || bnote "${p}2 not ready: exit $(brc ${p}2); $(tail -c 600 $W/b/${p}2/run.err | tr '\n' ' ')"
  bnote "${p}1: $(cut -c1-400 $W/b/${p}1/out/ready.json 2>/dev/null); ${p}2: $(cut -c1-400 $W/b/${p}2/out/ready.json 2>/dev/null)"; }
if [ "$(bleft)" -gt 230 ] && [ -e $W/b/bA/out/ready.json ] && [ ! -e $W/b/bA/rc ]; then
  b2start bP ""
  if [ -e $W/b/bP1/out/ready.json ] && [ -e $W/b/bP2/out/ready.json ]; then
    PB=$(bmin 70 $(( $(bleft) - 150 )))
    timeout $((PB + 70)) $PY $BP drive $W/b/bA/out --rounds ${BURST_ROUNDS2:-3} --gib 50 --hold 2 --budget $PB --cap 60 \
      --bursters $W/b/bP1/out,$W/b/bP2/out --nvml $NVF --label priority > $T/bs3 2>> $BR
    E1=$(bend bP1); E2=$(bend bP2)
    if dres $T/bs3; then
      S3=$(jget $T/bs3.json 'd["summary"]'); bnote "2-priority: $S3; B1 (priority 0) $E1, B2 (priority 100) $E2"
      [ "$(jget $T/bs3.json 'int(d["rounds"] >= 1 and d["oom_rounds"] == 0 and not d["errors"])')" = 1 ] && [ "$E2" = running ] \
        && res PASS "40#priority" "B1 (priority 0, older) and B2 (priority 100, newest), 55 GiB each; A's 50 GiB as one tensor: no out-of-memory, B2 runs on; whose rate falls (figures)" "B1 $E1, B2 $E2; $S3" \
        || res FAIL "40#priority" "two bursters and A's 50 GiB" "B1 $E1, B2 $E2; $S3"
    else res FAIL "40#priority" "two bursters and A's 50 GiB" "no result: $(tail -3 $T/bs3 | tr '\n' ' ' | cut -c1-300)"; fi
  else res FAIL "40#priority" "two bursters and A's 50 GiB" "B1/B2 not ready: B1 exit $(brc bP1), B2 exit $(brc bP2); $(tail -c 300 $W/b/bP1/run.err | tr '\n' ' ')"; fi
  bstop bP1 bP2
else res SKIP "40#priority" "two bursters and A's 50 GiB" "no time ($(bleft)s) or A not running"; fi

#### 2b. the fallback: bursters whose burst cannot go to the host
MM=${BURST_MEMMAX:-8g}
if [ "$(bleft)" -gt 90 ] && [ -e $W/b/bA/out/ready.json ] && [ ! -e $W/b/bA/rc ]; then
  [ -z "$SUPB" ] && bsup
  DM0=$(timeout 5 dmesg 2>/dev/null | wc -l)
  EV0=$(grep -c burst_reclaim $BEV 2>/dev/null); EV0=${EV0:-0}
  b2start bF $MM
  if [ -e $W/b/bF1/out/ready.json ] && [ -e $W/b/bF2/out/ready.json ]; then
    CG1=$(bcg bF1); CG2=$(bcg bF2); CGA=$(bcg bA)
    cgwatch "$CG1" $T/cgF1 $(( $(bleft) + 30 )); cgwatch "$CG2" $T/cgF2 $(( $(bleft) + 30 ))
    bnote "before A asks: F1 cgroup $CG1: $(cgsnap $CG1); F2 cgroup $CG2: $(cgsnap $CG2); A: $(cgsnap $CGA); host $(awk '/MemAvailable/ {printf "%d MiB available", $2/1024}' /proc/meminfo)"
    FB=$(bmin 100 $(( $(bleft) - 25 )))
    timeout $((FB + 40)) $PY $BP drive $W/b/bA/out --rounds 1 --gib 50 --hold 2 --budget $FB --cap $FB \
      --bursters $W/b/bF1/out,$W/b/bF2/out --nvml $NVF --label fallback > $T/bs4 2>> $BR
    dres $T/bs4; TGO=$(jget $T/bs4.json 'd["t_go"][0]')
    for ((i = 0; i < 100; i++)); do [ -e $W/b/bF1/rc ] && break; sleep 0.1; done
    sleep 3  # B2 a while after
    F1E=$(bend bF1); F2E=$(bend bF2); F1L=$(bline bF1); F2L=$(bline bF2)
    F1T=$([ -e $W/b/bF1/rc ] && [ -n "$TGO" ] && $PY -c "print(round($(date -r $W/b/bF1/rc +%s.%N) - $TGO, 2))")
    AG=$(jget $T/bs4.json '"A got %s GiB in %s ms (fill %s ms), error %s" % (d["got_gib"][0], d["alloc_ms"][0], d["fill_ms"][0], d["errors"] or None)')
    EVN=$(grep -c burst_reclaim $BEV 2>/dev/null); EVN=${EVN:-0}; EVL=$(grep burst_reclaim $BEV 2>/dev/null | tail -3 | cut -c1-500)
    DMT=$(timeout 5 dmesg 2>&1 | tail -n +$((${DM0:-0} + 1)) | grep -iE 'oom|killed process|memory cgroup|NVRM|uvm' | tail -12 | cut -c1-200)
    { echo "## fallback (memory limit $MM on B1 and B2)"; echo "A: $AG"
      echo "B1 (priority 0): $F1E${F1T:+, its exit seen $F1T s after A asked}; line: ${F1L:-none}; stderr tail: $(tail -c 400 $W/b/bF1/run.err | tr '\n' ' ')"
      echo "B2 (priority 100): $F2E; line: ${F2L:-none}"
      echo "B1 cgroup at its last: $(cgsnap $CG1 || cat $T/cgF1 2>/dev/null)"; echo "B2 cgroup now: $(cgsnap $CG2 || cat $T/cgF2 2>/dev/null)"; echo "A cgroup: $(cgsnap $CGA)"
      echo "burst_reclaim events: $((EVN - EV0)) new"; echo "$EVL"; echo "dmesg (new lines, filtered): ${DMT:-none or not readable}"
      echo "supervisor: $([ -n "$SUPB" ] && kill -0 $SUPB 2>/dev/null && echo running || echo 'not running'); log tail:"; tail -8 $OUT/burst-supervise.log
      echo "drive: $(jget $T/bs4.json 'd["summary"]')"; } >> $BR
    FIG="A: $AG; B1: $F1E${F1T:+ (${F1T} s after A asked)}; B2: $F2E; B1 memory.events: $(cgsnap $CG1 | grep -o 'events:.*' || grep -o 'events:.*' $T/cgF1 2>/dev/null); B2: $(cgsnap $CG2 | grep -o 'current [0-9]* MiB\|oom_kill [0-9]*' | tr '\n' ' '); dmesg: $(echo "$DMT" | grep -ciE 'killed process|oom') oom lines; line: ${F1L:-none}"
    [ "$(brc bF1)" = 137 ] && [ -n "$F1L" ] && [ "$F2E" = running ] && [ "$(jget $T/bs4.json 'int(d["oom_rounds"] == 0 and not d["errors"] and d["got_gib"][0] == 50)')" = 1 ] \
      && res PASS "40#fallback" "bursters whose burst cannot go to the host (memory.max $MM): A's 50 GiB ends B1 (priority 0, not the newest) with its line and exit 137; B2 runs on; A gets its memory" "$FIG" \
      || res FAIL "40#fallback" "the fallback ends B1 (priority 0), B2 runs on, A gets 50 GiB" "$FIG (details: burst-transcript.txt)"
    grep burst_reclaim $BEV 2>/dev/null | tail -n +$((EV0 + 1)) | grep -q bF1 \
      && res PASS "40#event" "a burst_reclaim line in the host's event log names the ended burster" "$(grep burst_reclaim $BEV | grep bF1 | tail -1 | cut -c1-300)" \
      || res FAIL "40#event" "a burst_reclaim line naming bF1 in the event log ($BEV)" "$((EVN - EV0)) new burst_reclaim lines; $(echo "$EVL" | tail -1 | cut -c1-300)"
  else res FAIL "40#fallback" "the fallback" "B1/B2 with memory.max $MM not ready: B1 $(bend bF1), B2 $(bend bF2); $(tail -c 300 $W/b/bF1/run.err | tr '\n' ' ')"; fi
  bstop bF1 bF2
else res SKIP "40#fallback" "the fallback" "no time ($(bleft)s) or A not running"; fi

#### the way out: everything stopped, whatever happened above
touch $W/b/bA/out/stop
for id in $BIDS; do [ -e $W/b/$id/rc ] || touch $W/b/$id/out/stop; done
sleep 1
for id in $BIDS; do ctr bu state $id > /dev/null 2>&1 && bdel $id; done
[ -n "$SUPB" ] && { kill $SUPB 2>/dev/null; sleep 1; kill -9 $SUPB 2>/dev/null; wait $SUPB 2>/dev/null; }
for p in $CGW; do kill $p 2>/dev/null; done
for p in $BJOBS; do for ((i = 0; i < 50; i++)); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill $p 2>/dev/null; done
kill $NVPID 2>/dev/null; wait $NVPID 2>/dev/null
NV=$($PY $BP nvmlcheck $NVF | grep '^RESULT ' | cut -c8-)
[ "$(echo "$NV" | $PY -c 'import json,sys; d=json.load(sys.stdin); print(int(d["samples"] > 0 and d["over"] == 0))' 2>/dev/null)" = 1 ] \
  && res PASS "40#nvml" "NVML sampled every 0.25 s through the section: used never above the total" "$NV" \
  || res FAIL "40#nvml" "NVML used never above the total" "${NV:-no samples}"
cp $BEV $OUT/burst-events.log 2>/dev/null; cp $T/bs*.json $BRAW/ 2>/dev/null
tail -c 200000 $OUT/burst-supervise.log > $T/sup 2>/dev/null && cp $T/sup $OUT/burst-supervise.log
bnote "section burst done in $((SECONDS - BT0))s; GPU now $(nvidia-smi -i 0 --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null)"
fi
