# shellcheck shell=bash
# Docker Compose 2.26 (Debian 13 round): the README's Compose example; `compose_cases`.
#
# Sourced by tests/engines/run.sh (its helpers: check, has, Q, C, D, P, ledger, …;
# its per-round names: R, CSOCK, DSOCK, versions), which calls the cases in each round.

# ================================================================ Docker Compose
# The README's Compose example (its ```yaml block with `runtime: gpu-quota`), with the
# test image for IMAGE, a command that keeps it running, and no network.
readme_compose() {
  awk '/^```yaml/{inb=1; buf=""; next} /^```/{if (inb && buf ~ /runtime: gpu-quota/) {printf "%s", buf; exit} inb=0; next} inb {buf = buf $0 "\n"}' "$ROOT/README.md"
}
compose_setup() {
  mkdir -p "$DOCKER_CONFIG/cli-plugins" "$R/compose" || return 1
  cp "$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" "$DOCKER_CONFIG/cli-plugins/" || return 1
  local y; y=$(readme_compose)
  [ -n "$y" ] || { echo "no yaml block with 'runtime: gpu-quota' in README.md"; return 1; }
  has "$y" "annotations:" && has "$y" "image: IMAGE" || return 1
  sed -E "s|^( *)image: IMAGE\$|\1image: $IMG\n\1command: [\"sleep\", \"600\"]\n\1network_mode: none|" <<<"$y" >"$R/compose/compose.yaml"
  COMPOSE_VRAM=$(grep -oE 'vram: *[0-9]+g' <<<"$y" | head -1 | grep -oE '[0-9]+')
  [ -n "$COMPOSE_VRAM" ] || { echo "no 'vram: Ng' in the README's compose example"; echo "$y"; return 1; }
  note "$(D compose version)"
}
DC() { D compose --project-directory "$R/compose" -p gqcompose "$@"; }
compose_up() {
  DC up -d >"$LOG/compose-up.log" 2>&1 || { cat "$LOG/compose-up.log"; cat "$R/compose/compose.yaml"; return 1; }
  expect_ledger 1 "after docker compose up -d" || return 1
  local c; c=$(DC ps -q | head -1)
  has "$(D exec "$c" gq-limits)" "grant0=$((COMPOSE_VRAM * GIB))"
}
compose_down() {
  DC down -t 1 >"$LOG/compose-down.log" 2>&1 || { cat "$LOG/compose-down.log"; return 1; }
  wait_ledger 0 5 && no_state_dirs || return 1
  [ -z "$(D ps -aq)" ] || { D ps -a; return 1; }
}
compose_cases() {
  local v; v=$("$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" version --short 2>/dev/null)
  check "docker compose $v: the README's example (runtime: gpu-quota + annotations) is a valid project" compose_setup
  check "docker compose $v: up -d gets the README's slice (limits inside the service's container)" compose_up
  check "docker compose $v: down releases the slice" compose_down
}
