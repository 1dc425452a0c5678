#!/usr/bin/env python3
"""What the driver does with managed memory under pressure from another
process, measured without gpu-quota (burst-facts.sh drives it). The question
a burst design rests on: does an ordinary cudaMalloc in one process make the
driver move another process's managed pages to host memory, and how long
does it take?

burst-facts.py hold KIND GIB SECS READY   KIND managed|device: allocate GIB,
                                          place it on the GPU, touch it all,
                                          touch `READY`, then time full
                                          read-write passes for SECS seconds
                                          (one line per pass: t, GB/s)
burst-facts.py grab GIB [CHUNK_GIB]       cudaMalloc GIB in CHUNK_GIB pieces
                                          (default all at once), time each,
                                          then write every byte; RESULT line
"""
import json, os, sys, time


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def hold(kind, gib, secs, ready):
    import cupy as cp
    n = gib << 30
    t0 = time.time()
    if kind == "managed":
        mem = cp.cuda.malloc_managed(n)
    else:
        mem = cp.cuda.alloc(n)
    a = cp.ndarray((n // 4,), dtype=cp.float32, memptr=mem)
    if kind == "managed":
        # where a burster would put its pages: on the GPU, then touched there
        cp.cuda.runtime.memPrefetchAsync(mem.ptr, n, 0, 0)
    a.fill(1.0)
    cp.cuda.Device().synchronize()
    print(f"hold {kind} {gib} GiB placed in {time.time() - t0:.2f} s", flush=True)
    open(ready, "w").write("1")
    end = time.time() + secs
    passes = []
    while time.time() < end:
        s = time.time()
        a += 1.0
        cp.cuda.Device().synchronize()
        d = time.time() - s
        # a pass reads and writes every byte
        passes.append([round(s - t0, 2), round(2 * n / d / 1e9, 1)])
        print(f"pass t={s - t0:.2f} {2 * n / d / 1e9:.1f} GB/s", flush=True)
    ok = bool(float(a[0]) == float(a[-1]))
    result(kind=kind, gib=gib, passes=len(passes), first=passes[:3], last=passes[-3:], consistent=ok)


def grab(gib, chunk):
    import cupy as cp
    cp.cuda.Device(0).use()
    cp.zeros(1)  # the context first, so the timings are the allocations'
    free0, total = cp.cuda.runtime.memGetInfo()
    chunk = chunk or gib
    held, times, err = [], [], None
    t0 = time.time()
    for _ in range(gib // chunk):
        s = time.time()
        try:
            held.append(cp.cuda.runtime.malloc(chunk << 30))
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
            break
        times.append(round((time.time() - s) * 1000, 1))
    t_alloc = time.time() - t0
    s = time.time()
    for p in held:
        cp.cuda.runtime.memset(p, 1, chunk << 30)
    cp.cuda.Device().synchronize()
    t_touch = time.time() - s
    free1, _ = cp.cuda.runtime.memGetInfo()
    result(asked_gib=gib, got_gib=len(held) * chunk, alloc_ms=round(t_alloc * 1000, 1),
           per_chunk_ms=times[:8] + (["..."] + times[-4:] if len(times) > 12 else times[8:]),
           touch_ms=round(t_touch * 1000, 1), error=err,
           free_before_gib=round(free0 / 2**30, 2), free_after_gib=round(free1 / 2**30, 2),
           total_gib=round(total / 2**30, 2))
    sys.stdout.flush()
    time.sleep(float(os.environ.get("GRAB_HOLD", "8")))
    for p in held:
        cp.cuda.runtime.free(p)


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "grab":
        grab(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
