#!/usr/bin/env bash
# ResNet-50 training-step A/B on the H200 (benchmark, not a test): native vs
# under libgpuquota.so (GPU_QUOTA_VRAM=64g), alternating ROUNDS times in
# separate processes, STEPS timed steps each after WARMUP (BF16=1: bf16 autocast). Prints each
# round's medians and the median ratio. Needs .gpu-carry (make gpu-carry).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SO=$REPO/.gpu-carry/lib/libgpuquota.so
WORK=$REPO/tests/gpu/work.py
ROUNDS=${ROUNDS:-4} STEPS=${STEPS:-50} WARMUP=${WARMUP:-10}
PY=$(command -v python3)
ms() { "$@" 2>/dev/null | grep -o '"median_ms": [0-9.]*' | cut -d' ' -f2; }
nat=(); pre=()
for r in $(seq "$ROUNDS"); do
  a=$(ms timeout 120 $PY "$WORK" resnet ${BF16:+--bf16} --steps "$STEPS" --warmup "$WARMUP")
  b=$(ms env GPU_QUOTA_VRAM=64g LD_PRELOAD="$SO" timeout 120 $PY "$WORK" resnet ${BF16:+--bf16} --steps "$STEPS" --warmup "$WARMUP")
  echo "round $r: native $a ms, intercepted $b ms"
  nat+=("$a"); pre+=("$b")
done
$PY - "${nat[*]}" "${pre[*]}" <<'PYEOF'
import statistics, sys
n = [float(x) for x in sys.argv[1].split()]; p = [float(x) for x in sys.argv[2].split()]
mn, mp = statistics.median(n), statistics.median(p)
print(f"ResNet-50 batch 64, {len(n)} alternating rounds: median of round medians native {mn:.2f} ms, intercepted {mp:.2f} ms, ratio {mp/mn:.3f}; "
      f"spread native {min(n):.2f}-{max(n):.2f}, intercepted {min(p):.2f}-{max(p):.2f}")
PYEOF
