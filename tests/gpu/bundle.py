#!/usr/bin/env python3
"""Write an OCI config.json for the H200 suite.
bundle.py DIR --rootfs PATH [--ann k=v]... [--env K=V]... [--bind SRC:DST[:ro]]...
          [--plain-gpu N] [--user UID] [--memory SIZE] -- CMD ARGS...
/out inside the container is DIR/out on the host. --plain-gpu N adds, by hand
(for the no-gpu-quota baseline under plain runc), /dev/nvidiaN, nvidiactl,
nvidia-uvm(-tools) with their cgroup rules and the host's /usr/local/nvidia.
--memory SIZE (bytes, or with k/m/g): the container's memory limit (cgroup
memory.max) and no swap beside it (runc writes memory.swap.max 0 where the
kernel has it)."""
import argparse, json, os, sys

p = argparse.ArgumentParser()
p.add_argument("dir"); p.add_argument("--rootfs", required=True)
p.add_argument("--ann", action="append", default=[]); p.add_argument("--env", action="append", default=[])
p.add_argument("--bind", action="append", default=[]); p.add_argument("--plain-gpu")
p.add_argument("--user", type=int, default=0)  # uid and gid of the process; /out made writable for it
p.add_argument("--memory")


def size(v):
    u = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(v[-1:].lower())
    return int(float(v[:-1]) * u) if u else int(v)


argv = sys.argv[1:]
cut = argv.index("--") if "--" in argv else len(argv)
a = p.parse_args(argv[:cut])
cmd = argv[cut + 1:]
os.makedirs(os.path.join(a.dir, "out"), exist_ok=True)
if a.user:
    os.chmod(os.path.join(a.dir, "out"), 0o777)
caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID", "CAP_KILL",
        "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_SETPCAP", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP"]
env = ["PATH=/opt/torch/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + ("/tmp" if a.user else "/root"),
       "PYTHONUNBUFFERED=1", "NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1",
       "TF_CPP_MIN_LOG_LEVEL=2"] + a.env
mounts = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=8g"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
    {"destination": "/out", "type": "bind", "source": os.path.abspath(os.path.join(a.dir, "out")), "options": ["rbind", "rw"]},
]
for b in a.bind:
    parts = b.split(":")
    mounts.append({"destination": parts[1], "type": "bind", "source": parts[0],
                   "options": ["rbind", "ro" if parts[2:] == ["ro"] else "rw"]})
devices, rules = [], [{"allow": False, "access": "rwm"}]
if a.plain_gpu is not None:
    for n in [f"nvidia{a.plain_gpu}", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]:
        st = os.stat("/dev/" + n)
        mj, mn = os.major(st.st_rdev), os.minor(st.st_rdev)
        devices.append({"path": "/dev/" + n, "type": "c", "major": mj, "minor": mn, "fileMode": 0o666, "uid": 0, "gid": 0})
        rules.append({"allow": True, "type": "c", "major": mj, "minor": mn, "access": "rwm"})
    mounts.append({"destination": "/usr/local/nvidia", "type": "bind", "source": "/usr/local/nvidia", "options": ["rbind", "ro"]})
    env.append("LD_LIBRARY_PATH=/usr/local/nvidia/lib64")
ann = dict(x.split("=", 1) for x in a.ann)
cfg = {
    "ociVersion": "1.0.2-dev",
    "process": {"terminal": False, "user": {"uid": a.user, "gid": a.user}, "args": cmd, "env": env, "cwd": "/",
                "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
                "noNewPrivileges": True},
    "root": {"path": os.path.abspath(a.rootfs), "readonly": False},
    "hostname": "gq", "mounts": mounts,
    "linux": {"resources": {"devices": rules}, "devices": devices,
              "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
              "maskedPaths": ["/proc/kcore"], "readonlyPaths": ["/proc/sys"]},
}
if a.memory:
    cfg["linux"]["resources"]["memory"] = {"limit": size(a.memory), "swap": size(a.memory)}
if ann:
    cfg["annotations"] = ann
json.dump(cfg, open(os.path.join(a.dir, "config.json"), "w"), indent=1)
