#!/usr/bin/env python3
"""Two-GPU jobs of the H200-x2 suite (issue 13), run inside a gpus=2 container.
mgpu.py allreduce|tp|over --out DIR [...]: two processes (mp.spawn, one per
GPU, NCCL, init_method file://). Each rank writes its stderr to
DIR/rank<R>.err (the gpu-quota refusal line lands there) and its result to
DIR/rank<R>.json; the parent prints human lines and `RESULT {json}`; exit 0 =
check passed. Never calls cuMulticastCreate: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are forced here
too (before torch is imported), whatever the caller set."""
import argparse, json, os, sys, tempfile, time

for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[k] = v

WORLD = 2
GiB = 1 << 30


def result(ok, **kw):
    kw["ok"] = bool(ok)
    print("RESULT " + json.dumps(kw), flush=True)
    return 0 if ok else 1


def _init(rank, a):
    fd = os.open(os.path.join(a.out, f"rank{rank}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)  # the interceptor writes its one line to fd 2
    import torch, torch.distributed as dist
    torch.cuda.set_device(rank)
    kw = dict(init_method="file://" + a.rendezvous, rank=rank, world_size=WORLD)
    try:
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank), **kw)
    except TypeError:  # torch < 2.3: no device_id
        dist.init_process_group("nccl", **kw)
    return torch, dist


def _write(a, rank, d):
    d["rank"] = rank
    d["pid"] = os.getpid()
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(d, f)


def _hold(a, rank):
    """Keep the ranks alive (and their NCCL buffers mapped) until the host sampler has looked."""
    if a.hold_file:
        open(f"{a.hold_file}.ready{rank}", "w").close()
        for _ in range(int(a.hold_secs * 10)):
            if os.path.exists(a.hold_file):
                break
            time.sleep(0.1)


def r_allreduce(rank, a):
    torch, dist = _init(rank, a)
    d = {"ok": True, "checked": 0}
    n = (a.mib << 20) // 4
    for it in range(a.iters):
        x = torch.full((n,), float(rank + 1 + it), device="cuda")
        dist.all_reduce(x)
        want = float(sum(r + 1 + it for r in range(WORLD)))
        if not bool((x == want).all()):
            d.update(ok=False, err=f"iteration {it}: got {x[0].item()} want {want}")
            break
        d["checked"] += 1
    torch.cuda.synchronize()
    d["max_allocated"] = torch.cuda.max_memory_allocated()
    d["mem_get_info"] = list(torch.cuda.mem_get_info())
    _hold(a, rank)
    dist.barrier()
    _write(a, rank, d)
    dist.destroy_process_group()


class _ReduceFwd:
    """g of Megatron: all-reduce in forward, identity in backward."""

    @staticmethod
    def make(torch, dist):
        class F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.clone()
                dist.all_reduce(y)
                return y

            @staticmethod
            def backward(ctx, g):
                return g

        return F


def _tp_params(torch, a):
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(a.d, a.h, generator=g) / a.d ** 0.5
    w2 = torch.randn(a.h, a.d, generator=g) / a.h ** 0.5
    xs = torch.randn(a.steps, a.batch, a.d, generator=g)
    teacher = torch.randn(a.d, a.d, generator=g) / a.d ** 0.5
    ys = xs @ teacher  # a learnable target
    return w1, w2, xs, ys


def _mlp_steps(torch, w1, w2, xs, ys, lr, reduce=None):
    """SGD on z = gelu(x w1) w2 against y (mse); w1 column-, w2 row-sharded when reduce is given."""
    losses = []
    for x, y in zip(xs, ys):
        h = torch.nn.functional.gelu(x @ w1)
        z = h @ w2
        if reduce is not None:
            z = reduce(z)
        loss = ((z - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for w in (w1, w2):
                w -= lr * w.grad
                w.grad = None
        losses.append(loss.item())
    return losses


def r_tp(rank, a):
    torch, dist = _init(rank, a)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", rank)
    w1, w2, xs, ys = _tp_params(torch, a)
    s = a.h // WORLD
    w1r = w1[:, rank * s:(rank + 1) * s].clone().to(dev).requires_grad_()
    w2r = w2[rank * s:(rank + 1) * s, :].clone().to(dev).requires_grad_()
    F = _ReduceFwd.make(torch, dist)
    losses = _mlp_steps(torch, w1r, w2r, xs.to(dev), ys.to(dev), a.lr, reduce=F.apply)
    d = {"ok": True, "steps": len(losses), "loss_first": losses[0], "loss_last": losses[-1]}
    # gather the shards on every rank; rank 0 compares with a single-GPU reference
    g1 = [torch.empty_like(w1r) for _ in range(WORLD)]
    g2 = [torch.empty_like(w2r) for _ in range(WORLD)]
    dist.all_gather(g1, w1r.detach().contiguous())
    dist.all_gather(g2, w2r.detach().contiguous())
    if rank == 0:
        rw1 = w1.clone().to(dev).requires_grad_()
        rw2 = w2.clone().to(dev).requires_grad_()
        ref = _mlp_steps(torch, rw1, rw2, xs.to(dev), ys.to(dev), a.lr)
        full1, full2 = torch.cat(g1, dim=1), torch.cat(g2, dim=0)
        e1 = ((full1 - rw1.detach()).abs().max() / rw1.detach().abs().max()).item()
        e2 = ((full2 - rw2.detach()).abs().max() / rw2.detach().abs().max()).item()
        el = max(abs(p - q) / max(abs(q), 1e-12) for p, q in zip(losses, ref))
        d.update(ref_loss_last=ref[-1], rel_err_w1=e1, rel_err_w2=e2, rel_err_loss=el,
                 learned=losses[-1] < losses[0])
        if not (e1 < a.tol and e2 < a.tol and el < a.tol and d["learned"]):
            d["ok"] = False
            d["err"] = f"tensor-parallel result differs from the single-GPU reference (w1 {e1:.2e}, w2 {e2:.2e}, loss {el:.2e})"
    d["max_allocated"] = torch.cuda.max_memory_allocated()
    _hold(a, rank)
    dist.barrier()
    _write(a, rank, d)
    dist.destroy_process_group()


def r_over(rank, a):
    """Rank a.over_rank allocates past its slice: torch.cuda.OutOfMemoryError on that rank only;
    the other rank keeps allocating and both still all-reduce afterwards."""
    torch, dist = _init(rank, a)
    d = {"ok": True, "oom": None}
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    held = []
    if rank == a.over_rank:
        try:
            for _ in range(4 * a.slice_gib + 8):  # 1 GiB steps: far past the slice
                held.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
            d.update(ok=False, err=f"allocated {len(held)} GiB without an OOM")
        except torch.cuda.OutOfMemoryError as e:
            d["oom"] = str(e).splitlines()[0][:300]
            d["held_gib_at_oom"] = len(held)
        open(os.path.join(a.out, "over.done"), "w").close()
    else:
        # the other rank: waits for the OOM, then allocates half its slice
        for _ in range(600):
            if os.path.exists(os.path.join(a.out, "over.done")):
                break
            time.sleep(0.1)
        try:
            for _ in range(a.slice_gib // 2):
                held.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
            d["held_gib"] = len(held)
        except torch.cuda.OutOfMemoryError as e:
            d.update(ok=False, err="the other rank got an OOM: " + str(e).splitlines()[0][:200])
    torch.cuda.synchronize()
    _hold(a, rank)  # the host samples NVML while the over rank holds its slice
    held.clear()
    torch.cuda.empty_cache()
    y = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(y)
    if y[0].item() != float(sum(range(1, WORLD + 1))):
        d.update(ok=False, err=f"all-reduce after the OOM: {y[0].item()}")
    _write(a, rank, d)
    dist.barrier()
    dist.destroy_process_group()


def _tree(root):
    """root and its descendants (host PIDs), from /proc."""
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                st = open(f"/proc/{e}/stat").read()
                kids.setdefault(int(st[st.rindex(")") + 2:].split()[1]), []).append(int(e))
            except (OSError, ValueError):
                pass
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo += kids.get(p, [])
    return out


def m_sample(a):
    """Host side: NVML (nvidia-smi) per GPU, summed over the container's processes,
    every 0.2 s until --stop-file exists; RESULT max MiB per GPU uuid."""
    import subprocess
    peak, n = {}, 0
    end = time.time() + a.secs
    while time.time() < end and not os.path.exists(a.stop_file):
        pids = _tree(a.root_pid)
        q = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30).stdout
        cur = {}
        for line in q.splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) == 3 and f[1].isdigit() and int(f[1]) in pids and f[2].isdigit():
                cur[f[0]] = cur.get(f[0], 0) + int(f[2])
        for u, v in cur.items():
            peak[u] = max(peak.get(u, 0), v)
        n += 1
        time.sleep(0.2)
    lim = a.slice_gib * 1024 * 1.01
    ok = n > 0 and len(peak) >= a.expect_gpus and all(v <= lim for v in peak.values())
    return result(ok, samples=n, peak_mib=peak, limit_mib=lim, gpus_seen=len(peak))


RANKS = {"allreduce": r_allreduce, "tp": r_tp, "over": r_over}


def _rank_main(rank, a):
    try:
        RANKS[a.mode](rank, a)
    except BaseException as e:  # the parent reads the rank's file
        _write(a, rank, {"ok": False, "err": f"{type(e).__name__}: {e}"[:400]})
        raise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=sorted(RANKS) + ["sample"])
    p.add_argument("--out", default="")
    p.add_argument("--mib", type=int, default=256, help="allreduce: tensor size per rank")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--steps", type=int, default=300, help="tp: SGD steps")
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--h", type=int, default=4096)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--over-rank", type=int, default=1)
    p.add_argument("--slice-gib", type=int, default=16)
    p.add_argument("--hold-file", default="", help="ranks wait for this file (FILE.ready: they are holding)")
    p.add_argument("--hold-secs", type=float, default=60)
    p.add_argument("--root-pid", type=int, default=0, help="sample: the container's init (host PID)")
    p.add_argument("--stop-file", default="/nonexistent")
    p.add_argument("--secs", type=float, default=300)
    p.add_argument("--expect-gpus", type=int, default=2, help="sample: GPUs the container's processes must show on")
    a = p.parse_args()
    if a.mode == "sample":
        return m_sample(a)
    if not a.out:
        p.error("--out is required")
    os.makedirs(a.out, exist_ok=True)
    a.rendezvous = os.path.join(tempfile.mkdtemp(prefix="gq-mgpu-"), "rdzv")
    import torch
    import torch.multiprocessing as mp
    n = torch.cuda.device_count()
    if n < WORLD:
        return result(False, err=f"not run: {n} GPU(s) visible")
    t0 = time.time()
    err = None
    try:
        mp.spawn(_rank_main, args=(a,), nprocs=WORLD, join=True)
    except Exception as e:
        err = f"{type(e).__name__}: {str(e)[-300:]}"
    ranks = []
    for r in range(WORLD):
        try:
            ranks.append(json.load(open(os.path.join(a.out, f"rank{r}.json"))))
        except (OSError, ValueError):
            ranks.append({"rank": r, "ok": False, "err": "no result file"})
    for r in ranks:
        print(f"rank {r['rank']}: {json.dumps(r)}")
    ok = err is None and all(r.get("ok") for r in ranks)
    return result(ok, mode=a.mode, secs=round(time.time() - t0, 1), err=err, ranks=ranks)


if __name__ == "__main__":
    sys.exit(main())
