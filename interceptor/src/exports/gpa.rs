//! cuGetProcAddress / cuGetProcAddress_v2: the CUDA runtime asks for
//! "cuGetProcAddress" itself and then resolves everything through the
//! pointer it got, so both must be wrapped and must hand out wrappers.
//!
//! Mapping of a pointer the driver returned (only when the call succeeded):
//!  1. already one of ours -> unchanged;
//!  2. equal to the real exported symbol of an intercepted name -> that
//!     name's wrapper (robust against any version logic);
//!  3. otherwise by name + cudaVersion + per-thread-stream flag: the
//!     newest variant not newer than cudaVersion; when cudaVersion is above
//!     that variant's version, the driver is asked again at the variant's
//!     version and the pointer is wrapped only if it is the same function
//!     (a variant newer than this table knows is handed back untouched);
//!  4. anything else: the real pointer, untouched.

use super::{is_ours, wrapper};
use crate::cu::{CUresult, CUDA_ERROR_NOT_FOUND, CUDA_SUCCESS};
use crate::state::config;
use crate::symbols::{self, real_fn, LIB_CUDA, S, SYMS};
use libc::{c_char, c_int, c_void};

pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

type Gpa1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;
type Gpa2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

unsafe fn base_eq(sym: *const c_char, base: &[u8]) -> bool {
    for (i, &b) in base.iter().enumerate() {
        if *sym.add(i) as u8 != b {
            return false;
        }
    }
    *sym.add(base.len()) == 0
}

/// Best wrapped variant for (symbol, version, flags).
unsafe fn choose(sym: *const c_char, ver: c_int, flags: u64) -> Option<usize> {
    let want_ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let mut family_has_ptsz = false;
    let mut exact = None;
    for (i, s) in SYMS.iter().enumerate() {
        if !s.wrapped || s.lib != LIB_CUDA {
            continue;
        }
        if base_eq(sym, s.base) && s.ptsz {
            family_has_ptsz = true;
        }
        if symbols::name_eq(sym, s.name) {
            exact = Some(i);
        }
    }
    let mut best: Option<usize> = None;
    for (i, s) in SYMS.iter().enumerate() {
        if !s.wrapped || s.lib != LIB_CUDA || !base_eq(sym, s.base) {
            continue;
        }
        if s.ver > ver || (family_has_ptsz && s.ptsz != want_ptsz) {
            continue;
        }
        if best.is_none_or(|b| SYMS[b].ver < s.ver) {
            best = Some(i);
        }
    }
    best.or(exact)
}

/// Replace *pfn by our wrapper where one applies. `again(v, out)` asks the
/// driver once more for the same symbol and flags at cudaVersion v.
unsafe fn map(
    sym: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
    again: &dyn Fn(c_int, *mut *mut c_void) -> bool,
) {
    if sym.is_null() || pfn.is_null() {
        return;
    }
    let p = *pfn as usize;
    if p == 0 || is_ours(p) {
        return;
    }
    match config() {
        Some(c) if c.enforce => {}
        _ => return,
    }
    symbols::resolve_all_cuda();
    for (i, s) in SYMS.iter().enumerate() {
        if s.wrapped && s.lib == LIB_CUDA && symbols::real_known(i) == p {
            *pfn = wrapper(i) as *mut c_void;
            dbg(sym, ver, flags, b" -> wrapper (pointer match) ", s.name);
            return;
        }
    }
    let i = match choose(sym, ver, flags) {
        Some(i) => i,
        None => return,
    };
    let s = &SYMS[i];
    if s.ver != ver && base_eq(sym, s.base) {
        let mut q: *mut c_void = core::ptr::null_mut();
        if !again(s.ver, &mut q) || q as usize != p {
            dbg(
                sym,
                ver,
                flags,
                b" -> real pointer left (unknown newer variant than ",
                s.name,
            );
            return;
        }
    }
    symbols::offer_real(i, p);
    if symbols::real_known(i) != 0 {
        *pfn = wrapper(i) as *mut c_void;
        dbg(sym, ver, flags, b" -> wrapper (name+version) ", s.name);
    }
}

unsafe fn dbg(sym: *const c_char, ver: c_int, flags: u64, what: &[u8], name: &[u8]) {
    if !crate::state::debug_enabled() {
        return;
    }
    let mut v = crate::fmt::Buf::<48>::new();
    v.push(b" ver=");
    v.push_i64(ver as i64);
    v.push(b" flags=");
    v.push_u64(flags);
    let n = &name[..name.len().saturating_sub(1)];
    crate::state::debug(&[
        b"cuGetProcAddress ",
        crate::sys::cstr_bytes(sym),
        v.bytes(),
        what,
        n,
    ]);
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    sym: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    let f = match real_fn!(S::cuGetProcAddress_v2, Gpa2) {
        Some(f) => f,
        None => return CUDA_ERROR_NOT_FOUND,
    };
    let r = f(sym, pfn, ver, flags, status);
    if r == CUDA_SUCCESS {
        map(sym, pfn, ver, flags, &|v, out| {
            let mut st: c_int = 0;
            f(sym, out, v, flags, &mut st) == CUDA_SUCCESS
        });
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    sym: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
) -> CUresult {
    if let Some(f) = real_fn!(S::cuGetProcAddress, Gpa1) {
        let r = f(sym, pfn, ver, flags);
        if r == CUDA_SUCCESS {
            map(sym, pfn, ver, flags, &|v, out| {
                f(sym, out, v, flags) == CUDA_SUCCESS
            });
        }
        return r;
    }
    // a driver without the v1 export: serve it through v2
    cuGetProcAddress_v2(sym, pfn, ver, flags, core::ptr::null_mut())
}
