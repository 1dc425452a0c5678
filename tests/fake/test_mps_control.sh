#!/usr/bin/env bash
# The fake nvidia-cuda-mps-control (fake_mps_control.c) and the fake libcuda as
# an MPS client, against what the real ones did on the H200
# (docs/gpu-runs/2026-12-02-h200-mps-facts/; users and -M:
# docs/gpu-runs/2026-12-03-h200-mps-facts3/). `make -C tests/fake test-mps`.
# Runs as root or not; the privilege and user checks need root (setpriv to
# nobody and to uid 1000) and are skipped otherwise. Ends with "N passed, M failed", non-zero on a failure.
set -u
cd "$(dirname "$0")"
B=$PWD/build
CTL=$B/nvidia-cuda-mps-control
PROBE=$B/mps_client_probe
LIB=$B/libcuda.so.1
ME=$(id -u)
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
eq() { local name=$1 want=$2 got=$3; if [ "$got" = "$want" ]; then ok "$name"; else bad "$name: want [$want] got [$got]"; fi; }

T=$(mktemp -d /tmp/gq-mps.XXXXXX)
chmod 755 "$T" # nobody must reach the pipe directory, as in the H200 run
P=$T/pipe; L=$T/log
export CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L
started=()
cleanup() {
  for p in "${started[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
ui() { timeout 10 "$CTL"; }
as_nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
daemon_pid() { cat "$P/nvidia-cuda-mps-control.pid" 2>/dev/null; }
mode() { stat -c '%A' "$1" 2>/dev/null; }
gone() { # the process has exited (a zombie counts: its parent may not reap it)
  local i s
  for i in $(seq 50); do
    [ -e "/proc/$1" ] || return 0
    s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ "$s" = Z ] || [ -z "$s" ] && return 0
    sleep 0.1
  done
  return 1
}
LOGLINE='^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} Control +[0-9]+\] '

echo "== no daemon"
out=$(echo get_server_list | ui); rc=$?
eq "UI without a daemon says so" "Cannot find MPS control daemon process" "$out"
eq "UI without a daemon exits 1" 1 "$rc"
out=$("$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25); rc=$?
eq "cuInit without a daemon runs outside MPS" "mps=0" "$(head -1 <<<"$out")"
eq "cuInit without a daemon succeeds" 0 "$rc"
out=$("$PROBE" "$LIB" --attr)
eq "outside MPS: MPS_ENABLED 0" "mps_enabled=0" "$(sed -n 3p <<<"$out")"

echo "== -d"
# the clean environment gpu-quota gives it; $(...) waits for the daemon to
# let go of stdout: -d must not keep the caller's pipes
out=$(timeout 10 env -i PATH=/usr/bin:/bin CUDA_VISIBLE_DEVICES=3 CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L "$CTL" -d 2>&1); rc=$?
eq "-d exits 0" 0 "$rc"
eq "-d prints nothing" "" "$out"
D=$(daemon_pid); started+=("$D")
# no sleep: -d returns once the daemon is ready
eq "-d returns with the daemon answering" "100.0" "$(echo get_default_active_thread_percentage | ui)"
eq "control: socket 0666" srw-rw-rw- "$(mode "$P/control")"
eq "control_lock: regular 0666" -rw-rw-rw- "$(mode "$P/control_lock")"
eq "control_privileged: socket 0755" srwxr-xr-x "$(mode "$P/control_privileged")"
eq "log: FIFO 0777" prwxrwxrwx "$(mode "$P/log")"
eq "pid file: 0666" -rw-rw-rw- "$(mode "$P/nvidia-cuda-mps-control.pid")"
check "pid file: the pid, no newline" grep -qxE '[0-9]+' <(cat "$P/nvidia-cuda-mps-control.pid"; echo)
check "pid file: no trailing newline" test "$(tail -c1 "$P/nvidia-cuda-mps-control.pid" | od -An -c | tr -d ' ')" != '\n'
check "pid file names the daemon" grep -q nvidia-cuda-mps-control "/proc/$D/cmdline"
eq "daemon: session leader (setsid)" "$D" "$(awk '{print $4}' <(sed 's/.*) //' "/proc/$D/stat"))"
eq "daemon: cwd /" / "$(readlink "/proc/$D/cwd")"
eq "daemon: stdin, stdout, stderr /dev/null" "/dev/null /dev/null /dev/null" "$(readlink "/proc/$D/fd/0" "/proc/$D/fd/1" "/proc/$D/fd/2" | tr '\n' ' ' | sed 's/ $//')"
eq "control.log: 0644" -rw-r--r-- "$(mode "$L/control.log")"
eq "server.log: empty 0644" "-rw-r--r-- 0" "$(stat -c '%A %s' "$L/server.log" 2>/dev/null)"
check "control.log: every line in the real layout" bash -c "! grep -vE '$LOGLINE' '$L/control.log' && grep -qE '$LOGLINE' '$L/control.log'"
check "control.log: the daemon's pid in its lines" grep -qE "Control +$D\] Starting control daemon using socket $P/control\$" "$L/control.log"
check "control.log: how clients connect" grep -qF "] To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=$P" "$L/control.log"
check "control.log: the environment's names" grep -qE "\] Environment: CUDA_MPS_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES PATH\$" "$L/control.log"
check "control.log: no values in the environment line" bash -c "! grep 'Environment:' '$L/control.log' | grep -q /usr/bin"
check "control.log: the GPU" grep -qE "\] CUDA_VISIBLE_DEVICES=3\$" "$L/control.log"

echo "== a second -d"
out=$(timeout 10 "$CTL" -d 2>&1); rc=$?
eq "second -d exits 1" 1 "$rc"
check "second -d says why" grep -q "already running" <<<"$out"
eq "second -d leaves the first" "$D" "$(daemon_pid)"
check "the first still answers" test "$(echo get_default_active_thread_percentage | ui)" = 100.0

echo "== UI"
out=$(printf 'get_server_list\nget_default_active_thread_percentage\nset_default_active_thread_percentage 25\nget_default_active_thread_percentage\nbogus_command\n' | ui); rc=$?
eq "commands of one session, one reply each (no server yet)" "$(printf '100.0\n25.0\n25.0\nUnknown command')" "$out"
eq "UI exits 0" 0 "$rc"
eq "a bad percentage is refused" "Invalid active thread percentage" "$(echo 'set_default_active_thread_percentage 250' | ui)"
eq "and changes nothing" 25.0 "$(echo get_default_active_thread_percentage | ui)"
check "control.log: a UI session" bash -c "grep -A3 'Accepting connection...' '$L/control.log' | grep -q 'NEW UI'"
check "control.log: its command and reply" bash -c "grep -A1 'Cmd:set_default_active_thread_percentage 25\$' '$L/control.log' | tail -1 | grep -qE '\] 25.0\$'"
check "control.log: UI closed" grep -qE '\] UI closed$' "$L/control.log"

echo "== privileges"
PRIV='Insufficient privileges for UID 65534. Control deamon settings can only be modified by the user who started it or by the root user.'
if [ "$ME" = 0 ] && command -v setpriv >/dev/null; then
  out=$(echo get_default_active_thread_percentage | as_nobody timeout 10 "$CTL"); rc=$?
  eq "nobody may read" "25.0 0" "$out $rc"
  out=$(echo 'set_default_active_thread_percentage 10' | as_nobody timeout 10 "$CTL"); rc=$?
  eq "nobody may not set (the real text)" "$PRIV" "$out"
  eq "the refusal exits 0 (measured)" 0 "$rc"
  eq "nothing changed" 25.0 "$(echo get_default_active_thread_percentage | ui)"
  out=$(echo quit | as_nobody timeout 10 "$CTL")
  eq "nobody may not quit" "$PRIV" "$out"
  check "the daemon lives on" test -S "$P/control" -a -d "/proc/$D"
  check "control.log: the refusal" grep -qF "] $PRIV" "$L/control.log"
else
  echo "skip privilege checks (need root and setpriv)"
fi

echo "== CUDA clients"
eq "get_server_list: empty before any client" "" "$(echo get_server_list | ui)"
out=$("$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25); rc=$?
cp=$(sed -n 's/^pid=//p' <<<"$out")
eq "a client at 25%" "mps=1 pct=25 mem=- pipe=$P" "$(head -1 <<<"$out")"
eq "its cuInit succeeds" 0 "$rc"
check "control.log: NEW CLIENT with the peer's pid and uid" grep -qE "\] NEW CLIENT peer_pid=$cp uid=$ME pid=$cp pct=25 mem=- pipe=$P\$" "$L/control.log"
eq "get_server_list: the server now" "$D" "$(echo get_server_list | ui)"
out=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 "$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100)
eq "launched at 25, sets 100 before init: 100 (measured)" "mps=1 pct=100 mem=- pipe=$P" "$(head -1 <<<"$out")"
out=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 "$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25)
eq "launched at 100, sets 25 before init: 25 (measured)" "mps=1 pct=25 mem=- pipe=$P" "$(head -1 <<<"$out")"
n=$(grep -c 'NEW CLIENT' "$L/control.log")
out=$("$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 -CUDA_MPS_PIPE_DIRECTORY)
if [ -S /tmp/nvidia-mps/control ]; then
  echo "skip 'unset pipe dir leaves MPS': a daemon answers at /tmp/nvidia-mps"
else
  eq "unsetting the pipe dir before init leaves MPS (measured)" "mps=0" "$(head -1 <<<"$out")"
fi
eq "and the daemon saw no client" "$n" "$(grep -c 'NEW CLIENT' "$L/control.log")"
out=$("$PROBE" "$LIB" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M)
eq "the pinned memory limit is passed" "mps=1 pct=- mem=0=4096M pipe=$P" "$(head -1 <<<"$out")"
out=$("$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 --fork)
pp=$(sed -n '2s/^pid=//p' <<<"$out"); cp=$(sed -n '4s/^pid=//p' <<<"$out")
eq "a forked child connects at its own cuInit" "child mps=1 pct=50 mem=- pipe=$P" "$(sed -n 3p <<<"$out")"
check "control.log: parent and child, each once" bash -c "[ \$(grep -cE 'NEW CLIENT peer_pid=($pp|$cp) ' '$L/control.log') = 2 ] && [ -n '$cp' ] && [ '$cp' != '$pp' ]"
out=$("$PROBE" "$LIB" 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=2 5')
eq "a value with a space stays one token" "mps=1 pct=2?5 mem=- pipe=$P" "$(head -1 <<<"$out")"
if [ "$ME" = 0 ] && command -v setpriv >/dev/null; then
  out=$(as_nobody "$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25); cp=$(sed -n 's/^pid=//p' <<<"$out")
  check "control.log: a client of uid 65534" grep -qE "\] NEW CLIENT peer_pid=$cp uid=65534 pid=$cp pct=25 " "$L/control.log"
fi
if command -v python3 >/dev/null; then
  # a peer that never sends its first line, and one that sends garbage, do not
  # stop the daemon from serving others
  python3 - "$P/control" <<'EOF' &
import socket, sys, time
a = socket.socket(socket.AF_UNIX); a.connect(sys.argv[1])
b = socket.socket(socket.AF_UNIX); b.connect(sys.argv[1]); b.sendall(b"\x1b[31mhello\n"); b.recv(10)
time.sleep(3)
EOF
  idle=$!
  sleep 0.5
  out=$("$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25)
  eq "a client while a peer idles" "mps=1 pct=25 mem=- pipe=$P" "$(head -1 <<<"$out")"
  check "control.log: the garbage peer, no escape codes" bash -c "grep -q 'User did not send valid credentials' '$L/control.log' && ! grep -q \$'\\x1b' '$L/control.log'"
  wait "$idle"
fi

echo "== the server's limit and its clients"
STATIC=$B/mps_client_probe_static
# a client that holds its place until killed; prints its pid once a client
held() {
  local out=$T/held.$RANDOM i
  "$@" --hold >"$out" 2>&1 &
  started+=("$!")
  for i in $(seq 100); do grep -q '^pid=' "$out" && break; sleep 0.05; done
  sed -n 's/^pid=//p' "$out"
}
clients_now() { echo fake_clients | ui | sort -n | tr '\n' '|' | sed 's/|$//'; }
eq "the server took the default it started with" 25.0 "$(echo "get_active_thread_percentage $D" | ui)"
eq "set_active_thread_percentage on the server" 10.0 "$(echo "set_active_thread_percentage $D 10" | ui)"
eq "its limit now" 10.0 "$(echo "get_active_thread_percentage $D" | ui)"
eq "a bad percentage for the server is refused" "Invalid active thread percentage" "$(echo "set_active_thread_percentage $D 0" | ui)"
eq "no such server" "Server not found" "$(echo "set_active_thread_percentage 1 10" | ui)"
if [ "$ME" = 0 ] && command -v setpriv >/dev/null; then
  eq "nobody may not set a server's limit" "$PRIV" "$(echo "set_active_thread_percentage $D 90" | as_nobody timeout 10 "$CTL")"
fi
eq "set_default does not change a running server" "10.0 50.0" "$(printf 'set_default_active_thread_percentage 50\nget_active_thread_percentage %s\n' "$D" | ui | tail -1) $(echo get_default_active_thread_percentage | ui)"
eq "no client holds a place yet" "" "$(echo fake_clients | ui)"
c1=$(held "$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100)
c2=$(held "$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=6.25)
c3=$(held "$PROBE" "$LIB" -CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)
c4=$(held "$STATIC" - CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=bogus)
eq "a client's value only lowers the server's limit (100, 6.25, unset, no percentage)" \
  "$c1 10|$c2 6.25|$c3 10|$c4 10" "$(clients_now)"
eq "get_client_list: the live clients" "$c1 $c2 $c3 $c4" "$(echo "get_client_list $D" | ui | tr '\n' ' ' | sed 's/ $//')"
eq "get_client_list of no server" "Server not found" "$(echo "get_client_list x" | ui)"
check "control.log: a client's percentage" grep -qE "\] Client $c2 runs at active thread percentage 6.25\$" "$L/control.log"
kill -KILL "$c2"; gone "$c2"
for i in $(seq 50); do echo fake_clients | ui | grep -q "^$c2 " || break; sleep 0.1; done
eq "a client that died (kill -9) is gone from the list" "$c1 10|$c3 10|$c4 10" "$(clients_now)"
check "control.log: its end" grep -qE "\] Client $c2 disconnected\$" "$L/control.log"
echo "set_active_thread_percentage $D 100" | ui >/dev/null
c5=$(held "$STATIC" - CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100)
eq "a raised limit serves the new client; the old keep theirs" "$c1 10|$c3 10|$c4 10|$c5 100" "$(clients_now)"
for p in $c1 $c3 $c4 $c5; do kill -KILL "$p"; gone "$p"; done

echo "== the server's clients and settings (privileged socket)"
S=$(echo get_server_list | ui)
"$PROBE" "$LIB" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 --attr --hold 30 >"$T/holder" 2>&1 </dev/null &
holder=$!; started+=("$holder")
for i in $(seq 50); do [ -n "$(sed -n 3p "$T/holder")" ] && break; sleep 0.1; done
eq "a connected client: MPS_ENABLED 1" "mps_enabled=1" "$(sed -n 3p "$T/holder")"
check "get_client_list: the live client" grep -qx "$holder" <(echo "get_client_list $S" | ui)
check "get_client_list: no client that has exited" bash -c "[ \$(echo 'get_client_list $S' | timeout 10 '$CTL' | wc -l) = 1 ]"
# the section above left the default at 50 and the server at 100
printf 'set_default_active_thread_percentage 25\nset_active_thread_percentage %s 25\n' "$S" | ui >/dev/null
eq "the server's percentage" 25.0 "$(echo "get_active_thread_percentage $S" | ui)"
eq "set_active_thread_percentage (root, privileged socket)" 50.0 "$(echo "set_active_thread_percentage $S 50" | ui)"
eq "get_active_thread_percentage" 50.0 "$(echo "get_active_thread_percentage $S" | ui)"
eq "an unknown server" "Server not found" "$(echo "get_active_thread_percentage 1" | ui)"
eq "set_default_device_pinned_mem_limit" "0 8G" "$(printf 'set_default_device_pinned_mem_limit 0 8G\nget_default_device_pinned_mem_limit 0\n' | ui)"

echo "== a view of the pipe directory with control only (what a container gets)"
V=$T/view; mkdir -p "$V"; ln "$P/control" "$V/control"
vui() { CUDA_MPS_PIPE_DIRECTORY=$V timeout 10 "$CTL"; }
ROOT_CTL='Insufficient privileges for UID 0. Control deamon settings can only be modified by the user who started it or by the root user.'
eq "root may read through the view" 50.0 "$(echo "get_active_thread_percentage $S" | vui)"
out=$(printf 'set_default_active_thread_percentage 100\nset_default_active_thread_percentage 10\nset_default_device_pinned_mem_limit 0 100G\nquit\n' | vui); rc=$?
eq "root on control: the defaults and quit refused, as the H200's daemon does" "$(printf '%s\n' "$ROOT_CTL" "$ROOT_CTL" "$ROOT_CTL" 'Not enough privilege to execute quit command')" "$out"
eq "the UI exits 0" 0 "$rc"
eq "the default is what it was" 25.0 "$(echo get_default_active_thread_percentage | ui)"
eq "the pinned limit is what it was" "0 8G" "$(echo 'get_default_device_pinned_mem_limit 0' | ui)"
eq "the daemon did not quit" "$D" "$(daemon_pid)"
check "control.log: Cmd:quit seen, not acted on" bash -c "grep -qF 'Not enough privilege to execute quit command' '$L/control.log' && test -S '$P/control'"
# as the H200's daemon: a server's own percentage is taken on control
eq "root on control: set_active_thread_percentage taken (as on the H200)" 100.0 "$(echo "set_active_thread_percentage $S 100" | vui)"
echo "set_active_thread_percentage $S 50" | ui >/dev/null
check "the client is still listed" grep -qx "$holder" <(echo "get_client_list $S" | ui)
out=$(CUDA_MPS_PIPE_DIRECTORY=$V "$PROBE" "$LIB" CUDA_MPS_PIPE_DIRECTORY=$V --attr)
eq "a client through the view" "mps=1 pct=- mem=- pipe=$V" "$(head -1 <<<"$out")"
eq "and MPS_ENABLED 1" "mps_enabled=1" "$(sed -n 3p <<<"$out")"
eq "terminate_client (root, privileged socket)" "" "$(echo "terminate_client $S $holder" | ui)"
check "the terminated client is no longer listed" bash -c "! echo 'get_client_list $S' | timeout 10 '$CTL' | grep -qx '$holder'"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

echo "== quit"
out=$(echo quit | ui); rc=$?
eq "quit: exits 0, prints nothing" "0 " "$rc $out"
for f in control control_lock control_privileged log nvidia-cuda-mps-control.pid; do
  check "quit removed $f" test ! -e "$P/$f" -a ! -L "$P/$f"
done
check "the daemon exited" gone "$D"
check "control.log: Cmd:quit" grep -qE '\] Cmd:quit$' "$L/control.log"
out=$(echo get_server_list | ui); rc=$?
eq "UI after quit" "Cannot find MPS control daemon process 1" "$out $rc"

echo "== restart"
"$CTL" -d; eq "-d after quit" 0 "$?"
D=$(daemon_pid); started+=("$D")
eq "a new daemon starts with the default percentage" 100.0 "$(echo get_default_active_thread_percentage | ui)"
eq "and no server" "" "$(echo get_server_list | ui)"
kill -KILL "$D"; gone "$D"
"$CTL" -d; eq "-d over a killed daemon's files" 0 "$?"
D2=$(daemon_pid); started+=("$D2")
check "a new pid" test -n "$D2" -a "$D2" != "$D"
eq "it answers" 100.0 "$(echo get_default_active_thread_percentage | ui)"
echo quit | ui >/dev/null
check "and quits" gone "$D2"

echo "== users: one server's uid at a time; -M serves every uid"
# measured on the H200 (docs/gpu-runs/2026-12-03-h200-mps-facts3/): without
# -M a client of another uid is queued until the running server's clients
# have ended; under -d -M it is served at once beside them
if [ "$ME" = 0 ] && command -v setpriv >/dev/null; then
  as_1000() { setpriv --reuid 1000 --regid 1000 --clear-groups "$@"; }
  PRIV1000='Insufficient privileges for UID 1000. Control deamon settings can only be modified by the user who started it or by the root user.'
  # a daemon of its own on pipe directory $1 (0755: uid 1000 reaches control)
  start_on() { local d=$1; shift; mkdir -m 755 "$d" "$d.log"; CUDA_MPS_PIPE_DIRECTORY=$d CUDA_MPS_LOG_DIRECTORY=$d.log "$CTL" "$@"; }
  uion() { local d=$1; shift; CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 "$@" "$CTL"; }
  eq "-d -X: the usage error" "1 usage:" "$(start_on "$T/px" -d -X 2>&1 | cut -d' ' -f1 | sed 's/^/1 /')"

  U=$T/pu
  start_on "$U" -d; eq "-d (one user at a time) exits 0" 0 "$?"
  DU=$(cat "$U/nvidia-cuda-mps-control.pid"); started+=("$DU")
  check "uid 1000 reaches the pipe directory's control" as_1000 test -w "$U/control" -a -x "$U"
  check "control.log: the mode" grep -qE "\] Starting control daemon \(one user at a time\)\$" "$U.log/control.log"
  r1=$(held "$PROBE" "$LIB" CUDA_MPS_PIPE_DIRECTORY=$U CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50)
  echo "set_active_thread_percentage $DU 10" | uion "$U" >/dev/null # root's server's own limit
  setpriv --reuid 1000 --regid 1000 --clear-groups "$PROBE" "$LIB" CUDA_MPS_PIPE_DIRECTORY=$U CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 --hold >"$T/u1000" 2>&1 &
  u1=$!; started+=("$u1")
  sleep 2
  eq "a uid-1000 client beside a live root client: not answered in 2 s (queued)" "" "$(cat "$T/u1000")"
  check "control.log: it waits" grep -qE "\] Client $u1 of uid 1000 waits: the server serves uid 0\$" "$U.log/control.log"
  eq "the queued client is not the server's client" "$r1 50" "$(echo fake_clients | uion "$U")"
  kill -KILL "$r1"; gone "$r1"
  for i in $(seq 30); do grep -q '^pid=' "$T/u1000" && break; sleep 0.1; done
  eq "once the root client has ended, it is served (a new server, at the default)" "mps=1 pct=25 mem=- pipe=$U pid=$u1" "$(tr '\n' ' ' <"$T/u1000" | sed 's/ $//')"
  eq "the server's clients: the uid-1000 one" "$u1 25" "$(echo fake_clients | uion "$U")"
  eq "uid 1000's server took the default, not root's server's 10" 100.0 "$(echo "get_active_thread_percentage $DU" | uion "$U")"
  # now root is the other uid: a root client waits, and leaving drops it
  "$PROBE" "$LIB" CUDA_MPS_PIPE_DIRECTORY=$U >"$T/r2" 2>&1 &
  r2=$!; started+=("$r2")
  for i in $(seq 30); do grep -q "Client $r2 of uid 0 waits" "$U.log/control.log" && break; sleep 0.1; done
  check "control.log: a root client waits for uid 1000's server" grep -qE "\] Client $r2 of uid 0 waits: the server serves uid 1000\$" "$U.log/control.log"
  kill -KILL "$r2"; wait "$r2" 2>/dev/null
  for i in $(seq 30); do grep -q "Client $r2 left while it waited" "$U.log/control.log" && break; sleep 0.1; done
  check "control.log: a queued client that leaves is dropped" grep -qE "\] Client $r2 left while it waited\$" "$U.log/control.log"
  eq "and never was a client" "$u1 25" "$(echo fake_clients | uion "$U")"
  kill -KILL "$u1"; wait "$u1" 2>/dev/null
  echo quit | uion "$U" >/dev/null

  M=$T/pm
  start_on "$M" -d -M; eq "-d -M exits 0" 0 "$?"
  DM=$(cat "$M/nvidia-cuda-mps-control.pid" 2>/dev/null); started+=("$DM")
  check "control.log: multi-user" grep -qE "\] Starting control daemon \(multi-user\)\$" "$M.log/control.log"
  m1=$(held "$PROBE" "$LIB" CUDA_MPS_PIPE_DIRECTORY=$M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50)
  setpriv --reuid 1000 --regid 1000 --clear-groups "$PROBE" "$LIB" CUDA_MPS_PIPE_DIRECTORY=$M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 --hold >"$T/m1000" 2>&1 &
  m2=$!; started+=("$m2")
  for i in $(seq 10); do grep -q '^pid=' "$T/m1000" && break; sleep 0.1; done
  eq "-M: a uid-1000 client is served at once beside the root client" "mps=1 pct=25 mem=- pipe=$M pid=$m2" "$(tr '\n' ' ' <"$T/m1000" | sed 's/ $//')"
  SM=$(echo get_server_list | uion "$M")
  eq "-M: one server for both uids" "$DM|$m1 50|$m2 25" "$SM|$(echo fake_clients | uion "$M" | sort -n | tr '\n' '|' | sed 's/|$//')"
  echo "set_active_thread_percentage $SM 40" | uion "$M" >/dev/null
  out=$(printf 'set_active_thread_percentage %s 100\nterminate_client %s %s\nquit\n' "$SM" "$SM" "$m1" | uion "$M" setpriv --reuid 1000 --regid 1000 --clear-groups); rc=$?
  eq "-M: uid 1000's UI is refused a server's percentage, terminate_client and quit" "$(printf '%s\n' "$PRIV1000" "$PRIV1000" "$PRIV1000")" "$out"
  eq "its UI exits 0" 0 "$rc"
  eq "the server's percentage is unchanged" 40.0 "$(echo "get_active_thread_percentage $SM" | uion "$M")"
  eq "the clients are unchanged" "$m1 50|$m2 25" "$(echo fake_clients | uion "$M" | sort -n | tr '\n' '|' | sed 's/|$//')"
  check "the -M daemon lives on" test -S "$M/control" -a -d "/proc/$DM"
  kill -KILL "$m1" "$m2"; gone "$m1"; wait "$m2" 2>/dev/null
  echo quit | uion "$M" >/dev/null

  start_on "$T/pm2" -M -d; eq "-M -d exits 0" 0 "$?"
  started+=("$(cat "$T/pm2/nvidia-cuda-mps-control.pid" 2>/dev/null)")
  check "control.log: -M -d is multi-user" grep -q "Starting control daemon (multi-user)" "$T/pm2.log/control.log"
  echo quit | uion "$T/pm2" >/dev/null
else
  echo "skip user checks (need root and setpriv)"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
