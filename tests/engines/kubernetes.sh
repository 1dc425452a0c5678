# Kubernetes cluster mode, end to end on a real containerd (1.6 in the Debian 12
# round, 1.7 in the Debian 13 round) through its CRI socket.
#
# Sourced by tests/engines/run.sh, which calls `k8s_cases` after `cri_cases` in
# each round (it uses run.sh's helpers: check, has, Q, C, ledger, …). The
# kubelet's part is played by gq-test-kubelet (deviceplugin/tests/bin; protocol
# test: no kubelet is packaged for these machines): it registers the real
# gpu-quota-device-plugin, asks for its preferred units and calls Allocate;
# the annotations Allocate returns go into CreateContainer exactly as the
# kubelet passes a device plugin's ContainerAllocateResponse.annotations.
#
#   1. `gpu-quota install containerd --kubernetes` (container_annotations for
#      the plugin's two keys, no pod_annotations); containerd restarted.
#   2. Allocate's annotations on CreateContainer: the container gets exactly
#      that slice on that GPU; its reservation is Kubernetes' own for the
#      plugin (runc root /run/containerd/runc/k8s.io), so no unit goes unhealthy.
#   3. The same keys as pod annotations (and the short keys as container
#      annotations) give nothing: not in config.json, no slice, ledger unchanged.
#   4. A ctr container outside Kubernetes holding 3 GiB: ListAndWatch reports 3
#      units of that GPU unhealthy; after it is gone, healthy again.
#   5. Pods removed, the plugin stops on SIGTERM (exit 0, socket removed).
KBIN=${GQ_K8S_BIN_DIR:-$ROOT/target/debug}   # gpu-quota-device-plugin, gq-test-kubelet
DP_PID=""
KUB() { timeout 60 "$KBIN/gq-test-kubelet" --dir "$R/dp" --timeout 20 "$@"; }

k8s_build() {
  [ -n "${GQ_K8S_BIN_DIR:-}" ] && return 0
  (cd "$ROOT" && cargo build -q -p gpu-quota-device-plugin --bins) >"$LOG/k8s-build.log" 2>&1 ||
    { tail -20 "$LOG/k8s-build.log"; return 1; }
}

k8s_restart_containerd() {
  stop_pid "$CTD_PID"; CTD_PID=""
  containerd --config "$R/etc/containerd/config.toml" >>"$LOG/containerd-$ROUND.log" 2>&1 &
  CTD_PID=$!
  local i
  for i in $(seq 1 300); do
    timeout 5 ctr --address "$CSOCK" version >/dev/null 2>&1 && return 0
    kill -0 "$CTD_PID" 2>/dev/null || { echo "containerd exited:"; tail -20 "$LOG/containerd-$ROUND.log"; return 1; }
    sleep 0.1
  done
  echo "containerd not ready after 30s"; return 1
}

k8s_setup() {
  k8s_build || return 1
  "$REL/gpu-quota" install containerd --kubernetes --root "$R" --runtime-path "$RT" >"$LOG/install-k8s-$ROUND.log" 2>&1 ||
    { cat "$LOG/install-k8s-$ROUND.log"; return 1; }
  has "$(cat "$LOG/install-k8s-$ROUND.log")" "cluster mode" || return 1
  k8s_restart_containerd || return 1
  # what containerd itself made of the handler
  local dump sec
  dump=$(timeout 20 containerd --config "$R/etc/containerd/config.toml" config dump) || return 1
  sec=$(awk '/containerd.runtimes.gpu-quota\]/{on=1; next} on && /^ *\[/{exit} on' <<<"$dump")
  has "$sec" 'container_annotations = ["gpu-quota.io/vram", "gpu-quota.io/gpu"]' &&
    has "$sec" 'pod_annotations = []' || return 1
  mkdir -p "$R/dp"
  "$KBIN/gpu-quota-device-plugin" --config "$GPU_QUOTA_CONFIG" --plugin-dir "$R/dp" --poll-ms 100 \
    >"$LOG/device-plugin-$ROUND.log" 2>&1 &
  DP_PID=$!
  local l; l=$(KUB list) || { echo "$l"; tail -5 "$LOG/device-plugin-$ROUND.log"; return 1; }
  note "$(head -1 <<<"$l")"
  has "$l" "healthy 32 of 32"   # two 16 GiB GPUs, no reserve
}

k8s_allocate() {
  local ann args=() kv uuid c l
  ann=$(KUB allocate --units 4) || { echo "$ann"; return 1; }
  note "Allocate: $(tr '\n' ' ' <<<"$ann")"
  has "$ann" "gpu-quota.io/vram=4GiB" || return 1
  uuid=$(sed -n 's/^gpu-quota.io\/gpu=//p' <<<"$ann")
  [[ "$uuid" == GPU-* ]] || { echo "no GPU in: $ann"; return 1; }
  while IFS= read -r kv; do args+=(--annotation "$kv"); done <<<"$ann"
  Q run-pod --name gq-k8s1 --handler gpu-quota --out "$R/pod-k1.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-k1.json" --name main --image "$CIMG" "${args[@]}" -- sleep 600) || { echo "$c"; return 1; }
  Q start "$c" || return 1
  expect_ledger 1 "after StartContainer" || return 1
  has "$(ledger)" "\"uuid\": \"$uuid\"" && has "$(ledger)" "\"bytes\": $((4 * GIB))" || return 1
  has "$(ledger)" '"runtime_root": "/run/containerd/runc/k8s.io"' || return 1
  has "$(bundle_annotations "$c")" "\"gpu-quota.io/gpu\":\"$uuid\"" || return 1
  l=$(Q exec "$c" -- gq-limits) || { echo "$l"; return 1; }
  has "$l" "grant0=$((4 * GIB))" || return 1
  # Kubernetes' own reservation: the plugin keeps all its units healthy
  l=$(KUB list) || { echo "$l"; return 1; }
  has "$l" "healthy 32 of 32"
}

k8s_pod_annotation() {
  local g c a id out
  g=$(ledger | grep -o '"uuid": *"GPU-[^"]*"' | head -1 | grep -o 'GPU-[^"]*')
  Q run-pod --name gq-k8s2 --handler gpu-quota --annotation gpu-quota.io/vram=8g --annotation "gpu-quota.io/gpu=$g" \
    --annotation vram=8g --out "$R/pod-k2.json" >/dev/null || return 1
  c=$(Q create --pod "$R/pod-k2.json" --name main --image "$CIMG" --annotation vram=4g --annotation gpus=2 -- sleep 600) ||
    { echo "$c"; return 1; }
  Q start "$c" || return 1
  for id in "$(pod_id "$R/pod-k2.json")" "$c"; do
    a=$(bundle_annotations "$id") || { echo "no bundle for $id"; return 1; }
    hasnt "$a" "gpu-quota.io/" && hasnt "$a" '"vram"' && hasnt "$a" '"gpus"' || return 1
  done
  has "$a" '"io.kubernetes.cri.container-type":"container"' || return 1
  out=$(Q exec "$c" -- sh -c 'test -e /run/gpu-quota && echo HAS_GQ; true')
  hasnt "$out" HAS_GQ || return 1
  expect_ledger 1 "(only the first pod's slice)"
}

k8s_outside() {
  local l
  C run -d --snapshotter native --fifo-dir "$R/fifo" --runc-binary "$RT" --annotation vram=3g --annotation gpu=1 \
    "$CIMG" gq-k8s-out sleep 600 >/dev/null || return 1
  expect_ledger 2 "after ctr run" || return 1
  l=$(KUB list --until-healthy 29) || { echo "$l"; return 1; }
  has "$l" "GPU-00000001-0000-4000-8000-000000000001 13/16" || return 1
  note "$(grep advertising "$LOG/device-plugin-$ROUND.log" | tail -1 | cut -c1-300)"
  C tasks kill -s KILL gq-k8s-out >/dev/null 2>&1
  local i; for i in $(seq 1 50); do C tasks ls | grep -q 'gq-k8s-out.*STOPPED' && break; sleep 0.1; done
  C tasks delete gq-k8s-out >/dev/null && C containers rm gq-k8s-out >/dev/null || return 1
  wait_ledger 1 5 || return 1
  l=$(KUB list --until-healthy 32) || { echo "$l"; return 1; }
}

k8s_teardown() {
  local f rc=0
  for f in "$R/pod-k1.json" "$R/pod-k2.json"; do
    [ -e "$f" ] || continue
    Q stop-pod "$f" && Q remove-pod "$f" && rm -f "$f" || rc=1
  done
  [ $rc = 0 ] && wait_ledger 0 5 && no_state_dirs || return 1
  [ -n "$DP_PID" ] || { echo "no plugin"; return 1; }
  kill -TERM "$DP_PID"; wait "$DP_PID"; rc=$?; DP_PID=""
  [ $rc = 0 ] || { echo "plugin exit status $rc"; tail -5 "$LOG/device-plugin-$ROUND.log"; return 1; }
  [ ! -e "$R/dp/gpu-quota-vram.sock" ] || { echo "plugin socket left"; return 1; }
  has "$(cat "$LOG/device-plugin-$ROUND.log")" "SIGTERM: stopping"
}

k8s_cases() {
  local K8S="Kubernetes (containerd $CV CRI + gpu-quota-device-plugin)"
  check "$K8S: install containerd --kubernetes: containerd's handler has container_annotations for the plugin's keys and no pod_annotations; the plugin registers 32 units" k8s_setup
  check "$K8S: the annotations Allocate returned, passed to CreateContainer as kubelet passes them, give the container that 4 GiB slice on that GPU; its units stay healthy" k8s_allocate
  check "$K8S: cluster mode: pod annotations gpu-quota.io/vram + gpu-quota.io/gpu (and container annotations vram, gpus) give nothing" k8s_pod_annotation
  check "$K8S: a ctr container outside Kubernetes holding 3 GiB makes 3 units of its GPU unhealthy in ListAndWatch; gone: healthy again" k8s_outside
  check "$K8S: pods removed release their slices; the plugin exits 0 on SIGTERM and removes its socket" k8s_teardown
  if [ -n "$DP_PID" ]; then stop_pid "$DP_PID"; DP_PID=""; fi
}
