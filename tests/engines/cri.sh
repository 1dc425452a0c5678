# shellcheck shell=bash
# containerd's CRI socket, as kubelet drives it (tests/cri's gq-cri): slices,
# refusals, the annotation allowlist, NVIDIA's device plugin; `cri_cases`.
#
# Sourced by tests/engines/run.sh (its helpers: check, has, Q, C, D, P, ledger, …;
# its per-round names: R, CSOCK, DSOCK, versions), which calls the cases in each round.

# ================================================================ CRI (kubelet's path)
TASKS=io.containerd.runtime.v2.task/k8s.io
bundle_annotations() { grep -o '"annotations":{[^}]*}' "$R/ctd/state/$TASKS/$1/config.json" 2>/dev/null; }
pod_id() { sed -E 's/^\{"id":"([0-9a-f]+)".*/\1/' "$1"; }
cri_version() {
  local v; v=$(Q version) || { echo "$v"; return 1; }
  note "$v"
  has "$v" "containerd"
}
cri_sandbox_free() {
  # a pod asking for 2 GiB: its sandbox (pause) container is created by the runtime with the
  # request annotation in its config.json, and is not charged
  Q run-pod --name gq-pod1 --handler gpu-quota --annotation gpu-quota.io/vram=2g --out "$R/pod-1.json" >/dev/null || return 1
  local a; a=$(bundle_annotations "$(pod_id "$R/pod-1.json")") || { echo "no sandbox bundle"; return 1; }
  has "$a" '"gpu-quota.io/vram":"2g"' && has "$a" '"io.kubernetes.cri.container-type":"sandbox"' || return 1
  has "$(cat "/proc/$CTD_PID/cmdline" | tr '\0' ' ')" containerd || return 1
  expect_ledger 0 "after RunPodSandbox (the pause container must not be charged)"
}
cri_slice() {
  CRI_C1=$(Q create --pod "$R/pod-1.json" --name main --image "$CIMG" -- sleep 600) || { echo "$CRI_C1"; return 1; }
  expect_ledger 0 "after CreateContainer (containerd runs the runtime only at StartContainer)" || return 1
  Q start "$CRI_C1" || return 1
  expect_ledger 1 "after StartContainer" || return 1
  has "$(ledger)" "\"bytes\": $((2 * GIB))" || return 1
  has "$(bundle_annotations "$CRI_C1")" '"gpu-quota.io/vram":"2g"' || return 1
  local l; l=$(Q exec "$CRI_C1" -- gq-limits) || { echo "$l"; return 1; }
  has "$l" "grant0=$((2 * GIB))"
}
cri_workload() {
  # the CRI's annotations name the pod: gpu-quota ls, the metrics' labels and the event log show it
  local out; out=$("$REL/gpu-quota" ls 2>&1) || { echo "$out"; return 1; }
  has "$out" "gq-test/gq-pod1/main" || { echo "ls: $out"; return 1; }
  out=$("$REL/gpu-quota" metrics 2>&1) || { echo "$out"; return 1; }
  has "$out" 'namespace="gq-test"' && has "$out" 'pod="gq-pod1"' && has "$out" 'container_name="main"' &&
    has "$out" 'pod_uid="gq-uid-gq-pod1"' || { echo "metrics: $(grep gpu_quota_container_slice_bytes <<<"$out")"; return 1; }
  has "$(cat "$GQ/gq.log")" '"pod":"gq-pod1"' || { echo "events: $(tail -3 "$GQ/gq.log")"; return 1; }
  note "$(grep '^gq-\|CONTAINER' <<<"$("$REL/gpu-quota" ls)" | head -3)"
}
cri_refusal() {
  # 15 GiB pinned to the GPU that holds the first pod's 2 GiB
  local g out rc c; g=$(ledger_gpu)
  Q run-pod --name gq-pod2 --handler gpu-quota --annotation gpu-quota.io/vram=15g --annotation gpu-quota.io/gpu="$g" \
    --out "$R/pod-2.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-2.json" --name main --image "$CIMG" -- sleep 600) || { echo "$c"; return 1; }
  out=$(Q start "$c" 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "StartContainer succeeded"; return 1; }
  has "$out" "StartContainer:" && has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB (annotation gpu-quota.io/vram)" || return 1
  note "$out"
  [ "$(Q state "$c")" != CONTAINER_RUNNING ] || { echo "refused container is running"; return 1; }
  expect_ledger 1 "after the refusal"
}
cri_release() {
  Q stop-pod "$R/pod-1.json" || return 1
  wait_ledger 0 5 || return 1
  Q remove-pod "$R/pod-1.json" && Q stop-pod "$R/pod-2.json" && Q remove-pod "$R/pod-2.json" || return 1
  rm -f "$R"/pod-[12].json
  [ -z "$(K containers ls -q)" ] || { echo "containers left: $(K containers ls -q)"; return 1; }
  expect_ledger 0 && no_state_dirs
}
cri_allowlist() {
  # keys outside pod_annotations (a pod annotation, and container annotations, for which
  # install allows nothing) never reach the runtime: not in config.json, no slice
  Q run-pod --name gq-pod3 --handler gpu-quota --annotation example.com/vram=4g --out "$R/pod-3.json" >/dev/null || return 1
  local c a out; c=$(Q create --pod "$R/pod-3.json" --name main --image "$CIMG" --annotation vram=4g \
    --annotation gpu-quota.io/vram=4g -- sleep 600) || { echo "$c"; return 1; }
  Q start "$c" || return 1
  for id in "$(pod_id "$R/pod-3.json")" "$c"; do
    a=$(bundle_annotations "$id") || { echo "no bundle for $id"; return 1; }
    hasnt "$a" "example.com/vram" && hasnt "$a" '"vram"' && hasnt "$a" "gpu-quota.io/vram" || return 1
  done
  has "$a" '"io.kubernetes.cri.container-type":"container"' || return 1
  out=$(Q exec "$c" -- sh -c 'test -e /run/gpu-quota && echo HAS_GQ; true')
  hasnt "$out" HAS_GQ || return 1
  expect_ledger 0 || return 1
  Q stop-pod "$R/pod-3.json" && Q remove-pod "$R/pod-3.json" && rm -f "$R/pod-3.json"
}
# Beside NVIDIA's device plugin: kubelet passes its Allocate response as
# ContainerConfig.devices (the GPU's node) and envs (NVIDIA_VISIBLE_DEVICES); the gpu-quota
# request comes from the pod annotation. The GPU NVIDIA's plugin allocated becomes the
# slice's GPU and the container sees only that GPU's node; a contradiction is refused.
cri_nvidia_plugin() {
  Q run-pod --name gq-pod4 --handler gpu-quota --annotation gpu-quota.io/vram=2g --out "$R/pod-4.json" >/dev/null || return 1
  local c out; c=$(Q create --pod "$R/pod-4.json" --name main --image "$CIMG" \
    --device "$GQ/dev/nvidia1:/dev/nvidia1" --env NVIDIA_VISIBLE_DEVICES=GPU-00000001-0000-4000-8000-000000000001 \
    -- sleep 600) || { echo "$c"; return 1; }
  Q start "$c" || return 1
  expect_ledger 1 "after StartContainer" || return 1
  [ "$(ledger_gpu)" = 1 ] || { echo "the slice is on GPU $(ledger_gpu), NVIDIA's plugin allocated GPU 1"; ledger; return 1; }
  out=$(Q exec "$c" -- ls /dev) || { echo "$out"; return 1; }
  has "$out" nvidia1 && hasnt "$out" nvidia0 || return 1
  out=$(Q exec "$c" -- gq-limits) || { echo "$out"; return 1; }
  has "$out" "GPU-00000001-0000-4000-8000-000000000001" && hasnt "$out" "GPU-00000000-0000-4000-8000-000000000000" || return 1
  Q stop-pod "$R/pod-4.json" && wait_ledger 0 5 && Q remove-pod "$R/pod-4.json" && rm -f "$R/pod-4.json"
}
cri_nvidia_contradiction() {
  Q run-pod --name gq-pod5 --handler gpu-quota --annotation gpu-quota.io/vram=2g \
    --annotation gpu-quota.io/gpu=GPU-00000000-0000-4000-8000-000000000000 --out "$R/pod-5.json" >/dev/null || return 1
  local c out rc; c=$(Q create --pod "$R/pod-5.json" --name main --image "$CIMG" \
    --device "$GQ/dev/nvidia1:/dev/nvidia1" -- sleep 600) || { echo "$c"; return 1; }
  out=$(Q start "$c" 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "StartContainer succeeded"; return 1; }
  has "$out" "gpu-quota" && has "$out" "nvidia1" || return 1
  note "$out"
  expect_ledger 0 "after the refusal" || return 1
  Q stop-pod "$R/pod-5.json" && Q remove-pod "$R/pod-5.json" && rm -f "$R/pod-5.json"
}
cri_cases() {
  check "$CRI: Version over the CRI socket answers" cri_version
  check "$CRI: RunPodSandbox (handler gpu-quota, pod annotation gpu-quota.io/vram=2g): the sandbox (pause) is not charged" cri_sandbox_free
  check "$CRI: CreateContainer + StartContainer in that pod: the container sees its 2 GiB slice" cri_slice
  check "$CRI: the pod's namespace, name, uid and container name (CRI annotations) are in gpu-quota ls, the metrics' labels and the event log" cri_workload
  check "$CRI: a pod request that does not fit is refused with the gpu-quota message (at StartContainer: CreateContainer does not run the runtime)" cri_refusal
  check "$CRI: StopPodSandbox releases the slice; RemovePodSandbox removes the pods" cri_release
  check "$CRI: a pod annotation outside the pod_annotations allowlist (and container annotations) never reach the runtime" cri_allowlist
  check "$CRI: beside NVIDIA's device plugin (devices + NVIDIA_VISIBLE_DEVICES of its Allocate for GPU 1) the slice is on GPU 1 and only its node is in the container" cri_nvidia_plugin
  check "$CRI: NVIDIA's plugin's GPU 1 with gpu-quota.io/gpu naming GPU 0 is refused at StartContainer, naming both, nothing reserved" cri_nvidia_contradiction
}
