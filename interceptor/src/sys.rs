//! Thin libc layer: versioned dl* imports, stderr, env, small file reads,
//! clocks. Nothing here allocates.

use core::sync::atomic::{AtomicUsize, Ordering};
pub use libc::{c_char, c_int, c_uint, c_void};

pub const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
pub const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();

// Bind the dl* imports to the oldest x86_64 version so that objdump -T shows
// only GLIBC_2.2.5 for them (glibc >= 2.34 would otherwise bind GLIBC_2.34).
// On glibc < 2.34 these live in libdl.so.2, which build.rs keeps NEEDED.
#[cfg(all(not(test), target_arch = "x86_64"))]
core::arch::global_asm!(
    ".symver gq_imp_dlvsym, dlvsym@GLIBC_2.2.5",
    ".symver gq_imp_dlopen, dlopen@GLIBC_2.2.5",
);
#[cfg(all(not(test), target_arch = "aarch64"))]
core::arch::global_asm!(
    ".symver gq_imp_dlvsym, dlvsym@GLIBC_2.17",
    ".symver gq_imp_dlopen, dlopen@GLIBC_2.17",
);

#[cfg(not(test))]
extern "C" {
    fn gq_imp_dlvsym(h: *mut c_void, name: *const c_char, ver: *const c_char) -> *mut c_void;
    fn gq_imp_dlopen(name: *const c_char, flags: c_int) -> *mut c_void;
}
#[cfg(test)]
unsafe fn gq_imp_dlvsym(h: *mut c_void, name: *const c_char, ver: *const c_char) -> *mut c_void {
    libc::dlvsym(h, name, ver)
}
#[cfg(test)]
unsafe fn gq_imp_dlopen(name: *const c_char, flags: c_int) -> *mut c_void {
    libc::dlopen(name, flags)
}

/// The real `dlsym` (next definition after this library), resolved once.
/// Read by the assembly entry in dlsym_entry.rs.
pub static GQ_REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Resolve the real dlsym if not done yet. Idempotent and race-free (all
/// racers store the same value).
#[inline]
pub fn real_dlsym_ptr() -> usize {
    let v = GQ_REAL_DLSYM.load(Ordering::Acquire);
    if v != 0 {
        return v;
    }
    resolve_real_dlsym()
}

#[cold]
fn resolve_real_dlsym() -> usize {
    unsafe {
        // The oldest version first: it exists on every glibc of the
        // architecture (as a compat symbol on >= 2.34), so the lookup never
        // fails and never allocates an error message (a malloc interposer
        // calling dlsym from malloc must not recurse into us).
        let order: [&core::ffi::CStr; 3] = if cfg!(target_arch = "x86_64") {
            [c"GLIBC_2.2.5", c"GLIBC_2.34", c"GLIBC_2.17"]
        } else {
            [c"GLIBC_2.17", c"GLIBC_2.34", c"GLIBC_2.2.5"]
        };
        let mut p = core::ptr::null_mut();
        for v in order {
            p = gq_imp_dlvsym(RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr());
            if !p.is_null() {
                break;
            }
        }
        let v = p as usize;
        GQ_REAL_DLSYM.store(v, Ordering::Release);
        v
    }
}

/// Call the real dlsym from inside this library (RTLD_NEXT is relative to us).
pub unsafe fn real_dlsym(h: *mut c_void, name: *const c_char) -> *mut c_void {
    let p = real_dlsym_ptr();
    if p == 0 {
        return core::ptr::null_mut();
    }
    let f: DlsymFn = core::mem::transmute(p);
    f(h, name)
}

pub unsafe fn dlopen(name: *const c_char, flags: c_int) -> *mut c_void {
    gq_imp_dlopen(name, flags)
}

pub fn write_stderr(b: &[u8]) {
    let mut off = 0;
    while off < b.len() {
        let r = unsafe { libc::write(2, b[off..].as_ptr() as *const c_void, b.len() - off) };
        if r <= 0 {
            if r < 0 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        off += r as usize;
    }
}

pub fn errno() -> c_int {
    unsafe { *libc::__errno_location() }
}

/// Length of a NUL-terminated string.
pub unsafe fn cstrlen(p: *const c_char) -> usize {
    let mut n = 0;
    while *p.add(n) != 0 {
        n += 1;
    }
    n
}

pub unsafe fn cstr_bytes<'a>(p: *const c_char) -> &'a [u8] {
    core::slice::from_raw_parts(p as *const u8, cstrlen(p))
}

/// getenv as bytes (None when unset). Only called during init.
pub fn getenv(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    unsafe {
        let p = libc::getenv(name.as_ptr());
        if p.is_null() {
            None
        } else {
            Some(cstr_bytes(p))
        }
    }
}

/// Read up to buf.len() bytes of a file; None if it cannot be opened.
pub fn read_file(path: *const c_char, buf: &mut [u8]) -> Option<usize> {
    read_file_flags(path, buf, 0)
}

/// read_file, refusing a symlink as the last component.
pub fn read_file_nofollow(path: *const c_char, buf: &mut [u8]) -> Option<usize> {
    read_file_flags(path, buf, libc::O_NOFOLLOW | libc::O_NONBLOCK)
}

fn read_file_flags(path: *const c_char, buf: &mut [u8], extra: c_int) -> Option<usize> {
    unsafe {
        let fd = libc::open(path, libc::O_RDONLY | libc::O_CLOEXEC | extra);
        if fd < 0 {
            return None;
        }
        let mut off = 0;
        while off < buf.len() {
            let r = libc::read(fd, buf[off..].as_mut_ptr() as *mut c_void, buf.len() - off);
            if r < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                break;
            }
            if r == 0 {
                break;
            }
            off += r as usize;
        }
        libc::close(fd);
        Some(off)
    }
}

pub fn file_exists(path: &core::ffi::CStr) -> bool {
    unsafe { libc::access(path.as_ptr(), libc::F_OK) == 0 }
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleep `ms` milliseconds (cold paths only).
pub fn sleep_ms(ms: u64) {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

pub fn gettid() -> i64 {
    unsafe { libc::syscall(libc::SYS_gettid) as i64 }
}

pub fn getpid() -> i32 {
    unsafe { libc::getpid() }
}

/// A path built on the stack: `dir` + "/" + `leaf`, NUL-terminated.
pub struct PathBuf {
    pub buf: [u8; 512],
    pub len: usize,
}

impl PathBuf {
    pub const fn empty() -> Self {
        PathBuf {
            buf: [0; 512],
            len: 0,
        }
    }
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let mut p = PathBuf::empty();
        if b.len() >= p.buf.len() || b.is_empty() {
            return None;
        }
        p.buf[..b.len()].copy_from_slice(b);
        p.len = b.len();
        Some(p)
    }
    pub fn join(dir: &[u8], leaf: &[u8]) -> Option<Self> {
        let mut p = PathBuf::empty();
        let need = dir.len() + 1 + leaf.len();
        if need >= p.buf.len() {
            return None;
        }
        p.buf[..dir.len()].copy_from_slice(dir);
        p.buf[dir.len()] = b'/';
        p.buf[dir.len() + 1..need].copy_from_slice(leaf);
        p.len = need;
        Some(p)
    }
    /// The path as a C string (the buffer is zeroed past `len`).
    pub fn as_cstr(&self) -> &core::ffi::CStr {
        core::ffi::CStr::from_bytes_until_nul(&self.buf).unwrap_or(c"")
    }
    pub fn as_ptr(&self) -> *const c_char {
        self.buf.as_ptr() as *const c_char
    }
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Process start time (clock ticks since boot, field 22 of /proc/<pid>/stat);
/// 0 when unknown.
pub fn proc_start_time(pid: i32) -> u64 {
    proc_state_start(pid).1
}

/// (state letter of field 3, start time of field 22) of /proc/<pid>/stat;
/// (0, 0) when unreadable.
pub fn proc_state_start(pid: i32) -> (u8, u64) {
    let mut path = [0u8; 48];
    let mut w = crate::fmt::Buf::<48>::new();
    w.push(b"/proc/");
    w.push_u64(pid as u64);
    w.push(b"/stat");
    let b = w.bytes();
    path[..b.len()].copy_from_slice(b);
    let mut buf = [0u8; 1024];
    let n = match read_file(path.as_ptr() as *const c_char, &mut buf) {
        Some(n) => n,
        None => return (0, 0),
    };
    let s = &buf[..n];
    // comm may contain spaces and parens: fields start after the last ')'.
    let mut close = None;
    for (i, &c) in s.iter().enumerate() {
        if c == b')' {
            close = Some(i);
        }
    }
    let rest = match close {
        Some(i) => &s[i + 1..],
        None => return (0, 0),
    };
    let mut state = 0u8;
    // rest = " S ppid ..." — field 3 is state; start time is field 22.
    let mut field = 2;
    let mut i = 0;
    while i < rest.len() {
        while i < rest.len() && rest[i] == b' ' {
            i += 1;
        }
        let start = i;
        while i < rest.len() && rest[i] != b' ' {
            i += 1;
        }
        if start == i {
            break;
        }
        field += 1;
        if field == 3 {
            state = rest[start];
        }
        if field == 22 {
            let mut v: u64 = 0;
            for &c in &rest[start..i] {
                if !c.is_ascii_digit() {
                    return (state, 0);
                }
                v = v.wrapping_mul(10).wrapping_add((c - b'0') as u64);
            }
            return (state, v);
        }
    }
    (state, 0)
}
