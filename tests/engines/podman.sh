# shellcheck shell=bash
# podman 4.3 (Debian 12 round): slices, refusals, stop/start, install; `podman_cases`.
#
# Sourced by tests/engines/run.sh (its helpers: check, has, Q, C, D, P, ledger, …;
# its per-round names: R, CSOCK, DSOCK, versions), which calls the cases in each round.

# ================================================================ podman 4.3
podman_slice() {  # RUNTIME NAME
  P run "${PODMAN_RUN[@]}" -d --name "$2" --runtime "$1" --annotation vram=2g "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after podman run -d" || return 1
  local l; l=$(P exec "$2" gq-limits) || return 1
  has "$l" "grant0=$((2 * GIB))"
}
podman_refusal() {  # RUNTIME NAME
  local g out rc; g=$(ledger_gpu)
  out=$(P run "${PODMAN_RUN[@]}" --rm --name "$2" --runtime "$1" --annotation vram=15g --annotation gpu="$g" "$IMG" true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "podman run succeeded: $out"; return 1; }
  # one prefix: podman puts the runtime's name (or path) before the runtime's stderr itself
  has "$out" "OCI runtime error: $1: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  hasnt "$out" "gpu-quota: gpu-quota:" && hasnt "$out" "$1: gpu-quota:" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! P ps -a --format '{{.Names}}' | grep -qx "$2" || { echo "refused --rm container left behind"; return 1; }
}
podman_share() {  # RUNTIME
  # the reservations before it (an earlier case's container may still run)
  local e rc=0 n0; n0=$(ledger_n)
  P run "${PODMAN_RUN[@]}" -d --name gq-ps --runtime "$1" --user 1000 --annotation vram=2g --annotation sm=25% "$IMG" sleep 600 >/dev/null || return 1
  e=$(P exec gq-ps sh -c "$SHARE_PROBE") && share_seen "$e" || rc=1
  P rm -f -t 0 gq-ps >/dev/null || rc=1
  [ $rc = 0 ] && wait_ledger "$n0" 5 && share_gone
}
podman_rm() {  # NAME
  P rm -f -t 0 "$1" >/dev/null || return 1
  wait_ledger 0 5
}
podman_run_rm() {  # RUNTIME
  local out; out=$(P run "${PODMAN_RUN[@]}" --rm --runtime "$1" --annotation vram=2g "$IMG" gq-limits) || { echo "$out"; return 1; }
  has "$out" "grant0=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
podman_burst() {  # RUNTIME
  local out; out=$(P run "${PODMAN_RUN[@]}" --rm --runtime "$1" --annotation vram=2g --annotation vram-limit=6g "$IMG" gq-limits) || { echo "$out"; return 1; }
  has "$out" "grant0=$((2 * GIB))" && has "$out" "limit0=$((6 * GIB))" || return 1
  wait_ledger 0 5
}
podman_stop_start() {  # RUNTIME
  P run "${PODMAN_RUN[@]}" -d --name gq-p5 --runtime "$1" --annotation vram=3g "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after run -d" || return 1
  P stop -t 1 gq-p5 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  P start gq-p5 >/dev/null || return 1
  expect_ledger 1 "after podman start" || return 1
  has "$(P exec gq-p5 gq-limits)" "grant0=$((3 * GIB))" || return 1
  P rm -f -t 0 gq-p5 >/dev/null || return 1
  wait_ledger 0 5
}
podman_install() {
  # CONTAINERS_CONF isolates podman from /etc (podman 4.3 then reads only that file):
  # before install the name is unknown, after install the installed file is what defines it
  P --runtime gpu-quota info >/dev/null 2>&1 && { echo "runtime gpu-quota known before install: not isolated"; return 1; }
  "$REL/gpu-quota" install podman --root "$T" --runtime-path "$RT" >"$LOG/install-podman.log" 2>&1 ||
    { cat "$LOG/install-podman.log"; return 1; }
  PODMAN_CONF=$T/etc/containers/containers.conf.d/gpu-quota.conf
  local out; out=$(P --runtime gpu-quota info --format '{{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Path}}' 2>&1) || { echo "$out"; return 1; }
  has "$out" "gpu-quota $RT"
}
podman_config() {  # the round's config as it is now (install docker changed it)
  nsenter -t "$PNS" -m -- cp "$GPU_QUOTA_CONFIG" /etc/gpu-quota/config.toml || return 1
  ! cmp -s "$GPU_QUOTA_CONFIG" /etc/gpu-quota/config.toml 2>/dev/null || { echo "the host sees the namespace's /etc"; return 1; }
}
podman_load() { P load -i "$T/bb.tar" >/dev/null 2>"$LOG/podman-load.log" || { cat "$LOG/podman-load.log"; return 1; }; }
podman_cases() {
  local PV; PV="podman $(podman --version | awk '{print $3}')"
  check "$PV: the namespace's /etc/gpu-quota/config.toml is this round's (host /etc untouched); image loaded" eval 'podman_config && podman_load'
  check "$PV: --runtime /abs/gpu-quota-runtime --annotation vram=2g gets a 2 GiB slice" podman_slice "$RT" gq-p1
  check "$PV: (abs path) a request that does not fit fails with the gpu-quota message, one prefix" podman_refusal "$RT" gq-p2
  check "$PV: (abs path) rm -f releases the slice" podman_rm gq-p1
  check "$PV: --user 1000 --annotation vram=2g --annotation sm=25% is an MPS client of its GPU's daemon; rm -f stops the daemon" podman_share "$RT"
  check "$PV: (abs path) run --rm sees 2 GiB and releases" podman_run_rm "$RT"
  check "$PV: install --root registers runtime name gpu-quota (isolated CONTAINERS_CONF)" podman_install
  check "$PV: --runtime gpu-quota (installed name) gets a 2 GiB slice" podman_slice gpu-quota gq-p3
  check "$PV: (name) a request that does not fit fails with the gpu-quota message, one prefix" podman_refusal gpu-quota gq-p4
  check "$PV: (name) rm -f releases the slice" podman_rm gq-p3
  check "$PV: (name) run --rm sees 2 GiB and releases" podman_run_rm gpu-quota
  check "$PV: (name) run --rm with vram=2g and vram-limit=6g: the grant holds the guarantee and the burst limit" podman_burst gpu-quota
  check "$PV: (name) stop releases the slice, start admits it again, rm -f releases" podman_stop_start gpu-quota
}
