#!/usr/bin/env bash
# Benchmark (not a test): where a container start's time goes, per
# process. N sliced starts (`run -d` of a busybox `sleep`, `vram=64m`, two
# simulated GPUs, as benches/start_vs_reservations.sh) and N floor starts
# (plain runc with a no-op createRuntime hook), alternating. Prints medians:
#   * the runtime, from its fork to the moment it starts runc, and from
#     runc's end to its own (timed by benches/tsexec.c around the runtime and,
#     as the config's `runc`, around runc);
#   * the hook's createRuntime run and the floor's /bin/true hook, execve to
#     exit (strace -f --seccomp-bpf -e trace=execve,exit_group: only those
#     two calls stop the traced process);
#   * a fork+exec+reap of /bin/true as the reference.
# Usage: benches/start_phases.sh [BIN=target/release] [N=25]   (root; needs
# runc, busybox, strace and cc). Everything is deleted at the end.
set -u
cd "$(dirname "$0")/.."
BIN=$(cd "${1:-target/release}" && pwd) || exit 1; N=${2:-25}; RUNC=${RUNC:-$(command -v runc)}
D=$(mktemp -d /tmp/gq-ph.XXXXXX)
mkdir -p "$D/t" "$D/bin"
cc -O2 -o "$D/bin/tsexec" benches/tsexec.c && cp "$D/bin/tsexec" "$D/bin/runc-ts" || exit 1
export PATH=$D/bin:$PATH
HT="$(command -v strace) -f --seccomp-bpf -e trace=execve,exit_group -qq -ttt -T"
printf '#!/bin/sh\nexec %s -o %s/t/h.$$ %s "$@"\n' "$HT" "$D" "$BIN/gpu-quota-hook" > "$D/hookwrap"
printf '#!/bin/sh\nexec %s -o %s/t/f.$$ /bin/true "$@"\n' "$HT" "$D" > "$D/truewrap"
chmod +x "$D/hookwrap" "$D/truewrap"
export GPU_QUOTA_CONFIG="$D/config.toml"
cat > "$GPU_QUOTA_CONFIG" <<EOT
ledger_dir = "$D/ledger"
state_dir = "$D/state"
log_file = "$D/gq.log"
hook = "$D/hookwrap"
interceptor = "$BIN/libgpuquota.so"
runc = "$D/bin/runc-ts"
driver_helper = "$BIN/gpu-quota-driver"
EOT
. benches/fakegpus.sh
fake_gpus "$D" 2 >> "$GPU_QUOTA_CONFIG"
mk() { local b="$D/$1"; mkdir -p "$b/rootfs/bin"; cp "$(command -v busybox)" "$b/rootfs/bin/busybox"; ln -s busybox "$b/rootfs/bin/sleep"
  cat > "$b/config.json" <<EOT
{"ociVersion":"1.0.2-dev","annotations":$2,"process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["sleep","3600"],"env":["PATH=/bin"],"cwd":"/","noNewPrivileges":true},
 "root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
 "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"}]}}
EOT
}
mk sliced '{"vram":"64m"}'; mk floor '{}'; cp "$D/sliced/config.json" "$D/sliced.json"
python3 - "$D/floor/config.json" "$D/truewrap" <<'EOT'
import json, sys
c = json.load(open(sys.argv[1])); c["hooks"] = {"createRuntime": [{"path": sys.argv[2]}]}; json.dump(c, open(sys.argv[1], "w"))
EOT
for i in $(seq 1 "$N"); do tsexec "$D/t/x.$i" /bin/true; done
for i in $(seq 1 "$N"); do
  cp "$D/sliced.json" "$D/sliced/config.json"
  TSLOG="$D/t/r.$i" REAL_RUNC="$RUNC" tsexec "$D/t/r.$i" "$BIN/gpu-quota-runtime" --root "$D/root" run -d --bundle "$D/sliced" "s$i" >/dev/null 2>&1 </dev/null
  tsexec "$D/t/p.$i" "$RUNC" --root "$D/root" run -d --bundle "$D/floor" "f$i" >/dev/null 2>&1 </dev/null
done
python3 - "$D/t" <<'EOT'
import glob, re, sys, statistics as S
d = sys.argv[1]
def ev(f):
    out = []
    for l in open(f):
        m = re.match(r'(?:\d+ +)?(\d+\.\d+) (\w+)\(.*?(?:<(\d+\.\d+)>)?$', l.strip())
        if m: out.append((m.group(2), float(m.group(1)), float(m.group(3) or 0)))
    return out
def ts(f): return [int(l.split()[1]) / 1e9 for l in open(f)]
def med(xs): return "%.2f ms (min %.2f, max %.2f, n %d)" % (S.median(xs)*1e3, min(xs)*1e3, max(xs)*1e3, len(xs)) if xs else "-"
def span(pat):
    xs = []
    for f in glob.glob(d + pat):
        e = ev(f); ex = [x for x in e if x[0] == "execve"]; eg = [x for x in e if x[0] == "exit_group"]
        if ex and eg: xs.append(eg[-1][1] - ex[0][1])
    return xs
pre, runc, post, total = [], [], [], []
for f in glob.glob(d + "/r.*"):
    if f.endswith(".runc"): continue
    s, e = ts(f); rs, re_ = ts(f + ".runc")
    pre.append(rs - s); runc.append(re_ - rs); post.append(e - re_); total.append(e - s)
xs = [ts(f)[1] - ts(f)[0] for f in glob.glob(d + "/x.*")]
fr = [ts(f)[1] - ts(f)[0] for f in glob.glob(d + "/p.*")]
print("reference: /bin/true (fork -> reaped):", med(xs))
print("runtime: fork+exec+main -> runc wrapper starts:", med(pre))
print("runtime: runc under the wrapper (start -> reaped):", med(runc))
print("runtime: runc reaped -> runtime reaped:", med(post))
print("runtime: total (fork -> reaped):", med(total))
print("hook create-runtime: execve -> exit:", med(span("/h.*")))
print("floor: /bin/true hook execve -> exit:", med(span("/f.*")))
print("floor: runc total (fork -> reaped):", med(fr))
EOT
for id in $("$RUNC" --root "$D/root" list -q 2>/dev/null); do "$RUNC" --root "$D/root" kill "$id" KILL 2>/dev/null; done; sleep 0.5
for id in $("$RUNC" --root "$D/root" list -q 2>/dev/null); do REAL_RUNC="$RUNC" "$BIN/gpu-quota-runtime" --root "$D/root" delete -f "$id" >/dev/null 2>&1 || "$RUNC" --root "$D/root" delete -f "$id"; done
grep -o " $D/state/[^ ]*" /proc/self/mounts | while read -r m; do umount "$m"; done; rm -rf "$D"
