#!/usr/bin/env bash
# Operator view on a real GPU: two containers with PyTorch
# processes holding memory inside their slices, then
#   $OUT/operator-ls.txt        gpu-quota ls
#   $OUT/operator-top.txt       a captured frame of gpu-quota top (tmux
#                               capture-pane; without tmux: top --once)
#   $OUT/operator-metrics.txt   a scrape of gpu-quota metrics --listen
#   $OUT/operator-summary.txt   the checks, one line each (PASS/FAIL)
#   $OUT/operator.log           everything else
# Run on the device machine as root from the repository root, after
# `make gpu-carry` here:   bash tests/gpu/operator.sh
# Env: GQ_CARRY (default .gpu-carry: bin/{gpu-quota,gpu-quota-runtime,
# gpu-quota-hook,runc,busybox}, lib/libgpuquota.so), TMUX_BIN, GIB_A/GIB_B
# (slices, default 8 and 12). Finishes within 90 s (torch start included).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
C=${GQ_CARRY:-$REPO/.gpu-carry}; B=$C/bin; SO=$C/lib/libgpuquota.so
OUT=${OUT:-/tmp/gq-out}; mkdir -p "$OUT"
LOG=$OUT/operator.log; SUM=$OUT/operator-summary.txt; : > "$SUM"
exec 3>&1 > >(tee -a "$LOG") 2>&1
PY=$(command -v python3)
GA=${GIB_A:-8}; GB=${GIB_B:-12}
W=$(mktemp -d /tmp/gqop.XXXX)
T0=$SECONDS
ok() { echo "PASS $*" | tee -a "$SUM"; }
bad() { echo "FAIL $*" | tee -a "$SUM"; }
wait_for() { local i; for ((i = 0; i < $2 * 10; i++)); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
cleanup() {
  [ -n "${EXP:-}" ] && kill "$EXP" 2>/dev/null
  [ -n "${TMUXS:-}" ] && $TMUX_BIN -L gqop kill-server 2>/dev/null
  for id in opa opb; do touch $W/b/$id/out/release 2>/dev/null; done
  for id in opa opb; do ctr delete --force $id < /dev/null > /dev/null 2>&1; done
  for id in opa opb; do umount $W/b/$id/rootfs 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
for f in gpu-quota gpu-quota-runtime gpu-quota-hook runc; do [ -x "$B/$f" ] || { bad "missing $B/$f (make gpu-carry)"; exit 1; }; done
printf '#!/bin/sh\nexport LD_LIBRARY_PATH=%s\nexec %s "$@"\n' "$C/lib" "$B/runc" > $W/runc; chmod +x $W/runc
mkdir -p $W/ledger $W/state $W/root $W/b
cat > $W/config.toml <<EOT
ledger_dir = "$W/ledger"
state_dir = "$W/state"
runc = "$W/runc"
hook = "$B/gpu-quota-hook"
interceptor = "$SO"
gpus = ["0"]
log = "file"
log_file = "$W/events.log"
EOT
printf '%s\n' "${GQ_EXTRA_CONFIG:-}" >> $W/config.toml   # e.g. [driver] bin_dirs, or a static inventory for a dry run
export GPU_QUOTA_CONFIG=$W/config.toml
ctr() { timeout 60 $B/gpu-quota-runtime --root $W/root "$@"; }
gq() { timeout 20 $B/gpu-quota "$@"; }
# the host's python (and torch) in an overlay of /, its other mounts bound in
PYBINDS=""
for d in $($PY -c 'import sys, os, torch; print(sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(torch.__file__)), os.path.realpath(sys.executable))'); do
  m=$(findmnt -n -o TARGET -T "$d"); [ "$m" != / ] && case " $PYBINDS " in *" --bind $m:$m:ro "*) ;; *) PYBINDS="$PYBINDS --bind $m:$m:ro";; esac
done
job() { # ID GIB: a container whose PyTorch process holds GIB-1 GiB until /out/release
  local id=$1 d=$W/b/$1; mkdir -p $d/upper $d/work $d/rootfs
  mount -t overlay overlay -o lowerdir=/,upperdir=$d/upper,workdir=$d/work $d/rootfs || return 1
  $PY $REPO/tests/gpu/bundle.py $d --rootfs $d/rootfs --ann vram=${2}g --ann gpu=0 $PYBINDS --bind $REPO/tests/gpu:/gq:ro -- \
    sh -c "$PY /gq/work.py torch --gib $2 --ready /out/ready --hold /out/release --hold-secs 75 > /out/log 2>&1"
  ctr create --bundle $d $id < /dev/null > $d/create.out 2> $d/create.err || { cat $d/create.err; return 1; }
  ctr start $id < /dev/null
}
job opa $GA && job opb $GB || bad "containers did not start"
for id in opa opb; do wait_for $W/b/$id/out/ready ${READY_SECS:-50} || bad "$id: torch not ready after ${READY_SECS:-50} s: $(tail -3 $W/b/$id/out/log 2>/dev/null | tr '\n' ' ')"; done
sleep 1
echo "[t=$((SECONDS - T0))s] both jobs hold their memory"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -i 0

gq ls > $OUT/operator-ls.txt 2>&1; cat $OUT/operator-ls.txt
grep -q '^opa ' $OUT/operator-ls.txt && grep -q '^opb ' $OUT/operator-ls.txt && ok "ls lists both containers" || bad "ls: $(head -5 $OUT/operator-ls.txt | tr '\n' ' ')"

# scrape
$B/gpu-quota metrics --listen 127.0.0.1:0 2> $W/exp.err & EXP=$!
wait_for_line() { local i; for ((i = 0; i < 50; i++)); do grep -q 'http://' $W/exp.err && return 0; sleep 0.1; done; return 1; }
wait_for_line; ADDR=$(grep -o 'http://[^/]*' $W/exp.err | head -1)
$PY - "$ADDR" "$OUT/operator-metrics.txt" <<'EOF'
import sys, urllib.request
r = urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10)
open(sys.argv[2], "wb").write(r.read())
print("content-type:", r.headers["Content-Type"])
EOF
M=$OUT/operator-metrics.txt
grep -E '^gpu_quota_(gpu_(reserved|used|capacity)_bytes|container_(slice|used)_bytes|admissions_total)' $M
val() { grep -E "^$1" $M | head -1 | awk '{print $NF}'; }
GIBB=1073741824
for id in opa:$GA opb:$GB; do n=${id%%:*}; g=${id##*:}
  s=$(val "gpu_quota_container_slice_bytes\\{container=\"$n\"")
  u=$(val "gpu_quota_container_used_bytes\\{container=\"$n\"")
  if [ "${s:-0}" = $((g * GIBB)) ] && [ "${u:-0}" -ge $(((g - 1) * GIBB)) ] && [ "${u:-0}" -le $((g * GIBB)) ]; then ok "scrape: $n slice ${g} GiB, used $((u >> 20)) MiB (its PyTorch process)"
  else bad "scrape: $n slice=${s:-none} used=${u:-none}"; fi
done
PHYS=$(val 'gpu_quota_gpu_used_bytes\{gpu="0"')
RES=$(val 'gpu_quota_gpu_reserved_bytes\{gpu="0"')
[ -n "$PHYS" ] && [ "$PHYS" -gt $(((GA + GB - 2) * GIBB)) ] && ok "scrape: GPU 0 physically used $((PHYS >> 20)) MiB (NVML) >= the two jobs; reserved $((RES >> 20)) MiB" || bad "scrape: gpu_used_bytes=${PHYS:-absent} reserved=${RES:-none}"
[ "$(val gpu_quota_admissions_total)" = 2 ] && ok "scrape: admissions_total 2" || bad "admissions_total $(val gpu_quota_admissions_total)"

# top: a frame from a real terminal
if [ -z "${TMUX_BIN:-}" ]; then
  TMUX_BIN=$(command -v tmux || true)
  if [ -z "$TMUX_BIN" ] && [ -x $B/tmux ]; then # carried: .gpu-carry/bin/tmux, its libraries in .gpu-carry/lib
    printf '#!/bin/sh\nexport LD_LIBRARY_PATH=%s\nexec %s "$@"\n' "$C/lib" "$B/tmux" > $W/tmux; chmod +x $W/tmux; TMUX_BIN=$W/tmux
  fi
fi
if [ -n "$TMUX_BIN" ] && [ -x "$TMUX_BIN" ]; then
  TMUXS=1
  $TMUX_BIN -L gqop new-session -d -s top -x 150 -y 32 "GPU_QUOTA_CONFIG=$W/config.toml $B/gpu-quota top; echo \$? > $W/top.rc; sleep 30"
  sleep 2.5
  $TMUX_BIN -L gqop capture-pane -p -t top > $OUT/operator-top.txt
  $TMUX_BIN -L gqop send-keys -t top q
  wait_for $W/top.rc 5
  grep -q opa $OUT/operator-top.txt && grep -q opb $OUT/operator-top.txt && [ "$(cat $W/top.rc 2>/dev/null)" = 0 ] \
    && ok "top (tmux): frame shows both containers; q exits 0" || bad "top (tmux): rc=$(cat $W/top.rc 2>/dev/null)"
else
  gq top --once > $OUT/operator-top.txt 2>&1
  grep -q opa $OUT/operator-top.txt && ok "top --once (no tmux on this machine): frame shows both containers" || bad "top --once"
fi
cat $OUT/operator-top.txt

for id in opa opb; do touch $W/b/$id/out/release; done
for id in opa opb; do for k in $(seq 100); do grep -q '^RESULT' $W/b/$id/out/log 2>/dev/null && break; sleep 0.1; done; ctr delete --force $id < /dev/null; done
grep -c '"event":"admission"' $W/events.log | grep -q '^2$' && grep -c '"event":"release"' $W/events.log | grep -q '^2$' \
  && ok "event log: 2 admissions, 2 releases" || bad "event log: $(cat $W/events.log)"
cp $W/events.log $OUT/operator-events.log
echo "[t=$((SECONDS - T0))s] done: $(grep -c ^PASS $SUM) passed, $(grep -c ^FAIL $SUM) failed"
[ "$(grep -c ^FAIL "$SUM")" = 0 ]
