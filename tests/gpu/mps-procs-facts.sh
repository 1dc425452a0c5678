# What sm-procs relies on, under a private MPS daemon on GPU 0 (no gpu-quota):
# does MPS take a decimal active thread percentage (6.25) from the control
# UI and from a client's environment; does a client's value only lower the
# server's limit (set_default before the server, set_active_thread_percentage
# on a running one); what set_active_thread_percentage replies; four clients
# at 6.25 against one at 25. Run from the repository root on the H200:
#   bash tests/gpu/mps-procs-facts.sh 2>&1 | tee mps-procs-facts.txt
set -u
PY=$(command -v python3); W=$PWD/tests/gpu/mps.py
CTL=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)
D=$(mktemp -d /tmp/mpsp.XXXX); mkdir -p $D/pipe $D/log
ctl() { CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; }
tf() { grep -ho '"tflops": [0-9.]*' "$@" | sed 's/.*: //' | tr '\n' ' '; }
client() { # PCT SECS OUT: one matmul client at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=PCT ("" unset)
  (CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 120 $PY $W mm $2 --set-env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$1; echo "rc=$?") > $3 2>&1; }
env -i PATH=$PATH CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_LOG_DIRECTORY=$D/log $CTL -d; sleep 1
echo "== the UI and a decimal percentage"
echo "set_default 6.25 -> [$(echo 'set_default_active_thread_percentage 6.25' | ctl)] get -> [$(echo get_default_active_thread_percentage | ctl)]"
echo "set_default 6.2.5 -> [$(echo 'set_default_active_thread_percentage 6.2.5' | ctl)]"
echo 'set_default_active_thread_percentage 100' | ctl > /dev/null
echo "== one client each, the server at 100: 25, 6.25, 6, 7, 12.5 (10 s each)"
for p in 25 6.25 6 7 12.5; do client $p 10 $D/c.out; echo "env $p: $(tf $D/c.out) $(tail -1 $D/c.out)"; done
echo "== a client asking 100 under a server limit"
echo quit | ctl; sleep 2
env -i PATH=$PATH CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_LOG_DIRECTORY=$D/log $CTL -d; sleep 1
echo "set_default 25 before the server -> [$(echo 'set_default_active_thread_percentage 25' | ctl)]"
client 100 10 $D/c.out; echo "env 100 under default 25: $(tf $D/c.out) $(tail -1 $D/c.out)"
client "" 10 $D/c.out; echo "env unset under default 25: $(tf $D/c.out)"
S=$(echo get_server_list | ctl | head -1); echo "server: [$S] its limit: [$(echo "get_active_thread_percentage $S" | ctl)]"
echo "set_active_thread_percentage $S 6.25 -> [$(echo "set_active_thread_percentage $S 6.25" | ctl)] get -> [$(echo "get_active_thread_percentage $S" | ctl)]"
client 100 10 $D/c.out; echo "env 100 under server 6.25: $(tf $D/c.out) $(tail -1 $D/c.out)"
echo "set_active_thread_percentage $S 50 -> [$(echo "set_active_thread_percentage $S 50" | ctl)]"
client 100 10 $D/c.out; echo "env 100 under server 50: $(tf $D/c.out)"
echo "set_active_thread_percentage to a bad pid -> [$(echo "set_active_thread_percentage 1 50" | ctl)]"
echo "== four clients at 6.25 at once, then one at 25 (server 100)"
echo "set_active_thread_percentage $S 100 -> [$(echo "set_active_thread_percentage $S 100" | ctl)]"
for i in 1 2 3 4; do client 6.25 20 $D/q$i.out & done; wait
echo "four at 6.25: $(tf $D/q1.out $D/q2.out $D/q3.out $D/q4.out)(sum $(tf $D/q?.out | tr ' ' '\n' | awk '{s+=$1} END {print s}'))"
client 25 20 $D/c.out; echo "one at 25: $(tf $D/c.out)"
echo "client list: [$(echo "get_client_list $S" | ctl)]"
tail -40 $D/log/control.log
echo quit | ctl; sleep 1; rm -rf $D
