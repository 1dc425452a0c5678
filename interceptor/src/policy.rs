//! Admission and charging over the usage region: the policy, with nothing
//! of the process around it. A [`Budget`] is one process's view of the
//! container's budget (the region, its own slot); what it needs from the
//! process (the slice of a device, reserves that may give memory back,
//! whether a slot's owner lives, the refusal line) it asks through
//! [`Host`]. Bookkeeping (pools, graph memory, contexts, VMM) charges
//! through [`Books`], which the process's glue (the account module) and the
//! unit tests both implement, so the same rules run in both.
//!
//! Admission is the region's lock-free reservation (add, sum, undo when
//! over); before refusing, the reserves that follow the driver are asked
//! to give back what they no longer hold and dead processes' slots are
//! reclaimed, then it is tried once more.

use crate::region::Region;

/// A device index outside the region's table: not accounted.
pub const UNTRACKED: usize = usize::MAX;

/// A device as the driver names it (CUDA ordinal) and as the region does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dev {
    pub ordinal: i32,
    pub idx: usize,
}

/// What admission asks of the process around it.
pub trait Host {
    /// The slice of a device in bytes; None: this device is not enforced
    /// here (the call passes through uncharged).
    fn limit(&self, dev: Dev) -> Option<u64>;
    /// Reserves that follow the driver (pools, graph memory) look again;
    /// true when a charge went down.
    fn give_back(&self, idx: usize) -> bool;
    /// Is the owner of a slot (its owner word) alive?
    fn alive(&self, owner: u64) -> bool;
    /// Say that `n` bytes were refused (the one line).
    fn refused(&self, api: &[u8], n: u64, limit: u64, dev: Dev, used: u64);
    /// A burstable slice's limit on a device, above its guarantee
    /// ([`Host::limit`]); None: a guaranteed slice.
    fn burst_limit(&self, _dev: Dev) -> Option<u64> {
        None
    }
}

/// Where an admitted allocation's bytes sit in the slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The container's whole use stays within its guarantee: ordinary
    /// device memory, always there for it.
    Guaranteed,
    /// Past the guarantee, within the limit: lent, so it must be memory the
    /// driver can take back (managed).
    Burst,
}

/// An allocation was refused (the one line was printed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused;

/// Bytes reserved on a device, to keep or give back.
#[derive(Clone, Copy)]
pub struct Charge {
    pub slot: usize,
    pub dev: Dev,
    pub n: u64,
    region: Region,
}

impl Charge {
    /// The call it paid for failed: give it back.
    pub fn rollback(self) {
        self.region.release(self.slot, self.dev.idx, self.n);
    }
    /// Give back `less` of it (the driver took less than estimated).
    pub fn shrink(&mut self, less: u64) {
        let less = less.min(self.n);
        self.region.release(self.slot, self.dev.idx, less);
        self.n -= less;
    }
}

/// What bookkeeping charges through.
pub trait Books {
    /// Reserve n bytes. Ok(None): not enforced (pass through, untracked);
    /// Ok(Some): reserved; Err: refused (the line was printed).
    fn admit(&self, api: &[u8], dev: Dev, n: u64) -> Result<Option<Charge>, Refused>;
    /// Does n more bytes fit next to `pending` bytes asked but not charged
    /// (a capture's memory nodes)? Nothing is reserved.
    fn fits_after(&self, api: &[u8], dev: Dev, n: u64, pending: u64) -> bool;
    /// Charge without a check: memory the driver holds already.
    fn charge(&self, idx: usize, n: u64);
    /// Give bytes back.
    fn release(&self, idx: usize, n: u64);
}

/// One process's view of the container's budget.
pub struct Budget<'h, H: Host + ?Sized> {
    pub region: Region,
    pub slot: usize,
    pub host: &'h H,
}

impl<H: Host + ?Sized> Budget<'_, H> {
    fn tracked(&self, idx: usize) -> bool {
        idx < self.region.ndev()
    }

    /// Grow a charge by `extra` (the driver took more than estimated): Ok,
    /// or Err with nothing changed (the line was printed).
    pub fn grow(&self, api: &[u8], c: &mut Charge, extra: u64) -> Result<(), Refused> {
        let Some(limit) = self.host.limit(c.dev) else {
            return Ok(());
        };
        match self.region.try_admit(c.slot, c.dev.idx, extra, limit) {
            Ok(()) => {
                c.n += extra;
                Ok(())
            }
            Err(used) => {
                self.region.count_refusal();
                self.host.refused(api, extra, limit, c.dev, used);
                Err(Refused)
            }
        }
    }

    #[cold]
    fn admit_slow(
        &self,
        api: &[u8],
        dev: Dev,
        n: u64,
        limit: u64,
    ) -> Result<Option<Charge>, Refused> {
        let freed = self.host.give_back(dev.idx);
        let alive = |w| self.host.alive(w);
        if (self.region.reclaim_dead(self.slot, &alive) > 0 || freed)
            && self.region.try_admit(self.slot, dev.idx, n, limit).is_ok()
        {
            return Ok(Some(self.charge_of(dev, n)));
        }
        self.region.count_refusal();
        self.host
            .refused(api, n, limit, dev, self.region.used(dev.idx));
        Err(Refused)
    }

    fn charge_of(&self, dev: Dev, n: u64) -> Charge {
        Charge {
            slot: self.slot,
            dev,
            n,
            region: self.region,
        }
    }
}

impl<H: Host + ?Sized> Budget<'_, H> {
    /// Admit `n` bytes that may be lent: within the guarantee when the
    /// container's whole use with them stays within it, else as a burst
    /// up to the limit. Looking at the whole use (not at ordinary bytes
    /// alone) keeps ordinary memory within the guarantee with no counter
    /// of its own: it is only added while the whole use fits there.
    pub fn admit_tiered(
        &self,
        api: &[u8],
        dev: Dev,
        n: u64,
    ) -> Result<Option<(Charge, Tier)>, Refused> {
        if !self.tracked(dev.idx) {
            return Ok(None);
        }
        let Some(limit) = self.host.limit(dev) else {
            return Ok(None);
        };
        let Some(burst) = self.host.burst_limit(dev).filter(|b| *b > limit) else {
            return Ok(self.admit(api, dev, n)?.map(|c| (c, Tier::Guaranteed)));
        };
        if self.region.try_admit(self.slot, dev.idx, n, limit).is_ok() {
            return Ok(Some((self.charge_of(dev, n), Tier::Guaranteed)));
        }
        match self.region.try_admit(self.slot, dev.idx, n, burst) {
            Ok(()) => Ok(Some((self.charge_of(dev, n), Tier::Burst))),
            Err(_) => Ok(self
                .admit_slow(api, dev, n, burst)?
                .map(|c| (c, Tier::Burst))),
        }
    }
}

impl<H: Host + ?Sized> Books for Budget<'_, H> {
    #[inline]
    fn admit(&self, api: &[u8], dev: Dev, n: u64) -> Result<Option<Charge>, Refused> {
        if !self.tracked(dev.idx) {
            return Ok(None);
        }
        let Some(limit) = self.host.limit(dev) else {
            return Ok(None);
        };
        match self.region.try_admit(self.slot, dev.idx, n, limit) {
            Ok(()) => Ok(Some(self.charge_of(dev, n))),
            Err(_) => self.admit_slow(api, dev, n, limit),
        }
    }

    fn fits_after(&self, api: &[u8], dev: Dev, n: u64, pending: u64) -> bool {
        if !self.tracked(dev.idx) {
            return true;
        }
        let Some(limit) = self.host.limit(dev) else {
            return true;
        };
        let fits = || {
            let used = self.region.used(dev.idx).saturating_add(pending);
            (used.saturating_add(n) <= limit, used)
        };
        if fits().0 {
            return true;
        }
        self.region.reclaim_dead(self.slot, &|w| self.host.alive(w));
        let (ok, used) = fits();
        if ok {
            return true;
        }
        self.region.count_refusal();
        self.host.refused(api, n, limit, dev, used);
        false
    }

    fn charge(&self, idx: usize, n: u64) {
        if n != 0 && self.tracked(idx) {
            self.region.charge(self.slot, idx, n);
        }
    }

    fn release(&self, idx: usize, n: u64) {
        if n != 0 && self.tracked(idx) {
            self.region.release(self.slot, idx, n);
        }
    }
}

/// Test doubles shared by the unit tests of the policy and the bookkeeping.
#[cfg(test)]
pub mod testing {
    use super::*;
    use crate::region::HeaderInit;
    use std::cell::{Cell, RefCell};

    /// A host with fixed slices, a give-back hook and a record of refusals.
    pub struct TestHost {
        pub limits: RefCell<Vec<Option<u64>>>,
        pub refusals: RefCell<Vec<(Vec<u8>, u64, u64)>>,
        pub give_back: RefCell<Box<dyn Fn(usize) -> bool>>,
        pub gave_back: Cell<u32>,
        pub dead: Cell<u64>,
        pub burst: Cell<Option<u64>>,
    }

    impl TestHost {
        pub fn new(limits: &[Option<u64>]) -> Self {
            TestHost {
                limits: RefCell::new(limits.to_vec()),
                refusals: RefCell::new(Vec::new()),
                give_back: RefCell::new(Box::new(|_| false)),
                gave_back: Cell::new(0),
                dead: Cell::new(0),
                burst: Cell::new(None),
            }
        }
    }

    impl Host for TestHost {
        fn limit(&self, dev: Dev) -> Option<u64> {
            self.limits.borrow().get(dev.idx).copied().flatten()
        }
        fn give_back(&self, idx: usize) -> bool {
            self.gave_back.set(self.gave_back.get() + 1);
            (self.give_back.borrow())(idx)
        }
        fn alive(&self, owner: u64) -> bool {
            owner != self.dead.get()
        }
        fn refused(&self, api: &[u8], n: u64, limit: u64, _dev: Dev, used: u64) {
            let _ = limit;
            self.refusals.borrow_mut().push((api.to_vec(), n, used));
        }
        fn burst_limit(&self, _dev: Dev) -> Option<u64> {
            self.burst.get()
        }
    }

    /// A private region with one slot claimed (owner word of pid 1).
    pub fn region() -> (Region, usize) {
        let r = Region::anonymous(&HeaderInit {
            flags: 0,
            limit: 0,
            ctx_overhead: 0,
            container_id: b"t",
            uuids: &[],
        })
        .unwrap();
        let s = r.claim_slot(1, 0, &|_| true).unwrap();
        (r, s)
    }

    pub fn dev(idx: usize) -> Dev {
        Dev {
            ordinal: idx as i32,
            idx,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    const M: u64 = 1 << 20;

    /// Charging: what fits is reserved, what does not is refused with one
    /// line naming the bytes and what is in use; a rollback gives it back.
    /// (Seeded mutation: `total > limit` as `total >= limit` in
    /// Region::try_admit refuses the exact fit.)
    #[test]
    fn admit_reserves_up_to_the_slice_and_refuses_beyond() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let a = b.admit(b"x", dev(0), 40 * M).unwrap().unwrap();
        assert_eq!(r.used(0), 40 * M);
        assert!(b.admit(b"cuMemAlloc", dev(0), 32 * M).is_err());
        assert_eq!(r.used(0), 40 * M, "a refusal leaves nothing reserved");
        assert_eq!(
            *h.refusals.borrow(),
            [(b"cuMemAlloc".to_vec(), 32 * M, 40 * M)]
        );
        assert_eq!(r.refusals(), 1);
        let c = b.admit(b"x", dev(0), 24 * M).unwrap().unwrap();
        assert_eq!(r.used(0), 64 * M, "the exact fit is admitted");
        a.rollback();
        c.rollback();
        assert_eq!(r.used(0), 0);
    }

    /// Every device has its own slice; an unenforced device passes
    /// through uncharged. (Mutation: admitting against limit of device 0
    /// for every device fails the second assertion.)
    #[test]
    fn each_device_is_admitted_against_its_own_slice() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M), Some(16 * M), None]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        assert!(b.admit(b"x", dev(0), 48 * M).unwrap().is_some());
        assert!(b.admit(b"x", dev(1), 48 * M).is_err());
        assert!(b.admit(b"x", dev(1), 16 * M).unwrap().is_some());
        assert!(b.admit(b"x", dev(2), 1 << 40).unwrap().is_none());
        assert_eq!(r.used(2), 0);
        assert!(b.admit(b"x", dev(UNTRACKED), 1).unwrap().is_none());
    }

    /// A refusal first asks the reserves to give back and reclaims dead
    /// slots, then tries again. (Mutation: dropping the retry in
    /// admit_slow refuses both.)
    #[test]
    fn refusal_gives_back_and_reclaims_first() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M)]);
        // another process, which then dies, holds 40 MiB
        let other = r.claim_slot(2, 0, &|_| true).unwrap();
        r.charge(other, 0, 40 * M);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        h.dead.set(crate::region::owner_word(2, 0));
        assert!(b.admit(b"x", dev(0), 60 * M).unwrap().is_some());
        assert_eq!(r.used(0), 60 * M);
        // our own reserve (a pool) gives back 30 MiB when asked
        h.dead.set(0);
        let (r2, s2) = (r, s);
        *h.give_back.borrow_mut() = Box::new(move |_| {
            r2.release(s2, 0, 30 * M);
            true
        });
        assert!(b.admit(b"x", dev(0), 20 * M).unwrap().is_some());
        assert_eq!(h.gave_back.get(), 2);
        assert!(h.refusals.borrow().is_empty());
    }

    /// grow takes more only when it fits; shrink and release give back
    /// and never go below zero. (Mutation: `c.n += extra` dropped: the
    /// rollback would leave 8 MiB charged.)
    #[test]
    fn grow_shrink_release() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let mut c = b.admit(b"x", dev(0), 32 * M).unwrap().unwrap();
        b.grow(b"x", &mut c, 8 * M).unwrap();
        assert!(b.grow(b"pitch", &mut c, 32 * M).is_err());
        assert_eq!(r.used(0), 40 * M);
        c.shrink(4 * M);
        assert_eq!(r.used(0), 36 * M);
        c.rollback();
        assert_eq!(r.used(0), 0);
        b.charge(0, 5 * M);
        b.release(0, 9 * M);
        assert_eq!(r.used(0), 0);
    }

    /// A burstable slice: what keeps the whole use within the guarantee is
    /// guaranteed, what goes past it is a burst up to the limit, and past
    /// the limit is refused with the limit in the line; other paths
    /// (`admit`) stay within the guarantee. (Mutation: comparing the
    /// allocation alone with the guarantee, not the whole use, makes the
    /// second 8 MiB guaranteed.)
    #[test]
    fn a_burst_is_what_goes_past_the_guarantee() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(16 * M)]);
        h.burst.set(Some(64 * M));
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        let (_, t) = b.admit_tiered(b"x", dev(0), 12 * M).unwrap().unwrap();
        assert_eq!(t, Tier::Guaranteed);
        let (_, t) = b.admit_tiered(b"x", dev(0), 8 * M).unwrap().unwrap();
        assert_eq!(t, Tier::Burst, "12 + 8 > 16");
        assert!(
            b.admit(b"vmm", dev(0), 2 * M).is_err(),
            "not evictable: guarantee only"
        );
        let (_, t) = b.admit_tiered(b"x", dev(0), 44 * M).unwrap().unwrap();
        assert_eq!((t, r.used(0)), (Tier::Burst, 64 * M));
        assert!(b.admit_tiered(b"cuMemAlloc", dev(0), 1).is_err());
        assert_eq!(h.refusals.borrow().len(), 2);
        // a guaranteed slice never bursts
        h.burst.set(None);
        assert!(b.admit_tiered(b"x", dev(0), 1).is_err());
    }

    /// fits_after counts the bytes already asked but not charged.
    /// (Mutation: ignoring `pending` admits the second node.)
    #[test]
    fn fits_after_counts_pending() {
        let (r, s) = region();
        let h = TestHost::new(&[Some(64 * M)]);
        let b = Budget {
            region: r,
            slot: s,
            host: &h,
        };
        b.charge(0, 16 * M);
        assert!(b.fits_after(b"node", dev(0), 32 * M, 0));
        assert!(!b.fits_after(b"node", dev(0), 32 * M, 32 * M));
        assert_eq!(h.refusals.borrow()[0], (b"node".to_vec(), 32 * M, 48 * M));
        assert_eq!(r.used(0), 16 * M, "nothing reserved by a check");
    }
}
