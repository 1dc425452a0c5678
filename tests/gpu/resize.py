#!/usr/bin/env python3
"""Issue 29 on the H200 (tests/gpu/run-suite.sh, section resize): one process
in a vram=4g container lives through `gpu-quota resize` 4g -> 8g -> (4g
refused) -> 4g. It waits for the host between phases through files in OUT:

  phase 1: hold 3 GiB, ask 2 GiB more (refused)        -> ready1, wait go1 (host: resize 8g)
  phase 2: the total is 8 GiB (framework and nvidia-smi),
           the same 2 GiB now fit (holds 5 GiB)           -> ready2, wait go2 (host: 4g refused, NVML sampled)
  phase 3: free the 2 GiB                                 -> ready3, wait go3 (host: resize 4g)
  phase 4: the total is 4 GiB again, 2 GiB more refused   -> result.json

usage: resize.py torch|cupy --out DIR   (the allocator: PYTORCH_CUDA_ALLOC_CONF)"""
import json, os, subprocess, sys, time

GIB = 1 << 30


def wait(p, secs=120):
    t = time.time()
    while time.time() - t < secs:
        if os.path.exists(p):
            return True
        time.sleep(0.05)
    return False


def smi_total():
    try:
        o = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=30)
        return int(o.stdout.strip().splitlines()[0])
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:120]


class Torch:
    def __init__(self):
        import torch
        self.t = torch

    def total(self):
        return self.t.cuda.mem_get_info()[1]

    def alloc(self, n):
        try:
            x = self.t.empty(n, dtype=self.t.uint8, device="cuda")
            self.t.cuda.synchronize()
            return x, ""
        except self.t.OutOfMemoryError as e:
            return None, str(e).splitlines()[0][:160]

    def release(self):
        """give the freed blocks back to the driver (the caller dropped them)"""
        self.t.cuda.synchronize()
        self.t.cuda.empty_cache()


class CuPy:
    def __init__(self):
        import cupy
        self.c = cupy

    def total(self):
        return self.c.cuda.runtime.memGetInfo()[1]

    def alloc(self, n):
        try:
            return self.c.empty(n, dtype=self.c.uint8), ""
        except self.c.cuda.memory.OutOfMemoryError as e:
            return None, str(e).splitlines()[0][:160]

    def release(self):
        self.c.cuda.runtime.deviceSynchronize()
        self.c.get_default_memory_pool().free_all_blocks()


def main():
    kind, out = sys.argv[1], sys.argv[sys.argv.index("--out") + 1]
    f = Torch() if kind == "torch" else CuPy()
    r = {"kind": kind, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    keep, e = f.alloc(3 * GIB)
    r["held3"] = keep is not None
    y, r["err1"] = f.alloc(2 * GIB)
    r["refused1"] = y is None
    r["total1"] = f.total()
    open(os.path.join(out, "ready1"), "w").write(json.dumps(r))
    wait(os.path.join(out, "go1"))
    r["total2"], r["smi2"] = f.total(), smi_total()
    y, e = f.alloc(2 * GIB)
    r["alloc2_ok"], r["err2"] = y is not None, e
    open(os.path.join(out, "ready2"), "w").write(json.dumps(r))
    wait(os.path.join(out, "go2"))
    y = None  # the last reference: the framework may give the block back now
    f.release()
    open(os.path.join(out, "ready3"), "w").write(json.dumps(r))
    wait(os.path.join(out, "go3"))
    r["total4"], r["smi4"] = f.total(), smi_total()
    z, r["err4"] = f.alloc(2 * GIB)
    r["refused4"] = z is None
    json.dump(r, open(os.path.join(out, "result.json.tmp"), "w"))
    os.rename(os.path.join(out, "result.json.tmp"), os.path.join(out, "result.json"))
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
