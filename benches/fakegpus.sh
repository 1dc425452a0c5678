# fake_gpus DIR N: the benches' simulated host GPUs (sourced): under DIR, the
# device nodes of N GPUs (195:0..N-1) with nvidiactl and nvidia-uvm, and a
# stand-in libcuda (any ELF shared object will do: the loader cache reads
# its header); prints the config's [driver] table and N [[inventory.gpu]]
# entries of 16 GiB for them, to append to a gpu-quota config.toml.
fake_gpus() {
  local d=$1 n=$2 i
  mkdir -p "$d/dev" "$d/lib"
  for i in $(seq 0 $((n - 1))); do mknod "$d/dev/nvidia$i" c 195 "$i"; done
  mknod "$d/dev/nvidiactl" c 195 255; mknod "$d/dev/nvidia-uvm" c 237 0
  cp "$(readlink -f /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null || readlink -f /lib64/ld-linux-x86-64.so.2)" "$d/lib/libcuda.so.580.1"
  ln -s libcuda.so.580.1 "$d/lib/libcuda.so.1"
  printf '[driver]\ndev_root = "%s/dev"\nlib_dirs = ["%s/lib"]\nbin_dirs = []\n' "$d" "$d"
  for i in $(seq 0 $((n - 1))); do
    printf '[[inventory.gpu]]\nindex = %d\nuuid = "GPU-00000000-0000-4000-8000-%012d"\nmemory = "16g"\n' "$i" "$i"
  done
}
