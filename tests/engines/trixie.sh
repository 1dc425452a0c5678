#!/usr/bin/env bash
# Debian 13 (trixie) engines beside Debian 12's, without touching the machine:
#   tests/engines/trixie.sh PREFIX
# downloads docker.io 26, docker-cli, containerd 1.7, docker-compose 2.26 and
# tini from trixie through a private apt source list / lists dir / cache
# (the machine's apt setup and installed packages are not changed), unpacks
# them with `dpkg -x` into PREFIX and prints the versions. Idempotent: an
# already unpacked PREFIX is kept. Their binaries need GLIBC <= 2.34, so they
# run on Debian 12 (glibc 2.36); trixie's runc and podman 5 need 2.38 and are
# not used (Debian 12's runc 1.1.5 stays the runtime underneath).
set -euo pipefail
PREFIX=${1:?usage: trixie.sh PREFIX}
PKGS=(docker.io docker-cli containerd docker-compose tini)
if [ -x "$PREFIX/usr/sbin/dockerd" ] && [ -x "$PREFIX/usr/bin/containerd" ] && [ -x "$PREFIX/usr/libexec/docker/cli-plugins/docker-compose" ]; then
  exit 0
fi
A=$PREFIX.apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/debs" "$PREFIX"
cat >"$A/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
SRC
APT=(-o Dir::Etc::sourcelist="$A/sources.list" -o Dir::Etc::sourceparts=/dev/null
     -o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o Dir::Cache::archives="$A/cache/archives"
     -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1 -o APT::Sandbox::User=root -qq)
apt-get "${APT[@]}" update
(cd "$A/debs" && apt-get "${APT[@]}" download "${PKGS[@]}")
for d in "$A"/debs/*.deb; do dpkg -x "$d" "$PREFIX"; done
rm -rf "$A"
"$PREFIX/usr/sbin/dockerd" --version
"$PREFIX/usr/bin/containerd" --version
