//! Stream capture: while a stream is capturing, the driver
//! refuses "potentially unsafe" calls (synchronisations, memory queries,
//! pool attribute queries, ...) and a refused call invalidates the capture
//! (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED at cuStreamEndCapture). In global
//! mode (the default) another thread's capture prohibits them in every
//! thread. So no wrapper makes such a call of its own while a capture this
//! process began is active: the work is skipped (pools stay dirty, graph
//! memory stays pending) and done at the end of the last capture (the
//! functions registered in hooks::CAPTURE_END) or at the next legal point
//! (launch, synchronisation, refusal).
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
//! memory until launch (the graphs module charges the graph pool then). They
//! are checked against what is left (with what the captures asked before
//! them) and not recorded.
//!
//! [`Captures`] is the bookkeeping (unit-tested with a stand-in for the
//! driver's cuStreamIsCapturing); the free functions are the process's one
//! instance over the real driver.

use crate::account::ACCT;
use crate::config::MAX_GPUS;
use crate::cu::{CUresult, CUDA_SUCCESS};
use crate::hooks;
use crate::policy::{Books, Dev};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use libc::{c_int, c_void};

const SLOTS: usize = 64;

/// The driver's answer to "is stream s capturing?" (None: cannot ask).
pub type IsCapturing<'a> = &'a dyn Fn(u64) -> Option<bool>;

pub struct Captures {
    /// streams whose capture we saw begin (0 = free slot)
    streams: [AtomicU64; SLOTS],
    /// active captures (slots in use + captures the table could not hold)
    active: AtomicUsize,
    /// bytes the active captures' memory nodes asked, per region device
    pending: [AtomicU64; MAX_GPUS],
}

impl Captures {
    pub const fn new() -> Self {
        Captures {
            streams: [const { AtomicU64::new(0) }; SLOTS],
            active: AtomicUsize::new(0),
            pending: [const { AtomicU64::new(0) }; MAX_GPUS],
        }
    }

    /// Forget everything (fork child: captures are the parent's).
    pub fn reset(&self) {
        for s in self.streams.iter() {
            s.store(0, Relaxed);
        }
        self.active.store(0, Relaxed);
        for p in self.pending.iter() {
            p.store(0, Relaxed);
        }
    }

    /// Is any capture active (one relaxed load)?
    #[inline(always)]
    pub fn any(&self) -> bool {
        self.active.load(Relaxed) != 0
    }

    /// No capture of ours is active: the driver may be asked anything.
    /// Streams that stopped capturing behind our back (destroyed, ended
    /// through a path we did not see) are dropped first; the second value
    /// says that this ended the last capture.
    #[inline(always)]
    pub fn quiet(&self, ask: IsCapturing) -> (bool, bool) {
        if self.active.load(Acquire) == 0 {
            return (true, false);
        }
        self.revalidate(ask)
    }

    #[cold]
    fn revalidate(&self, ask: IsCapturing) -> (bool, bool) {
        let mut last = false;
        for slot in self.streams.iter() {
            let s = slot.load(Acquire);
            if s == 0 {
                continue;
            }
            if ask(s) == Some(false) && slot.compare_exchange(s, 0, AcqRel, Acquire).is_ok() {
                last |= self.ended_one();
            }
        }
        (self.active.load(Acquire) == 0, last)
    }

    /// A capture began on s.
    pub fn began(&self, s: u64) {
        self.active.fetch_add(1, AcqRel);
        for slot in self.streams.iter() {
            if slot.compare_exchange(0, s, AcqRel, Acquire).is_ok() {
                return;
            }
        }
        // table full: counted but unnamed, forgotten at the next end we see
    }

    /// cuStreamEndCapture returned: forget s if the driver says it
    /// stopped. True when that ended the last capture.
    pub fn end_called(&self, s: u64, ask: IsCapturing) -> bool {
        if ask(s) == Some(true) {
            return false; // e.g. ended from the wrong thread: still capturing
        }
        let mut found = false;
        for slot in self.streams.iter() {
            if slot.compare_exchange(s, 0, AcqRel, Acquire).is_ok() {
                found = true;
                break;
            }
        }
        let named = self.streams.iter().filter(|x| x.load(Relaxed) != 0).count();
        if found || self.active.load(Acquire) > named {
            return self.ended_one();
        }
        false
    }

    /// One capture less; true when it was the last (the nodes' pending
    /// bytes go with it).
    fn ended_one(&self) -> bool {
        let prev = self.active.fetch_sub(1, AcqRel);
        if prev <= 1 {
            self.active.store(0, Release);
            for p in self.pending.iter() {
                p.store(0, Relaxed);
            }
            return true;
        }
        false
    }

    /// A memory node of n bytes asked during a capture: what the captures
    /// asked so far plus n must fit in what is left (not charged: the
    /// graph pool is charged from the launch).
    pub fn node(&self, books: &dyn Books, api: &[u8], dev: Dev, n: u64) -> bool {
        if dev.idx >= MAX_GPUS {
            return true;
        }
        let p = &self.pending[dev.idx];
        let before = p.fetch_add(n, AcqRel);
        if books.fits_after(api, dev, n, before) {
            true
        } else {
            p.fetch_sub(n, AcqRel);
            false
        }
    }
}

impl Default for Captures {
    fn default() -> Self {
        Self::new()
    }
}

// ------------------------------------------------------------ the process's captures

static CAPTURES: Captures = Captures::new();
static REGISTERED: AtomicU8 = AtomicU8::new(0);

fn is_capturing(s: u64) -> Option<bool> {
    type F = unsafe extern "C" fn(*mut c_void, *mut c_int) -> CUresult;
    let f = real_fn!(S::cuStreamIsCapturing, F)?;
    let mut st: c_int = 0;
    if unsafe { f(s as *mut c_void, &mut st) } != CUDA_SUCCESS {
        return Some(false); // a destroyed stream captures nothing
    }
    Some(st != 0)
}

fn fork_reset(_: usize) -> bool {
    CAPTURES.reset();
    false
}

/// The last capture ended: do what was skipped during it.
fn last_ended() {
    hooks::CAPTURE_END.run(hooks::ALL);
}

/// No capture of ours is active: the driver may be asked anything.
#[inline(always)]
pub fn quiet() -> bool {
    let (q, last) = CAPTURES.quiet(&is_capturing);
    if last {
        last_ended();
    }
    q
}

/// Is any capture active (one relaxed load)?
#[inline(always)]
pub fn any() -> bool {
    CAPTURES.any()
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

/// A capture began on s.
pub fn began(s: *mut c_void) {
    hooks::enlist(&REGISTERED, &[(&hooks::FORK, fork_reset)]);
    CAPTURES.began(s as u64);
}

/// cuStreamEndCapture returned.
pub fn end_called(s: *mut c_void) {
    if CAPTURES.end_called(s as u64, &is_capturing) {
        last_ended();
    }
}

/// A memory node of n bytes asked during a capture (see [`Captures::node`]).
pub fn node(api: &[u8], dev: Dev, n: u64) -> bool {
    CAPTURES.node(&ACCT, api, dev, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;
    use crate::policy::Budget;
    use std::cell::RefCell;

    const M: u64 = 1 << 20;

    /// While a capture is active nothing may query the driver (quiet is
    /// false) until the driver says the stream stopped; the end of the
    /// last capture is reported once, and a stream still capturing after
    /// cuStreamEndCapture (another thread's end) keeps it active.
    /// (Mutation: `quiet` answering `true` while active fails the first
    /// assertion; ended_one not reporting the last end fails `last`.)
    #[test]
    fn work_is_deferred_until_the_last_capture_ends() {
        let c = Captures::new();
        let capturing = RefCell::new(vec![0x10u64, 0x20]);
        let ask = |s: u64| Some(capturing.borrow().contains(&s));
        assert_eq!(c.quiet(&ask), (true, false));
        c.began(0x10);
        c.began(0x20);
        assert_eq!(c.quiet(&ask), (false, false));
        // the driver still captures 0x10 (ended from the wrong thread)
        assert!(!c.end_called(0x10, &ask));
        assert!(c.any());
        capturing.borrow_mut().retain(|&s| s != 0x10);
        assert!(!c.end_called(0x10, &ask), "one capture is still active");
        assert_eq!(c.quiet(&ask), (false, false));
        // 0x20 stops behind our back (destroyed): seen at the next look
        capturing.borrow_mut().clear();
        assert_eq!(c.quiet(&ask), (true, true));
        assert!(!c.any());
    }

    /// A capture's memory nodes are checked against what is left together
    /// with the nodes asked before them, charge nothing, and are forgotten
    /// when the capture ends. (Mutation: not adding n to `pending` admits
    /// the third node.)
    #[test]
    fn memory_nodes_count_against_what_is_left() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let c = Captures::new();
        let ask = |_| Some(false);
        c.began(0x10);
        assert!(c.node(&b, b"cuMemAllocAsync", dev(0), 32 * M));
        assert!(c.node(&b, b"cuMemAllocAsync", dev(0), 16 * M));
        assert!(!c.node(&b, b"cuMemAllocAsync", dev(0), 32 * M));
        assert_eq!(r.used(0), 0, "nodes charge nothing");
        assert!(c.end_called(0x10, &ask));
        c.began(0x30);
        assert!(
            c.node(&b, b"cuMemAllocAsync", dev(0), 64 * M),
            "pending forgotten"
        );
    }
}
