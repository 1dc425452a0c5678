//! CUDA driver API wrappers. Each is exported (direct-link interposition)
//! and handed out by the dlsym / cuGetProcAddress paths.
//!
//! Producers reserve before the driver call and roll back when it fails;
//! frees always reach the driver and release only after it succeeded.
//!
//! This file holds what every family shares (the charged producer, the
//! driver-first path, frees); each family of entry points has its own file:
//! alloc.rs (cuMemAlloc, pitch, frees, managed), pools.rs (async and pool
//! allocation, synchronisation), vmm.rs, arrays.rs, report.rs (cuMemGetInfo,
//! cuDeviceTotalMem), contexts.rs (creation and lifetimes), graphs.rs (graph
//! memory, stream capture). Their bookkeeping lives below them in
//! crate::{pools, vmm, contexts, graphs, capture}.

use crate::account::{self, ACCT};
use crate::cu::*;
use crate::devices::{self, DevSel};
use crate::policy::{Books, Charge, Dev, Refused, Tier, UNTRACKED};
use crate::ptrtable::{KIND_ARRAY, KIND_DPTR, KIND_MIPMAP, KIND_POOLPTR, KIND_VMM};
use crate::state::{self, config, TABLE};
use crate::symbols::{real_fn, S};
use core::sync::atomic::Ordering::*;
use libc::{c_int, c_uint, c_void};

/// The device a call is about; the current context's with its base
/// context charge (crate::contexts).
#[inline]
fn select(sel: DevSel) -> Dev {
    match sel {
        DevSel::Current => crate::contexts::current_dev_charged(),
        DevSel::Ordinal(o) => devices::of_ordinal(o),
    }
}

type CUstream = *mut c_void;
type CUdeviceptr = u64;

macro_rules! real_or {
    ($s:expr, $t:ty) => {
        match real_fn!($s, $t) {
            Some(f) => f,
            None => return CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

/// Common shape of a charged producer.
#[inline(always)]
unsafe fn produce(
    api: &[u8],
    sel: DevSel,
    n: u64,
    kind: u32,
    mut call: impl FnMut() -> CUresult,
    key: impl FnOnce() -> Option<u64>,
    undo: impl FnOnce(u64),
) -> CUresult {
    let enforce = match config() {
        Some(c) => c.enforce,
        None => false,
    };
    if !enforce {
        return call();
    }
    let dev = select(sel);
    let ch = match ACCT.admit(api, dev, n) {
        Ok(c) => c,
        Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let ch = match ch {
        Some(c) => c,
        None => return call(),
    };
    // within the guarantee: a refusal by the driver may wait for bursters
    let r = burst::reclaiming(api, dev, n, call);
    if r != CUDA_SUCCESS {
        ch.rollback();
        return r;
    }
    record(ch, kind, key(), undo, r)
}

#[inline(always)]
fn record(
    ch: Charge,
    kind: u32,
    key: Option<u64>,
    undo: impl FnOnce(u64),
    r: CUresult,
) -> CUresult {
    match key {
        Some(k) => {
            if TABLE.insert(k, kind, ch.n, ch.dev.idx as u32) {
                r
            } else {
                // cannot remember it, so cannot release it later: give it back
                undo(k);
                ch.rollback();
                CUDA_ERROR_OUT_OF_MEMORY
            }
        }
        None => {
            ch.rollback();
            r
        }
    }
}

/// Arguments the driver rejects: they reach the driver first,
/// uncharged, so the program gets the driver's own answer and not a
/// refusal; should the driver accept them after all, the charge follows
/// (refused: the allocation is undone and the answer is OUT_OF_MEMORY).
#[cold]
unsafe fn driver_first(
    api: &[u8],
    sel: DevSel,
    n: u64,
    kind: u32,
    call: impl FnOnce() -> CUresult,
    key: impl FnOnce() -> Option<u64>,
    undo: impl FnOnce(u64),
) -> CUresult {
    let r = call();
    if r != CUDA_SUCCESS || !config().map(|c| c.enforce).unwrap_or(false) {
        return r;
    }
    let k = key();
    match ACCT.admit(api, select(sel), n) {
        Ok(Some(ch)) => record(ch, kind, k, undo, r),
        Ok(None) => r,
        Err(Refused) => {
            if let Some(k) = k {
                undo(k);
            }
            CUDA_ERROR_OUT_OF_MEMORY
        }
    }
}

/// A device attribute of an ordinal, cached (0: unknown).
fn dev_attr_cached(
    cache: &[core::sync::atomic::AtomicU64; 64],
    attr: c_int,
    ordinal: c_int,
) -> u64 {
    let slot = match cache.get(ordinal.clamp(0, 63) as usize) {
        Some(s) => s,
        None => return 0,
    };
    let v = slot.load(Relaxed);
    if v != 0 {
        return v;
    }
    type F = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CUresult;
    let mut x: c_int = 0;
    match real_fn!(S::cuDeviceGetAttribute, F) {
        Some(f) if unsafe { f(&mut x, attr, ordinal) } == CUDA_SUCCESS && x > 0 => {
            slot.store(x as u64, Relaxed);
            x as u64
        }
        _ => 0,
    }
}

/// Common shape of a free: forget, call the driver, release on success
/// (restore the record if the driver refused).
#[inline(always)]
fn consume(k: u64, kind: u32, call: impl FnOnce() -> CUresult) -> CUresult {
    let rec = TABLE.remove(k, kind);
    let r = call();
    if let Some(rec) = rec {
        if r == CUDA_SUCCESS {
            ACCT.release_rec(rec);
        } else {
            TABLE.insert(k, kind, rec.size, rec.dev);
        }
    }
    r
}

/// A device-pointer free: a plain record, or a stream-ordered one (whose
/// memory stays in its pool).
#[inline(always)]
fn free_ptr(k: u64, call: impl FnOnce() -> CUresult) -> CUresult {
    let rec = TABLE.remove(k, KIND_DPTR);
    if rec.is_none() && crate::pools::used() {
        if let Some(pr) = TABLE.remove(k, KIND_POOLPTR) {
            let r = call();
            if r == CUDA_SUCCESS {
                crate::pools::freed(pr);
            } else {
                TABLE.insert(k, KIND_POOLPTR, pr.size, pr.dev);
            }
            return r;
        }
    }
    let r = call();
    if let Some(rec) = rec {
        if r == CUDA_SUCCESS {
            ACCT.release_rec(rec);
        } else {
            TABLE.insert(k, KIND_DPTR, rec.size, rec.dev);
        }
    }
    r
}

unsafe fn free_dptr(p: u64) {
    type F = unsafe extern "C" fn(CUdeviceptr) -> CUresult;
    if let Some(f) = real_fn!(S::cuMemFree_v2, F) {
        f(p);
    }
}

mod alloc;
mod arrays;
mod burst;
mod contexts;
mod graphs;
mod init;
mod pools;
mod report;
mod vmm;
pub use alloc::*;
pub use arrays::*;
pub use contexts::*;
pub use graphs::*;
pub use init::*;
pub use pools::*;
pub use report::*;
pub use vmm::*;
