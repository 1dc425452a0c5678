//! Stream-ordered memory pools (cuMemAllocAsync, cuMemAllocFromPoolAsync):
//! a pool keeps freed memory reserved (up to its release threshold, until a
//! synchronisation or cuMemPoolTrimTo gives it back), so the charge of a
//! pool follows what it *reserves*, not what is allocated from it.
//!
//! Per pool this process has used: `live` (bytes of its allocations not yet
//! freed) and `charged` (bytes charged for the pool). Invariant at every
//! point we look: charged >= max(live, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).
//!
//! * alloc of n: live += n; only when live exceeds charged is the
//!   difference admitted (memory the pool already reserves costs nothing);
//!   after such a growth the driver is asked for the reserve once and a
//!   larger reserve (granularity) is charged.
//! * free: live -= n, the charge stays (the pool keeps the memory); the pool
//!   is marked dirty.
//! * refresh (driver query): charged = max(live, reserved) — after
//!   cuMemPoolTrimTo, at cuStreamSynchronize/cuEventSynchronize/
//!   cuCtxSynchronize when a pool is dirty (the points where the driver
//!   releases memory above the threshold), before refusing an allocation,
//!   and after a context destroy/reset.
//!
//! The driver is queried only on these paths, never on an allocation that
//! the pool's reserve covers.

use crate::account::{self, Dev, DevSel, UNTRACKED};
use crate::cuda::{CUresult, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use crate::ptrtable::{Rec, KIND_POOLPTR};
use crate::state::{self, config, TABLE};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
use libc::{c_int, c_void};

pub const MAX_POOLS: usize = 64;
const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_int = 5;

struct Pool {
    handle: AtomicU64,
    idx: AtomicU32,
    ordinal: AtomicI32,
    charged: AtomicU64,
    live: AtomicU64,
    /// bytes of allocations between admission and the driver's answer
    pending: AtomicU64,
    dirty: AtomicU8,
    dead: AtomicU8,
}

#[allow(clippy::declare_interior_mutable_const)]
const P0: Pool = Pool {
    handle: AtomicU64::new(0),
    idx: AtomicU32::new(u32::MAX),
    ordinal: AtomicI32::new(-1),
    charged: AtomicU64::new(0),
    live: AtomicU64::new(0),
    pending: AtomicU64::new(0),
    dirty: AtomicU8::new(0),
    dead: AtomicU8::new(0),
};
static POOLS: [Pool; MAX_POOLS] = [P0; MAX_POOLS];
/// Some pool was freed into since the last refresh.
static ANY_DIRTY: AtomicU8 = AtomicU8::new(0);
/// Some pool allocation was recorded (frees then also look for pool records).
pub static USED: AtomicU8 = AtomicU8::new(0);

type CUstream = *mut c_void;

/// Forget everything (fork child: the pools' memory is the parent's).
pub fn reset() {
    for p in POOLS.iter() {
        p.handle.store(0, Relaxed);
        p.idx.store(u32::MAX, Relaxed);
        p.ordinal.store(-1, Relaxed);
        p.charged.store(0, Relaxed);
        p.live.store(0, Relaxed);
        p.pending.store(0, Relaxed);
        p.dirty.store(0, Relaxed);
        p.dead.store(0, Relaxed);
    }
    ANY_DIRTY.store(0, Relaxed);
    forget_current_pools();
}

fn find(handle: u64) -> Option<usize> {
    POOLS.iter().position(|p| p.handle.load(Acquire) == handle)
}

/// Index of a pool, registering it on `dev` if new. None: table full.
fn register(handle: u64, dev: Dev) -> Option<usize> {
    if handle == 0 {
        return None;
    }
    if let Some(i) = find(handle) {
        return Some(i);
    }
    for (i, p) in POOLS.iter().enumerate() {
        if p.handle.load(Acquire) == 0 {
            p.idx.store(dev.idx as u32, Relaxed);
            p.ordinal.store(dev.ordinal, Relaxed);
            if p.handle
                .compare_exchange(0, handle, AcqRel, Acquire)
                .is_ok()
            {
                return Some(i);
            }
        }
    }
    find(handle)
}

/// The pool's reserve (None: unknown, or not askable now: a stream
/// capture is active, capture.rs).
fn reserved(handle: u64) -> Option<u64> {
    if !crate::capture::quiet() {
        return None;
    }
    type F = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> CUresult;
    let f = real_fn!(S::cuMemPoolGetAttribute, F)?;
    let mut v: u64 = 0;
    let r = unsafe {
        f(
            handle as *mut c_void,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            &mut v as *mut u64 as *mut c_void,
        )
    };
    if r == CUDA_SUCCESS {
        Some(v)
    } else {
        None
    }
}

/// Bring a pool's charge to max(live, reserved). Returns true when it went
/// down.
fn refresh(i: usize) -> bool {
    let p = &POOLS[i];
    let h = p.handle.load(Acquire);
    if h == 0 || p.dead.load(Acquire) != 0 {
        return false;
    }
    if !crate::capture::quiet() {
        // not now: the next legal point looks again
        p.dirty.store(1, Release);
        ANY_DIRTY.store(1, Relaxed);
        return false;
    }
    p.dirty.store(0, Release);
    let res = match reserved(h) {
        Some(v) => v,
        None => return false,
    };
    let idx = p.idx.load(Relaxed) as usize;
    loop {
        let c = p.charged.load(Acquire);
        let target = res.max(p.live.load(Acquire));
        if target == c {
            return false;
        }
        if p.charged
            .compare_exchange(c, target, AcqRel, Acquire)
            .is_ok()
        {
            if target < c {
                account::release_bytes(idx, c - target);
                return true;
            }
            account::force_charge(idx, target - c);
            return false;
        }
    }
}

/// Refresh every pool (of one region device, or all). True if any charge
/// went down.
pub fn refresh_all(idx: Option<usize>) -> bool {
    if USED.load(Relaxed) == 0 {
        return false;
    }
    let mut any = false;
    for (i, p) in POOLS.iter().enumerate() {
        if p.handle.load(Acquire) == 0 {
            continue;
        }
        if let Some(d) = idx {
            if p.idx.load(Relaxed) as usize != d {
                continue;
            }
        }
        any |= refresh(i);
    }
    any
}

/// At a synchronisation point: refresh the pools freed into since last time.
#[inline]
pub fn at_sync() {
    if ANY_DIRTY.load(Relaxed) == 0 {
        return;
    }
    sync_slow()
}

#[cold]
fn sync_slow() {
    ANY_DIRTY.store(0, Relaxed);
    for (i, p) in POOLS.iter().enumerate() {
        if p.dirty.load(Acquire) != 0 {
            refresh(i);
        }
    }
}

/// The device a stream belongs to (NULL / legacy / per-thread handles and
/// single-device processes: the current context's device, no driver call).
pub fn stream_dev(s: CUstream) -> Dev {
    let sv = s as usize;
    if sv <= 2 || state::devcount().load(Relaxed) == 1 {
        return account::current_dev();
    }
    // cuStreamGetCtx + the context's device, not cuStreamGetDevice: the
    // latter is rejected during stream capture by some drivers (580 with
    // CUDA 13.0), and a rejection invalidates the capture.
    type GetCtx = unsafe extern "C" fn(CUstream, *mut *mut c_void) -> CUresult;
    type Push = unsafe extern "C" fn(*mut c_void) -> CUresult;
    type Pop = unsafe extern "C" fn(*mut *mut c_void) -> CUresult;
    type CtxDev = unsafe extern "C" fn(*mut c_int) -> CUresult;
    if let (Some(gc), Some(push), Some(pop), Some(cd)) = (
        real_fn!(S::cuStreamGetCtx, GetCtx),
        real_fn!(S::cuCtxPushCurrent_v2, Push),
        real_fn!(S::cuCtxPopCurrent_v2, Pop),
        real_fn!(S::cuCtxGetDevice, CtxDev),
    ) {
        let mut ctx: *mut c_void = core::ptr::null_mut();
        if unsafe { gc(s, &mut ctx) } == CUDA_SUCCESS
            && !ctx.is_null()
            && unsafe { push(ctx) } == CUDA_SUCCESS
        {
            let mut d: c_int = -1;
            let ok = unsafe { cd(&mut d) } == CUDA_SUCCESS;
            let mut old: *mut c_void = core::ptr::null_mut();
            unsafe { pop(&mut old) };
            if ok && d >= 0 {
                return account::select(DevSel::Ordinal(d));
            }
        }
    }
    account::current_dev()
}

/// per CUDA ordinal: the device's current mempool (0 = ask the driver);
/// kept by cuDeviceSetMemPool, forgotten when a context goes
static CUR_POOL: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// The pool cuMemAllocAsync uses on a device (its current mempool): asked
/// once per device, then cached.
fn current_pool(dev: Dev) -> Option<u64> {
    let slot = CUR_POOL.get(dev.ordinal.clamp(0, 63) as usize)?;
    let c = slot.load(Relaxed);
    if c != 0 {
        return Some(c);
    }
    type F = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CUresult;
    let f = real_fn!(S::cuDeviceGetMemPool, F)?;
    let mut p: *mut c_void = core::ptr::null_mut();
    if unsafe { f(&mut p, dev.ordinal) } == CUDA_SUCCESS && !p.is_null() {
        slot.store(p as u64, Relaxed);
        Some(p as u64)
    } else {
        None
    }
}

/// cuDeviceSetMemPool succeeded.
pub fn set_current(ordinal: c_int, pool: u64) {
    if (0..64).contains(&ordinal) {
        CUR_POOL[ordinal as usize].store(pool, Relaxed);
    }
}

/// A context went (its device's pools may be gone with it): ask again.
pub fn forget_current_pools() {
    for c in CUR_POOL.iter() {
        c.store(0, Relaxed);
    }
}

/// Device of a pool we have not seen created: the device whose current or
/// default pool it is, else the stream's device.
fn pool_dev(pool: u64, s: CUstream) -> Dev {
    if let Some(i) = find(pool) {
        return Dev {
            ordinal: POOLS[i].ordinal.load(Relaxed),
            idx: POOLS[i].idx.load(Relaxed) as usize,
        };
    }
    let n = state::devcount().load(Relaxed);
    type F = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CUresult;
    let cur = real_fn!(S::cuDeviceGetMemPool, F);
    let def = real_fn!(S::cuDeviceGetDefaultMemPool, F);
    for o in 0..n.clamp(0, 64) {
        for f in [cur, def].into_iter().flatten() {
            let mut p: *mut c_void = core::ptr::null_mut();
            if unsafe { f(&mut p, o) } == CUDA_SUCCESS && p as u64 == pool {
                return account::select(DevSel::Ordinal(o));
            }
        }
    }
    stream_dev(s)
}

/// A pool allocation of n bytes: admit what the pool's reserve does not
/// cover, call the driver, record the pointer under the pool.
unsafe fn alloc_in(
    api: &[u8],
    dev: Dev,
    pool: Option<u64>,
    n: u64,
    dptr: *mut u64,
    call: impl FnOnce() -> CUresult,
) -> CUresult {
    let pi = match pool.and_then(|h| register(h, dev)) {
        Some(i) if dev.idx != UNTRACKED && POOLS[i].dead.load(Acquire) == 0 => i,
        // unknown pool / table full: charge like a plain allocation
        _ => return plain(api, dev, n, dptr, call),
    };
    let p = &POOLS[pi];
    let idx = p.idx.load(Relaxed) as usize;
    let pdev = Dev {
        ordinal: p.ordinal.load(Relaxed),
        idx,
    };
    // what the pool must hold once this allocation exists: its live
    // allocations, those in flight (other threads), and this one
    let inflight = p.pending.fetch_add(n, AcqRel).saturating_add(n);
    let live = p.live.load(Acquire).saturating_add(inflight);
    let mut need = 0;
    loop {
        let c = p.charged.load(Acquire);
        if live <= c {
            break;
        }
        let want = live - c;
        match account::admit(api, pdev, want) {
            Ok(Some(ch)) => {
                if p.charged.compare_exchange(c, live, AcqRel, Acquire).is_ok() {
                    need = want;
                    break;
                }
                ch.rollback();
            }
            Ok(None) => {
                p.pending.fetch_sub(n, AcqRel);
                return call();
            }
            Err(()) => {
                p.pending.fetch_sub(n, AcqRel);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    let r = call();
    if r == CUDA_SUCCESS {
        p.live.fetch_add(n, AcqRel);
    }
    p.pending.fetch_sub(n, AcqRel);
    if r != CUDA_SUCCESS {
        if need > 0 {
            // the pool may not have grown: let the next refresh decide
            p.dirty.store(1, Release);
            ANY_DIRTY.store(1, Relaxed);
        }
        return r;
    }
    USED.store(1, Relaxed);
    if dptr.is_null() || !TABLE.insert(*dptr, KIND_POOLPTR, n, pi as u32) {
        // cannot remember it: its live bytes stay (conservative)
    }
    if need > 0 {
        // the pool grew: charge its real reserve if larger (granularity)
        match reserved(p.handle.load(Acquire)) {
            Some(res) => {
                let c = p.charged.load(Acquire);
                if res > c && p.charged.compare_exchange(c, res, AcqRel, Acquire).is_ok() {
                    account::force_charge(idx, res - c);
                }
            }
            None => {
                // not askable now (capture): the next refresh decides
                p.dirty.store(1, Release);
                ANY_DIRTY.store(1, Relaxed);
            }
        }
    }
    r
}

/// Fallback: charge like cuMemAlloc (pointer record of kind DPTR).
unsafe fn plain(
    api: &[u8],
    dev: Dev,
    n: u64,
    dptr: *mut u64,
    call: impl FnOnce() -> CUresult,
) -> CUresult {
    let ch = match account::admit(api, dev, n) {
        Ok(c) => c,
        Err(()) => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let r = call();
    let ch = match ch {
        Some(c) => c,
        None => return r,
    };
    if r != CUDA_SUCCESS || dptr.is_null() {
        ch.rollback();
        return r;
    }
    if !TABLE.insert(*dptr, crate::ptrtable::KIND_DPTR, ch.n, ch.dev.idx as u32) {
        // kept charged: it cannot be released later, conservative
    }
    r
}

fn enforcing() -> bool {
    matches!(config(), Some(c) if c.enforce)
}

/// cuMemAllocAsync: the stream's device, that device's current pool.
pub unsafe fn alloc_async(
    n: u64,
    dptr: *mut u64,
    s: CUstream,
    call: impl FnOnce() -> CUresult,
) -> CUresult {
    if !enforcing() || n == 0 || dptr.is_null() {
        return call(); // the driver's INVALID_VALUE
    }
    let dev = stream_dev(s);
    if crate::capture::stream_capturing(s) {
        return captured(b"cuMemAllocAsync", dev, n, call);
    }
    let pool = current_pool(dev);
    alloc_in(b"cuMemAllocAsync", dev, pool, n, dptr, call)
}

/// An allocation on a capturing stream: a memory node of the graph, no
/// memory now (the graph pool is charged from the launch). Checked against
/// what is left, not recorded (its free is a node too, or a free of graph
/// memory later, neither of which changes a charge).
unsafe fn captured(api: &[u8], dev: Dev, n: u64, call: impl FnOnce() -> CUresult) -> CUresult {
    if dev.idx != UNTRACKED && !crate::capture::node(api, dev, n) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    call()
}

/// cuMemAllocFromPoolAsync: the pool's device.
pub unsafe fn alloc_from_pool(
    n: u64,
    dptr: *mut u64,
    pool: *mut c_void,
    s: CUstream,
    call: impl FnOnce() -> CUresult,
) -> CUresult {
    if !enforcing() || n == 0 || dptr.is_null() {
        return call();
    }
    let dev = pool_dev(pool as u64, s);
    if crate::capture::stream_capturing(s) {
        return captured(b"cuMemAllocFromPoolAsync", dev, n, call);
    }
    alloc_in(
        b"cuMemAllocFromPoolAsync",
        dev,
        Some(pool as u64),
        n,
        dptr,
        call,
    )
}

/// A pool allocation was freed (the driver succeeded): the pool keeps the
/// memory, so the charge stays until the next refresh.
pub fn freed(rec: Rec) {
    let pi = rec.dev as usize;
    if pi >= MAX_POOLS {
        return;
    }
    let p = &POOLS[pi];
    let mut cur = p.live.load(Acquire);
    loop {
        match p
            .live
            .compare_exchange_weak(cur, cur.saturating_sub(rec.size), AcqRel, Acquire)
        {
            Ok(_) => break,
            Err(c) => cur = c,
        }
    }
    if p.dead.load(Acquire) != 0 {
        // the pool is destroyed: its memory goes with its last allocation
        let c = p.charged.load(Acquire);
        let give = rec.size.min(c);
        if p.charged
            .compare_exchange(c, c - give, AcqRel, Acquire)
            .is_ok()
        {
            account::release_bytes(p.idx.load(Relaxed) as usize, give);
        }
        return;
    }
    p.dirty.store(1, Release);
    ANY_DIRTY.store(1, Relaxed);
}

/// A pool record whose memory the driver freed on its own (context gone):
/// the bytes leave `live`; the pool is refreshed afterwards.
pub fn forget(rec: Rec) {
    let pi = rec.dev as usize;
    if pi < MAX_POOLS {
        let p = &POOLS[pi];
        let cur = p.live.load(Acquire);
        p.live.store(cur.saturating_sub(rec.size), Release);
        p.dirty.store(1, Release);
        ANY_DIRTY.store(1, Relaxed);
    }
}

/// cuMemPoolTrimTo succeeded: follow the reserve down.
pub fn trimmed(pool: u64) {
    if let Some(i) = find(pool) {
        refresh(i);
    }
}

/// cuMemPoolCreate succeeded: remember the pool's device.
pub fn created(pool: u64, ordinal: c_int) {
    let dev = account::select(DevSel::Ordinal(ordinal));
    if dev.idx == UNTRACKED {
        return;
    }
    if let Some(i) = find(pool) {
        // a destroyed pool's handle value came back: start afresh
        let p = &POOLS[i];
        if p.dead.load(Acquire) != 0 {
            let c = p.charged.swap(0, AcqRel);
            account::release_bytes(p.idx.load(Relaxed) as usize, c);
            p.live.store(0, Release);
            p.pending.store(0, Release);
            p.idx.store(dev.idx as u32, Relaxed);
            p.ordinal.store(dev.ordinal, Relaxed);
            p.dead.store(0, Release);
        }
        return;
    }
    register(pool, dev);
}

/// cuMemPoolDestroy succeeded: what no allocation holds goes now, the rest
/// with each allocation's free.
pub fn destroyed(pool: u64) {
    for c in CUR_POOL.iter() {
        let _ = c.compare_exchange(pool, 0, Relaxed, Relaxed);
    }
    if let Some(i) = find(pool) {
        let p = &POOLS[i];
        p.dead.store(1, Release);
        let live = p.live.load(Acquire);
        let c = p.charged.swap(live, AcqRel);
        if c > live {
            account::release_bytes(p.idx.load(Relaxed) as usize, c - live);
        }
    }
}
