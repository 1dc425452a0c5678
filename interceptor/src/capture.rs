//! Stream capture (issue 17): while a stream is capturing, the driver
//! refuses "potentially unsafe" calls (synchronisations, memory queries,
//! pool attribute queries, ...) and a refused call invalidates the capture
//! (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at cuStreamEndCapture). In global
//! mode (the default) another thread's capture prohibits them in every
//! thread. So no wrapper makes such a call of its own while a capture this
//! process began is active: the work is skipped (pools stay dirty, graph
//! memory stays pending) and done at the end of the last capture or at the
//! next legal point (launch, synchronisation, refusal).
//!
//! The wrappers of cuStreamBeginCapture{,_v2,_v2_ptsz,ToGraph} record the
//! stream; cuStreamEndCapture{,_ptsz} forgets it once the driver says it is
//! no longer capturing. One relaxed load (`quiet`) on the paths that would
//! query the driver; nothing on the allocation fast path unless a capture
//! is active. Captures of any mode are counted (a relaxed capture would
//! allow the queries, but deferring costs nothing), in every thread (no
//! thread-local state in this library).
//!
//! Allocations on a capturing stream are memory nodes of the graph: no
//! memory until launch (graphs.rs charges the graph pool then). They are
//! checked against what is left (with what the captures asked before them)
//! and not recorded.

use crate::cuda::{CUresult, CUDA_SUCCESS};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use libc::{c_int, c_void};

const SLOTS: usize = 64;
/// streams whose capture we saw begin (0 = free slot)
static STREAMS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// active captures (slots in use + captures the table could not hold)
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// bytes the active captures' memory nodes asked, per region device
static PENDING: [AtomicU64; crate::config::MAX_GPUS] =
    [const { AtomicU64::new(0) }; crate::config::MAX_GPUS];

/// Forget everything (fork child: captures are the parent's).
pub fn reset() {
    for s in STREAMS.iter() {
        s.store(0, Relaxed);
    }
    ACTIVE.store(0, Relaxed);
    for p in PENDING.iter() {
        p.store(0, Relaxed);
    }
}

/// No capture of ours is active: the driver may be asked anything.
#[inline(always)]
pub fn quiet() -> bool {
    ACTIVE.load(Acquire) == 0 || revalidate()
}

/// Is any capture active (one relaxed load)?
#[inline(always)]
pub fn any() -> bool {
    ACTIVE.load(Relaxed) != 0
}

fn is_capturing(s: u64) -> Option<bool> {
    type F = unsafe extern "C" fn(*mut c_void, *mut c_int) -> CUresult;
    let f = real_fn!(S::cuStreamIsCapturing, F)?;
    let mut st: c_int = 0;
    if unsafe { f(s as *mut c_void, &mut st) } != CUDA_SUCCESS {
        return Some(false); // a destroyed stream captures nothing
    }
    Some(st != 0)
}

/// Is this stream capturing (legal during capture)? Only asked while a
/// capture is active; the legacy stream is never asked (it cannot capture,
/// and asking about it during a capture is itself an error).
pub fn stream_capturing(s: *mut c_void) -> bool {
    if !any() || (s as usize) <= 1 {
        return false;
    }
    is_capturing(s as u64).unwrap_or(true)
}

/// Drop streams that stopped capturing behind our back (destroyed, ended
/// through a path we did not see). Cold: only while captures are active.
#[cold]
fn revalidate() -> bool {
    for slot in STREAMS.iter() {
        let s = slot.load(Acquire);
        if s == 0 {
            continue;
        }
        if is_capturing(s) == Some(false) && slot.compare_exchange(s, 0, AcqRel, Acquire).is_ok() {
            ended_one();
        }
    }
    ACTIVE.load(Acquire) == 0
}

/// A capture began on s.
pub fn began(s: *mut c_void) {
    ACTIVE.fetch_add(1, AcqRel);
    let v = s as u64;
    for slot in STREAMS.iter() {
        if slot.compare_exchange(0, v, AcqRel, Acquire).is_ok() {
            return;
        }
    }
    // table full: counted but unnamed, forgotten at the next end we see
}

/// cuStreamEndCapture returned: forget s if the driver says it stopped.
pub fn end_called(s: *mut c_void) {
    if is_capturing(s as u64) == Some(true) {
        return; // e.g. ended from the wrong thread: still capturing
    }
    let v = s as u64;
    let mut found = false;
    for slot in STREAMS.iter() {
        if slot.compare_exchange(v, 0, AcqRel, Acquire).is_ok() {
            found = true;
            break;
        }
    }
    let named = STREAMS.iter().filter(|x| x.load(Relaxed) != 0).count();
    if found || ACTIVE.load(Acquire) > named {
        ended_one();
    }
}

fn ended_one() {
    let prev = ACTIVE.fetch_sub(1, AcqRel);
    if prev <= 1 {
        ACTIVE.store(0, Release);
        for p in PENDING.iter() {
            p.store(0, Relaxed);
        }
        // the accounting skipped during the capture, now legal
        crate::pools::at_sync();
        crate::graphs::at_legal_point();
    }
}

/// A memory node of n bytes asked during a capture: what the captures
/// asked so far plus n must fit in what is left (not charged: the graph
/// pool is charged from the launch).
pub fn node(api: &[u8], dev: crate::account::Dev, n: u64) -> bool {
    if dev.idx >= crate::config::MAX_GPUS {
        return true;
    }
    let p = &PENDING[dev.idx];
    let before = p.fetch_add(n, AcqRel);
    if crate::account::fits_after(api, dev, n, before) {
        crate::graphs::note();
        true
    } else {
        p.fetch_sub(n, AcqRel);
        false
    }
}
