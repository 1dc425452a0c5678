#!/usr/bin/env bash
# What the test suite may leave on a host, as one sorted text: the whole mount
# table (mount point, type, source), every top-level entry of /tmp and /var/tmp,
# every cgroup directory two levels down, every file under /etc, /var/lib,
# /var/cache, /run, /opt and /root three levels down (the places engines and the
# product write by name), every top-level entry of /var/log (the product's
# default log_file is /var/log/gpu-quota.log), and processes mentioning
# gpu-quota or a test's temp dir.
#
#   scripts/host-snapshot.sh > before      (first thing `make test` does)
#   scripts/host-snapshot.sh > after       (last thing)
#   scripts/host-snapshot.sh --diff before after [IGNORE_REGEX]
#                                          prints what is new in after and exits 1 if anything is
#
# The check is strict on purpose: a green `make test` must mean the same on a
# machine where no engine ever ran (a directory an engine left on an earlier run
# hides a new file in it only from a check that looks at the directory alone).
set -u -o pipefail
if [ "${1:-}" = --diff ]; then
  before=$2 after=$3 ignore=${4:-'^$'}
  new=$(comm -13 "$before" "$after" | grep -vE "$ignore")
  if [ -n "$new" ]; then
    echo "left on the host by the test suite (not there before it ran):"
    printf '%s\n' "$new" | head -60 | sed 's/^/  /'
    n=$(printf '%s\n' "$new" | wc -l)
    [ "$n" -le 60 ] || echo "  … and $((n - 60)) more"
    exit 1
  fi
  exit 0
fi
{
  # mountinfo: 5 = mount point, after " - ": type and source
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") break; print "mount " $5 " " $(i + 1) " " $(i + 2) }' /proc/self/mountinfo
  find /tmp /var/tmp -mindepth 1 -maxdepth 1 2>/dev/null | sed 's/^/tmp /'
  find /sys/fs/cgroup -mindepth 1 -maxdepth 3 -type d 2>/dev/null | sed 's/^/cgroup /'
  find /var/log -mindepth 1 -maxdepth 1 2>/dev/null | sed 's/^/log /'
  find /etc /var/lib /var/cache /run /opt /root -maxdepth 3 2>/dev/null |
    grep -vE '^/root/\.(cargo|rustup|cache|bash_history|lesshst|viminfo|python_history|npm)' | sed 's/^/path /'
  for p in /proc/[0-9]*; do
    c=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    case "$c" in *gpu-quota*|*/tmp/gq*) echo "process ${c%% }";; esac
  done
} | LC_ALL=C sort -u
