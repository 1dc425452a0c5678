//! This process's books: the policy (crate::policy) over the process's
//! configuration, region and slot. [`Proc`] answers the policy's questions
//! (a device's slice, reserves that may give back, slot liveness, the
//! refusal line) from process state; [`ACCT`] is what bookkeeping and the
//! entry points charge through.

use crate::config::{Size, MAX_GPUS};
use crate::devices;
use crate::hooks;
use crate::policy::{Books, Budget, Charge, Dev, Host, Refused, Tier, UNTRACKED};
use crate::ptrtable::Rec;
use crate::region::{self, Region};
use crate::state::{self, config, Config};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};

/// per region device: resolved limit (percent mode); 0 unknown
static LIMIT_CACHE: [AtomicU64; MAX_GPUS] = [const { AtomicU64::new(0) }; MAX_GPUS];
/// per region device: its entry in the grant (NO_ENTRY: the grant lacks
/// it; UNKNOWN: not looked up yet)
static GRANT_ENTRY: [AtomicU8; MAX_GPUS] = [const { AtomicU8::new(UNKNOWN) }; MAX_GPUS];
const UNKNOWN: u8 = 0xff;
const NO_ENTRY: u8 = 0xfe;

/// Per-device slice in bytes for region device `dev`: a container's live
/// grant entry of that GPU (one atomic load) lowered by GPU_QUOTA_VRAM,
/// the standalone size, or its percentage of `real_total` (asked only
/// then). The usage header's limit is never read here.
#[inline]
pub fn limit_for(c: &Config, dev: usize, real_total: &dyn Fn() -> Option<u64>) -> u64 {
    if crate::foreign::is_foreign(dev) {
        return 0;
    }
    if c.from_grant() {
        let Some(g) = c.grant.as_ref() else {
            return 0; // no valid grant: fail closed
        };
        let e = match GRANT_ENTRY.get(dev).map(|x| x.load(Relaxed)) {
            Some(NO_ENTRY) | None => return 0,
            Some(UNKNOWN) => grant_entry(g, dev),
            Some(e) => e as usize,
        };
        return if e == NO_ENTRY as usize {
            0
        } else {
            g.vram(e).min(c.cap)
        };
    }
    match c.limit {
        Size::Bytes(b) => b,
        Size::Ppm(_) => {
            let v = LIMIT_CACHE[dev].load(Relaxed);
            if v != 0 {
                return v;
            }
            match real_total() {
                Some(t) => {
                    let b = c.limit.resolve(t);
                    LIMIT_CACHE[dev].store(b, Relaxed);
                    if let Some(r) = state::region() {
                        r.show_limit(dev, b);
                    }
                    b
                }
                None => 0,
            }
        }
    }
}

/// The grant entry of region device `dev` in a container's grant (None:
/// standalone, no grant, or a GPU the grant lacks).
fn entry_for(c: &Config, dev: usize) -> Option<(&crate::livegrant::LiveGrant, usize)> {
    if !c.from_grant() || crate::foreign::is_foreign(dev) {
        return None;
    }
    let g = c.grant.as_ref()?;
    let e = match GRANT_ENTRY.get(dev).map(|x| x.load(Relaxed)) {
        Some(NO_ENTRY) | None => return None,
        Some(UNKNOWN) => grant_entry(g, dev),
        Some(e) => e as usize,
    };
    (e != NO_ENTRY as usize).then_some((g, e))
}

/// A burstable slice's limit on region device `dev` (None: guaranteed).
/// GPU_QUOTA_VRAM lowers it as it lowers the guarantee.
#[inline]
pub fn burst_limit_for(c: &Config, dev: usize) -> Option<u64> {
    let (g, e) = entry_for(c, dev)?;
    g.burst_limit(e).map(|l| l.min(c.cap))
}

/// How long an allocation within the guarantee on region device `dev` may
/// wait for bursters to give memory back (ms; 0: not at all).
pub fn reclaim_wait_ms(dev: usize) -> u64 {
    match config().and_then(|c| entry_for(c, dev)) {
        Some((g, e)) => g.reclaim_wait_ms(e),
        None => 0,
    }
}

/// What a memory query shows for region device `idx` (None: standalone or
/// an index outside the region) with `slice` its guarantee and `used` the
/// container's use: (total, free). The total is the limit of a burstable
/// slice, else the slice. Room within a guarantee is shown whole where
/// bursters may hold it (it is taken back from them for this container);
/// room above a guarantee only as far as the GPU really has it free, since
/// only that is lent.
pub fn shown(idx: usize, slice: u64, used: u64, real_total: u64, real_free: u64) -> (u64, u64) {
    let room = slice.saturating_sub(used);
    let burst = config()
        .and_then(|c| burst_limit_for(c, idx))
        .filter(|b| *b > slice);
    match burst {
        Some(b) => {
            let total = b.min(real_total);
            let lent = total.saturating_sub(used).min(real_free);
            (total, room.max(lent).min(total))
        }
        None if reclaim_wait_ms(idx) > 0 => {
            let total = slice.min(real_total);
            (total, room.min(total))
        }
        None => {
            let total = slice.min(real_total);
            (total, room.min(real_free))
        }
    }
}

/// Whether this container holds a burstable slice anywhere (its
/// cuMemAlloc takes the tiered path).
#[inline]
pub fn bursts() -> bool {
    match config() {
        Some(c) => c.enforce && c.grant.as_ref().is_some_and(|g| g.bursts()),
        None => false,
    }
}

/// The grant entry of region device `dev`, by the UUID the region's table
/// holds there (cached once the table has one).
#[cold]
fn grant_entry(g: &crate::livegrant::LiveGrant, dev: usize) -> usize {
    let Some(uuid) = state::region().and_then(|r| r.uuid_at(dev)) else {
        return NO_ENTRY as usize; // not known yet: nothing, asked again next time
    };
    let e = g.entry_of(&uuid).map_or(NO_ENTRY, |e| e as u8);
    GRANT_ENTRY[dev].store(e, Relaxed);
    e as usize
}

/// Refresh the usage header's display copy of a device's limit (memory
/// queries and refusals: host readers see the live slice).
pub fn show_limit(idx: usize, limit: u64) {
    if let Some(r) = state::region() {
        r.show_limit(idx, limit);
    }
}

/// The process as the policy's host.
pub struct Proc;

impl Host for Proc {
    #[inline]
    fn limit(&self, dev: Dev) -> Option<u64> {
        let c = config()?;
        if !c.enforce || dev.idx >= MAX_GPUS {
            return None;
        }
        let ord = dev.ordinal;
        let limit = limit_for(c, dev.idx, &|| devices::real_total(ord));
        if limit == 0
            && !c.from_grant()
            && matches!(c.limit, Size::Ppm(_))
            && !crate::foreign::is_foreign(dev.idx)
        {
            return None; // percent of an unknown total: cannot enforce
        }
        Some(limit)
    }
    fn give_back(&self, idx: usize) -> bool {
        hooks::GIVE_BACK.run(idx)
    }
    fn alive(&self, owner: u64) -> bool {
        region::owner_alive(owner)
    }
    fn refused(&self, api: &[u8], n: u64, limit: u64, dev: Dev, used: u64) {
        refused_on(api, n, limit, dev, used);
    }
    fn burst_limit(&self, dev: Dev) -> Option<u64> {
        let c = config()?;
        if !c.enforce || dev.idx >= MAX_GPUS {
            return None;
        }
        burst_limit_for(c, dev.idx)
    }
}

/// The refusal of `n` bytes on a device: the slice line, or for a GPU
/// outside the slice the line naming it.
pub fn refused_on(api: &[u8], n: u64, slice: u64, dev: Dev, used: u64) {
    show_limit(dev.idx, slice);
    if crate::foreign::is_foreign(dev.idx) {
        crate::foreign::refused(api, n, dev.ordinal);
    } else if config().and_then(|c| burst_limit_for(c, dev.idx)) == Some(slice) {
        crate::msg::refused_limit(api, n, slice, dev.ordinal, used);
    } else {
        crate::msg::refused(api, n, slice, dev.ordinal, used);
    }
}

pub static PROC: Proc = Proc;

/// The process's books (see the module comment).
pub struct Acct;
pub static ACCT: Acct = Acct;

/// The region when this process enforces (None also while it fails closed).
#[inline]
fn enforced_region(dev: Dev) -> Option<Region> {
    let c = config()?;
    if !c.enforce || dev.idx == UNTRACKED {
        return None;
    }
    state::region()
}

impl Acct {
    #[inline]
    fn budget(&self, r: Region) -> Option<Budget<'static, Proc>> {
        Some(Budget {
            region: r,
            slot: state::my_slot(&r)?,
            host: &PROC,
        })
    }

    /// Grow a charge (pitched allocations: the driver's pitch is larger).
    pub fn grow(&self, api: &[u8], c: &mut Charge, extra: u64) -> Result<(), Refused> {
        match state::region().and_then(|r| self.budget(r)) {
            Some(b) => b.grow(api, c, extra),
            None => Ok(()),
        }
    }

    /// Admit bytes that may be lent (cuMemAlloc in a burstable slice):
    /// see [`Budget::admit_tiered`].
    pub fn admit_tiered(
        &self,
        api: &[u8],
        dev: Dev,
        n: u64,
    ) -> Result<Option<(Charge, Tier)>, Refused> {
        match enforced_region(dev).and_then(|r| self.budget(r)) {
            Some(b) => b.admit_tiered(api, dev, n),
            // no usable region or no slot: `admit` says what (refused,
            // fail-closed, or not enforced)
            None => Ok(self.admit(api, dev, n)?.map(|c| (c, Tier::Guaranteed))),
        }
    }

    /// Give back a tracked allocation's bytes.
    #[inline]
    pub fn release_rec(&self, rec: Rec) {
        self.release(rec.dev as usize, rec.size);
    }
}

impl Books for Acct {
    #[inline]
    fn admit(&self, api: &[u8], dev: Dev, n: u64) -> Result<Option<Charge>, Refused> {
        let Some(r) = enforced_region(dev) else {
            // the container's usage file is unusable: refuse (the one line
            // naming the file was printed when it was opened)
            return if state::failed_closed() {
                Err(Refused)
            } else {
                Ok(None)
            };
        };
        match self.budget(r) {
            Some(b) => b.admit(api, dev, n),
            None => match PROC.limit(dev) {
                // every slot is held by a live process
                Some(limit) => {
                    refused_on(api, n, limit, dev, r.used(dev.idx));
                    Err(Refused)
                }
                None => Ok(None),
            },
        }
    }

    fn fits_after(&self, api: &[u8], dev: Dev, n: u64, pending: u64) -> bool {
        let Some(r) = enforced_region(dev) else {
            return !state::failed_closed();
        };
        match self.budget(r) {
            Some(b) => b.fits_after(api, dev, n, pending),
            None => PROC.limit(dev).is_none(),
        }
    }

    fn charge(&self, idx: usize, n: u64) {
        if let Some(b) = state::region().and_then(|r| self.budget(r)) {
            b.charge(idx, n);
        }
    }

    #[inline]
    fn release(&self, idx: usize, n: u64) {
        if let Some(b) = state::region().and_then(|r| self.budget(r)) {
            b.release(idx, n);
        }
    }
}

/// The slice of a device being charged a context of `charge` bytes, when
/// the slice can never hold it (foreign GPUs excepted: their own line says
/// why they refuse): the caller refuses with msg::context_too_big instead
/// of the allocation's line.
pub fn slice_below(dev: Dev, charge: u64) -> Option<u64> {
    enforced_region(dev)?;
    let limit = PROC.limit(dev)?;
    (charge > limit && !crate::foreign::is_foreign(dev.idx)).then_some(limit)
}

/// Container usage of a region device (reclaiming dead slots first).
pub fn container_used(r: &Region, idx: usize) -> u64 {
    // Checking other processes' liveness costs a kill(2) and a /proc read
    // per slot: for memory queries (which frameworks may poll) do it at
    // most every RECLAIM_INTERVAL_NS per process. A refused allocation
    // always reclaims first (admit_slow), so admission never waits on this.
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = crate::sys::monotonic_ns();
    let last = LAST.load(Relaxed);
    if now.saturating_sub(last) >= RECLAIM_INTERVAL_NS
        && LAST.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
    {
        r.reclaim_dead(state::my_slot_if_any(), &region::owner_alive);
    }
    r.used(idx)
}

/// How often a memory query may re-check other processes' liveness.
const RECLAIM_INTERVAL_NS: u64 = 100_000_000;
