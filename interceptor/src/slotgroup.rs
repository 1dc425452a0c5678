//! A usage file shared by several containers (the consumers of one DRA
//! claim, each in its own pid namespace): this process's consumer group,
//! stored in every slot it claims, and the slots' liveness locks. A pid of
//! another namespace means nothing here, so a slot of another group is
//! judged by an open file description lock on its first byte, taken by its
//! owner before the owner word is published and dropped by the kernel when
//! the owner is gone (docs/interceptor.md, "A file shared by several
//! containers").
#[cfg(not(test))]
use core::sync::atomic::{AtomicU64, Ordering::SeqCst};

// The usage file's descriptor, kept open for the slots' liveness locks
// (open file description locks: they go when the last descriptor of the
// description is closed, i.e. when the process, and any child that
// inherited it without exec, is gone; descriptors are close-on-exec).
#[cfg(not(test))]
static LIVE_FD: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(-1);
#[cfg(not(test))]
pub(crate) fn live_fd() -> i32 {
    LIVE_FD.load(SeqCst)
}
/// Keep `fd` (the first usage file opened); false when one is kept already.
#[cfg(not(test))]
pub(crate) fn set_live_fd(fd: i32) -> bool {
    LIVE_FD.compare_exchange(-1, fd, SeqCst, SeqCst).is_ok()
}
#[cfg(test)]
std::thread_local!(static LIVE_FD: core::cell::Cell<i32> = const { core::cell::Cell::new(-1) });
#[cfg(test)]
pub(crate) fn live_fd() -> i32 {
    LIVE_FD.with(|c| c.get())
}
#[cfg(test)]
pub(crate) fn set_live_fd(fd: i32) -> bool {
    LIVE_FD.with(|c| {
        if c.get() >= 0 {
            return false;
        }
        c.set(fd);
        true
    })
}
#[cfg(test)]
pub fn forget_live_fd() {
    LIVE_FD.with(|c| c.set(-1))
}

fn slot_lock(off: usize, kind: i32) -> libc::flock {
    let mut l: libc::flock = unsafe { core::mem::zeroed() };
    l.l_type = kind as _;
    l.l_whence = libc::SEEK_SET as _;
    l.l_start = off as _;
    l.l_len = 1;
    l
}

/// Lock the first byte of the slot at `off` (an open file description
/// lock). False when this process is in a consumer group and the lock
/// could not be taken: the caller must not use the slot, since another
/// group would judge it dead (fail closed). Without a group no lock is
/// needed: true.
pub(crate) fn lock_slot(off: usize) -> bool {
    if my_group() == 0 {
        return true;
    }
    let fd = live_fd();
    if fd < 0 {
        return false;
    }
    let l = slot_lock(off, libc::F_WRLCK);
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &l) == 0 }
}

/// Whether some process holds the lock of the slot at `off`; None when
/// it cannot be known (no file).
pub(crate) fn slot_locked(off: usize) -> Option<bool> {
    let fd = live_fd();
    if fd < 0 {
        return None;
    }
    let mut l = slot_lock(off, libc::F_WRLCK);
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut l) } != 0 {
        return None;
    }
    Some(l.l_type as i32 != libc::F_UNLCK)
}

/// This process's consumer group (the limits file's `consumer_group`, set
/// once at initialisation; 0 without one).
#[cfg(not(test))]
static MY_GROUP: AtomicU64 = AtomicU64::new(0);

#[cfg(not(test))]
pub fn set_my_group(g: u64) {
    MY_GROUP.store(g, SeqCst);
}

#[cfg(not(test))]
pub(crate) fn my_group() -> u64 {
    MY_GROUP.load(SeqCst)
}

// per test thread: the unit tests run in parallel in one process
#[cfg(test)]
std::thread_local!(static MY_GROUP: core::cell::Cell<u64> = const { core::cell::Cell::new(0) });

#[cfg(test)]
pub fn set_my_group(g: u64) {
    MY_GROUP.with(|c| c.set(g))
}

#[cfg(test)]
pub(crate) fn my_group() -> u64 {
    MY_GROUP.with(|c| c.get())
}
