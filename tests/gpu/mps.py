#!/usr/bin/env python3
"""Compute-share workloads for the H200 suite (sm= through MPS).
mps.py mm SECS [--set-env K=V]...   bf16 8192x8192 matmuls for SECS seconds;
                                    prints RESULT {"tflops":..,"iters":..}
                                    --set-env changes this process's
                                    environment before CUDA is initialised
mps.py graph SECS                   the same matmuls replayed from a captured
                                    CUDA graph (10 per graph)
mps.py attr                         no framework: cuInit, then the device
                                    attribute MPS_ENABLED (133) of device 0;
                                    prints RESULT {"init":..,"mps_enabled":..}
mps.py alloc GIB [GIB...]           allocates each amount in turn (PyTorch),
                                    prints what was refused
mps.py fault                        a kernel writing to address 0x10
mps.py hostile DIR SECS             no CUDA: writes into every FIFO in DIR
                                    (the mounted pipe directory) and holds an
                                    exclusive flock on every regular file
                                    there for SECS seconds; prints what it
                                    could do
"""
import json, os, sys, time

def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)

def mm(secs, sets):
    for kv in sets:
        k, v = kv.split("=", 1)
        if v == "":
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    t0 = time.time(); it = 0
    while time.time() - t0 < secs:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize(); it += 10
    dt = time.time() - t0
    result(tflops=round(2 * n ** 3 * it / dt / 1e12, 1), iters=it, secs=round(dt, 2),
           mps=mps_enabled()["mps_enabled"],
           env={k: os.environ.get(k) for k in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY",
                                                 "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")})

def graph(secs):
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            c = a @ b
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(10):
            c = a @ b
    g.replay(); torch.cuda.synchronize()
    t0 = time.time(); it = 0
    while time.time() - t0 < secs:
        g.replay(); torch.cuda.synchronize(); it += 10
    dt = time.time() - t0
    result(tflops=round(2 * n ** 3 * it / dt / 1e12, 1), iters=it, secs=round(dt, 2),
           mps=mps_enabled()["mps_enabled"], graph=True)

def mps_enabled():
    """CU_DEVICE_ATTRIBUTE_MPS_ENABLED (133) of device 0, through the driver
    this process already initialised (cuInit again is a no-op then)."""
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")
    rc = cu.cuInit(0)
    if rc != 0:
        return {"init": rc, "mps_enabled": None}
    dev, v = ctypes.c_int(), ctypes.c_int(-1)
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    arc = cu.cuDeviceGetAttribute(ctypes.byref(v), 133, dev)
    return {"init": 0, "mps_enabled": v.value if arc == 0 else "err%d" % arc}

def alloc(gibs):
    import torch
    held, out = [], []
    for g in gibs:
        try:
            held.append(torch.empty(int(float(g) * (1 << 30)), dtype=torch.uint8, device="cuda"))
            out.append([g, "ok"])
        except Exception as e:  # the framework's own OOM
            out.append([g, type(e).__name__])
    free, total = torch.cuda.mem_get_info()
    result(allocs=out, total=total, free=free)

def fault(secs):
    import cupy as cp
    k = cp.RawKernel(r'extern "C" __global__ void f(int *p) { *(int *)0x10 = 1; }', "f")
    try:
        k((1,), (1,), (cp.zeros(1, dtype=cp.int32),))
        cp.cuda.runtime.deviceSynchronize()
        result(fault="none")
    except Exception as e:
        result(fault=type(e).__name__ + ": " + str(e)[:120])

def hostile(d, secs):
    import fcntl, stat
    out = {"entries": {}, "fifo_written": [], "locked": [], "errors": []}
    held = []
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        m = os.lstat(p).st_mode
        out["entries"][n] = stat.filemode(m)
        try:
            if stat.S_ISFIFO(m):
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"gpu-quota hostile line\n" * 64)
                held.append(fd)
                out["fifo_written"].append(n)
            elif stat.S_ISREG(m):
                fd = os.open(p, os.O_RDONLY)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(fd)
                out["locked"].append(n)
        except OSError as e:
            out["errors"].append(f"{n}: {e.strerror}")
    print("HELD " + json.dumps(out), flush=True)
    time.sleep(secs)
    result(**out)

if __name__ == "__main__":
    m = sys.argv[1]
    if m == "mm":
        sets = [sys.argv[i + 1] for i, x in enumerate(sys.argv) if x == "--set-env"]
        mm(float(sys.argv[2]), sets)
    elif m == "graph":
        graph(float(sys.argv[2]))
    elif m == "attr":
        result(**mps_enabled())
    elif m == "alloc":
        alloc(sys.argv[2:])
    elif m == "fault":
        fault(0)
    elif m == "hostile":
        hostile(sys.argv[2], float(sys.argv[3]))
