#!/usr/bin/env bash
# The whole test suite, as CI runs it (`make test`, `.ci/run`):
#   1. test dependencies (runc, busybox-static, docker.io, containerd, podman)
#      are installed when missing and we are root on Debian/Ubuntu;
#   2. cargo unit tests + e2e tests against real runc (GPU_QUOTA_E2E=1: an
#      e2e test that cannot run fails instead of skipping);
#   3. the interceptor suite against the fake driver;
#   4. real-engine tests (Debian 12: docker 20.10, containerd 1.6, podman 4.3;
#      Debian 13, downloaded into a private prefix: docker 26, compose 2.26,
#      containerd 1.7; ctr and CRI on both containerds), which start and stop
#      their own daemons.
# Ends with one line "N passed, M failed" summed over every suite, and the
# time each step took.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LOG=$(mktemp -d /tmp/gq-test-logs.XXXXXX)
passed=0; failed=0; broken=()

need=()
T0=$SECONDS
step() { echo "   ($1: $((SECONDS - T0))s since start)"; }
for p in runc:runc busybox:busybox-static dockerd:docker.io containerd:containerd podman:podman gcc:gcc make:make readelf:binutils protoc:protobuf-compiler tmux:tmux; do
  command -v "${p%%:*}" >/dev/null 2>&1 || need+=("${p##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing test dependencies: ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null || { echo "apt-get install failed"; exit 1; }
  else
    echo "missing: ${need[*]} (run as root on Debian/Ubuntu to install them)"
  fi
fi

# the musl target that `make build` links the runtime and the hook against
# (without it they are linked statically against glibc, which starts slower)
musl=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' | sed 's/-gnu$/-musl/')
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
  echo "== installing the rust target $musl"
  rustup target add "$musl" >/dev/null 2>&1 || echo "   (not available: the static binaries are linked against glibc)"
fi

# count NAME LOGFILE RC: add a suite's counts from its closing lines
count() {
  local name=$1 log=$2 rc=$3 p f
  p=$(grep -hoE '(^|[^0-9])[0-9]+ passed' "$log" | grep -oE '[0-9]+' | awk '{s += $1} END {print s + 0}')
  f=$(grep -hoE '[0-9]+ failed' "$log" | grep -oE '[0-9]+' | awk '{s += $1} END {print s + 0}')
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
  if [ "$rc" != 0 ]; then
    broken+=("$name")
    [ "${f:-0}" -gt 0 ] || failed=$((failed + 1))
  fi
}

step "dependencies"

echo "== docs name what exists (scripts/doc-paths.py: paths, tests, links, make targets, env variables, architecture.md's lists)"
if python3 scripts/doc-paths.py; then
  passed=$((passed + 1))
else
  broken+=("doc-paths"); failed=$((failed + 1))
fi

# What the host looks like before anything of ours runs (after the dependencies,
# whose packages are meant to stay): compared with the same snapshot at the end.
bash scripts/host-snapshot.sh >"$LOG/host.before"

echo "== build (debug, for the unit and e2e tests; release, for the engine suite)"
# pipefail: a failed build stops here (tail alone would succeed)
make -s build-debug 2>&1 | tail -20 || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
make -s build 2>&1 | tail -20 || { echo "release build failed"; echo "0 passed, 1 failed"; exit 1; }
step "build"

echo "== release binaries: the runtime and the hook static (no loader at each start), gpu-quota-driver dynamic (it loads the driver)"
linkage() { readelf -l "target/release/$1" 2>/dev/null | grep -q 'Requesting program interpreter' && echo dynamic || echo static; }
if [ "$(linkage gpu-quota-runtime)/$(linkage gpu-quota-hook)/$(linkage gpu-quota-driver)" = static/static/dynamic ]; then
  passed=$((passed + 1))
else
  echo "FAILED: gpu-quota-runtime $(linkage gpu-quota-runtime), gpu-quota-hook $(linkage gpu-quota-hook), gpu-quota-driver $(linkage gpu-quota-driver)"
  broken+=("linkage"); failed=$((failed + 1))
fi

echo "== unused dependencies (cargo machete when installed, and a grep check)"
bash scripts/unused-deps.sh 2>&1 | tee "$LOG/deps.log"
count unused-deps "$LOG/deps.log" "${PIPESTATUS[0]}"
step "unused dependencies"

echo "== cargo test (unit + e2e with real runc)"
GPU_QUOTA_E2E=1 cargo test --workspace 2>&1 | tee "$LOG/cargo.log" | grep -E '^test |test result|panicked|FAILED|error' 
count cargo "$LOG/cargo.log" "${PIPESTATUS[0]}"
step "cargo test"

echo "== interceptor (fake driver)"
bash tests/interceptor/run.sh 2>&1 | tee "$LOG/interceptor.log" | grep -vE '^ok '
count interceptor "$LOG/interceptor.log" "${PIPESTATUS[0]}"
step "interceptor"

if [ -f tests/engines/run.sh ]; then
  echo "== engines (real docker 20.10 + 26, compose, containerd 1.6 + 1.7 with ctr and CRI, podman)"
  bash tests/engines/run.sh 2>&1 | tee "$LOG/engines.log"
  count engines "$LOG/engines.log" "${PIPESTATUS[0]}"
  step "engines"
fi

echo "== nothing left on the host (whole mount table, /tmp, /var/tmp, cgroups, /etc /var/lib /var/cache /var/log /run /opt /root, processes)"
# cargo's and the compilers' own caches are not the suite's leftovers
bash scripts/host-snapshot.sh >"$LOG/host.after"
if bash scripts/host-snapshot.sh --diff "$LOG/host.before" "$LOG/host.after" '^path /root/\.(cargo|rustup)'; then
  echo "ok: nothing new on the host"; passed=$((passed + 1))
else
  broken+=("host-leftovers"); failed=$((failed + 1))
fi

rm -rf "$LOG"
[ ${#broken[@]} -eq 0 ] || echo "failing suites: ${broken[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ ${#broken[@]} -eq 0 ]
