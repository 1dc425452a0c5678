#!/usr/bin/env python3
"""What burst-facts2.py reads on the host while its cases run: NVML (through
ctypes, so that the reader makes no CUDA context), nvidia-smi, /proc and the
memory cgroup B runs in. No GPU work here."""
import ctypes as C, importlib.util, os, subprocess, threading

_spec = importlib.util.spec_from_file_location(
    "burst_facts2_work", os.path.join(os.path.dirname(os.path.abspath(__file__)), "burst-facts2-work.py"))
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)
MIB, FAKE, now, err_text = W.MIB, W.FAKE, W.now, W.err_text


# ------------------------------------------------------------------ host side: NVML, /proc, cgroups
class NvMem(C.Structure):
    _fields_ = [("total", C.c_ulonglong), ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


class NvMem2(C.Structure):
    _fields_ = [("version", C.c_uint), ("total", C.c_ulonglong), ("reserved", C.c_ulonglong),
                ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


class NvProc(C.Structure):  # nvmlProcessInfo_t of the _v2 and _v3 calls
    _fields_ = [("pid", C.c_uint), ("used", C.c_ulonglong), ("gi", C.c_uint), ("ci", C.c_uint)]


class Nvml:
    """NVML through ctypes, so that the orchestrator makes no CUDA context.
    Used memory from nvmlDeviceGetMemoryInfo_v2 (nvidia-smi's figure) where
    the driver has it, else v1 (which counts the reserved memory as used)."""
    def __init__(self):
        l = self.l = C.CDLL("libnvidia-ml.so.1")
        if l.nvmlInit_v2():
            raise OSError("nvmlInit_v2 failed")
        self.h = C.c_void_p()
        if l.nvmlDeviceGetHandleByIndex_v2(0, C.byref(self.h)):
            raise OSError("nvmlDeviceGetHandleByIndex_v2(0) failed")
        self.v2 = self._mem2() is not None

    def _mem2(self):
        f = getattr(self.l, "nvmlDeviceGetMemoryInfo_v2", None)
        m = NvMem2(version=C.sizeof(NvMem2) | (2 << 24))
        return m if f is not None and f(self.h, C.byref(m)) == 0 else None

    def mem(self):
        """(used, total) in MiB"""
        m = self._mem2() if self.v2 else None
        if m is None:
            m = NvMem()
            if self.l.nvmlDeviceGetMemoryInfo(self.h, C.byref(m)):
                return None, None
        return m.used >> 20, m.total >> 20

    def procs(self):
        """({pid: MiB or None}, the call that answered)"""
        for fn in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"):
            f = getattr(self.l, fn, None)
            n, arr = C.c_uint(64), (NvProc * 64)()
            if f is not None and f(self.h, C.byref(n), arr) == 0:
                return {arr[i].pid: None if arr[i].used >= 1 << 63 else arr[i].used >> 20
                        for i in range(min(n.value, 64))}, fn
        return {}, None


class PyNvml:
    """pynvml's per-process figure too, where it is installed."""
    def __init__(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            self.m, self.h, self.why = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), None
        except Exception as e:  # noqa: BLE001 -- absent or failing: say so in the report
            self.m, self.why = None, "pynvml n/a: " + err_text(e)[:100]

    def procs(self):
        if self.m is None:
            return self.why
        try:
            return {p.pid: None if p.usedGpuMemory is None else p.usedGpuMemory >> 20
                    for p in self.m.nvmlDeviceGetComputeRunningProcesses(self.h)}
        except Exception as e:  # noqa: BLE001
            return "pynvml: " + err_text(e)[:100]


def sh(cmd, secs=10):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=secs).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def parse_apps(out):
    apps = {}
    for line in out.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 2 and f[0].isdigit():
            apps[int(f[0])] = int(f[1]) if f[1].isdigit() else None
    return apps


def smi_apps():
    return parse_apps(sh(["nvidia-smi", "-i", "0", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"]))


def smi_gpu(q="memory.used,memory.total"):
    return sh(["nvidia-smi", "-i", "0", "--query-gpu=" + q, "--format=csv,noheader,nounits"]).strip()


def kv_mib(text, keys, unit_kb=True):
    out = {}
    for line in text.splitlines():
        f = line.replace(":", " ").split()
        if len(f) >= 2 and f[0] in keys and f[1].isdigit():
            out[f[0]] = round(int(f[1]) / (1024 if unit_kb else MIB), 1)
    return out


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def proc_status(pid):
    return kv_mib(read(f"/proc/{pid}/status"), ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmPin", "VmLck", "VmSwap"))


def meminfo():
    return kv_mib(read("/proc/meminfo"), ("MemAvailable", "MemFree"))


class Cg:
    def __init__(self, path, v2, own):
        self.path, self.v2, self.own = path, v2, own

    def current(self):
        t = read(self.path + ("/memory.current" if self.v2 else "/memory.usage_in_bytes")).strip()
        return round(int(t) / MIB, 1) if t.isdigit() else None

    def stats(self):
        keys = ("anon", "file", "kernel", "shmem", "unevictable") if self.v2 else \
            ("rss", "cache", "shmem", "mapped_file", "unevictable")
        return dict(path=self.path, own=self.own, current_mib=self.current(),
                    **kv_mib(read(self.path + "/memory.stat"), keys, unit_kb=False))


def cg_v2():
    return os.path.exists("/sys/fs/cgroup/cgroup.controllers")


def make_cg(tmp):
    """A memory cgroup for B alone, so that its figure is B's."""
    if FAKE and not os.environ.get("BF2_CG"):
        return None, "no cgroup of B's own in a fake run"
    v2 = cg_v2()
    base = "/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/memory"
    try:
        if v2 and "memory" not in read(base + "/cgroup.subtree_control").split():
            return None, f"memory controller not enabled in {base}: B's figure is its parent's cgroup"
        p = f"{base}/gq-burst-facts2-{os.getpid()}"
        os.mkdir(p)
        with open(tmp + "/cgroup", "w") as f:
            f.write(p)
        return Cg(p, v2, True), f"B runs in a memory cgroup of its own, {p} (cgroup {'v2' if v2 else 'v1'})"
    except OSError as e:
        return None, f"no memory cgroup of B's own ({err_text(e)}): B's figure is its parent's cgroup"


def cg_of(pid):
    v2 = cg_v2()
    for line in read(f"/proc/{pid}/cgroup").splitlines():
        h, ctl, path = (line.split(":", 2) + ["", ""])[:3]
        if v2 and h == "0":
            return Cg("/sys/fs/cgroup" + path, True, False)
        if not v2 and "memory" in ctl.split(","):
            return Cg("/sys/fs/cgroup/memory" + path, False, False)
    return None


class Sampler(threading.Thread):
    """NVML's used memory every 100 ms, for the maximum over a case or a round."""
    def __init__(self, nv):
        super().__init__(daemon=True)
        self.nv, self.s, self.halt = nv, [], threading.Event()

    def run(self):
        while self.nv is not None and not self.halt.is_set():
            try:
                u = self.nv.mem()[0]
            except Exception:  # noqa: BLE001 -- a missed sample is only a gap
                u = None
            if u is not None:
                self.s.append((now(), u))
            self.halt.wait(0.1)

    def max(self, t0, t1=None):
        xs = [u for t, u in list(self.s) if t >= t0 and (t1 is None or t <= t1)]
        return max(xs) if xs else None
