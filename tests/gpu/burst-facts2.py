#!/usr/bin/env python3
"""Second round of facts for burstable slices (docs/burst.md, "Still to
measure"), on the plain driver: no gpu-quota. burst-facts2.sh runs it; the
processes it measures are burst-facts2-work.py's (B holds managed memory, A
allocates beside it), all children of this one, which makes no CUDA context
itself and samples NVML every 100 ms (burst-facts2-host.py reads the host).

burst-facts2.py run OUT TMP LIMIT_S   the cases, each within its budget (PLAN)
                                      and all within LIMIT_S; the report on
                                      stdout, raw logs in OUT/burst-facts2-raw/
burst-facts2.py --selftest            the arithmetic and the report, no GPU
BF2_FAKE=1: the workers simulate the GPU, to try the orchestration anywhere.
"""
import importlib.util, io, json, os, shutil, signal, subprocess, sys, time, traceback
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "burst-facts2-work.py")
_spec = importlib.util.spec_from_file_location("burst_facts2_host", os.path.join(HERE, "burst-facts2-host.py"))
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)
W = H.W
GIB, MIB, FAKE = W.GIB, W.MIB, W.FAKE
now, ms, gb, result, put, get, wait_for, err_text, pct, med = (
    W.now, W.ms, W.gb, W.result, W.put, W.get, W.wait_for, W.err_text, W.pct, W.med)
Nvml, PyNvml, Sampler, make_cg, cg_of, smi_gpu, smi_apps, proc_status, meminfo, read, parse_apps, kv_mib = (
    H.Nvml, H.PyNvml, H.Sampler, H.make_cg, H.cg_of, H.smi_gpu, H.smi_apps, H.proc_status, H.meminfo, H.read,
    H.parse_apps, H.kv_mib)
# seconds each case may take, in the order run; their sum (400) stays within
# the wrapper's 430 s less the preamble and the clean-up. A case past its
# budget is cut (its processes killed); what it measured is kept.
PLAN = [("1-single", 160), ("1-chunks", 55), ("3-vmm-pool", 60), ("2-idle", 50), ("5-kill", 45),
        ("3-context", 30)]


# ------------------------------------------------------------------ arithmetic on B's passes
def parse_passes(text):
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] == "pass":
            try:
                out.append((float(f[1]), float(f[2]), float(f[3])))
            except ValueError:
                pass
    return out


def b_stats(passes, t0, t1, base, t_next=None):
    """B's passes against one round: during = passes overlapping A's go (t0)
    to A's exit (t1), their slowest and their bytes over time (each pass moves
    the same bytes: the harmonic mean); recover_s = t1 to the end of the first
    pass begun after t1 at >= 90 % of B's first rate; after = the median of
    up to 10 passes from there, before the next round."""
    st = {}
    during = [p for p in passes if p[1] > t0 and p[0] < t1]
    if during:
        st.update(during_min_gbps=min(p[2] for p in during), during_passes=len(during),
                  during_mean_gbps=round(len(during) / sum(1 / max(p[2], 1e-6) for p in during), 1))
    after = [p for p in passes if p[0] >= t1 and (t_next is None or p[0] < t_next)]
    rec = next((p for p in after if p[2] >= 0.9 * base), None)
    st["recover_s"] = round(rec[1] - t1, 2) if rec else None
    st["after_gbps"] = med([p[2] for p in after if p[0] >= rec[0]][:10]) if rec else None
    return st


def curve_at(curve, ts):
    """the last sample at or before each t of ts: [(t, value)]"""
    out = []
    for t in ts:
        v = [u for s, u in curve if s <= t]
        if v:
            out.append((t, v[-1]))
    return out


# ------------------------------------------------------------------ processes
class Child:
    def __init__(self, run, name, sub, *args, cg=None):
        self.name, self.dir = name, os.path.join(run.tmp, name)
        os.makedirs(self.dir)
        self.log = self.dir + "/log"
        cmd = [sys.executable, WORK, sub, self.dir] + [str(a) for a in args]
        if cg:  # into B's cgroup before exec, so that everything B allocates is charged there
            cmd = ["sh", "-c", 'echo $$ > "$1" 2>/dev/null; shift; exec "$@"', "sh", cg + "/cgroup.procs"] + cmd
        with open(self.log, "w") as log:
            self.p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.p.pid
        with open(run.tmp + "/pids", "a") as f:  # for the wrapper's last sweep
            f.write(f"{self.pid}\n")
        run.children.append(self)

    def path(self, f):
        return os.path.join(self.dir, f)

    def alive(self):
        return self.p.poll() is None

    def touch(self, f):
        open(self.path(f), "w").close()

    def tail(self, n=3):
        return " | ".join(read(self.log).strip().splitlines()[-n:])[-400:]

    def wait(self, secs):
        try:
            self.p.wait(timeout=max(secs, 0.01))
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self):
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.wait(10)

    def result(self):
        rs = [x for x in read(self.log).splitlines() if x.startswith("RESULT ")]
        return json.loads(rs[-1][7:]) if rs else {"error": "no RESULT: " + self.tail()}


class Burster:
    def __init__(self, run, size, mode):
        run.nb += 1
        self.size, self.mode, self.seq, self.n = size, mode, 0, run.nb
        self.c = Child(run, f"B{run.nb}", "hold", size, mode, 900, cg=run.cg.path if run.cg else None)
        self.pid = self.c.pid

    def ready(self, secs):
        if not wait_for(self.c.path("ready"), secs, self.c.alive):
            raise RuntimeError(f"B not ready within {secs} s: {self.c.tail()}")
        self.info = get(self.c.path("ready"))
        self.base = self.info["base_gbps"]
        return self.info

    def cmd(self, cmd, secs=30):
        self.seq += 1
        put(self.c.path("ctl"), dict(seq=self.seq, cmd=cmd))
        end = now() + secs
        while now() < end and self.c.alive():
            a = get(self.c.path("ack"))
            if a and a.get("seq") == self.seq:
                if cmd in ("busy", "idle"):
                    self.mode = cmd
                return a
            time.sleep(0.01)
        raise RuntimeError(f"B did not {cmd} within {secs} s: {self.c.tail()}")

    def passes(self):
        return parse_passes(read(self.c.log))

    def recovered(self, since, secs):
        """Wait for two passes begun after `since` at >= 90 % of B's first rate."""
        end = now() + secs
        while self.mode == "busy" and since is not None:
            if len([p for p in self.passes() if p[0] >= since and p[2] >= 0.9 * self.base]) >= 2:
                return True
            if now() >= end or not self.c.alive():
                return False
            time.sleep(0.05)
        return True

    def stop(self):
        try:
            self.cmd("stop", 5)
        except RuntimeError:
            pass
        if not self.c.wait(20):  # B checks its data before it exits
            self.c.kill()
        return self.c.result()


# ------------------------------------------------------------------ the report's lines
def fmt_role(e):
    if not e:
        return "-"
    py = f", pynvml {e['pynvml_mib']}" if "pynvml_mib" in e else ""
    return (f"smi {e.get('smi_mib')}, nvml {e.get('nvml_mib')}{py} MiB; VmRSS {e.get('VmRSS')} "
            f"(anon {e.get('RssAnon')}, shmem {e.get('RssShmem')}, pinned {e.get('VmPin')}) MiB")


def fmt_snap(s):
    cg = s.get("B_cgroup") or {}
    cgs = ", ".join(f"{k} {v}" for k, v in cg.items() if k not in ("path", "own", "current_mib"))
    return (f"[{s['label']}] NVML used {s.get('nvml_used_mib')} MiB (smi {s.get('smi_used_mib')}); "
            f"B: {fmt_role(s.get('B'))}; A: {fmt_role(s.get('A'))}; "
            f"B's cgroup{'' if cg.get('own') else ' (shared)'}: {cg.get('current_mib')} MiB ({cgs}); "
            f"host available {s.get('host', {}).get('MemAvailable')} MiB"
            + (f"; other compute processes (smi, pid: MiB) {s['other_apps']}" if s.get("other_apps") else ""))


def fmt_round(r):
    a = r.get("a") or {}
    t = a.get("alloc_ms", a.get("alloc_total_ms"))
    s = f"round {r['round']}: A got {a.get('got_gib')} of {a.get('asked_gib')} GiB in {t} ms"
    if a.get("chunk_ms") and len(a["chunk_ms"]) > 1:
        s += f" (slowest 1 GiB {max(a['chunk_ms'])} ms, {sum(x > 10 for x in a['chunk_ms'])} over 10 ms)"
    s += f", fill {a.get('fill_ms')} ms"
    if a.get("error") or r.get("error"):
        s += f"; ERROR {a.get('error') or r.get('error')}"
    if "prefetch_s" in r:
        s += f"; B's prefetch back {r['prefetch_s']} s"
    return s + f"; NVML max {r.get('nvml_max_mib')} MiB"


def summarise(rs, busy_b=None):
    """Per-round B figures from B's passes, and the case's figures."""
    if busy_b is not None:
        ps = busy_b.passes()
        for j, r in enumerate(rs):
            if "t_exit" in r:
                nxt = rs[j + 1].get("t_go") if j + 1 < len(rs) else None
                r["b"] = b_stats(ps, r["t_go"], r["t_exit"], busy_b.base, nxt)
    a = [r.get("a") or {} for r in rs]
    ok = [x.get("alloc_ms", x.get("alloc_total_ms")) for x in a if x and not x.get("error")]
    s = dict(rounds=len(rs), alloc_ms=[x.get("alloc_ms", x.get("alloc_total_ms")) for x in a],
             p50_ms=pct(ok, 50), p99_ms=pct(ok, 99), max_ms=max(ok) if ok else None,
             fill_ms=[x.get("fill_ms") for x in a], oom_rounds=sum(bool(x.get("oom")) for x in a),
             errors=[x.get("error") or r.get("error") for x, r in zip(a, rs) if x.get("error") or r.get("error")],
             a_ctx_s=[(r.get("a_ready") or {}).get("ctx_s") for r in rs],
             nvml_round_max_mib=[r.get("nvml_max_mib") for r in rs])
    if any(len(x.get("chunk_ms") or []) > 1 for x in a):
        s["slowest_chunk_ms"] = [max(x["chunk_ms"]) if x.get("chunk_ms") else None for x in a]
        s["chunks_over_10ms"] = [sum(c > 10 for c in x.get("chunk_ms") or []) for x in a]
    if busy_b is not None:
        for k in ("during_min_gbps", "during_mean_gbps", "recover_s", "after_gbps"):
            s["b_" + k] = [(r.get("b") or {}).get(k) for r in rs]
    return s


def fmt_summary(s):
    n = s["rounds"] - len(s["errors"])
    return (f"A's allocation, {n} of {s['rounds']} rounds without error (nearest rank): p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, "
            f"max {s['max_ms']} ms; out of memory in {s['oom_rounds']}; other errors "
            f"{len(s['errors']) - s['oom_rounds'] if s['errors'] else 0}")


def fmt_b(b):
    return (f"B during {b.get('during_min_gbps')} GB/s slowest, {b.get('during_mean_gbps')} overall "
            f"({b.get('during_passes')} passes); >= 90 % again {b.get('recover_s')} s after A's exit, "
            f"then {b.get('after_gbps')} GB/s")


def fmt_drv(r):
    a = r.get("a") or {}
    keys = ("ctx_ms", "free_after_ctx_gib", "alloc_ms", "create_ms", "reserve_ms", "map_ms", "access_ms",
            "alloc_async_ms", "stream_sync_ms", "alloc_total_ms", "fill_ms", "free_after_gib")
    e = a.get("error") or r.get("error")
    return (f"got {a.get('got_gib')} of {a.get('asked_gib')} GiB; "
            + ", ".join(f"{k} {a[k]}" for k in keys if k in a)
            + (f"; ERROR {e}" if e else "; no error") + f"; NVML max {r.get('nvml_max_mib')} MiB")


def pick(r):
    a = {k: v for k, v in (r.get("a") or {}).items() if not k.startswith("t_")}
    out = dict(a=a, a_ready=r.get("a_ready"), nvml_max_mib=r.get("nvml_max_mib"))
    for k in ("error", "b"):
        if r.get(k):
            out[k] = r[k]
    return out


# ------------------------------------------------------------------ the cases
class Runner:
    def __init__(self, out, tmp, limit):
        self.out, self.tmp, self.t0, self.limit = out, tmp, now(), limit
        self.deadline = self.t0 + limit
        self.children, self.nb, self.na, self.b, self.last_exit = [], 0, 0, None, None
        self.snaps, self.res, self.single_rounds, self.single_est, self.kill_curve = [], {}, [], None, []
        try:
            self.nv, self.nv_note = Nvml(), None
        except OSError as e:
            self.nv, self.nv_note = None, "NVML n/a: " + err_text(e)
        self.pyn = PyNvml()
        self.sampler = Sampler(self.nv)
        self.sampler.start()
        self.cg, self.cg_note = make_cg(tmp)
        self.bcg, self.total_mib, self.idle_used, self.host0, self.dl = None, None, None, None, self.deadline

    def rel(self, t):
        return None if t is None else round(t - self.t0, 2)

    def case_dl(self, name, stretch=1.0):
        """When the case must end: its budget from now, and never into what
        the later cases were promised (of which a stretch may take a quarter)."""
        i = [n for n, _ in PLAN].index(name)
        later = sum(b for _, b in PLAN[i + 1:])
        return min(now() + PLAN[i][1] * stretch, self.deadline - later * (0.75 if stretch > 1 else 1.0))

    def left(self, cap):
        """A wait's bound: at most cap, and not past the case's end."""
        return max(1.0, min(cap, self.dl - now()))

    def slack_dl(self, name):
        i = [n for n, _ in PLAN].index(name)
        return self.deadline - sum(b for _, b in PLAN[i + 1:])

    def used(self):
        return self.nv.mem()[0] if self.nv else None

    def a_torch(self, gib, chunk):
        self.na += 1
        return Child(self, f"A{self.na}", "tgrab", gib, chunk, 60)

    def a_drv(self, how, gib):
        self.na += 1
        return Child(self, f"A{self.na}", "dgrab", how, gib, 60)

    def snapshot(self, label, roles):
        u = smi_gpu("memory.used")
        s = dict(label=label, t=self.rel(now()), smi_used_mib=int(u) if u.isdigit() else None,
                 nvml_used_mib=self.used())
        apps = smi_apps()
        nvp, fn = self.nv.procs() if self.nv else ({}, None)
        pyn = self.pyn.procs()
        for role, pid in roles.items():
            e = dict(pid=pid, smi_mib=apps.get(pid), nvml_mib=nvp.get(pid))
            if isinstance(pyn, dict):
                e["pynvml_mib"] = pyn.get(pid)
            e.update(proc_status(pid))
            s[role] = e
        other = {p: m for p, m in apps.items() if p not in roles.values()}
        if other:  # in another pid namespace NVML names host pids: B is then the largest of these
            s["other_apps"] = other
        s["nvml_procs"], s["nvml_procs_call"] = nvp, fn
        if not isinstance(pyn, dict):
            s["pynvml"] = pyn
        if self.bcg:
            s["B_cgroup"] = self.bcg.stats()
        s["host"] = meminfo()
        self.snaps.append(s)
        print(f"  (snapshot {len(self.snaps)} for case 4: {label})")
        return s

    def ensure_b(self, mode, size="100"):
        b = self.b
        if b and b.c.alive() and b.size == size:
            if b.mode != mode:
                b.cmd(mode, self.left(30))
            return b
        if b:
            self.stop_b()
        b = Burster(self, size, mode)
        self.b = b
        info = b.ready(self.left(90))
        self.res["b_starts"] = self.res.get("b_starts", 0) + 1
        mine = cg_of(b.pid)
        self.bcg = self.cg if self.cg and mine and mine.path == self.cg.path else mine
        print(f"  B{b.n} (pid {b.pid}) ready: {gb(info['bytes'])} GiB managed placed in {info['place_s']} s, "
              f"{info['base_gbps']} GB/s at first, {info['free_gib']} GiB free after; {mode}")
        self.res.setdefault("b", []).append(info)
        return b

    def stop_b(self):
        if self.b:
            r = self.b.stop()
            self.res.setdefault("b_end", []).append(r)
            print(f"  B{self.b.n} stopped: {json.dumps(r)}")
            self.b = None

    def one_round(self, case, i, a, b, lim, snap=False, spawn_next=None, hold=0.5):
        """A (already started) allocates on go; B, if busy, has recovered first."""
        r = dict(round=i + 1)
        if not wait_for(a.path("ready"), max(min(120, lim - now()), 1), a.alive):
            a.kill()
            r.update(error="A not ready: " + a.tail(), fatal=True)
            return r, None
        r["a_ready"] = get(a.path("ready"))
        if b is not None and b.mode == "busy":
            r["b_recovered_before"] = b.recovered(self.last_exit, max(min(20, lim - now()), 0))
        roles = {"A": a.pid} if b is None else {"B": b.pid, "A": a.pid}
        if snap:
            self.snapshot(f"{case} round {i + 1}: A ready, before its allocation", roles)
        r["t_go"] = now()
        a.touch("go")
        wait_for(a.path("done"), max(lim - now(), 5), a.alive)
        r["a"], t_done = get(a.path("done")), now()
        if r["a"] is None:
            r.update(error=f"A {'still allocating at the case deadline' if a.alive() else 'exited'} after "
                           f"{t_done - r['t_go']:.1f} s: {a.tail()}", fatal=True)
            a.kill()
        elif snap:
            self.snapshot(f"{case} round {i + 1}: A holds what it got", roles)
        time.sleep(max(0, t_done + hold - now()))
        a.touch("release")
        if not a.wait(20):
            a.kill()
            r["a_killed"] = True
        r["t_exit"] = self.last_exit = now()
        r["nvml_max_mib"] = self.sampler.max(r["t_go"], r["t_exit"])
        return r, spawn_next() if spawn_next and now() < lim else None

    def rounds(self, case, b, spawn, nmax, nmin, est, dl, dl_min=None, snap=(), between=None):
        """Up to nmax rounds, each with a fresh A (started while the round
        before it ends), as many as the deadline leaves room for."""
        rs, a, took = [], spawn(), []
        for i in range(nmax):
            lim = dl_min if dl_min and i < nmin else dl
            if now() + est > lim:
                print(f"  {i} rounds: one more (~{est:.0f} s) would pass the case's budget")
                break
            t = now()
            if b is not None and not b.c.alive():
                print("  B died: starting another")
                b = self.ensure_b(b.mode, b.size)
            r, a = self.one_round(case, i, a, b, lim, i in snap, spawn if i + 1 < nmax else None)
            if between and not r.get("fatal"):
                between(r)
            rs.append(r)
            print(f"  {case} " + fmt_round(r))
            took.append(now() - t)
            est = max(took[-2:])
            if r.get("fatal") or a is None:
                break
        if a is not None:
            a.kill()
        if b is not None:
            b.recovered(self.last_exit, max(min(20, dl - now()), 0))
        return rs, b, (max(took[1:]) if len(took) > 1 else est)

    def finish(self, res, rs, b, target):
        s = summarise(rs, b if b is not None and b.mode == "busy" else None)
        res.update(s, rounds_target=target, t_go_s=[self.rel(r.get("t_go")) for r in rs],
                   t_exit_s=[self.rel(r.get("t_exit")) for r in rs])
        if len(rs) < target:
            res["short_of_target"] = "the case's time budget (or an error, below)"
        for r in rs:
            if r.get("b"):
                print(f"  round {r['round']}, " + fmt_b(r["b"]))
        print("  " + fmt_summary(s))
        return s

    # -- 1: the acceptance shape with PyTorch as A
    def c1_single(self, res):
        b = self.ensure_b("busy")
        self.snapshot("1: B alone, busy", {"B": b.pid})
        rs, b, est = self.rounds("1-single", b, lambda: self.a_torch(50, 0), 10, 5, 22,
                                 self.case_dl("1-single"), self.case_dl("1-single", 1.3), snap={0})
        self.single_rounds, self.single_est = rs, est
        self.finish(res, rs, b, 10)

    def c1_chunks(self, res):
        b = self.ensure_b("busy")
        n = len(self.single_rounds) or 5
        rs, b, _ = self.rounds("1-chunks", b, lambda: self.a_torch(50, 1), n, min(5, n), 10,
                               self.case_dl("1-chunks"))
        self.finish(res, rs, b, n)

    # -- 3: which allocation in A makes the driver evict
    def c3_vmm_pool(self, res):
        b, dl, rs = self.ensure_b("busy"), self.case_dl("3-vmm-pool"), []
        for how, lim in (("vmm", now() + (dl - now()) / 2), ("pool", dl)):
            r, _ = self.one_round("3-" + how, 0, self.a_drv(how, 50), b, lim)
            rs.append(r)
            print(f"  {how}: " + fmt_drv(r))
        b.recovered(self.last_exit, max(min(20, dl - now()), 0))
        summarise(rs, b)
        for how, r in zip(("vmm", "pool"), rs):
            res[how] = pick(r)
            if r.get("b"):
                print(f"  {how}, " + fmt_b(r["b"]))

    def c3_context(self, res):
        dl = self.case_dl("3-context")
        self.stop_b()
        r, _ = self.one_round("3-context", 0, self.a_drv("ctx", 1), None, min(dl, now() + 10), hold=0)
        res["empty_gpu"] = pick(r)
        print("  no B: " + fmt_drv(r))
        b = self.ensure_b("idle", "full:64")
        self.snapshot("3: B idle, its managed memory fills the GPU", {"B": b.pid})
        r, _ = self.one_round("3-context", 1, self.a_drv("ctx", 1), b, dl, snap=True, hold=0)
        res["full_gpu"] = pick(r)
        print("  GPU full of B: " + fmt_drv(r))
        self.stop_b()

    # -- 2: B idle against B busy
    def c2_idle(self, res):
        b = self.ensure_b("idle")
        res["prefetch_s_first"] = b.cmd("prefetch", self.left(60)).get("secs")
        self.snapshot("2: B alone, idle, all prefetched", {"B": b.pid})

        def back(r):  # nothing pulls an idle B's pages back but a prefetch
            r["prefetch_s"] = b.cmd("prefetch", self.left(60)).get("secs")
        rs, b, _ = self.rounds("2-idle", b, lambda: self.a_torch(50, 0), 2, 2, 22, self.case_dl("2-idle"),
                               snap={0, 1}, between=back)
        res["idle"] = summarise(rs)
        res["idle"]["prefetch_s"] = [r.get("prefetch_s") for r in rs]
        print("  B idle: " + fmt_summary(res["idle"]))
        est, slack = self.single_est or 22, self.slack_dl("2-idle")
        if now() + 2 * est + 5 < slack:
            b.cmd("busy", self.left(30))
            b.recovered(now(), 20)
            rs2, b, _ = self.rounds("2-busy", b, lambda: self.a_torch(50, 0), 2, 2, est, slack)
            res["busy"], res["busy_from"] = summarise(rs2, b), "this case: the same B, switched to busy"
            for r in rs2:
                print(f"  busy round {r['round']}, " + fmt_b(r.get("b") or {}))
        else:
            res["busy"] = summarise(self.single_rounds[:2]) if self.single_rounds else None
            res["busy_from"] = "case 1-single's rounds 1-2 (the same B and A; no time left for rounds of its own)"
        if res["busy"]:
            print(f"  B busy ({res['busy_from']}): " + fmt_summary(res["busy"]))
        res["b_check"] = b.cmd("check", self.left(60))
        print(f"  B's data after the case consistent: {res['b_check'].get('consistent')} "
              f"({res['b_check'].get('secs')} s to check)")

    # -- 5: a killed burster's memory
    def c5_kill(self, res):
        dl = self.case_dl("5-kill")
        b = self.ensure_b("idle")
        res["prefetch_s"] = b.cmd("prefetch", self.left(60)).get("secs")
        r, _ = self.one_round("5-kill", 0, self.a_drv("chunks", 50), b, min(dl, now() + 30), snap=True)
        print("  A1 (50 x 1 GiB cuMemAlloc) " + fmt_round(r))
        res["spill"] = pick(r)
        s = self.snapshot("5: B idle, partly spilled; A1 gone", {"B": b.pid})
        a2 = self.a_drv("waitfree", 90)
        if not wait_for(a2.path("ready"), 60, a2.alive):
            raise RuntimeError("A2 not ready: " + a2.tail())
        procs = self.nv.procs()[0] if self.nv else {}
        thr = (self.idle_used or 0) + (procs.get(a2.pid) or 1024) + 256
        # B's entry in NVML's list: its pid, or where NVML names pids of another
        # namespace, the largest entry (B holds ~90 GiB, A2 a context)
        bpid = b.pid if b.pid in procs else max(procs, key=lambda p: procs[p] or 0, default=None)
        cur = self.bcg.current if self.bcg else (lambda: None)
        res["before_kill"] = dict(nvml_used_mib=self.used(), b_nvml_mib=procs.get(bpid), b_nvml_pid=bpid,
                                  b_pid=b.pid, a2_nvml_mib=procs.get(a2.pid), nvml_procs=procs,
                                  nvml_free_below_mib=thr, host_avail_mib=meminfo().get("MemAvailable"),
                                  b_cgroup_mib=cur(), b_smi_mib=(s.get("B") or {}).get("smi_mib"))
        want = {"b_reaped_s", "a_done_s"} | ({"nvml_free_s"} if self.nv else set()) | \
            ({"b_gone_from_nvml_s"} if bpid is not None else set())
        marks, curve = {}, []
        t_kill = now()
        os.kill(b.pid, signal.SIGKILL)
        a2.touch("go")
        self.b = None
        while now() < min(t_kill + 40, max(dl, t_kill + 10)):
            t, u, host = now() - t_kill, self.used(), meminfo().get("MemAvailable")
            curve.append((round(t, 3), u, host, cur()))

            def mark(k, cond):
                if k not in marks and cond:
                    marks[k] = round(t, 3)
            mark("b_reaped_s", b.c.p.poll() is not None)
            if self.nv:
                mark("b_gone_from_nvml_s", bpid is not None and bpid not in self.nv.procs()[0])
                # once A2 has its 90 GiB they count too
                mark("nvml_free_s", u is not None and u <= thr + (90 * 1024 if "a_done_s" in marks else 0))
            mark("host_back_s", host is not None and self.host0 is not None and host >= self.host0 - 2048)
            d = get(a2.path("done"))
            if d and "a_done_s" not in marks:
                mark("a_done_s", True)
                res["a2"] = pick(dict(a=d))["a"]
                marks["a_alloc_s"] = None if d.get("error") else round(d["t_alloc1"] - t_kill, 3)
                if d.get("t_free_seen"):
                    marks["a_free_seen_s"] = round(d["t_free_seen"] - t_kill, 3)
            if want <= set(marks):
                break
            time.sleep(0.01)
        res.update(after_kill=marks, not_seen=sorted(want - set(marks)), curve_at=[
            (t, c[1], c[2], c[3]) for t, c in curve_at([(c[0], c) for c in curve], [0, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 40])])
        self.kill_curve = curve
        a2.touch("release")
        if not a2.wait(15):
            a2.kill()
        bk = res["before_kill"]
        print(f"  before the kill: NVML used {bk['nvml_used_mib']} MiB, B's figure {bk['b_nvml_mib']} MiB (smi "
              f"{bk['b_smi_mib']}) of its {gb(b.info['bytes'])} GiB; host available {bk['host_avail_mib']} MiB; "
              f"B's cgroup {bk['b_cgroup_mib']} MiB")
        print(f"  after SIGKILL (s): B reaped {marks.get('b_reaped_s')}; gone from NVML's list "
              f"{marks.get('b_gone_from_nvml_s')}; NVML used <= {thr} MiB {marks.get('nvml_free_s')}; A2's 90 GiB "
              f"allocated {marks.get('a_alloc_s')} (free memory covered it at {marks.get('a_free_seen_s')}); host "
              f"available back within 2 GiB of the start {marks.get('host_back_s')}; not seen within the wait: "
              f"{res['not_seen'] or 'none'}")
        print("  (s after the kill, NVML used MiB, host available MiB, B's cgroup MiB): "
              + "; ".join(f"{x[0]}: {x[1]}, {x[2]}, {x[3]}" for x in res["curve_at"]))

    # -- the run
    def case(self, name, title, fn):
        print(f"\n== {name}: {title}")
        self.res = res = dict(case=name)
        self.dl, t = self.case_dl(name), now()
        try:
            fn(res)
        except Exception as e:  # noqa: BLE001 -- recorded; the next case runs
            tb = traceback.extract_tb(e.__traceback__)[-1]
            res["error"] = f"{err_text(e)} (line {tb.lineno}, in {tb.name})"
            print("  CASE FAILED: " + res["error"])
        except BaseException:  # a signal: what the case has so far still goes into the report
            res["error"] = "interrupted"
            result(**res)
            raise
        for c in self.children:  # the case's A processes; B may serve the next case
            if c.alive() and (self.b is None or c is not self.b.c):
                c.kill()
        res.update(wall_s=round(now() - t, 1), nvml_max_used_mib=self.sampler.max(t), total_mib=self.total_mib)
        print(f"  NVML max used during the case: {res['nvml_max_used_mib']} of {self.total_mib} MiB; "
              f"{res['wall_s']} s")
        result(**res)

    def preamble(self):
        print(f"burst-facts2 {time.strftime('%Y-%m-%d %H:%M:%S')} (t0 = {self.t0:.3f}; B's pass lines in the raw "
              f"logs are in the same clock); limit {self.limit:.0f} s{'; FAKE run, no GPU' if FAKE else ''}")
        m = meminfo()
        self.host0 = m.get("MemAvailable")
        print(f"host memory available: {self.host0} MiB; GPU: {smi_gpu('name,driver_version,memory.total')}")
        self.idle_used, self.total_mib = self.nv.mem() if self.nv else (None, None)
        print(f"NVML ({'memory info v2' if self.nv and self.nv.v2 else 'memory info v1'}): {self.idle_used} of "
              f"{self.total_mib} MiB used; nvidia-smi: {smi_gpu()}; {self.nv_note or 'NVML per-process: ctypes'}; "
              f"{self.pyn.why or 'pynvml present'}")
        apps = smi_apps()
        print(f"compute processes already on the GPU: {apps or 'none'}")
        print(self.cg_note)
        print("Rounds: A is started and makes its context, then B (if busy) has run two passes at >= 90 % of its "
              "first rate, then A is told to go; A's time is its allocation alone. Times in RESULT lines are "
              "seconds from t0 unless named _ms.")

    def run(self):
        self.preamble()
        for name, title, fn in (
                ("1-single", "B 100 GiB managed, busy; A in PyTorch: one torch.empty of 50 GiB, then fill_; "
                             "B runs on across the rounds", self.c1_single),
                ("1-chunks", "the same, A in 50 torch.empty of 1 GiB", self.c1_chunks),
                ("3-vmm-pool", "B busy; A takes 50 GiB by cuMemCreate+cuMemAddressReserve+cuMemMap+cuMemSetAccess, "
                               "then by cuMemAllocAsync (the default pool's growth)", self.c3_vmm_pool),
                ("2-idle", "B 100 GiB managed, idle (no kernel); A one torch.empty of 50 GiB, 2 rounds, "
                           "then against B busy", self.c2_idle),
                ("5-kill", "B 100 GiB managed, idle, partly spilled by A1's 50 x 1 GiB; SIGKILL; A2 waits for "
                           "90 GiB", self.c5_kill),
                ("3-context", "a new context in A, on a GPU without B and on one full of B's managed memory; then "
                              "1 GiB", self.c3_context)):
            self.case(name, title, fn)

    def case4(self):
        print("\n== 4-nvml: what nvidia-smi, NVML, pynvml, /proc/<pid>/status and B's memory cgroup showed "
              "(snapshots from the cases above; MiB)")
        for s in self.snaps:
            print("  " + fmt_snap(s))
        result(case="4-nvml", cgroup=self.cg_note, pynvml=self.pyn.why, snapshots=self.snaps)

    def close(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.res = {}
        try:
            self.case4()
            if self.b is not None:
                self.b.c.kill() if now() > self.deadline - 10 else self.stop_b()
        finally:
            for c in self.children:
                c.kill()
            end = now() + max(3, min(15, self.deadline + 15 - now()))
            while self.nv and self.idle_used is not None and now() < end and (self.used() or 0) > self.idle_used + 256:
                time.sleep(0.2)
            print(f"\nGPU at the end: NVML {self.used()} MiB used (at the start {self.idle_used}); nvidia-smi "
                  f"{smi_gpu()}; compute processes: {smi_apps() or 'none'}")
            self.sampler.halt.set()
            raw = os.path.join(self.out, "burst-facts2-raw")
            os.makedirs(raw, exist_ok=True)
            for c in self.children:
                shutil.copy(c.log, f"{raw}/{c.name}.log")
            with open(raw + "/nvml-used.txt", "w") as f:
                f.write("# s from t0, NVML used MiB, every 100 ms\n")
                f.writelines(f"{t - self.t0:.2f} {u}\n" for t, u in list(self.sampler.s))
            with open(raw + "/kill-curve.txt", "w") as f:
                f.write("# s after the SIGKILL, NVML used MiB, host MemAvailable MiB, B's cgroup MiB\n")
                f.writelines(" ".join(str(x) for x in c) + "\n" for c in self.kill_curve)
            if self.cg:
                try:
                    os.rmdir(self.cg.path)
                except OSError as e:
                    print(f"B's cgroup {self.cg.path} not removed: {err_text(e)}")
            print(f"wall {now() - self.t0:.0f} s; raw logs in {raw}")


def selftest():
    ten = list(range(1, 11))
    assert pct(ten, 50) == 5 and pct(ten, 99) == 10 and pct([], 50) is None and pct([7], 99) == 7
    assert pct([3, None, 1], 50) == 1 and med([1, 2, None, 4]) == 2
    assert W.parse_size("100", 0) == 100 * GIB and W.parse_size("0.5", 0) == GIB // 2
    assert W.parse_size("full:64", 10 * GIB + 65 * MIB) == 10 * GIB and W.parse_size("full:64", MIB) == 0
    assert parse_passes("pass 1.0 1.5 100.0\nnoise\npass 2 3 x\npass 2.0 2.5 50.0\n") == [
        (1.0, 1.5, 100.0), (2.0, 2.5, 50.0)]
    # B at full speed, one slow pass across A's allocation and hold, full speed after
    base = 1696.0
    ps = [(t / 10, t / 10 + 0.1, base) for t in range(100)] + [(10.0, 24.5, 14.0)] + \
        [(24.5 + k * 0.12, 24.62 + k * 0.12, base) for k in range(20)]
    st = b_stats(ps, 10.05, 24.0, base)
    assert st["during_min_gbps"] == 14.0 and st["during_passes"] == 1 and st["during_mean_gbps"] == 14.0, st
    assert st["recover_s"] == 0.62 and st["after_gbps"] == base, st
    st = b_stats(ps, 9.95, 24.0, base, t_next=24.7)  # a full-speed pass overlaps the go; the next round cuts
    assert st["during_passes"] == 2 and st["during_mean_gbps"] == round(2 / (1 / base + 1 / 14.0), 1), st
    assert st["after_gbps"] == base and b_stats(ps, 10.05, 24.0, 1e9)["recover_s"] is None
    assert parse_apps("123, 4567\n89, [N/A]\nNo running processes found\n") == {123: 4567, 89: None}
    assert kv_mib("VmRSS:\t  2048 kB\nVmPin:\t0 kB\nName: x\n", ("VmRSS", "VmPin")) == {"VmRSS": 2.0, "VmPin": 0.0}
    assert kv_mib("anon 1073741824\nfile 0\n", ("anon",), unit_kb=False) == {"anon": 1024.0}
    assert curve_at([(0, 5), (0.1, 4), (0.3, 1)], [0, 0.2, 1]) == [(0, 5), (0.2, 4), (1, 1)]
    # five rounds and an out-of-memory one: the figures and their line
    rs = [dict(round=i + 1, a=dict(alloc_ms=v, got_gib=50, asked_gib=50, fill_ms=25, error=None, oom=False),
               a_ready={"ctx_s": 0.4}, nvml_max_mib=143153) for i, v in enumerate([15240, 14000, 16100, 15500, 15000])]
    rs.append(dict(round=6, a=dict(alloc_ms=2.0, got_gib=0, asked_gib=50, error="OutOfMemoryError: CUDA out of memory",
                                   oom=True)))
    s = summarise(rs)
    assert (s["p50_ms"], s["p99_ms"], s["max_ms"], s["oom_rounds"], s["rounds"]) == (15240, 16100, 16100, 1, 6), s
    assert "5 of 6 rounds without error (nearest rank): p50 15240 ms" in fmt_summary(s) and "out of memory in 1; other errors 0" in fmt_summary(s)
    assert "ERROR OutOfMemoryError" in fmt_round(rs[-1]) and "in 15240 ms" in fmt_round(rs[0])
    ch = dict(round=1, a=dict(alloc_ms=2027.4, got_gib=50, asked_gib=50, chunk_ms=[0.2] * 38 + [150.0] * 12))
    assert "slowest 1 GiB 150.0 ms, 12 over 10 ms" in fmt_round(ch)
    assert summarise([ch])["chunks_over_10ms"] == [12]
    d = dict(a=dict(how="vmm", asked_gib=50, got_gib=0, create_ms=2.1, error="cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (2)",
                    t_alloc0=1.0), nvml_max_mib=1)
    assert "create_ms 2.1" in fmt_drv(d) and "ERROR cuMemCreate" in fmt_drv(d) and "t_alloc0" not in pick(d)["a"]
    buf = io.StringIO()
    with redirect_stdout(buf):
        result(case="x", **s)
    assert json.loads(buf.getvalue().split("RESULT ", 1)[1])["p50_ms"] == 15240
    snap = dict(label="l", nvml_used_mib=1, smi_used_mib="1", B=dict(pid=1, smi_mib=2, nvml_mib=3, VmRSS=4),
                B_cgroup=dict(path="p", own=True, current_mib=5, anon=6), host={"MemAvailable": 7})
    line = fmt_snap(snap)
    assert "smi 2, nvml 3 MiB; VmRSS 4" in line and "B's cgroup: 5 MiB (anon 6)" in line and "A: -" in line, line
    # the plan fits the wrapper's limit; a case never takes what later ones were promised
    assert sum(b for _, b in PLAN) <= 400

    class R:
        deadline = now() + 400
    assert abs(Runner.case_dl(R, "1-single") - (now() + 160)) < 1
    R.deadline = now() + 300  # 100 s lost before the cases: the first gives them up
    assert Runner.case_dl(R, "1-single") <= R.deadline - 240 + 0.01
    assert Runner.case_dl(R, "1-single", 1.3) <= R.deadline - 240 * 0.75 + 0.01
    assert abs(Runner.case_dl(R, "3-context") - (now() + 30)) < 1 and Runner.slack_dl(R, "3-context") == R.deadline
    print("selftest ok")


def main():
    sys.stdout.reconfigure(line_buffering=True)
    if sys.argv[1:2] == ["--selftest"]:
        return selftest()
    if len(sys.argv) < 4 or sys.argv[1] != "run":
        sys.exit(__doc__)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    r = Runner(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 430)
    try:
        r.run()
    finally:
        r.close()


if __name__ == "__main__":
    main()
