//! Contexts: what each costs, and what goes with it.
//!
//! **Charges.** A context holds device memory of its own (the measured
//! context cost, `context_overhead_bytes` of the limits file). Each device
//! has one *base* charge per process: the primary context
//! (cuDevicePrimaryCtxRetain), or, when the process's first context on the
//! device was made out of our sight (the CUDA runtime's own path), charged
//! at the first allocation or memory query on it (never refused: it exists
//! already). Every context the process creates itself (cuCtxCreate
//! v1-v4) is charged again at creation, refused with the driver's
//! out-of-memory code when it does not fit, and refunded when it is
//! destroyed (cuCtxDestroy). A fork child starts with none; a process's
//! charges go with its slot when it exits. [`Charges`] is that bookkeeping
//! (unit-tested); the functions below are the process's instance.
//!
//! **Frees the driver does on its own**: cuCtxDestroy, cuDevicePrimaryCtxReset
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

use crate::account::{self, ACCT};
use crate::config::MAX_GPUS;
use crate::cu::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use crate::devices;
use crate::hooks;
use crate::policy::{Books, Dev, Refused, UNTRACKED};
use crate::ptrtable::{KIND_DPTR, KIND_POOLPTR};
use crate::state::{config, TABLE};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::*};
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

fn fork_reset(_: usize) -> bool {
    for h in HEAP.iter().chain(STACK.iter()) {
        h.store(0, Relaxed);
    }
    CHARGES.reset();
    false
}

/// The process holds context state from now on: its fork reset is
/// registered (once).
#[inline]
fn activate() {
    hooks::enlist(&REGISTERED, &[(&hooks::FORK, fork_reset)]);
}
static REGISTERED: AtomicU8 = AtomicU8::new(0);

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
                    ACCT.release_rec(rec);
                }
            }
        }
    };
    TABLE.scan_kind(KIND_DPTR, &mut |k, _| dead(k, KIND_DPTR));
    TABLE.scan_kind(KIND_POOLPTR, &mut |k, _| dead(k, KIND_POOLPTR));
    if let Some(o) = heap_dev {
        let d = devices::of_ordinal(o);
        if d.idx < MAX_GPUS {
            ACCT.release(d.idx, HEAP[d.idx].swap(0, AcqRel));
            ACCT.release(d.idx, STACK[d.idx].swap(0, AcqRel));
        }
    }
    crate::pools::forget_current_pools();
    crate::pools::refresh_all(None);
    crate::graphs::refresh_all();
}

/// Device of a context (push, ask, pop); None when it cannot be told.
pub unsafe fn ctx_device(ctx: *mut c_void) -> Option<c_int> {
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
    let dev = devices::current_dev();
    if dev.idx >= MAX_GPUS {
        return call();
    }
    activate();
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
        let ch = match ACCT.admit(api, dev, want - old) {
            Ok(c) => c,
            Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
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
        ACCT.release(dev.idx, old - want);
    }
    r
}

// ------------------------------------------------------------ context charges

/// Contexts a process can have created and not destroyed that are
/// remembered for their refund (beyond: charged, not refunded).
pub const MAX_CREATED: usize = 128;

/// The context charges of one process (see the module comment).
pub struct Charges {
    /// per region device: the base context is charged
    base: [AtomicU8; MAX_GPUS],
    /// contexts created here: handle (0 = free entry) ...
    handle: [AtomicU64; MAX_CREATED],
    /// ... its region device and the bytes it was charged
    idx: [AtomicU32; MAX_CREATED],
    bytes: [AtomicU64; MAX_CREATED],
    /// per region device: created contexts alive
    live: [AtomicU32; MAX_GPUS],
}

impl Charges {
    pub const fn new() -> Self {
        Charges {
            base: [const { AtomicU8::new(0) }; MAX_GPUS],
            handle: [const { AtomicU64::new(0) }; MAX_CREATED],
            idx: [const { AtomicU32::new(0) }; MAX_CREATED],
            bytes: [const { AtomicU64::new(0) }; MAX_CREATED],
            live: [const { AtomicU32::new(0) }; MAX_GPUS],
        }
    }

    /// Forget everything (a fork child has no context).
    pub fn reset(&self) {
        for x in self.base.iter() {
            x.store(0, Relaxed);
        }
        for h in self.handle.iter() {
            h.store(0, Relaxed);
        }
        for l in self.live.iter() {
            l.store(0, Relaxed);
        }
    }

    #[inline]
    pub fn base_charged(&self, idx: usize) -> bool {
        idx >= MAX_GPUS || self.base[idx].load(Relaxed) != 0
    }

    /// Created contexts alive on a device.
    pub fn created_live(&self, idx: usize) -> u32 {
        self.live.get(idx).map_or(0, |l| l.load(Relaxed))
    }

    /// The base context of a device is being made (primary retain):
    /// charge `ov` unless charged already; refused when it does not fit.
    pub fn base(
        &self,
        books: &dyn Books,
        api: &[u8],
        dev: Dev,
        ov: u64,
        call: impl FnOnce() -> CUresult,
    ) -> CUresult {
        if ov == 0 || dev.idx >= MAX_GPUS {
            return call();
        }
        let flag = &self.base[dev.idx];
        if flag.compare_exchange(0, 1, AcqRel, Acquire).is_err() {
            return call();
        }
        let ch = match books.admit(api, dev, ov) {
            Ok(c) => c,
            Err(Refused) => {
                flag.store(0, Release);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        };
        let r = call();
        if r != CUDA_SUCCESS {
            if let Some(c) = ch {
                c.rollback();
            }
            flag.store(0, Release);
        }
        r
    }

    /// A base context exists that we did not see made: charge it now,
    /// never refused. True when this call charged it.
    pub fn base_exists(&self, books: &dyn Books, dev: Dev, ov: u64) -> bool {
        if ov == 0 || dev.idx >= MAX_GPUS {
            return false;
        }
        if self.base[dev.idx]
            .compare_exchange(0, 1, AcqRel, Acquire)
            .is_err()
        {
            return false;
        }
        books.charge(dev.idx, ov);
        true
    }

    /// A context is being created (cuCtxCreate): charge `ov`, refused with
    /// the driver's out-of-memory code when it does not fit; `call` makes
    /// it and returns (result, handle). The charge is remembered by handle
    /// for [`Self::destroyed`].
    pub fn create(
        &self,
        books: &dyn Books,
        api: &[u8],
        dev: Dev,
        ov: u64,
        call: impl FnOnce() -> (CUresult, u64),
    ) -> CUresult {
        if ov == 0 || dev.idx >= MAX_GPUS {
            return call().0;
        }
        let ch = match books.admit(api, dev, ov) {
            Ok(Some(c)) => c,
            Ok(None) => return call().0,
            Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
        };
        let (r, h) = call();
        if r != CUDA_SUCCESS {
            ch.rollback();
            return r;
        }
        if h != 0 {
            // the entry is taken first, then filled: an entry in use keeps
            // its device and bytes (h reaches a destroy only after this
            // returns it)
            for (i, slot) in self.handle.iter().enumerate() {
                if slot.compare_exchange(0, h, AcqRel, Acquire).is_ok() {
                    self.idx[i].store(dev.idx as u32, Release);
                    self.bytes[i].store(ov, Release);
                    self.live[dev.idx].fetch_add(1, AcqRel);
                    return r;
                }
            }
        }
        // not remembered: it stays charged until the process exits
        r
    }

    /// cuCtxDestroy(h) succeeded: refund h's charge if it is one of ours.
    pub fn destroyed(&self, books: &dyn Books, h: u64) -> bool {
        if h == 0 {
            return false;
        }
        for (i, slot) in self.handle.iter().enumerate() {
            if slot.load(Acquire) == h && slot.compare_exchange(h, 0, AcqRel, Acquire).is_ok() {
                let idx = self.idx[i].load(Relaxed) as usize;
                books.release(idx, self.bytes[i].load(Relaxed));
                if let Some(l) = self.live.get(idx) {
                    let _ = l.fetch_update(AcqRel, Acquire, |v| v.checked_sub(1));
                }
                return true;
            }
        }
        false
    }
}

impl Default for Charges {
    fn default() -> Self {
        Self::new()
    }
}

static CHARGES: Charges = Charges::new();

/// The context charge of this process (0: none).
fn overhead() -> u64 {
    match config() {
        Some(c) if c.enforce => c.ctx_overhead,
        _ => 0,
    }
}

/// A slice smaller than one context: no CUDA program can run in it, and
/// the line should say so rather than describe a refused allocation.
fn too_small(dev: Dev, ov: u64) -> bool {
    match account::slice_below(dev, ov) {
        Some(slice) => {
            crate::msg::context_too_big(ov, slice, dev.ordinal);
            true
        }
        None => false,
    }
}

/// cuDevicePrimaryCtxRetain: the device's base charge.
pub fn retain_primary(api: &[u8], ordinal: c_int, call: impl FnOnce() -> CUresult) -> CUresult {
    let ov = overhead();
    if ov == 0 {
        return call();
    }
    let dev = devices::of_ordinal(ordinal);
    if dev.idx == UNTRACKED || CHARGES.base_charged(dev.idx) {
        return call();
    }
    activate();
    if too_small(dev, ov) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CHARGES.base(&ACCT, api, dev, ov, call)
}

/// cuCtxCreate (any version): the context's own charge. A primary context
/// already active out of our sight (the runtime's) is charged first.
pub fn create(api: &[u8], ordinal: c_int, call: impl FnOnce() -> (CUresult, u64)) -> CUresult {
    let ov = overhead();
    if ov == 0 {
        return call().0;
    }
    let dev = devices::of_ordinal(ordinal);
    if dev.idx == UNTRACKED {
        return call().0;
    }
    activate();
    if !CHARGES.base_charged(dev.idx) && !crate::capture::any() && primary_active(ordinal) {
        CHARGES.base_exists(&ACCT, dev, ov);
    }
    if too_small(dev, ov) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CHARGES.create(&ACCT, api, dev, ov, call)
}

/// cuCtxDestroy(h) succeeded: its charge goes.
pub fn destroyed(h: u64) {
    CHARGES.destroyed(&ACCT, h);
}

/// The base context of a device is charged once per process: normally by
/// the wrappers; a context made through a path we did not see is charged
/// at the first allocation on the current context or memory query (never
/// refused: the context exists already). While contexts the process
/// created itself are alive, the current one is taken to be one of them
/// (no driver call on the allocation path); a memory query (`query`)
/// asks the driver whether the primary context is active.
#[inline]
pub fn ensure_base(dev: Dev, query: bool) {
    if CHARGES.base_charged(dev.idx) || crate::foreign::is_foreign(dev.idx) {
        return;
    }
    ensure_base_slow(dev, query)
}

#[cold]
fn ensure_base_slow(dev: Dev, query: bool) {
    let ov = overhead();
    if ov == 0 {
        return;
    }
    if CHARGES.created_live(dev.idx) > 0
        && !(query && !crate::capture::any() && primary_active(dev.ordinal))
    {
        return;
    }
    activate();
    if CHARGES.base_exists(&ACCT, dev, ov) {
        // a context the driver made out of our sight (the CUDA runtime's
        // own path) in a slice that cannot hold one: say so now, before
        // the first allocation's refusal line
        if let Some(slice) = account::slice_below(dev, ov) {
            crate::msg::context_too_big(ov, slice, dev.ordinal);
        }
    }
}

/// The current context's device, its base context charged.
#[inline]
pub fn current_dev_charged() -> Dev {
    let d = devices::current_dev();
    ensure_base(d, false);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;
    use crate::policy::Budget;

    const M: u64 = 1 << 20;

    /// Every created context costs its charge; one that does not fit is
    /// refused with the driver's out-of-memory code (the driver never
    /// called); a destroy refunds it and the next creation fits again.
    /// (Mutation: create() charging only when live == 0, as the code
    /// before did for the first context, admits all five.)
    #[test]
    fn each_created_context_is_charged_until_destroyed() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let c = Charges::new();
        let made = std::cell::Cell::new(0u64);
        let make = || {
            made.set(made.get() + 1);
            (CUDA_SUCCESS, 0x300000 + made.get() * 0x40)
        };
        for _ in 0..4 {
            assert_eq!(
                c.create(&b, b"cuCtxCreate", dev(0), 16 * M, make),
                CUDA_SUCCESS
            );
        }
        assert_eq!((r.used(0), c.created_live(0)), (64 * M, 4));
        assert_eq!(
            c.create(&b, b"cuCtxCreate", dev(0), 16 * M, make),
            CUDA_ERROR_OUT_OF_MEMORY
        );
        assert_eq!(made.get(), 4, "the driver was not asked");
        assert!(c.destroyed(&b, 0x300000 + 2 * 0x40));
        assert!(!c.destroyed(&b, 0x300000 + 2 * 0x40), "refunded once");
        assert!(!c.destroyed(&b, 0xdead), "not ours: nothing");
        assert_eq!((r.used(0), c.created_live(0)), (48 * M, 3));
        assert_eq!(
            c.create(&b, b"cuCtxCreate", dev(0), 16 * M, make),
            CUDA_SUCCESS
        );
        // a failed creation keeps nothing
        assert_eq!(r.used(0), 64 * M);
        c.destroyed(&b, 0x300000 + 0x40);
        assert_eq!(c.create(&b, b"x", dev(0), 16 * M, || (1, 0)), 1);
        assert_eq!(r.used(0), 48 * M);
    }

    /// A context is refunded on the device it was charged on, whatever was
    /// created after it. (Mutation: filling an entry before taking it
    /// rewrote the device of every entry in use: destroying the first
    /// context refunded device 1.)
    #[test]
    fn a_destroy_refunds_the_device_the_context_was_charged_on() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M), Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let c = Charges::new();
        assert_eq!(
            c.create(&b, b"cuCtxCreate", dev(0), 16 * M, || (
                CUDA_SUCCESS,
                0x1000
            )),
            CUDA_SUCCESS
        );
        assert_eq!(
            c.create(&b, b"cuCtxCreate", dev(1), 8 * M, || (CUDA_SUCCESS, 0x2000)),
            CUDA_SUCCESS
        );
        assert!(c.destroyed(&b, 0x1000));
        assert_eq!((r.used(0), r.used(1)), (0, 8 * M));
        assert_eq!((c.created_live(0), c.created_live(1)), (0, 1));
        assert!(c.destroyed(&b, 0x2000));
        assert_eq!((r.used(0), r.used(1)), (0, 0));
    }

    /// The base charge is taken once per device, by the primary retain or
    /// by the first sight of an unseen context, and a fork child starts
    /// without it. (Mutation: base_exists not checking the flag charges
    /// twice.)
    #[test]
    fn the_base_context_is_charged_once() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M), Some(8 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let c = Charges::new();
        assert_eq!(
            c.base(&b, b"retain", dev(0), 16 * M, || CUDA_SUCCESS),
            CUDA_SUCCESS
        );
        assert_eq!(
            c.base(&b, b"retain", dev(0), 16 * M, || CUDA_SUCCESS),
            CUDA_SUCCESS
        );
        assert!(!c.base_exists(&b, dev(0), 16 * M));
        assert_eq!(r.used(0), 16 * M);
        // device 1 cannot hold it: refused, and the flag stays clear
        assert_eq!(
            c.base(&b, b"retain", dev(1), 16 * M, || CUDA_SUCCESS),
            CUDA_ERROR_OUT_OF_MEMORY
        );
        assert!(!c.base_charged(1));
        // an unseen context there is charged anyway: it exists
        assert!(c.base_exists(&b, dev(1), 16 * M));
        assert_eq!(r.used(1), 16 * M);
        c.reset();
        assert!(!c.base_charged(0) && !c.base_charged(1));
    }
}
