# Section graphs: CUDA graphs under both PyTorch allocators (host preload and
# container), graph memory held against the slice, odd driver calls answered
# as the driver does, and the standalone context charge (tests/gpu/graphs.py).
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
