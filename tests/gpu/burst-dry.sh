#!/usr/bin/env bash
# A dry run of section burst (tests/gpu/suite/burst.sh) on a machine without
# a GPU: the suite's helpers as run-suite.sh defines them, a stand-in
# gpu-quota-runtime that runs a bundle's process on the host (no container),
# a stand-in gpu-quota (`ls`, and a `burst-supervise` that ends the lowest
# priority burster with a memory limit while A's round waits), a stand-in
# nvidia-smi, and tests/gpu/burst.py with BURST_FAKE=1 (sleeps for the GPU).
# It tries the orchestration, the waits, the analysis and the summary rows,
# nothing of the product: bash tests/gpu/burst-dry.sh [OUT] (~2 min).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-/tmp/gq-burst-dry}; rm -rf "$OUT"; mkdir -p "$OUT"
SUM=$OUT/summary.md; CLOG=$OUT/containers.log
PY=$(command -v python3); GIB=1073741824
T=$(mktemp -d /tmp/gqbd.XXXX); W=$T/w; B=$T/bin; mkdir -p $W/b $B
export BURST_FAKE=1 BURST_FAKE_ALLOC_S=${BURST_FAKE_ALLOC_S:-0.2} PYTHONUNBUFFERED=1
PASS=0; FAIL=0; SKIP=0; OVERLAY_OK=1; SECTIONS=burst
exec > >(tee -a "$OUT/suite.log") 2>&1

cat > $B/gpu-quota-runtime <<'EOF'
#!/usr/bin/env python3
# stand-in: run | state | delete of a bundle's process on the host
import json, os, signal, subprocess, sys, time
a = sys.argv[1:]
root = a[a.index("--root") + 1]; a = a[a.index("--root") + 2:]
cmd, cid = a[0], a[-1]
d = os.path.join(root, cid); sf = os.path.join(d, "state.json")
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
if cmd == "run":
    bundle = a[a.index("--bundle") + 1]
    cfg = json.load(open(os.path.join(bundle, "config.json")))
    gq = os.path.join(os.environ["GQ_REPO"], "tests/gpu") + "/"
    args = [os.path.join(bundle, "out") + x[4:] if x.startswith("/out") else gq + x[4:] if x.startswith("/gq/") else x
            for x in cfg["process"]["args"]]
    ann = cfg.get("annotations", {})
    g = ann.get("vram-limit", ann.get("vram", "120g")).rstrip("g")
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, env=dict(os.environ, BURST_FAKE_TOTAL_GIB=g))
    os.makedirs(d, exist_ok=True)
    json.dump(dict(pid=p.pid, bundle=bundle, ann=cfg.get("annotations", {}),
                   mem=cfg["linux"]["resources"].get("memory")), open(sf, "w"))
    rc = p.wait()
    sys.exit(128 - rc if rc < 0 else rc)
if not os.path.exists(sf):
    print(f"container {cid} does not exist", file=sys.stderr); sys.exit(1)
s = json.load(open(sf))
if cmd == "state":
    print(json.dumps(dict(id=cid, pid=s["pid"], status="running" if alive(s["pid"]) else "stopped")))
elif cmd == "delete":
    if alive(s["pid"]):
        os.kill(s["pid"], signal.SIGKILL); time.sleep(0.2)
    os.remove(sf); os.rmdir(d)
EOF
cat > $B/gpu-quota <<'EOF'
#!/usr/bin/env python3
# stand-in: ls (a fixed table) | burst-supervise (ends the lowest-priority
# burster that has a memory limit while A's round has waited 0.1 s)
import glob, json, os, signal, sys, time
cfgp = os.environ["GPU_QUOTA_CONFIG"]; base = os.path.dirname(cfgp)
if sys.argv[1] == "ls":
    print("ID   GPU  SLICE                  USED       ABOVE\nbA   0    60.00 GiB              2.50 GiB   -\nbB   0    10.00 GiB..120.00 GiB  100.50 GiB 90.50 GiB")
    sys.exit(0)
log = [l.split("=", 1)[1].strip().strip('"') for l in open(cfgp) if l.startswith("log_file")][0]
wb = os.path.join(os.path.dirname(base), "b")
t_wait = None
while True:
    c = json.load(open(f"{wb}/bA/out/cmd.json")) if os.path.exists(f"{wb}/bA/out/cmd.json") else {}
    try:
        dn = json.load(open(f"{wb}/bA/out/done.json")).get("seq", 0)
    except (OSError, ValueError):
        dn = 0
    if c.get("seq", 0) > dn:
        t_wait = t_wait or time.time()
        if time.time() - t_wait > 0.1:
            cands = []
            for sf in glob.glob(f"{base}/root/*/state.json"):
                s = json.load(open(sf))
                if s.get("mem") and os.path.exists(f"/proc/{s['pid']}"):
                    cands.append((int(s["ann"].get("vram-priority", 0)), -os.stat(sf).st_mtime, s["pid"], os.path.basename(os.path.dirname(sf))))
            if cands:
                pr, _, pid, cid = min(cands)
                fd = os.open(f"/proc/{pid}/fd/2", os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
                os.write(fd, f"gpu-quota: container ended: it held 45.00 GiB above its guarantee of 10.00 GiB on GPU 0 (dry run), vram-priority {pr}\n".encode())
                os.close(fd)
                os.kill(pid, signal.SIGKILL)
                with open(log, "a") as f:
                    f.write(json.dumps(dict(event="burst_reclaim", container_id=cid, how="ended")) + "\n")
                t_wait = None
    else:
        t_wait = None
    time.sleep(0.05)
EOF
printf '#!/bin/sh\ncase "$*" in *memory.used,memory.total*) echo "1000, 143771";; *memory.used*) echo 1000;; *) echo "dry nvidia-smi";; esac\n' > $B/nvidia-smi
chmod +x $B/*; export PATH=$B:$PATH GQ_REPO=$REPO

# the helpers of run-suite.sh that the section uses, as defined there
sec() { echo; echo "== [t=${SECONDS}s] $*"; }
res() { case $1 in PASS) PASS=$((PASS+1));; FAIL) FAIL=$((FAIL+1));; *) SKIP=$((SKIP+1));; esac
  echo "| $2 | $3 | **$1** | ${4//|//} |" >> "$SUM"; echo "[$1] $2 $3 — $4"; }
want() { case " ${SECTIONS} " in *" $1 "*) return 0;; esac; return 1; }
wait_for() { local f=$1 s=$2 i; for ((i = 0; i < s * 10; i++)); do [ -e "$f" ] && return 0; sleep 0.1; done; return 1; }
mkcfg() { local n=$1; shift; mkdir -p $W/$n/ledger $W/$n/state $W/$n/root
  { echo "ledger_dir = \"$W/$n/ledger\""; echo "state_dir = \"$W/$n/state\""; printf '%s\n' "$@"; } > $W/$n/config.toml; }
ctr() { local n=$1; shift; GPU_QUOTA_CONFIG=$W/$n/config.toml timeout 90 $B/gpu-quota-runtime --root $W/$n/root "$@"; }
bundle() { local id=$1 kind=$2; shift 2; local anns=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do anns+=(--ann "$1"); shift; done; shift
  mkdir -p $W/b/$id/rootfs
  $PY $REPO/tests/gpu/bundle.py $W/b/$id --rootfs $W/b/$id/rootfs "${anns[@]}" ${BMEM:+--memory $BMEM} --bind $REPO/tests/gpu:/gq:ro -- "$@"; }
clog() { { echo "----- $1"; for f in $W/b/$1/out/* $W/b/$1/*.err $W/b/$1/*.out; do [ -f "$f" ] && { echo "--- $(basename $f)"; head -c 3000 "$f"; echo; }; done; } >> "$CLOG" 2>/dev/null; }
state_of() { ctr $1 state $2 2>/dev/null | $PY -c 'import json,sys; print(json.load(sys.stdin)["status"])' 2>/dev/null || echo gone; }
{ echo "# burst dry run — $(date -u +%FT%TZ)"; echo; echo "| issue | check | result | figures |"; echo "| --- | --- | --- | --- |"; } > "$SUM"

. $REPO/tests/gpu/suite/burst.sh
echo; echo "**$PASS passed, $FAIL failed, $SKIP info/skipped** in ${SECONDS}s" | tee -a "$SUM"
rm -rf "$T"
