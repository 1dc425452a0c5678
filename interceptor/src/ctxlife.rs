//! Frees the driver does on its own: cuCtxDestroy, cuDevicePrimaryCtxReset
//! and the last cuDevicePrimaryCtxRelease free every allocation of the
//! context. Afterwards (a cold path) every remembered device pointer is
//! checked with cuPointerGetAttribute(RANGE_START_ADDR): one the driver no
//! longer knows (or that now starts elsewhere) is gone, and its charge with
//! it. Pools of the device are refreshed; the device malloc heap charge of
//! the device goes too.
//!
//! cuCtxSetLimit is charged here as well, per device: the malloc heap
//! (CU_LIMIT_MALLOC_HEAP_SIZE) above the driver's 8 MiB default, and the
//! per-thread stack (CU_LIMIT_STACK_SIZE) above its 1 KiB default times the
//! threads the device can hold resident (SMs × max threads per SM), which is
//! the local memory the driver reserves for it.

use crate::account::{self, DevSel};
use crate::config::MAX_GPUS;
use crate::cuda::{CUresult, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
use crate::ptrtable::{KIND_DPTR, KIND_POOLPTR};
use crate::state::{config, TABLE};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU64, Ordering::*};
use libc::{c_int, c_void};

const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_int = 11;
pub const CU_LIMIT_STACK_SIZE: c_int = 0;
pub const CU_LIMIT_MALLOC_HEAP_SIZE: c_int = 2;
const DEFAULT_HEAP: u64 = 8 << 20;
const DEFAULT_STACK: u64 = 1024;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: c_int = 39;

/// per region device: heap bytes charged above the default
static HEAP: [AtomicU64; MAX_GPUS] = [const { AtomicU64::new(0) }; MAX_GPUS];
/// per region device: stack (local memory) bytes charged above the default
static STACK: [AtomicU64; MAX_GPUS] = [const { AtomicU64::new(0) }; MAX_GPUS];

pub fn reset() {
    for h in HEAP.iter().chain(STACK.iter()) {
        h.store(0, Relaxed);
    }
}

/// Threads a device can hold resident (0 when unknown).
fn resident_threads(ordinal: c_int) -> u64 {
    type F = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CUresult;
    let f = match real_fn!(S::cuDeviceGetAttribute, F) {
        Some(f) => f,
        None => return 0,
    };
    let (mut sms, mut thr) = (0 as c_int, 0 as c_int);
    unsafe {
        if f(&mut sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal) != CUDA_SUCCESS
            || f(
                &mut thr,
                CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                ordinal,
            ) != CUDA_SUCCESS
        {
            return 0;
        }
    }
    (sms.max(0) as u64).saturating_mul(thr.max(0) as u64)
}

fn enforcing() -> bool {
    matches!(config(), Some(c) if c.enforce)
}

/// Does the driver still know the allocation starting at p? Only the
/// driver's "no such pointer" answer (CUDA_ERROR_INVALID_VALUE) or a range
/// that now starts elsewhere count as gone; any other error keeps the charge.
fn alive(p: u64) -> bool {
    type F = unsafe extern "C" fn(*mut c_void, c_int, u64) -> CUresult;
    let f = match real_fn!(S::cuPointerGetAttribute, F) {
        Some(f) => f,
        None => return true, // cannot tell: keep the charge
    };
    let mut start: u64 = 0;
    let r = unsafe {
        f(
            &mut start as *mut u64 as *mut c_void,
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            p,
        )
    };
    if r == CUDA_SUCCESS {
        start == p
    } else {
        r != CUDA_ERROR_INVALID_VALUE
    }
}

/// A context went: release what the driver freed with it.
pub fn context_gone(heap_dev: Option<c_int>) {
    if !enforcing() {
        return;
    }
    let dead = |k: u64, kind: u32| {
        if !alive(k) {
            if let Some(rec) = TABLE.remove(k, kind) {
                if kind == KIND_POOLPTR {
                    crate::pools::forget(rec);
                } else {
                    account::release(rec);
                }
            }
        }
    };
    TABLE.scan_kind(KIND_DPTR, &mut |k, _| dead(k, KIND_DPTR));
    TABLE.scan_kind(KIND_POOLPTR, &mut |k, _| dead(k, KIND_POOLPTR));
    if let Some(o) = heap_dev {
        let d = account::select(DevSel::Ordinal(o));
        if d.idx < MAX_GPUS {
            account::release_bytes(d.idx, HEAP[d.idx].swap(0, AcqRel));
            account::release_bytes(d.idx, STACK[d.idx].swap(0, AcqRel));
        }
    }
    crate::pools::forget_current_pools();
    crate::pools::refresh_all(None);
    crate::graphs::refresh_all();
}

/// Device of a context (push, ask, pop); None when it cannot be told.
pub fn ctx_device(ctx: *mut c_void) -> Option<c_int> {
    type Push = unsafe extern "C" fn(*mut c_void) -> CUresult;
    type Pop = unsafe extern "C" fn(*mut *mut c_void) -> CUresult;
    type CtxDev = unsafe extern "C" fn(*mut c_int) -> CUresult;
    let push = real_fn!(S::cuCtxPushCurrent_v2, Push)?;
    let pop = real_fn!(S::cuCtxPopCurrent_v2, Pop)?;
    let cd = real_fn!(S::cuCtxGetDevice, CtxDev)?;
    if ctx.is_null() || unsafe { push(ctx) } != CUDA_SUCCESS {
        return None;
    }
    let mut d: c_int = -1;
    let ok = unsafe { cd(&mut d) } == CUDA_SUCCESS;
    let mut old: *mut c_void = core::ptr::null_mut();
    unsafe { pop(&mut old) };
    if ok && d >= 0 {
        Some(d)
    } else {
        None
    }
}

/// Is the device's primary context still active?
pub fn primary_active(dev: c_int) -> bool {
    type F = unsafe extern "C" fn(c_int, *mut u32, *mut c_int) -> CUresult;
    let f = match real_fn!(S::cuDevicePrimaryCtxGetState, F) {
        Some(f) => f,
        None => return true,
    };
    let (mut flags, mut active) = (0u32, 1 as c_int);
    let r = unsafe { f(dev, &mut flags, &mut active) };
    r != CUDA_SUCCESS || active != 0
}

/// cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE or CU_LIMIT_STACK_SIZE, value)
/// on the current device.
pub unsafe fn set_limit(limit: c_int, value: usize, call: impl FnOnce() -> CUresult) -> CUresult {
    if !enforcing() {
        return call();
    }
    let dev = account::current_dev();
    if dev.idx >= MAX_GPUS {
        return call();
    }
    let (cell, want, api): (&AtomicU64, u64, &[u8]) = if limit == CU_LIMIT_MALLOC_HEAP_SIZE {
        (
            &HEAP[dev.idx],
            (value as u64).saturating_sub(DEFAULT_HEAP),
            b"cuCtxSetLimit(MALLOC_HEAP_SIZE)",
        )
    } else {
        (
            &STACK[dev.idx],
            (value as u64)
                .saturating_sub(DEFAULT_STACK)
                .saturating_mul(resident_threads(dev.ordinal)),
            b"cuCtxSetLimit(STACK_SIZE)",
        )
    };
    let old = cell.load(Acquire);
    if want > old {
        let ch = match account::admit(api, dev, want - old) {
            Ok(c) => c,
            Err(()) => return CUDA_ERROR_OUT_OF_MEMORY,
        };
        let r = call();
        if r != CUDA_SUCCESS {
            if let Some(c) = ch {
                c.rollback();
            }
            return r;
        }
        if ch.is_some() {
            cell.fetch_add(want - old, AcqRel);
        }
        return r;
    }
    let r = call();
    if r == CUDA_SUCCESS && want < old {
        cell.fetch_sub(old - want, AcqRel);
        account::release_bytes(dev.idx, old - want);
    }
    r
}
