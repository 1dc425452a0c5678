#!/usr/bin/env bash
# On the 2-GPU machine: NCCL and tensor-parallel jobs in one
# `vram=16g gpus=2` container. Sourced by tests/gpu/run-suite.sh (section
# gpu2, when 2 GPUs are visible; it uses the suite's helpers mkcfg, bundle,
# ctr, res, ...). Run directly it only reports: on fewer than 2 GPUs
# "not run: N GPU(s) visible"; otherwise it runs the suite's gpu2 section:
#   bash tests/gpu/multigpu.sh
# Every process keeps NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1 (the suite exports them, bundle.py puts them in every
# container, mgpu.py forces them again before importing torch); nothing here
# calls cuMulticastCreate.
#
# Checks (each a summary row, issue "13#N"):
#  1 2-process NCCL all-reduce (one rank per GPU): results exact; NVML per
#    GPU of the container's processes <= slice + 1 %
#  2 2-process tensor-parallel MLP (column- then row-sharded linear, forward +
#    backward, 300 SGD steps) equals a single-GPU reference; NVML as in 1
#  3 rank 1 allocates past its slice: torch.cuda.OutOfMemoryError there, the
#    one gpu-quota line names GPU 1, rank 0 unaffected (allocates 8 GiB, no
#    gpu-quota line), both all-reduce afterwards; NVML as in 1
#  4 release: each job's slices are back after it exits; SIGKILL of a
#    running 2-rank job gives them back too (no delete) and leaves no process
#    on either GPU
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "${n:-0}" -lt 2 ]; then echo "not run: ${n:-0} GPU(s) visible"; exit 0; fi
  SECTIONS=gpu2 exec bash "$(dirname "$0")/run-suite.sh"
fi

MG=$REPO/tests/gpu/mgpu.py
MG_SLICE_GIB=16

# mg_job ID MODE ARGS... : mgpu.py MODE in a vram=16g gpus=2 container while
# the host samples NVML for the container's processes; the ranks hold their
# memory until the sampler has seen both, then finish.
mg_ready() { # OUT HOLD SECS: both ranks hold (HOLD.ready0/1), or the job ended (OUT/done)
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    [ -e "$2.ready0" ] && [ -e "$2.ready1" ] && return 0
    [ -e "$1/done" ] && return 1
    sleep 0.1
  done; return 1; }
mg_job() {
  local id=$1 mode=$2; shift 2
  local o=$W/b/$id/out
  MG_LEFT="?"
  bundle $id overlay vram=${MG_SLICE_GIB}g gpus=2 -- sh -c "$PY /gq/mgpu.py $mode --out /out/job --slice-gib $MG_SLICE_GIB --hold-file /out/hold --hold-secs 120 $* > /out/job.log 2>&1; touch /out/done" || return 1
  if ! ctr h2m create --bundle $W/b/$id $id > $W/b/$id/create.out 2> $W/b/$id/create.err < /dev/null; then
    echo "$id create refused: $(cat $W/b/$id/create.err)"; return 1
  fi
  local pid; pid=$(ctr h2m state $id | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
  timeout 400 $PY $MG sample --root-pid "$pid" --stop-file $o/done --slice-gib $MG_SLICE_GIB --secs 380 > $W/b/$id/sample.log 2>&1 &
  local sp=$!
  ctr h2m start $id < /dev/null
  mg_ready $o $o/hold 300 && sleep 2 || echo "$id: the ranks never held their memory"
  touch $o/hold
  wait_for $o/done 300 || echo "$id did not finish"
  wait $sp
  echo "$id: $(tail -3 $o/job.log 2>/dev/null | cut -c1-600)"; echo "$id NVML: $(rjson $W/b/$id/sample.log)"
  for k in $(seq 50); do [ "$(state_of h2m $id)" = stopped ] && break; sleep 0.1; done
  MG_LEFT=$(nres h2m)   # reservations left after the job exited (before delete)
  ctr h2m delete --force $id < /dev/null; clog $id
  cp $W/b/$id/sample.log $o/ 2>/dev/null
}
nvml_fig() { rget $W/b/$1/sample.log '(d["peak_mib"], "limit", round(d["limit_mib"]), "samples", d["samples"])'; }

sec "issue 13: NCCL and tensor-parallel jobs in one vram=${MG_SLICE_GIB}g gpus=2 container"
mkcfg h2m 'reserve = "2g"'
REL=""

mg_job mg1 allreduce --mib 512 --iters 20
if rok $W/b/mg1/out/job.log && rok $W/b/mg1/sample.log; then res PASS "13#1" "2-rank NCCL all-reduce (512 MiB x 20) exact; NVML per GPU <= slice + 1 %" "$(nvml_fig mg1)"
else res FAIL "13#1" "2-rank NCCL all-reduce" "$(rjson $W/b/mg1/out/job.log | cut -c1-300) NVML $(rjson $W/b/mg1/sample.log)"; fi
REL="$REL mg1:$MG_LEFT"

mg_job mg2 tp --steps 300
if rok $W/b/mg2/out/job.log && rok $W/b/mg2/sample.log; then
  res PASS "13#2" "2-rank tensor-parallel MLP, 300 steps fwd+bwd = single-GPU reference; NVML per GPU <= slice + 1 %" "$(rget $W/b/mg2/out/job.log '[(r.get("rel_err_w1"), r.get("rel_err_w2"), r.get("loss_first"), r.get("loss_last")) for r in d["ranks"] if r["rank"] == 0]') $(nvml_fig mg2)"
else res FAIL "13#2" "2-rank tensor-parallel MLP" "$(rjson $W/b/mg2/out/job.log | cut -c1-300) NVML $(rjson $W/b/mg2/sample.log)"; fi
REL="$REL mg2:$MG_LEFT"

mg_job mg3 over --over-rank 1
E1=$W/b/mg3/out/job/rank1.err; E0=$W/b/mg3/out/job/rank0.err
L1=$(grep '^gpu-quota:' "$E1" 2>/dev/null); N1=$(grep -c '^gpu-quota:' "$E1" 2>/dev/null); N0=$(grep -c '^gpu-quota:' "$E0" 2>/dev/null)
OOM=$(rget $W/b/mg3/out/job.log '[r.get("oom") for r in d["ranks"] if r["rank"] == 1][0]')
echo "mg3: rank 1 gpu-quota lines ($N1): $L1; rank 0 lines: $N0; OOM: $OOM"
if rok $W/b/mg3/out/job.log && rok $W/b/mg3/sample.log && [ "$N1" = 1 ] && [ "$N0" = 0 ] && echo "$L1" | grep -q ' on GPU 1, ' && echo "$OOM" | grep -q 'CUDA out of memory'; then
  res PASS "13#3" "rank 1 over its slice: OutOfMemoryError there, one gpu-quota line naming GPU 1; rank 0 unaffected" "${L1:0:160}; OOM ${OOM:0:100}; $(nvml_fig mg3)"
else res FAIL "13#3" "over the slice on one rank of two" "lines r1=$N1 r0=$N0 ${L1:0:160}; OOM ${OOM:0:100}; $(rjson $W/b/mg3/out/job.log | cut -c1-300) NVML $(rjson $W/b/mg3/sample.log)"; fi
REL="$REL mg3:$MG_LEFT"

# SIGKILL of a running 2-rank job (both ranks holding their NCCL buffers)
bundle mg4 overlay vram=${MG_SLICE_GIB}g gpus=2 -- sh -c "$PY /gq/mgpu.py allreduce --out /out/job --hold-file /out/never --hold-secs 300 > /out/job.log 2>&1; touch /out/done"
KFIG="create refused"
if ctr h2m create --bundle $W/b/mg4 mg4 > $W/b/mg4/create.out 2> $W/b/mg4/create.err < /dev/null; then
  MG4PID=$(ctr h2m state mg4 | $PY -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
  ctr h2m start mg4 < /dev/null
  mg_ready $W/b/mg4/out $W/b/mg4/out/never 300 || echo "mg4: the ranks never held their memory"
  BEFORE=$(nres h2m); PIDS=$($PY -c "import sys; sys.path.insert(0, '$REPO/tests/gpu'); import mgpu; print(' '.join(map(str, sorted(mgpu._tree($MG4PID)))))")
  ctr h2m kill mg4 KILL < /dev/null; for k in $(seq 100); do [ "$(state_of h2m mg4)" = stopped ] && break; sleep 0.1; done
  sleep 2
  AFTER=$(nres h2m); LEFTP=""
  for g in 0 1; do for p in $(apps_mib $g | cut -d, -f1); do case " $PIDS " in *" $p "*) LEFTP="$LEFTP gpu$g:$p";; esac; done; done
  KFIG="reservations before $BEFORE, after SIGKILL $AFTER; processes left on the GPUs: [${LEFTP# }]"
fi
ctr h2m delete --force mg4 < /dev/null; clog mg4
echo "release: after exit$REL; $KFIG"
if [ "$REL" = " mg1:0 mg2:0 mg3:0" ] && [ "${BEFORE:-}" = 1 ] && [ "${AFTER:-}" = 0 ] && [ -z "${LEFTP-x}" ]; then
  res PASS "13#4" "gpus=2 slices released on exit (3 jobs) and on SIGKILL of a running 2-rank job" "exit:$REL; $KFIG"
else res FAIL "13#4" "gpus=2 release on exit / SIGKILL" "exit:$REL; $KFIG"; fi
