#!/usr/bin/env bash
# Assemble .gpu-carry/ for the H200 run (run HERE, after `make build`;
# `make gpu-carry` does both). Only artifacts travel: the device machine has
# no cargo. Layout:
#   .gpu-carry/bin/   gpu-quota-runtime gpu-quota-hook gpu-quota gpu-quota-driver runc busybox bench_alloc
#   .gpu-carry/lib/   libgpuquota.so libseccomp.so.2 (runc's, from ldd)
#   .gpu-carry/gpu/   copy of tests/gpu (the suite, its sections in suite/, its python workloads)
#   .gpu-carry/fake/  the fake libcuda + r615 libnvidia-ml (the driver-limit ordering check)
set -euo pipefail
cd "$(dirname "$0")/../.."
R=target/release C=.gpu-carry
for f in gpu-quota-runtime gpu-quota-hook gpu-quota gpu-quota-driver libgpuquota.so; do
  [ -f "$R/$f" ] || { echo "missing $R/$f: run make build first" >&2; exit 1; }
done
rm -rf "$C"; mkdir -p "$C/bin" "$C/lib" "$C/gpu" "$C/fake"
for f in gpu-quota-runtime gpu-quota-hook gpu-quota gpu-quota-driver; do cp "$R/$f" "$C/bin/"; strip "$C/bin/$f" 2>/dev/null || true; done
cp "$R/libgpuquota.so" "$C/lib/"
RUNC=$(command -v runc || true); [ -n "$RUNC" ] || RUNC=/usr/sbin/runc
[ -x "$RUNC" ] || { echo "runc not installed here (apt-get install runc)" >&2; exit 1; }
cp "$RUNC" "$C/bin/runc"
SEC=$(ldd "$RUNC" | awk '/libseccomp/ {print $3}')
[ -n "$SEC" ] && cp -L "$SEC" "$C/lib/libseccomp.so.2"
BB=$(command -v busybox || true)
[ -n "$BB" ] || { echo "busybox not installed here (apt-get install busybox-static)" >&2; exit 1; }
file -L "$BB" | grep -q 'statically linked' || echo "warning: $BB is not static" >&2
cp "$BB" "$C/bin/busybox"
cc -O2 -o "$C/bin/bench_alloc" tests/interceptor/bench_alloc.c -ldl -lpthread
cc -O2 -o "$C/bin/oddcalls" tests/interceptor/oddcalls.c -ldl
cp tests/gpu/*.sh tests/gpu/*.py "$C/gpu/" 2>/dev/null || true
# run-suite.sh sources its sections from suite/ beside itself
mkdir -p "$C/gpu/suite"; cp tests/gpu/suite/*.sh "$C/gpu/suite/"
make -s -C tests/fake
mkdir -p "$C/fake"; cp tests/fake/build/libcuda.so.1 tests/fake/build/libnvidia-ml.so.1 "$C/fake/"
# the build to compare against (tests/gpu/run-suite.sh section mpsbench):
# GQ_OLD=DIR holding its gpu-quota-runtime, gpu-quota-hook,
# gpu-quota-driver and libgpuquota.so
if [ -n "${GQ_OLD:-}" ]; then
  mkdir -p "$C/old"
  for f in gpu-quota-runtime gpu-quota-hook gpu-quota-driver libgpuquota.so; do cp "$GQ_OLD/$f" "$C/old/"; done
  strip "$C/old/gpu-quota-runtime" "$C/old/gpu-quota-hook" "$C/old/gpu-quota-driver" 2>/dev/null || true
fi
du -sh "$C"
