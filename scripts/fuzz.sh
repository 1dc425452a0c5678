#!/usr/bin/env bash
# `make fuzz`: build the cargo-fuzz targets (fuzz/, nightly) and run each for
# FUZZ_SECS seconds (default 600), one after another, at low priority.
# Prints one line per target and exits non-zero if any target crashed,
# ran longer than FUZZ_TIMEOUT seconds on one input (default 1: libFuzzer's
# -timeout, so a slow input is a finding, not only a hang) or ran out of
# memory.
#   FUZZ_SECS=60 make fuzz
#   FUZZ_TARGETS="ldcache usage" make fuzz
# Crash inputs go to fuzz/artifacts/<target>/, the growing corpus to
# fuzz/corpus/<target>/ (both git-ignored); fuzz/seeds/<target>/ (committed,
# tiny) seeds the corpus. See docs/fuzzing.md.
set -u
cd "$(dirname "$0")/../fuzz"
SECS=${FUZZ_SECS:-600}
TARGETS=${FUZZ_TARGETS:-"request config usage ldcache spec_patch"}
NICE=${FUZZ_NICE:-19}
# -a: debug assertions and overflow checks on, as in `cargo test`.
FLAGS=(-O -a)

command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz"; exit 2; }
nice -n "$NICE" cargo +nightly fuzz build "${FLAGS[@]}" >build.log 2>&1 || { tail -30 build.log; exit 2; }
rm -f build.log

failed=0
for t in $TARGETS; do
  mkdir -p "corpus/$t" "artifacts/$t"
  dirs=("corpus/$t")
  [ -d "seeds/$t" ] && dirs+=("seeds/$t")
  before=$(ls "artifacts/$t" | wc -l)
  log="artifacts/$t.log"
  start=$(date +%s)
  # fork mode with -ignore_*: a crash is recorded and fuzzing goes on for
  # the whole time instead of stopping at the first one.
  nice -n "$NICE" cargo +nightly fuzz run "${FLAGS[@]}" "$t" "${dirs[@]}" -- \
    -max_total_time="$SECS" -timeout="${FUZZ_TIMEOUT:-1}" -rss_limit_mb=2048 -fork=1 \
    -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -artifact_prefix="artifacts/$t/" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  # fork mode's status lines: "#N: cov: C ft: F corp: K exec/s: E oom/timeout/crash: a/b/c time: Ts job: J ..."
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
  execs=$(sed -nE 's/^#([0-9]+): .*/\1/p' <<<"$last")
  cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<<"$last")
  oom_to_crash=$(sed -nE 's|.*oom/timeout/crash: ([0-9]+/[0-9]+/[0-9]+).*|\1|p' <<<"$last")
  corpus=$(ls "corpus/$t" | wc -l)
  new=$(( $(ls "artifacts/$t" | wc -l) - before ))
  if [ "$new" -gt 0 ] || { [ "$rc" != 0 ] && [ -z "$last" ]; }; then
    result="FAILED"; failed=1
  else
    result="ok"
  fi
  printf '%-10s %-6s %4ss  %10s execs  cov %5s  corpus %5s  oom/timeout/crash %-8s  new artifacts %s (artifacts/%s/)\n' \
    "$t" "$result" "$secs" "${execs:-?}" "${cov:-?}" "$corpus" "${oom_to_crash:-?}" "$new" "$t"
done
exit $failed
