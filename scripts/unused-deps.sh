#!/usr/bin/env bash
# Declared dependencies that no source uses. Runs `cargo machete`
# when it is installed; else (and always) a grep-based check of the same
# rule: every [dependencies] / [dev-dependencies] / [build-dependencies] entry
# of a crate must be named in that crate's Rust sources (`name::`, `name!`,
# `use name`, `extern crate name`), and every [workspace.dependencies] entry
# must be declared by some member. A crate that is needed without being
# named (generated code, features only) is listed, as for cargo-machete, in
# its Cargo.toml: [package.metadata.cargo-machete] ignored = ["name"].
# Exit 1 when something is unused.
set -u -o pipefail
cd "$(dirname "$0")/.."
bad=0

if command -v cargo-machete >/dev/null 2>&1; then
  echo "== cargo machete"
  cargo machete || bad=1
fi

# dependency names of one section of a Cargo.toml
deps_of() { # FILE SECTION
  awk -v sec="[$2]" '
    /^\[/ { on = ($0 == sec); next }
    on && /^[A-Za-z0-9_-]+[ .]*[=.]/ { sub(/[ .=].*/, ""); print }
  ' "$1"
}
ignored_of() { # FILE
  awk '/^\[package.metadata.cargo-machete\]/ { on = 1; next } /^\[/ { on = 0 }
       on && /ignored/ { gsub(/.*\[|\].*|"|,/, " "); print }' "$1" | tr ' ' '\n' | grep -v '^$'
}

manifests=$(git ls-files '*Cargo.toml' | grep -v '^fuzz/')
# a workspace crate named in code by its [lib] name (gpu-quota-core: gpuquota_core)
lib_name() { # PACKAGE
  for o in $manifests; do
    awk -v pkg="$1" '/^\[/ { sec = $0 } sec == "[package]" && $1 == "name" { gsub(/"/, "", $3); p = $3 }
      sec == "[lib]" && $1 == "name" { gsub(/"/, "", $3); l = $3 }
      END { if (p == pkg && l != "") print l }' "$o"
  done | head -1
}
for m in $manifests; do
  grep -q '^\[package\]' "$m" || continue
  dir=$(dirname "$m")
  # the crate's own sources: not those of a nested crate
  nested=$(for o in $manifests; do d=$(dirname "$o"); [ "$d" != "$dir" ] && case "$d" in "$dir"/*) echo "$d";; esac; done)
  srcs=$(git ls-files "$dir" | grep '\.rs$' | while read -r f; do
    skip=; for n in $nested; do case "$f" in "$n"/*) skip=1;; esac; done; [ -z "$skip" ] && echo "$f"; done)
  ign=$(ignored_of "$m")
  for sec in dependencies dev-dependencies build-dependencies; do
    for d in $(deps_of "$m" "$sec"); do
      echo "$ign" | grep -qx "$d" && continue
      id=$(lib_name "$d"); id=${id:-${d//-/_}}
      if [ -z "$srcs" ] || ! grep -qE "(^|[^A-Za-z0-9_])$id(::|!)|use $id([^A-Za-z0-9_]|$)|extern crate $id([^A-Za-z0-9_]|$)" $srcs; then
        echo "unused: $m [$sec] $d"
        bad=1
      fi
    done
  done
done

for d in $(deps_of Cargo.toml workspace.dependencies); do
  if ! grep -qE "^$d(\.workspace| *= *\{[^}]*workspace *= *true)" $(git ls-files '*Cargo.toml' | grep -vx Cargo.toml); then
    echo "unused: Cargo.toml [workspace.dependencies] $d (no member declares it)"
    bad=1
  fi
done

[ "$bad" = 0 ] && echo "no unused dependencies"
exit "$bad"
