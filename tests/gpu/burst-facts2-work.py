#!/usr/bin/env python3
"""The processes of burst-facts2.py's cases (it starts them; each is one
side of a case, on the plain driver: no gpu-quota). B holds managed memory as
burst-facts.py's `hold` does, with a control file; A allocates beside it.

burst-facts2-work.py hold DIR SIZE MODE SECS  B: SIZE GiB managed (full:MIB =
                                  the free memory less MIB), prefetched to the
                                  GPU, filled, then MODE busy (read-write
                                  passes, a `pass START END GB/s` line each) or
                                  idle; DIR/ctl commands: busy idle prefetch
                                  check stop, answered in DIR/ack
burst-facts2-work.py tgrab DIR GIB CHUNK HOLD  A in PyTorch: torch.empty GIB
                                  (CHUNK GiB tensors, 0 = one), then fill_
burst-facts2-work.py dgrab DIR HOW GIB HOLD    A on the driver API (ctypes):
                                  HOW alloc (one cuMemAlloc), chunks (1 GiB
                                  each), vmm (cuMemCreate, Reserve, Map,
                                  SetAccess), pool (cuMemAllocAsync), ctx (a
                                  context, then GIB), waitfree (poll the free
                                  memory, then GIB)
A writes DIR/ready when set up, waits for DIR/go, writes DIR/done (its RESULT)
and holds until DIR/release or HOLD seconds. BF2_FAKE=1: the processes
simulate the GPU, to try the orchestration on a machine without one.
burst-facts2.py imports the helpers above the workers.
"""
import ctypes as C, json, math, os, statistics, sys, time

GIB, MIB = 1 << 30, 1 << 20
FAKE = os.environ.get("BF2_FAKE") == "1"


def now():
    return time.time()


def ms(s):
    return round(s * 1000, 1)


def gb(b):
    return None if b is None else round(b / GIB, 2)


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
    return kw


def put(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def get(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def wait_for(path, secs, alive=None):
    end = now() + secs
    while now() < end:
        if os.path.exists(path):
            return True
        if alive is not None and not alive():
            return os.path.exists(path)
        time.sleep(0.01)
    return os.path.exists(path)


def err_text(e):
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:400]


def pct(xs, p):
    """Nearest-rank percentile: with 10 values p99 is the largest."""
    xs = sorted(x for x in xs if x is not None)
    return xs[max(1, math.ceil(p / 100 * len(xs))) - 1] if xs else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 1) if xs else None


def parse_size(s, free):
    """'100' is 100 GiB; 'full:64' is the free memory less 64 MiB; 2 MiB multiples."""
    n = free - int(s[5:]) * MIB if s.startswith("full:") else int(float(s) * GIB)
    return max(n, 0) // (2 * MIB) * (2 * MIB)


# ------------------------------------------------------------------ B
class CupyMem:
    def __init__(self, size):
        import cupy as cp
        self.cp = cp
        cp.cuda.Device(0).use()
        self.n = parse_size(size, cp.cuda.runtime.memGetInfo()[0])
        self.mem = cp.cuda.malloc_managed(self.n)
        self.a = cp.ndarray((self.n // 4,), dtype=cp.float32, memptr=self.mem)

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def meminfo(self):
        return self.cp.cuda.runtime.memGetInfo()

    def prefetch(self):
        # where a burster puts its pages: on the GPU
        self.cp.cuda.runtime.memPrefetchAsync(self.mem.ptr, self.n, 0, 0)
        self.sync()

    def fill(self, v):
        self.a.fill(v)
        self.sync()

    def add(self):
        self.a += 1.0
        self.sync()

    def check(self, v):
        # min and max of 1 GiB slices: reductions within 32-bit indexing, and
        # no temporary array that would take device memory from the pool
        step = 1 << 28
        return all(float(x.min()) == v == float(x.max()) for x in
                   (self.a[i:i + step] for i in range(0, self.a.size, step)))


def fake_wait(what, secs):
    """A fake run's stand-in for a GPU call: BF2_FAKE_<WHAT>_S seconds, to try
    the budgets with driver-like waits (a hung call, a 15 s allocation)."""
    time.sleep(float(os.environ.get(f"BF2_FAKE_{what}_S", secs)))


class FakeMem:
    def __init__(self, size):
        self.n, self.v = parse_size(size, 139 * GIB), None

    def meminfo(self):
        return 38 * GIB, 139 * GIB

    def prefetch(self):
        time.sleep(0.05)

    def fill(self, v):
        self.v = v

    def add(self):
        time.sleep(0.02)
        self.v += 1

    def check(self, v):
        return self.v == v


def w_hold(d, size, mode, secs):
    t0 = now()
    m = (FakeMem if FAKE else CupyMem)(size)
    m.prefetch()
    m.fill(1.0)
    v, placed = 1.0, now() - t0

    def one():
        nonlocal v
        s = now()
        m.add()
        e = now()
        v += 1
        g = 2 * m.n / max(e - s, 1e-9) / 1e9  # a pass reads and writes every byte
        print(f"pass {s:.3f} {e:.3f} {g:.1f}", flush=True)
        return g
    rates = [one() for _ in range(8)]
    free, total = m.meminfo()
    put(d + "/ready", dict(pid=os.getpid(), bytes=m.n, place_s=round(placed, 2), base_gbps=med(rates[2:]),
                           free_gib=gb(free), total_gib=gb(total)))
    seq, end = 0, now() + secs
    while now() < end:
        c = get(d + "/ctl")
        if c and c.get("seq", 0) > seq:
            seq, cmd, s = c["seq"], c["cmd"], now()
            ack = dict(seq=seq, cmd=cmd)
            try:
                if cmd in ("busy", "idle"):
                    mode = cmd
                elif cmd == "prefetch":
                    m.prefetch()
                elif cmd == "check":
                    ack["consistent"] = m.check(v)
            except Exception as e:  # noqa: BLE001 -- the orchestrator records it
                ack["error"] = err_text(e)
            ack.update(secs=round(now() - s, 3), t=now())
            put(d + "/ack", ack)
            if cmd == "stop":
                break
        if mode == "busy":
            one()
        else:
            time.sleep(0.02)
    result(bytes=m.n, passes=int(v - 1), consistent=m.check(v))


# ------------------------------------------------------------------ A in PyTorch
def w_tgrab(d, gib, chunk, hold):
    t0 = now()
    torch = None
    if not FAKE:
        import torch
    t1 = now()
    if torch:
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        free0, total = torch.cuda.mem_get_info()
        backend, ver = torch.cuda.get_allocator_backend(), torch.__version__
    else:
        free0, total, backend, ver = 38 * GIB, 139 * GIB, "fake", "fake"
    put(d + "/ready", dict(pid=os.getpid(), import_s=round(t1 - t0, 2), ctx_s=round(now() - t1, 2),
                           free_gib=gb(free0), backend=backend, torch=ver))
    if not wait_for(d + "/go", 600):
        return
    chunk = chunk or gib
    held, times, err = [], [], None
    ta = now()
    for _ in range(gib // chunk):
        s = now()
        try:
            held.append(torch.empty(chunk * GIB, dtype=torch.uint8, device="cuda") if torch
                        else fake_wait("TORCH" if chunk == gib else "TORCH_CHUNK", 0.02))
        except Exception as e:  # noqa: BLE001 -- torch.OutOfMemoryError or a driver error
            err = err_text(e)
            break
        times.append(ms(now() - s))
    tb = now()
    for x in held:
        if torch:
            x.fill_(1)
    if torch:
        torch.cuda.synchronize()
    fill = now() - tb
    free1 = torch.cuda.mem_get_info()[0] if torch else 0
    r = result(how="torch", asked_gib=gib, chunk_gib=chunk, got_gib=len(held) * chunk, alloc_ms=ms(tb - ta),
               chunk_ms=times, fill_ms=ms(fill), error=err, oom=bool(err and "out of memory" in err.lower()),
               t_alloc0=ta, t_alloc1=tb, free_before_gib=gb(free0), free_after_gib=gb(free1))
    put(d + "/done", r)
    wait_for(d + "/release", hold)


# ------------------------------------------------------------------ A on the driver API
class CuErr(Exception):
    def __init__(self, what, code):
        super().__init__(what)
        self.code = code


class Prop(C.Structure):  # CUmemAllocationProp
    _fields_ = [("type", C.c_int), ("handleTypes", C.c_int), ("locType", C.c_int), ("locId", C.c_int),
                ("win32", C.c_void_p), ("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte),
                ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class Access(C.Structure):  # CUmemAccessDesc
    _fields_ = [("locType", C.c_int), ("locId", C.c_int), ("flags", C.c_int)]


class CU:
    """The few driver calls A needs, bound as the other GPU tests bind them."""
    def __init__(self):
        l = self.l = C.CDLL("libcuda.so.1")
        u64p, vp, sz = C.POINTER(C.c_uint64), C.POINTER(C.c_void_p), C.c_size_t
        sig = {
            "cuInit": [C.c_uint], "cuDeviceGet": [C.POINTER(C.c_int), C.c_int],
            "cuDevicePrimaryCtxRetain": [vp, C.c_int], "cuCtxSetCurrent": [C.c_void_p],
            "cuMemAlloc_v2": [u64p, sz], "cuMemGetInfo_v2": [C.POINTER(sz), C.POINTER(sz)],
            "cuMemsetD8_v2": [C.c_uint64, C.c_ubyte, sz], "cuCtxSynchronize": [],
            "cuMemGetAllocationGranularity": [C.POINTER(sz), C.POINTER(Prop), C.c_int],
            "cuMemCreate": [u64p, sz, C.POINTER(Prop), C.c_uint64],
            "cuMemAddressReserve": [u64p, sz, sz, C.c_uint64, C.c_uint64],
            "cuMemMap": [C.c_uint64, sz, sz, C.c_uint64, C.c_uint64],
            "cuMemSetAccess": [C.c_uint64, sz, C.POINTER(Access), sz],
            "cuMemAllocAsync": [u64p, sz, C.c_void_p], "cuStreamSynchronize": [C.c_void_p],
            "cuGetErrorName": [C.c_int, C.POINTER(C.c_char_p)],
        }
        for n, a in sig.items():
            f = getattr(l, n, None)
            if f is not None:
                f.argtypes, f.restype = a, C.c_int
        self.call("cuInit", 0)
        dv = C.c_int()
        self.call("cuDeviceGet", C.byref(dv), 0)
        self.dev = dv.value

    def call(self, fn, *a):
        r = getattr(self.l, fn)(*a)
        if r:
            p = C.c_char_p()
            self.l.cuGetErrorName(r, C.byref(p))
            raise CuErr(f"{fn}: {(p.value or b'?').decode()} ({r})", r)

    def retain(self):
        ctx = C.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", C.byref(ctx), self.dev)
        self.call("cuCtxSetCurrent", ctx)

    def meminfo(self):
        f, t = C.c_size_t(), C.c_size_t()
        self.call("cuMemGetInfo_v2", C.byref(f), C.byref(t))
        return f.value, t.value

    def alloc(self, n):
        p = C.c_uint64()
        self.call("cuMemAlloc_v2", C.byref(p), n)
        return p.value

    def memset(self, p, n):
        self.call("cuMemsetD8_v2", p, 1, n)
        self.call("cuCtxSynchronize")

    def timed(self, r, key, fn, *a):
        s = now()
        try:
            self.call(fn, *a)
        finally:
            r[key] = ms(now() - s)

    def vmm(self, n, r):
        prop = Prop(type=1, handleTypes=0, locType=1, locId=self.dev)  # pinned, on the device
        g = C.c_size_t()
        self.call("cuMemGetAllocationGranularity", C.byref(g), C.byref(prop), 0)
        n = -(-n // g.value) * g.value
        h, p = C.c_uint64(), C.c_uint64()
        self.timed(r, "create_ms", "cuMemCreate", C.byref(h), n, C.byref(prop), 0)
        self.timed(r, "reserve_ms", "cuMemAddressReserve", C.byref(p), n, 0, 0, 0)
        self.timed(r, "map_ms", "cuMemMap", p.value, n, 0, h.value, 0)
        acc = Access(locType=1, locId=self.dev, flags=3)  # read-write
        self.timed(r, "access_ms", "cuMemSetAccess", p.value, n, C.byref(acc), 1)
        return p.value

    def pool(self, n, r):
        p = C.c_uint64()
        self.timed(r, "alloc_async_ms", "cuMemAllocAsync", C.byref(p), n, None)  # the device's default pool
        self.timed(r, "stream_sync_ms", "cuStreamSynchronize", None)
        return p.value


class FakeCU:
    dev = 0

    def retain(self):
        time.sleep(0.01)

    def meminfo(self):
        return 100 * GIB, 139 * GIB

    def alloc(self, n):
        time.sleep(0.005)
        return 1

    def memset(self, p, n):
        pass

    def vmm(self, n, r):
        fake_wait("VMM", 0)
        r.update(create_ms=0.1, reserve_ms=0.1, map_ms=0.1, access_ms=0.1)
        return 1

    def pool(self, n, r):
        r.update(alloc_async_ms=0.1, stream_sync_ms=0.1)
        return 1


def d_take(cu, how, n, r):
    """A's allocation by HOW; the pointers and their sizes."""
    if how == "ctx":
        s = now()
        try:
            cu.retain()
        finally:
            r["ctx_ms"] = ms(now() - s)
        r["free_after_ctx_gib"] = gb(cu.meminfo()[0])
        s = now()
        p = cu.alloc(n)
        r["alloc_ms"] = ms(now() - s)
        return [(p, n)]
    if how in ("alloc", "chunks"):
        out, step = [], GIB if how == "chunks" else n
        r["chunk_ms"] = []
        for _ in range(n // step):
            s = now()
            out.append((cu.alloc(step), step))
            r["chunk_ms"].append(ms(now() - s))
        return out
    if how == "vmm":
        return [(cu.vmm(n, r), n)]
    if how == "pool":
        return [(cu.pool(n, r), n)]
    if how == "waitfree":
        # a retry loop as a guaranteed allocation after a kill would run it:
        # ask only once the free memory covers it, so that the wait measured
        # is the freeing, not an eviction from the dying process
        end, r["tries"] = now() + 60, 0
        while now() < end:
            if cu.meminfo()[0] >= n + 64 * MIB:
                r.setdefault("t_free_seen", now())
                r["tries"] += 1
                try:
                    return [(cu.alloc(n), n)]
                except CuErr as e:
                    if e.code != 2:
                        raise
            time.sleep(0.005)
        raise CuErr(f"free memory never covered {n >> 30} GiB within 60 s", -1)
    raise ValueError(how)


def w_dgrab(d, how, gib, hold):
    t0 = now()
    cu = FakeCU() if FAKE else CU()
    info = dict(pid=os.getpid(), init_s=round(now() - t0, 3))
    if how != "ctx":  # for ctx the context is what is measured, after go
        s = now()
        cu.retain()
        info.update(ctx_s=round(now() - s, 3), free_gib=gb(cu.meminfo()[0]))
    put(d + "/ready", info)
    if not wait_for(d + "/go", 600):
        return
    r, ptrs, ta = dict(how=how, asked_gib=gib, error=None, oom=False), [], now()
    try:
        ptrs = d_take(cu, how, gib * GIB, r)
    except CuErr as e:
        r.update(error=str(e), oom=e.code == 2)
    tb = now()
    r.update(t_alloc0=ta, t_alloc1=tb, alloc_total_ms=ms(tb - ta), got_gib=gb(sum(n for _, n in ptrs)))
    try:
        for p, n in ptrs:
            cu.memset(p, n)
        r["fill_ms"] = ms(now() - tb)
        r["free_after_gib"] = gb(cu.meminfo()[0])
    except CuErr as e:
        r["fill_error"] = str(e)
    put(d + "/done", result(**r))
    wait_for(d + "/release", hold)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    w, a = sys.argv[1], sys.argv[2:]
    if w == "hold":
        w_hold(a[0], a[1], a[2], float(a[3]))
    elif w == "tgrab":
        w_tgrab(a[0], int(a[1]), int(a[2]), float(a[3]))
    elif w == "dgrab":
        w_dgrab(a[0], a[1], int(a[2]), float(a[3]))
    else:
        sys.exit(f"unknown worker {w}")
