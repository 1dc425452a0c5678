use super::*;
use std::os::unix::fs::symlink;

#[test]
fn symlinks_resolve_inside_the_root() {
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("ld.so.preload"), b"HOST").unwrap();
    let root = host.path().join("rootfs");
    std::fs::create_dir(&root).unwrap();
    // /etc -> absolute host dir; /lib -> ../../.. escape attempt
    symlink(&secret, root.join("etc")).unwrap();
    symlink("../../../../../..", root.join("lib")).unwrap();
    let r = Rootfs::open(&root).unwrap();
    // reading through /etc never reaches the host file
    let e = r.read_file("/etc/ld.so.preload", 100).unwrap();
    assert_eq!(e, None, "host file must be invisible");
    // creating under /etc is refused, not done on the host
    let err = r
        .ensure("/etc/ld.so.preload", Kind::File)
        .unwrap_err()
        .to_string();
    assert!(err.contains("symlink"), "{err}");
    assert_eq!(
        std::fs::read(secret.join("ld.so.preload")).unwrap(),
        b"HOST"
    );
    assert_eq!(std::fs::read_dir(&secret).unwrap().count(), 1);
    // /lib/x resolves to <root>/x
    r.ensure("/lib/x", Kind::File).unwrap();
    assert!(root.join("x").exists());
}

#[test]
fn dangling_file_symlink_refused_and_dirs_created() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir(root.join("etc")).unwrap();
    symlink("/nonexistent/host/file", root.join("etc/ld.so.preload")).unwrap();
    let r = Rootfs::open(root).unwrap();
    assert!(r.ensure("/etc/ld.so.preload", Kind::File).is_err());
    r.ensure("/run/gpu-quota/driver", Kind::Dir).unwrap();
    assert!(root.join("run/gpu-quota/driver").is_dir());
    std::fs::write(root.join("file"), b"x").unwrap();
    assert!(r.ensure("/file/sub", Kind::Dir).is_err());
    assert!(
        r.ensure("/run", Kind::File).is_err(),
        "a directory is not a file target"
    );
}

/// Class 3: the final component is checked before anything is
/// opened for reading; symlinks (even ones inside the rootfs) and
/// special files are refused with the path named.
#[test]
fn final_components_are_never_followed_or_read_before_their_type_is_known() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir(root.join("etc")).unwrap();
    std::fs::write(root.join("key"), b"SECRET").unwrap();
    symlink("/key", root.join("etc/ld.so.preload")).unwrap();
    let fifo = std::ffi::CString::new(root.join("etc/fifo").to_str().unwrap()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let r = Rootfs::open(root).unwrap();
    let e = r
        .read_file("/etc/ld.so.preload", 100)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/etc/ld.so.preload") && e.contains("symlink"),
        "{e}"
    );
    let t = std::time::Instant::now();
    let e = r.read_file("/etc/fifo", 100).unwrap_err().to_string();
    assert!(e.contains("FIFO"), "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
    let e = r
        .ensure("/etc/ld.so.preload", Kind::File)
        .unwrap_err()
        .to_string();
    assert!(e.contains("symlink"), "{e}");
    // replace_file: atomic, refuses links and leaves no temp behind
    r.replace_file("/etc/ld.so.cache", b"one", 0o644).unwrap();
    r.replace_file("/etc/ld.so.cache", b"two", 0o644).unwrap();
    assert_eq!(std::fs::read(root.join("etc/ld.so.cache")).unwrap(), b"two");
    assert!(r.replace_file("/etc/ld.so.preload", b"x", 0o644).is_err());
    assert_eq!(std::fs::read(root.join("key")).unwrap(), b"SECRET");
    let names: Vec<_> = std::fs::read_dir(root.join("etc"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains("gpu-quota")), "{names:?}");
    // a directory mount target that is a symlink is refused too
    symlink("/etc", root.join("run")).unwrap();
    let e = r.ensure("/run", Kind::Dir).unwrap_err().to_string();
    assert!(e.contains("symlink"), "{e}");
}

/// A mount made by a test, detached when dropped (a failing assertion
/// included). `None` when not root: those tests skip.
struct TestMount(PathBuf);
impl TestMount {
    fn new(src: &str, at: &Path, fstype: &str, flags: libc::c_ulong) -> Option<TestMount> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping: mounting needs root");
            return None;
        }
        let c = |s: &str| CString::new(s).unwrap();
        let (s, t, f) = (c(src), c(at.to_str().unwrap()), c(fstype));
        // SAFETY: valid C strings.
        let r = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), flags, std::ptr::null()) };
        assert_eq!(
            r,
            0,
            "mount {src} {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        );
        Some(TestMount(at.into()))
    }
    /// `at` bound onto itself and made private: the test's mounts below
    /// it propagate nowhere.
    fn private(at: &Path) -> Option<TestMount> {
        let m = TestMount::new(at.to_str().unwrap(), at, "", libc::MS_BIND)?;
        let t = CString::new(at.to_str().unwrap()).unwrap();
        // SAFETY: valid C string.
        let r = unsafe {
            libc::mount(
                std::ptr::null(),
                t.as_ptr(),
                std::ptr::null(),
                libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        Some(m)
    }
}
impl Drop for TestMount {
    fn drop(&mut self) {
        let t = CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: valid C string.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

fn listing(d: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| {
            let p = e.path();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A volume at /data with the image's `/etc -> /data/etc`,
/// a tmpfs at /run: every lookup that would land there is refused
/// (EXDEV), naming the mount, and nothing is written on either; the
/// same paths resolve into them without `RESOLVE_NO_XDEV` (the negative
/// control: the old lookup reached the volume's file).
#[test]
fn no_lookup_crosses_a_mount_inside_the_rootfs() {
    let host = tempfile::tempdir().unwrap();
    let Some(_private) = TestMount::private(host.path()) else {
        return;
    };
    let root = host.path().join("rootfs");
    let vol = host.path().join("vol");
    std::fs::create_dir_all(vol.join("etc")).unwrap();
    std::fs::write(vol.join("etc/ld.so.cache"), b"VOLUME").unwrap();
    for d in ["data", "run", "usr/bin"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    symlink("/data/etc", root.join("etc")).unwrap();
    let _data =
        TestMount::new(vol.to_str().unwrap(), &root.join("data"), "", libc::MS_BIND).unwrap();
    let _run = TestMount::new("tmpfs", &root.join("run"), "tmpfs", 0).unwrap();
    let before = listing(&vol.join("etc"));
    let r = Rootfs::open(&root).unwrap().with_declared(vec![Declared {
        destination: "/data".into(),
        kind: "bind".into(),
        source: vol.display().to_string(),
        private: false,
    }]);

    // negative control: without RESOLVE_NO_XDEV the lookups land there
    let old = resolve_at(&r.root, "etc/ld.so.cache", FINAL, false).unwrap();
    let mut seen = String::new();
    reopen_read(&old)
        .unwrap()
        .read_to_string(&mut seen)
        .unwrap();
    assert_eq!(seen, "VOLUME", "the old lookup reaches the volume");
    assert!(resolve_at(&r.root, "run/gpu-quota", FINAL, false).is_err());
    assert!(resolve_at(&r.root, "run", OFlag::O_PATH, false).is_ok());

    let names_data = |e: EffectError| {
        let e = e.to_string();
        assert!(
            e.contains("/data (bind of") && e.contains(&vol.display().to_string()),
            "names the declared mount: {e}"
        );
    };
    names_data(
        r.replace_file("/etc/ld.so.cache", b"ours", 0o644)
            .unwrap_err(),
    );
    names_data(r.read_file("/etc/ld.so.cache", 100).unwrap_err());
    names_data(r.ensure("/etc/ld.so.preload", Kind::File).unwrap_err());
    assert!(!r.exists("/etc/ld.so.cache"), "not the image's file");
    let e = r
        .ensure("/run/gpu-quota", Kind::Dir)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/run/gpu-quota") && e.contains("another mount (at /run)"),
        "an undeclared mount is named by its path: {e}"
    );
    assert!(
        e.contains("leads (/run) onto"),
        "names where it leaves: {e}"
    );
    let e = r.ensure("/run", Kind::Dir).unwrap_err().to_string();
    assert!(e.contains("another mount (at /run)"), "{e}");
    assert_eq!(
        listing(&vol.join("etc")),
        before,
        "nothing written on the volume"
    );
    assert_eq!(
        listing(&root.join("run")),
        vec![],
        "nothing written on the tmpfs"
    );
    // the rootfs's own directories still work
    r.ensure("/usr/bin/nvidia-smi", Kind::File).unwrap();
    r.replace_file("/usr/bin/x", b"x", 0o644).unwrap();
    assert_eq!(std::fs::read(root.join("usr/bin/x")).unwrap(), b"x");
}

/// The mounts gpu-quota attaches itself are entered: targets below the
/// read-only `/run/gpu-quota` bind resolve from its root; an image
/// symlink into it from elsewhere does not.
#[test]
fn our_own_mounts_are_entered_and_nothing_else() {
    let host = tempfile::tempdir().unwrap();
    let Some(_private) = TestMount::private(host.path()) else {
        return;
    };
    let root = host.path().join("rootfs");
    let state = host.path().join("state");
    std::fs::create_dir_all(state.join("driver")).unwrap();
    std::fs::write(state.join("usage"), b"").unwrap();
    std::fs::write(state.join("driver/libcuda.so.1"), b"").unwrap();
    std::fs::write(host.path().join("usage"), b"COUNTERS").unwrap();
    std::fs::write(host.path().join("libcuda"), b"DRIVER").unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    symlink("/run/gpu-quota/driver", root.join("etc/driver")).unwrap();
    let mut fx = MountEffects {
        rootfs: Rootfs::open(&root).unwrap(),
    };
    fx.bind(&state, "/run/gpu-quota", Kind::Dir, true).unwrap();
    let _dir = TestMount(root.join("run/gpu-quota"));
    let r = fx.bind(
        &host.path().join("usage"),
        "/run/gpu-quota/usage",
        Kind::File,
        false,
    );
    let _usage = TestMount(root.join("run/gpu-quota/usage"));
    r.unwrap();
    let r = fx.bind(
        &host.path().join("libcuda"),
        "/run/gpu-quota/driver/libcuda.so.1",
        Kind::File,
        true,
    );
    let _lib = TestMount(root.join("run/gpu-quota/driver/libcuda.so.1"));
    r.unwrap();
    assert_eq!(
        std::fs::read(root.join("run/gpu-quota/usage")).unwrap(),
        b"COUNTERS"
    );
    assert_eq!(
        std::fs::read(root.join("run/gpu-quota/driver/libcuda.so.1")).unwrap(),
        b"DRIVER"
    );
    let e = fx
        .rootfs
        .read_file("/etc/driver/libcuda.so.1", 100)
        .unwrap_err()
        .to_string();
    assert!(e.contains("another mount (at /run/gpu-quota"), "{e}");
}
