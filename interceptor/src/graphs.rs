//! CUDA graph memory (memory nodes: cuGraphAddMemAllocNode, allocations
//! captured into graphs). The driver reserves it per device in the graph
//! memory pool when a graph first runs and keeps it until
//! cuDeviceGraphMemTrim. We see neither the launch's reservation nor its
//! size in advance, so the charge *follows* the pool: once a graph was
//! instantiated in this process, every synchronisation point (and
//! cuDeviceGraphMemTrim, a context destroy/reset, a refusal) asks the
//! driver for CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT of each device and
//! sets the charge to it. Allocations after that see it; the launch itself
//! is never refused (cuGraphAddMemAllocNode is checked against what is left).
//!
//! Issue 17: the reserve is also read right after each cuGraphLaunch (the
//! launch is where the driver reserves it), and never while a stream
//! capture is active (capture.rs): cuDeviceGetGraphMemAttribute is treated
//! as unsafe during capture; the skipped read is done at the end of the
//! capture or the next legal point.

use crate::account::{self, DevSel};
use crate::config::MAX_GPUS;
use crate::cuda::{CUresult, CUDA_SUCCESS};
use crate::state;
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};
use libc::{c_int, c_void};

const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: c_int = 2;

static USED: AtomicU8 = AtomicU8::new(0);
/// a read was skipped during a capture
static PENDING: AtomicU8 = AtomicU8::new(0);
static CHARGED: [AtomicU64; MAX_GPUS] = [const { AtomicU64::new(0) }; MAX_GPUS];

pub fn reset() {
    USED.store(0, Relaxed);
    PENDING.store(0, Relaxed);
    for c in CHARGED.iter() {
        c.store(0, Relaxed);
    }
}

/// A graph was instantiated (or got a memory node): follow graph memory.
pub fn note() {
    USED.store(1, Relaxed);
}

/// A graph was launched: its memory is reserved now.
pub fn launched() {
    note();
    refresh_all();
}

/// A capture ended: do the read skipped during it.
pub fn at_legal_point() {
    if PENDING.swap(0, Relaxed) != 0 {
        refresh_all();
    }
}

#[inline]
pub fn at_sync() {
    if USED.load(Relaxed) != 0 {
        refresh_all();
    }
}

/// Charge each device's graph-pool reserve. True if a charge went down.
#[cold]
pub fn refresh_all() -> bool {
    if USED.load(Relaxed) == 0 {
        return false;
    }
    if !crate::capture::quiet() {
        PENDING.store(1, Relaxed);
        return false;
    }
    type F = unsafe extern "C" fn(c_int, c_int, *mut c_void) -> CUresult;
    let f = match real_fn!(S::cuDeviceGetGraphMemAttribute, F) {
        Some(f) => f,
        None => return false,
    };
    account::current_dev(); // loads the device count
    let n = state::devcount().load(Relaxed).clamp(1, 64);
    let mut down = false;
    for o in 0..n {
        let d = account::select(DevSel::Ordinal(o));
        if d.idx >= MAX_GPUS {
            continue;
        }
        let mut v: u64 = 0;
        if unsafe {
            f(
                o,
                CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                &mut v as *mut u64 as *mut c_void,
            )
        } != CUDA_SUCCESS
        {
            continue;
        }
        let c = CHARGED[d.idx].swap(v, AcqRel);
        if v > c {
            account::force_charge(d.idx, v - c);
        } else if v < c {
            account::release_bytes(d.idx, c - v);
            down = true;
        }
    }
    down
}
