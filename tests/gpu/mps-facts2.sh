set -u
PY=$(command -v python3); W=$PWD/tests/gpu/mps.py; CTL=/usr/local/nvidia/bin/nvidia-cuda-mps-control
pkill -f nvidia-cuda-mps; pkill -f mps.py; sleep 1; nvidia-smi --query-compute-apps=pid,name --format=csv
D=$(mktemp -d /tmp/mpsg.XXXX); mkdir -p $D/pipe $D/log
ctl() { CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; }
env -i PATH=$PATH CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_LOG_DIRECTORY=$D/log $CTL -d; sleep 1
echo "== A: MPS client 50% first, then B outside MPS after 8 s (timeouts 45 s)"
(CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 45 $PY $W mm 15; echo "A rc=$?") > $D/a.out 2>&1 &
sleep 8; (timeout 45 $PY $W mm 10; echo "B rc=$?") > $D/b.out 2>&1; wait
tail -3 $D/a.out; tail -3 $D/b.out
echo "== B outside MPS first (no server now? list: $(echo get_server_list | ctl)), then A MPS client after 8 s"
(timeout 45 $PY $W mm 15; echo "B rc=$?") > $D/b.out 2>&1 &
sleep 8; (CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 45 $PY $W mm 10; echo "A rc=$?") > $D/a.out 2>&1; wait
tail -3 $D/b.out; tail -3 $D/a.out
echo "== control commands as a client would (any root process reaching the pipe dir)"
echo get_default_active_thread_percentage | ctl; echo 'set_default_active_thread_percentage 10' | ctl; echo "rc=$?"
echo get_default_active_thread_percentage | ctl; echo 'set_default_active_thread_percentage 100' | ctl
echo "== a non-root user (nobody) sends control commands"
chmod 755 $D; su -s /bin/sh nobody -c "echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; echo rc=\$?; echo 'set_default_active_thread_percentage 10' | CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; echo rc=\$?"
echo get_default_active_thread_percentage | ctl
tail -15 $D/log/control.log
echo quit | ctl; sleep 1; pkill -f nvidia-cuda-mps; rm -rf $D
