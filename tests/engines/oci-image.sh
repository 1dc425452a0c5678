# oci_image, shared by tests/engines/run.sh and tests/k8s/dra-real.sh (sourced; uses $T for its temp dir)
# oci_image ROOTFS OUT.tar NAME CMD_JSON ENV_JSON [USER]: a one-layer OCI image archive
# (ctr images import and podman load read it), without docker or a registry; USER
# (e.g. 1000) is the image's default user
oci_image() {
  local r=$1 out=$2 name=$3 cmd=$4 env=$5 user=${6:-} d lsha lsz csha csz msha msz
  d=$(mktemp -d "$T/oci.XXXXXX"); mkdir -p "$d/blobs/sha256"
  tar -C "$r" -c . >"$d/layer" || return 1
  lsha=$(sha256sum "$d/layer" | cut -d' ' -f1); lsz=$(stat -c %s "$d/layer"); mv "$d/layer" "$d/blobs/sha256/$lsha"
  printf '{"architecture":"amd64","os":"linux","config":{"Env":%s,"Cmd":%s%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$env" "$cmd" "${user:+,\"User\":\"$user\"}" "$lsha" >"$d/c"
  csha=$(sha256sum "$d/c" | cut -d' ' -f1); csz=$(stat -c %s "$d/c"); mv "$d/c" "$d/blobs/sha256/$csha"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$csha" "$csz" "$lsha" "$lsz" >"$d/m"
  msha=$(sha256sum "$d/m" | cut -d' ' -f1); msz=$(stat -c %s "$d/m"); mv "$d/m" "$d/blobs/sha256/$msha"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"%s"}}]}' \
    "$msha" "$msz" "${name##*:}" "$name" >"$d/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$d/oci-layout"
  tar -C "$d" -cf "$out" oci-layout index.json blobs && rm -rf "$d"
}
