# Section bench: interleaved A/B benchmarks, native against gpu-quota
# (allocation pairs, 32 CUDA starts, ResNet-50, decode), the interceptor's
# start-up, ResNet in a sliced container and container start time.
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
