#!/usr/bin/env bash
# Benchmark (not a test): time to run a container of `true` through
# gpu-quota-runtime with a slice (admission, config.json patch, state tmpfs,
# hook: ledger confirm, state dir, mounts, loader cache, release on exit) vs
# plain runc, interleaved, median of N runs each, for a busybox image and a
# glibc image (the host's loader and its whole /etc/ld.so.cache, so the hook
# parses and rewrites a real-sized cache).
# Usage: benches/container_start.sh [N]   (root)
# Env: GQ_BENCH_REAL=1 uses the host's NVML/ldcache/nodes (a GPU machine),
# GQ_BIN (dir of gpu-quota binaries, default target/release), RUNC, GQ_BENCH_KEEP=1 keeps the work dir.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-25}
BIN=${GQ_BIN:-$(pwd)/target/release}
RUNC=${RUNC:-$(command -v runc)}
D=$(mktemp -d /tmp/gq-bench.XXXXXX)
[ -n "${GQ_BENCH_KEEP:-}" ] || trap 'for id in $("$RUNC" --root "$D/root" list -q 2>/dev/null); do "$RUNC" --root "$D/root" delete -f "$id"; done; rm -rf "$D"' EXIT
export GPU_QUOTA_CONFIG="$D/config.toml"
cat > "$GPU_QUOTA_CONFIG" <<EOT
ledger_dir = "$D/ledger"
state_dir = "$D/state"
log_file = "$D/gq.log"
hook = "$BIN/gpu-quota-hook"
interceptor = "$BIN/libgpuquota.so"
runc = "$RUNC"
EOT
if [ -z "${GQ_BENCH_REAL:-}" ]; then
  . benches/fakegpus.sh
  fake_gpus "$D" 1 >> "$GPU_QUOTA_CONFIG"
fi
mk() { # NAME ANNOTATIONS [glibc]
  local b="$D/$1"; mkdir -p "$b/rootfs/bin"; cp "$(command -v busybox)" "$b/rootfs/bin/busybox"; ln -s busybox "$b/rootfs/bin/true"
  if [ "${3:-}" = glibc ]; then
    mkdir -p "$b/rootfs/lib64" "$b/rootfs/etc"
    cp "$(readlink -f /lib64/ld-linux-x86-64.so.2)" "$b/rootfs/lib64/ld-linux-x86-64.so.2"
    cp /etc/ld.so.cache "$b/rootfs/etc/ld.so.cache"
  fi
  cat > "$b/config.json" <<EOT
{"ociVersion":"1.0.2-dev","annotations":$2,"process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["true"],"env":["PATH=/bin"],"cwd":"/","noNewPrivileges":true},
 "root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
 "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"}]}}
EOT
}
mk plain '{}'; mk sliced '{"vram":"1g"}'; mk gplain '{}' glibc; mk gsliced '{"vram":"1g"}' glibc
now() { date +%s%N; }
plain=(); sliced=(); gplain=(); gsliced=()
for i in $(seq 1 "$N"); do
  t=$(now); (cd "$D/plain" && "$RUNC" --root "$D/root" run "p$i" >/dev/null); plain+=($(( ($(now) - t) / 1000 )))
  t=$(now); (cd "$D/sliced" && "$BIN/gpu-quota-runtime" --root "$D/root" run "s$i" >/dev/null); sliced+=($(( ($(now) - t) / 1000 )))
  t=$(now); (cd "$D/gplain" && "$RUNC" --root "$D/root" run "gp$i" >/dev/null); gplain+=($(( ($(now) - t) / 1000 )))
  t=$(now); (cd "$D/gsliced" && "$BIN/gpu-quota-runtime" --root "$D/root" run "gs$i" >/dev/null); gsliced+=($(( ($(now) - t) / 1000 )))
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
[ -z "$(python3 tests/ledger_view.py "$D/ledger" | grep container_id || true)" ] || { echo "ledger not empty after the runs"; exit 1; }
grep -q libcuda.so.1 "$D/gsliced/rootfs/etc/ld.so.cache" || { echo "the glibc image got no driver entry in its loader cache"; exit 1; }
kind=$([ -n "${GQ_BENCH_REAL:-}" ] && echo "real GPU" || echo simulated)
row() { # IMAGE PLAIN_MEDIAN SLICED_MEDIAN
  awk -v d="$(date -u +%F)" -v k="$kind" -v img="$1" -v n="$N" -v p="$2" -v s="$3" \
    'BEGIN { printf "| %s | %s | %s | %d | %.1f ms | %.1f ms | %+.1f ms | %.2f× |\n", d, k, img, n, p / 1000, s / 1000, (s - p) / 1000, s / p }'
}
row busybox "$(median "${plain[@]}")" "$(median "${sliced[@]}")"
row "glibc ($(stat -c %s /etc/ld.so.cache) B cache)" "$(median "${gplain[@]}")" "$(median "${gsliced[@]}")"
