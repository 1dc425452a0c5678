//! The `dlsym` entry point.
//!
//! glibc resolves `dlsym(RTLD_NEXT, …)` relative to the *return address* of
//! the dlsym call, so for every name we do not intercept the entry must be a
//! true tail jump into the real dlsym with the caller's return address still
//! on the stack. The entry is therefore assembly: it asks `gq_dlsym_hook`
//! (which only compares names and, for an intercepted driver symbol, asks the
//! real dlsym itself) and either returns the wrapper or restores the argument
//! registers and jumps to the real dlsym.

use super::{is_ours, lookup_wrapped, wrapper};
use crate::state::config;
use crate::symbols;
use crate::sys::{self, c_char, c_void};

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        // entry: rsp % 16 == 8
        "push rdi",
        "push rsi",
        "sub rsp, 8",           // align the call below
        "mov rdx, [rsp + 24]",  // caller's return address (informational)
        "call {hook}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "mov rax, [rip + {real}]",
        "jmp rax",
        hook = sym gq_dlsym_hook,
        real = sym sys::GQ_REAL_DLSYM,
    )
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "mov x2, x30",
        "bl {hook}",
        "mov x16, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x16, 2f",
        "mov x0, x16",
        "ret",
        "2:",
        "adrp x16, {real}",
        "ldr x16, [x16, :lo12:{real}]",
        "br x16",
        hook = sym gq_dlsym_hook,
        real = sym sys::GQ_REAL_DLSYM,
    )
}

/// Returns the pointer to hand back, or null for "let the real dlsym answer
/// with the caller's semantics". Guarantees GQ_REAL_DLSYM is set.
unsafe extern "C" fn gq_dlsym_hook(
    handle: *mut c_void,
    name: *const c_char,
    _ret: usize,
) -> *mut c_void {
    sys::real_dlsym_ptr();
    if name.is_null() {
        return core::ptr::null_mut();
    }
    // cheap prefix filter: everything that is not cu*/nvml* leaves at once
    let c0 = *name as u8;
    if c0 != b'c' && c0 != b'n' {
        return core::ptr::null_mut();
    }
    let c1 = *name.add(1) as u8;
    if (c0 != b'c' || c1 != b'u') && (c0 != b'n' || c1 != b'v') {
        return core::ptr::null_mut();
    }
    let i = match lookup_wrapped(name) {
        Some(i) => i,
        None => return core::ptr::null_mut(),
    };
    // the first driver symbol asked for loads the configuration; when it is
    // pass-through (or we are re-entered during init) the real answer stands
    match config() {
        Some(c) if c.enforce => {}
        _ => return core::ptr::null_mut(),
    }
    let p = sys::real_dlsym(handle, name);
    if p.is_null() {
        return core::ptr::null_mut(); // the real dlsym sets dlerror() again
    }
    if is_ours(p as usize) {
        return p;
    }
    symbols::offer_real(i, p as usize);
    if crate::state::debug_enabled() {
        crate::state::debug(&[b"dlsym ", sys::cstr_bytes(name), b" -> wrapper"]);
    }
    wrapper(i) as *mut c_void
}
