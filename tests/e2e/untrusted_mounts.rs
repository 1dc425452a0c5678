//! Untrusted images and tenants, against real runc 1.1.5. One test
//! per class of attack; each keeps a negative control that shows the check
//! can fail (the attack's premise holds here, or the old step, reproduced in
//! the harness, does reach the host).
//!
//! This file: the mounts made into an untrusted rootfs (read-only binds that
//! cannot be raced writable; nothing written through a mount inside it).
use gpu_quota_e2e::untrusted::*;
use gpu_quota_e2e::*;
use gpuquota_core::ldcache::LdCache;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Class 3 (found by a security review of this change): a read-only bind
/// used to be remounted read-only by looking its path up again; a rename
/// racing in a shared volume sent that remount to another mount, leaving the
/// host's driver file writable in the container. The bind is now read-only
/// before it is attached (open_tree + mount_setattr + move_mount).
#[test]
fn read_only_binds_cannot_be_raced_writable() {
    require_e2e!();
    let run = |mode: &str| {
        let mut c = Command::new("unshare");
        c.args(["-m", "--propagation", "private"])
            .arg(bin("mount-race"))
            .args([mode, "3000"]);
        capture(c)
    };
    // negative control: the old bind-then-remount-by-path loses the race
    let old = run("old-remount");
    assert_eq!(
        old.status.code(),
        Some(1),
        "the probe must catch the old remount, else this test proves nothing: {}",
        String::from_utf8_lossy(&old.stdout)
    );
    let new = run("gpu-quota");
    assert_ok(&new, "gpu-quota's bind under the race");
}

/// Every entry under `d` (recursively, not following links): relative
/// path, type and mode bits, owner, and content (a link's target).
fn snapshot_tree(d: &Path) -> Vec<(String, u32, u32, u32, Vec<u8>)> {
    fn go(base: &Path, d: &Path, out: &mut Vec<(String, u32, u32, u32, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let content = if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_file() {
                std::fs::read(&p).unwrap()
            } else {
                vec![]
            };
            out.push((rel, m.mode(), m.uid(), m.gid(), content));
            if m.is_dir() {
                go(base, &p, out);
            }
        }
    }
    let mut v = vec![];
    go(d, d, &mut v);
    v.sort();
    v
}

/// What differs between two `snapshot_tree`s, by entry name.
fn tree_diff(
    before: &[(String, u32, u32, u32, Vec<u8>)],
    after: &[(String, u32, u32, u32, Vec<u8>)],
) -> Vec<String> {
    let mut out = vec![];
    for a in after {
        match before.iter().find(|b| b.0 == a.0) {
            None => out.push(format!("new {} (mode {:o}, uid {})", a.0, a.1, a.2)),
            Some(b) if b != a => out.push(format!(
                "changed {} (mode {:o} -> {:o}, {} -> {} bytes)",
                a.0,
                b.1,
                a.1,
                b.4.len(),
                a.4.len()
            )),
            _ => {}
        }
    }
    for b in before {
        if !after.iter().any(|a| a.0 == b.0) {
            out.push(format!("removed {}", b.0));
        }
    }
    out
}

/// A valid loader cache with one entry, as the image or a host dir has.
fn some_cache() -> Vec<u8> {
    let mut c = LdCache::default();
    c.insert(b"libz.so.1", b"/usr/lib/libz.so.1", 0x0303);
    c.to_bytes()
}

/// Mounts inside the rootfs. The hook works in the container's
/// mount namespace, so a path it resolved inside the rootfs could cross
/// into a volume or a bind of a host directory (directly, `-v /host:/etc`,
/// or steered by the image's symlinks, `/etc -> /data/other/etc` with a
/// volume at `/data`), and root's writes (loader cache, `ld.so.preload`,
/// `gpu-quota/`, `nvidia-smi`) stayed on the host after the container was
/// gone. Now nothing the hook creates, replaces or mounts onto may be off
/// the rootfs's own mount: the runtime refuses a declared mount over one of
/// those paths before anything is reserved, and the hook refuses (EXDEV)
/// what symlinks steer there; the host directories stay byte-identical.
#[test]
fn mounts_inside_the_rootfs_are_never_written() {
    require_e2e!();
    let h = elf_host("");
    let mk_host_dir = |name: &str| -> PathBuf {
        let d = h.path().join(name);
        std::fs::create_dir_all(d.join("other/etc")).unwrap();
        std::fs::write(d.join("other/etc/ld.so.cache"), some_cache()).unwrap();
        std::fs::set_permissions(
            d.join("other/etc/ld.so.cache"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(d.join("ld.so.cache"), some_cache()).unwrap();
        std::fs::write(d.join("hosts"), b"127.0.0.1 localhost\n").unwrap();
        d
    };
    struct Case {
        name: &'static str,
        /// image symlinks: (path in the rootfs, target)
        links: Vec<(&'static str, &'static str)>,
        /// (destination, type, options); the source is the case's host dir
        mount: (&'static str, &'static str, Vec<&'static str>),
        /// where the probe (a root write in the hook's view) lands, relative
        /// to the host dir
        probe: (&'static str, &'static str),
        /// what the refusal must name
        named: &'static str,
        /// refused by the runtime before the ledger is touched
        early: bool,
    }
    let cases = vec![
        // the first repro: steered by the image's symlinks
        Case {
            name: "steered",
            links: vec![
                ("etc", "/data/other/etc"),
                ("run", "/data"),
                ("usr/bin", "/data"),
            ],
            mount: ("/data", "bind", vec!["rbind", "rw"]),
            probe: ("/etc/gq-probe", "other/etc/gq-probe"),
            named: "/data",
            early: false,
        },
        // runc follows the destination's symlink: the bind lands on /run
        Case {
            name: "steered-dest",
            links: vec![("var/run", "../run")],
            mount: ("/var/run", "bind", vec!["rbind", "rw"]),
            probe: ("/run/gq-probe", "gq-probe"),
            named: "/run",
            early: false,
        },
        // `-v /host/dir:/etc`
        Case {
            name: "etc-bind",
            links: vec![],
            mount: ("/etc", "bind", vec!["rbind", "rw"]),
            probe: ("/etc/gq-probe", "gq-probe"),
            named: "/etc",
            early: true,
        },
        // `-v /host/dir:/run/` (the trailing slash changes nothing)
        Case {
            name: "run-bind",
            links: vec![],
            mount: ("/run/", "bind", vec!["rbind", "rw"]),
            probe: ("/run/gq-probe", "gq-probe"),
            named: "/run",
            early: true,
        },
        // `-v /host/dir:/usr/bin`
        Case {
            name: "usrbin-bind",
            links: vec![],
            mount: ("/usr/bin", "bind", vec!["rbind", "rw"]),
            probe: ("/usr/bin/gq-probe", "gq-probe"),
            named: "/usr/bin",
            early: true,
        },
    ];
    let probe_hook = h.path().join("probe.sh");
    // a root write through the rootfs in the container's mount namespace at
    // createRuntime time: exactly the view gpu-quota-hook has
    std::fs::write(
        &probe_hook,
        "#!/bin/sh\nst=$(cat)\npid=$(echo \"$st\" | sed -n 's/.*\"pid\": *\\([0-9]*\\).*/\\1/p')\n\
         bundle=$(echo \"$st\" | sed -n 's/.*\"bundle\": *\"\\([^\"]*\\)\".*/\\1/p')\n\
         exec nsenter --mount=/proc/$pid/ns/mnt chroot \"$bundle/rootfs\" /bin/busybox touch \"$GQ_PROBE\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&probe_hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prepare = |b: &Bundle, c: &Case, src: &Path| {
        let r = b.rootfs();
        glibc_image(b);
        for (p, target) in &c.links {
            std::fs::create_dir_all(r.join(p).parent().unwrap()).unwrap();
            symlink(target, r.join(p)).unwrap();
        }
        let mut cfg = b.config();
        let (dest, ty, opts) = &c.mount;
        cfg["mounts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!(
            {"destination": dest, "type": ty, "source": src.to_str().unwrap(), "options": opts}));
        cfg["process"]["user"] = serde_json::json!({"uid": 1000, "gid": 1000});
        b.write_config(&cfg);
    };
    let mut bad = vec![];
    for c in &cases {
        let host = mk_host_dir(c.name);
        let before = snapshot_tree(&host);

        // Negative control: plain runc, a createRuntime hook that writes as
        // root through the same container path lands in the host directory.
        let ctl = h.bundle(&format!("{}-ctl", c.name));
        ctl.set(&[], "true", &[&format!("GQ_PROBE={}", c.probe.0)]);
        prepare(&ctl, c, &host);
        let mut cfg = ctl.config();
        cfg["hooks"] = serde_json::json!({"createRuntime": [{"path": probe_hook.to_str().unwrap(),
            "env": [format!("GQ_PROBE={}", c.probe.0), "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_string()],
            "timeout": 20}]});
        ctl.write_config(&cfg);
        let id = format!("{}-ctl", c.name);
        let o = h.runc(&["run", "--bundle", &ctl.bundle_arg(), &id]);
        assert_ok(&o, &format!("{}: plain runc with the probe hook", c.name));
        assert!(
            host.join(c.probe.1).exists(),
            "negative control [{}]: a root write to {} in the hook's view must reach the host directory, else this test proves nothing: {:?}",
            c.name,
            c.probe.0,
            snapshot_tree(&host)
        );
        std::fs::remove_file(host.join(c.probe.1)).unwrap();
        assert_eq!(
            snapshot_tree(&host),
            before,
            "{}: control cleaned up",
            c.name
        );

        // gpu-quota: run + delete leave the host directory byte-identical,
        // and the container is refused with the mount named
        let b = h.bundle(c.name);
        b.set(&[("vram", "1g")], "true", &[]);
        prepare(&b, c, &host);
        let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), c.name]);
        let _ = h.runtime(&["delete", "--force", c.name]);
        let e = stderr(&o);
        let changed = tree_diff(&before, &snapshot_tree(&host));
        if !changed.is_empty() {
            bad.push(format!(
                "[{}] the host directory behind {} changed after run + delete: {changed:?}",
                c.name, c.mount.0
            ));
        }
        if o.status.success() {
            bad.push(format!("[{}] was not refused", c.name));
        } else if !(e.contains(c.named) && e.contains("mount")) {
            bad.push(format!(
                "[{}] the message does not name the mount {}: {e}",
                c.name, c.named
            ));
        } else if c.early && (!e.contains(host.to_str().unwrap()) || e.contains("gpu-quota-hook")) {
            bad.push(format!(
                "[{}] not refused by the runtime before runc ran the hook, naming the source: {e}",
                c.name
            ));
        }
        if !h.reservations().is_empty() {
            bad.push(format!("[{}] not released: {:?}", c.name, h.reservations()));
        }
        let left: Vec<_> = std::fs::read_dir(h.path().join("state/containers"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        if !left.is_empty() {
            bad.push(format!("[{}] state left: {left:?}", c.name));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&h.path().display().to_string()),
        "no mount left behind"
    );

    // The container's own fresh tmpfs at /run (containerd's default spec
    // has one; `--tmpfs /run`) dies with the container: the hook works
    // there (docs/security.md, "Mounts inside the rootfs"). A tmpfs given
    // as a bind (a host tmpfs directory) is the host's: refused, naming it.
    let t = h.bundle("tmpfs-run");
    t.set(
        &[("vram", "1g")],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits",
        &[],
    );
    let mut cfg = t.config();
    cfg["mounts"].as_array_mut().unwrap().push(serde_json::json!(
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755", "size=65536k"]}));
    t.write_config(&cfg);
    glibc_image(&t);
    assert_ok(
        &h.runtime(&["run", "--bundle", &t.bundle_arg(), "tmpfs-run"]),
        "the container's own tmpfs at /run",
    );
    assert!(t.wait_out("limits", 2).unwrap().contains("container_id="));
    assert!(h.reservations().is_empty());
    let hostrun = mk_host_dir("host-tmpfs");
    let before = snapshot_tree(&hostrun);
    let tb = h.bundle("tmpfs-bind");
    tb.set(&[("vram", "1g")], "true", &[]);
    let mut cfg = tb.config();
    cfg["mounts"].as_array_mut().unwrap().push(serde_json::json!(
        {"destination": "/run", "type": "tmpfs", "source": hostrun.to_str().unwrap(), "options": ["rbind", "rw"]}));
    tb.write_config(&cfg);
    let o = h.runtime(&["run", "--bundle", &tb.bundle_arg(), "tmpfs-bind"]);
    assert!(!o.status.success(), "a bound host tmpfs at /run is refused");
    assert!(stderr(&o).contains("/run"), "{}", stderr(&o));
    assert_eq!(snapshot_tree(&hostrun), before);
    assert!(h.reservations().is_empty());
    let data = mk_host_dir("data-ok");
    let before = snapshot_tree(&data);
    let ok = h.bundle("volume-ok");
    ok.set(
        &[("vram", "1g")],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits",
        &[],
    );
    let mut cfg = ok.config();
    cfg["mounts"].as_array_mut().unwrap().push(serde_json::json!(
        {"destination": "/data", "type": "bind", "source": data.to_str().unwrap(), "options": ["rbind", "rw"]}));
    ok.write_config(&cfg);
    glibc_image(&ok);
    assert_ok(
        &h.runtime(&["run", "--bundle", &ok.bundle_arg(), "volume-ok"]),
        "a volume the hook does not cross",
    );
    assert!(ok.wait_out("limits", 2).unwrap().contains("container_id="));
    assert_eq!(snapshot_tree(&data), before);
    assert!(h.reservations().is_empty());
}
