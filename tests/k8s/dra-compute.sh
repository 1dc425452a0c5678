# The compute cases of tests/k8s/dra-real.sh (sourced by it after its
# helpers): a claim asks for a compute share beside memory, as the second
# consumable capacity of the GPU's compute device (gpu-<i>-compute).

# a pod NAME whose claim asks for MEM and COMPUTE percent (split over PROCS
# processes when given, the claim's opaque smProcs), running as USER; its
# container prints its MPS variables and the MPS pipe directory, then sleeps
compute_pod() {  # NAME MEM COMPUTE USER [PROCS]
  local config=""
  [ -n "${5:-}" ] && config="      config:
      - opaque:
          driver: vram.gpu-quota.io
          parameters: {smProcs: ${5:-}}"
  template_pod "$1" "vram-$(tr A-Z a-z <<<"$2")-c$3-u$4${5:+-p${5:-}}" "{memory: $2, compute: \"$3\"}" "$config" \
    "{runAsUser: $4, runAsGroup: $4}" "env | grep ^CUDA_MPS; ls /run/gpu-quota/mps; sleep 3600"
}
# "device memory compute" of a pod's claim
pod_claim_compute() {
  local c; c=$(KC get pod "$1" -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}')
  KC get resourceclaim "$c" -o jsonpath='{.status.allocation.devices.results[0].device} {.status.allocation.devices.results[0].consumedCapacity.memory} {.status.allocation.devices.results[0].consumedCapacity.compute}'
}
devices_published() { slice_json | python3 -c '
import json,sys
print(" ".join(d["name"] for s in json.load(sys.stdin)["items"] for d in (s["spec"].get("devices") or [])))'; }
mps_daemons() { ls -d "$GQ"/state/mps/GPU-* 2>/dev/null | wc -l; }
# the waiting or terminated message of a pod's first container
ctr_message() { KC get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.waiting.message}{.status.containerStatuses[0].state.terminated.message}'; }

case_compute_client() {  # a claim of 8Gi and 25 %: its container is an MPS client at that share
  reset_pods || return 1
  note "published devices: $(devices_published)"
  has "$(devices_published)" "gpu-0 gpu-0-compute gpu-1 gpu-1-compute" || return 1
  compute_pod m1 8Gi 25 1000 || return 1
  waitfor 90 running m1 || { KC describe pod m1 | tail -20; return 1; }
  local a; a=$(pod_claim_compute m1)
  note "m1's claim: $a (device, memory, compute)"
  has "$a" "-compute 8Gi 25" || return 1
  local l; waitfor 20 '[ -n "$(printed m1 c | grep control)" ]' || { printed m1 c; return 1; }
  l=$(printed m1 c)
  note "m1's container (uid 1000) printed: $(grep ^CUDA_MPS <<<"$l" | tr '\n' ' ')"
  has "$l" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" && has "$l" "CUDA_MPS_PIPE_DIRECTORY=/run/gpu-quota/mps" &&
    has "$l" "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M" && has "$l" "control" || return 1
  [ "$(mps_daemons)" = 1 ] || { echo "MPS daemons: $(mps_daemons)"; return 1; }
  local s; s=$(ledger | python3 -c '
import json,sys
rs=json.load(sys.stdin)["reservations"]
print(" ".join("%s:%s:%s" % ("claim" if r.get("claim") else "bound", s.get("sm",0), s.get("sm_user","-")) for r in rs for s in r["slices"]))')
  note "ledger slices (kind:sm:user): $s"
  has "$s" "claim:25:-" && has "$s" "bound:25:1000" || return 1
  # a root container on a compute claim is refused at create, naming why
  compute_pod m0 2Gi 10 0 || return 1
  waitfor 60 '[ -n "$(ctr_message m0)" ]' || { KC describe pod m0 | tail -15; return 1; }
  note "m0 (root, 10 %): $(ctr_message m0 | cut -c1-240)"
  has "$(ctr_message m0)" "host root"
}
case_compute_pending() {  # two 50 % claims share one GPU; a third compute claim stays Pending
  reset_pods || return 1
  # GPU 1 wholly held by a container outside Kubernetes: it offers neither device
  outside gq-out1 1 16g || return 1
  waitfor 10 '! grep -q "gpu-1" <<<"$(devices_published)"' || { echo "still published: $(devices_published)"; return 1; }
  note "with GPU 1 held outside Kubernetes, published: $(devices_published)"
  compute_pod h1 4Gi 50 1000 2 && compute_pod h2 4Gi 50 1001 || return 1
  waitfor 90 running h1 || { KC describe pod h1 | tail -20; return 1; }
  waitfor 60 running h2 || { KC describe pod h2 | tail -20; return 1; }
  local a1 a2; a1=$(pod_claim_compute h1); a2=$(pod_claim_compute h2)
  note "h1's claim: $a1 (smProcs 2); h2's claim: $a2"
  has "$a1" "gpu-0-compute 4Gi 50" && has "$a2" "gpu-0-compute 4Gi 50" || return 1
  waitfor 20 '[ -n "$(printed h1 c | grep control)" ] && [ -n "$(printed h2 c | grep control)" ]' || return 1
  # 50 % over two processes: each client at 25
  note "h1 printed $(printed h1 c | grep THREAD); h2 printed $(printed h2 c | grep THREAD)"
  has "$(printed h1 c)" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" && has "$(printed h2 c)" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" || return 1
  compute_pod h3 2Gi 10 1000 || return 1
  sleep 8
  [ "$(phase h3)" = Pending ] || { echo "h3 is $(phase h3)"; return 1; }
  local n m; n=$(KC get pod h3 -o jsonpath='{.spec.nodeName}')
  m=$(KC get pod h3 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
  note "h3 (10 %): Pending, nodeName '${n}', scheduler: $m"
  [ -z "$n" ] && has "$m" "cannot allocate all claims"
}
case_compute_kept_off() {  # a claim without compute is kept off the GPU that serves shares
  # (after case_compute_pending: h1 and h2 hold gpu-0-compute, GPU 1 is held outside)
  running h1 && running h2 || { echo "h1/h2 not running"; return 1; }
  KC delete pod h3 --grace-period=0 --force >/dev/null 2>&1
  claim_pod k1 4Gi || return 1
  sleep 8
  [ "$(phase k1)" = Pending ] || { echo "k1 is $(phase k1): $(pod_claim_alloc k1)"; return 1; }
  note "k1 (4Gi, no compute): Pending while gpu-0 serves shares: $(KC get pod k1 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')"
  KC delete pod h1 h2 --grace-period=1 >/dev/null || return 1
  local t0=$SECONDS
  waitfor 120 running k1 || { KC describe pod k1 | tail -20; return 1; }
  note "after h1 and h2 were deleted, k1 runs after $((SECONDS - t0)) s: $(pod_claim_alloc k1)"
  has "$(pod_claim_alloc k1)" "gpu-0 4Gi" || return 1
  waitfor 20 '[ "$(mps_daemons)" = 0 ]' || { echo "MPS daemons left: $(mps_daemons)"; return 1; }
}
