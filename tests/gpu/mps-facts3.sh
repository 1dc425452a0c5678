#!/usr/bin/env bash
# What NVIDIA's MPS on the H200 (driver 580, MPS 13000) does that a
# per-container share and a daemon a container cannot steer rest on.
# Plain MPS, no gpu-quota: a private daemon under /tmp. Prints one section
# per question; each client line is mps.py's RESULT (tflops, mps = the
# device attribute MPS_ENABLED the process saw).
#   A  decimal percentages: is 12.5 half of 25?
#   B  the daemon's limit over a client's own: set_default before the server
#      starts, set_active_thread_percentage on a running server, a client
#      asking 100 under each
#   C  a pipe-directory view holding only `control` (no control_privileged,
#      pid file, lock, log): can a root client compute through it, and
#      does the daemon take control commands from it?
#   D  a non-root host uid that is root in its own user namespace: control
#      commands, and a client beside a root client, with and without -M
#   E  the daemon killed while a client computes, and a new client after;
#      the daemon stopped (SIGSTOP) and a new client
set -u
PY=$(command -v python3); W=$(cd "$(dirname "$0")" && pwd)/mps.py
CTL=${MPS_CONTROL:-/usr/local/nvidia/bin/nvidia-cuda-mps-control}
T0=$SECONDS
say() { echo; echo "== [t=$((SECONDS - T0))s] $*"; }
D=$(mktemp -d /tmp/mf3.XXXX); chmod 755 "$D"
# the user-namespace cases run as host uid 100000: the workload must be readable to it
cp "$W" "$D/mps.py"; chmod 644 "$D/mps.py"; W=$D/mps.py
start() {
  rm -rf "$D/pipe" "$D/log"; mkdir -p "$D/pipe" "$D/log"; chmod 755 "$D/pipe" "$D/log"
  env -i PATH="$PATH" CUDA_VISIBLE_DEVICES=0 CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_LOG_DIRECTORY="$D/log" "$CTL" -d "$@"
  sleep 1
}
host() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" timeout 10 "$CTL"; echo "(rc=$?)"; }
stop() { echo quit | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" timeout 10 "$CTL" >/dev/null 2>&1; sleep 2; pkill -9 -f nvidia-cuda-mps-server; pkill -9 -f "nvidia-cuda-mps-control -d"; sleep 1; }
# client PCT SECS [env...]: one matmul client on the private daemon
client() { local p=$1 s=$2; shift 2; env CUDA_MPS_PIPE_DIRECTORY="$D/pipe" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="$p" "$@" timeout 60 "$PY" "$W" mm "$s" 2>&1 | grep -E 'RESULT|Error|error' | tail -2; }
daemon_pid() { cat "$D/pipe/nvidia-cuda-mps-control.pid" 2>/dev/null; }

say "solo, outside MPS (reference)"
timeout 60 "$PY" "$W" mm 5 | grep RESULT
start
say "A: decimal percentages (25, then 12.5, then 6.25)"
client 25 5; client 12.5 5; client 6.25 5
say "A: attr as a client, and outside MPS"
CUDA_MPS_PIPE_DIRECTORY="$D/pipe" timeout 30 "$PY" "$W" attr; timeout 30 "$PY" "$W" attr

stop; start
say "B1: set_default_active_thread_percentage 25 before the server starts; a client asking 100"
host "set_default_active_thread_percentage 25"; client 100 5
say "B1: get_server_list; the server's percentage"
host get_server_list
stop; start
say "B2: a server started by a client at 100 (background, 25 s); set_active_thread_percentage SERVER 25; a new client asking 100"
(client 100 25 > "$D/b2a.out") &
sleep 10
S=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$D/pipe" timeout 10 "$CTL" | head -1); echo "server $S"
host "set_active_thread_percentage $S 25"; host "get_active_thread_percentage $S"
client 100 5
wait; echo "first client (started before the change):"; cat "$D/b2a.out"

stop; start
say "C: a view with only control (mount namespace of its own)"
cat > "$D/inview.sh" <<EOF
set -u
mkdir -p /tmp/view && mount -t tmpfs tmpfs /tmp/view && touch /tmp/view/control && mount --bind "$D/pipe/control" /tmp/view/control
ls -la /tmp/view
ui() { echo "\$1" | CUDA_MPS_PIPE_DIRECTORY=/tmp/view timeout 10 "$CTL"; echo "(rc=\$?)"; }
echo "-- a client at 25 through the view"; CUDA_MPS_PIPE_DIRECTORY=/tmp/view CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 60 "$PY" "$W" mm 5 2>&1 | grep -E 'RESULT|rror' | tail -2
echo "-- control commands through the view"
ui get_server_list; ui get_default_active_thread_percentage
ui "set_default_active_thread_percentage 10"
S=\$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=/tmp/view timeout 10 "$CTL" | head -1)
ui "set_active_thread_percentage \$S 100"; ui "terminate_client \$S 1"; ui "set_default_device_pinned_mem_limit 0 100G"
ui quit
EOF
unshare -m --propagation private bash "$D/inview.sh"
say "C: after it, from the host: the default percentage, the daemon alive?"
host get_default_active_thread_percentage; echo "daemon pid $(daemon_pid): $(kill -0 "$(daemon_pid)" 2>/dev/null && echo alive || echo gone)"
say "C: for contrast, the same commands through the whole pipe directory"
host "set_default_active_thread_percentage 10"; host get_default_active_thread_percentage; host "set_default_active_thread_percentage 100"

say "D: host uid 100000 as root of its own user namespace"
mkdir -p /tmp/u100000 && chown 100000:100000 /tmp/u100000
asuser() { setpriv --reuid=100000 --regid=100000 --clear-groups env HOME=/tmp/u100000 unshare -U --map-root-user bash -c "$1"; }
asuser "id; echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; echo '(rc='\$?')'; echo 'set_default_active_thread_percentage 10' | CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; echo '(rc='\$?')'; echo quit | CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; echo '(rc='\$?')'"
host get_default_active_thread_percentage; echo "daemon pid $(daemon_pid): $(kill -0 "$(daemon_pid)" 2>/dev/null && echo alive || echo gone)"
say "D: a userns client alone (25 %, 5 s)"
asuser "CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 60 $PY $W mm 5 2>&1 | grep -E 'RESULT|rror' | tail -2"
host get_server_list
say "D: a root client (50 %, 20 s, background) and then the userns client (25 %, 5 s), default daemon"
(client 50 20 > "$D/d1.out") &
sleep 9
t=$SECONDS; asuser "CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 60 $PY $W mm 5 2>&1 | grep -E 'RESULT|rror' | tail -2"; echo "userns client took $((SECONDS - t)) s"
wait; cat "$D/d1.out"
stop; start -M
say "D: the same under a multi-user daemon (-M)"
(client 50 20 > "$D/d2.out") &
sleep 9
t=$SECONDS; asuser "CUDA_MPS_PIPE_DIRECTORY=$D/pipe CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 60 $PY $W mm 5 2>&1 | grep -E 'RESULT|rror' | tail -2"; echo "userns client took $((SECONDS - t)) s"
wait; cat "$D/d2.out"; host get_server_list
asuser "echo 'set_default_active_thread_percentage 10' | CUDA_MPS_PIPE_DIRECTORY=$D/pipe timeout 10 $CTL; echo '(rc='\$?')'"

stop; start
say "E1: the daemon killed (SIGKILL) 8 s into a client's 20 s run"
(client 25 20 > "$D/e1.out") &
sleep 8; P=$(daemon_pid); kill -9 "$P"; echo "killed $P"; sleep 1
echo "servers left: $(pgrep -f nvidia-cuda-mps-server | tr '\n' ' ')"
say "E1: a new client with the share's variables while no daemon runs"
client 25 5
wait; echo "the client that ran through the kill:"; cat "$D/e1.out"
pkill -9 -f nvidia-cuda-mps-server; sleep 1
start
say "E2: the daemon stopped (SIGSTOP); a new client, 20 s bound"
P=$(daemon_pid); kill -STOP "$P"; t=$SECONDS
client 25 3; echo "took $((SECONDS - t)) s"
kill -CONT "$P"; sleep 1
say "E2: after SIGCONT, a client"
client 25 3
stop
tail -40 "$D/log/control.log"
rm -rf "$D" /tmp/u100000
echo "done in $((SECONDS - T0)) s"
