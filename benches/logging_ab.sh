#!/usr/bin/env bash
# Benchmark (not a test): does event logging slow a container start?
# `run` of a busybox container (`true`, vram=1g) through gpu-quota-runtime
# with two configs that differ only in `log`: A = "off", B = "file"
# (one JSON line at admission, one at release). Interleaved A B B A ... so
# that drift and order favour neither; median and mean of N runs each, and
# the A-vs-A split (first vs second half of A's runs) as the noise floor.
# The persistent counters are kept in both arms (they are not logging).
# Usage: benches/logging_ab.sh [N]   (root)
# Env: GQ_BIN (dir of gpu-quota binaries, default target/release), RUNC.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-40}
BIN=${GQ_BIN:-$(pwd)/target/release}
RUNC=${RUNC:-$(command -v runc)}
D=$(mktemp -d /tmp/gq-logbench.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'for id in $("$RUNC" --root "$D/root" list -q 2>/dev/null); do "$RUNC" --root "$D/root" delete -f "$id"; done; rm -rf "$D"' EXIT
SO=$BIN/libgpuquota.so
[ -f "$SO" ] || { SO=$D/libgpuquota.so; echo placeholder > "$SO"; } # `true` never loads it
. benches/fakegpus.sh
fake_gpus "$D" 1 > "$D/gpus.toml"
for arm in off file; do
  cat > "$D/$arm.toml" <<EOT
ledger_dir = "$D/ledger"
state_dir = "$D/state"
hook = "$BIN/gpu-quota-hook"
interceptor = "$SO"
runc = "$RUNC"
log = "$arm"
log_file = "$D/gq.log"
$(cat "$D/gpus.toml")
EOT
done
# one bundle per arm: the runtime writes the config path into the bundle's hook entry
for arm in off file; do
b="$D/$arm"; mkdir -p "$b/rootfs/bin"; cp "$(command -v busybox)" "$b/rootfs/bin/busybox"; ln -s busybox "$b/rootfs/bin/true"
cat > "$b/config.json" <<EOT
{"ociVersion":"1.0.2-dev","annotations":{"vram":"1g"},"process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["true"],"env":["PATH=/bin"],"cwd":"/","noNewPrivileges":true},
 "root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
 "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"}]}}
EOT
done
now() { date +%s%N; }
one() { # ARM ID -> microseconds
  local t; t=$(now)
  (cd "$D/$1" && GPU_QUOTA_CONFIG="$D/$1.toml" "$BIN/gpu-quota-runtime" --root "$D/root" run "$2" >/dev/null)
  echo $(( ($(now) - t) / 1000 ))
}
one off warm1 >/dev/null; one file warm2 >/dev/null
lines0=$(wc -l < "$D/gq.log")
off=(); file=()
for i in $(seq 1 "$N"); do
  if [ $((i % 2)) = 1 ]; then off+=("$(one off a$i)"); file+=("$(one file b$i)")
  else file+=("$(one file b$i)"); off+=("$(one off a$i)"); fi
done
lines=$(( $(wc -l < "$D/gq.log") - lines0 ))
[ "$lines" = $((2 * N)) ] || { echo "expected $((2 * N)) log lines from the B arm, got $lines"; exit 1; }
grep -q '"event":"admission"' "$D/gq.log" && grep -q '"event":"release"' "$D/gq.log" || { echo "log lines missing"; exit 1; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
mean() { printf '%s\n' "$@" | awk '{s+=$1} END {print s/NR}'; }
h=$((N / 2))
ma=$(median "${off[@]}"); mb=$(median "${file[@]}")
na=$(median "${off[@]:0:$h}"); nb=$(median "${off[@]:$h}")
awk -v d="$(date -u +%F)" -v n="$N" -v a="$ma" -v b="$mb" -v aa="$(mean "${off[@]}")" -v bb="$(mean "${file[@]}")" -v n1="$na" -v n2="$nb" \
  'BEGIN { printf "| %s | %d | %.1f ms (mean %.1f) | %.1f ms (mean %.1f) | %+.1f ms | %+.1f ms |\n", d, n, a/1000, aa/1000, b/1000, bb/1000, (b-a)/1000, (n2-n1)/1000 }'
