#!/usr/bin/env bash
# Make this machine new again for the container engines, before a run of
# `make test` that must mean "green on a fresh machine": purge the engine
# packages the suite installs (scripts/test.sh) and what they pulled in, and
# remove the engines' state under /etc, /var, /run and root's home. Run as root;
# it refuses while an engine daemon runs. Developers run it before resolving
# anything (docs/engines.md); CI never needs it (its machine starts new).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "purge-engines: run as root"; exit 1; }
for d in dockerd containerd podman conmon; do
  if pgrep -x "$d" >/dev/null; then echo "purge-engines: $d is running; stop it first"; exit 1; fi
done
pkgs=(docker.io docker-cli containerd runc podman conmon crun buildah catatonit
  golang-github-containers-common golang-github-containers-image containernetworking-plugins
  slirp4netns fuse-overlayfs uidmap tini)
installed=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' && installed+=("$p")
done
if [ ${#installed[@]} -gt 0 ]; then
  echo "purging: ${installed[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${installed[@]}" >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -qq >/dev/null
fi
state=(/etc/containers /etc/docker /etc/containerd /etc/cni
  /var/lib/containers /var/lib/docker /var/lib/containerd /var/lib/cni /var/lib/dockershim
  /var/cache/containers /run/containers /run/containerd /run/docker /run/docker.sock
  /run/runc /run/crun /run/libpod /var/run/docker.sock /opt/cni
  /root/.docker /root/.config/containers /root/.local/share/containers)
for s in "${state[@]}"; do
  if [ -e "$s" ] || [ -L "$s" ]; then echo "removing $s"; rm -rf "$s"; fi
done
echo "purge-engines: no engine package or state left; the next \`make test\` installs them anew"
