#!/usr/bin/env bash
# Mutation check of the interceptor suite: each listed breakage is applied to
# a scratch copy of interceptor/, built, and tests/interceptor/run.sh is run
# against it; the suite must fail. Prints "mutation | caught | failing cases".
#   bash tests/interceptor/mutate.sh            # all mutations (~1-2 min)
#   bash tests/interceptor/mutate.sh NAME...    # only these
# Not part of the default CI run (it rebuilds the library per mutation).
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
W="$(mktemp -d /tmp/gq-mutate.XXXXXX)"
trap '[ -n "${GQ_KEEP:-}" ] || rm -rf "$W"' EXIT
export CARGO_TARGET_DIR="$W/target"

# name | file under interceptor/src | perl substitution (must change the file)
MUTATIONS=(
  "failed-free-drops-record|cuda/mod.rs|s/\} else \{\n            TABLE.insert\(k, KIND_DPTR, rec.size, rec.dev\);\n        \}/}/"
  "pitch-correction-removed|cuda/alloc.rs|s/let actual = pitch.saturating_mul\(height\);/let actual = ch.n;/"
  "meminfo-counts-own-process-only|account.rs|s/    r.used\(idx\)\n\}/    let s = state::my_slot_if_any();\n    if s < r.nslots() { r.used_cell(s, idx).load(SeqCst) } else { 0 }\n}/"
  "unseen-context-overhead-not-charged|account.rs|s/    if ov == 0 \{\n        return;\n    \}\n    if state::CTX_CHARGED/    if true {\n        return;\n    }\n    if state::CTX_CHARGED/"
  "vmm-release-while-mapped|vmm.rs|s/if !add_ref\(h\) \{\n        return;/if true {\n        return;/"
  "vmm-wide-handle-not-asked|vmm.rs|s/if TABLE.raw_cell\(cur, KIND_MAPH\).is_none\(\) && a.n < a.h.len\(\)/if false/"
  "pool-retention-ignored|pools.rs|s/let target = res.max\(p.live.load\(Acquire\)\);/let target = p.live.load(Acquire);/"
  "no-pool-refresh-before-refusal|account.rs|s/let freed = crate::pools::refresh_all\(Some\(dev.idx\)\) \| /let freed = /"
  "pool-device-from-current-ctx|pools.rs|s/let sv = s as usize;/let sv = 0usize; let _ = s;/"
  "set-mem-pool-ignored|pools.rs|s/CUR_POOL\[ordinal as usize\].store\(pool, Relaxed\);/let _ = pool;/"
  "ctx-destroy-reset-ignored|ctxlife.rs|s/    if !enforcing\(\) \{\n        return;\n    \}\n    let dead/    if true {\n        return;\n    }\n    let dead/"
  "heap-and-stack-limits-not-charged|cuda/contexts.rs|s/crate::ctxlife::set_limit\(limit, value, \|\| f\(limit, value\)\)/f(limit, value)/"
  "graph-memory-not-charged|graphs.rs|s/    if USED.load\(Relaxed\) == 0 \{\n        return false;\n    \}\n    if !crate::capture::quiet/    if true {\n        return false;\n    }\n    if !crate::capture::quiet/"
  "graph-memory-not-followed-at-sync|graphs.rs|s/pub fn launched\(\) \{\n    note\(\);\n    refresh_all\(\);/pub fn launched() {\n    note();/;s/pub fn at_sync\(\) \{\n    if USED/pub fn at_sync() {\n    if false \&\& USED/"
  "exec-keeps-old-image|state.rs|s/            if x.shared \{\n                x.reclaim_word/            if false {\n                x.reclaim_word/"
  "zombie-counts-as-alive|region.rs|s/if state == b'Z' \|\| state == b'X' \|\| state == b'x'/if false/"
  "fail-open-private-budget|state.rs|s/if r.is_none\(\) && container \{/if false {/"
  "usage-file-grown|region.rs|s/if size != 0 && size != TOTAL_SIZE as i64 \{\n            return Err\(OpenError::Incompatible\);\n        \}\n        if size == TOTAL_SIZE/if size > TOTAL_SIZE as i64 { libc::ftruncate(fd, TOTAL_SIZE as i64); }\n        if size == TOTAL_SIZE/"
  "fork-during-init-spins|state.rs|s/if cur >> 8 != pid \{/if false {/"
  "vmm-charged-to-current-device|cuda/vmm.rs|s/DevSel::Ordinal\(ord\),\n        size as u64,\n        KIND_VMM,/DevSel::Current,\n        size as u64,\n        KIND_VMM,/"
  "vmm-last-unmap-keeps-charge|vmm.rs|s/if \(prev - 1\) & RAW_MASK == 0 \{/if false {/"
  "capture-unguarded-pool-query|pools.rs|s/fn reserved\(handle: u64\) -> Option<u64> \{\n    if !crate::capture::quiet\(\) \{/fn reserved(handle: u64) -> Option<u64> {\n    if false \&\& !crate::capture::quiet() {/"
  "captured-alloc-charged-to-pool|pools.rs|s/if crate::capture::stream_capturing\(s\) \{\n        return captured\(b\"cuMemAllocAsync\"/if false \&\& crate::capture::stream_capturing(s) {\n        return captured(b\"cuMemAllocAsync\"/"
  "capture-node-total-ignored|capture.rs|s/crate::account::fits_after\(api, dev, n, before\)/crate::account::fits_after(api, dev, n, 0)/"
  "graph-launch-not-charged|cuda/graphs.rs|s/    if r == CUDA_SUCCESS \{\n        crate::graphs::launched\(\);\n    \}\n//"
  "pitch-max-ignored|cuda/alloc.rs|s/\&\& \(max_pitch == 0 \|\| width <= max_pitch\)/\&\& max_pitch != 1/"
  "vmm-granularity-ignored|cuda/vmm.rs|s/\(gran != 0 \&\& size as u64 % gran != 0\)/false/"
  "standalone-ctx-default-zero|state.rs|s/_ => standalone_ctx_default\(\),/_ => 0,/"
  "refusal-names-ordinal-0|account.rs|s/msg::refused\(api, n, limit, dev.ordinal, r.used\(dev.idx\)\);/msg::refused(api, n, limit, 0, r.used(dev.idx));/g"
)

echo "== baseline (unmutated) build and suite"
cp -r "$ROOT/interceptor" "$W/interceptor"
rm -rf "$W/interceptor/target"
# reuse the repository's compiled dependencies
[ -d "$ROOT/interceptor/target/release" ] && mkdir -p "$W/target" && cp -r "$ROOT/interceptor/target/release" "$W/target/" 2>/dev/null
cargo build --release --quiet --manifest-path "$W/interceptor/Cargo.toml" || { echo "baseline build failed"; exit 1; }
if ! GQ_SO="$W/target/release/libgpuquota.so" GQ_SKIP_CARGO_TEST=1 bash "$ROOT/tests/interceptor/run.sh" >"$W/baseline.log" 2>&1; then
  tail -5 "$W/baseline.log"; echo "baseline suite fails: fix that first"; exit 1
fi

rows=(); missed=0
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r name file expr <<<"$m"
  if [ $# -gt 0 ]; then case " $* " in *" $name "*) ;; *) continue ;; esac; fi
  rm -rf "$W/interceptor/src"; cp -r "$ROOT/interceptor/src" "$W/interceptor/src"
  f="$W/interceptor/src/$file"
  perl -0pi -e "$expr" "$f"
  if cmp -s "$f" "$ROOT/interceptor/src/$file"; then rows+=("$name|NOT APPLIED|the pattern no longer matches $file"); missed=1; continue; fi
  if ! cargo build --release --quiet --manifest-path "$W/interceptor/Cargo.toml" 2>"$W/$name.build"; then
    rows+=("$name|BUILD FAILED|see the mutation's pattern"); missed=1; continue
  fi
  GQ_SO="$W/target/release/libgpuquota.so" GQ_SKIP_CARGO_TEST=1 timeout 300 bash "$ROOT/tests/interceptor/run.sh" >"$W/$name.log" 2>&1
  rc=$?
  cases=$(sed -n 's/^failed: //p' "$W/$name.log")
  if [ $rc -ne 0 ]; then rows+=("$name|yes|$cases"); else rows+=("$name|NO|"); missed=1; fi
done

printf '\n| mutation | caught | failing cases |\n| --- | --- | --- |\n'
for r in "${rows[@]}"; do IFS='|' read -r a b c <<<"$r"; printf '| %s | %s | %s |\n' "$a" "$b" "$c"; done
exit $missed
