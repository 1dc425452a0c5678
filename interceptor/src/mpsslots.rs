//! A compute share split over the CUDA processes its container declared
//! (`sm-procs=N`). MPS bounds each client process, not a container: each
//! of the container's processes runs at its part of the share (the grant's
//! `sm_percent / sm_procs`, set by the share's client settings) and this module keeps
//! the container to N clients, refusing `cuInit` to one more.
//!
//! The count is kept in the container's usage file, where every process of
//! the container already has a slot with its owner word (pid and start
//! time). At `cuInit` a process stores its owner word in its own slot's
//! `mps_client`, then counts the slots whose word equals their live
//! owner's; over N it takes its word back and is refused. Two processes
//! that race can both see one too many and back off; each then counts again
//! without itself and, if a place is free, tries again after a short pause,
//! so a free place is taken in the end and never by two (as the memory
//! admission, never both past the bound). A process that died (exit, kill
//! -9, a zombie not yet reaped) is no client: its owner is dead. A fork
//! child has no slot before it claims its own; an exec'd image (same pid
//! and start time) finds its earlier image's slot freed when it first opens
//! the file, and a claimed slot starts without a word; `env -i` changes
//! nothing (the state directory and /etc/ld.so.preload are not the
//! environment's). Threads of one process register it once.
//!
//! Cooperative, as the memory slice: the usage file is the container's to
//! write, so root in the container can clear the words. The bound that
//! holds against a process that bypasses this is its GPU daemon's limit
//! (core::mps: the largest part of a share on the GPU).
//!
//! Not a fast path: this runs at `cuInit` only (a few times per process),
//! so liveness checks (kill, /proc) and a short sleep are fine.

use crate::cu::{CUresult, CUDA_ERROR_MPS_MAX_CLIENTS_REACHED};
use crate::region::{owner_alive, Region};
use crate::state;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering::*};

/// One registration at a time in this process (threads calling cuInit at
/// once count it once).
static LOCK: AtomicU32 = AtomicU32::new(0);
/// This process's `cuInit` succeeded as a client (it keeps its place
/// whatever a later call does).
static SERVED: AtomicU8 = AtomicU8::new(0);
/// Tries before a process racing others for the last place gives up.
const ATTEMPTS: u32 = 50;

fn lock() {
    while LOCK.compare_exchange(0, 1, Acquire, Relaxed).is_err() {
        // SAFETY: no arguments
        unsafe { libc::sched_yield() };
    }
}

fn unlock() {
    LOCK.store(0, Release);
}

/// A fork child is a process of its own: not a client before its own
/// cuInit, and not waiting on a lock a thread of its parent held.
fn fork_reset(_: usize) -> bool {
    LOCK.store(0, Release);
    SERVED.store(0, Release);
    false
}

/// The container's live clients: slots whose word is their live owner's.
fn clients(r: &Region) -> u32 {
    let mut n = 0;
    for s in 0..r.high_water() {
        let w = r.mps_client(s).load(SeqCst);
        if w != 0 && r.live_owner(s, &owner_alive) == Some(w) {
            n += 1;
        }
    }
    n
}

/// A pause of 1 to 10 ms, different for each process and try, so that
/// racers do not meet again.
fn pause(attempt: u32) {
    let ms = 1 + (crate::sys::getpid() as u32).wrapping_add(attempt.wrapping_mul(7)) % 10;
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: ms as libc::c_long * 1_000_000,
    };
    // SAFETY: a valid timespec; an interrupted sleep is only shorter
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

/// Why a process is no client.
enum Refusal {
    /// `procs` clients already run (this many, seen last).
    Full(u32),
    /// No usage file or no slot to count in.
    Uncounted,
}

fn join_locked(procs: u32) -> Result<(), Refusal> {
    let r = state::region().ok_or(Refusal::Uncounted)?;
    if !r.shared {
        return Err(Refusal::Uncounted);
    }
    let s = state::my_slot(&r).ok_or(Refusal::Uncounted)?;
    let me = r.owner(s).load(SeqCst);
    let cell = r.mps_client(s);
    if cell.load(SeqCst) == me {
        return Ok(());
    }
    let mut seen = procs;
    for attempt in 0..ATTEMPTS {
        cell.store(me, SeqCst);
        if clients(&r) <= procs {
            return Ok(());
        }
        cell.store(0, SeqCst);
        seen = clients(&r);
        if seen >= procs {
            break;
        }
        pause(attempt);
    }
    Err(Refusal::Full(seen.max(procs)))
}

/// Make this process one of its container's at most `procs` MPS clients of
/// a share of `sm` percent; `Err` (the line printed) when `procs` run
/// already, or when they cannot be counted (no usage file: fail closed).
pub fn join(sm: u32, procs: u32) -> Result<(), CUresult> {
    crate::hooks::FORK.register(fork_reset);
    lock();
    let r = join_locked(procs);
    unlock();
    match r {
        Ok(()) => Ok(()),
        Err(Refusal::Full(running)) => {
            crate::msg::share_processes_full(sm, procs, running);
            Err(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED)
        }
        Err(Refusal::Uncounted) => {
            crate::msg::share_uncounted();
            Err(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED)
        }
    }
}

/// After the driver's `cuInit` of a process that [`join`]ed: a success
/// keeps its place; a failure gives it back unless an earlier call
/// succeeded (its slot would hold a place it does not use).
pub fn settle(ok: bool) {
    let Some(r) = state::region() else { return };
    let s = state::my_slot_if_any();
    if s == usize::MAX {
        return;
    }
    lock();
    let me = r.owner(s).load(SeqCst);
    let cell = r.mps_client(s);
    if ok {
        SERVED.store(1, Release);
        // a thread whose cuInit failed meanwhile took the word back
        if cell.load(SeqCst) != me {
            cell.store(me, SeqCst);
        }
    } else if SERVED.load(Acquire) == 0 && cell.load(SeqCst) == me {
        cell.store(0, SeqCst);
    }
    unlock();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::{owner_word, HeaderInit};

    fn region() -> Region {
        Region::anonymous(&HeaderInit {
            flags: 0,
            limit: 0,
            ctx_overhead: 0,
            container_id: b"t",
            uuids: &[],
        })
        .unwrap()
    }

    /// The clients are the live slots whose word is their owner's: a dead
    /// owner's, a reused slot's and a word of another owner are none.
    #[test]
    fn clients_are_live_slots_with_their_owners_word() {
        let r = region();
        let me = std::process::id() as i32;
        let st = crate::sys::proc_start_time(me);
        let a = r.claim_slot(me, st, &|_| true).unwrap();
        r.mps_client(a).store(owner_word(me, st), SeqCst);
        assert_eq!(clients(&r), 1);
        // a process that ended (its pid reaped) holds no place
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        let b = r.claim_slot(pid, 0, &|_| true).unwrap();
        r.mps_client(b).store(owner_word(pid, 0), SeqCst);
        assert_eq!(clients(&r), 1, "a dead client is none");
        // a word that is not its owner's (a slot reused by another process)
        let c = r.claim_slot(me + 100_000, st, &|_| true).unwrap();
        r.mps_client(c).store(owner_word(me, st), SeqCst);
        assert_eq!(clients(&r), 1);
        // claiming a slot clears its word (an earlier image's)
        r.free_slot(a);
        let again = r.claim_slot(me, st, &|_| true).unwrap();
        assert_eq!(again, a);
        assert_eq!(r.mps_client(again).load(SeqCst), 0);
        assert_eq!(clients(&r), 0);
    }
}
