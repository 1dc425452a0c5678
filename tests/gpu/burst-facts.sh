#!/usr/bin/env bash
# Facts for burstable slices, on the plain driver (no gpu-quota): does a
# cudaMalloc in process A make the driver evict process B's managed memory,
# how long does A wait, what does NVML show meanwhile, and what does B's
# throughput do. A device-memory holder is the negative control: there A's
# allocation must fail. Writes $OUT/burst-facts.txt. Run as root on the H200.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/gq-out}; mkdir -p "$OUT"; R=$OUT/burst-facts.txt
PY=$(command -v python3); T=$(mktemp -d /tmp/bf.XXXX)
exec > >(tee -a "$R") 2>&1
smi() { nvidia-smi -i 0 --query-gpu=memory.used,memory.total --format=csv,noheader,nounits | tr -d ' '; }
watch_smi() { while :; do echo "smi $(date +%s.%N | cut -c1-14) $(smi)"; sleep 0.25; done > "$1" 2>/dev/null & WPID=$!; }
maxused() { awk '{split($3, a, ","); if (a[1] > m) m = a[1]; t = a[2]} END {print m " of " t " MiB"}' "$1"; }
echo "host memory: $(free -g | awk '/Mem:/ {print $2 " GiB total, " $7 " GiB available"}')"
echo "GPU before: $(smi)"
# CASE KIND HOLD_GIB GRAB_GIB CHUNK
run_case() {
  local name=$1 kind=$2 hg=$3 gg=$4 ch=${5:-0}
  echo; echo "== $name: B holds $hg GiB $kind, then A cudaMallocs $gg GiB (chunk ${ch:-all})"
  rm -f $T/ready; watch_smi $T/smi-$name
  timeout 120 $PY burst-facts.py hold $kind $hg ${HOLD_SECS:-40} $T/ready > $T/hold-$name 2>&1 & HP=$!
  for i in $(seq 600); do [ -e $T/ready ] && break; kill -0 $HP 2>/dev/null || break; sleep 0.1; done
  echo "B ready: $(grep '^hold' $T/hold-$name); GPU $(smi)"
  sleep 4
  GRAB_HOLD=8 timeout 90 $PY burst-facts.py grab $gg $ch > $T/grab-$name 2>&1
  echo "A: $(grep '^RESULT' $T/grab-$name || tail -3 $T/grab-$name)"
  echo "GPU after A: $(smi)"
  wait $HP; kill $WPID 2>/dev/null; wait $WPID 2>/dev/null
  echo "B passes (t, GB/s): $(grep '^pass' $T/hold-$name | awk '{printf "%s %s; ", $2, $3}' | cut -c1-1500)"
  echo "B: $(grep '^RESULT' $T/hold-$name || tail -3 $T/hold-$name)"
  echo "NVML max used during the case: $(maxused $T/smi-$name)"
}
run_case managed-all managed 100 50
run_case managed-chunks managed 100 50 1
run_case device-control device 100 50
echo; echo "GPU at the end: $(smi)"
rm -rf $T
