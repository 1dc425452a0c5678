//! Which host user a compute share (`sm=`) is served to, on real runc with
//! the fake MPS control daemon (tests/fake/fake_mps_control.c, modelled on
//! the H200's): never host root unless the operator allows it, a spec
//! whose user runc reads otherwise refused, shares of different users on
//! one GPU, a host-root process inside a non-root share refused at cuInit.
//!
//! Container ids are unique across this file (runc names cgroups after
//! them, and the tests run in parallel).
use gpu_quota_e2e::mps::{delete, extra, probe_host, start_as, wait_for, Daemons};
use gpu_quota_e2e::*;
use std::path::Path;
use std::process::Stdio;

/// MPS takes commands from host root on its client socket that steer the
/// GPU's server (every client's percentage) and end other containers'
/// clients (measured on the H200), and refuses them to other uids. So a
/// share is admitted for a process that cannot become host root: not root
/// without a user namespace, not a namespace mapping any uid to host root,
/// not a spec that does not say (it joins a namespace); the operator may
/// allow root's shares. A non-root share runs without setuid-root paths
/// (noNewPrivileges, no CAP_SETUID), and shares of different users share a
/// GPU (the daemons are multi-user).
#[test]
fn a_share_is_served_to_users_that_cannot_become_host_root() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: extra(),
        ..HostOpts::default()
    });
    let _d = Daemons(&h);
    let share = [("vram", "1g"), ("sm", "25%"), ("gpu", "0")];
    let o = start_as(&h, "r0", &share, 0);
    assert!(!o.status.success(), "a share for host root");
    let e = stderr(&o);
    assert!(
        e.contains("host root") && e.contains("--user 1000") && e.contains("mps_root_shares"),
        "{e}"
    );
    assert!(h.reservations().is_empty(), "nothing reserved");
    // a user namespace whose root is host uid 100000, but whose uid 5000
    // is host root: root inside may setuid to it
    let userns = |id: &str, maps: serde_json::Value| {
        let b = h.bundle(id);
        b.set(&share, "touch /out/up; sleep 600", &[]);
        let mut c = b.config();
        c["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"type": "user"}));
        c["linux"]["uidMappings"] = maps.clone();
        c["linux"]["gidMappings"] = maps;
        b.write_config(&c);
        h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id])
    };
    let o = userns(
        "back",
        serde_json::json!([{"containerID": 0, "hostID": 100000, "size": 1000},
                           {"containerID": 5000, "hostID": 0, "size": 1}]),
    );
    assert!(!o.status.success(), "a namespace that maps host root");
    assert!(
        stderr(&o).contains("can become, host root"),
        "{}",
        stderr(&o)
    );
    // a spec that joins a user namespace does not say its host user
    let b = h.bundle("ns");
    b.set(&share, "true", &[]);
    let mut c = b.config();
    c["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "user", "path": "/proc/1/ns/user"}));
    b.write_config(&c);
    let o = h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "ns"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("which host user"), "{}", stderr(&o));
    // a container's non-root user (given CAP_SETUID, as an engine's
    // defaults do): admitted, recorded, kept from root
    let b = h.bundle("u1");
    b.set(&share, "touch /out/up; sleep 600", &[]).run_as(1000);
    let mut c = b.config();
    for set in ["bounding", "effective", "permitted"] {
        c["process"]["capabilities"][set] = serde_json::json!(["CAP_KILL", "CAP_SETUID"]);
    }
    b.write_config(&c);
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "u1"]),
        "uid 1000's share",
    );
    let user = |id: &str| {
        h.reservations()
            .into_iter()
            .find(|r| r["container_id"] == id)
            .map(|r| r["slices"][0]["sm_user"].as_u64())
    };
    assert_eq!(
        user("u1"),
        Some(Some(1000)),
        "the share records its host uid"
    );
    let c = b.config();
    assert_eq!(c["process"]["noNewPrivileges"], serde_json::json!(true));
    let caps = c["process"]["capabilities"].to_string();
    assert!(
        caps.contains("CAP_KILL") && !caps.contains("CAP_SETUID"),
        "{caps}"
    );
    // another user's share beside it on the same GPU
    assert_ok(&start_as(&h, "u2", &share, 1001), "uid 1001's share");
    assert_eq!(user("u2"), Some(Some(1001)));
    let events = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert_eq!(events.matches("\"share_user\"").count(), 3, "{events}");
    for id in ["u1", "u2"] {
        delete(&h, id);
    }
    // an operator whose tenants trust each other allows root's shares
    let trusted = Host::new(HostOpts {
        extra_config: format!("{}mps_root_shares = true\n", extra()),
        ..HostOpts::default()
    });
    let _t = Daemons(&trusted);
    assert_ok(
        &start_as(&trusted, "r1", &share, 0),
        "root's share, allowed",
    );
    let r = trusted.reservations();
    assert_eq!(r[0]["slices"][0]["sm_user"].as_u64(), Some(0));
    delete(&trusted, "r1");
}

/// Round 4: runc's Go decoder matches `process.user`'s keys without regard
/// to case, the last one winning, so `{"uid": 0, "UID": 1000}` runs the
/// process as uid 1000 (the control: the same bundle under plain runc),
/// where gpu-quota's parse read uid 0 and admitted the share as root's.
/// Now the spec is refused before anything is reserved, naming the keys.
#[test]
fn a_share_whose_user_runc_reads_otherwise_is_refused() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: extra(),
        ..HostOpts::default()
    });
    let _d = Daemons(&h);
    let bundle = |id: &str, script: &str| {
        let b = h.bundle(id);
        b.set(&[("vram", "1g"), ("sm", "25%"), ("gpu", "0")], script, &[]);
        let mut c = b.config();
        c["process"]["user"] = serde_json::json!({"uid": 0, "gid": 0, "UID": 1000});
        b.write_config(&c);
        std::os::unix::fs::chown(&b.out, Some(1000), Some(1000)).unwrap();
        b
    };
    let plain = bundle("ucase-plain", "/bin/busybox id -u > /out/uid");
    assert_ok(
        &h.runc(&["run", "--bundle", &plain.bundle_arg(), "ucase-plain"]),
        "plain runc",
    );
    assert_eq!(
        std::fs::read_to_string(plain.out.join("uid")).unwrap(),
        "1000\n",
        "control: runc runs the last of uid/UID"
    );
    let b = bundle(
        "ucase",
        "/bin/busybox id -u > /out/uid; touch /out/up; sleep 600",
    );
    let o = h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "ucase"]);
    if o.status.success() {
        let user = h
            .reservations()
            .first()
            .map(|r| r["slices"][0]["sm_user"].clone());
        let ran = b
            .wait_out("up", 10)
            .and_then(|_| std::fs::read_to_string(b.out.join("uid")).ok());
        delete(&h, "ucase");
        panic!("admitted: the share records host uid {user:?}, its process ran as {ran:?}");
    }
    let e = stderr(&o);
    assert!(
        e.contains("`process.user`") && e.contains("\"UID\"") && e.contains("runc"),
        "{e}"
    );
    assert!(h.reservations().is_empty());
    let events = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert!(events.contains("\"invalid_request\""), "{events}");
}

/// A process of host root inside a non-root share container (an
/// operator's `exec --user 0`) would reach MPS as root, which steers the
/// GPU's server: the interceptor refuses its cuInit with one line. A
/// process of the share's own uid, or of another non-root uid, is a client
/// at its share (the daemons are multi-user).
#[test]
fn a_host_root_process_in_a_non_root_share_is_refused_at_cuinit() {
    require_e2e!();
    let (h, b) = probe_host("xuid");
    let _d = Daemons(&h);
    let mut c = b.config();
    c["annotations"] = serde_json::json!({"vram": "4g", "sm": "50%", "sm-procs": "2"});
    c["process"]["args"] = serde_json::json!(["/bin/sh", "-c", "touch /out/up; sleep 600"]);
    b.write_config(&c);
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "xuid"]),
        "run with a share",
    );
    b.wait_out("up", 10).expect("container up");
    let exec = |user: &str| {
        h.runtime(&[
            "exec",
            "--user",
            user,
            "xuid",
            "/bin/mps_client_probe",
            "libcuda.so.1",
        ])
    };
    // a client of the share's own user that lives on, and then one of
    // another non-root uid beside it: served at once (a daemon without -M
    // holds it until the first has ended)
    let mut holder = h
        .runtime_cmd(&[
            "exec",
            "xuid",
            "sh",
            "-c",
            "/bin/mps_client_probe libcuda.so.1 --hold 30 > /out/hold 2>&1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        b.wait_out("hold", 10)
            .is_some_and(
                |_| wait_for(10, || std::fs::read_to_string(b.out.join("hold"))
                    .is_ok_and(|t| t.starts_with("mps=1 pct=25")))
            ),
        "the share's own user is a client"
    );
    let o = exec("1001:1001");
    assert_ok(&o, "uid 1001 beside uid 1000's live client");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.starts_with("mps=1 pct=25"), "uid 1001: {out}");
    let _ = holder.kill();
    let _ = holder.wait();
    let root = exec("0:0");
    assert!(!root.status.success(), "host root's cuInit");
    let e = stderr(&root);
    assert!(
        e.contains("cuInit: 805") && e.contains("runs as host root") && e.contains("host uid 1000"),
        "{e}"
    );
    delete(&h, "xuid");
}

/// A container in a user namespace of its own whose root is host uid
/// 100000 (what Docker's userns-remap and podman `--uidmap` give) gets its
/// share: root inside is no root to the daemon. Its processes reach the
/// view of the pipe directory and are clients at the share. Before, the
/// hook could not set up any container with a user namespace of its own
/// ("clone the mount of /run/gpu-quota: Invalid argument": the copied
/// mounts are locked to their parents there, and the state directory has
/// its usage tmpfs below it); now the copy is recursive there, and
/// read-only throughout.
/// Host device nodes this test made, removed again when it ends: in a
/// user namespace runc cannot make device nodes and bind-mounts the host's
/// instead, which a host without a GPU does not have.
struct HostNodes(Vec<&'static str>);
impl HostNodes {
    fn ensure() -> HostNodes {
        let mut made = vec![];
        for (p, major, minor) in [
            ("/dev/nvidia0", 195, 0),
            ("/dev/nvidiactl", 195, 255),
            ("/dev/nvidia-uvm", 510, 0),
            ("/dev/nvidia-uvm-tools", 510, 1),
        ] {
            if Path::new(p).exists() {
                continue;
            }
            let c = std::ffi::CString::new(p).unwrap();
            // SAFETY: a NUL-terminated path; mknod(2) copies it
            let r = unsafe {
                libc::mknod(
                    c.as_ptr(),
                    libc::S_IFCHR | 0o666,
                    libc::makedev(major, minor),
                )
            };
            assert_eq!(r, 0, "mknod {p}: {}", std::io::Error::last_os_error());
            made.push(p);
        }
        HostNodes(made)
    }
}
impl Drop for HostNodes {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn a_share_in_a_user_namespace_of_its_own_is_served() {
    require_e2e!();
    let _nodes = HostNodes::ensure();
    let (h, b) = probe_host("userns");
    let _d = Daemons(&h);
    let mut c = b.config();
    c["annotations"] = serde_json::json!({"vram": "4g", "sm": "25%"});
    c["process"]["user"] = serde_json::json!({"uid": 0, "gid": 0});
    c["process"]["args"] = serde_json::json!(["/bin/sh", "-c",
        "ls /run/gpu-quota/mps > /out/view 2>&1; /bin/mps_client_probe libcuda.so.1 > /out/probe 2>&1; \
         for f in /run/gpu-quota/rw/usage /run/gpu-quota/limits /run/gpu-quota/mps/x; do (true >> $f) 2>/dev/null && echo $f; done > /out/writable; \
         (true >> /run/gpu-quota/usage) && echo ok > /out/usage; touch /out/up; sleep 600"]);
    c["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "user"}));
    // sysfs is mounted only by a namespace's owner of the network namespace
    let ns = c["linux"]["namespaces"].as_array_mut().unwrap();
    if !ns.iter().any(|n| n["type"] == "network") {
        ns.push(serde_json::json!({"type": "network"}));
    }
    let map = serde_json::json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    c["linux"]["uidMappings"] = map.clone();
    c["linux"]["gidMappings"] = map;
    b.write_config(&c);
    // the rootfs as a remapping snapshotter leaves it: owned by the
    // namespace's root, under directories its uid may pass
    let st = std::process::Command::new("chown")
        .args(["-R", "100000:100000"])
        .arg(b.rootfs())
        .arg(&b.out)
        .status()
        .unwrap();
    assert!(st.success());
    let mut dir = b.rootfs();
    while dir.pop() && dir != Path::new("/tmp") {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o711)).unwrap();
    }
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), "userns"]),
        "a share in its own user namespace",
    );
    let up = b.wait_out("up", 10);
    let view = std::fs::read_to_string(b.out.join("view")).unwrap_or_default();
    let probe = std::fs::read_to_string(b.out.join("probe")).unwrap_or_default();
    let writable = std::fs::read_to_string(b.out.join("writable")).unwrap_or_default();
    let usage = std::fs::read_to_string(b.out.join("usage")).unwrap_or_default();
    delete(&h, "userns");
    assert!(
        up.is_some(),
        "container up; view: {view}; probe: {probe}; writable: {writable}; usage: {usage}"
    );
    assert_eq!(view.trim(), "control", "{view}");
    assert!(probe.starts_with("mps=1 pct=25"), "{probe}");
    // the state directory came with its usage tmpfs (the copy had to be
    // recursive): every mount of it is read-only, the usage file alone is
    // the container's to write
    assert_eq!(writable, "", "writable in the container: {writable}");
    assert_eq!(usage.trim(), "ok", "the usage file is writable");
    let user = h.reservations();
    assert!(user.is_empty(), "released");
}
