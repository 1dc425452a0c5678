//! Untrusted images and tenants, against real runc 1.1.5. One test
//! per class of attack; each keeps a negative control that shows the check
//! can fail (the attack's premise holds here, or the old step, reproduced in
//! the harness, does reach the host).
//!
//! This file: the host's state and ledger directories against containers and
//! host users; reclaims judged in the right namespace.
use gpu_quota_e2e::untrusted::*;
use gpu_quota_e2e::*;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `script` as uid/gid 65534 (nobody); whether it succeeded.
fn as_nobody(script: &str) -> bool {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .status()
        .unwrap()
        .success()
}

/// Class 4: host-side state. The usage file was 0666 under directories
/// any host user could traverse, unbounded in size on /run, and a crafted
/// header made `gpu-quota ls`/`metrics` spin forever.
#[test]
fn host_state_resists_containers_and_host_users() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("st");
    b.set(
        &[("vram", "4g")],
        "busybox dd if=/dev/zero of=/run/gpu-quota/usage bs=1048576 count=300 2>/out/dd; echo $? > /out/ddrc; sleep 600",
        &[],
    );
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "st"]),
        "create",
    );
    assert_ok(&h.runtime(&["start", "st"]), "start");
    let rc = b.wait_out("ddrc", 20).expect("dd finished");
    let containers = h.path().join("state/containers");
    let m = std::fs::metadata(&containers).unwrap();
    assert_eq!(
        (m.mode() & 0o777, m.uid()),
        (0o700, 0),
        "containers/ is root's alone"
    );
    let dir = std::fs::read_dir(&containers)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let usage = dir.join("rw/usage");
    // the directory is the container's own tmpfs (nothing of it on the
    // disk under state_dir: docs/benchmarks.md, inode creates), and the
    // usage file, its one writable file, is on a tmpfs of its own
    let dev = |p: &std::path::Path| std::fs::metadata(p).unwrap().dev();
    assert_ne!(
        dev(&dir),
        dev(&containers),
        "the state directory is a mount"
    );
    for f in ["limits", "ld.so.preload"] {
        assert_eq!(
            dev(&dir.join(f)),
            dev(&dir),
            "{f} is on the directory's tmpfs"
        );
    }
    assert_ne!(
        dev(&usage),
        dev(&dir),
        "the usage file shares no filesystem"
    );
    // growth: the container's writes stop at its small tmpfs
    assert_ne!(rc, "0\n", "300 MB into the usage file must fail");
    let size = std::fs::metadata(&usage).unwrap().len();
    assert!(
        size <= gpuquota_core::state::USAGE_FS_BYTES,
        "usage file grew to {size}"
    );

    // host users cannot reach it; the probe itself works (negative control)
    let open = h.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(open.join("f"), b"").unwrap();
    std::fs::set_permissions(open.join("f"), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(h.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        as_nobody(&format!("echo x >> {}/f", open.display())),
        "negative control"
    );
    assert!(
        !as_nobody(&format!("echo x >> {}", usage.display())),
        "a host user wrote a container's counters"
    );

    // a crafted header: the operator commands still finish
    let mut hdr = vec![0u8; 4096];
    hdr[0..8].copy_from_slice(&gpuquota_core::usage::MAGIC.to_le_bytes());
    hdr[8..12].copy_from_slice(&1u32.to_le_bytes());
    hdr[16..20].copy_from_slice(&u32::MAX.to_le_bytes()); // slot_count
    hdr[20..24].copy_from_slice(&16u32.to_le_bytes());
    hdr[24..28].copy_from_slice(&0u32.to_le_bytes()); // slot_size 0
    hdr[40..44].copy_from_slice(&u32::MAX.to_le_bytes()); // high_water
    std::fs::write(&usage, &hdr).unwrap();
    for args in [&["ls"][..], &["ls", "--json"], &["metrics"]] {
        let t = Instant::now();
        let o = gq(&h, args);
        assert_ne!(o.status.code(), Some(124), "gpu-quota {args:?} hung");
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_ok(&o, &format!("{args:?}"));
    }
    h.cleanup();
    assert!(!dir.exists(), "delete removes the state (and its tmpfs)");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&dir.display().to_string()),
        "usage tmpfs unmounted"
    );
}

fn wait_stopped(h: &Host, id: &str) {
    for _ in 0..50 {
        if String::from_utf8_lossy(&h.runc(&["state", id]).stdout).contains("stopped") {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{id} did not stop");
}

/// Class 4: liveness from another pid namespace, and state directories of
/// reclaimed reservations.
#[test]
fn reclaims_are_judged_in_the_right_namespace_and_leave_no_state() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("live");
    b.set(&[("vram", "16g"), ("gpu", "0")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "live"]),
        "create",
    );
    // gc from a fresh pid namespace (a containerized containerd, kind)
    let o = capture({
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc"])
            .arg(bin("gpu-quota"))
            .arg("gc")
            .env("GPU_QUOTA_CONFIG", h.config());
        c
    });
    assert_ok(&o, "gc in another pid namespace");
    assert_eq!(
        h.reservations().len(),
        1,
        "a live container was reclaimed: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    // negative control: from our namespace, once the process is dead, gc does reclaim
    let containers = h.path().join("state/containers");
    let dir = std::fs::read_dir(&containers)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_ok(&h.runc(&["kill", "live", "KILL"]), "kill");
    wait_stopped(&h, "live");
    // the next admission on the full GPU reclaims it, and its state goes too
    let b2 = h.bundle("next");
    b2.set(&[("vram", "16g"), ("gpu", "0")], "sleep 600", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b2.bundle_arg(), "next"]),
        "create next",
    );
    let r = h.reservations();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["container_id"], "next");
    assert!(
        !dir.exists(),
        "the reclaimed container's state directory stays"
    );
    // gc sweeps directories no reservation owns
    let orphan = containers.join("orphan-0123456789abcdef");
    std::fs::create_dir(&orphan).unwrap();
    let o = gq(&h, &["gc"]);
    assert_ok(&o, "gc");
    assert!(!orphan.exists(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(h.reservations().len(), 1, "the live one stays");
}

/// Class 4: the ledger and state directories are never followed through a
/// symlink nor kept where another user could change them.
#[test]
fn state_directories_must_be_real_and_root_owned() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    // ledger_dir is a symlink
    let real = h.path().join("ledger-real");
    std::fs::create_dir(&real).unwrap();
    std::fs::remove_dir(h.path().join("ledger")).unwrap();
    symlink(&real, h.path().join("ledger")).unwrap();
    let b = h.bundle("l");
    b.set(&[("vram", "1g")], "true", &[]);
    let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "l"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_dir(&real).unwrap().count(),
        0,
        "nothing written through it"
    );
    std::fs::remove_file(h.path().join("ledger")).unwrap();
    std::fs::create_dir(h.path().join("ledger")).unwrap();
    // state_dir owned by another user
    std::os::unix::fs::chown(h.path().join("state"), Some(1000), Some(1000)).unwrap();
    let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "l"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("owned by uid 1000"), "{}", stderr(&o));
    assert!(h.reservations().is_empty());
    std::os::unix::fs::chown(h.path().join("state"), Some(0), Some(0)).unwrap();
    // and with both fixed it runs (the refusals above were about the dirs)
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "l"]),
        "run",
    );
    assert_eq!(std::fs::read_to_string(h.config()).unwrap(), cfg);
}

/// A state directory of the earlier layout (a tmpfs on `rw/` alone, the
/// directory itself on the host's disk), left by a container created before
/// an upgrade, is removed with its mount by the release of this version;
/// one of this layout (the directory is the tmpfs) too.
#[test]
fn state_directories_of_both_layouts_go_with_their_mounts() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let mounted = |p: &std::path::Path| {
        let m = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let p = p.display().to_string();
        m.lines().any(|l| l.split(' ').nth(4) == Some(p.as_str()))
    };
    let tmpfs = |p: &std::path::Path| {
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "gq-test"])
            .arg(p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    let old = h.path().join("old");
    std::fs::create_dir_all(old.join("rw")).unwrap();
    std::fs::write(old.join("limits"), b"").unwrap();
    tmpfs(&old.join("rw"));
    std::fs::write(old.join("rw/usage"), b"").unwrap();
    let new = h.path().join("new");
    std::fs::create_dir(&new).unwrap();
    tmpfs(&new);
    std::fs::create_dir(new.join("rw")).unwrap();
    tmpfs(&new.join("rw"));
    std::fs::write(new.join("rw/usage"), b"").unwrap();
    let all = [old.join("rw"), new.clone(), new.join("rw")];
    assert!(all.iter().all(|m| mounted(m)), "premise");
    for d in [&old, &new] {
        gpuquota_core::state::remove(d).unwrap();
        assert!(!d.exists(), "{} removed", d.display());
    }
    assert!(!all.iter().any(|m| mounted(m)), "every mount is gone");
}

/// Class 4, found in review of the one-tmpfs state directory: the
/// container's one writable mount is its usage file, and a file handle
/// (`name_to_handle_at`, unprivileged) of any other file on that mount's
/// filesystem reopens that file writable through it (`open_by_handle_at`,
/// with CAP_DAC_READ_SEARCH, which a container may be given). The usage
/// file's tmpfs holds nothing else, so `limits` stays out of reach.
#[test]
fn no_host_file_opens_writable_through_the_usage_mount() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("hd");
    cc(
        "handle_open.c",
        &b.rootfs().join("bin/handle-open"),
        &["-static"],
    );
    b.set(
        &[("vram", "1g")],
        "handle-open /run/gpu-quota/usage /run/gpu-quota/usage > /out/own 2>&1; echo $? > /out/ownrc; \
         handle-open /run/gpu-quota/limits /run/gpu-quota/usage > /out/limits 2>&1; echo $? > /out/limitsrc; sleep 600",
        &[],
    );
    let mut c = b.config();
    for set in ["bounding", "effective", "permitted"] {
        c["process"]["capabilities"][set] = serde_json::json!(["CAP_KILL", "CAP_DAC_READ_SEARCH"]);
    }
    b.write_config(&c);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "hd"]),
        "create",
    );
    let dir = std::fs::read_dir(h.path().join("state/containers"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let limits = std::fs::read(dir.join("limits")).unwrap();
    assert_ok(&h.runtime(&["start", "hd"]), "start");
    let rc = b.wait_out("limitsrc", 20).expect("the probe ran");
    // negative control: the capability and the call work in this container
    // (the usage file's own handle reopens writable through its mount)
    assert_eq!(
        b.wait_out("ownrc", 5).as_deref(),
        Some("0\n"),
        "{:?}",
        std::fs::read_to_string(b.out.join("own"))
    );
    let said = std::fs::read_to_string(b.out.join("limits")).unwrap();
    assert_ne!(rc, "0\n", "limits opened writable: {said:?}");
    // refused because the handle names no file of the usage tmpfs
    assert!(said.contains("Stale file handle"), "{said:?}");
    assert_eq!(
        std::fs::read(dir.join("limits")).unwrap(),
        limits,
        "limits unchanged"
    );
    h.cleanup();
}
