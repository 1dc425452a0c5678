#!/usr/bin/env bash
# CPU dry run of tests/gpu/multigpu.sh's orchestration (no GPU, no torch): the
# suite's helpers and the container runtime are stubbed (a "container" writes
# what the two ranks would), nvidia-smi is a stub reporting DRY_PEAK MiB on the
# second GPU. Checks that the four 13#N rows pass with a conforming run and
# that 13#1-3 fail when NVML shows more than slice + 1 %.
#   bash tests/gpu/multigpu_dry.sh
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
D=$(mktemp -d /tmp/gq-mgdry.XXXXXX); trap 'rm -rf "$D"; rm -rf "$REPO/tests/gpu/__pycache__"' EXIT
one() { # DRY_PEAK -> the summary rows in $D/sum
  ( W=$D/w; rm -rf $W; mkdir -p $W/b $D/bin; PY=python3; SUM=$D/sum; : > $SUM; echo 0 > $D/nres
    sec() { echo "== $*"; }
    res() { echo "$1 $2" >> $SUM; echo "[$1] $2 $3 — $4"; }
    rjson() { grep '^RESULT ' "$1" 2>/dev/null | tail -1 | cut -c8-; }
    rok() { [ "$(rjson "$1" | $PY -c 'import json,sys; print(json.load(sys.stdin)["ok"])' 2>/dev/null)" = True ]; }
    rget() { rjson "$1" | $PY -c "import json,sys; d=json.load(sys.stdin); print($2)" 2>/dev/null; }
    wait_for() { local f=$1 s=$2 i; for ((i = 0; i < s * 10; i++)); do [ -e "$f" ] && return 0; sleep 0.1; done; return 1; }
    mkcfg() { :; }; clog() { :; }; apps_mib() { :; }
    nres() { cat $D/nres; }; state_of() { echo stopped; }
    bundle() { mkdir -p $W/b/$1/out; }
    ctr() { local id=$3
      case $2 in
        create) echo 1 > $D/nres ;;
        state) echo "{\"pid\": $$, \"status\": \"running\"}" ;;
        start) ( o=$W/b/$id/out; mkdir -p $o/job; sleep 0.5
                 h=$o/hold; [ $id = mg4 ] && h=$o/never; touch $h.ready0 $h.ready1
                 [ $id = mg4 ] && exit 0
                 for i in $(seq 50); do [ -e $h ] && break; sleep 0.1; done
                 if [ $id = mg3 ]; then
                   echo "gpu-quota: cuMemAlloc of 1.00 GiB refused: slice 16.00 GiB on GPU 1, 15.50 GiB in use by this container" > $o/job/rank1.err; : > $o/job/rank0.err
                   echo 'RESULT {"ok": true, "ranks": [{"rank": 0, "ok": true}, {"rank": 1, "ok": true, "oom": "CUDA out of memory. Tried to allocate 1.00 GiB"}]}' > $o/job.log
                 else echo 'RESULT {"ok": true, "ranks": [{"rank": 0, "ok": true, "rel_err_w1": 1e-6, "rel_err_w2": 2e-6, "loss_first": 1.4, "loss_last": 0.3}, {"rank": 1, "ok": true}]}' > $o/job.log; fi
                 echo 0 > $D/nres; touch $o/done ) & ;;
        kill|delete) echo 0 > $D/nres ;;
      esac; }
    printf '#!/bin/sh\necho "GPU-aaa, %s, 9000"\necho "GPU-bbb, %s, %s"\n' $$ $$ "$1" > $D/bin/nvidia-smi; chmod +x $D/bin/nvidia-smi
    PATH=$D/bin:$PATH
    . $REPO/tests/gpu/multigpu.sh ) > $D/log.$1 2>&1
}
r=0
one 9000;  got=$(tr '\n' ' ' < $D/sum)
[ "$got" = "PASS 13#1 PASS 13#2 PASS 13#3 PASS 13#4 " ] || { echo "conforming run: $got"; cat $D/log.9000; r=1; }
one 17000; got=$(tr '\n' ' ' < $D/sum)
[ "$got" = "FAIL 13#1 FAIL 13#2 FAIL 13#3 PASS 13#4 " ] || { echo "NVML over slice + 1 %: $got"; cat $D/log.17000; r=1; }
[ $r = 0 ] && echo "multigpu dry run: ok"
exit $r
