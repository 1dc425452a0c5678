//! Untrusted images and tenants, against real runc 1.1.5. One test
//! per class of attack; each keeps a negative control that shows the check
//! can fail (the attack's premise holds here, or the old step, reproduced in
//! the harness, does reach the host).
//!
//! This file: links and special files in the image, refused before any read.
use gpu_quota_e2e::untrusted::*;
use gpu_quota_e2e::*;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Class 3: `/etc/ld.so.preload -> /data/key` (a 0600 root file on a
/// volume) was followed before its type was checked, and the merged preload
/// file republished the key to the container's user. Every final component
/// the hook reads or mounts over is opened O_PATH|O_NOFOLLOW and checked.
#[test]
fn image_links_and_special_files_are_refused_before_any_read() {
    require_e2e!();
    let h = elf_host("");
    let data = h.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("key"), b"SECRET-KEY-0600\n").unwrap();
    std::fs::set_permissions(data.join("key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_volume = |b: &Bundle| {
        let mut c = b.config();
        c["mounts"].as_array_mut().unwrap().push(serde_json::json!(
            {"destination": "/data", "type": "bind", "source": data.to_str().unwrap(), "options": ["rbind", "ro"]}));
        c["process"]["user"] = serde_json::json!({"uid": 1000, "gid": 1000});
        b.write_config(&c);
        std::fs::set_permissions(&b.out, std::fs::Permissions::from_mode(0o777)).unwrap();
    };

    // Negative control: the key is protected from the container's user, so
    // a copy of it anywhere the user can read would be a leak.
    let ctl = h.bundle("ctl");
    ctl.set(
        &[],
        "cat /data/key > /out/key 2>/out/err; echo $? > /out/rc",
        &[],
    );
    with_volume(&ctl);
    assert_ok(
        &h.runc(&["run", "--bundle", &ctl.bundle_arg(), "ctl"]),
        "control",
    );
    assert_ne!(
        ctl.wait_out("rc", 5).unwrap(),
        "0\n",
        "uid 1000 cannot read the key"
    );

    type Plant = Box<dyn Fn(&Path)>;
    let fifo_cache: Plant = Box::new(|r: &Path| mkfifo(&r.join("etc/ld.so.cache")));
    let cases: Vec<(&str, Plant, &str, &str)> = vec![
        (
            "preload-link",
            Box::new(|r: &Path| symlink("/data/key", r.join("etc/ld.so.preload")).unwrap()),
            "/etc/ld.so.preload",
            "symlink",
        ),
        (
            "preload-chardev",
            Box::new(|r: &Path| {
                let c =
                    std::ffi::CString::new(r.join("etc/ld.so.preload").to_str().unwrap()).unwrap();
                // SAFETY: valid C string; mknod of /dev/null's numbers as root.
                assert_eq!(
                    unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) },
                    0
                );
            }),
            "/etc/ld.so.preload",
            "character device",
        ),
        ("cache-fifo", fifo_cache, "/etc/ld.so.cache", "FIFO"),
        (
            "cache-link",
            Box::new(|r: &Path| symlink("/data/key", r.join("etc/ld.so.cache")).unwrap()),
            "/etc/ld.so.cache",
            "symlink",
        ),
        (
            "mountpoint-link",
            Box::new(|r: &Path| {
                std::fs::create_dir_all(r.join("run/elsewhere")).unwrap();
                symlink("/run/elsewhere", r.join("run/gpu-quota")).unwrap();
            }),
            "/run/gpu-quota",
            "symlink",
        ),
    ];
    for (name, plant, path, what) in &cases {
        let b = h.bundle(name);
        glibc_image(&b);
        std::fs::create_dir_all(b.rootfs().join("etc")).unwrap();
        plant(&b.rootfs());
        b.set(
            &[("vram", "1g")],
            "cat /etc/ld.so.preload > /out/preload",
            &[],
        );
        with_volume(&b);
        let t = Instant::now();
        let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), name]);
        assert!(!o.status.success(), "{name} must be refused");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{name}: {:?}",
            t.elapsed()
        );
        let e = stderr(&o);
        assert!(
            e.contains(path) && e.contains(what),
            "{name}: message names {path} ({what}): {e}"
        );
        assert!(!e.contains("SECRET"), "{name}: {e}");
        assert!(h.reservations().is_empty(), "{name}: released");
        let state = h.path().join("state/containers");
        for entry in walk(&state) {
            let bytes = std::fs::read(&entry).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("SECRET"),
                "{name}: {} republishes the key",
                entry.display()
            );
        }
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                out.extend(walk(&p));
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out
}
