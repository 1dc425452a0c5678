# Admission and placement: section seed (vram=24g containers until GPU 0 is
# full, the slice back on exit and SIGKILL) and section gpu2 (placement over
# two GPUs, then tests/gpu/multigpu.sh's jobs).
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
