# shellcheck shell=bash
# Beside the NVIDIA Container Toolkit (dockerd 26): `--gpus`, CDI, the
# image's NVIDIA_VISIBLE_DEVICES, Compose device reservations; `toolkit_cases`.
#
# Sourced by tests/engines/run.sh (its helpers: check, has, Q, C, D, P, ledger, …;
# its per-round names: R, CSOCK, DSOCK, versions), which calls the cases in each round.

# ================================================================ beside the NVIDIA Container Toolkit
# dockerd 26 finds tests/toolkit/nvidia-container-runtime-hook (a stand-in: it makes the
# /dev/nvidiaN nodes NVIDIA_VISIBLE_DEVICES names in the container, as the toolkit's legacy
# hook does, and logs each run) on its PATH, so `--gpus` and Compose device reservations
# write the real spec (NVIDIA_VISIBLE_DEVICES + the prestart hook). CDI: a spec shaped like
# `nvidia-ctk cdi generate` for the fake host in $R/cdi, its nvidia-cdi-hook a logging stand-in.
TK=$T/toolkit
toolkit_setup() {
  mkdir -p "$TK" "$R/cdi" || return 1
  cp "$ROOT/tests/toolkit/nvidia-container-runtime-hook" "$TK/" || return 1
  printf '#!/bin/sh\necho "nvidia-cdi-hook $*" >>%s/standin.log\n' "$TK" >"$TK/nvidia-cdi-hook" && chmod 755 "$TK/nvidia-cdi-hook" || return 1
  printf 'dev_root=%s\nlog=%s\n' "$GQ/dev" "$TK/standin.log" >"$TK/standin.conf"
  : >"$TK/standin.log"
  local i devs=""
  for i in 0 1; do
    devs+="- name: \"$i\"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia$i
      hostPath: $GQ/dev/nvidia$i
"
  done
  cat >"$R/cdi/nvidia.yaml" <<EOF
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
${devs}- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: $GQ/dev/nvidia0
    - path: /dev/nvidia1
      hostPath: $GQ/dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: $GQ/dev/nvidiactl
  - path: /dev/nvidia-uvm
    hostPath: $GQ/dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
    hostPath: $GQ/dev/nvidia-uvm-tools
  hooks:
  - hookName: createContainer
    path: $TK/nvidia-cdi-hook
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
  mounts:
  - hostPath: $GQ/lib/libcuda.so.580.1
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.1
    options: [ro, nosuid, nodev, bind]
EOF
}
ledger_indices() { ledger | grep -o '"index": *[0-9]*' | grep -o '[0-9]*$' | sort -n | tr '\n' ' ' | sed 's/ $//'; }
# tk_probe NAME|ID: the GPU nodes in the container, its limits, the bundle's config.json
tk_probe() {
  TK_ID=$(D inspect -f '{{.Id}}' "$1") || return 1
  TK_NODES=$(D exec "$1" sh -c 'ls /dev | grep -E "^nvidia[0-9]+$" | tr "\n" " "' | sed 's/ $//')
  TK_LIMITS=$(D exec "$1" sh -c 'gq-limits 2>/dev/null; echo "env NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"')
  TK_CFG=$(cat "$R/ctd/state/io.containerd.runtime.v2.task/moby/$TK_ID/config.json" 2>/dev/null)
  [ -n "$TK_CFG" ] || { echo "no config.json for $TK_ID"; return 1; }
  printf '%s\n' "$TK_CFG" >"$LOG/toolkit-$1.config.json"
}
tk_run() {  # NAME docker-run-args… (ending in the image)
  local n=$1; shift
  D run -d --runtime gpu-quota --network none --name "$n" "$@" sleep 600 >"$LOG/toolkit-$n.run" 2>&1 || { cat "$LOG/toolkit-$n.run"; return 1; }
  tk_probe "$n"
}
tk_env() { grep -o 'NVIDIA_VISIBLE_DEVICES=[^"]*' <<<"$TK_CFG" | tr '\n' ' '; }
# a request: the ledger holds one reservation of NSLICES 2 GiB slices (on GPUs WANT, or
# any); the container has exactly those GPUs' nodes; the toolkit's hook never ran
tk_owned_check() {  # NSLICES WANT|-
  local rc=0 idx; idx=$(ledger_indices)
  [ "$(ledger_n)" = 1 ] && [ "$(wc -w <<<"$idx")" = "$1" ] || { echo "want 1 reservation, $1 slice(s):"; ledger; rc=1; }
  [ "$2" = - ] || [ "$idx" = "$2" ] || { echo "ledger GPUs '$idx', want '$2'"; rc=1; }
  local want="" i; for i in $idx; do want+="nvidia$i "; done; want=${want% }
  [ "$TK_NODES" = "$want" ] || { echo "GPU nodes in the container '$TK_NODES', want the slice's '$want'"; rc=1; }
  has "$TK_LIMITS" "grant0=$((2 * GIB))" || rc=1
  [ "$(grep '^gpus=' <<<"$TK_LIMITS" | grep -o 'GPU-[0-9a-f-]*' | wc -l)" = "$1" ] || { echo "limits gpus= does not name $1 GPU(s): $TK_LIMITS"; rc=1; }
  hasnt "$(cat "$TK/standin.log")" "ran $TK_ID" || rc=1
  hasnt "$TK_CFG" "nvidia-container-runtime-hook" || rc=1
  note "GPU nodes: ${TK_NODES:-none}; ledger GPUs: $idx; config.json $(tk_env)"
  return $rc
}
# no request: untouched; the stand-in ran when the engine added its hook; nodes WANT
tk_untouched_check() {  # WANT HOOK(yes|no)
  local rc=0
  [ "$TK_NODES" = "$1" ] || { echo "GPU nodes in the container '$TK_NODES', want '$1'"; rc=1; }
  expect_ledger 0 || rc=1
  hasnt "$TK_CFG" "gpu-quota-hook" || rc=1
  if [ "$2" = yes ]; then
    has "$TK_CFG" "nvidia-container-runtime-hook" && has "$(cat "$TK/standin.log")" "ran $TK_ID" || rc=1
  else
    hasnt "$(cat "$TK/standin.log")" "ran $TK_ID" || rc=1
  fi
  note "GPU nodes: ${TK_NODES:-none}; config.json $(tk_env)"
  return $rc
}
tk_rm() { D rm -f "$1" >/dev/null; wait_ledger 0 5; }
tk_gpus() {  # NAME NSLICES WANT --gpus-value
  tk_run "$1" --annotation vram=2g --gpus "$4" "$IMG" || return 1
  tk_owned_check "$2" "$3"; local rc=$?; tk_rm "$1" || rc=1; return $rc
}
tk_gpus_plain() {  # NAME WANT --gpus-value
  tk_run "$1" --gpus "$3" "$IMG" || return 1
  tk_untouched_check "$2" yes; local rc=$?; tk_rm "$1" || rc=1; return $rc
}
tk_cdi() {  # NAME VRAM(yes|no)
  local rc=0
  if [ "$2" = yes ]; then
    tk_run "$1" --annotation vram=2g --device nvidia.com/gpu=all "$IMG" || return 1
    tk_owned_check 1 - || rc=1
  else
    tk_run "$1" --device nvidia.com/gpu=all "$IMG" || return 1
    tk_untouched_check "nvidia0 nvidia1" no || rc=1
  fi
  has "$TK_CFG" "nvidia-cdi-hook" || rc=1
  tk_rm "$1" || rc=1; return $rc
}
tk_image_env() {  # NAME VRAM(yes|no): ENV NVIDIA_VISIBLE_DEVICES=all in the image, no --gpus
  local rc=0
  if [ "$2" = yes ]; then
    tk_run "$1" --annotation vram=2g gq-engines-cuda:latest || return 1
    tk_owned_check 1 - || rc=1
    has "$TK_LIMITS" "env NVIDIA_VISIBLE_DEVICES=all" || rc=1
  else
    tk_run "$1" gq-engines-cuda:latest || return 1
    tk_untouched_check "" no || rc=1
  fi
  tk_rm "$1" || rc=1; return $rc
}
# the README's Compose example with a device reservation (the yaml block naming driver: nvidia)
readme_compose_reservation() {
  awk '/^```yaml/{inb=1; buf=""; next} /^```/{if (inb && buf ~ /driver: nvidia/) {printf "%s", buf; exit} inb=0; next} inb {buf = buf $0 "\n"}' "$ROOT/README.md"
}
DCT() { D compose --project-directory "$R/compose-tk" -p gqtoolkit "$@"; }
tk_compose() {  # VRAM(yes|no)
  mkdir -p "$R/compose-tk" || return 1
  local y; y=$(readme_compose_reservation)
  has "$y" "runtime: gpu-quota" && has "$y" "count: 1" && has "$y" "vram: " || return 1
  y=$(sed -E "s|^( *)image: IMAGE\$|\1image: $IMG\n\1command: [\"sleep\", \"600\"]\n\1network_mode: none|; s|vram: *[0-9]+g|vram: 2g|" <<<"$y")
  [ "$1" = yes ] || y=$(grep -vE '^ *(annotations:|vram:)' <<<"$y")
  printf '%s\n' "$y" >"$R/compose-tk/compose.yaml"
  DCT up -d >"$LOG/compose-tk-up.log" 2>&1 || { cat "$LOG/compose-tk-up.log"; cat "$R/compose-tk/compose.yaml"; return 1; }
  local c; c=$(DCT ps -q | head -1)
  tk_probe "$c" || { DCT down -t 1 >/dev/null 2>&1; return 1; }
  local rc=0
  if [ "$1" = yes ]; then tk_owned_check 1 - || rc=1; else tk_untouched_check nvidia0 yes || rc=1; fi
  DCT down -t 1 >"$LOG/compose-tk-down.log" 2>&1 || rc=1
  wait_ledger 0 5 || rc=1
  return $rc
}
toolkit_cases() {
  local CV2; CV2="docker compose $("$TRIXIE/usr/libexec/docker/cli-plugins/docker-compose" version --short 2>/dev/null)"
  tar -C "$T/rootfs" -c . | D import -c 'ENV PATH=/bin' -c 'ENV NVIDIA_VISIBLE_DEVICES=all' -c 'ENV CUDA_VERSION=12.4.1' - gq-engines-cuda:latest >/dev/null ||
    { fail "$DK: toolkit cases skipped" "cannot import the CUDA-style image"; return; }
  check "$DK: --runtime gpu-quota --gpus all --annotation vram=2g: one GPU, the slice's nodes only, toolkit hook removed" tk_gpus tk-all 1 - all
  check "$DK: --gpus '\"device=1\"' --annotation vram=2g: GPU 1 is the slice" tk_gpus tk-dev1 1 1 '"device=1"'
  check "$DK: --gpus 2 --annotation vram=2g: gpus=2, two 2 GiB slices" tk_gpus tk-two 2 "0 1" 2
  check "$DK: --device nvidia.com/gpu=all (CDI, nvidia-ctk-shaped spec) --annotation vram=2g: narrowed to the slice" tk_cdi tk-cdi yes
  check "$DK: image with ENV NVIDIA_VISIBLE_DEVICES=all, no --gpus, vram=2g: an ordinary one-GPU slice (the ENV is no request)" tk_image_env tk-img yes
  check "$CV2 + $DK: the README's device reservation (driver nvidia, count 1) + runtime gpu-quota + vram: one slice" tk_compose yes
  check "$DK: --runtime gpu-quota --gpus all without vram: untouched, the toolkit hook ran (both GPUs)" tk_gpus_plain tk-p-all "nvidia0 nvidia1" all
  check "$DK: --gpus '\"device=1\"' without vram: untouched, the toolkit hook ran (GPU 1)" tk_gpus_plain tk-p-dev1 nvidia1 '"device=1"'
  check "$DK: --gpus 2 without vram: untouched, the toolkit hook ran (GPUs 0, 1)" tk_gpus_plain tk-p-two "nvidia0 nvidia1" 2
  check "$DK: --device nvidia.com/gpu=all without vram: untouched (both GPUs)" tk_cdi tk-p-cdi no
  check "$DK: image with ENV NVIDIA_VISIBLE_DEVICES=all without vram or --gpus: untouched, no GPU" tk_image_env tk-p-img no
  check "$CV2 + $DK: the device reservation without vram: untouched, the toolkit hook ran (GPU 0)" tk_compose no
}
