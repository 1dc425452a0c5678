# Section mpsbench (only when named in SECTIONS): containers without sm=,
# this build against the build before sm= (.gpu-carry/old, from
# `make gpu-carry GQ_OLD=DIR`), interleaved.
# Sourced by tests/gpu/run-suite.sh, whose variables and helpers (res, want,
# mkcfg, bundle, ctr, ...) it uses; it runs where that script sources it.

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
    res INFO "30#bench" "1 MiB alloc+free pair, $([ $f = a1 ] && echo 1 process || echo 8 processes), no sm, no vram-limit: this build vs the build before, median of ${MB_ROUNDS:-10} interleaved" "new $MN ns, old $MO ns, ratio $($PY -c "print(round($MN/$MO, 3))")"
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
  # the allocation path inside a container (its grant, no vram-limit), each
  # round a fresh container of each build, interleaved
  if [ $OVERLAY_OK = 1 ]; then
    bundle abn overlay vram=64g -- $B/bench_alloc 5000 1048576 1; bundle abo overlay vram=64g -- $B/bench_alloc 5000 1048576 1
    cn=(); co=()
    for k in $(seq ${MB_ROUNDS:-10}); do
      cn+=($(GPU_QUOTA_CONFIG=$W/mbn/config.toml timeout 60 $B/gpu-quota-runtime --root $W/mbn/root run --bundle $W/b/abn cn$k 2>&1 < /dev/null | bal))
      co+=($(GPU_QUOTA_CONFIG=$W/mbo/config.toml timeout 60 $O/gpu-quota-runtime --root $W/mbo/root run --bundle $W/b/abo co$k 2>&1 < /dev/null | bal))
    done
    echo "container alloc new: ${cn[*]} | old: ${co[*]}" | tee -a $BENCH
    CN=$(med "${cn[@]}"); CO=$(med "${co[@]}")
    res INFO "30#bench" "1 MiB alloc+free pair in a container with vram=64g (its grant; no sm, no vram-limit): this build vs the build before, median of ${MB_ROUNDS:-10} interleaved" "new ${CN:-?} ns, old ${CO:-?} ns, ratio $($PY -c "print(round(${CN:-0}/${CO:-1}, 3))" 2>/dev/null)"
    for m in $W/b/abn/rootfs $W/b/abo/rootfs; do umount $m 2>/dev/null; done
  fi
  res INFO "30#bench" "container start+run of \`true\` with vram=1g (no sm, no vram-limit), busybox rootfs: this build vs the build before, p50 of ${MB_START:-20} interleaved" "new $(med "${tn[@]}") ms, old $(med "${to[@]}") ms; ledgers after: $(nres mbn) and $(nres mbo) reservations"
else res SKIP "30#bench" "old build" "no $O (make gpu-carry GQ_OLD=DIR)"; fi
fi
