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
//! The reserve is also read right after each cuGraphLaunch (the
//! launch is where the driver reserves it), and never while a stream
//! capture is active (crate::capture): cuDeviceGetGraphMemAttribute is
//! treated as unsafe during capture; the skipped read is done at the end of
//! the capture or the next legal point.
//!
//! [`GraphMem`] is the bookkeeping (unit-tested with the reserves given);
//! the free functions are the process's one instance over the real driver.

use crate::account::ACCT;
use crate::config::MAX_GPUS;
use crate::cu::{CUresult, CUDA_SUCCESS};
use crate::devices;
use crate::hooks;
use crate::policy::{Books, Dev};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};
use libc::{c_int, c_void};

const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: c_int = 2;

pub struct GraphMem {
    used: AtomicU8,
    /// a read was skipped during a capture
    pending: AtomicU8,
    charged: [AtomicU64; MAX_GPUS],
}

impl GraphMem {
    pub const fn new() -> Self {
        GraphMem {
            used: AtomicU8::new(0),
            pending: AtomicU8::new(0),
            charged: [const { AtomicU64::new(0) }; MAX_GPUS],
        }
    }

    pub fn reset(&self) {
        self.used.store(0, Relaxed);
        self.pending.store(0, Relaxed);
        for c in self.charged.iter() {
            c.store(0, Relaxed);
        }
    }

    /// A graph was instantiated (or got a memory node): follow graph
    /// memory from now on. True the first time.
    pub fn note(&self) -> bool {
        self.used.load(Relaxed) == 0 && self.used.swap(1, Relaxed) == 0
    }

    pub fn used(&self) -> bool {
        self.used.load(Relaxed) != 0
    }

    /// Take the "a read was skipped" mark.
    pub fn take_pending(&self) -> bool {
        self.pending.swap(0, Relaxed) != 0
    }

    /// Set each device's charge to its graph-pool reserve: `devs` are the
    /// devices, `reserve` the driver's answer for one (None: unknown, kept
    /// as it is). `quiet`: the driver may be asked now (no capture is
    /// active); otherwise the read is only marked as skipped. True if a
    /// charge went down.
    pub fn follow(
        &self,
        books: &dyn Books,
        quiet: bool,
        devs: &mut dyn Iterator<Item = Dev>,
        reserve: &dyn Fn(Dev) -> Option<u64>,
    ) -> bool {
        if !self.used() {
            return false;
        }
        if !quiet {
            self.pending.store(1, Relaxed);
            return false;
        }
        let mut down = false;
        for d in devs {
            if d.idx >= MAX_GPUS {
                continue;
            }
            let Some(v) = reserve(d) else { continue };
            let c = self.charged[d.idx].swap(v, AcqRel);
            if v > c {
                books.charge(d.idx, v - c);
            } else if v < c {
                books.release(d.idx, c - v);
                down = true;
            }
        }
        down
    }
}

impl Default for GraphMem {
    fn default() -> Self {
        Self::new()
    }
}

// ------------------------------------------------------------ the process's graph memory

static GRAPHS: GraphMem = GraphMem::new();

fn fork_reset(_: usize) -> bool {
    GRAPHS.reset();
    false
}

fn give_back(_: usize) -> bool {
    refresh_all()
}

fn capture_end(_: usize) -> bool {
    at_legal_point();
    false
}

/// A graph was instantiated (or got a memory node): follow graph memory.
pub fn note() {
    // the hooks exist before the mark that graph memory is followed
    hooks::enlist(
        &REGISTERED,
        &[
            (&hooks::FORK, fork_reset),
            (&hooks::GIVE_BACK, give_back),
            (&hooks::CAPTURE_END, capture_end),
        ],
    );
    GRAPHS.note();
}
static REGISTERED: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// A graph was launched: its memory is reserved now.
pub fn launched() {
    note();
    refresh_all();
}

/// A capture ended: do the read skipped during it.
pub fn at_legal_point() {
    if GRAPHS.take_pending() {
        refresh_all();
    }
}

#[inline]
pub fn at_sync() {
    if GRAPHS.used() {
        refresh_all();
    }
}

/// Charge each device's graph-pool reserve. True if a charge went down.
#[cold]
pub fn refresh_all() -> bool {
    if !GRAPHS.used() {
        return false;
    }
    type F = unsafe extern "C" fn(c_int, c_int, *mut c_void) -> CUresult;
    let Some(f) = real_fn!(S::cuDeviceGetGraphMemAttribute, F) else {
        return false;
    };
    let quiet = crate::capture::quiet();
    if quiet {
        devices::current_dev(); // loads the device count
    }
    let n = devices::count().clamp(1, 64);
    let reserve = |d: Dev| {
        let mut v: u64 = 0;
        let r = unsafe {
            f(
                d.ordinal,
                CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                &mut v as *mut u64 as *mut c_void,
            )
        };
        (r == CUDA_SUCCESS).then_some(v)
    };
    GRAPHS.follow(&ACCT, quiet, &mut (0..n).map(devices::of_ordinal), &reserve)
}

/// An allocation on a capturing stream: a memory node of the graph, no
/// memory now (the graph pool is charged from the launch). Checked against
/// what is left (crate::capture).
pub fn captured_node(api: &[u8], dev: Dev, n: u64) -> bool {
    if dev.idx >= MAX_GPUS {
        return true;
    }
    if crate::capture::node(api, dev, n) {
        note();
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::*;
    use crate::policy::Budget;

    const M: u64 = 1 << 20;

    /// The charge follows the driver's reserve up and down per device,
    /// only once a graph was seen, and never while a capture is active
    /// (the read is marked skipped instead). (Mutation: charging `v`
    /// instead of `v - c` double-charges on the second follow.)
    #[test]
    fn the_charge_follows_the_reserve() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M), Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let g = GraphMem::new();
        let res = std::cell::Cell::new([32 * M, 0]);
        let reserve = |d: Dev| Some(res.get()[d.idx]);
        let devs = || (0..2).map(dev);
        assert!(!g.follow(&b, true, &mut devs(), &reserve), "no graph yet");
        assert_eq!(r.used(0), 0);
        assert!(g.note() && !g.note());
        g.follow(&b, true, &mut devs(), &reserve);
        g.follow(&b, true, &mut devs(), &reserve);
        assert_eq!((r.used(0), r.used(1)), (32 * M, 0));
        // a second launch grows the reserve: only the growth is added
        res.set([48 * M, 0]);
        g.follow(&b, true, &mut devs(), &reserve);
        assert_eq!(r.used(0), 48 * M);
        res.set([8 * M, 16 * M]);
        assert!(
            !g.follow(&b, false, &mut devs(), &reserve),
            "capture: not asked"
        );
        assert_eq!(r.used(0), 48 * M);
        assert!(g.take_pending() && !g.take_pending());
        assert!(g.follow(&b, true, &mut devs(), &reserve), "went down");
        assert_eq!((r.used(0), r.used(1)), (8 * M, 16 * M));
        g.reset();
        assert!(!g.used());
    }
}
