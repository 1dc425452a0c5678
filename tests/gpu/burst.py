#!/usr/bin/env python3
"""Burstable slices under gpu-quota on the H200 (tests/gpu/run-suite.sh,
section burst: tests/gpu/suite/burst.sh). The containers' processes and the
host's side of the section; the workloads are burst-facts2-work.py's, in
PyTorch through its default caching allocator.

In a container:
  burst.py burster OUT GIB [--wait-go] [--secs S]
      fill GIB GiB as 1 GiB float32 tensors, then read-write passes over all
      of them until OUT/stop (or S s): a line `START END GB/s` per pass in
      OUT/passes; OUT/ready.json once filled (with what cuMemGetInfo and
      nvidia-smi show), OUT/result.json at the end (passes, data consistent).
      --wait-go: import and make the context, then wait for OUT/go to fill.
  burst.py guaranteed OUT [--hold-gib 2] [--secs S]
      hold --hold-gib GiB, OUT/ready.json (the views), then serve rounds:
      OUT/cmd.json {seq, gib, chunk, hold} -> allocate (one torch.empty, or
      chunk-GiB ones), touch, OUT/done.json, hold, free (del and
      empty_cache), OUT/freed.json; until OUT/stop (or S s).
On the host (no CUDA context: NVML through ctypes):
  burst.py nvml FILE [--secs S]    NVML used and total every 0.25 s: `T USED TOTAL` (MiB)
  burst.py nvmlcheck FILE          RESULT: samples, max used, total, samples over it
  burst.py drive ADIR --rounds N --gib G [--chunk C] [--hold H] --budget S
                 [--cap S] [--bursters D1,D2] [--nvml FILE] [--label L]
      the rounds of A against the bursters in D1, D2 (their OUT dirs): waits
      for them to run at full speed, then asks A; stops when the budget would
      not hold another round. RESULT: A's times (p50, p99 by nearest rank),
      errors, and each burster's pass rate before, during and after.
  burst.py selftest                the arithmetic, no GPU
BURST_FAKE=1: no torch, the GPU simulated with sleeps (to try the
orchestration anywhere)."""
import argparse, ctypes as C, json, math, os, statistics, subprocess, sys, time

GIB, MIB = 1 << 30, 1 << 20
FAKE = os.environ.get("BURST_FAKE") == "1"


def now():
    return time.time()


def ms(s):
    return round(s * 1000, 1)


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


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def wait_for(path, secs):
    end = now() + secs
    while now() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.02)
    return os.path.exists(path)


def err_text(e):
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:400]


def is_oom(err):
    return bool(err) and "out of memory" in err.lower()


def pct(xs, p):
    """Nearest rank: with 10 values p99 is the largest."""
    xs = sorted(x for x in xs if x is not None)
    return xs[max(1, math.ceil(p / 100 * len(xs))) - 1] if xs else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 1) if xs else None


def smi(q="memory.total,memory.used"):
    """nvidia-smi's figures as the caller sees them: [int, ...] or an error string"""
    try:
        o = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=" + q, "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        return [int(x) for x in o.stdout.strip().splitlines()[0].split(",")]
    except Exception as e:  # noqa: BLE001 -- reported as the figure
        return err_text(e)[:160]


# ------------------------------------------------------------------ the framework (or its stand-in)
class Torch:
    def __init__(self):
        import torch
        self.t = torch
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()

    def meminfo(self):
        return self.t.cuda.mem_get_info()

    def tensor(self, nbytes, fill):
        x = self.t.empty(nbytes // 4, dtype=self.t.float32, device="cuda")
        if fill is not None:
            x.fill_(fill)
        return x

    def raw(self, nbytes):
        return self.t.empty(nbytes, dtype=self.t.uint8, device="cuda")

    def touch(self, xs):
        for x in xs:
            x.fill_(1)
        self.sync()

    def add(self, xs):
        for x in xs:
            x.add_(1.0)
        self.sync()

    def sync(self):
        self.t.cuda.synchronize()

    def same(self, x, v):
        return float(x.min()) == v == float(x.max())

    def release(self):
        self.sync()
        self.t.cuda.empty_cache()

    def views(self):
        free, total = self.meminfo()
        return dict(free=free, total=total, smi=smi(), backend=self.t.cuda.get_allocator_backend(),
                    alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), torch=self.t.__version__)


class Fake:
    """A GPU of sleeps: a start of BURST_FAKE_START_S (0.2), 40 ms per pass,
    an allocation 10 ms + BURST_FAKE_ALLOC_S per 50 GiB."""
    def __init__(self):
        time.sleep(float(os.environ.get("BURST_FAKE_START_S", "0.2")))

    def meminfo(self):
        return 20 * GIB, 120 * GIB

    def tensor(self, nbytes, fill):
        return [fill]

    def raw(self, nbytes):
        time.sleep(0.01 + float(os.environ.get("BURST_FAKE_ALLOC_S", "0")) * nbytes / (50 * GIB))
        return [nbytes]

    def touch(self, xs):
        time.sleep(0.01)

    def add(self, xs):
        time.sleep(0.04)
        for x in xs:
            x[0] += 1.0

    def sync(self):
        pass

    def same(self, x, v):
        return x[0] == v

    def release(self):
        pass

    def views(self):
        g = int(os.environ.get("BURST_FAKE_TOTAL_GIB", "120"))
        return dict(free=20 * GIB, total=g * GIB, smi=[g * 1024, 1000], backend="fake", alloc_conf="", torch="fake")


def framework():
    return Fake() if FAKE else Torch()


# ------------------------------------------------------------------ B: the burster
def w_burster(out, gib, wait_go, secs):
    t0 = now()
    end = t0 + secs
    f = framework()
    ctx_s = round(now() - t0, 2)
    if wait_go and not wait_for(out + "/go", max(1, end - now())):
        put(out + "/result.json", dict(error="no go", passes=0))
        return
    held, err, tf = [], None, now()
    for _ in range(gib):
        try:
            held.append(f.tensor(GIB, 1.0))
        except Exception as e:  # noqa: BLE001 -- torch.OutOfMemoryError or a driver error: reported
            err = err_text(e)
            break
    try:
        f.sync()
    except Exception as e:  # noqa: BLE001
        err = err or err_text(e)
    fill_s = round(now() - tf, 2)
    pf = open(out + "/passes", "a")
    v, n, perr = 1.0, len(held) * GIB, None

    def one():
        nonlocal v
        s = now()
        f.add(held)
        e = now()
        v += 1
        g = 2 * n / max(e - s, 1e-9) / 1e9  # a pass reads and writes every byte
        pf.write(f"{s:.3f} {e:.3f} {g:.1f}\n")
        pf.flush()
        return g
    rates = []
    try:
        rates = [one() for _ in range(8)] if held else []
    except Exception as e:  # noqa: BLE001
        perr = err_text(e)
    ready = dict(pid=os.getpid(), asked_gib=gib, got_gib=len(held), fill_error=err, ctx_s=ctx_s, fill_s=fill_s,
                 base_gbps=med(rates[2:]), t_ready=now())
    ready.update(f.views())
    put(out + "/ready.json", ready)
    while perr is None and held and now() < end and not os.path.exists(out + "/stop"):
        try:
            one()
        except Exception as e:  # noqa: BLE001 -- a failed pass ends the loop, reported
            perr = err_text(e)
    # the data: every element was added to once per pass (bounded: spilled
    # pages come back slowly)
    checked, bad, tc = 0, 0, now()
    if perr is None:
        try:
            for x in held:
                if now() - tc > 15:
                    break
                checked += 1
                bad += not f.same(x, v)
        except Exception as e:  # noqa: BLE001
            perr = err_text(e)
    pf.close()
    put(out + "/result.json", dict(passes=int(v - 1), got_gib=len(held), pass_error=perr, checked_gib=checked,
                                   inconsistent_gib=bad, t_end=now(), stopped=os.path.exists(out + "/stop")))


# ------------------------------------------------------------------ A: the guaranteed container
def a_round(f, c):
    gib, chunk = int(c["gib"]), int(c.get("chunk") or 0)
    step = chunk or gib
    held, times, err, ferr = [], [], None, None
    ta = now()
    for _ in range(gib // step):
        s = now()
        try:
            held.append(f.raw(step * GIB))
        except Exception as e:  # noqa: BLE001 -- torch.OutOfMemoryError or a driver error
            err = err_text(e)
            break
        times.append(ms(now() - s))
    tb = now()
    try:
        f.touch(held)
    except Exception as e:  # noqa: BLE001
        ferr = err_text(e)
    r = dict(seq=c["seq"], gib=gib, chunk=chunk, got_gib=len(held) * step, alloc_ms=ms(tb - ta), fill_ms=ms(now() - tb),
             error=err, oom=is_oom(err), fill_error=ferr, t_alloc0=ta, t_alloc1=tb)
    if chunk:
        r.update(chunk_ms=times, slowest_chunk_ms=max(times) if times else None,
                 chunks_over_10ms=sum(x > 10 for x in times))
    return r, held


def w_guaranteed(out, hold_gib, secs):
    t0 = now()
    end = t0 + secs
    f = framework()
    base = f.raw(hold_gib * GIB)
    f.touch([base])
    ready = dict(pid=os.getpid(), hold_gib=hold_gib, start_s=round(now() - t0, 2), t_ready=now())
    ready.update(f.views())
    put(out + "/ready.json", ready)
    seq = 0
    while now() < end and not os.path.exists(out + "/stop"):
        c = get(out + "/cmd.json")
        if not c or c.get("seq", 0) <= seq:
            time.sleep(0.01)
            continue
        seq = c["seq"]
        r, held = a_round(f, c)
        put(out + "/done.json", r)
        hold_end = r["t_alloc1"] + float(c.get("hold", 2))
        while now() < hold_end and not os.path.exists(out + "/stop"):
            time.sleep(0.01)
        del held
        try:
            f.release()
            ferr = None
        except Exception as e:  # noqa: BLE001
            ferr = err_text(e)
        put(out + "/freed.json", dict(seq=seq, t_freed=now(), error=ferr))
    put(out + "/result.json", dict(rounds=seq, t_end=now()))


# ------------------------------------------------------------------ host: NVML
class NvMem2(C.Structure):
    _fields_ = [("version", C.c_uint), ("total", C.c_ulonglong), ("reserved", C.c_ulonglong),
                ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


class NvMem(C.Structure):
    _fields_ = [("total", C.c_ulonglong), ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


class Nvml:
    """used and total (MiB) from nvmlDeviceGetMemoryInfo_v2 (nvidia-smi's
    figure), else v1; no CUDA context."""
    def __init__(self):
        l = self.l = C.CDLL("libnvidia-ml.so.1")
        if l.nvmlInit_v2():
            raise OSError("nvmlInit_v2 failed")
        self.h = C.c_void_p()
        if l.nvmlDeviceGetHandleByIndex_v2(0, C.byref(self.h)):
            raise OSError("nvmlDeviceGetHandleByIndex_v2(0) failed")

    def mem(self):
        f = getattr(self.l, "nvmlDeviceGetMemoryInfo_v2", None)
        m = NvMem2(version=C.sizeof(NvMem2) | (2 << 24))
        if f is not None and f(self.h, C.byref(m)) == 0:
            return m.used >> 20, m.total >> 20
        m = NvMem()
        if self.l.nvmlDeviceGetMemoryInfo(self.h, C.byref(m)):
            return None, None
        return m.used >> 20, m.total >> 20


class SmiMem:
    def mem(self):
        r = smi("memory.used,memory.total")
        return tuple(r) if isinstance(r, list) and len(r) == 2 else (None, None)


def h_nvml(path, secs):
    if FAKE:
        src, how = None, "fake"
    else:
        try:
            src, how = Nvml(), "nvml"
        except OSError:
            src, how = SmiMem(), "nvidia-smi"
    end = now() + secs
    with open(path, "w") as f:
        f.write(f"# {how}: time used_mib total_mib, every 0.25 s\n")
        while now() < end:
            t = now()
            try:
                u, tot = src.mem() if src else (1000, 143771)
            except Exception:  # noqa: BLE001 -- a missed sample is a gap
                u, tot = None, None
            if u is not None:
                f.write(f"{t:.3f} {u} {tot}\n")
                f.flush()
            time.sleep(max(0.0, 0.25 - (now() - t)))


def nvml_samples(path, t0=None, t1=None):
    out = []
    for line in read(path).splitlines():
        p = line.split()
        if len(p) == 3 and not line.startswith("#"):
            try:
                t, u, tot = float(p[0]), int(p[1]), int(p[2])
            except ValueError:
                continue
            if (t0 is None or t >= t0) and (t1 is None or t <= t1):
                out.append((t, u, tot))
    return out


def nvml_check(path):
    s = nvml_samples(path)
    over = [x for x in s if x[1] > x[2]]
    span = round(s[-1][0] - s[0][0], 1) if s else 0
    gaps = max((b[0] - a[0] for a, b in zip(s, s[1:])), default=0)
    return dict(samples=len(s), span_s=span, max_gap_s=round(gaps, 2), max_used_mib=max((x[1] for x in s), default=None),
                total_mib=s[0][2] if s else None, over=len(over), first_over=over[0] if over else None)


# ------------------------------------------------------------------ host: the rounds and B's rates
def parse_passes(text):
    out = []
    for line in text.splitlines():
        p = line.split()
        if len(p) == 3:
            try:
                out.append((float(p[0]), float(p[1]), float(p[2])))
            except ValueError:
                pass
    return out


def hmean(ps):
    """each pass moves the same bytes: bytes over time is the harmonic mean"""
    return round(len(ps) / sum(1 / max(p[2], 1e-6) for p in ps), 1) if ps else None


def b_round(ps, t0, t1, base, t_next):
    """One round against B's passes: during = passes overlapping A's ask (t0)
    to A's free (t1); recover_s = t1 to the end of the first pass begun after
    t1 at >= 90 % of B's first rate; after = the median of up to 10 passes from
    there, before the next round."""
    st = {}
    during = [p for p in ps if p[1] > t0 and p[0] < t1]
    if during:
        st.update(during_min_gbps=min(p[2] for p in during), during_mean_gbps=hmean(during), during_passes=len(during))
    after = [p for p in ps if p[0] >= t1 and (t_next is None or p[0] < t_next)]
    rec = next((p for p in after if base and p[2] >= 0.9 * base), None)
    st["recover_s"] = round(rec[1] - t1, 2) if rec else None
    st["after_gbps"] = med([p[2] for p in after if p[0] >= rec[0]][:10]) if rec else None
    return st


def b_summary(d, rounds):
    """A burster's figures over the rounds: before (the 10 s before the first
    ask), during (slowest pass, and the median over rounds of each round's
    mean), after (the slowest recovery, the median rate after)."""
    ready = get(d + "/ready.json") or {}
    res = get(d + "/result.json")
    base = ready.get("base_gbps")
    ps = parse_passes(read(d + "/passes"))
    s = dict(dir=os.path.basename(os.path.dirname(d.rstrip("/"))) or d, base_gbps=base, got_gib=ready.get("got_gib"),
             passes=len(ps), ended=ended(d), last_pass_end=ps[-1][1] if ps else None)
    if res:
        s["result"] = res
    rs = [r for r in rounds if r.get("t_freed")]
    if not rs:
        return s
    t_first = rs[0]["t_go"]
    s["before_gbps"] = med([p[2] for p in ps if p[1] <= t_first and p[0] >= t_first - 10])
    per = [b_round(ps, r["t_go"], r["t_freed"], base, rs[i + 1]["t_go"] if i + 1 < len(rs) else None)
           for i, r in enumerate(rs)]
    s["rounds"] = per
    mins = [x.get("during_min_gbps") for x in per if x.get("during_min_gbps") is not None]
    s["during_min_gbps"] = min(mins) if mins else None
    s["during_mean_gbps"] = med([x.get("during_mean_gbps") for x in per])
    recs = [x.get("recover_s") for x in per]
    s["recover_max_s"] = max((x for x in recs if x is not None), default=None)
    s["not_recovered"] = sum(x is None for x in recs)
    s["after_gbps"] = med([x.get("after_gbps") for x in per])
    return s


def fmt_b(s):
    if s.get("before_gbps") is None and not s.get("rounds"):
        return f"{s['dir']} ({s.get('got_gib')} GiB): base {s.get('base_gbps')} GB/s, {s.get('passes')} passes, no round"
    return (f"{s['dir']} ({s.get('got_gib')} GiB): before {s.get('before_gbps')} GB/s; during slowest {s.get('during_min_gbps')}, "
            f"mean {s.get('during_mean_gbps')} (median over rounds); after: >= 90 % again within "
            f"{s.get('recover_max_s')} s (not in {s.get('not_recovered')} rounds), then {s.get('after_gbps')} GB/s")


def ended(d):
    """the burster is over: its result, or (suite/burst.sh's layout) the
    exit status of its container beside its /out"""
    return os.path.exists(d + "/result.json") or os.path.exists(os.path.dirname(d.rstrip("/")) + "/rc")


def recovered(dirs, since, secs):
    """Every running burster has run 2 passes begun after `since` at >= 90 % of its first rate."""
    end = now() + secs
    while True:
        ok = True
        for d in dirs:
            base = (get(d + "/ready.json") or {}).get("base_gbps")
            if not base or ended(d):
                continue
            if len([p for p in parse_passes(read(d + "/passes")) if p[0] >= since and p[2] >= 0.9 * base]) < 2:
                ok = False
        if ok:
            return True
        if now() >= end:
            return False
        time.sleep(0.05)


def wait_seq(path, seq, secs):
    """A's answer to round seq, or None after secs or once A's container has ended"""
    end = now() + secs
    while now() < end:
        j = get(path)
        if j and j.get("seq") == seq:
            return j
        if ended(os.path.dirname(path)):
            return get(path) if (get(path) or {}).get("seq") == seq else None
        time.sleep(0.01)
    return None


def h_drive(a):
    t_end = now() + a.budget
    d = a.adir
    dirs = [x for x in (a.bursters or "").split(",") if x]
    rounds, note = [], ""
    last = (get(d + "/cmd.json") or {}).get("seq", 0)
    # A must be done with any earlier round
    if last and not wait_seq(d + "/freed.json", last, max(1, min(30, t_end - now()))):
        note = f"A still busy with round {last} of an earlier call"
    est = None
    while not note and len(rounds) < a.rounds:
        left = t_end - now()
        need = (est if est is not None else a.first_est) + a.hold + 3
        if rounds and left < need:
            note = f"{len(rounds)} of {a.rounds} rounds: one more (~{need:.0f} s) would pass the budget"
            break
        t_since = rounds[-1]["t_freed"] if rounds else now() - 3
        rec = recovered(dirs, t_since, max(0.5, min(10, left - need)))
        last += 1
        t_go = now()
        put(d + "/cmd.json", dict(seq=last, gib=a.gib, chunk=a.chunk, hold=a.hold, t=t_go))
        # a round once begun may take its cap, past the budget: the budget
        # decides only whether another begins
        done = wait_seq(d + "/done.json", last, a.cap)
        if done is None:
            why = "A's container ended" if ended(d) else f"A did not answer within {a.cap:.0f} s"
            rounds.append(dict(seq=last, t_go=t_go, error=why))
            note = "A did not answer"
            break
        freed = wait_seq(d + "/freed.json", last, a.hold + 30)
        r = dict(done, t_go=t_go, t_freed=(freed or {}).get("t_freed"), b_recovered_before=rec)
        if freed is None:
            r["error"] = (r.get("error") or "") + "; A did not free within hold + 30 s"
            rounds.append(r)
            note = "A did not free"
            break
        if a.nvml:
            s = nvml_samples(a.nvml, t_go, r["t_freed"])
            r["nvml_max_mib"] = max((x[1] for x in s), default=None)
        rounds.append(r)
        est = max(est or 0, (r["t_alloc1"] - t_go))
    if rounds and rounds[-1].get("t_freed"):  # the last round's "after", as the others had it
        recovered(dirs, rounds[-1]["t_freed"], max(0.5, min(8, t_end + a.cap - now())))
    ok_t = [r.get("alloc_ms") for r in rounds if "alloc_ms" in r and not r.get("error")]
    res = dict(label=a.label, asked_rounds=a.rounds, rounds=len(rounds), gib=a.gib, chunk=a.chunk,
               alloc_ms=[r.get("alloc_ms") for r in rounds], p50_ms=pct(ok_t, 50), p99_ms=pct(ok_t, 99),
               max_ms=max(ok_t) if ok_t else None, fill_ms=[r.get("fill_ms") for r in rounds],
               oom_rounds=sum(bool(r.get("oom")) for r in rounds),
               errors=[f"round {i + 1}: {r['error']}" for i, r in enumerate(rounds) if r.get("error")],
               fill_errors=[r["fill_error"] for r in rounds if r.get("fill_error")],
               got_gib=[r.get("got_gib") for r in rounds], nvml_max_mib=[r.get("nvml_max_mib") for r in rounds],
               t_go=[r.get("t_go") for r in rounds], t_alloc1=[r.get("t_alloc1") for r in rounds],
               t_freed=[r.get("t_freed") for r in rounds], note=note)
    if a.chunk:
        res["slowest_chunk_ms"] = [r.get("slowest_chunk_ms") for r in rounds]
    res["bursters"] = [b_summary(x, rounds) for x in dirs]
    res["summary"] = (f"{res['rounds']} rounds of {a.gib} GiB as {'%d GiB tensors' % a.chunk if a.chunk else 'one tensor'}: "
                      f"p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms (nearest rank), each {res['alloc_ms']} ms; "
                      f"out of memory in {res['oom_rounds']}; errors {len(res['errors'])}"
                      + (f" ({'; '.join(res['errors'])[:300]})" if res["errors"] else "")
                      + (f"; {note}" if note else "") + "; "
                      + "; ".join(fmt_b(b) for b in res["bursters"]))
    print("RESULT " + json.dumps(res), flush=True)


# ------------------------------------------------------------------ selftest
def selftest():
    assert pct([3, 1, 2], 50) == 2 and pct(list(range(1, 11)), 99) == 10 and pct([], 50) is None
    ps = [(0, 1, 100), (1, 2, 100), (2, 5, 10), (5, 6, 95), (6, 7, 100), (7, 8, 100)]
    st = b_round(ps, 2.5, 4.5, 100, None)
    assert st["during_min_gbps"] == 10 and st["during_passes"] == 1, st
    assert st["recover_s"] == 1.5 and st["after_gbps"] == 100.0, st
    assert hmean([(0, 1, 10), (0, 1, 40)]) == 16.0
    assert parse_passes("1.0 2.0 3.5\nbad\n") == [(1.0, 2.0, 3.5)]
    assert is_oom("OutOfMemoryError: CUDA out of memory. Tried") and not is_oom(None)
    print("selftest ok")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="w", required=True)
    b = sub.add_parser("burster")
    b.add_argument("out"); b.add_argument("gib", type=int)
    b.add_argument("--wait-go", action="store_true"); b.add_argument("--secs", type=float, default=600)
    g = sub.add_parser("guaranteed")
    g.add_argument("out"); g.add_argument("--hold-gib", type=int, default=2); g.add_argument("--secs", type=float, default=600)
    n = sub.add_parser("nvml")
    n.add_argument("file"); n.add_argument("--secs", type=float, default=600)
    c = sub.add_parser("nvmlcheck")
    c.add_argument("file")
    d = sub.add_parser("drive")
    d.add_argument("adir"); d.add_argument("--rounds", type=int, required=True); d.add_argument("--gib", type=int, required=True)
    d.add_argument("--chunk", type=int, default=0); d.add_argument("--hold", type=float, default=2.0)
    d.add_argument("--budget", type=float, required=True); d.add_argument("--cap", type=float, default=60)
    d.add_argument("--first-est", type=float, default=15, help="seconds a first round is assumed to take")
    d.add_argument("--bursters", default=""); d.add_argument("--nvml"); d.add_argument("--label", default="")
    sub.add_parser("selftest")
    a = p.parse_args()
    if a.w == "burster":
        w_burster(a.out, a.gib, a.wait_go, a.secs)
    elif a.w == "guaranteed":
        w_guaranteed(a.out, a.hold_gib, a.secs)
    elif a.w == "nvml":
        h_nvml(a.file, a.secs)
    elif a.w == "nvmlcheck":
        print("RESULT " + json.dumps(nvml_check(a.file)))
    elif a.w == "drive":
        h_drive(a)
    else:
        selftest()


if __name__ == "__main__":
    main()
