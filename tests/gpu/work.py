#!/usr/bin/env python3
"""GPU workloads of the H200 suite (tests/gpu/run-suite.sh). Each mode prints
human lines and a final line `RESULT {json}`; exit 0 = check passed.
Run on the host (under LD_PRELOAD) or inside a container (via /etc/ld.so.preload)."""
import json, os, sys, time, argparse

GIB = 1 << 30


def result(ok, **kw):
    kw["ok"] = bool(ok)
    print("RESULT " + json.dumps(kw), flush=True)
    return 0 if ok else 1


def ctx_charge():
    """context_overhead_bytes of the container's limits (0 outside a container)."""
    try:
        for line in open("/run/gpu-quota/limits"):
            if line.startswith("context_overhead_bytes="):
                return int(line.split("=", 1)[1])
    except (OSError, ValueError):
        pass
    return 0


def wait_file(path, secs):
    t = time.time()
    while path and time.time() - t < secs:
        if os.path.exists(path):
            return True
        time.sleep(0.1)
    return False


def m_torch(a):
    """mem_get_info total = slice; slice-1 GiB fits; 2 GiB more -> OutOfMemoryError."""
    import torch
    slice_b = int(a.gib * GIB)
    free, total = torch.cuda.mem_get_info()
    print("mem_get_info", free, total, "alloc_conf", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), flush=True)
    fit = slice_b - GIB
    x = torch.empty(fit, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
    refused, err = False, ""
    try:
        y = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
        print("2 GiB more was NOT refused", flush=True)
    except torch.OutOfMemoryError as e:
        refused, err = True, str(e).splitlines()[0][:200]
        print("refused as expected:", err, flush=True)
    if a.ready:
        open(a.ready, "w").write(json.dumps({"total": total, "refused": refused}))
    if a.hold:
        wait_file(a.hold, a.hold_secs)
    del x
    torch.cuda.empty_cache()
    again = False
    try:
        z = torch.empty(fit, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); again = True; del z
    except torch.OutOfMemoryError:
        pass
    return result(total == slice_b and refused and again, total=total, free=free, slice=slice_b, fit_gib=fit / GIB,
                  refused=refused, realloc_after_free=again, err=err)


def m_jax(a):
    """default preallocation = 75% of the slice; an array beyond the slice -> RESOURCE_EXHAUSTED."""
    import jax, jax.numpy as jnp
    slice_b = int(a.gib * GIB)
    d = jax.devices()[0]
    s = d.memory_stats() or {}
    lim = s.get("bytes_limit", 0)
    print("device", d, "bytes_limit", lim, "ratio", lim / slice_b, flush=True)
    x = jnp.ones((256, 1024, 1024), jnp.float32).block_until_ready()  # 1 GiB works
    exhausted, err = False, ""
    try:
        n = (slice_b + GIB) // 4
        y = jnp.ones((n,), jnp.float32).block_until_ready()
        print("array beyond the slice was NOT refused", flush=True)
    except Exception as e:  # XlaRuntimeError / JaxRuntimeError
        err = str(e).splitlines()[0][:300]
        exhausted = "RESOURCE_EXHAUSTED" in str(e)
        print("refused:", err, flush=True)
    # XLA takes 75% of cuMemGetInfo's free memory, which excludes the context charge
    ctx = ctx_charge()
    ok = min(abs(lim - 0.75 * slice_b), abs(lim - 0.75 * (slice_b - ctx))) <= 0.01 * slice_b and exhausted
    return result(ok, bytes_limit=lim, slice=slice_b, ratio=lim / slice_b, resource_exhausted=exhausted, err=err,
                  context_charge=ctx)


def m_cupy(a):
    """memGetInfo total = slice; pool allocation beyond it -> OutOfMemoryError."""
    import cupy as cp
    slice_b = int(a.gib * GIB)
    free, total = cp.cuda.runtime.memGetInfo()
    print("memGetInfo", free, total, flush=True)
    x = cp.empty(slice_b - GIB, dtype=cp.uint8)
    refused, err = False, ""
    try:
        y = cp.empty(2 * GIB, dtype=cp.uint8)
        print("2 GiB more was NOT refused", flush=True)
    except cp.cuda.memory.OutOfMemoryError as e:
        refused, err = True, str(e)[:200]
        print("refused:", err, flush=True)
    return result(total == slice_b and refused, total=total, free=free, slice=slice_b, refused=refused, err=err)


def _holder(i, gib, q, release, secs):
    import torch
    ok, err = False, ""
    try:
        t = torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); ok = True
    except Exception as e:  # OutOfMemoryError, or its context refused by the budget
        err = (str(e).splitlines() or [type(e).__name__])[0][:160]
    q.put({"i": i, "pid": os.getpid(), "ok": ok, "err": err})
    wait_file(release, secs)


class _DS:
    """Dataset whose workers each hold `gib` on the GPU (DataLoader-style job)."""
    def __init__(self, gib, release, secs):
        self.gib, self.release, self.secs = gib, release, secs
    def __len__(self):
        return 4
    def __getitem__(self, i):
        import torch
        g = globals()
        if "_held" not in g:
            g["_held"] = None
            try:
                g["_held"] = torch.empty(int(self.gib * GIB), dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
                g["_err"] = ""
            except Exception as e:  # OutOfMemoryError, or its context refused by the budget
                g["_err"] = (str(e).splitlines() or [type(e).__name__])[0][:160]
        wi = torch.utils.data.get_worker_info()
        return {"i": wi.id if wi else 0, "pid": os.getpid(), "ok": g["_held"] is not None, "err": g["_err"]}


def m_procs(a):
    """4 processes each try to hold GIB; the sum of successes stays within the slice.
    Writes a.ready when all have answered, then waits for a.hold before letting them go."""
    import multiprocessing as mp
    slice_b = int(a.gib * GIB)
    res = []
    if a.mode == "dl":
        import torch
        from torch.utils.data import DataLoader
        release = a.hold
        dl = DataLoader(_DS(a.each, None, 0), batch_size=None, num_workers=4, multiprocessing_context="spawn",
                        persistent_workers=True)
        it = iter(dl)
        for _ in range(4):
            res.append(next(it))
        if a.ready:
            open(a.ready, "w").write(json.dumps(res))
        wait_file(release, a.hold_secs)
        del it, dl
    else:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        ps = [ctx.Process(target=_holder, args=(i, a.each, q, a.hold, a.hold_secs)) for i in range(4)]
        for p in ps:
            p.start()
        res = [q.get(timeout=120) for _ in ps]
        if a.ready:
            open(a.ready, "w").write(json.dumps(res))
        for p in ps:
            p.join(a.hold_secs + 30)
    n_ok = sum(r["ok"] for r in res)
    for r in res:
        print("worker", r, flush=True)
    # every holder also holds its context charge; at worst all 4 contexts are charged
    ctx, each = ctx_charge(), int(a.each * GIB)
    most = int(slice_b // (each + ctx))
    least = max(int((slice_b - 4 * ctx) // each), 0)
    return result(least <= n_ok <= most, held_ok=n_ok, expected_ok=[least, most], context_charge=ctx,
                  each_gib=a.each, slice=slice_b, workers=res)


def m_ctx(a):
    """A bare torch process with a tiny tensor: for NVML's per-process context size."""
    import torch
    x = torch.ones(1, device="cuda"); torch.cuda.synchronize()
    if a.ready:
        open(a.ready, "w").write(str(os.getpid()))
    wait_file(a.hold, a.hold_secs)
    return result(True)


def m_devices(a):
    """Every visible device reports the slice."""
    import torch
    n = torch.cuda.device_count()
    tot = []
    for d in range(n):
        with torch.cuda.device(d):
            tot.append(torch.cuda.mem_get_info()[1])
            torch.empty(GIB, dtype=torch.uint8, device=f"cuda:{d}")
    slice_b = int(a.gib * GIB)
    return result(n == a.n and all(t == slice_b for t in tot), device_count=n, totals=tot, slice=slice_b)


def m_resnet(a):
    """Training-step time of torchvision ResNet-50 (else a comparable conv net) on random data."""
    import torch
    torch.backends.cudnn.benchmark = True
    try:
        import torchvision
        model, name = torchvision.models.resnet50(weights=None), "torchvision resnet50"
    except Exception as e:  # noqa
        import torch.nn as nn
        name = f"conv net (torchvision missing: {e})"
        layers, c = [], 3
        for w in (64, 128, 256, 512, 1024, 2048):
            layers += [nn.Conv2d(c, w, 3, 2, 1), nn.BatchNorm2d(w), nn.ReLU()]; c = w
        model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 1000))
    model = model.cuda()
    if a.bf16:
        model = model.to(memory_format=torch.channels_last)
        name += " bf16 autocast"
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 224, 224, device="cuda"); y = torch.randint(0, 1000, (a.batch,), device="cuda")
    if a.bf16:
        x = x.to(memory_format=torch.channels_last)
    lossf = torch.nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.bf16):
            loss = lossf(model(x), y)
        loss.backward(); opt.step()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.steps):
        t = time.perf_counter(); step(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    ts.sort()
    med = ts[len(ts) // 2]
    print(f"{name} batch {a.batch}: median step {med*1e3:.2f} ms over {a.steps}", flush=True)
    return result(True, model=name, batch=a.batch, steps=a.steps, median_ms=med * 1e3, min_ms=ts[0] * 1e3,
                  max_alloc=torch.cuda.max_memory_allocated())


def m_decode(a):
    """Greedy decode loop of a small GPT-style transformer with random weights
    (built here, nothing downloaded), bf16, KV cache: tokens/s."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    V, D, L, H, B = 32000, 768, 12, 12, 8
    hd, dev, dt = D // H, "cuda", torch.bfloat16
    r = lambda *s: (torch.randn(*s, device=dev) * 0.02).to(dt)
    emb = r(V, D)
    layers = [dict(qkv=r(D, 3 * D), o=r(D, D), w1=r(D, 4 * D), w2=r(4 * D, D)) for _ in range(L)]
    T = a.prompt + a.tokens
    kc = torch.zeros(L, B, H, T, hd, device=dev, dtype=dt)
    vc = torch.zeros_like(kc)

    def step(x, pos):
        for i, l in enumerate(layers):
            h = F.layer_norm(x, (D,))
            q, k, v = (h @ l["qkv"]).split(D, dim=-1)
            q, k, v = (t.view(B, 1, H, hd).transpose(1, 2) for t in (q, k, v))
            kc[i, :, :, pos] = k[:, :, 0]
            vc[i, :, :, pos] = v[:, :, 0]
            att = F.scaled_dot_product_attention(q, kc[i, :, :, :pos + 1], vc[i, :, :, :pos + 1])
            x = x + att.transpose(1, 2).reshape(B, 1, D) @ l["o"]
            x = x + F.gelu(F.layer_norm(x, (D,)) @ l["w1"]) @ l["w2"]
        return F.layer_norm(x, (D,)) @ emb.T

    prompt = torch.randint(0, V, (B, a.prompt), device=dev)

    def generate():
        with torch.no_grad():
            for pos in range(a.prompt):
                logits = step(emb[prompt[:, pos]].unsqueeze(1), pos)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for pos in range(a.prompt, T):
                tok = logits[:, -1].argmax(-1)
                logits = step(emb[tok].unsqueeze(1), pos)
            torch.cuda.synchronize()
            return B * a.tokens / (time.perf_counter() - t)
    generate()  # warm-up
    tps = sorted(generate() for _ in range(3))
    print(f"decode {L} layers d={D} batch {B}: {tps[1]:.0f} tokens/s (runs {[round(x) for x in tps]})", flush=True)
    return result(True, tokens_per_s=tps[1], runs=tps, layers=L, d_model=D, batch=B, tokens=a.tokens)


def m_usage(a):
    """Poll a usage file (docs/interceptor.md layout) and print the max container usage of device 0."""
    import mmap, struct
    mx, t0 = 0, time.time()
    while time.time() - t0 < a.hold_secs:
        if a.hold and os.path.exists(a.hold):
            break
        try:
            with open(a.usage_file, "rb") as f:
                b = f.read()
            if len(b) >= 4096 and b[:8] == b"GPUQUOTA":
                hw = struct.unpack_from("<I", b, 40)[0]
                u = sum(struct.unpack_from("<Q", b, 4096 + 256 * i + 64)[0] for i in range(hw))
                mx = max(mx, u)
        except OSError:
            pass
        time.sleep(0.02)
    print(f"USAGE_MAX {mx}", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("--gib", type=float, default=4)
    p.add_argument("--each", type=float, default=3)
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--ready"); p.add_argument("--hold"); p.add_argument("--hold-secs", type=float, default=120)
    p.add_argument("--batch", type=int, default=64); p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5); p.add_argument("--usage-file")
    p.add_argument("--bf16", action="store_true"); p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--tokens", type=int, default=192)
    a = p.parse_args()
    f = {"torch": m_torch, "jax": m_jax, "cupy": m_cupy, "mp": m_procs, "dl": m_procs, "ctx": m_ctx,
         "devices": m_devices, "resnet": m_resnet, "decode": m_decode, "usage": m_usage}[a.mode]
    sys.exit(f(a))


if __name__ == "__main__":
    main()
