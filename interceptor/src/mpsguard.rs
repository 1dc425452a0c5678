//! A process in a container with a compute share runs as an MPS client or
//! its CUDA does not start. Real CUDA runs a process outside MPS, on the
//! whole GPU, when it cannot reach the control daemon (measured on the
//! H200: 791 TFLOPS with a share's variables after the daemon had exited),
//! so `cuInit` is checked on both sides of the driver's:
//!
//! * before: the daemon's control socket (`/run/gpu-quota/mps/control`,
//!   the container's view of its pipe directory) takes a connection — a
//!   non-blocking connect, retried for at most [`CONNECT_BOUND_NS`] while
//!   the backlog is full, closed at once, no command sent. Nothing listens
//!   (the daemon died, or quit): refused, and the driver is not called, so
//!   the same process can try again once the supervisor started a new one;
//! * after the driver's `cuInit` succeeded: every device says
//!   `CU_DEVICE_ATTRIBUTE_MPS_ENABLED` 1. One that says 0 ran this process
//!   outside MPS (the daemon died between the two, or hangs and did not
//!   take the client): this and every later `cuInit` of the process are
//!   refused (the driver's init cannot be undone). A driver that does not
//!   know the attribute (before CUDA 12.3) leaves only the first check.
//!
//! Refused with `CUDA_ERROR_MPS_CONNECTION_FAILED` and one line saying why
//! and what to do. Not a fast path: `cuInit` runs a few times per process;
//! once a process is confirmed a client, later calls cost one load. Nothing
//! here allocates.

use crate::cu::{CUresult, CUDA_ERROR_MPS_CONNECTION_FAILED};
use crate::state::config;
use crate::symbols::{real_fn, S};
use crate::sys;
use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};
use gpuquota_formats::grant;
use libc::c_int;

/// `CU_DEVICE_ATTRIBUTE_MPS_ENABLED` in cuda.h (CUDA 12.3 and later): 1
/// when contexts created on the device are shared through MPS.
pub const CU_DEVICE_ATTRIBUTE_MPS_ENABLED: c_int = 133;
/// The control socket in the container.
pub const CONTROL_SOCKET: &CStr = gpuquota_formats::mps::CONTAINER_CONTROL_SOCKET_C;
/// How long a connect to a full backlog is tried again.
pub const CONNECT_BOUND_NS: u64 = 500_000_000;

/// A device said MPS off after the driver's cuInit: refused for good.
static OUTSIDE: AtomicBool = AtomicBool::new(false);
/// That device's ordinal, for the line.
static OUTSIDE_ORDINAL: AtomicI32 = AtomicI32::new(-1);
/// The pid whose cuInit was confirmed a client (a forked child checks
/// again at its own).
static CONFIRMED: AtomicI32 = AtomicI32::new(0);

fn has_share() -> bool {
    config()
        .and_then(|c| c.grant.as_ref())
        .is_some_and(|g| grant::share(g.table.gpus()).is_some())
}

/// Before the driver's cuInit: `Err` (the line printed) where the process
/// must not reach it.
pub fn before_init() -> Result<(), CUresult> {
    if !has_share() {
        return Ok(());
    }
    if OUTSIDE.load(Acquire) {
        outside_line(OUTSIDE_ORDINAL.load(Relaxed));
        return Err(CUDA_ERROR_MPS_CONNECTION_FAILED);
    }
    if CONFIRMED.load(Acquire) == sys::getpid() {
        return Ok(());
    }
    control_answers(CONTROL_SOCKET, CONNECT_BOUND_NS).map_err(|errno| {
        no_daemon_line(errno);
        CUDA_ERROR_MPS_CONNECTION_FAILED
    })
}

/// After the driver's cuInit returned success: that result, or the
/// refusal when the process is not an MPS client.
pub fn after_init(ok: CUresult) -> CUresult {
    if !has_share() || CONFIRMED.load(Acquire) == sys::getpid() {
        return ok;
    }
    type Count = unsafe extern "C" fn(*mut c_int) -> CUresult;
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CUresult;
    let (Some(count), Some(attr)) = (
        real_fn!(S::cuDeviceGetCount, Count),
        real_fn!(S::cuDeviceGetAttribute, Attr),
    ) else {
        return ok;
    };
    let mut n: c_int = 0;
    // SAFETY: the driver's own entry points, an out-pointer to a local
    let n = if unsafe { count(&mut n) } == 0 { n } else { 0 };
    let v = verdict(n, |o| {
        let mut v: c_int = -1;
        // SAFETY: as above; a CUdevice is its ordinal
        match unsafe { attr(&mut v, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, o) } {
            0 => Ok(v),
            e => Err(e),
        }
    });
    match v {
        Verdict::Client => {
            CONFIRMED.store(sys::getpid(), Release);
            ok
        }
        Verdict::Unknown => ok,
        Verdict::Outside(o) => {
            OUTSIDE_ORDINAL.store(o, Relaxed);
            OUTSIDE.store(true, Release);
            outside_line(o);
            CUDA_ERROR_MPS_CONNECTION_FAILED
        }
    }
}

/// What the devices say of this process.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// every device: MPS on
    Client,
    /// the driver does not know the attribute, or has no device
    Unknown,
    /// this ordinal: MPS off
    Outside(c_int),
}

/// The verdict over `n` devices whose attribute `attr` reads (at most 64,
/// the interceptor's ordinal table).
pub fn verdict(n: c_int, attr: impl Fn(c_int) -> Result<c_int, CUresult>) -> Verdict {
    if n <= 0 {
        return Verdict::Unknown;
    }
    for o in 0..n.min(64) {
        match attr(o) {
            Ok(0) => return Verdict::Outside(o),
            Ok(_) => {}
            // an attribute this driver does not have (CUDA_ERROR_INVALID_VALUE
            // before CUDA 12.3), or a device that cannot be asked: no
            // confirmation either way
            Err(_) => return Verdict::Unknown,
        }
    }
    Verdict::Client
}

/// Whether the unix socket at `path` takes a connection: `Err(errno)`
/// when it does not (no file, nothing listening, a backlog still full
/// after `bound_ns`). The connection is closed at once. NVIDIA's daemon
/// listens on a socket of another type than a stream (measured on the
/// H200: a stream connect got EPROTOTYPE), so each type a daemon may
/// listen on is tried in turn, the next only where the kernel says the
/// type is wrong.
pub fn control_answers(path: &CStr, bound_ns: u64) -> Result<(), c_int> {
    let mut r = Err(libc::EPROTOTYPE);
    for kind in [libc::SOCK_SEQPACKET, libc::SOCK_STREAM] {
        r = connect_as(path, kind, bound_ns);
        if r != Err(libc::EPROTOTYPE) {
            break;
        }
    }
    r
}

fn connect_as(path: &CStr, kind: c_int, bound_ns: u64) -> Result<(), c_int> {
    // SAFETY: a zeroed sockaddr_un is valid
    let mut a: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let p = path.to_bytes();
    if p.len() >= a.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    for (d, s) in a.sun_path.iter_mut().zip(p) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain syscalls on a descriptor of our own, closed below
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return Err(sys::errno());
        }
        let until = sys::monotonic_ns().saturating_add(bound_ns);
        let r = loop {
            let rc = libc::connect(
                fd,
                &a as *const libc::sockaddr_un as *const libc::sockaddr,
                core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            );
            if rc == 0 {
                break Ok(());
            }
            let e = sys::errno();
            let left = until.saturating_sub(sys::monotonic_ns());
            match e {
                libc::EINTR => continue,
                // a unix socket's full backlog: try again shortly
                libc::EAGAIN if left > 0 => {
                    let ts = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: left.min(10_000_000) as libc::c_long,
                    };
                    libc::nanosleep(&ts, core::ptr::null_mut());
                }
                libc::EINPROGRESS => {
                    let mut pfd = libc::pollfd {
                        fd,
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    let ms = (left / 1_000_000) as c_int;
                    if libc::poll(&mut pfd, 1, ms) != 1 {
                        break Err(libc::ETIMEDOUT);
                    }
                    let mut err: c_int = 0;
                    let mut len = core::mem::size_of::<c_int>() as libc::socklen_t;
                    libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_ERROR,
                        &mut err as *mut c_int as *mut libc::c_void,
                        &mut len,
                    );
                    break if err == 0 { Ok(()) } else { Err(err) };
                }
                e => break Err(e),
            }
        };
        libc::close(fd);
        r
    }
}

/// What a connect's errno says about the daemon.
fn why(errno: c_int) -> &'static [u8] {
    match errno {
        libc::ECONNREFUSED => b"nothing listens on it: the daemon is gone",
        libc::ENOENT => b"there is no socket: the daemon quit",
        libc::EAGAIN | libc::ETIMEDOUT => b"it takes no connection: the daemon hangs",
        libc::EACCES | libc::EPERM => b"permission denied",
        _ => b"connect failed",
    }
}

fn no_daemon_line(errno: c_int) {
    let Some(mut b) = crate::msg::gate::<640>() else {
        return;
    };
    b.push(b"gpu-quota: cuInit refused: this container's compute share runs through its GPU's MPS daemon, which does not answer at ");
    b.push(CONTROL_SOCKET.to_bytes());
    b.push(b" (");
    b.push(why(errno));
    b.push(b", errno ");
    b.push_u64(errno as u64);
    b.push(b"); without it CUDA would run this process outside MPS, on the whole GPU. gpu-quota-mps-supervise starts a new daemon within seconds: run the process again then; if it stays refused, the operator checks `systemctl status gpu-quota-mps-supervise` and runs `gpu-quota gc`");
    crate::msg::finish(b);
}

fn outside_line(ordinal: c_int) {
    let Some(mut b) = crate::msg::gate::<640>() else {
        return;
    };
    b.push(b"gpu-quota: cuInit refused: CUDA started outside MPS in this process (GPU ");
    b.push_i64(ordinal as i64);
    b.push(b" reports MPS off: its MPS daemon did not take this client, it may hang or have just been restarted), where it would run on the whole GPU instead of this container's compute share; CUDA stays refused in this process: run it again once the daemon answers (gpu-quota-mps-supervise replaces a dead or hung daemon within seconds)");
    crate::msg::finish(b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cu::CUDA_ERROR_INVALID_VALUE;
    use std::os::unix::net::UnixListener;

    #[test]
    fn the_socket_is_the_containers_pipe_directorys_control() {
        let want = format!("{}/control", gpuquota_formats::mps::CONTAINER_PIPE_DIR);
        assert_eq!(CONTROL_SOCKET.to_str().unwrap(), want);
    }

    /// A listening socket answers; the same path after its listener went
    /// (a daemon that died) and a missing one do not, quickly.
    #[test]
    fn a_socket_answers_only_while_something_listens() {
        let d = std::env::temp_dir().join(format!("gq-mpsguard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("control");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let l = UnixListener::bind(&p).unwrap();
        assert_eq!(control_answers(&c, CONNECT_BOUND_NS), Ok(()));
        drop(l);
        let t = std::time::Instant::now();
        assert_eq!(
            control_answers(&c, CONNECT_BOUND_NS),
            Err(libc::ECONNREFUSED)
        );
        std::fs::remove_file(&p).unwrap();
        assert_eq!(control_answers(&c, CONNECT_BOUND_NS), Err(libc::ENOENT));
        assert!(t.elapsed() < std::time::Duration::from_millis(100));
        let long = std::ffi::CString::new("/x".repeat(100)).unwrap();
        assert_eq!(control_answers(&long, 0), Err(libc::ENAMETOOLONG));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// NVIDIA's daemon listens on a socket that is no stream (on the H200 a
    /// stream connect got EPROTOTYPE and every share was refused): a
    /// seqpacket listener answers too.
    #[test]
    fn a_seqpacket_listener_answers() {
        let d = std::env::temp_dir().join(format!("gq-mpsguard-sp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let c = std::ffi::CString::new(d.join("control").to_str().unwrap()).unwrap();
        // SAFETY: a socket of the test's own, bound and listened on, closed below
        let fd = unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
            let mut a: libc::sockaddr_un = core::mem::zeroed();
            a.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, s) in a.sun_path.iter_mut().zip(c.to_bytes()) {
                *d = *s as libc::c_char;
            }
            let len = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            assert_eq!(
                libc::bind(fd, &a as *const _ as *const libc::sockaddr, len),
                0
            );
            assert_eq!(libc::listen(fd, 8), 0);
            fd
        };
        assert_eq!(control_answers(&c, CONNECT_BOUND_NS), Ok(()));
        // SAFETY: ours
        unsafe { libc::close(fd) };
        assert_eq!(
            control_answers(&c, CONNECT_BOUND_NS),
            Err(libc::ECONNREFUSED)
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A listener that accepts nothing: the backlog fills, and the check
    /// gives up within its bound instead of waiting.
    #[test]
    fn a_full_backlog_is_given_up_within_the_bound() {
        let d = std::env::temp_dir().join(format!("gq-mpsguard-bl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("control");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let _l = UnixListener::bind(&p).unwrap();
        // fill the backlog: a closed connection nobody accepted stays queued
        let mut n = 0;
        while n < 100_000 && control_answers(&c, 0).is_ok() {
            n += 1;
        }
        let t = std::time::Instant::now();
        assert_eq!(control_answers(&c, 50_000_000), Err(libc::EAGAIN));
        let e = t.elapsed();
        assert!(
            e >= std::time::Duration::from_millis(40) && e < std::time::Duration::from_secs(1),
            "{e:?}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn every_device_must_say_mps() {
        assert_eq!(verdict(2, |_| Ok(1)), Verdict::Client);
        assert_eq!(verdict(2, |o| Ok((o == 0) as c_int)), Verdict::Outside(1));
        assert_eq!(verdict(1, |_| Ok(0)), Verdict::Outside(0));
        // a driver before the attribute: no verdict (the socket check stays)
        assert_eq!(
            verdict(1, |_| Err(CUDA_ERROR_INVALID_VALUE)),
            Verdict::Unknown
        );
        assert_eq!(verdict(0, |_| Ok(0)), Verdict::Unknown);
    }
}
