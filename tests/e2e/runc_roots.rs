//! Against real runc, continued: one container id under
//! two runc roots (two engines), the hook's runtime root, release by root.
#![allow(clippy::type_complexity)]
use gpu_quota_e2e::*;
use serde_json::Value;

/// Two engines (two runc roots) may use the same container id: each keeps
/// its own reservation and state, and deleting one leaves the other intact.
#[test]
fn same_id_under_two_runc_roots() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let root2 = h.path().join("runc-root-2");
    let with_root = |root: &std::path::Path, args: &[&str]| {
        let mut c = std::process::Command::new(bin("gpu-quota-runtime"));
        c.env("GPU_QUOTA_CONFIG", h.config())
            .arg("--root")
            .arg(root)
            .args(args)
            .stdin(std::process::Stdio::null());
        capture(c)
    };
    let a = h.bundle("a");
    let b = h.bundle("b");
    for bd in [&a, &b] {
        bd.set(
            &[("vram", "2g")],
            "while true; do cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/l.tmp && mv /out/l.tmp /out/limits; sleep 0.2; done",
            &[],
        );
    }
    assert_ok(
        &with_root(
            &h.runc_root,
            &["create", "--bundle", &a.bundle_arg(), "dup"],
        ),
        "create in root 1",
    );
    assert_ok(
        &with_root(&root2, &["create", "--bundle", &b.bundle_arg(), "dup"]),
        "create in root 2",
    );
    assert_eq!(h.reservations().len(), 2);
    assert_eq!(
        std::fs::read_dir(h.path().join("state/containers"))
            .unwrap()
            .count(),
        2
    );
    assert_ok(&with_root(&root2, &["start", "dup"]), "start 2");
    assert!(b
        .wait_out("limits", 5)
        .unwrap()
        .contains("container_id=dup"));
    assert_ok(
        &with_root(&h.runc_root, &["delete", "--force", "dup"]),
        "delete 1",
    );
    assert_eq!(
        h.reservations().len(),
        1,
        "only root 1's reservation released"
    );
    std::fs::remove_file(b.out.join("limits")).unwrap();
    assert!(
        b.wait_out("limits", 5).unwrap().contains("container_id="),
        "the other container's state is intact"
    );
    assert_ok(
        &with_root(&root2, &["delete", "--force", "dup"]),
        "delete 2",
    );
    assert!(h.reservations().is_empty());
    assert_eq!(
        std::fs::read_dir(h.path().join("state/containers"))
            .unwrap()
            .count(),
        0
    );
}

/// `gpu-quota-runtime --root ROOT ARGS` (and plain runc) for tests that use
/// more than the host's own runc root.
fn runtime_in(h: &Host, root: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(bin("gpu-quota-runtime"));
    c.env("GPU_QUOTA_CONFIG", h.config())
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(std::process::Stdio::null());
    capture(c)
}

fn runc_state_pid(root: &std::path::Path, id: &str) -> u64 {
    let mut c = std::process::Command::new("runc");
    c.arg("--root").arg(root).args(["state", id]);
    let o = capture(c);
    assert_ok(&o, "runc state");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["pid"].as_u64().expect("runc state has a pid")
}

fn state_dirs(h: &Host) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(h.path().join("state/containers"))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The same id and the same bundle under two runc roots. The
/// second `create` recreated the first container's state directory (named
/// by id and bundle only), and its hook confirmed the first reservation
/// (found by id and bundle) with the second pid; the first container's
/// poststop then released both. Reservations, state directories and the
/// hook's lookup are keyed by the runtime root.
#[test]
fn same_id_and_bundle_under_two_runc_roots() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let root1 = h.runc_root.clone();
    let root2 = h.path().join("runc-root-2");
    let b = h.bundle("shared");
    b.set(
        &[("vram", "2g")],
        "cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/l.tmp && mv /out/l.tmp /out/limits; sleep 600",
        &[],
    );
    // clean up root 2 whatever happens (Host's Drop cleans root 1)
    struct Root2<'a>(&'a Host, std::path::PathBuf);
    impl Drop for Root2<'_> {
        fn drop(&mut self) {
            let _ = runtime_in(self.0, &self.1, &["delete", "--force", "dup"]);
        }
    }
    let _guard = Root2(&h, root2.clone());
    assert_ok(
        &runtime_in(&h, &root1, &["create", "--bundle", &b.bundle_arg(), "dup"]),
        "create in root 1",
    );
    assert_ok(
        &runtime_in(&h, &root2, &["create", "--bundle", &b.bundle_arg(), "dup"]),
        "create in root 2",
    );
    // control: runc itself holds two distinct containers of that id
    let (pid1, pid2) = (runc_state_pid(&root1, "dup"), runc_state_pid(&root2, "dup"));
    assert_ne!(pid1, pid2, "two containers, two init processes");
    let res = h.reservations();
    assert_eq!(res.len(), 2, "{res:?}");
    let of = |root: &std::path::Path| -> Value {
        let r = root.to_string_lossy();
        let v: Vec<&Value> = res
            .iter()
            .filter(|x| x["runtime_root"].as_str() == Some(&*r))
            .collect();
        assert_eq!(v.len(), 1, "one reservation under {r}: {res:?}");
        v[0].clone()
    };
    let (r1, r2) = (of(&root1), of(&root2));
    assert_eq!(
        (r1["state"].as_str(), r1["pid"].as_u64()),
        (Some("running"), Some(pid1)),
        "root 1's hook confirmed root 1's reservation with its own pid: {res:?}"
    );
    assert_eq!(
        (r2["state"].as_str(), r2["pid"].as_u64()),
        (Some("running"), Some(pid2)),
        "root 2's hook confirmed root 2's reservation with its own pid: {res:?}"
    );
    let dirs = state_dirs(&h);
    assert_eq!(dirs.len(), 2, "two state directories: {dirs:?}");
    assert!(dirs.iter().all(|d| d.starts_with("dup-")), "{dirs:?}");
    // deleting root 1's container leaves root 2's reservation and state
    assert_ok(
        &runtime_in(&h, &root1, &["delete", "--force", "dup"]),
        "delete in root 1",
    );
    let res = h.reservations();
    assert_eq!(res.len(), 1, "only root 1's reservation released: {res:?}");
    assert_eq!(
        res[0]["runtime_root"].as_str(),
        Some(&*root2.to_string_lossy())
    );
    assert_eq!(res[0]["pid"].as_u64(), Some(pid2));
    let left = state_dirs(&h);
    assert_eq!(left.len(), 1, "root 2's state directory stays: {left:?}");
    let d = h.path().join("state/containers").join(&left[0]);
    assert!(
        std::fs::read_to_string(d.join("limits"))
            .unwrap()
            .contains("container_id="),
        "root 2's limits intact"
    );
    assert!(
        d.join("rw/usage").is_file(),
        "root 2's usage file (on its own tmpfs) intact"
    );
    // and the container itself still sees its limits
    assert_ok(
        &runtime_in(&h, &root2, &["start", "dup"]),
        "start in root 2",
    );
    b.wait_out("limits", 10).expect("root 2's container ran");
    assert_eq!(
        out_grant(&b.out),
        [2 * GIB],
        "root 2's container reads its grant after root 1's delete"
    );
    assert_ok(
        &runtime_in(&h, &root2, &["delete", "--force", "dup"]),
        "delete in root 2",
    );
    assert!(h.reservations().is_empty());
    assert!(state_dirs(&h).is_empty(), "{:?}", state_dirs(&h));
}

/// `gpu-quota-hook STAGE ARGS` with a given OCI state on stdin, as runc
/// would run it.
fn hook_with(h: &Host, args: &[&str], state: &Value) -> std::process::Output {
    let f = tempfile::tempfile().unwrap();
    {
        use std::io::{Seek, Write};
        let mut w = &f;
        w.write_all(state.to_string().as_bytes()).unwrap();
        w.seek(std::io::SeekFrom::Start(0)).unwrap();
    }
    let mut c = std::process::Command::new(bin("gpu-quota-hook"));
    c.env_clear()
        .env("GPU_QUOTA_CONFIG", h.config())
        .args(args)
        .stdin(f);
    capture(c)
}

/// The hook finds its reservation by the runc root the
/// runtime wrote into its entry. An entry without it (written by an older
/// runtime, or by hand) or with a foreign or doubled one confirms and
/// releases nothing and says why; the hook found reservations by id and
/// bundle alone, so such an entry took over another container's
/// reservation. The control: the right key releases it.
#[test]
fn hook_without_its_runtime_root_confirms_and_releases_nothing() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let root = h.runc_root.to_string_lossy().into_owned();
    let b = h.bundle("k");
    b.set(&[("vram", "2g")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "k"]),
        "create",
    );
    let pid = runc_state_pid(&h.runc_root, "k");
    assert_eq!(h.reservations()[0]["pid"].as_u64(), Some(pid));
    // another live container's process, which a forged state names
    let o = h.bundle("other");
    o.set(&[], "sleep 600", &[]);
    assert_ok(
        &h.runc(&["create", "--bundle", &o.bundle_arg(), "other"]),
        "plain runc create",
    );
    let other_pid = runc_state_pid(&h.runc_root, "other");
    let before = h.ledger_bytes().unwrap();
    let created = serde_json::json!({"ociVersion": "1.0.2", "id": "k", "status": "created",
        "pid": other_pid, "bundle": b.bundle_arg()});
    for args in [
        &["gpu-quota-hook", "create-runtime"][..],
        &[
            "gpu-quota-hook",
            "create-runtime",
            "--root",
            "/run/elsewhere",
        ],
        &[
            "gpu-quota-hook",
            "create-runtime",
            "--root",
            &root,
            "--root",
            &root,
        ],
    ] {
        let out = hook_with(&h, &args[1..], &created);
        assert!(!out.status.success(), "{args:?} succeeded");
        let e = stderr(&out);
        assert_eq!(
            h.ledger_bytes().unwrap(),
            before,
            "{args:?}: k's reservation untouched (still pid {pid}): {e}"
        );
        assert!(
            e.contains("--root") || e.contains("no reservation"),
            "{args:?}: says why: {e}"
        );
    }
    let stopped = serde_json::json!({"ociVersion": "1.0.2", "id": "k", "status": "stopped",
        "bundle": b.bundle_arg()});
    for args in [&["poststop"][..], &["poststop", "--root", "/run/elsewhere"]] {
        let out = hook_with(&h, args, &stopped);
        assert_eq!(h.reservations().len(), 1, "{args:?}: {}", stderr(&out));
        assert_eq!(h.ledger_bytes().unwrap(), before, "{args:?}");
    }
    assert!(
        stderr(&hook_with(&h, &["poststop"], &stopped)).contains("nothing released"),
        "says why"
    );
    // control: the key the runtime wrote releases it
    assert_ok(
        &hook_with(&h, &["poststop", "--root", &root], &stopped),
        "poststop with the key",
    );
    assert!(h.reservations().is_empty());
    assert!(state_dirs(&h).is_empty(), "{:?}", state_dirs(&h));
}

/// `gpu-quota release ID` released every reservation of that
/// id, whatever its runc root; now an id held under two roots needs
/// `--runtime-root`, and only that root's reservation goes.
#[test]
fn release_names_the_root_when_an_id_is_held_under_two() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let root1 = h.runc_root.clone();
    let root2 = h.path().join("runc-root-2");
    struct Root2<'a>(&'a Host, std::path::PathBuf);
    impl Drop for Root2<'_> {
        fn drop(&mut self) {
            let _ = runtime_in(self.0, &self.1, &["delete", "--force", "dup"]);
        }
    }
    let _guard = Root2(&h, root2.clone());
    let b = h.bundle("shared");
    b.set(&[("vram", "2g")], "sleep 600", &[]);
    for root in [&root1, &root2] {
        assert_ok(
            &runtime_in(&h, root, &["create", "--bundle", &b.bundle_arg(), "dup"]),
            "create",
        );
    }
    let gq = |args: &[&str]| {
        let mut c = std::process::Command::new(bin("gpu-quota"));
        c.env("GPU_QUOTA_CONFIG", h.config())
            .args(args)
            .stdin(std::process::Stdio::null());
        capture(c)
    };
    let o = gq(&["release", "dup", "--yes", "--force"]);
    assert!(!o.status.success(), "an ambiguous id was released");
    let e = stderr(&o);
    assert!(
        e.contains("--runtime-root")
            && e.contains(&*root1.to_string_lossy())
            && e.contains(&*root2.to_string_lossy()),
        "{e}"
    );
    assert_eq!(h.reservations().len(), 2);
    let r1 = root1.to_string_lossy().into_owned();
    assert_ok(
        &gq(&["release", "dup", "--yes", "--force", "--runtime-root", &r1]),
        "release under root 1",
    );
    let left = h.reservations();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left[0]["runtime_root"].as_str(),
        Some(&*root2.to_string_lossy())
    );
    // a forced release leaves the running container's state to `gc`
    for root in [&root1, &root2] {
        assert_ok(
            &runtime_in(&h, root, &["delete", "--force", "dup"]),
            "delete",
        );
    }
    assert!(h.reservations().is_empty());
    assert_ok(&gq(&["gc"]), "gc");
    assert!(state_dirs(&h).is_empty(), "{:?}", state_dirs(&h));
}
