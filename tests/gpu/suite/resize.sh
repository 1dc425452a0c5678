# Section resize: `gpu-quota resize` of a running container under PyTorch's
# default allocator, cudaMallocAsync and CuPy (tests/gpu/resize.py).
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
