#!/usr/bin/env bash
# Benchmark (not a test): two gpu-quota builds, interleaved in one run, for
# containers WITHOUT a compute share: container start of `true` with
# vram=1g (busybox image, simulated GPUs) and the interceptor's 1 MiB
# cuMemAlloc+cuMemFree pair against the fake driver (tests/fake), one
# process. Says whether a change (e.g. sm=) costs the paths that do not use it.
# Usage: GQ_BIN_A=DIR GQ_BIN_B=DIR benches/build_ab.sh [N_START] [N_ALLOC]   (root)
#   each DIR holds gpu-quota-runtime, gpu-quota-hook, gpu-quota-driver, libgpuquota.so
set -euo pipefail
cd "$(dirname "$0")/.."
NS=${1:-20}; NA=${2:-10}
A=${GQ_BIN_A:?build A}; B=${GQ_BIN_B:?build B}
RUNC=${RUNC:-$(command -v runc)}
D=$(mktemp -d /tmp/gq-bench-ab.XXXXXX)
trap 'for r in a b; do for id in $("$RUNC" --root "$D/root-$r" list -q 2>/dev/null); do "$RUNC" --root "$D/root-$r" delete -f "$id"; done; done; rm -rf "$D"' EXIT
. benches/fakegpus.sh
for r in a b; do
  bin=$([ $r = a ] && echo "$A" || echo "$B")
  cat > "$D/config-$r.toml" <<EOT
ledger_dir = "$D/ledger-$r"
state_dir = "$D/state-$r"
log_file = "$D/gq-$r.log"
hook = "$bin/gpu-quota-hook"
interceptor = "$bin/libgpuquota.so"
runc = "$RUNC"
EOT
done
fake_gpus "$D" 1 > "$D/gpus.toml"
for r in a b; do cat "$D/gpus.toml" >> "$D/config-$r.toml"; done
# one bundle per build: the runtime writes its hook (with its runc root) into config.json
for b in "$D/bundle-a" "$D/bundle-b"; do
mkdir -p "$b/rootfs/bin"; cp "$(command -v busybox)" "$b/rootfs/bin/busybox"; ln -s busybox "$b/rootfs/bin/true"
cat > "$b/config.json" <<EOT
{"ociVersion":"1.0.2-dev","annotations":{"vram":"1g"},"process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["true"],"env":["PATH=/bin"],"cwd":"/","noNewPrivileges":true},
 "root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
 "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"}]}}
EOT
done
now() { date +%s%N; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
sa=(); sb=()
for i in $(seq 1 "$NS"); do
  t=$(now); (cd "$D/bundle-a" && GPU_QUOTA_CONFIG="$D/config-a.toml" "$A/gpu-quota-runtime" --root "$D/root-a" run "a$i" >/dev/null); sa+=($(( ($(now) - t) / 1000 )))
  t=$(now); (cd "$D/bundle-b" && GPU_QUOTA_CONFIG="$D/config-b.toml" "$B/gpu-quota-runtime" --root "$D/root-b" run "b$i" >/dev/null); sb+=($(( ($(now) - t) / 1000 )))
done
for r in a b; do
  [ -z "$(python3 tests/ledger_view.py "$D/ledger-$r" | grep container_id || true)" ] || { echo "ledger $r not empty after the runs"; exit 1; }
done
echo "start A (µs): ${sa[*]}"; echo "start B (µs): ${sb[*]}"
make -s -C tests/fake >/dev/null
cc -O2 -o "$D/bench_alloc" tests/interceptor/bench_alloc.c -ldl -lpthread
pair() { GPU_QUOTA_VRAM=64g GPU_QUOTA_USAGE_FILE="$D/usage-$1" LD_LIBRARY_PATH=tests/fake/build LD_PRELOAD="$2/libgpuquota.so" \
  "$D/bench_alloc" 20000 1048576 1 | grep -o 'ns_per_pair=[0-9.]*' | tail -1 | cut -d= -f2; }
aa=(); ab=()
for i in $(seq 1 "$NA"); do aa+=($(pair a "$A")); ab+=($(pair b "$B")); done
echo "alloc pair A (ns): ${aa[*]}"; echo "alloc pair B (ns): ${ab[*]}"
MA=$(median "${sa[@]}"); MB=$(median "${sb[@]}"); PA=$(median "${aa[@]}"); PB=$(median "${ab[@]}")
awk -v d="$(date -u +%F)" -v ns="$NS" -v na="$NA" -v ma="$MA" -v mb="$MB" -v pa="$PA" -v pb="$PB" 'BEGIN {
  printf "| %s | container start, vram=1g, busybox, simulated GPU | %d | %.1f ms | %.1f ms | %+.1f ms |\n", d, ns, ma / 1000, mb / 1000, (mb - ma) / 1000
  printf "| %s | 1 MiB alloc+free pair, fake driver, 1 process | %d | %.0f ns | %.0f ns | ×%.3f |\n", d, na, pa, pb, pb / pa }'
