#!/usr/bin/env bash
# The whole test suite, as CI runs it (`make test`, `.ci/run`):
#   1. test dependencies (runc, busybox-static, docker.io, containerd, podman)
#      are installed when missing and we are root on Debian/Ubuntu;
#   2. cargo unit tests + e2e tests against real runc (GPU_QUOTA_E2E=1: an
#      e2e test that cannot run fails instead of skipping);
#   3. the interceptor suite against the fake driver, the fake MPS control
#      daemon's own checks and the fake driver's managed memory checks;
#   4. real-engine tests (Debian 12: docker 20.10, containerd 1.6, podman 4.3;
#      Debian 13, downloaded into a private prefix: docker 26, compose 2.26,
#      containerd 1.7; ctr and CRI on both containerds), which start and stop
#      their own daemons.
# Steps 2-4 run in the private host of scripts/sandbox.sh (fresh /tmp, /var/tmp,
# /run and engine state directories, overlays over /etc, /var/lib, /var/cache,
# /var/log, /opt, /root; own mount and PID namespaces): nothing a machine held
# before can hide a leftover or fail a test, and what the run leaves there is
# named by the sandbox before it goes. Around it, the whole host is compared
# before and after (scripts/host-snapshot.sh). docs/testing.md says how a run on
# a machine nobody prepared is checked.
# Ends with one line "N passed, M failed" summed over every suite, and the
# time each step took.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LOG=$(mktemp -d /tmp/gq-test-logs.XXXXXX)
passed=0; failed=0; broken=()

T0=$((SECONDS - ${GQ_T0:-0}))
step() { echo "   ($1: $((SECONDS - T0))s since start)"; }
need=()
[ "${GQ_IN_SANDBOX:-}" = 1 ] ||   # the host's packages are installed before the sandbox is made
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
if [ "${GQ_IN_SANDBOX:-}" != 1 ] && command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
  echo "== installing the rust target $musl"
  rustup target add "$musl" >/dev/null 2>&1 || echo "   (not available: the static binaries are linked against glibc)"
fi

if [ "${GQ_IN_SANDBOX:-}" = 1 ]; then
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

echo "== docs name what exists (scripts/doc-paths.py: paths, tests, links, make targets, env variables, architecture.md's lists)"
if python3 scripts/doc-paths.py; then
  passed=$((passed + 1))
else
  broken+=("doc-paths"); failed=$((failed + 1))
fi
# its negative control: the names check flags a type and a function that are gone
if python3 scripts/doc-paths.py --self-test; then
  passed=$((passed + 1))
else
  broken+=("doc-paths-self-test"); failed=$((failed + 1))
fi

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

echo "== the fake MPS control daemon and the fake driver's MPS client (tests/fake test-mps)"
make -s -C tests/fake test-mps 2>&1 | tee "$LOG/fake-mps.log" | grep -vE '^ok '
count fake-mps "$LOG/fake-mps.log" "${PIPESTATUS[0]}"
step "fake MPS"

echo "== the fake driver's managed memory and its eviction across processes (tests/fake test-managed)"
make -s -C tests/fake test-managed 2>&1 | tee "$LOG/fake-managed.log" | grep -vE '^ok '
count fake-managed "$LOG/fake-managed.log" "${PIPESTATUS[0]}"
step "fake managed memory"

if [ -f tests/engines/run.sh ]; then
  echo "== engines (real docker 20.10 + 26, compose, containerd 1.6 + 1.7 with ctr and CRI, podman)"
  bash tests/engines/run.sh 2>&1 | tee "$LOG/engines.log"
  count engines "$LOG/engines.log" "${PIPESTATUS[0]}"
  step "engines"
fi

  rm -rf "$LOG"
  [ ${#broken[@]} -eq 0 ] || echo "failing suites: ${broken[*]}"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ ${#broken[@]} -eq 0 ]
  exit $?
fi
step "dependencies"

# What the host looks like before anything of ours runs (after the dependencies,
# whose packages are meant to stay): compared with the same snapshot at the end.
bash scripts/host-snapshot.sh >"$LOG/host.before"

echo "== the private host's own check (scripts/sandbox.sh --self-test: leftovers in it are named)"
bash scripts/sandbox.sh --self-test 2>&1 | tee "$LOG/sandbox-self.log"
rc=${PIPESTATUS[0]}
p=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1/p' "$LOG/sandbox-self.log" | tail -1)
f=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\2/p' "$LOG/sandbox-self.log" | tail -1)
passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
[ "$rc" = 0 ] || { broken+=("sandbox-self-test"); [ "${f:-0}" -gt 0 ] || failed=$((failed + 1)); }

echo "== in the private host (scripts/sandbox.sh): build, unit, e2e, interceptor, engines"
bash scripts/sandbox.sh -- env GQ_IN_SANDBOX=1 GQ_T0=$((SECONDS - T0)) bash scripts/test.sh 2>&1 | tee "$LOG/suite.log"
rc=${PIPESTATUS[0]}
p=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1/p' "$LOG/suite.log" | tail -1)
f=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\2/p' "$LOG/suite.log" | tail -1)
passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
if grep -q '^sandbox: nothing left in the private host' "$LOG/suite.log"; then
  passed=$((passed + 1))
else
  broken+=("private-host-leftovers"); failed=$((failed + 1))
fi
[ "$rc" = 0 ] || [ "$rc" = 3 ] || { broken+=("suite"); [ "${f:-0}" -gt 0 ] || failed=$((failed + 1)); }
step "suite"

echo "== nothing left on the host (whole mount table, /tmp, /var/tmp, cgroups, /etc /var/lib /var/cache /var/log /run /opt /root, processes)"
# cargo's and the compilers' own caches are not the suite's leftovers, nor is
# the checkout's own build output (a clone under /root is within the snapshot)
bash scripts/host-snapshot.sh >"$LOG/host.after"
root_re=$(printf '%s' "$ROOT" | sed 's/[][\.*^$+?(){}|]/\\&/g')
if bash scripts/host-snapshot.sh --diff "$LOG/host.before" "$LOG/host.after" "^path (/root/\\.(cargo|rustup)|$root_re)(/|\$)"; then
  echo "ok: nothing new on the host"; passed=$((passed + 1))
else
  broken+=("host-leftovers"); failed=$((failed + 1))
fi

rm -rf "$LOG"
[ ${#broken[@]} -eq 0 ] || echo "failing suites: ${broken[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ ${#broken[@]} -eq 0 ]
