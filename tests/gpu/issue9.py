#!/usr/bin/env python3
"""Issue 9 checks of the H200 suite: what the driver keeps alive must stay
inside the slice. Run by tests/gpu/run-suite.sh (section i9).

In a container (vram=S, N processes):
  issue9.py drive SCEN --procs N --gib S [--out /out]
      phase 1: N workers run scenario SCEN and hold at its worst moment
               (writes OUT/ready1, waits for OUT/go1: the host samples NVML)
      phase 2: one fresh PyTorch process fills the slice with 256 MiB tensors
               (OUT/ready2, OUT/go2): the slice is still usable
      then OUT/result.json.
On the host:
  issue9.py judge --result R --nvml1 F --nvml2 F --gib S --procs N
      prints "PASS|FAIL<TAB>figures" (exit 0 = PASS).
Scenarios: fill vmm pool_torch pool_raw reset destroy contexts exec zombie fork.
No CUDA in the driver process itself; workers use PyTorch/CuPy or ctypes on
libcuda.so.1 (the container's, injected by gpu-quota)."""
import ctypes as C
import json, os, sys, time, argparse, threading

MIB, GIB = 1 << 20, 1 << 30
SCENARIOS = ["fill", "vmm", "pool_torch", "pool_raw", "reset", "destroy", "contexts", "exec", "zombie", "fork"]


def limits():
    d = {}
    try:
        for line in open("/run/gpu-quota/limits"):
            if "=" in line and not line.startswith("#"):
                k, v = line.strip().split("=", 1)
                d[k] = v
    except OSError:
        pass
    return d


def ctx_charge():
    return int(limits().get("context_overhead_bytes", "0"))


def wait_file(p, secs):
    t = time.time()
    while time.time() - t < secs:
        if os.path.exists(p):
            return True
        time.sleep(0.05)
    return False


def write_json(p, d):
    tmp = p + ".tmp"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.rename(tmp, p)


# --------------------------------------------------------------- ctypes CUDA
OOM = 2


class CuErr(Exception):
    def __init__(self, code, what):
        super().__init__(f"{what} -> CUresult {code}")
        self.code = code


class Prop(C.Structure):  # CUmemAllocationProp
    _fields_ = [("type", C.c_int), ("handleTypes", C.c_int), ("locType", C.c_int), ("locId", C.c_int),
                ("win32", C.c_void_p), ("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte),
                ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class CU:
    def __init__(self, primary=True):
        l = self.l = C.CDLL("libcuda.so.1")
        u64p, vp, sz = C.POINTER(C.c_uint64), C.POINTER(C.c_void_p), C.c_size_t
        sig = {
            "cuInit": [C.c_uint], "cuDeviceGet": [C.POINTER(C.c_int), C.c_int],
            "cuDevicePrimaryCtxRetain": [vp, C.c_int], "cuDevicePrimaryCtxReset_v2": [C.c_int],
            "cuCtxSetCurrent": [C.c_void_p], "cuCtxDestroy_v2": [C.c_void_p],
            "cuMemAlloc_v2": [u64p, sz], "cuMemFree_v2": [C.c_uint64],
            "cuMemGetInfo_v2": [C.POINTER(sz), C.POINTER(sz)],
            "cuMemCreate": [u64p, sz, C.POINTER(Prop), C.c_uint64], "cuMemRelease": [C.c_uint64],
            "cuMemAddressReserve": [u64p, sz, sz, C.c_uint64, C.c_uint64], "cuMemAddressFree": [C.c_uint64, sz],
            "cuMemMap": [C.c_uint64, sz, sz, C.c_uint64, C.c_uint64], "cuMemUnmap": [C.c_uint64, sz],
            "cuDeviceGetDefaultMemPool": [vp, C.c_int],
            "cuMemPoolSetAttribute": [C.c_void_p, C.c_int, C.c_void_p],
            "cuMemPoolGetAttribute": [C.c_void_p, C.c_int, C.c_void_p],
            "cuMemAllocAsync": [u64p, sz, C.c_void_p], "cuMemFreeAsync": [C.c_uint64, C.c_void_p],
            "cuStreamSynchronize": [C.c_void_p], "cuCtxSynchronize": [],
        }
        for n, a in sig.items():
            f = getattr(l, n, None)
            if f is not None:
                f.argtypes, f.restype = a, C.c_int
        self.ck(l.cuInit(0), "cuInit")
        d = C.c_int()
        self.ck(l.cuDeviceGet(C.byref(d), 0), "cuDeviceGet")
        self.dev = d.value
        if primary:
            self.retain()

    @staticmethod
    def ck(r, what):
        if r:
            raise CuErr(r, what)

    def retain(self):
        ctx = C.c_void_p()
        self.ck(self.l.cuDevicePrimaryCtxRetain(C.byref(ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self.ck(self.l.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def ctx_create(self):
        ctx = C.c_void_p()
        f = getattr(self.l, "cuCtxCreate_v2", None)
        if f is not None:
            f.argtypes, f.restype = [C.POINTER(C.c_void_p), C.c_uint, C.c_int], C.c_int
            self.ck(f(C.byref(ctx), 0, self.dev), "cuCtxCreate_v2")
        else:
            f = self.l.cuCtxCreate_v4
            f.argtypes, f.restype = [C.POINTER(C.c_void_p), C.c_void_p, C.c_uint, C.c_int], C.c_int
            self.ck(f(C.byref(ctx), None, 0, self.dev), "cuCtxCreate_v4")
        return ctx

    def alloc(self, n):
        """device pointer, or None on CUDA_ERROR_OUT_OF_MEMORY"""
        p = C.c_uint64()
        r = self.l.cuMemAlloc_v2(C.byref(p), n)
        if r == OOM:
            return None
        self.ck(r, "cuMemAlloc_v2")
        return p.value

    def greedy(self, chunk=256 * MIB, cap=200 * GIB):
        ps = []
        while len(ps) * chunk < cap:
            p = self.alloc(chunk)
            if p is None:
                break
            ps.append(p)
        return ps

    def meminfo(self):
        f, t = C.c_size_t(), C.c_size_t()
        self.ck(self.l.cuMemGetInfo_v2(C.byref(f), C.byref(t)), "cuMemGetInfo_v2")
        return f.value, t.value

    def vmm_leak(self, size):
        """create, map, release the handle (memory stays live while mapped)"""
        prop = Prop(type=1, handleTypes=0, locType=1, locId=self.dev)
        h, va = C.c_uint64(), C.c_uint64()
        r = self.l.cuMemCreate(C.byref(h), size, C.byref(prop), 0)
        if r == OOM:
            return None
        self.ck(r, "cuMemCreate")
        self.ck(self.l.cuMemAddressReserve(C.byref(va), size, 0, 0, 0), "cuMemAddressReserve")
        self.ck(self.l.cuMemMap(va.value, size, 0, h.value, 0), "cuMemMap")
        self.ck(self.l.cuMemRelease(h.value), "cuMemRelease")
        return va.value

    def pool_attr(self, pool, attr):
        v = C.c_uint64()
        self.ck(self.l.cuMemPoolGetAttribute(pool, attr, C.byref(v)), "cuMemPoolGetAttribute")
        return v.value


# --------------------------------------------------------------- workers
def torch_fill(chunk=256 * MIB):
    """PyTorch fills what it can get in 256 MiB tensors."""
    import torch
    free, total = torch.cuda.mem_get_info()
    xs = []
    err = ""
    while len(xs) * chunk < 200 * GIB:
        try:
            xs.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            torch.cuda.synchronize()
        except Exception as e:  # OutOfMemoryError, or a refused context
            err = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            break
    return xs, {"filled": len(xs) * chunk, "free_at_start": free, "total": total, "err": err}


def w_fill(a, s):
    keep, rep = torch_fill()
    return keep, rep


def w_vmm(a, s):
    cu = CU()
    vas, refused = [], False
    for _ in range(8):
        va = cu.vmm_leak(GIB)  # a CUresult other than OOM raises: the check fails with it
        if va is None:
            refused = True
            break
        vas.append(va)
    return (cu, vas), {"mapped_after_release": len(vas) * GIB, "rounds_ok": len(vas), "refused": refused}


def w_pool_torch(a, s):
    import torch
    x = torch.empty(s["x"], dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    del x
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    import cupy as cp
    got, err = False, ""
    try:
        y = cp.empty(s["x"], dtype=cp.uint8)
        cp.cuda.Device().synchronize()
        got = True
    except Exception as e:
        y, err = None, str(e)[:160]
    return (y,), {"pool_reserved_after_free": reserved, "second_ok": got, "err": err,
                  "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}


def w_pool_raw(a, s):
    cu = CU()
    pool = C.c_void_p()
    cu.ck(cu.l.cuDeviceGetDefaultMemPool(C.byref(pool), cu.dev), "cuDeviceGetDefaultMemPool")
    thr = C.c_uint64(2 ** 64 - 1)
    cu.ck(cu.l.cuMemPoolSetAttribute(pool, 4, C.byref(thr)), "cuMemPoolSetAttribute(RELEASE_THRESHOLD)")
    p = C.c_uint64()
    r = cu.l.cuMemAllocAsync(C.byref(p), s["x"], None)
    first_ok = r == 0
    if first_ok:
        cu.ck(cu.l.cuMemFreeAsync(p.value, None), "cuMemFreeAsync")
    cu.ck(cu.l.cuStreamSynchronize(None), "cuStreamSynchronize")
    reserved = cu.pool_attr(pool, 5)  # RESERVED_MEM_CURRENT
    q = cu.alloc(s["x"])
    return (cu, q), {"first_ok": first_ok, "first_rc": r, "pool_reserved_after_free": reserved,
                     "second_ok": q is not None}


def w_reset(a, s):
    cu = CU()
    p1 = cu.alloc(s["x"])
    cu.ck(cu.l.cuDevicePrimaryCtxReset_v2(cu.dev), "cuDevicePrimaryCtxReset_v2")
    cu.retain()
    p2 = cu.alloc(s["x"])
    return (cu, p2), {"first_ok": p1 is not None, "second_ok": p2 is not None}


def w_destroy(a, s):
    cu = CU(primary=False)  # only the created contexts: one at a time
    c1 = cu.ctx_create()
    p1 = cu.alloc(s["x"])
    cu.ck(cu.l.cuCtxDestroy_v2(c1), "cuCtxDestroy_v2")
    c2 = cu.ctx_create()
    p2 = cu.alloc(s["x"])
    return (cu, c2, p2), {"first_ok": p1 is not None, "second_ok": p2 is not None}


def w_contexts(a, s):
    """A program that makes contexts of its own (cuCtxCreate) with 64 MiB in
    each until the slice refuses one or the other: every context must be
    charged what it costs (NVML is judged on the host)."""
    cu = CU()
    ctxs, ptrs, refused = [], [], None
    while len(ctxs) < 64 and refused is None:
        try:
            ctxs.append(cu.ctx_create())
        except CuErr as e:
            if e.code != OOM:
                raise
            refused = "cuCtxCreate"
            break
        p = cu.alloc(64 * MIB)
        if p is None:
            refused = "cuMemAlloc"
        else:
            ptrs.append(p)
    return (cu, ctxs, ptrs), {"contexts": len(ctxs), "allocs": len(ptrs), "refused": refused}


def w_exec_pre(a, s):
    cu = CU()
    p = cu.alloc(s["x"])
    open(a.ready + ".pre", "w").write(json.dumps({"pid": os.getpid(), "first_ok": p is not None}))
    # same pid, same start time, new image: its old charge must go
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "worker", "fill", "--ready", a.ready,
                              "--hold", a.hold, "--x", str(s["x"]), "--execd"])


def w_zombie(a, s):
    cu = CU()
    p = cu.alloc(s["x"])
    return None, {"first_ok": p is not None, "exit_now": True}


def w_fork(a, s):
    """fork while another thread is initialising CUDA for the first time;
    the children touch the driver and must exit promptly (not spin)."""
    box = {}

    def init():
        try:
            box["cu"] = CU()
            box["p"] = box["cu"].alloc(256 * MIB)
        except Exception as e:
            box["err"] = str(e)
    lib = C.CDLL("libcuda.so.1")  # loaded before the fork: the children call no dlopen
    t = threading.Thread(target=init)
    t.start()
    kids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            try:  # an intercepted dlsym (ctypes) and the lightest driver call
                v = C.c_int()
                lib["cuDriverGetVersion"](C.byref(v))
            finally:
                os._exit(0)
        kids.append(pid)
        time.sleep(0.002)
    t.join(60)
    deadline, stuck = time.time() + 10, 0
    for k in kids:
        while True:
            r, _ = os.waitpid(k, os.WNOHANG)
            if r:
                break
            if time.time() > deadline:
                stuck += 1
                os.kill(k, 9)
                os.waitpid(k, 0)
                break
            time.sleep(0.02)
    cu = box.get("cu")
    if cu is None:
        return None, {"children": len(kids), "children_stuck": stuck, "err": box.get("err", "no init")}
    cu.retain()  # the context was made current on the init thread, not this one
    ps = cu.greedy()
    f, _ = cu.meminfo()
    return (cu, ps), {"children": len(kids), "children_stuck": stuck, "filled_after": (len(ps) + 1) * 256 * MIB,
                      "free_after": f}


WORKERS = {"fill": w_fill, "vmm": w_vmm, "pool_torch": w_pool_torch, "pool_raw": w_pool_raw, "reset": w_reset,
           "destroy": w_destroy, "contexts": w_contexts, "exec": w_exec_pre, "zombie": w_zombie, "fork": w_fork}


def worker(a):
    s = {"x": a.x}
    rep = {"pid": os.getpid(), "scenario": a.scenario, "execd": a.execd}
    keep = None
    try:
        if a.dry:
            rep.update(dry=True, exit_now=a.scenario == "zombie")
        else:
            keep, r = WORKERS[a.scenario](a, s)
            rep.update(r)
    except Exception as e:
        rep["error"] = f"{type(e).__name__}: {e}"[:300]
    write_json(a.ready, rep)
    if rep.get("exit_now"):
        os._exit(0)
    wait_file(a.hold, 60)
    del keep
    return 0


# --------------------------------------------------------------- driver (in the container)
def spawn(args, env=None):
    return os.posix_spawn(sys.executable, [sys.executable, os.path.abspath(__file__)] + args,
                          env if env is not None else dict(os.environ))


def proc_state(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
        return s[s.rfind(")") + 2]
    except OSError:
        return "gone"


def drive(a):
    out, n, S = a.out, a.procs, int(a.gib * GIB)
    ctx = ctx_charge()
    x = 3 * GIB if n == 1 else GIB  # the size each process keeps alive
    res = {"scenario": a.scenario, "procs": n, "slice": S, "context_charge": ctx, "x": x, "limits": limits()}
    env = dict(os.environ)
    if a.scenario == "pool_torch":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    hold = os.path.join(out, "w.hold")
    pids, readies = [], []
    for i in range(n):
        r = os.path.join(out, f"w{i}.ready")
        readies.append(r)
        pids.append(spawn(["worker", a.scenario, "--ready", r, "--hold", hold, "--x", str(x)]
                          + (["--dry"] if a.dry else []), env))
    t0 = time.time()
    reps = []
    for r in readies:
        wait_file(r, 120)
        try:
            reps.append(json.load(open(r)))
        except (OSError, ValueError):
            reps.append({"error": "no report"})
    res["workers"], res["phase1_s"] = reps, round(time.time() - t0, 2)
    zombies = []
    if a.scenario == "zombie":
        time.sleep(0.5)  # they exit right after reporting; never reaped until the end
        zombies = [p for p in pids if proc_state(p) == "Z"]
        res["zombies"] = len(zombies)
    write_json(os.path.join(out, "ready1"), {"pids": pids})
    wait_file(os.path.join(out, "go1"), 30)
    open(hold, "w").close()
    if a.scenario != "zombie":
        for p in pids:
            os.waitpid(p, 0)
    # phase 2: the slice is usable again (for zombie: while they are still unreaped)
    r2 = os.path.join(out, "fill.ready")
    fp = spawn(["worker", "fill", "--ready", r2, "--hold", os.path.join(out, "go2"), "--x", "0"]
               + (["--dry"] if a.dry else []), dict(os.environ))
    wait_file(r2, 120)
    try:
        res["fill"] = json.load(open(r2))
    except (OSError, ValueError):
        res["fill"] = {"error": "no report"}
    if zombies:
        res["zombies_during_fill"] = sum(proc_state(p) == "Z" for p in zombies)
    write_json(os.path.join(out, "ready2"), {"pids": [fp]})
    wait_file(os.path.join(out, "go2"), 30)
    os.waitpid(fp, 0)
    for p in zombies:
        os.waitpid(p, 0)
    write_json(os.path.join(out, "result.json"), res)
    return 0


# --------------------------------------------------------------- judge (on the host)
def judge(a):
    try:
        res = json.load(open(a.result))
    except (OSError, ValueError) as e:
        print(f"FAIL\tno result ({e})")
        return 1
    S, n, sc = res["slice"], res["procs"], res["scenario"]
    ctx, x = res["context_charge"], res["x"]
    lim_mib = S / MIB * 1.01

    def nvml(p):
        try:
            v = open(p).read().split()
            return int(v[0]), int(v[1])
        except (OSError, ValueError, IndexError):
            return None, 0
    n1, p1 = nvml(a.nvml1)
    n2, p2 = nvml(a.nvml2)
    ws = res.get("workers", [])
    errs = [w["error"] for w in ws if "error" in w] + ([res["fill"]["error"]] if "error" in res.get("fill", {}) else [])
    bad, figs = [], []
    if errs:
        bad.append("errors: " + " | ".join(errs)[:300])
    if ctx <= 0:
        bad.append("no context_overhead_bytes in the container's limits")
    for name, v in (("phase 1", n1), ("usable", n2)):
        if v is None:
            bad.append(f"no NVML sample ({name})")
        elif v > lim_mib:
            bad.append(f"NVML {name} {v} MiB > slice+1% {lim_mib:.0f} MiB")
    figs.append(f"NVML of the container's processes: {n1} MiB over {p1} procs at the worst moment, {n2} MiB while refilling (limit {lim_mib:.0f})")
    # an empty sample proves nothing: the host must have seen the processes
    if sc != "zombie" and p1 < n:
        bad.append(f"NVML listed {p1} of the {n} workers")
    if p2 < 1:
        bad.append("NVML did not list the refilling process")
    acct = n * ctx  # contexts charged
    if sc == "fill":
        got = sum(w.get("filled", 0) for w in ws)
        need = S - n * ctx - 0.05 * S
        figs.append(f"{n} proc(s) filled {got >> 20} MiB (need >= {need / MIB:.0f}); cuMemGetInfo free at start {[w.get('free_at_start', 0) >> 20 for w in ws]} MiB")
        if got < need:
            bad.append("filled less than slice - contexts - 5%")
        if n == 1 and n1 is not None and got:
            figs.append(f"PyTorch context actually {n1 - (got >> 20)} MiB vs charged {ctx >> 20} MiB")
    elif sc == "vmm":
        m = sum(w.get("rounds_ok", 0) for w in ws)
        figs.append(f"{m} of {8 * n} create-map-release rounds of 1 GiB succeeded")
        if m * GIB + acct > S * 1.01 or not all(w.get("refused") for w in ws):
            bad.append("mapped memory past the slice, or no refusal")
    elif sc in ("pool_torch", "pool_raw"):
        k = sum(bool(w.get("second_ok")) for w in ws)
        held = sum(w.get("pool_reserved_after_free", 0) for w in ws)
        figs.append(f"pools keep {held >> 20} MiB after free+sync; {k} of {n} second allocations of {x >> 20} MiB succeeded")
        if (n + k) * x + acct > S * 1.01:
            bad.append("pool memory plus a second allocation exceed the slice")
        if n == 1 and k:
            bad.append("the second allocation was not refused")
    elif sc in ("reset", "destroy"):
        ok2 = sum(bool(w.get("second_ok")) for w in ws)
        figs.append(f"{ok2} of {n} allocations of {x >> 20} MiB after {'cuDevicePrimaryCtxReset' if sc == 'reset' else 'cuCtxDestroy'} succeeded")
        if ok2 != n:
            bad.append("the slice was not usable again after the context went")
    elif sc == "contexts":
        made = [w.get("contexts", 0) for w in ws]
        figs.append(f"contexts made per worker {made}, refused by {[w.get('refused') for w in ws]}")
        if not all(w.get("refused") for w in ws):
            bad.append("a worker made contexts without ever being refused")
    elif sc == "exec":
        got = sum(w.get("filled", 0) for w in ws)
        need = S - n * ctx - 0.05 * S
        figs.append(f"after exec (same pid) the new images filled {got >> 20} MiB (need >= {need / MIB:.0f})")
        if got < need or not all(w.get("execd") for w in ws):
            bad.append("the old image's charge stayed after exec")
    elif sc == "zombie":
        z, zf = res.get("zombies", 0), res.get("zombies_during_fill", 0)
        figs.append(f"{z} zombie(s) unreaped, {zf} still zombies during the refill")
        if z != n:
            bad.append("workers did not become zombies")
    elif sc == "fork":
        stuck = sum(w.get("children_stuck", 0) for w in ws)
        figs.append(f"{sum(w.get('children', 0) for w in ws)} children forked during first CUDA init, {stuck} stuck")
        if stuck:
            bad.append("forked children spun")
    f = res.get("fill", {})
    need1 = S - ctx - 0.05 * S
    figs.append(f"then one PyTorch process got {f.get('filled', 0) >> 20} MiB (need >= {need1 / MIB:.0f}; charge {ctx >> 20} MiB)")
    if f.get("filled", 0) < need1:
        bad.append("the slice is not usable afterwards")
    print(("FAIL" if bad else "PASS") + "\t" + "; ".join(bad + figs))
    return 1 if bad else 0


def selftest(a):
    """The judge on synthetic results (CPU): good figures pass, each kind of
    leak the issue describes fails. `issue9.py selftest` exits 0 when all hold."""
    import tempfile
    S4, C = 4 * GIB, 616 * MIB
    base = {"procs": 1, "slice": S4, "context_charge": C, "x": 3 * GIB, "fill": {"filled": 13 * 256 * MIB}}
    cases = [
        ("fill ok", dict(base, scenario="fill", workers=[{"filled": 13 * 256 * MIB}]), (3846, 1), (3846, 1), "PASS"),
        ("fill: context not charged (4614 MiB)", dict(base, scenario="fill", context_charge=0,
         workers=[{"filled": 16 * 256 * MIB}]), (4614, 1), (4614, 1), "FAIL"),
        ("vmm ok", dict(base, scenario="vmm", workers=[{"rounds_ok": 3, "refused": True}]), (3590, 1), (3846, 1), "PASS"),
        ("vmm: 8 GiB live", dict(base, scenario="vmm", workers=[{"rounds_ok": 8, "refused": False}]), (8710, 1), (3846, 1), "FAIL"),
        ("pool ok", dict(base, scenario="pool_torch", workers=[{"second_ok": False, "pool_reserved_after_free": 3 * GIB}]), (3590, 1), (3846, 1), "PASS"),
        ("pool: CuPy got 3 GiB more", dict(base, scenario="pool_torch", workers=[{"second_ok": True, "pool_reserved_after_free": 3 * GIB}]), (6662, 1), (3846, 1), "FAIL"),
        ("reset ok", dict(base, scenario="reset", workers=[{"first_ok": True, "second_ok": True}]), (3590, 1), (3846, 1), "PASS"),
        ("reset: second refused", dict(base, scenario="reset", workers=[{"first_ok": True, "second_ok": False}]), (518, 1), (3846, 1), "FAIL"),
        ("contexts ok", dict(base, scenario="contexts", workers=[{"contexts": 5, "refused": "cuCtxCreate"}]), (4100, 1), (3846, 1), "PASS"),
        ("contexts: 12 uncharged (6984 MiB)", dict(base, scenario="contexts", workers=[{"contexts": 12, "refused": "cuMemAlloc"}]), (6984, 1), (3846, 1), "FAIL"),
        ("contexts: never refused", dict(base, scenario="contexts", workers=[{"contexts": 64, "refused": None}]), (4000, 1), (3846, 1), "FAIL"),
        ("exec: old charge kept", dict(base, scenario="exec", workers=[{"filled": 256 * MIB, "execd": True}]), (774, 1), (3846, 1), "FAIL"),
        ("zombie: charge kept until reaped", dict(base, scenario="zombie", zombies=1, workers=[{"first_ok": True}],
         fill={"filled": 256 * MIB}), (0, 0), (774, 1), "FAIL"),
        ("zombie ok", dict(base, scenario="zombie", zombies=1, workers=[{"first_ok": True}]), (0, 0), (3846, 1), "PASS"),
        ("fork: a child spins", dict(base, scenario="fork", workers=[{"children": 4, "children_stuck": 1}]), (3846, 1), (3846, 1), "FAIL"),
        ("empty NVML sample", dict(base, scenario="fill", workers=[{"filled": 13 * 256 * MIB}]), (0, 0), (3846, 1), "FAIL"),
        ("a worker error", dict(base, scenario="reset", workers=[{"error": "CuErr"}]), (518, 1), (3846, 1), "FAIL"),
    ]
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for name, res, n1, n2, want in cases:
            r, f1, f2 = (os.path.join(d, x) for x in ("r", "n1", "n2"))
            write_json(r, res)
            open(f1, "w").write(f"{n1[0]} {n1[1]}")
            open(f2, "w").write(f"{n2[0]} {n2[1]}")
            import io, contextlib
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                judge(argparse.Namespace(result=r, nvml1=f1, nvml2=f2))
            got = buf.getvalue().split("\t")[0]
            ok = got == want
            bad += not ok
            print(("ok  " if ok else "BAD ") + f"{name}: {got} (want {want})")
    print(f"{len(cases) - bad} passed, {bad} failed")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["drive", "worker", "judge", "selftest"])
    p.add_argument("scenario", nargs="?", default="fill", choices=SCENARIOS)
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--gib", type=float, default=4)
    p.add_argument("--out", default="/out")
    p.add_argument("--ready"); p.add_argument("--hold")
    p.add_argument("--x", type=int, default=GIB)
    p.add_argument("--execd", action="store_true")
    p.add_argument("--dry", action="store_true", help="no CUDA: exercise the orchestration only")
    p.add_argument("--result"); p.add_argument("--nvml1"); p.add_argument("--nvml2")
    a = p.parse_args()
    sys.exit({"drive": drive, "worker": worker, "judge": judge, "selftest": selftest}[a.mode](a))


if __name__ == "__main__":
    main()
