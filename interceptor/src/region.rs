//! The container-wide accounting region (the `usage` file, or a private
//! anonymous mapping). Layout: gpuquota_formats::usage, documented in
//! docs/interceptor.md and interceptor/include/gpuquota_usage.h; all integers little-endian (the
//! native order of every supported target), 8-byte fields accessed atomically.
//!
//! Admission is lock-free: a process adds n to its own slot's `used[dev]`
//! (SeqCst) and then sums every slot up to the high-water mark; if the sum is
//! above the limit it subtracts n again and fails. Two racers can both fail,
//! never both succeed past the limit.

pub use crate::slotgroup::set_my_group;
#[cfg(test)]
use crate::slotgroup::{forget_live_fd, live_fd};
use crate::slotgroup::{lock_slot, my_group, set_live_fd, slot_locked};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

// The layout is gpuquota_formats::usage (shared with the host's reader and
// checked against include/gpuquota_usage.h).
pub use gpuquota_formats::usage::{
    owner_word, DEV_COUNT, FLAG_CONTAINER, FLAG_PERCENT, HEADER_SIZE, H_CONTAINER_ID,
    H_CTX_OVERHEAD, H_DEV_COUNT, H_FLAGS, H_HEADER_SIZE, H_HIGH_WATER, H_LIMIT, H_MAGIC,
    H_RECLAIM_LAST, H_RECLAIM_SINCE, H_RECLAIM_WAITS, H_RECLAIM_WANT, H_REFUSALS, H_SLOTS_OFFSET,
    H_SLOT_COUNT, H_SLOT_SIZE, H_SLOT_USED_OFFSET, H_UUID, H_UUID_STATE, H_VERSION, MAGIC,
    OWNER_FREE, OWNER_RECLAIMING, SLOT_COUNT, SLOT_SIZE, SLOT_USED_OFFSET, S_GROUP, S_MPS_CLIENT,
    S_OWNER, S_PID, S_START_TIME, TOTAL_SIZE, UUID_EMPTY, UUID_VALID, UUID_WRITING, VERSION,
};

#[derive(Clone, Copy)]
pub struct Region {
    base: *mut u8,
    nslots: usize,
    ndev: usize,
    pub shared: bool,
}

unsafe impl Sync for Region {}
unsafe impl Send for Region {}

/// Values the first opener writes into a fresh header.
pub struct HeaderInit<'a> {
    pub flags: u32,
    /// per-device limit; 0 where unknown yet (percent mode)
    pub limit: u64,
    pub ctx_overhead: u64,
    pub container_id: &'a [u8],
    pub uuids: &'a [[u8; 16]],
}

#[derive(Debug, PartialEq, Eq)]
pub enum OpenError {
    Open,
    Map,
    Incompatible,
}

impl Region {
    #[inline]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }
    #[inline]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }
    #[inline]
    fn slot_off(&self, slot: usize) -> usize {
        HEADER_SIZE + slot * SLOT_SIZE
    }
    #[inline]
    pub fn used_cell(&self, slot: usize, dev: usize) -> &AtomicU64 {
        self.u64_at(self.slot_off(slot) + SLOT_USED_OFFSET + dev * 8)
    }
    pub fn owner(&self, slot: usize) -> &AtomicU64 {
        self.u64_at(self.slot_off(slot) + S_OWNER)
    }
    /// The slot's MPS-client word (gpuquota_formats::usage::Slot::mps_client).
    pub fn mps_client(&self, slot: usize) -> &AtomicU64 {
        self.u64_at(self.slot_off(slot) + S_MPS_CLIENT)
    }
    pub fn ndev(&self) -> usize {
        self.ndev
    }
    pub fn nslots(&self) -> usize {
        self.nslots
    }
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    unsafe fn write_header(base: *mut u8, init: &HeaderInit) {
        let r = Region {
            base,
            nslots: SLOT_COUNT,
            ndev: DEV_COUNT,
            shared: false,
        };
        r.u32_at(H_VERSION).store(VERSION, Relaxed);
        r.u32_at(H_HEADER_SIZE).store(HEADER_SIZE as u32, Relaxed);
        r.u32_at(H_SLOT_COUNT).store(SLOT_COUNT as u32, Relaxed);
        r.u32_at(H_DEV_COUNT).store(DEV_COUNT as u32, Relaxed);
        r.u32_at(H_SLOT_SIZE).store(SLOT_SIZE as u32, Relaxed);
        r.u32_at(H_SLOT_USED_OFFSET)
            .store(SLOT_USED_OFFSET as u32, Relaxed);
        r.u64_at(H_SLOTS_OFFSET).store(HEADER_SIZE as u64, Relaxed);
        r.u32_at(H_HIGH_WATER).store(0, Relaxed);
        r.u32_at(H_FLAGS).store(init.flags, Relaxed);
        for d in 0..DEV_COUNT {
            r.u64_at(H_LIMIT + 8 * d).store(init.limit, Relaxed);
        }
        for (i, u) in init.uuids.iter().take(DEV_COUNT).enumerate() {
            core::ptr::copy_nonoverlapping(u.as_ptr(), base.add(H_UUID + 16 * i), 16);
            r.u32_at(H_UUID_STATE + 4 * i).store(UUID_VALID, Relaxed);
        }
        r.u64_at(H_CTX_OVERHEAD).store(init.ctx_overhead, Relaxed);
        let n = core::cmp::min(init.container_id.len(), 63);
        core::ptr::copy_nonoverlapping(init.container_id.as_ptr(), base.add(H_CONTAINER_ID), n);
        r.u64_at(H_MAGIC).store(MAGIC, SeqCst);
    }

    unsafe fn validate(base: *mut u8, shared: bool) -> Result<Region, OpenError> {
        let r = Region {
            base,
            nslots: 0,
            ndev: 0,
            shared,
        };
        if r.u64_at(H_MAGIC).load(Acquire) != MAGIC
            || r.u32_at(H_VERSION).load(Relaxed) != VERSION
            || r.u32_at(H_HEADER_SIZE).load(Relaxed) as usize != HEADER_SIZE
            || r.u32_at(H_SLOT_SIZE).load(Relaxed) as usize != SLOT_SIZE
            || r.u32_at(H_SLOT_USED_OFFSET).load(Relaxed) as usize != SLOT_USED_OFFSET
            || r.u64_at(H_SLOTS_OFFSET).load(Relaxed) as usize != HEADER_SIZE
        {
            return Err(OpenError::Incompatible);
        }
        let nslots = r.u32_at(H_SLOT_COUNT).load(Relaxed) as usize;
        let ndev = r.u32_at(H_DEV_COUNT).load(Relaxed) as usize;
        if nslots != SLOT_COUNT || ndev != DEV_COUNT {
            return Err(OpenError::Incompatible);
        }
        Ok(Region {
            base,
            nslots,
            ndev,
            shared,
        })
    }

    /// A private region (per-process budget).
    pub fn anonymous(init: &HeaderInit) -> Option<Region> {
        unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                TOTAL_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            Self::write_header(p as *mut u8, init);
            Self::validate(p as *mut u8, false).ok()
        }
    }

    /// Open (and if empty, initialise under flock) a shared usage file.
    pub fn open_file(
        path: &core::ffi::CStr,
        create: bool,
        init: &HeaderInit,
    ) -> Result<Region, OpenError> {
        unsafe {
            let mut flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            if create {
                flags |= libc::O_CREAT;
            }
            let fd = libc::open(path.as_ptr(), flags, 0o666 as libc::c_uint);
            if fd < 0 {
                return Err(OpenError::Open);
            }
            let res = Self::open_fd(fd, create, init);
            // in a file shared by consumer groups (a DRA claim's), kept
            // open for the slots' liveness locks (`lock_slot`): a process of
            // another group sees the lock go when this process is gone
            if res.is_err() || my_group() == 0 || !set_live_fd(fd) {
                libc::close(fd);
            }
            res
        }
    }

    unsafe fn open_fd(fd: i32, created: bool, init: &HeaderInit) -> Result<Region, OpenError> {
        if created {
            // best effort: the file is shared among users of one container
            libc::fchmod(fd, 0o666);
        }
        let map = |fd: i32| {
            let p = libc::mmap(
                core::ptr::null_mut(),
                TOTAL_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                None
            } else {
                Some(p as *mut u8)
            }
        };
        // Only two sizes are ours: 0 (the hook's empty file, initialised
        // below) and TOTAL_SIZE. Anything else is foreign and never grown,
        // shrunk or written (the file may sit on a size-limited tmpfs).
        let size = libc::lseek(fd, 0, libc::SEEK_END);
        if size != 0 && size != TOTAL_SIZE as i64 {
            return Err(OpenError::Incompatible);
        }
        if size == TOTAL_SIZE as i64 {
            let p = map(fd).ok_or(OpenError::Map)?;
            let magic = (*(p as *const AtomicU64)).load(Acquire);
            if magic == MAGIC {
                return match Self::validate(p, true) {
                    Ok(r) => Ok(r),
                    Err(e) => {
                        libc::munmap(p as *mut _, TOTAL_SIZE);
                        Err(e)
                    }
                };
            }
            libc::munmap(p as *mut _, TOTAL_SIZE);
            if magic != 0 {
                return Err(OpenError::Incompatible);
            }
        }
        // Not (yet) initialised: take the lock, look again, initialise.
        while libc::flock(fd, libc::LOCK_EX) != 0 {
            if crate::sys::errno() != libc::EINTR {
                return Err(OpenError::Open);
            }
        }
        let res = (|| {
            let size = libc::lseek(fd, 0, libc::SEEK_END);
            if size != 0 && size != TOTAL_SIZE as i64 {
                return Err(OpenError::Incompatible);
            }
            if size == 0 && libc::ftruncate(fd, TOTAL_SIZE as i64) != 0 {
                return Err(OpenError::Map);
            }
            let p = map(fd).ok_or(OpenError::Map)?;
            let magic = (*(p as *const AtomicU64)).load(Acquire);
            if magic == 0 {
                Self::write_header(p, init);
            }
            match Self::validate(p, true) {
                Ok(r) => Ok(r),
                Err(e) => {
                    libc::munmap(p as *mut _, TOTAL_SIZE);
                    Err(e)
                }
            }
        })();
        libc::flock(fd, libc::LOCK_UN);
        res
    }

    /// Rebuild a handle to a region validated earlier in this process.
    pub unsafe fn from_validated(base: *mut u8, shared: bool) -> Region {
        Region {
            base,
            nslots: SLOT_COUNT,
            ndev: DEV_COUNT,
            shared,
        }
    }

    pub unsafe fn unmap(&self) {
        libc::munmap(self.base as *mut _, TOTAL_SIZE);
    }

    pub fn high_water(&self) -> usize {
        core::cmp::min(self.u32_at(H_HIGH_WATER).load(SeqCst) as usize, self.nslots)
    }

    pub fn limit(&self, dev: usize) -> u64 {
        self.u64_at(H_LIMIT + 8 * dev).load(Relaxed)
    }
    /// Keep the header's limit of a device, a display copy for host
    /// readers (written only when it differs; never read for admission:
    /// any process of the container can write this file).
    pub fn show_limit(&self, dev: usize, v: u64) {
        if dev < self.ndev {
            let cell = self.u64_at(H_LIMIT + 8 * dev);
            if cell.load(Relaxed) != v {
                cell.store(v, Relaxed);
            }
        }
    }
    /// The UUID at a device index of the header's table (None: empty).
    pub fn uuid_at(&self, dev: usize) -> Option<[u8; 16]> {
        if dev >= self.ndev || self.u32_at(H_UUID_STATE + 4 * dev).load(Acquire) != UUID_VALID {
            return None;
        }
        let mut u = [0u8; 16];
        unsafe {
            core::ptr::copy_nonoverlapping(self.base.add(H_UUID + 16 * dev), u.as_mut_ptr(), 16)
        };
        Some(u)
    }
    pub fn flags(&self) -> u32 {
        self.u32_at(H_FLAGS).load(Relaxed)
    }
    /// An allocation within the guarantee waits for `n` bytes on `dev`
    /// since `since_ms` (0 bytes: it no longer waits).
    pub fn set_reclaim_want(&self, dev: usize, n: u64, since_ms: u64) {
        if dev < self.ndev {
            self.u64_at(H_RECLAIM_SINCE + 8 * dev)
                .store(since_ms, Relaxed);
            self.u64_at(H_RECLAIM_WANT + 8 * dev).store(n, Release);
        }
    }
    /// A wait for a reclaim ended with the memory after `ms`.
    pub fn count_reclaim_wait(&self, ms: u64) {
        self.u64_at(H_RECLAIM_WAITS).fetch_add(1, Relaxed);
        self.u64_at(H_RECLAIM_LAST).store(ms, Relaxed);
    }
    pub fn reclaim_want(&self, dev: usize) -> u64 {
        if dev < self.ndev {
            self.u64_at(H_RECLAIM_WANT + 8 * dev).load(Acquire)
        } else {
            0
        }
    }
    pub fn count_refusal(&self) {
        self.u64_at(H_REFUSALS).fetch_add(1, Relaxed);
    }
    pub fn refusals(&self) -> u64 {
        self.u64_at(H_REFUSALS).load(Relaxed)
    }

    /// Claim a free slot for (pid, start_time). Dead slots are reclaimed
    /// first. None when all slots hold live processes.
    pub fn claim_slot(
        &self,
        pid: i32,
        start_time: u64,
        alive: &dyn Fn(u64) -> bool,
    ) -> Option<usize> {
        self.reclaim_dead(usize::MAX, alive);
        let word = owner_word(pid, start_time);
        // A slot that already carries this exact (pid, start time) belongs
        // to an earlier image of this very process (it exec'd: same pid,
        // same start time, fresh library state). That image is gone.
        self.reclaim_word(word);
        for s in 0..self.nslots {
            let o = self.owner(s);
            if o.load(Relaxed) != OWNER_FREE {
                continue;
            }
            // held as "being reclaimed" (skipped by every reader) until
            // pid, start time and group are written: a process of another
            // group must never judge this slot by its pid
            if o.compare_exchange(OWNER_FREE, OWNER_RECLAIMING, SeqCst, Relaxed)
                .is_ok()
            {
                let off = self.slot_off(s);
                // locked before the owner word is published: no other
                // group ever sees this slot owned and unlocked; no lock, no
                // slot (another group would reclaim it as dead)
                if !lock_slot(off) {
                    o.store(OWNER_FREE, SeqCst);
                    return None;
                }
                self.u64_at(off + S_START_TIME).store(start_time, Relaxed);
                self.u64_at(off + S_PID).store(pid as u32 as u64, Relaxed);
                self.u64_at(off + S_GROUP).store(my_group(), SeqCst);
                // not a compute share's client until its own cuInit (an
                // earlier image of the same pid left its word here)
                self.mps_client(s).store(0, SeqCst);
                for d in 0..self.ndev {
                    // a reclaimed slot is zero already; be defensive
                    self.used_cell(s, d).store(0, SeqCst);
                }
                o.store(word, SeqCst);
                self.u32_at(H_HIGH_WATER).fetch_max((s + 1) as u32, SeqCst);
                return Some(s);
            }
        }
        None
    }

    /// Whether slot `s` belongs to this process's consumer group (only
    /// those are judged by pid here).
    fn ours(&self, s: usize) -> bool {
        self.u64_at(self.slot_off(s) + S_GROUP).load(SeqCst) == my_group()
    }

    /// Whether the owner of slot `s` is alive: by pid in this process's
    /// own group, by the slot's lock in another's (its pids are another
    /// namespace's). Without a file to lock (an anonymous region, an old
    /// file) a slot of another group is alive: never reclaimed here.
    fn owner_alive_at(&self, s: usize, w: u64, alive: &dyn Fn(u64) -> bool) -> bool {
        if self.ours(s) {
            return alive(w);
        }
        slot_locked(self.slot_off(s)).unwrap_or(true)
    }

    /// The owner word of slot `s` while a live process holds it (of this
    /// process's group, by pid; of another, by its lock); `None` for a
    /// free slot, one being claimed or reclaimed, and a dead owner's.
    pub fn live_owner(&self, s: usize, alive: &dyn Fn(u64) -> bool) -> Option<u64> {
        let w = self.owner(s).load(SeqCst);
        if w == OWNER_FREE || w == OWNER_RECLAIMING || !self.owner_alive_at(s, w, alive) {
            return None;
        }
        Some(w)
    }

    /// Give a slot back (process exit of a known owner; tests).
    pub fn free_slot(&self, slot: usize) {
        for d in 0..self.ndev {
            self.used_cell(slot, d).store(0, SeqCst);
        }
        self.owner(slot).store(OWNER_FREE, SeqCst);
    }

    /// Reclaim every slot whose owner is dead (per `alive`). Returns the
    /// number reclaimed.
    pub fn reclaim_dead(&self, my_slot: usize, alive: &dyn Fn(u64) -> bool) -> usize {
        let mut n = 0;
        for s in 0..self.high_water() {
            if s == my_slot {
                continue;
            }
            let o = self.owner(s);
            let w = o.load(SeqCst);
            if w == OWNER_FREE || w == OWNER_RECLAIMING {
                continue;
            }
            if self.owner_alive_at(s, w, alive) {
                continue;
            }
            if o.compare_exchange(w, OWNER_RECLAIMING, SeqCst, Relaxed)
                .is_ok()
            {
                for d in 0..self.ndev {
                    self.used_cell(s, d).store(0, SeqCst);
                }
                o.store(OWNER_FREE, SeqCst);
                n += 1;
            }
        }
        n
    }

    /// Free every slot owned by exactly `word` (an earlier image of the
    /// calling process). Returns the number freed.
    pub fn reclaim_word(&self, word: u64) -> usize {
        let mut n = 0;
        for s in 0..self.high_water() {
            let o = self.owner(s);
            if o.load(SeqCst) != word || !self.ours(s) {
                continue;
            }
            if o.compare_exchange(word, OWNER_RECLAIMING, SeqCst, Relaxed)
                .is_ok()
            {
                for d in 0..self.ndev {
                    self.used_cell(s, d).store(0, SeqCst);
                }
                o.store(OWNER_FREE, SeqCst);
                n += 1;
            }
        }
        n
    }

    /// Sum of all slots' usage of `dev` (the container's usage).
    #[inline]
    pub fn used(&self, dev: usize) -> u64 {
        let hw = self.high_water();
        let mut sum: u64 = 0;
        for s in 0..hw {
            sum = sum.saturating_add(self.used_cell(s, dev).load(SeqCst));
        }
        sum
    }

    /// Atomic reservation: Ok(()) when n fits under `limit` (including n),
    /// Err(used by others) otherwise (nothing stays reserved).
    #[inline]
    pub fn try_admit(&self, slot: usize, dev: usize, n: u64, limit: u64) -> Result<(), u64> {
        let cell = self.used_cell(slot, dev);
        cell.fetch_add(n, SeqCst);
        let total = self.used(dev);
        if total > limit || total < n {
            cell.fetch_sub(n, SeqCst);
            return Err(total.saturating_sub(n));
        }
        Ok(())
    }

    #[inline]
    pub fn release(&self, slot: usize, dev: usize, n: u64) {
        let cell = self.used_cell(slot, dev);
        // never wrap below zero (defensive: mismatched bookkeeping)
        let mut cur = cell.load(Relaxed);
        loop {
            let new = cur.saturating_sub(n);
            match cell.compare_exchange_weak(cur, new, SeqCst, Relaxed) {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }

    #[inline]
    pub fn charge(&self, slot: usize, dev: usize, n: u64) {
        self.used_cell(slot, dev).fetch_add(n, SeqCst);
    }

    /// Index of a device UUID in the header table; inserted (in order) when
    /// absent and `insert`. None when the table is full or a writer stalls.
    pub fn uuid_index(&self, uuid: &[u8; 16], insert: bool) -> Option<usize> {
        for i in 0..self.ndev {
            let st = self.u32_at(H_UUID_STATE + 4 * i);
            let mut spins = 0u32;
            loop {
                match st.load(Acquire) {
                    UUID_VALID => {
                        let mut cur = [0u8; 16];
                        unsafe {
                            core::ptr::copy_nonoverlapping(
                                self.base.add(H_UUID + 16 * i),
                                cur.as_mut_ptr(),
                                16,
                            )
                        };
                        if &cur == uuid {
                            return Some(i);
                        }
                        break;
                    }
                    UUID_EMPTY => {
                        if !insert {
                            return None;
                        }
                        if st
                            .compare_exchange(UUID_EMPTY, UUID_WRITING, SeqCst, Relaxed)
                            .is_ok()
                        {
                            unsafe {
                                core::ptr::copy_nonoverlapping(
                                    uuid.as_ptr(),
                                    self.base.add(H_UUID + 16 * i),
                                    16,
                                )
                            };
                            st.store(UUID_VALID, Release);
                            return Some(i);
                        }
                    }
                    _ => {
                        spins += 1;
                        if spins > 100_000 {
                            return None;
                        }
                        unsafe { libc::sched_yield() };
                    }
                }
            }
        }
        None
    }
}

/// Liveness of a slot owner: kill(pid,0) != ESRCH and, when both are known,
/// the process start time (low 32 bits) still matches (pid reuse).
pub fn owner_alive(word: u64) -> bool {
    let pid = (word & 0xffff_ffff) as i32;
    if pid <= 0 {
        return true;
    }
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && crate::sys::errno() == libc::ESRCH {
        return false;
    }
    // A zombie (or a dying process) holds no device memory any more: it is
    // dead, whoever reaps it. Pid reuse: the start time differs.
    let (state, st) = crate::sys::proc_state_start(pid);
    if state == b'Z' || state == b'X' || state == b'x' {
        return false;
    }
    let want = word >> 32;
    if want != 0 && st != 0 && (st & 0xffff_ffff) != want {
        return false;
    }
    true
}

#[cfg(test)]
mod tests;
