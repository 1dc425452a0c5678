# shellcheck shell=bash
# containerd through ctr (1.6 and 1.7): slices, refusals, release; `ctr_cases`.
#
# Sourced by tests/engines/run.sh (its helpers: check, has, Q, C, D, P, ledger, …;
# its per-round names: R, CSOCK, DSOCK, versions), which calls the cases in each round.

# ================================================================ containerd / ctr
ctd_config_dump() {
  local out; out=$(timeout 30 containerd --config "$R/etc/containerd/config.toml" config dump 2>&1) || { echo "$out"; return 1; }
  grep -A24 'containerd.runtimes.gpu-quota\]' <<<"$out" >"$R/dump.txt"
  has "$(cat "$R/dump.txt")" 'runtime_type = "io.containerd.runc.v2"' &&
    has "$(cat "$R/dump.txt")" "BinaryName = \"$RT\"" &&
    has "$(cat "$R/dump.txt")" 'pod_annotations = ["vram", "gpu", "gpus", "sm", "sm-procs", "vram-limit", "vram-priority", "gpu-quota.io/*"]' || return 1
  # and the running daemon was started from that very file
  has "$(tr '\0' ' ' </proc/"$CTD_PID"/cmdline)" "--config $R/etc/containerd/config.toml"
}
ctr_run() { C run --snapshotter native --fifo-dir "$R/fifo" --runc-binary "$RT" "$@"; }
ctr_share() {
  # the reservations before it (an earlier case's container may still run)
  local e rc=0 n0; n0=$(ledger_n)
  # an image whose user is 1000 (ctr run has no --user): never host root
  ctr_run -d --annotation vram=2g --annotation sm=25% "$CIMG_U" gq-cs sleep 600 >/dev/null || return 1
  e=$(C tasks exec --exec-id probe gq-cs sh -c "$SHARE_PROBE") && share_seen "$e" || rc=1
  # removed whatever the check said: a share left behind changes every later case
  C tasks kill -s KILL gq-cs >/dev/null
  local i; for i in $(seq 1 50); do C tasks ls | grep -q 'gq-cs.*STOPPED' && break; sleep 0.1; done
  C tasks delete gq-cs >/dev/null; C containers rm gq-cs >/dev/null
  [ $rc = 0 ] && wait_ledger "$n0" 5 && share_gone
}
ctr_slice() {
  ctr_run -d --annotation vram=2g "$CIMG" gq-c1 sleep 600 >/dev/null || return 1
  expect_ledger 1 "after ctr run -d" || return 1
  local l; l=$(C tasks exec --exec-id probe gq-c1 gq-limits) || return 1
  has "$l" "grant0=$((2 * GIB))" || return 1
  has "$(ledger)" "$R/ctd/state/io.containerd.runtime.v2.task/$NS/gq-c1"
}
ctr_refusal() {
  local g out rc; g=$(ledger_gpu)
  out=$(ctr_run --rm --annotation vram=15g --annotation gpu="$g" "$CIMG" gq-c2 true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "ctr run succeeded: $out"; return 1; }
  has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! C tasks ls -q | grep -qx gq-c2 || { echo "refused task left behind"; return 1; }
  C containers rm gq-c2 >/dev/null 2>&1; true
}
ctr_release() {
  C tasks kill -s KILL gq-c1 >/dev/null || return 1
  local i; for i in $(seq 1 50); do C tasks ls | grep -q 'gq-c1.*STOPPED' && break; sleep 0.1; done
  expect_ledger 1 "after kill (the container still exists until delete)" || return 1
  C tasks delete gq-c1 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  C containers rm gq-c1 >/dev/null || return 1
  ! C containers ls -q | grep -qx gq-c1
}
ctr_run_rm() {
  local out; out=$(ctr_run --rm --annotation gpu-quota.io/vram=2g "$CIMG" gq-c3 gq-limits) || { echo "$out"; return 1; }
  has "$out" "grant0=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
ctr_burst() {
  local out; out=$(ctr_run --rm --annotation vram=2g --annotation vram-limit=6g "$CIMG" gq-c4 gq-limits) || { echo "$out"; return 1; }
  has "$out" "grant0=$((2 * GIB))" && has "$out" "limit0=$((6 * GIB))" || return 1
  wait_ledger 0 5
}
# `ctr run --gpus 1`: ctr writes containerd's own `oci-hook` running the
# nvidia-container-cli it finds on its PATH, here tests/toolkit/nvidia-container-cli (a stand-in
# that makes the nodes and cgroup-v1 rules --device names, and logs each run). ctr's --gpus takes
# GPU indices: with vram the slice is GPU 1 and only its node is there, the hook never ran;
# without vram the spec is the engine's and the stand-in gave GPU 1.
ctr_gpus() {
  local tk=$R/ctr-tk out rc=0
  mkdir -p "$tk" && cp "$ROOT/tests/toolkit/nvidia-container-cli" "$tk/" || return 1
  printf 'dev_root=%s\nlog=%s\n' "$GQ/dev" "$tk/standin.log" >"$tk/standin.conf"; : >"$tk/standin.log"
  local probe='ls /dev | grep -E "^nvidia[0-9]+$" | tr "\n" " "; echo; gq-limits 2>/dev/null; true'
  out=$(PATH=$tk:$PATH ctr_run --rm --gpus 1 --annotation vram=2g "$CIMG" gq-cg1 sh -c "$probe" 2>&1) || { echo "$out"; return 1; }
  note "with vram: $(head -1 <<<"$out")"
  [ "$(head -1 <<<"$out")" = "nvidia1 " ] || { echo "GPU nodes: $out"; rc=1; }
  has "$out" "grant0=$((2 * GIB))" && has "$out" "gpus=GPU-00000001-0000-4000-8000-000000000001" || rc=1
  hasnt "$(cat "$tk/standin.log")" "cli ran" || rc=1
  wait_ledger 0 5 || rc=1
  out=$(PATH=$tk:$PATH ctr_run --rm --gpus 1 "$CIMG" gq-cg2 sh -c "$probe" 2>&1) || { echo "$out"; return 1; }
  note "without vram: $(head -1 <<<"$out")"
  [ "$(head -1 <<<"$out")" = "nvidia1 " ] || { echo "GPU nodes: $out"; rc=1; }
  has "$(cat "$tk/standin.log")" "cli ran" || rc=1
  expect_ledger 0 "after a run without a request" || rc=1
  return $rc
}
ctr_cases() {
  check "$CTD: config dump of the installed config shows runtime gpu-quota with BinaryName and pod_annotations" ctd_config_dump
  check "$CTD: ctr run --runc-binary gpu-quota-runtime --annotation vram=2g gets a 2 GiB slice" ctr_slice
  check "$CTD: ctr run of a request that does not fit fails with the gpu-quota message" ctr_refusal
  check "$CTD: ctr run --annotation vram=2g --annotation sm=25% of an image whose user is 1000 is an MPS client of its GPU's daemon; removing it stops the daemon" ctr_share
  check "$CTD: ctr task kill keeps, task delete releases, container rm removes" ctr_release
  check "$CTD: ctr run --rm --annotation gpu-quota.io/vram=2g sees 2 GiB and releases" ctr_run_rm
  check "$CTD: ctr run --rm --annotation vram=2g --annotation vram-limit=6g: the grant holds the guarantee and the burst limit" ctr_burst
  check "$CTD: ctr run --gpus 1 (containerd's oci-hook + a stand-in nvidia-container-cli) with vram=2g: the slice is GPU 1, its node only, the hook never ran; without vram the hook gave GPU 1" ctr_gpus
}
