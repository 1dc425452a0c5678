//! `mount-race MODE N`: bind a "host" file read-only onto `/usr/bin/nvidia-smi`
//! of a rootfs whose `/usr/bin` is a symlink into a shared directory, while a
//! thread swaps that directory with a symlink to another mount root of the
//! same name (what a sidecar sharing a volume can do). Exits 1 as soon as a
//! bind that reported success left the host file writable through the
//! container's path, 0 after N clean rounds. Run it in a private mount
//! namespace (`unshare -m --propagation private`); tests/e2e/untrusted_mounts.rs does.
//! MODE `gpu-quota`: `MountEffects::bind`; MODE `old-remount`: the previous
//! release's bind-then-remount-by-path, the negative control.
use gpuquota_core::mountplan::{Effects, Kind};
use gpuquota_core::rootfs::{MountEffects, Rootfs};
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn mount(src: Option<&str>, dst: &str, flags: libc::c_ulong) -> bool {
    let s = src.map(|s| CString::new(s).unwrap());
    let d = CString::new(dst).unwrap();
    // SAFETY: valid C strings (or NULL) for mount(2).
    unsafe {
        libc::mount(
            s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            d.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        ) == 0
    }
}

/// The previous release: bind through the checked handle, then remount
/// read-only after looking the path up again.
fn old_bind(r: &Rootfs, src: &Path, dst: &str) -> bool {
    let sfd = std::fs::File::open(src).unwrap();
    let Ok(tfd) = r.ensure(dst, Kind::File) else {
        return false;
    };
    let p = |fd: i32| format!("/proc/self/fd/{fd}");
    if !mount(
        Some(&p(sfd.as_raw_fd())),
        &p(tfd.as_raw_fd()),
        libc::MS_BIND,
    ) {
        return false;
    }
    // the previous release's lookup (no RESOLVE_NO_XDEV then)
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let Ok(root) = std::fs::File::open(r.path()) else {
        return false;
    };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let Ok(again) = nix::fcntl::openat2(root.as_raw_fd(), dst.trim_start_matches('/'), how) else {
        return false;
    };
    // SAFETY: fresh fd from openat2.
    let again = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(again) };
    mount(
        None,
        &p(again.as_raw_fd()),
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
    )
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let n: usize = std::env::args()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let base = tempfile::Builder::new()
        .prefix("gq-race-")
        .tempdir()
        .unwrap();
    let root = base.path().join("rootfs");
    std::fs::create_dir_all(root.join("usr")).unwrap();
    std::fs::create_dir_all(root.join("shared/bin")).unwrap();
    std::fs::write(root.join("shared/bin/nvidia-smi"), b"image file\n").unwrap();
    std::os::unix::fs::symlink("/x", root.join("shared/alt")).unwrap();
    std::os::unix::fs::symlink("/shared/bin", root.join("usr/bin")).unwrap();
    std::fs::create_dir_all(root.join("x/nvidia-smi")).unwrap();
    // another mount root named nvidia-smi (a volume in real life)
    let t = CString::new("tmpfs").unwrap();
    let d = CString::new(root.join("x/nvidia-smi").to_str().unwrap()).unwrap();
    // SAFETY: valid C strings.
    assert_eq!(
        unsafe { libc::mount(t.as_ptr(), d.as_ptr(), t.as_ptr(), 0, std::ptr::null()) },
        0
    );
    let host = base.path().join("host-nvidia-smi");
    std::fs::write(&host, b"HOST BINARY\n").unwrap();
    let realdir = std::fs::File::open(root.join("shared/bin")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let shared = CString::new(root.join("shared").to_str().unwrap()).unwrap();
    let swapper = std::thread::spawn(move || {
        // SAFETY: valid C string; the fd is used for renameat2 only.
        let d = unsafe { libc::open(shared.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
        while !s2.load(Ordering::Relaxed) {
            // SAFETY: valid dirfd and C strings.
            unsafe {
                libc::renameat2(
                    d,
                    c"bin".as_ptr(),
                    d,
                    c"alt".as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
        }
    });
    let target = format!("/proc/self/fd/{}/nvidia-smi", realdir.as_raw_fd());
    let r = Rootfs::open(&root).unwrap();
    let mut fx = MountEffects {
        rootfs: Rootfs::open(&root).unwrap(),
    };
    let mut won = None;
    for i in 0..n {
        let ok = match mode.as_str() {
            "old-remount" => old_bind(&r, &host, "/usr/bin/nvidia-smi"),
            _ => fx
                .bind(&host, "/usr/bin/nvidia-smi", Kind::File, true)
                .is_ok(),
        };
        let writable = std::fs::OpenOptions::new()
            .append(true)
            .open(&target)
            .is_ok();
        let is_host = std::fs::read(&target)
            .map(|b| b == b"HOST BINARY\n")
            .unwrap_or(false);
        if ok && writable && is_host {
            won = Some(i);
            break;
        }
        let c = CString::new(target.clone()).unwrap();
        // SAFETY: valid C string.
        while unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {}
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    // Leave nothing behind: the binds of the last round, then the stand-in
    // volume (a mounted tmpfs keeps the temp dir from being removed), then the
    // temp dir itself (process::exit below skips destructors).
    let c = CString::new(target.clone()).unwrap();
    // SAFETY: valid C strings.
    while unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {}
    // SAFETY: valid C string.
    while unsafe { libc::umount2(d.as_ptr(), libc::MNT_DETACH) } == 0 {}
    drop((fx, r, realdir));
    let base_path = base.path().to_path_buf();
    if let Err(e) = base.close() {
        eprintln!("mount-race: could not remove {}: {e}", base_path.display());
    }
    match won {
        Some(i) => {
            println!(
                "{mode}: round {i}: the bind reported read-only but the host file is writable"
            );
            std::process::exit(1)
        }
        None => println!("{mode}: {n} rounds, the host file never writable"),
    }
}
