# shellcheck shell=bash
# Docker (20.10 in the Debian 12 round, 26 in the Debian 13 round): install, slices,
# refusals, stop/start, the README's headline command; `docker_cases`.
#
# Sourced by tests/engines/run.sh (its helpers: check, has, Q, C, D, P, ledger, …;
# its per-round names: R, CSOCK, DSOCK, versions), which calls the cases in each round.

# ================================================================ Docker
docker_install() {
  "$REL/gpu-quota" install docker --root "$R" --runtime-path "$RT" >"$LOG/install-docker-$ROUND.log" 2>&1 ||
    { cat "$LOG/install-docker-$ROUND.log"; return 1; }
  has "$(cat "$R/etc/docker/daemon.json")" "\"path\": \"$RT\"" || return 1
  # Docker < 24 cannot pass annotations: install turns env requests on; Docker >= 24: off
  local want=false; [ "${DV%%.*}" -lt 24 ] && want=true
  has "$(cat "$GPU_QUOTA_CONFIG")" "env_requests = $want" || { cat "$LOG/install-docker-$ROUND.log"; return 1; }
  note "$(grep -i 'env_requests\|docker' "$LOG/install-docker-$ROUND.log" | head -3)"
  D info --format '{{json .Runtimes}}' | grep -q gpu-quota && { echo "gpu-quota listed before SIGHUP"; return 1; }
  kill -HUP "$(cat "$R/dockerd.pid")" || return 1
  local i
  for i in $(seq 1 100); do
    D info --format '{{json .Runtimes}}' 2>/dev/null | grep -qF "\"gpu-quota\":{\"path\":\"$RT\"" && return 0
    sleep 0.1
  done
  echo "docker info does not list gpu-quota after SIGHUP:"; D info --format '{{json .Runtimes}}'; return 1
}
DRUN=(run --runtime gpu-quota --network none)
# request args for this daemon: annotations (Docker >= 24) or the env fallback
dreq() {  # VRAM [GPU]
  if [ "${DV%%.*}" -ge 24 ]; then
    echo "--annotation vram=$1"; [ -n "${2:-}" ] && echo "--annotation gpu=$2"
  else
    echo "-e GPU_QUOTA_VRAM=$1"; [ -n "${2:-}" ] && echo "-e GPU_QUOTA_GPU=$2"
  fi
  return 0
}
docker_slice() {
  # detached container keeps its slice; limits visible through docker exec
  D "${DRUN[@]}" -d --name gq-d1 $(dreq 2g) "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after docker run -d" || return 1
  has "$(ledger)" "\"bytes\": $((2 * GIB))" || return 1
  local l; l=$(D exec gq-d1 gq-limits) || return 1
  has "$l" "grant0=$((2 * GIB))" || return 1
  D exec gq-d1 sh -c 'ls /dev; cat /etc/ld.so.preload; ls /run/gpu-quota/driver' >"$T/d1.probe" || return 1
  has "$(cat "$T/d1.probe")" "nvidiactl" && has "$(cat "$T/d1.probe")" "libgpuquota.so" && has "$(cat "$T/d1.probe")" "libcuda.so.1" || return 1
}
docker_share() {
  # the reservations before it (an earlier case's container may still run)
  local e rc=0 n0; n0=$(ledger_n)
  # as host root the share is refused (MPS lets root steer the GPU's server)
  local out; out=$(D "${DRUN[@]}" --rm --annotation vram=2g --annotation sm=25% "$IMG" true 2>&1) && { echo "root's share started: $out"; return 1; }
  has "$out" "host root" && has "$out" "--user 1000" || return 1
  D "${DRUN[@]}" -d --name gq-ds --user 1000 --annotation vram=2g --annotation sm=25% "$IMG" sleep 600 >/dev/null || return 1
  e=$(D exec gq-ds sh -c "$SHARE_PROBE") && share_seen "$e" || rc=1
  D rm -f gq-ds >/dev/null || rc=1
  [ $rc = 0 ] && wait_ledger "$n0" 5 && share_gone
}
docker_refusal() {
  # gq-d1 holds 2 GiB on one GPU; 15 GiB pinned to that GPU cannot fit
  local g out rc; g=$(ledger_gpu)
  out=$(D "${DRUN[@]}" --rm --name gq-d2 $(dreq 15g "$g") "$IMG" true 2>&1); rc=$?
  [ $rc -ne 0 ] || { echo "docker run succeeded: $out"; return 1; }
  has "$out" "gpu-quota: cannot start container" && has "$out" "requested 15.00 GiB" || return 1
  note "$out"
  expect_ledger 1 "after the refusal" || return 1
  ! D ps -a --format '{{.Names}}' | grep -qx gq-d2 || { echo "refused --rm container left behind"; return 1; }
}
docker_rm() {
  D rm -f gq-d1 >/dev/null || return 1
  wait_ledger 0 5 && no_state_dirs
}
docker_burst() {
  # a burstable slice: the guarantee and the limit reach the grant
  local req=(--annotation vram=2g --annotation vram-limit=6g) out
  [ "${DV%%.*}" -ge 24 ] || req=(-e GPU_QUOTA_VRAM=2g -e GPU_QUOTA_VRAM_LIMIT=6g)
  out=$(D "${DRUN[@]}" --rm "${req[@]}" "$IMG" gq-limits) || { echo "$out"; return 1; }
  has "$out" "grant0=$((2 * GIB))" && has "$out" "limit0=$((6 * GIB))" || return 1
  wait_ledger 0 5
}
docker_run_rm() {
  local out; out=$(D "${DRUN[@]}" --rm $(dreq 2g) "$IMG" gq-limits) || { echo "$out"; return 1; }
  has "$out" "grant0=$((2 * GIB))" || return 1
  wait_ledger 0 5
}
docker_stop_start() {
  # a stopped container holds no slice; start admits it again
  D "${DRUN[@]}" -d --name gq-d3 $(dreq 3g) "$IMG" sleep 600 >/dev/null || return 1
  expect_ledger 1 "after run -d" || return 1
  D stop -t 1 gq-d3 >/dev/null || return 1
  wait_ledger 0 5 || return 1
  D start gq-d3 >/dev/null || return 1
  expect_ledger 1 "after docker start" || return 1
  has "$(D exec gq-d3 gq-limits)" "grant0=$((3 * GIB))" || return 1
  D rm -f gq-d3 >/dev/null || return 1
  wait_ledger 0 5
}
docker_plain() {
  # no request: the same runtime passes the container through untouched
  local out; out=$(D "${DRUN[@]}" --rm "$IMG" sh -c 'ls /dev; test -e /run/gpu-quota && echo HAS_GQ; true') || { echo "$out"; return 1; }
  ! grep -q 'nvidia\|HAS_GQ' <<<"$out" || { echo "$out"; return 1; }
  expect_ledger 0
}
docker_annotation_refused() {
  # Docker 20.10 (API 1.41) cannot pass --annotation (API 1.43, Docker >= 24): hence -e GPU_QUOTA_VRAM.
  # Its own CLI has no such flag; a newer CLI elsewhere on PATH (if any) is refused by the daemon.
  local cli out
  for cli in $(for c in "$DOCKER_BIN" $(type -ap docker); do readlink -f "$c"; done | awk '!seen[$0]++'); do
    out=$(timeout 60 "$cli" "${DRUN[@]}" --rm --annotation vram=2g "$IMG" true 2>&1) && { echo "$cli accepted: $out"; return 1; }
    grep -qiE 'API version 1\.43|unknown flag: --annotation' <<<"$out" || { echo "$cli: $out"; return 1; }
    note "$cli ($("$cli" --version | cut -d, -f1)): $(head -1 <<<"$out")"
  done
  expect_ledger 0
}
# The README's headline command, taken from README.md (not retyped): the first
# `docker run … --annotation …` line of its first code block that has one.
readme_headline() {
  awk '/^```/{inb=!inb; next} inb && /^docker run .*--annotation/ {sub(/[[:space:]]+#.*/, ""); print; exit}' "$ROOT/README.md"
}
docker_headline() {
  local cmd; cmd=$(readme_headline)
  [ -n "$cmd" ] || { echo "no 'docker run … --annotation' line in a code block of README.md"; return 1; }
  [[ "$cmd" == *" IMAGE" ]] || { echo "the headline does not end in IMAGE: $cmd"; return 1; }
  note "README: $cmd"
  local vram; vram=$(grep -oE 'vram=[0-9]+g' <<<"$cmd" | head -1 | cut -d= -f2 | tr -d g)
  [ -n "$vram" ] || { echo "no vram=Ng in: $cmd"; return 1; }
  # exactly the README's words; IMAGE becomes the test image and a command that prints the limits
  local -a argv; read -r -a argv <<<"${cmd% IMAGE}"
  [ "${argv[0]}" = docker ] || return 1
  local out; out=$(D "${argv[@]:1}" --name gq-head "$IMG" sh -c 'gq-limits; nvidia-smi -L 2>&1 | head -2') ||
    { echo "$out"; D rm -f gq-head >/dev/null 2>&1; return 1; }
  note "$(grep grant0= <<<"$out" | head -1)"
  has "$out" "grant0=$((vram * GIB))" || { D rm -f gq-head >/dev/null 2>&1; return 1; }
  D rm gq-head >/dev/null || return 1
  wait_ledger 0 5
}
docker_env_ignored() {
  # Docker >= 24 passes annotations, so install left env_requests = false: a request in the
  # image's env or in -e is not a request (no slice, no /run/gpu-quota, ledger empty)
  local out
  out=$(D "${DRUN[@]}" --rm -e GPU_QUOTA_VRAM=2g "$IMG" sh -c 'test -e /run/gpu-quota && echo HAS_GQ; true') || { echo "$out"; return 1; }
  hasnt "$out" HAS_GQ || return 1
  expect_ledger 0 "after -e GPU_QUOTA_VRAM=2g" || return 1
  out=$(D "${DRUN[@]}" --rm gq-engines-envreq:latest sh -c 'echo env=$GPU_QUOTA_VRAM; test -e /run/gpu-quota && echo HAS_GQ; true') || { echo "$out"; return 1; }
  has "$out" "env=2g" && hasnt "$out" HAS_GQ || return 1
  expect_ledger 0 "after an image with ENV GPU_QUOTA_VRAM=2g"
}
docker_cases() {
  check "$DK: install --root + SIGHUP registers runtime gpu-quota (docker info); config.toml env_requests set for this version" docker_install
  if [ "${DV%%.*}" -ge 24 ]; then
    check "$DK: the README's headline command, copied from README.md, gets its slice and releases on rm" docker_headline
    check "$DK: run -d --runtime gpu-quota --annotation vram=2g gets a 2 GiB slice (limits, devices, preload, libs)" docker_slice
    check "$DK: --annotation vram=15g --annotation gpu=N that does not fit fails with the gpu-quota message" docker_refusal
    check "$DK: --annotation sm=25% as root is refused; --user 1000 --annotation vram=2g --annotation sm=25% is an MPS client of its GPU's daemon (variables, pipe directory); rm -f stops the daemon" docker_share
  else
    check "$DK: run -d --runtime gpu-quota -e GPU_QUOTA_VRAM=2g gets a 2 GiB slice (limits, devices, preload, libs)" docker_slice
    check "$DK: -e GPU_QUOTA_VRAM=15g -e GPU_QUOTA_GPU=N that does not fit fails with the gpu-quota message" docker_refusal
  fi
  check "$DK: rm -f releases the slice (ledger empty, state dir gone)" docker_rm
  check "$DK: run --rm sees 2 GiB and releases on exit" docker_run_rm
  check "$DK: run --rm with vram=2g and vram-limit=6g: the grant holds the guarantee and the burst limit; released on exit" docker_burst
  check "$DK: stop releases the slice, start admits it again, rm -f releases" docker_stop_start
  check "$DK: container without a request passes through untouched" docker_plain
  if [ "${DV%%.*}" -ge 24 ]; then
    check "$DK: with env_requests = false, -e GPU_QUOTA_VRAM and an image's ENV GPU_QUOTA_VRAM are ignored" docker_env_ignored
  else
    check "$DK: refuses --annotation (needs API 1.43), so -e GPU_QUOTA_VRAM is the way" docker_annotation_refused
  fi
}
