#!/usr/bin/env bash
# What MPS does, measured before gpu-quota's sm= was designed around it (H200,
# one private control daemon; no gpu-quota involved). Writes $OUT/mps-facts.txt.
# Each client runs in its own mount namespace, as a container would: the pipe
# directory bound read-only at /run/mps, /dev/shm either the daemon's or a
# private tmpfs. Waits name their jobs: a bare `wait` would also wait for
# the `tee` of this script's output, which never ends (it stopped the first
# run at the step of a client beside a process outside MPS).
set -u
OUT=${OUT:-/tmp/gq-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/mps-facts.txt") 2>&1
PY=$(command -v python3); W=$(cd "$(dirname "$0")" && pwd)/mps.py
CTL=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)
D=$(mktemp -d /tmp/mpsf.XXXX); mkdir -p $D/pipe $D/log $D/shm $D/pshm
mount -t tmpfs -o size=1g,mode=1777 shm $D/shm
export -n CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
sec() { echo; echo "== [t=${SECONDS}s] $*"; }
# client NAME SHM(shared|private) ENV... -- CMD: one client in its own mount namespace
client() {
  local shm=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  unshare -m --propagation private env -i PATH=$PATH HOME=/root PYTHONUNBUFFERED=1 "${envs[@]}" bash -c '
    mkdir -p /run/mps && mount --bind -o ro '"$D"'/pipe /run/mps && mount -o remount,bind,ro /run/mps
    if [ '"$shm"' = shared ]; then mount --bind '"$D"'/shm /dev/shm; else mount -t tmpfs -o size=64m shm /dev/shm; fi
    exec "$@"' _ "$@"
}
ctl() { CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; }
sec "control daemon in its own mount namespace, /dev/shm = $D/shm"
unshare -m --propagation private env -i PATH=$PATH CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_LOG_DIRECTORY=$D/log \
  bash -c "mount --bind $D/shm /dev/shm && exec $CTL -d"; echo "start rc=$?"
sleep 1; ps -eo pid,ppid,user,args | grep -i [m]ps
echo "pipe:"; ls -la $D/pipe; echo "log:"; ls -la $D/log; echo "shm:"; ls -la $D/shm
sec "matmul without MPS (baseline, 20 s)"; $PY $W mm 20
for p in 100 50 25; do
  sec "client, shared shm, ro pipe dir, ACTIVE_THREAD_PERCENTAGE=$p"
  client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$p -- timeout 90 $PY $W mm 15; echo "rc=$?"
done
echo "shm while idle:"; ls -la $D/shm; echo "pipe now:"; ls -la $D/pipe
echo "get_server_list:"; echo get_server_list | ctl
sec "client with a PRIVATE /dev/shm (60 s timeout)"
client private CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 -- timeout 60 $PY $W mm 10; echo "rc=$?"
sec "launched at 25, the process sets 100 before CUDA init"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 -- timeout 90 $PY $W mm 15 --set-env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100; echo "rc=$?"
sec "launched at 100, the process sets 25 before CUDA init (is the env read at init?)"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 -- timeout 90 $PY $W mm 15 --set-env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25; echo "rc=$?"
sec "launched as a client, the process unsets CUDA_MPS_PIPE_DIRECTORY before init (does it leave MPS?)"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 -- timeout 90 $PY $W mm 15 --set-env CUDA_MPS_PIPE_DIRECTORY= ; echo "rc=$?"
sec "pinned device memory limit 0=4096M: 3 GiB then 2 GiB"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M -- timeout 90 $PY $W alloc 3 2; echo "rc=$?"
sec "an MPS client at 50% and a process outside MPS at once (15 s each)"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- timeout 90 $PY $W mm 15 > $D/a.out 2>&1 &
$PY $W mm 15 > $D/b.out 2>&1; wait $!
echo "MPS client 50%: $(grep RESULT $D/a.out)"; echo "outside MPS: $(grep RESULT $D/b.out)"
sec "two clients at 50% at once"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- timeout 90 $PY $W mm 15 > $D/a.out 2>&1 &
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- timeout 90 $PY $W mm 15 > $D/b.out 2>&1; wait $!
echo "A: $(grep RESULT $D/a.out)"; echo "B: $(grep RESULT $D/b.out)"
sec "a client issuing control commands through its read-only pipe dir"
client shared -- bash -c "echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=/run/mps timeout 10 $CTL; echo rc=\$?; echo 'set_default_active_thread_percentage 10' | CUDA_MPS_PIPE_DIRECTORY=/run/mps timeout 10 $CTL; echo rc=\$?; echo get_default_active_thread_percentage | CUDA_MPS_PIPE_DIRECTORY=/run/mps timeout 10 $CTL"
echo "from the host: $(echo get_default_active_thread_percentage | ctl)"; echo 'set_default_active_thread_percentage 100' | ctl
sec "fault: client A illegal address while client B (50%) runs matmul; process outside MPS at the same time"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- timeout 90 $PY $W mm 12 > $D/b.out 2>&1 &
$PY $W mm 12 > $D/c.out 2>&1 &
sleep 5; client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- timeout 60 $PY $W fault; wait %1 %2
echo "B (MPS): $(grep -E 'RESULT|Error' $D/b.out | tail -2)"; echo "C (outside): $(grep -E 'RESULT|Error' $D/c.out | tail -2)"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- timeout 60 $PY $W mm 5; echo "new client after the fault rc=$?"
echo "control.log tail:"; tail -20 $D/log/control.log
sec "quit"
echo quit | ctl; echo "rc=$?"; sleep 2; ps -eo pid,args | grep -i [m]ps-; echo "pipe after:"; ls -la $D/pipe; echo "shm after:"; ls -la $D/shm
sec "client when no daemon answers (pipe dir set, daemon gone)"
client shared CUDA_MPS_PIPE_DIRECTORY=/run/mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 -- timeout 60 $PY $W mm 8; echo "rc=$?"
umount $D/shm; rm -rf $D
