#!/usr/bin/env bash
# Interceptor CI suite against the fake driver.
# Builds libgpuquota.so (release), the fake libcuda/libnvidia-ml and the test
# programs into tests/fake/build/, runs every case, and ends with the line
#   N passed, M failed
# exiting non-zero on any failure. Env: GQ_SKIP_CARGO_TEST=1 skips the Rust
# unit tests; GQ_KEEP=1 keeps the scratch directory; GQ_SO=PATH tests that
# libgpuquota.so instead of building one (tests/interceptor/mutate.sh);
# GQ_ONLY=REGEX runs only the cases whose names match.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="$ROOT/tests/fake/build"
T="$(mktemp -d /tmp/gq-test.XXXXXX)"
SO="${GQ_SO:-$ROOT/interceptor/target/release/libgpuquota.so}"
CC="${CC:-cc}"
pass=0; fail=0; failed_names=()

cleanup() { [ -n "${GQ_KEEP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT

echo "== build"
if [ -z "${GQ_SO:-}" ]; then
  cargo build --release --quiet --manifest-path "$ROOT/interceptor/Cargo.toml" || { echo "0 passed, 1 failed"; exit 1; }
fi
make -s -C "$ROOT/tests/fake" || { echo "0 passed, 1 failed"; exit 1; }
S="$ROOT/tests/interceptor"
CF="-O2 -g -Wall -Wno-unused-result"
$CC $CF -o "$B/gqtest_dl" "$S/gqtest.c" "$S"/gqtest_*.c -ldl -lpthread &&
$CC $CF -DDIRECT -o "$B/gqtest_direct" "$S/gqtest.c" "$S"/gqtest_*.c "$B/libcuda.so.1" -ldl -lpthread &&
$CC $CF -shared -fPIC -o "$B/mallochook.so" "$S/mallochook.c" -ldl &&
$CC $CF -shared -fPIC -o "$B/broken_dlsym.so" "$S/broken_dlsym.c" -ldl &&
$CC $CF -o "$B/rtld_next_test" "$S/rtld_next_test.c" -ldl &&
$CC $CF -I"$ROOT/interceptor/include" -o "$B/usage_dump" "$S/usage_dump.c" &&
$CC $CF -o "$B/grant_tool" "$S/grant_tool.c" &&
$CC $CF -o "$B/bench_alloc" "$S/bench_alloc.c" -ldl -lpthread &&
$CC $CF -o "$B/oddcalls" "$S/oddcalls.c" -ldl || { echo "0 passed, 1 failed"; exit 1; }

export LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GQ_LIB="$SO"
unset GPU_QUOTA_VRAM GPU_QUOTA_USAGE_FILE GPU_QUOTA_STATE_DIR GPU_QUOTA_CONTEXT_OVERHEAD GPU_QUOTA_CONTEXT_COST_FILE FAKE_CUDA_PEAK_FILE FAKE_CUDA_CTX_BYTES
# standalone slices charge a context by default; the cases
# measure exact slices without one unless they ask (ctx_default_* below)
export GPU_QUOTA_CONTEXT_OVERHEAD=0
MiB=$((1 << 20)); GiB=$((1 << 30))
export FAKE_CUDA_MEM_BYTES=$GiB

# t NAME CMD... : run one case in a subshell, log to $T/NAME.log
t() {
  local name="$1"; shift
  if [ -n "${GQ_ONLY:-}" ] && ! [[ $name =~ $GQ_ONLY ]]; then return 0; fi
  if ( "$@" ) >"$T/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); failed_names+=("$name"); echo "FAIL $name"; sed 's/^/     | /' "$T/$name.log" | tail -25
  fi
}
pre() { LD_PRELOAD="$SO" "$@"; }
q() { env GPU_QUOTA_VRAM=64m GQ_SLICE=$((64 * MiB)) LD_PRELOAD="$SO" "$@"; }

echo "== ELF (acceptance 4)"
elf_needed() {
  local bad
  bad=$(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
        grep -vE '^(libc\.so\.6|libdl\.so\.2|libpthread\.so\.0|libm\.so\.6|librt\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$')
  readelf -d "$SO" | grep NEEDED
  [ -z "$bad" ] || { echo "unexpected NEEDED: $bad"; return 1; }
}
elf_versions() {
  local vers
  vers=$(objdump -T "$SO" | grep -o 'GLIBC_[0-9.]*' | sort -u -V)
  echo "$vers"
  for v in $vers; do
    local n=${v#GLIBC_}
    if [ "$(printf '%s\n%s\n' "$n" 2.17 | sort -V | tail -1)" != 2.17 ]; then echo "too new: $v"; return 1; fi
  done
  objdump -T "$SO" | grep -q 'GLIBC_2.2.5.*dlopen' || { echo "dlopen not bound to GLIBC_2.2.5"; return 1; }
}
elf_exports() {
  # dlsym and the driver entry points are exported; nothing else
  local extra
  extra=$(objdump -T "$SO" | awk '$2=="g" && $4==".text" {print $NF}' | grep -vE '^(dlsym|cu[A-Za-z0-9_]+|nvml[A-Za-z0-9_]+)$')
  [ -z "$extra" ] || { echo "unexpected exports: $extra"; return 1; }
}
t elf_needed elf_needed
t elf_glibc_versions elf_versions
t elf_exports elf_exports

echo "== unit tests (pure logic, std harness)"
if [ -z "${GQ_SKIP_CARGO_TEST:-}" ]; then
  t cargo_unit_tests cargo test --release --quiet --manifest-path "$ROOT/interceptor/Cargo.toml" --lib --test layers
fi

echo "== non-CUDA processes pay nothing"
nocuda() {
  local u="$T/nocuda.usage"
  GPU_QUOTA_VRAM=1g GPU_QUOTA_USAGE_FILE="$u" LD_PRELOAD="$SO" /bin/true || return 1
  out=$(GPU_QUOTA_VRAM=1g GPU_QUOTA_USAGE_FILE="$u" LD_PRELOAD="$SO" sh -c 'echo hi | cat; ls / >/dev/null; echo $((1+2))') || return 1
  [ "$out" = "hi
3" ] || { echo "output: $out"; return 1; }
  GPU_QUOTA_VRAM=1g GPU_QUOTA_USAGE_FILE="$u" LD_PRELOAD="$SO" python3 -c 'import ctypes,ctypes.util; ctypes.CDLL(None).malloc(10)' 2>/dev/null || true
  [ ! -e "$u" ] || { echo "usage file created by a non-CUDA process"; return 1; }
  mkdir -p "$T/nc_state"; echo "version=1" >"$T/nc_state/limits"; : >"$T/nc_state/usage"
  "$B/grant_tool" write "$T/nc_state/grant" 0:$((64 * MiB)) || return 1
  GPU_QUOTA_STATE_DIR="$T/nc_state" LD_PRELOAD="$SO" sh -c 'true' || return 1
  [ "$(stat -c %s "$T/nc_state/usage")" = 0 ] || { echo "container usage file touched"; return 1; }
}
t nocuda_processes nocuda

echo "== entry paths (acceptance 1)"
for m in direct dlsym gpa gpa1 gpa_ptsz; do
  bin=gqtest_dl; [ $m = direct ] && bin=gqtest_direct
  t "paths_$m" q env GQ_MODE=$m "$B/$bin" paths
  t "paths_${m}_internal_gpa" q env FAKE_CUDA_GPA_MODE=internal GQ_MODE=$m "$B/$bin" paths
  t "passthrough_$m" env GQ_MODE=$m GQ_EXPECT_WRAPPED=0 LD_PRELOAD="$SO" "$B/$bin" paths
done
t gpa_mapping q env GQ_MODE=gpa "$B/gqtest_dl" gpa
t gpa_mapping_internal q env FAKE_CUDA_GPA_MODE=internal GQ_MODE=gpa "$B/gqtest_dl" gpa
t nvml_dlsym q env GQ_EXPECT_USED=0 "$B/gqtest_dl" nvml
t nvml_passthrough env GQ_EXPECT_WRAPPED=0 GQ_EXPECT_USED=0 LD_PRELOAD="$SO" "$B/gqtest_dl" nvml
t nvml_multidev q env FAKE_CUDA_DEVICES=3 GQ_EXPECT_USED=0 "$B/gqtest_dl" nvml
rtld() { LD_PRELOAD="$SO $B/mallochook.so" GPU_QUOTA_VRAM=1g "$B/rtld_next_test"; }
t rtld_next_malloc_interposer rtld
rtld_plain() { LD_PRELOAD="$SO $B/mallochook.so" "$B/rtld_next_test"; }
t rtld_next_passthrough rtld_plain
rtld_control() {
  # the same test must fail with a naive (non-tail-call) dlsym override
  if LD_PRELOAD="$B/broken_dlsym.so $B/mallochook.so" "$B/rtld_next_test"; then echo "control passed: test cannot fail"; return 1; fi
  return 0
}
t rtld_next_negative_control rtld_control
spawn() { q sh -c "GQ_MODE=dlsym '$B/gqtest_dl' paths && GQ_MODE=gpa '$B/gqtest_dl' paths"; }
t spawned_children spawn

echo "== charging, frees, reporting (acceptance 2)"
for m in dlsym gpa direct; do
  bin=gqtest_dl; [ $m = direct ] && bin=gqtest_direct
  t "apis_$m" q env GQ_MODE=$m "$B/$bin" apis
done
t apis_gpa1 q env GQ_MODE=gpa1 "$B/gqtest_dl" apis
t frees_unknown_and_double q "$B/gqtest_dl" frees
t frees_unknown_gpa q env GQ_MODE=gpa "$B/gqtest_dl" frees
t meminfo_rules q "$B/gqtest_dl" meminfo
t meminfo_rules_gpa q env GQ_MODE=gpa "$B/gqtest_dl" meminfo
t slice_percent env GPU_QUOTA_VRAM=25% GQ_SLICE=$((256 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" paths
t slice_decimal_units env GPU_QUOTA_VRAM=0.1GB GQ_SLICE=100000000 LD_PRELOAD="$SO" "$B/gqtest_dl" paths
t slice_above_real_total env GPU_QUOTA_VRAM=4g GQ_SLICE=$GiB LD_PRELOAD="$SO" "$B/gqtest_dl" paths
t multi_device q env FAKE_CUDA_DEVICES=2 "$B/gqtest_dl" multidev
t ctx_overhead_env q env GPU_QUOTA_CONTEXT_OVERHEAD=16m GQ_OVERHEAD=$((16 * MiB)) "$B/gqtest_dl" ctx
# standalone default: the host's measured cost from the hook's
# cache, else the built-in 616 MiB; the env key overrides (0 = none)
ctx_default() {
  local cache="$1" want="$2"
  env -u GPU_QUOTA_CONTEXT_OVERHEAD GPU_QUOTA_CONTEXT_COST_FILE="$cache" GPU_QUOTA_VRAM=1g GQ_SLICE=$GiB \
    GQ_OVERHEAD="$want" LD_PRELOAD="$SO" "$B/gqtest_dl" ctx
}
t ctx_default_builtin ctx_default /nonexistent/context-cost.json $((616 * MiB))
ctx_default_cached() {
  printf '{"version":1,"entries":[{"key":{"driver_version":"580.1","gpu_name":"Fake"},"charge_bytes":%d,"measured":null,"error":null,"at_unix":1}]}' $((100 * MiB)) >"$T/ctxcost.json"
  ctx_default "$T/ctxcost.json" $((100 * MiB))
}
t ctx_default_cached ctx_default_cached
ctx_default_symlink() {
  printf '{"charge_bytes":%d}' $((100 * MiB)) >"$T/ctxcost.real"; ln -sf "$T/ctxcost.real" "$T/ctxcost.link"
  ctx_default "$T/ctxcost.link" $((616 * MiB))
}
t ctx_default_cache_symlink_ignored ctx_default_symlink
# no GPU_QUOTA_CONTEXT_COST_FILE: the cache is found under the ledger_dir of
# /etc/gpu-quota/config.toml (a private mount of a copy, in a user namespace)
ctx_default_ledger_dir() {
  unshare -rm true 2>/dev/null || { echo "no user namespaces here: not run"; return 0; }
  mkdir -p "$T/gqledger"
  printf '{"charge_bytes":%d}' $((100 * MiB)) >"$T/gqledger/context-cost.json"
  local etc target
  if [ -d /etc/gpu-quota ]; then
    etc="$T/gqetc"; target=/etc/gpu-quota; mkdir -p "$etc"; conf="$etc/config.toml"
  else
    etc="$T/etc"; target=/etc; cp -a /etc "$etc" 2>/dev/null; mkdir -p "$etc/gpu-quota"; conf="$etc/gpu-quota/config.toml"
  fi
  printf '# test\nledger_dir = "%s"\n[driver]\n' "$T/gqledger" >"$conf"
  env -u GPU_QUOTA_CONTEXT_OVERHEAD -u GPU_QUOTA_CONTEXT_COST_FILE GPU_QUOTA_VRAM=1g GQ_SLICE=$GiB \
    GQ_OVERHEAD=$((100 * MiB)) unshare -rm sh -c 'mount --bind "$0" "$1" && LD_PRELOAD="$2" exec "$3" ctx' \
    "$etc" "$target" "$SO" "$B/gqtest_dl"
}
t ctx_default_cache_in_configured_ledger_dir ctx_default_ledger_dir
t ctx_default_env_zero env GPU_QUOTA_CONTEXT_OVERHEAD=0 GPU_QUOTA_VRAM=1g GQ_SLICE=$GiB GQ_OVERHEAD=0 LD_PRELOAD="$SO" "$B/gqtest_dl" ctx
t ctx_overhead_unseen_context q env GPU_QUOTA_CONTEXT_OVERHEAD=16m GQ_OVERHEAD=$((16 * MiB)) "$B/gqtest_dl" ctxunseen
msg() {
  q "$B/gqtest_dl" msg 2>"$T/msg.err" || return 1
  cat "$T/msg.err"
  local want="gpu-quota: cuMemAlloc of 32.00 MiB refused: slice 64.00 MiB on GPU 0, 40.00 MiB in use by this container"
  [ "$(grep -c '^gpu-quota:' "$T/msg.err")" = 1 ] || { echo "expected exactly one (rate-limited) line"; return 1; }
  grep -qxF "$want" "$T/msg.err" || { echo "message differs from: $want"; return 1; }
}
t refusal_message_rate_limited msg
# ctx_small MODE: a slice below one context; the first line names the context
# (ctxsmall: the context made through our wrapper, the only line; ctxsmall_unseen:
# made out of our sight and charged at the first allocation, whose own line follows)
ctx_small() {
  local err="$T/$1.err" want="gpu-quota: this container's slice (8.00 MiB on GPU 0) cannot hold a CUDA context, which is charged 16.00 MiB per process here; ask for at least 18.00 MiB"
  env GPU_QUOTA_VRAM=8m GPU_QUOTA_CONTEXT_OVERHEAD=16m LD_PRELOAD="$SO" "$B/gqtest_dl" "$1" 2>"$err" || return 1
  cat "$err"
  [ "$(head -1 "$err")" = "$want" ] || { echo "first line differs from: $want"; return 1; }
  [ "$1" != ctxsmall ] || [ "$(grep -c '^gpu-quota:' "$err")" = 1 ] || { echo "expected exactly one line"; return 1; }
}
t slice_below_one_context_names_it ctx_small ctxsmall
t slice_below_an_unseen_context_names_it ctx_small ctxsmall_unseen

echo "== container state directory"
# A container's state directory as the host writes it: the limits file
# (no sizes: they are the grant's) and the grant of GPUs 0 and 1 (the fake's
# UUIDs), VRAM each.
mkstate() { # DIR VRAM [extra lines]
  mkdir -p "$1"; local d="$1" v="$2"; shift 2
  { echo "# written by the hook"; echo "version=1"; echo "container_id=ci-test-1"
    echo "gpus=GPU-face3344-5566-7788-99aa-bbccddeeff00,GPU-face3344-5566-7788-99aa-bbccddeeff01"
    for l in "$@"; do echo "$l"; done; echo "future_key=ignored"; } >"$d/limits"
  "$B/grant_tool" write "$d/grant" 0:"$v" 1:"$v"
  : >"$d/usage"; chmod 666 "$d/usage"
}
container() {
  mkstate "$T/st1" $((64 * MiB))
  # env cannot raise the container's limit; it may lower it
  env GPU_QUOTA_STATE_DIR="$T/st1" GPU_QUOTA_VRAM=1g GQ_SLICE=$((64 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" paths || return 1
  env GPU_QUOTA_STATE_DIR="$T/st1" GPU_QUOTA_VRAM=32m GQ_SLICE=$((32 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" paths || return 1
  # GPU_QUOTA_USAGE_FILE is ignored in container mode: the state dir's usage is used
  env GPU_QUOTA_STATE_DIR="$T/st1" GPU_QUOTA_USAGE_FILE="$T/other.usage" GQ_SLICE=$((64 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" paths || return 1
  [ ! -e "$T/other.usage" ] || { echo "env usage file used in container mode"; return 1; }
  "$B/usage_dump" "$T/st1/usage" 0 | tee "$T/dump" || return 1
  grep -q "limit=$((64 * MiB)) " "$T/dump" && grep -q 'container=ci-test-1' "$T/dump" && grep -q '^used=0 ' "$T/dump" && grep -q 'uuid_state=2' "$T/dump" || { echo "header"; return 1; }
  [ "$(stat -c %s "$T/st1/usage")" = 266240 ] || { echo "usage file size"; return 1; }
}
t container_limits container
# a burstable slice (a version-3 grant): the limit shown, lent memory managed
cont_burst() {
  mkstate "$T/stb" $((64 * MiB))
  "$B/grant_tool" write "$T/stb/grant" 0:$((64 * MiB)):$((256 * MiB)):5 1:$((64 * MiB)) || return 1
  env GPU_QUOTA_STATE_DIR="$T/stb" GQ_SLICE=$((64 * MiB)) GQ_LIMIT=$((256 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" burst
}
t container_burstable_slice cont_burst
cont_broken() {
  mkdir -p "$T/st2"; echo "version=1" >"$T/st2/limits"; : >"$T/st2/usage"
  env GPU_QUOTA_STATE_DIR="$T/st2" GPU_QUOTA_VRAM=1g LD_PRELOAD="$SO" "$B/gqtest_dl" refuse
}
t container_broken_limits_fail_closed cont_broken
# the grant is missing, or not a grant: every allocation is refused, one line
# names the file (the limits file's own vram_bytes, an older hook's, is not
# read)
grant_bad() {
  local k r=0
  for k in missing garbage; do
    local d="$T/gb_$k"; mkstate "$d" $((64 * MiB)) "vram_bytes=$((64 * MiB))"
    case $k in missing) rm -f "$d/grant" ;; garbage) head -c 1088 /dev/urandom >"$d/grant" ;; esac
    GPU_QUOTA_STATE_DIR="$d" LD_PRELOAD="$SO" "$B/gqtest_dl" refuse 2>"$d/err" || { echo "$k: allocated"; r=1; }
    cat "$d/err"
    grep -q "^gpu-quota: cannot use $d/grant .*refusing all device memory" "$d/err" || { echo "$k: no line naming the grant"; r=1; }
  done
  return $r
}
t container_bad_grant_fail_closed grant_bad
# a process of the container can write the usage file: a header limit it
# raises while another process runs changes nothing for that process (its
# admission reads the grant), nor for a later one, and the display copy is
# put back
forged() {
  local d="$T/forged" r=0; mkstate "$d" $((64 * MiB)); rm -f "$d.ready" "$d.changed"
  export GPU_QUOTA_STATE_DIR="$d"
  GQ_SLICE=$((64 * MiB)) GQ_SLICE2=$((64 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" live "$d.ready" "$d.changed" & local p=$!
  local i; for i in $(seq 400); do [ -e "$d.ready" ] && break; sleep 0.05; done
  "$B/usage_dump" --set-limit "$d/usage" 0 $GiB || r=1
  "$B/usage_dump" "$d/usage" 0 | grep -q "limit=$GiB " || { echo "the forge did not take"; r=1; }
  touch "$d.changed"; wait $p || r=1
  "$B/usage_dump" --set-limit "$d/usage" 0 $GiB || r=1
  LD_PRELOAD="$SO" "$B/gqtest_dl" fill $((64 * MiB)) $((8 * MiB)) || r=1
  "$B/usage_dump" "$d/usage" 0 | grep -q "limit=$((64 * MiB)) " || { echo "display copy not refreshed"; "$B/usage_dump" "$d/usage" 0; r=1; }
  return $r
}
t forged_header_limit_changes_nothing forged
# vram=50% over two GPUs of different sizes (1 GiB and 512 MiB): each GPU is
# reported and admitted against its own slice
pergpu() { # MODE
  local m=$1 bin=gqtest_dl; [ "$m" = direct ] && bin=gqtest_direct
  local d="$T/pergpu_$m"; mkstate "$d" 0
  "$B/grant_tool" write "$d/grant" 0:$((512 * MiB)) 1:$((256 * MiB)) || return 1
  FAKE_CUDA_DEVICES=2 FAKE_CUDA_MEM_BYTES=$GiB,$((512 * MiB)) GPU_QUOTA_STATE_DIR="$d" GQ_MODE=$m \
    GQ_SLICE0=$((512 * MiB)) GQ_SLICE1=$((256 * MiB)) LD_PRELOAD="$SO" "$B/$bin" pergpu
}
for m in dlsym gpa direct; do t "per_gpu_slices_$m" pergpu $m; done
# the host changes the slice while the process runs (one store through its
# own mapping of the grant): the next query reports it, the next allocation
# is admitted against it; then it shrinks again
live() { # FROM TO
  local d="$T/live_$2"; mkstate "$d" "$1"; rm -f "$d.ready" "$d.changed"
  GPU_QUOTA_STATE_DIR="$d" GQ_SLICE=$1 GQ_SLICE2=$2 LD_PRELOAD="$SO" "$B/gqtest_dl" live "$d.ready" "$d.changed" & local p=$!
  local i; for i in $(seq 400); do [ -e "$d.ready" ] && break; sleep 0.05; done
  "$B/grant_tool" set "$d/grant" 0 "$2"; touch "$d.changed"
  wait $p
}
t live_grant_grows live $((64 * MiB)) $((128 * MiB))
t live_grant_shrinks live $((64 * MiB)) $((32 * MiB))
# An unusable usage file refuses everything (one line naming
# it), never a private budget, and is never grown or rewritten
bad_usage() { # NAME: prepares $T/fc_NAME/usage
  local d="$T/fc_$1"; mkstate "$d" $((64 * MiB))
  case $1 in
    foreign) head -c 266240 /dev/zero | tr '\0' 'x' >"$d/usage" ;;
    version) "$B/usage_dump" --forge "$d/usage" version ;;
    layout) "$B/usage_dump" --forge "$d/usage" layout ;;
    big) head -c $((266240 + 4096)) /dev/zero >"$d/usage" ;;
    small) head -c 100 /dev/zero >"$d/usage" ;;
    missing) rm -f "$d/usage" ;;
    dir) rm -f "$d/usage"; mkdir "$d/usage" ;;
  esac
}
fail_closed() {
  local k r=0
  for k in foreign version layout big small missing dir; do
    bad_usage $k; local d="$T/fc_$k"
    [ -f "$d/usage" ] && cp "$d/usage" "$d/usage.orig"
    for i in 1 2; do
      GPU_QUOTA_STATE_DIR="$d" LD_PRELOAD="$SO" "$B/gqtest_dl" refuse 2>"$d/err.$i" || { echo "$k: process $i allocated"; cat "$d/err.$i"; r=1; }
      [ "$(grep -c '^gpu-quota:' "$d/err.$i")" = 1 ] || { echo "$k: want exactly one gpu-quota line:"; cat "$d/err.$i"; r=1; }
      grep -q "^gpu-quota: cannot use $d/usage .*refusing all device memory" "$d/err.$i" || { echo "$k: line does not name the usage file"; cat "$d/err.$i"; r=1; }
    done
    if [ -f "$d/usage.orig" ]; then cmp -s "$d/usage" "$d/usage.orig" || { echo "$k: usage file modified (size $(stat -c %s "$d/usage"))"; r=1; }; fi
    [ "$k" != missing ] || [ ! -e "$d/usage" ] || { echo "missing: usage file created"; r=1; }
  done
  return $r
}
t container_bad_usage_fail_closed fail_closed
cont_ctx() {
  mkstate "$T/st3" $((64 * MiB)) "context_overhead_bytes=$((16 * MiB))"
  env GPU_QUOTA_STATE_DIR="$T/st3" GQ_SLICE=$((64 * MiB)) GQ_OVERHEAD=$((16 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" ctx
}
t container_context_overhead cont_ctx
nvml_shared() {
  mkstate "$T/st4" $((64 * MiB))
  export GPU_QUOTA_STATE_DIR="$T/st4" FAKE_CUDA_PEAK_FILE="$T/st4.peak"
  LD_PRELOAD="$SO" "$B/gqtest_dl" hold $((40 * MiB)) "$T/st4.ready" "$T/st4.stop" &
  local hp=$!
  for i in $(seq 200); do [ -e "$T/st4.ready" ] && break; sleep 0.05; done
  GQ_SLICE=$((64 * MiB)) GQ_EXPECT_USED=$((40 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" nvml; local r=$?
  # the cuMemGetInfo of another process of the container sees it too, and
  # that process cannot allocate past the shared budget
  GQ_SLICE=$((64 * MiB)) LD_PRELOAD="$SO" "$B/gqtest_dl" expect_free $((24 * MiB)) || r=1
  touch "$T/st4.stop"; wait $hp || r=1
  # after the holder exits: nothing in use
  GQ_SLICE=$((64 * MiB)) GQ_EXPECT_USED=0 LD_PRELOAD="$SO" "$B/gqtest_dl" nvml || r=1
  return $r
}
t nvml_reports_container_usage nvml_shared

echo "== what the driver keeps alive, and frees on its own (issue 9)"
export FAKE_CUDA_PITCH_ALIGN=2048
t failed_free_keeps_charge q "$B/gqtest_dl" failfree
for m in dlsym gpa direct; do
  bin=gqtest_dl; [ $m = direct ] && bin=gqtest_direct
  t "vmm_lifetimes_$m" q env GQ_MODE=$m "$B/$bin" vmm
  t "pool_reserves_$m" q env GQ_MODE=$m "$B/$bin" pool
  t "context_frees_$m" q env GQ_MODE=$m "$B/$bin" ctxlife
  t "graph_memory_$m" q env GQ_MODE=$m "$B/$bin" graphmem
done
t vmm_lifetimes_wide_handles q env FAKE_CUDA_HANDLE_BASE=0xfe00000000000000 "$B/gqtest_dl" vmm

echo "== stream capture and graph memory (issue 17)"
# the fake's capture rules catch violations (native, no interceptor)
t capture_model_native "$B/gqtest_dl" capturectl
t capture_model_direct_native env GQ_MODE=direct "$B/gqtest_direct" capturectl
# the capture scenario is legal without the interceptor ...
t graph_capture_native env GQ_NATIVE=1 "$B/gqtest_dl" capture
# ... and stays legal (and charged) with it
for m in dlsym gpa direct; do
  bin=gqtest_dl; [ $m = direct ] && bin=gqtest_direct
  t "graph_capture_$m" q env GQ_MODE=$m "$B/$bin" capture
done
t graph_capture_ctx_overhead q env GPU_QUOTA_CONTEXT_OVERHEAD=0 "$B/gqtest_dl" capture

echo "== odd calls get the driver's own answer (issue 17 §3)"
oddcalls_diff() {
  "$B/oddcalls" >"$T/odd.native" || return 1
  q "$B/oddcalls" >"$T/odd.quota" 2>"$T/odd.err" || return 1
  cat "$T/odd.native"
  diff "$T/odd.native" "$T/odd.quota" || { echo "codes differ under the interceptor"; cat "$T/odd.err"; return 1; }
  # not vacuous: the battery has calls the driver rejects
  grep -q ' 1$' "$T/odd.native" || { echo "no INVALID_VALUE natively"; return 1; }
}
t oddcalls_native_vs_intercepted oddcalls_diff
pitch_msg() {
  # a refusal names the function the program called
  q "$B/gqtest_dl" pitchmsg 2>"$T/pitch.err" || return 1
  cat "$T/pitch.err"
  grep -q '^gpu-quota: cuMemAllocPitch of ' "$T/pitch.err" || { echo "message does not name cuMemAllocPitch"; return 1; }
}
t pitch_refusal_names_function pitch_msg
t pool_device_of_stream_and_pool q env FAKE_CUDA_DEVICES=2 "$B/gqtest_dl" pooldev
ctx_truth() {
  # the fake's contexts cost 16 MiB each; with the overhead charged, a filled
  # slice holds at most the slice physically and cuMemGetInfo says so
  mkstate "$T/st5" $((64 * MiB)) "context_overhead_bytes=$((16 * MiB))"
  export GPU_QUOTA_STATE_DIR="$T/st5" FAKE_CUDA_CTX_BYTES=$((16 * MiB)) FAKE_CUDA_PEAK_FILE="$T/st5.peak"
  LD_PRELOAD="$SO" "$B/gqtest_dl" fill $((48 * MiB)) $((8 * MiB)) || return 1
  "$B/gqtest_dl" peak $((64 * MiB))
}
t context_overhead_truth ctx_truth
ctx_many() { # MODE: the H200's program, contexts created until refused:
  # physically within the slice, one refusal line naming the context, and a
  # destroy makes room for the next (t_ctx)
  local m=$1 bin=gqtest_dl; [ "$m" = direct ] && bin=gqtest_direct
  local d="$T/ctxmany_$m"
  mkstate "$d" $((64 * MiB)) "context_overhead_bytes=$((16 * MiB))"
  export GPU_QUOTA_STATE_DIR="$d" FAKE_CUDA_CTX_BYTES=$((16 * MiB)) FAKE_CUDA_PEAK_FILE="$d.peak" GQ_MODE=$m
  GQ_SLICE=$((64 * MiB)) GQ_OVERHEAD=$((16 * MiB)) LD_PRELOAD="$SO" "$B/$bin" ctx 2>"$d.err"; local r=$?
  cat "$d.err"
  "$B/gqtest_dl" peak $((64 * MiB)) || r=1
  grep -qxF "gpu-quota: cuCtxCreate (context) of 16.00 MiB refused: slice 64.00 MiB on GPU 0, 64.00 MiB in use by this container" "$d.err" ||
    { echo "no refusal line naming the context"; r=1; }
  return $r
}
for m in dlsym gpa direct; do t "contexts_until_refused_$m" ctx_many $m; done
execself() {
  local u="$T/exec.usage"
  export GPU_QUOTA_VRAM=64m GPU_QUOTA_USAGE_FILE="$u" GQ_SLICE=$((64 * MiB)) FAKE_CUDA_PEAK_FILE="$T/exec.peak"
  LD_PRELOAD="$SO" "$B/gqtest_dl" execself $((40 * MiB)) || return 1
  "$B/gqtest_dl" peak $((64 * MiB))
}
t exec_drops_old_image_charge execself
zombie() {
  export GPU_QUOTA_VRAM=64m GPU_QUOTA_USAGE_FILE="$T/zombie.usage" GQ_SLICE=$((64 * MiB)) FAKE_CUDA_PEAK_FILE="$T/zombie.peak"
  LD_PRELOAD="$SO" "$B/gqtest_dl" zombie $((48 * MiB))
}
t zombie_holds_nothing zombie
forkinit() {
  local d="$T/fi"; mkdir -p "$d"; mkfifo "$d/limits"; : >"$d/usage"
  "$B/grant_tool" write "$d/grant" 0:$((64 * MiB)) || return 1
  GPU_QUOTA_STATE_DIR="$d" LD_PRELOAD="$SO" "$B/gqtest_dl" forkinit & local p=$!
  sleep 1
  local i; for i in 1 2 3; do echo "vram_bytes=$((64 * MiB))" >"$d/limits"; sleep 0.3; done &
  local w=$!
  local r=0; wait $p || r=1
  kill $w 2>/dev/null; wait $w 2>/dev/null
  return $r
}
t fork_during_first_init forkinit

echo "== two GPUs: NCCL-style peer buffers (issue 13)"
# Two ranks of one container, one per GPU, each create VMM memory on GPU 1,
# map it and grant GPUs 0 and 1 access (cuMemSetAccess). It is charged once,
# to GPU 1, in the usage file, the ranks' cuMemGetInfo and the fake's
# physical use; GPU 1 over its slice refuses with one line naming GPU 1
# while GPU 0 still allocates; unmapping frees it.
peer2() { # MODE
  local m=$1 bin=gqtest_dl; [ "$m" = direct ] && bin=gqtest_direct
  local d="$T/peer_$m" c=$((16 * MiB)) r=0 i
  # a gpus=2 container: the usage file's device index d is the d-th GPU of
  # limits (these are the fake's UUIDs of devices 0 and 1)
  mkdir -p "$d"
  printf 'version=1\ncontainer_id=ci-peer\ngpus=%s\n' \
    GPU-face3344-5566-7788-99aa-bbccddeeff00,GPU-face3344-5566-7788-99aa-bbccddeeff01 >"$d/limits"
  "$B/grant_tool" write "$d/grant" 0:$((64 * MiB)) 1:$((64 * MiB))
  : >"$d/usage"
  export FAKE_CUDA_DEVICES=2 GPU_QUOTA_STATE_DIR="$d" FAKE_CUDA_PEAK_FILE="$d/peak" \
    GQ_SLICE=$((64 * MiB)) GQ_CHUNK=$c GQ_MODE=$m
  used_is() { # DEV BYTES: the container's charge in the usage file, and the fake's physical use
    "$B/usage_dump" "$d/usage" "$1" | grep -q "^used=$2 " || { echo "usage file GPU $1:"; "$B/usage_dump" "$d/usage" "$1"; echo "want used=$2"; r=1; }
    "$B/gqtest_dl" physis "$1" "$2" || r=1
  }
  waitf() { for i in $(seq 400); do [ -e "$1" ] && return 0; sleep 0.05; done; echo "no $1"; r=1; return 1; }
  # rank 1 (current context on GPU 1) first, then rank 0 (on GPU 0)
  GQ_EXPECT1=$c LD_PRELOAD="$SO" "$B/$bin" peer 1 "$d/r1" "$d/s1" 2>"$d/err1" & local p1=$!
  waitf "$d/r1"; used_is 0 0; used_is 1 $c
  GQ_EXPECT1=$((2 * c)) GQ_OVER=1 LD_PRELOAD="$SO" "$B/$bin" peer 0 "$d/r0" "$d/s0" 2>"$d/err0" & local p0=$!
  waitf "$d/r0"; used_is 0 0; used_is 1 $((2 * c))
  touch "$d/s0"; wait $p0 || { echo "rank 0 failed"; r=1; }
  used_is 0 0; used_is 1 $c
  touch "$d/s1"; wait $p1 || { echo "rank 1 failed"; r=1; }
  cat "$d/err0" "$d/err1"
  "$B/usage_dump" "$d/usage" 1 | grep -q '^used=0 ' || { echo "GPU 1 charge left after both ranks"; r=1; }
  [ "$(grep -c '^gpu-quota:' "$d/err0")" = 1 ] || { echo "rank 0: want exactly one gpu-quota line"; r=1; }
  grep -q '^gpu-quota: cuMemCreate of .* refused: slice 64.00 MiB on GPU 1, ' "$d/err0" || { echo "rank 0: refusal does not name GPU 1"; r=1; }
  ! grep -q '^gpu-quota:' "$d/err1" || { echo "rank 1 was refused"; r=1; }
  return $r
}
for m in dlsym gpa direct; do t "peer_vmm_two_ranks_$m" peer2 $m; done

echo "== a GPU outside the slice (issue 19)"
# --gpus all beside a one-GPU slice: the container sees GPUs 0 and 1, its
# slice is GPU 1 (limits gpus= names only it). GPU 0 gets nothing: every
# allocation path is refused with one line naming it, cuMemGetInfo,
# cuDeviceTotalMem and NVML report 0 for it; GPU 1 keeps its slice.
# Control: the same program with both GPUs in the slice allocates on GPU 0.
foreign() { # MODE
  local m=$1 bin=gqtest_dl; [ "$m" = direct ] && bin=gqtest_direct
  local d="$T/foreign_$m" r=0
  local g0=GPU-face3344-5566-7788-99aa-bbccddeeff00 g1=GPU-face3344-5566-7788-99aa-bbccddeeff01
  mkdir -p "$d" "$d.ctl"
  printf 'version=1\ncontainer_id=ci-foreign\ngpus=%s\n' "$g1" >"$d/limits"; : >"$d/usage"
  printf 'version=1\ncontainer_id=ci-foreign\ngpus=%s,%s\n' "$g1" "$g0" >"$d.ctl/limits"; : >"$d.ctl/usage"
  "$B/grant_tool" write "$d/grant" 1:$((64 * MiB)); "$B/grant_tool" write "$d.ctl/grant" 1:$((64 * MiB)) 0:$((64 * MiB))
  export FAKE_CUDA_DEVICES=2 GQ_SLICE=$((64 * MiB)) GQ_MODE=$m
  GPU_QUOTA_STATE_DIR="$d.ctl" GQ_OWN0=1 LD_PRELOAD="$SO" "$B/$bin" foreign 2>"$d.ctl/err" || { echo "control (GPU 0 in the slice) failed:"; cat "$d.ctl/err"; r=1; }
  ! grep -q '^gpu-quota:' "$d.ctl/err" || { echo "control was refused"; cat "$d.ctl/err"; r=1; }
  GPU_QUOTA_STATE_DIR="$d" LD_PRELOAD="$SO" "$B/$bin" foreign 2>"$d/err" || r=1
  cat "$d/err"
  local want="gpu-quota: cuMemAlloc of 1.00 MiB refused: $g0 (GPU 0) is not part of this container's slice (GPU 1: 64.00 MiB)"
  [ "$(grep -c '^gpu-quota:' "$d/err")" = 1 ] || { echo "want exactly one (rate-limited) gpu-quota line"; r=1; }
  grep -qxF "$want" "$d/err" || { echo "first refusal differs from: $want"; r=1; }
  "$B/usage_dump" "$d/usage" 1 | grep -q '^used=0 ' || { echo "GPU 1 charge left"; r=1; }
  return $r
}
for m in dlsym gpa direct; do t "foreign_gpu_gets_nothing_$m" foreign $m; done

echo "== fork / processes"
t fork_shared_budget q env GPU_QUOTA_USAGE_FILE="$T/fork.usage" "$B/gqtest_dl" fork
t fork_private_budget q "$B/gqtest_dl" fork

echo "== 8 racing processes, kill -9 (acceptance 3)"
race() {
  local slice=$((256 * MiB)) u="$T/race.usage" pf="$T/race.peak" pids=() i
  export GPU_QUOTA_VRAM=256m GPU_QUOTA_USAGE_FILE="$u" FAKE_CUDA_PEAK_FILE="$pf" GQ_SLICE=$slice
  for i in 1 2 3 4 5 6 7 8; do
    LD_PRELOAD="$SO" "$B/gqtest_dl" race 4 $i >"$T/race.$i.out" 2>&1 &
    pids+=($!)
  done
  sleep 1.5
  local victims=$(printf '%s\n' "${pids[@]}" | shuf -n 3 | tr '\n' ' ')
  echo "kill -9 $victims"; kill -9 $victims
  local bad=0
  for p in "${pids[@]}"; do
    if wait $p; then :; else
      case " $victims " in *" $p "*) ;; *) echo "worker $p failed"; bad=1;; esac
    fi
  done
  cat "$T"/race.*.out
  "$B/usage_dump" "$u" 0
  "$B/gqtest_dl" peak $slice || bad=1
  # a later process gets the whole slice back (dead slots reclaimed)
  LD_PRELOAD="$SO" "$B/gqtest_dl" fill $slice $((16 * MiB)) || bad=1
  "$B/usage_dump" "$u" 0 | tee "$T/race.dump"
  grep -q '^used=0 ' "$T/race.dump" || { echo "usage not back to 0"; bad=1; }
  local oom=0 n
  for n in $(sed -n 's/.*oom=\([0-9]*\).*/\1/p' "$T"/race.*.out); do oom=$((oom + n)); done
  [ "$oom" -gt 0 ] || { echo "no contention: no refusal happened"; bad=1; }
  return $bad
}
t race_8_procs_kill9 race
killed_holder() {
  # a SIGKILLed process holding most of the slice: the next process gets it all back
  local u="$T/kh.usage"
  export GPU_QUOTA_VRAM=64m GPU_QUOTA_USAGE_FILE="$u" FAKE_CUDA_PEAK_FILE="$T/kh.peak"
  LD_PRELOAD="$SO" "$B/gqtest_dl" hold $((60 * MiB)) "$T/kh.ready" "$T/kh.never" &
  local hp=$!
  for i in $(seq 200); do [ -e "$T/kh.ready" ] && break; sleep 0.05; done
  "$B/usage_dump" "$u" 0 | grep -q "^used=$((60 * MiB)) " || { echo "holder not charged"; "$B/usage_dump" "$u" 0; return 1; }
  kill -9 $hp; wait $hp 2>/dev/null
  LD_PRELOAD="$SO" "$B/gqtest_dl" fill $((64 * MiB)) $((8 * MiB))
}
t killed_holder_memory_returns killed_holder

echo "== bench smoke"
bench() {
  "$B/bench_alloc" 2000 1048576 1 && q "$B/bench_alloc" 2000 1048576 1 && q "$B/bench_alloc" 500 1048576 4
}
t bench_alloc_smoke bench

echo
if [ $fail -gt 0 ]; then echo "failed: ${failed_names[*]}"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
