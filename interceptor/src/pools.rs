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

//!
//! [`Pools`] is the bookkeeping (unit-tested with the reserves given); the
//! free functions are the process's one instance over the real driver.

use crate::account::ACCT;
use crate::cu::{CUresult, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use crate::devices;
use crate::hooks;
use crate::policy::{Books, Dev, Refused, UNTRACKED};
use crate::ptrtable::{Rec, KIND_DPTR, KIND_POOLPTR};
use crate::state::{config, TABLE};
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

/// The driver's reserve of a pool (None: unknown, or not askable now).
pub type Reserved<'a> = &'a dyn Fn(u64) -> Option<u64>;

/// The pools this process used, and what each is charged.
pub struct Pools {
    pools: [Pool; MAX_POOLS],
    /// Some pool was freed into since the last refresh.
    any_dirty: AtomicU8,
    /// Some pool allocation was recorded (frees then also look for pool
    /// records).
    used: AtomicU8,
}

impl Pools {
    pub const fn new() -> Self {
        Pools {
            pools: [P0; MAX_POOLS],
            any_dirty: AtomicU8::new(0),
            used: AtomicU8::new(0),
        }
    }

    /// Forget everything (fork child: the pools' memory is the parent's).
    pub fn reset(&self) {
        for p in self.pools.iter() {
            p.handle.store(0, Relaxed);
            p.idx.store(u32::MAX, Relaxed);
            p.ordinal.store(-1, Relaxed);
            p.charged.store(0, Relaxed);
            p.live.store(0, Relaxed);
            p.pending.store(0, Relaxed);
            p.dirty.store(0, Relaxed);
            p.dead.store(0, Relaxed);
        }
        self.any_dirty.store(0, Relaxed);
        self.used.store(0, Relaxed);
    }

    #[inline]
    pub fn used(&self) -> bool {
        self.used.load(Relaxed) != 0
    }

    fn find(&self, handle: u64) -> Option<usize> {
        self.pools
            .iter()
            .position(|p| p.handle.load(Acquire) == handle)
    }

    fn dev_of(&self, i: usize) -> Dev {
        let p = &self.pools[i];
        Dev {
            ordinal: p.ordinal.load(Relaxed),
            idx: p.idx.load(Relaxed) as usize,
        }
    }

    /// The device of a known pool.
    pub fn known_dev(&self, handle: u64) -> Option<Dev> {
        self.find(handle).map(|i| self.dev_of(i))
    }

    /// Index of a pool, registering it on `dev` if new. None: table full.
    fn register(&self, handle: u64, dev: Dev) -> Option<usize> {
        if handle == 0 {
            return None;
        }
        if let Some(i) = self.find(handle) {
            return Some(i);
        }
        for (i, p) in self.pools.iter().enumerate() {
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
        self.find(handle)
    }

    fn mark_dirty(&self, i: usize) {
        self.pools[i].dirty.store(1, Release);
        self.any_dirty.store(1, Relaxed);
    }

    /// Bring a pool's charge to max(live, reserved). Returns true when it
    /// went down.
    fn refresh(&self, books: &dyn Books, i: usize, quiet: bool, reserved: Reserved) -> bool {
        let p = &self.pools[i];
        let h = p.handle.load(Acquire);
        if h == 0 || p.dead.load(Acquire) != 0 {
            return false;
        }
        if !quiet {
            // not now (a capture is active): the next legal point looks again
            self.mark_dirty(i);
            return false;
        }
        p.dirty.store(0, Release);
        let Some(res) = reserved(h) else {
            return false;
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
                    books.release(idx, c - target);
                    return true;
                }
                books.charge(idx, target - c);
                return false;
            }
        }
    }

    /// Refresh every pool (of one region device, or all). True if any
    /// charge went down.
    pub fn refresh_all(
        &self,
        books: &dyn Books,
        idx: Option<usize>,
        quiet: bool,
        reserved: Reserved,
    ) -> bool {
        if !self.used() {
            return false;
        }
        let mut any = false;
        for (i, p) in self.pools.iter().enumerate() {
            if p.handle.load(Acquire) == 0 {
                continue;
            }
            if idx.is_some_and(|d| p.idx.load(Relaxed) as usize != d) {
                continue;
            }
            any |= self.refresh(books, i, quiet, reserved);
        }
        any
    }

    /// At a synchronisation point: refresh the pools freed into since
    /// last time.
    #[inline]
    pub fn any_dirty(&self) -> bool {
        self.any_dirty.load(Relaxed) != 0
    }

    #[cold]
    pub fn sync(&self, books: &dyn Books, quiet: bool, reserved: Reserved) {
        self.any_dirty.store(0, Relaxed);
        for (i, p) in self.pools.iter().enumerate() {
            if p.dirty.load(Acquire) != 0 {
                self.refresh(books, i, quiet, reserved);
            }
        }
    }

    /// A pool allocation of n bytes on `dev` from pool `handle`: admit what
    /// the pool's reserve does not cover, call the driver. Err(Refused): not a
    /// pool we can follow (unknown, table full, destroyed, untracked
    /// device); the caller charges it like a plain allocation. Ok((r,
    /// index)): the driver's answer and the pool's index, to record the
    /// pointer under.
    // the driver call and the reserve query are the caller's (the real
    // driver, or a test's stand-in): one argument each
    #[allow(clippy::too_many_arguments)]
    pub fn alloc(
        &self,
        books: &dyn Books,
        api: &[u8],
        dev: Dev,
        handle: Option<u64>,
        n: u64,
        call: impl FnOnce() -> CUresult,
        reserved: Reserved,
    ) -> Result<(CUresult, usize), impl FnOnce() -> CUresult> {
        let pi = match handle.and_then(|h| self.register(h, dev)) {
            Some(i) if dev.idx != UNTRACKED && self.pools[i].dead.load(Acquire) == 0 => i,
            _ => return Err(call),
        };
        let p = &self.pools[pi];
        let idx = p.idx.load(Relaxed) as usize;
        let pdev = self.dev_of(pi);
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
            match books.admit(api, pdev, want) {
                Ok(Some(ch)) => {
                    if p.charged.compare_exchange(c, live, AcqRel, Acquire).is_ok() {
                        need = want;
                        break;
                    }
                    ch.rollback();
                }
                Ok(None) => {
                    p.pending.fetch_sub(n, AcqRel);
                    return Ok((call(), usize::MAX));
                }
                Err(Refused) => {
                    p.pending.fetch_sub(n, AcqRel);
                    return Ok((CUDA_ERROR_OUT_OF_MEMORY, usize::MAX));
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
                self.mark_dirty(pi);
            }
            return Ok((r, usize::MAX));
        }
        self.used.store(1, Relaxed);
        if need > 0 {
            // the pool grew: charge its real reserve if larger (granularity)
            match reserved(p.handle.load(Acquire)) {
                Some(res) => {
                    let c = p.charged.load(Acquire);
                    if res > c && p.charged.compare_exchange(c, res, AcqRel, Acquire).is_ok() {
                        books.charge(idx, res - c);
                    }
                }
                // not askable now (capture): the next refresh decides
                None => self.mark_dirty(pi),
            }
        }
        Ok((r, pi))
    }

    /// A pool allocation was freed (the driver succeeded): the pool keeps
    /// the memory, so the charge stays until the next refresh.
    pub fn freed(&self, books: &dyn Books, rec: Rec) {
        let pi = rec.dev as usize;
        if pi >= MAX_POOLS {
            return;
        }
        let p = &self.pools[pi];
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
                books.release(p.idx.load(Relaxed) as usize, give);
            }
            return;
        }
        self.mark_dirty(pi);
    }

    /// A pool record whose memory the driver freed on its own (context
    /// gone): the bytes leave `live`; the pool is refreshed afterwards.
    pub fn forget(&self, rec: Rec) {
        let pi = rec.dev as usize;
        if pi < MAX_POOLS {
            let p = &self.pools[pi];
            let cur = p.live.load(Acquire);
            p.live.store(cur.saturating_sub(rec.size), Release);
            self.mark_dirty(pi);
        }
    }

    /// cuMemPoolTrimTo succeeded: follow the reserve down.
    pub fn trimmed(&self, books: &dyn Books, pool: u64, quiet: bool, reserved: Reserved) {
        if let Some(i) = self.find(pool) {
            self.refresh(books, i, quiet, reserved);
        }
    }

    /// cuMemPoolCreate succeeded on `dev`: remember the pool's device.
    pub fn created(&self, books: &dyn Books, pool: u64, dev: Dev) {
        if dev.idx == UNTRACKED {
            return;
        }
        if let Some(i) = self.find(pool) {
            // a destroyed pool's handle value came back: start afresh
            let p = &self.pools[i];
            if p.dead.load(Acquire) != 0 {
                let c = p.charged.swap(0, AcqRel);
                books.release(p.idx.load(Relaxed) as usize, c);
                p.live.store(0, Release);
                p.pending.store(0, Release);
                p.idx.store(dev.idx as u32, Relaxed);
                p.ordinal.store(dev.ordinal, Relaxed);
                p.dead.store(0, Release);
            }
            return;
        }
        self.register(pool, dev);
    }

    /// cuMemPoolDestroy succeeded: what no allocation holds goes now, the
    /// rest with each allocation's free.
    pub fn destroyed(&self, books: &dyn Books, pool: u64) {
        if let Some(i) = self.find(pool) {
            let p = &self.pools[i];
            p.dead.store(1, Release);
            let live = p.live.load(Acquire);
            let c = p.charged.swap(live, AcqRel);
            if c > live {
                books.release(p.idx.load(Relaxed) as usize, c - live);
            }
        }
    }
}

impl Default for Pools {
    fn default() -> Self {
        Self::new()
    }
}

// ------------------------------------------------------------ the process's pools

type CUstream = *mut c_void;

static POOLS: Pools = Pools::new();
static REGISTERED: AtomicU8 = AtomicU8::new(0);
/// per CUDA ordinal: the device's current mempool (0 = ask the driver);
/// kept by cuDeviceSetMemPool, forgotten when a context goes
static CUR_POOL: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

fn fork_reset(_: usize) -> bool {
    POOLS.reset();
    forget_current_pools();
    false
}

fn give_back(idx: usize) -> bool {
    refresh_all((idx != hooks::ALL).then_some(idx))
}

fn capture_end(_: usize) -> bool {
    at_sync();
    false
}

/// The process holds pool state from now on: its fork reset, give-back and
/// capture-end work are registered (once).
#[inline]
fn activate() {
    hooks::enlist(
        &REGISTERED,
        &[
            (&hooks::FORK, fork_reset),
            (&hooks::GIVE_BACK, give_back),
            (&hooks::CAPTURE_END, capture_end),
        ],
    );
}

/// Was any pool allocation recorded? (frees then look for pool records)
#[inline]
pub fn used() -> bool {
    POOLS.used()
}

/// The pool's reserve (None: unknown, or not askable now: a stream
/// capture is active, crate::capture).
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
    (r == CUDA_SUCCESS).then_some(v)
}

/// Refresh every pool (of one region device, or all). True if any charge
/// went down.
pub fn refresh_all(idx: Option<usize>) -> bool {
    if !POOLS.used() {
        return false;
    }
    POOLS.refresh_all(&ACCT, idx, crate::capture::quiet(), &reserved)
}

/// At a synchronisation point: refresh the pools freed into since last time.
#[inline]
pub fn at_sync() {
    if POOLS.any_dirty() {
        POOLS.sync(&ACCT, crate::capture::quiet(), &reserved);
    }
}

/// The device a stream belongs to (NULL / legacy / per-thread handles and
/// single-device processes: the current context's device, no driver call).
pub unsafe fn stream_dev(s: CUstream) -> Dev {
    let sv = s as usize;
    if sv <= 2 || devices::count() == 1 {
        return devices::current_dev();
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
                return devices::of_ordinal(d);
            }
        }
    }
    devices::current_dev()
}

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
        activate();
        slot.store(p as u64, Relaxed);
        Some(p as u64)
    } else {
        None
    }
}

/// cuDeviceSetMemPool succeeded.
pub fn set_current(ordinal: c_int, pool: u64) {
    if (0..64).contains(&ordinal) {
        activate();
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
unsafe fn pool_dev(pool: u64, s: CUstream) -> Dev {
    if let Some(d) = POOLS.known_dev(pool) {
        return d;
    }
    let n = devices::count();
    type F = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CUresult;
    let cur = real_fn!(S::cuDeviceGetMemPool, F);
    let def = real_fn!(S::cuDeviceGetDefaultMemPool, F);
    for o in 0..n.clamp(0, 64) {
        for f in [cur, def].into_iter().flatten() {
            let mut p: *mut c_void = core::ptr::null_mut();
            if unsafe { f(&mut p, o) } == CUDA_SUCCESS && p as u64 == pool {
                return devices::of_ordinal(o);
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
    activate();
    match POOLS.alloc(&ACCT, api, dev, pool, n, call, &reserved) {
        Ok((r, pi)) => {
            if r == CUDA_SUCCESS && pi != usize::MAX && !dptr.is_null() {
                // cannot remember it: its live bytes stay (conservative)
                let _ = TABLE.insert(*dptr, KIND_POOLPTR, n, pi as u32);
            }
            r
        }
        // unknown pool / table full: charge like a plain allocation
        Err(call) => plain(api, dev, n, dptr, call),
    }
}

/// Fallback: charge like cuMemAlloc (pointer record of kind DPTR).
unsafe fn plain(
    api: &[u8],
    dev: Dev,
    n: u64,
    dptr: *mut u64,
    call: impl FnOnce() -> CUresult,
) -> CUresult {
    let ch = match ACCT.admit(api, dev, n) {
        Ok(c) => c,
        Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
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
    // not remembered: kept charged (it cannot be released later), conservative
    let _ = TABLE.insert(*dptr, KIND_DPTR, ch.n, ch.dev.idx as u32);
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

/// An allocation on a capturing stream: a memory node of the graph
/// (crate::graphs), not recorded (its free is a node too, or a free of
/// graph memory later, neither of which changes a charge).
unsafe fn captured(api: &[u8], dev: Dev, n: u64, call: impl FnOnce() -> CUresult) -> CUresult {
    if !crate::graphs::captured_node(api, dev, n) {
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

/// A pool allocation was freed (the driver succeeded).
pub fn freed(rec: Rec) {
    POOLS.freed(&ACCT, rec);
}

/// A pool record whose memory the driver freed on its own.
pub fn forget(rec: Rec) {
    POOLS.forget(rec);
}

/// cuMemPoolTrimTo succeeded: follow the reserve down.
pub fn trimmed(pool: u64) {
    POOLS.trimmed(&ACCT, pool, crate::capture::quiet(), &reserved);
}

/// cuMemPoolCreate succeeded: remember the pool's device.
pub fn created(pool: u64, ordinal: c_int) {
    activate();
    POOLS.created(&ACCT, pool, devices::of_ordinal(ordinal));
}

/// cuMemPoolDestroy succeeded.
pub fn destroyed(pool: u64) {
    for c in CUR_POOL.iter() {
        let _ = c.compare_exchange(pool, 0, Relaxed, Relaxed);
    }
    POOLS.destroyed(&ACCT, pool);
}

#[cfg(test)]
mod tests;
