#!/usr/bin/env bash
# Second round of facts for burstable slices (docs/burst.md, "Still to
# measure"), on the plain driver (no gpu-quota): PyTorch as the guaranteed
# process A beside a burster B's 100 GiB of managed memory, up to 10 rounds
# as one tensor and as 1 GiB tensors; B idle against B busy; cuMemCreate,
# pool growth and a new context as the evicting call; what nvidia-smi, NVML,
# /proc and the memory cgroup show for managed memory, resident and spilled;
# how long a killed burster's memory takes to come back.
#   bash tests/gpu/burst-facts2.sh OUT     as root on the H200: OUT/burst-facts2.txt
#                                          (+ OUT/burst-facts2-raw/), in < 8 min
#   bash tests/gpu/burst-facts2.sh --selftest   the arithmetic and the report, no GPU
# burst-facts2.py runs the cases, each within its own budget (a hung one is
# cut, its processes killed); BF2_LIMIT (default 430 s) bounds them all and
# `timeout` backs that up. Every worker is ended on the way out, however it
# ends: by the orchestrator, by timeout's signal to its process group, and
# last by pid here. BF2_FAKE=1 simulates the GPU (to try the orchestration).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=$(command -v python3)
[ "${1:-}" = --selftest ] && exec "$PY" "$HERE/burst-facts2.py" --selftest
OUT=$(realpath -m "${1:-${OUT:-/tmp/gq-out}}"); mkdir -p "$OUT"; R=$OUT/burst-facts2.txt
LIMIT=${BF2_LIMIT:-430}
T=$(mktemp -d /tmp/bf2.XXXX)
: > "$R"
exec > >(tee -a "$R") 2>&1
TEE=${!:-}
TP=
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$TP" ]; then kill -TERM "$TP" 2>/dev/null; sleep 3; fi
  # anything the orchestrator started and that is still running: by pid,
  # and only while that pid is still one of its workers
  for p in $(cat "$T/pids" 2>/dev/null); do
    if grep -qs burst-facts2 "/proc/$p/cmdline"; then kill -KILL "$p" 2>/dev/null && echo "killed leftover worker $p"; fi
  done
  cg=$(cat "$T/cgroup" 2>/dev/null)
  if [ -n "$cg" ] && [ -d "$cg" ]; then sleep 1; rmdir "$cg" 2>/dev/null || echo "cgroup $cg not removed"; fi
  echo "GPU after the script (nvidia-smi used,total MiB): $(nvidia-smi -i 0 --query-gpu=memory.used,memory.total --format=csv,noheader,nounits 2>/dev/null | tr -d ' ')"
  rm -rf "$T"
  exec >&- 2>&-
  if [ -n "$TEE" ]; then wait "$TEE" 2>/dev/null || sleep 1; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$PY" "$HERE/burst-facts2.py" --selftest || echo "selftest failed: measuring anyway"
timeout -k 5 $((LIMIT + 20)) "$PY" "$HERE/burst-facts2.py" run "$OUT" "$T" "$LIMIT" &
TP=$!
wait "$TP"; rc=$?
TP=
[ "$rc" = 124 ] && echo "burst-facts2.py ran past $((LIMIT + 20)) s and was ended by timeout"
echo "burst-facts2.py exit status $rc"
