#!/usr/bin/env bash
# What NVIDIA's MPS on the H200 (driver 580, MPS 13000) does for a
# multi-user daemon (-M) whose first client is a non-root host uid, the
# shape gpu-quota's shares now take (root's shares are refused). Plain MPS,
# no gpu-quota: a private daemon under /tmp, started as root with -M.
#   F1 a uid-1000 client first: is it served, which user runs the server?
#   F2 from uid 1000, the commands a share container's root had on the
#      client socket: set_active_thread_percentage SERVER, terminate_client
#      (of its own live client), set_default_*, quit; the state afterwards
#   F3 a root client beside the live uid-1000 client: served at once?
set -u
PY=$(command -v python3); W=$(cd "$(dirname "$0")" && pwd)/mps.py
CTL=${MPS_CONTROL:-/usr/local/nvidia/bin/nvidia-cuda-mps-control}
T0=$SECONDS
say() { echo; echo "== [t=$((SECONDS - T0))s] $*"; }
D=$(mktemp -d /tmp/mf4.XXXX); chmod 755 "$D"
cp "$W" "$D/mps.py"; chmod 644 "$D/mps.py"; W=$D/mps.py
mkdir -p "$D/pipe" "$D/log" /tmp/u1000; chmod 755 "$D/pipe" "$D/log"; chown 1000:1000 /tmp/u1000
env -i PATH="$PATH" CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_LOG_DIRECTORY="$D/log" "$CTL" -d -M
sleep 1
host() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" timeout 10 "$CTL" 2>&1 | tr '\n' ' '; }
u1000() { setpriv --reuid=1000 --regid=1000 --clear-groups env HOME=/tmp/u1000 CUDA_MPS_PIPE_DIRECTORY="$D/pipe" "$@"; }
ui1000() { echo "$1" | u1000 timeout 10 "$CTL" 2>&1 | tr '\n' ' '; echo "(rc=${PIPESTATUS[1]})"; }
say "F1: a uid-1000 client first (25 %, 20 s, background)"
(u1000 env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 60 "$PY" "$W" mm 20 > "$D/c1000.out" 2>&1) &
sleep 9
S=$(host get_server_list | awk '{print $1}'); echo "server: $S"
ps -o user=,uid=,pid=,args= -p "$S" 2>/dev/null; ps -eo user=,pid=,args= | grep '[n]vidia-cuda-mps' 
CL=$(host "get_client_list $S"); echo "clients: $CL"
echo "server's percentage: $(host "get_active_thread_percentage $S"); default: $(host get_default_active_thread_percentage)"
say "F2: from uid 1000 (no user namespace), the UI against the pipe directory"
for c in "set_active_thread_percentage $S 100" "set_default_active_thread_percentage 100" "set_default_device_pinned_mem_limit 0 100G"; do echo "$c => $(ui1000 "$c")"; done
for p in $CL; do echo "terminate_client $S $p => $(ui1000 "terminate_client $S $p")"; done
echo "quit => $(ui1000 quit)"
sleep 1
echo "after: server $S at $(host "get_active_thread_percentage $S"); default $(host get_default_active_thread_percentage); clients $(host "get_client_list $S"); daemon $(cat "$D/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null) $(kill -0 "$(cat "$D/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null)" 2>/dev/null && echo alive || echo gone)"
say "F3: a root client (50 %, 5 s) beside the live uid-1000 client"
t=$SECONDS; CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 timeout 60 "$PY" "$W" mm 5 2>&1 | grep -E 'RESULT|rror' | tail -2; echo "root client took $((SECONDS - t)) s"
wait; echo "the uid-1000 client:"; grep -E 'RESULT|rror' "$D/c1000.out" | tail -2
echo quit | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" timeout 10 "$CTL" >/dev/null 2>&1; sleep 2
pkill -9 -f nvidia-cuda-mps-server; pkill -9 -f "nvidia-cuda-mps-control -d"
tail -25 "$D/log/control.log"
rm -rf "$D" /tmp/u1000
echo "done in $((SECONDS - T0)) s"
