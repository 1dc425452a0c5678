# DRA, the node side, end to end on a real containerd 1.7 through its
# CRI socket, in the Debian 13 round only (containerd 1.6 has no CDI devices in
# the CRI).
#
# Sourced by tests/engines/run.sh, which calls `dra_cases` right after
# `k8s_cases` (cluster mode is installed then: `install containerd
# --kubernetes`). It uses run.sh's helpers (check, has, hasnt, Q, K, ledger, …).
# No API server and no kubelet: the DRA driver's part (NodePrepareResources →
# core::claims::prepare) is played by the test-only gq-claim (tests/bin), and
# the kubelet's part by gq-cri, whose --cdi-device fills
# ContainerConfig.CDI_devices exactly as the kubelet does for a prepared claim.
#
#   1. gpu-quota's `cdi_dir` and containerd's CRI `enable_cdi = true` +
#      `cdi_spec_dirs` name one private directory; containerd restarted.
#   2. gq-claim prepares a 4 GiB claim on GPU 1: a 0600 CDI spec appears.
#   3. A pod whose container has the claim's CDI device gets exactly 4 GiB on
#      GPU 1 (limits file, ledger: bound to the claim); the token is neither in
#      the container's environment nor in its config.json.
#   4. A pod that sets GPU_QUOTA_CLAIM_<uid>=<wrong> in its env (no CDI
#      device) is refused at StartContainer, nothing reserved.
#   5. Pod annotations gpu-quota.io/vram + gpu-quota.io/gpu: nothing (cluster
#      mode).
#   6. Unprepare while the pod runs: refused (in use); pods removed, unprepare
#      releases the claim and removes its CDI spec.
DRA_UID=5d1e0c2a-7b3f-4c1d-9e2f-0000000d8a01
DRA_VAR=GPU_QUOTA_CLAIM_5d1e0c2a_7b3f_4c1d_9e2f_0000000d8a01
DRA_GPU=GPU-00000001-0000-4000-8000-000000000001
DBIN=${GQ_K8S_BIN_DIR:-$ROOT/target/debug}   # gq-claim
GQCLAIM() { timeout 30 "$DBIN/gq-claim" "$@"; }

dra_setup() {
  if [ -z "${GQ_K8S_BIN_DIR:-}" ]; then
    (cd "$ROOT" && cargo build -q -p gpu-quota-e2e --bin gq-claim) >"$LOG/dra-build.log" 2>&1 ||
      { tail -20 "$LOG/dra-build.log"; return 1; }
  fi
  DRA_CDI=$R/dra-cdi
  # gpu-quota writes claim specs where containerd reads CDI specs
  grep -q '^cdi_dir' "$GPU_QUOTA_CONFIG" ||
    sed -i "1i cdi_dir = \"$DRA_CDI\"" "$GPU_QUOTA_CONFIG" || return 1
  local cfg=$R/etc/containerd/config.toml
  grep -q '^ *enable_cdi' "$cfg" || python3 - "$cfg" "$DRA_CDI" <<'PY' || return 1
import sys
p, d = sys.argv[1], sys.argv[2]
lines = open(p).read().split("\n")
i = next(i for i, l in enumerate(lines) if l.strip() == '[plugins."io.containerd.grpc.v1.cri"]')
lines[i + 1:i + 1] = ["    enable_cdi = true", '    cdi_spec_dirs = ["%s"]' % d]
open(p, "w").write("\n".join(lines))
PY
  k8s_restart_containerd || return 1
  local dump sec
  dump=$(timeout 20 containerd --config "$cfg" config dump) || return 1
  sec=$(awk '/^  \[plugins."io.containerd.grpc.v1.cri"\]/{on=1; next} on && /^  \[/{exit} on' <<<"$dump")
  has "$sec" "enable_cdi = true" && has "$sec" "cdi_spec_dirs = [\"$DRA_CDI\"]" || return 1
  note "containerd CRI: $(grep -E 'enable_cdi|cdi_spec_dirs' <<<"$sec" | tr -s ' ' | tr '\n' ';')"
}

dra_prepare() {
  local out f
  out=$(GQCLAIM prepare "$DRA_UID" default vram-4g "$DRA_GPU" $((4 * GIB)) 2>&1) || { echo "$out"; return 1; }
  has "$out" "vram.gpu-quota.io/claim=$DRA_UID" || return 1
  f=$DRA_CDI/vram.gpu-quota.io-claim-$DRA_UID.json
  [ "$(stat -c %a "$f")" = 600 ] || { ls -l "$f"; return 1; }
  has "$(cat "$f")" "\"$DRA_VAR=" || return 1
  expect_ledger 1 "(the claim's entry)" || return 1
  has "$(ledger)" "\"uid\": \"$DRA_UID\"" && has "$(ledger)" "\"bytes\": $((4 * GIB))"
}

DRA_C1=""
dra_claim() {
  local c l e token pid
  token=$(sed -n "s/.*\"$DRA_VAR=\\([0-9a-f]*\\)\".*/\\1/p" "$DRA_CDI/vram.gpu-quota.io-claim-$DRA_UID.json")
  [ ${#token} = 64 ] || { echo "no token in the spec"; return 1; }
  Q run-pod --name gq-dra1 --handler gpu-quota --out "$R/pod-dra1.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-dra1.json" --name main --image "$CIMG" --cdi-device "vram.gpu-quota.io/claim=$DRA_UID" -- sleep 600) ||
    { echo "$c"; return 1; }
  DRA_C1=$c
  Q start "$c" || return 1
  expect_ledger 2 "(the claim + its container)" || return 1
  has "$(ledger)" "\"bound_claim\": \"$DRA_UID\"" || return 1
  has "$(ledger)" '"runtime_root": "/run/containerd/runc/k8s.io"' || return 1
  l=$(Q exec "$c" -- gq-limits) || { echo "$l"; return 1; }
  has "$l" "grant0=$((4 * GIB))" && has "$l" "gpus=$DRA_GPU" && true || return 1
  # the container's process (pid from the ledger, as the hook confirmed it) and
  # the config.json runc ran never carry the token
  pid=$(ledger | python3 -c 'import json,sys; print(next(r["pid"] for r in json.load(sys.stdin)["reservations"] if r.get("bound_claim") == sys.argv[1]))' \
    "$DRA_UID") || return 1
  e=$(tr '\0' '\n' <"/proc/$pid/environ") || return 1
  has "$e" "PATH=" && hasnt "$e" "GPU_QUOTA_CLAIM" && hasnt "$e" "$token" || return 1
  [ -f "$R/ctd/state/$TASKS/$c/config.json" ] || { echo "no bundle for $c"; return 1; }
  hasnt "$(cat "$R/ctd/state/$TASKS/$c/config.json")" "$token" || return 1
  note "limits: $(tr '\n' ' ' <<<"$l" | cut -c1-200)"
  # what runc exec gets is containerd's own copy of the spec (docs/security.md §16)
  note "ExecSync env carries the claim variable: $(Q exec "$c" -- env | grep -c GPU_QUOTA_CLAIM) line(s) (containerd's stored spec)"
}

dra_forged_env() {
  local c out rc
  Q run-pod --name gq-dra2 --handler gpu-quota --out "$R/pod-dra2.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-dra2.json" --name main --image "$CIMG" \
    --env "$DRA_VAR=0000000000000000000000000000000000000000000000000000000000000000" --env GPU_QUOTA_VRAM=8g -- sleep 600) ||
    { echo "$c"; return 1; }
  out=$(Q start "$c" 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "StartContainer succeeded"; return 1; }
  has "$out" "StartContainer:" && has "$out" "gpu-quota: " && has "$out" "does not match the token of the prepared claim default/vram-4g" || return 1
  note "$out"
  [ "$(Q state "$c")" != CONTAINER_RUNNING ] || { echo "refused container is running"; return 1; }
  expect_ledger 2 "after the refusal (the claim + the first pod's container)"
}

dra_pod_annotations() {
  local c a out
  Q run-pod --name gq-dra3 --handler gpu-quota --annotation gpu-quota.io/vram=8g --annotation "gpu-quota.io/gpu=$DRA_GPU" \
    --out "$R/pod-dra3.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-dra3.json" --name main --image "$CIMG" -- sleep 600) || { echo "$c"; return 1; }
  Q start "$c" || return 1
  a=$(bundle_annotations "$c") || { echo "no bundle for $c"; return 1; }
  hasnt "$a" "gpu-quota.io/" || return 1
  out=$(Q exec "$c" -- sh -c 'test -e /run/gpu-quota && echo HAS_GQ; true')
  hasnt "$out" HAS_GQ || return 1
  expect_ledger 2 "(nothing for the annotated pod)"
}

dra_unprepare() {
  local out rc f
  out=$(GQCLAIM unprepare "$DRA_UID" 2>&1); rc=$?
  [ $rc = 3 ] || { echo "unprepare while in use: status $rc: $out"; return 1; }
  has "$out" "in use by running container $DRA_C1" || return 1
  for f in "$R"/pod-dra*.json; do
    Q stop-pod "$f" && Q remove-pod "$f" && rm -f "$f" || return 1
  done
  wait_ledger 1 5 || return 1
  out=$(GQCLAIM unprepare "$DRA_UID" 2>&1) || { echo "$out"; return 1; }
  expect_ledger 0 "after unprepare" && no_state_dirs || return 1
  [ ! -e "$DRA_CDI/vram.gpu-quota.io-claim-$DRA_UID.json" ] || { echo "CDI spec left"; return 1; }
}

dra_cases() {
  local DRA="DRA (containerd $CV CRI, CDI + gpu-quota claims)"
  check "$DRA: cdi_dir and containerd's enable_cdi + cdi_spec_dirs name one directory; containerd restarted" dra_setup
  check "$DRA: a prepared 4 GiB claim on GPU 1 writes its 0600 CDI spec and holds its bytes in the ledger" dra_prepare
  check "$DRA: a container with the claim's CDI device (CreateContainer CDI_devices, as the kubelet passes it) gets exactly 4 GiB on GPU 1; the token is in neither its env nor its config.json" dra_claim
  check "$DRA: a pod env GPU_QUOTA_CLAIM_<uid>=<wrong> without the CDI device is refused at StartContainer, nothing reserved" dra_forged_env
  check "$DRA: cluster mode: pod annotations gpu-quota.io/vram + gpu-quota.io/gpu give nothing" dra_pod_annotations
  check "$DRA: unprepare is refused while the pod runs; pods removed, unprepare releases the claim and removes its CDI spec" dra_unprepare
  # whatever failed above: no claim outlives the round
  local f; for f in "$R"/pod-dra*.json; do [ -e "$f" ] && Q stop-pod "$f" >/dev/null 2>&1 && Q remove-pod "$f" >/dev/null 2>&1 && rm -f "$f"; done
  GQCLAIM unprepare "$DRA_UID" >/dev/null 2>&1
}
