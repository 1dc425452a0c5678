#!/usr/bin/env bash
# Benchmark (not a test): is container start flat in the number of
# reservations already in the ledger? `run -d` of a busybox `sleep` container
# through gpu-quota-runtime (`vram=64m`, two simulated 16 GiB GPUs as the e2e
# harness configures them) and through plain runc, interleaved
# sliced/plain/sliced/plain, one after another (every container stays up, so
# the ledger grows by one per sliced start). Two windows: starts 1–M (the
# ledger holds 1..M reservations) and starts FILL+1..FILL+M after FILL more
# sliced sleepers were started untimed. Prints median, min–max and p10–p90 of
# each arm and the ledger size. Everything is deleted at the end.
# A third arm, "floor", is plain runc with a no-op createRuntime hook
# (/bin/true) on the plain bundle: what any runc wrapper that needs a hook
# pays at least on this machine (runc's spawning of the hook), the lower
# bound of the gpu-quota arm.
# Usage: benches/start_vs_reservations.sh [M=20] [FILL=160]   (root)
# Env: GQ_BENCH_RUN_TMPFS=1: runc's root, the bundles and state_dir on a tmpfs (a
# host's /run) instead of the work dir's disk, the ledger on disk either way;
# GQ_BIN_OLD=DIR adds a fourth arm through the binaries in DIR (an older build, or a
# build with a no-op gpu-quota-hook), on a ledger of its own filled the same way
# (a build before ledger schema 2 refuses a ledger that has records);
# GQ_BENCH_STRACE=FILE straces one more sliced start at the end into FILE
# (GQ_BENCH_STRACE_OPTS: more strace options, e.g. --seccomp-bpf -e trace=...);
# GQ_BIN (default target/release), RUNC, GQ_BENCH_KEEP=1 keeps the work dir.
set -euo pipefail
cd "$(dirname "$0")/.."
M=${1:-20}
FILL=${2:-160}
BIN=${GQ_BIN:-$(pwd)/target/release}
RUNC=${RUNC:-$(command -v runc)}
D=$(mktemp -d /tmp/gq-bench-res.XXXXXX)
# R: runc's root, the bundles and gpu-quota's state_dir. On the work dir's
# file system by default; GQ_BENCH_RUN_TMPFS=1 puts them on a tmpfs, as a
# host has them (/run/runc, the engines' bundles under /run, state_dir
# /run/gpu-quota), the ledger staying on the work dir's disk either way.
R=$D
if [ -n "${GQ_BENCH_RUN_TMPFS:-}" ]; then R=$D/run; mkdir -p "$R"; mount -t tmpfs -o mode=0755 gq-bench-run "$R"; fi
cleanup() {
  for id in $("$RUNC" --root "$R/root" list -q 2>/dev/null); do
    "$RUNC" --root "$R/root" kill "$id" KILL 2>/dev/null || true
  done
  for id in $("$RUNC" --root "$R/root" list -q 2>/dev/null); do
    "$BIN/gpu-quota-runtime" --root "$R/root" delete -f "$id" >/dev/null 2>&1 || "$RUNC" --root "$R/root" delete -f "$id" || true
  done
  # state tmpfs of anything the runtime could not release
  grep -o " $R/state/[^ ]*" /proc/self/mounts | while read -r m; do umount "$m" || true; done || true
  [ "$R" = "$D" ] || umount -l "$R" || true
  [ -n "${GQ_BENCH_KEEP:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
export GPU_QUOTA_CONFIG="$D/config.toml"
. benches/fakegpus.sh
cat > "$GPU_QUOTA_CONFIG" <<EOT
ledger_dir = "$D/ledger"
state_dir = "$R/state"
log_file = "$D/gq.log"
hook = "$BIN/gpu-quota-hook"
interceptor = "$BIN/libgpuquota.so"
runc = "$RUNC"
EOT
fake_gpus "$D" 2 >> "$GPU_QUOTA_CONFIG"
# GQ_BIN_OLD=DIR: a fourth arm, the same start through the binaries in DIR
# (an older build), interleaved with the other two on the same ledger
if [ -n "${GQ_BIN_OLD:-}" ]; then
  sed -e "s|^hook = .*|hook = \"$GQ_BIN_OLD/gpu-quota-hook\"|" -e "s|^interceptor = .*|interceptor = \"$GQ_BIN_OLD/libgpuquota.so\"|" \
    -e "s|^ledger_dir = .*|ledger_dir = \"$D/ledger-old\"|" "$GPU_QUOTA_CONFIG" > "$D/config-old.toml"
fi
mk() { # NAME ANNOTATIONS
  local b="$R/$1"; mkdir -p "$b/rootfs/bin"; cp "$(command -v busybox)" "$b/rootfs/bin/busybox"; ln -s busybox "$b/rootfs/bin/sleep"
  cat > "$b/config.json" <<EOT
{"ociVersion":"1.0.2-dev","annotations":$2,"process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["sleep","3600"],"env":["PATH=/bin"],"cwd":"/","noNewPrivileges":true},
 "root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
 "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"}]}}
EOT
}
# one bundle per arm (the floor arm's below); runc and the runtime take the bundle with --bundle
mk plain '{}'; mk sliced '{"vram":"64m"}'
now() { date +%s%N; }
srun() { "$BIN/gpu-quota-runtime" --root "$R/root" run -d --bundle "$R/sliced" "$1" >/dev/null 2>&1 </dev/null; }
prun() { "$RUNC" --root "$R/root" run -d --bundle "$R/plain" "$1" >/dev/null 2>&1 </dev/null; }
# the bundle's config.json is rewritten by each sliced create: restore it
fresh() { cp "$D/sliced.json" "$R/sliced/config.json"; }
cp "$R/sliced/config.json" "$D/sliced.json"
nres() { python3 tests/ledger_view.py "$1" | grep -o '"container_id"' | wc -l; }
orun() { GPU_QUOTA_CONFIG="$D/config-old.toml" "$GQ_BIN_OLD/gpu-quota-runtime" --root "$R/root" run -d --bundle "$R/sliced" "$1" >/dev/null 2>&1 </dev/null; }
# the floor arm: the plain bundle with a createRuntime hook that does nothing
mkdir -p "$R/floor"
python3 - "$R/plain" "$R/floor/config.json" <<'EOT'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
c["hooks"] = {"createRuntime": [{"path": "/bin/true"}]}
c["root"]["path"] = sys.argv[1] + "/rootfs"  # the plain arm's image (runc takes no symlink)
json.dump(c, open(sys.argv[2], "w"))
EOT
frun() { "$RUNC" --root "$R/root" run -d --bundle "$R/floor" "$1" >/dev/null 2>&1 </dev/null; }
ARMS=(sliced plain floor)
[ -z "${GQ_BIN_OLD:-}" ] || ARMS+=(old)
window() { # LABEL -> appends "label arm µs µs ..." lines to $D/times
  local -A t=()
  local i a s
  for i in $(seq 1 "$M"); do
    for a in "${ARMS[@]}"; do
      case $a in sliced | old) fresh ;; esac
      s=$(now)
      case $a in
        sliced) srun "s-$1-$i" ;; plain) prun "p-$1-$i" ;;
        floor) frun "f-$1-$i" ;; old) orun "o-$1-$i" ;;
      esac
      t[$a]+=" $(( ($(now) - s) / 1000 ))"
    done
  done
  for a in "${ARMS[@]}"; do echo "$1 $a${t[$a]}" >> "$D/times"; done
}
window first
for i in $(seq 1 "$FILL"); do fresh; srun "fill-$i"; [ -z "${GQ_BIN_OLD:-}" ] || { fresh; orun "ofill-$i"; }; done
window second
n=$(nres "$D/ledger"); size=$(du -sb --apparent-size "$D/ledger" | cut -f1)
SLICED=1
want=$(( 2 * M + FILL ))
[ "$n" -eq "$want" ] || { echo "expected $want reservations in the ledger, found $n"; exit 1; }
[ -z "${GQ_BIN_OLD:-}" ] || [ "$(nres "$D/ledger-old")" -eq "$want" ] || { echo "expected $want reservations in the old arm's ledger"; exit 1; }
stats() { # values (µs) -> "median (p10–p90, min–max)" in ms
  printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {
    m = (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)
    p10 = a[int((NR - 1) * 0.1) + 1]; p90 = a[int((NR - 1) * 0.9) + 1]
    printf "%.1f ms (p10–p90 %.1f–%.1f, min–max %.1f–%.1f)", m/1000, p10/1000, p90/1000, a[1]/1000, a[NR]/1000 }'
}
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
diffms() { awk -v s="$1" -v p="$2" 'BEGIN{printf "%+.1f ms", (s-p)/1000}'; }
echo "layout: runc root, bundles and state_dir on $( [ "$R" = "$D" ] && echo "the work dir's file system ($(df -T "$D" | awk 'NR==2{print $2}'))" || echo "a tmpfs (GQ_BENCH_RUN_TMPFS)" ); ledger on $(df -T "$D" | awk 'NR==2{print $2}')"
echo "| date | reservations held | runs | plain runc | floor: runc + no-op hook | gpu-quota ($BIN) | difference |$([ -n "${GQ_BIN_OLD:-}" ] && echo " gpu-quota ($GQ_BIN_OLD) | difference |")"
for label in first second; do
  declare -A v=()
  while read -r l a rest; do [ "$l" = "$label" ] && v[$a]=$rest; done < "$D/times"
  case $label in first) range="1–$(( SLICED * M ))";; *) range="$(( SLICED * M + FILL + 1 ))–$(( 2 * SLICED * M + FILL ))";; esac
  mp=$(med ${v[plain]})
  row=$(printf '| %s | %s | %d | %s | %s (%s) | %s | %s |' "$(date -u +%F)" "$range" "$M" \
    "$(stats ${v[plain]})" "$(stats ${v[floor]})" "$(diffms "$(med ${v[floor]})" "$mp")" \
    "$(stats ${v[sliced]})" "$(diffms "$(med ${v[sliced]})" "$mp")")
  [ -z "${GQ_BIN_OLD:-}" ] || row+=$(printf ' %s | %s |' "$(stats ${v[old]})" "$(diffms "$(med ${v[old]})" "$mp")")
  echo "$row"
done
echo "ledger at the end: $n reservations, $size bytes (ledger.json and records)"
if [ -n "${GQ_BENCH_STRACE:-}" ]; then # one more sliced container, foreground `sleep 0`, traced (runtime, runc, both hook runs, release)
  sed 's/"3600"/"0"/' "$D/sliced.json" > "$R/sliced/config.json"
  strace -f -tt -T ${GQ_BENCH_STRACE_OPTS:-} -o "$GQ_BENCH_STRACE" "$BIN/gpu-quota-runtime" --root "$R/root" run --bundle "$R/sliced" traced >/dev/null 2>&1 </dev/null
  echo "strace of one more sliced container (at $(( n + 1 )) reservations): $GQ_BENCH_STRACE"
fi
