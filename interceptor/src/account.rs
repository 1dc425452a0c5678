//! Admission / release against the region, device selection.

use crate::config;
use crate::msg;
use crate::ptrtable::Rec;
use crate::region::{self, Region};
use crate::state::{self, config};
use crate::symbols::{real_fn, S};
use core::sync::atomic::Ordering::*;
use libc::c_int;

pub const UNTRACKED: usize = usize::MAX;

#[derive(Clone, Copy)]
pub struct Dev {
    pub ordinal: c_int,
    pub idx: usize,
}

#[derive(Clone, Copy)]
pub enum DevSel {
    Current,
    Ordinal(c_int),
}

#[derive(Clone, Copy)]
pub struct Charge {
    pub slot: usize,
    pub dev: Dev,
    pub n: u64,
    region: Region,
}

/// Region device index of a CUDA ordinal: position of the device UUID in the
/// region's UUID table (pre-filled from the hook's `gpus` list, otherwise
/// filled in first-use order), falling back to the ordinal.
pub fn dev_index(ordinal: c_int) -> usize {
    if !(0..64).contains(&ordinal) {
        return UNTRACKED;
    }
    let m = &state::devmap()[ordinal as usize];
    let v = m.load(Relaxed);
    if v != 0xff {
        return if v == 0xfe { UNTRACKED } else { v as usize };
    }
    let (idx, cache) = compute_index(ordinal);
    if cache {
        m.store(if idx == UNTRACKED { 0xfe } else { idx as u8 }, Relaxed);
    }
    idx
}

/// (index, cacheable): not cached when the UUID could not be read yet
/// (e.g. before cuInit) although the driver has the call.
#[cold]
fn compute_index(ordinal: c_int) -> (usize, bool) {
    let mut uuid = [0u8; 16];
    let mut have = false;
    let mut callable = false;
    type GetUuid = unsafe extern "C" fn(*mut u8, c_int) -> c_int;
    if let Some(f) = real_fn!(S::cuDeviceGetUuid_v2, GetUuid) {
        callable = true;
        have = unsafe { f(uuid.as_mut_ptr(), ordinal) } == 0;
    }
    if !have {
        if let Some(f) = real_fn!(S::cuDeviceGetUuid, GetUuid) {
            callable = true;
            have = unsafe { f(uuid.as_mut_ptr(), ordinal) } == 0;
        }
    }
    if have {
        if let Some(r) = state::region() {
            if let Some(i) = r.uuid_index(&uuid, true) {
                crate::foreign::note(i, &uuid);
                return (i, true);
            }
        }
    }
    let idx = if (ordinal as usize) < config::MAX_GPUS {
        ordinal as usize
    } else {
        UNTRACKED
    };
    (idx, have || !callable)
}

/// The current context's device, its context overhead charged.
#[inline]
pub fn current_dev_charged() -> Dev {
    let d = current_dev();
    if let Some(r) = state::region() {
        ensure_ctx_charged(&r, d);
    }
    d
}

/// The current context's device.
#[inline]
pub fn current_dev() -> Dev {
    let dc = state::devcount();
    let mut n = dc.load(Relaxed);
    if n < 0 {
        type F = unsafe extern "C" fn(*mut c_int) -> c_int;
        let mut cnt: c_int = 0;
        if let Some(f) = real_fn!(S::cuDeviceGetCount, F) {
            if unsafe { f(&mut cnt) } == 0 && cnt > 0 {
                dc.store(cnt, Relaxed);
                n = cnt;
            }
        }
    }
    let mut ordinal: c_int = 0;
    if n != 1 {
        type F = unsafe extern "C" fn(*mut c_int) -> c_int;
        if let Some(f) = real_fn!(S::cuCtxGetDevice, F) {
            if unsafe { f(&mut ordinal) } != 0 {
                ordinal = 0;
            }
        }
    }
    Dev {
        ordinal,
        idx: dev_index(ordinal),
    }
}

pub fn select(sel: DevSel) -> Dev {
    match sel {
        DevSel::Current => current_dev_charged(),
        DevSel::Ordinal(o) => Dev {
            ordinal: o,
            idx: dev_index(o),
        },
    }
}

/// Real total memory of a CUDA ordinal.
pub fn real_total(ordinal: c_int) -> Option<u64> {
    type F = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
    let f = real_fn!(S::cuDeviceTotalMem_v2, F)?;
    let mut t: usize = 0;
    if unsafe { f(&mut t, ordinal) } == 0 {
        Some(t as u64)
    } else {
        None
    }
}

/// Everything admission needs, or None when this call is not enforced.
#[inline]
fn ctx(dev: &Dev) -> Option<(Region, u64)> {
    let c = config()?;
    if !c.enforce || dev.idx == UNTRACKED {
        return None;
    }
    let r = state::region()?;
    let ord = dev.ordinal;
    let limit = state::limit_for(c, dev.idx, &|| real_total(ord));
    if limit == 0
        && !matches!(c.limit, config::Size::Bytes(0))
        && !crate::foreign::is_foreign(dev.idx)
    {
        return None; // percent of an unknown total: cannot enforce
    }
    Some((r, limit))
}

/// Reserve n bytes on a device. Ok(None): not enforced (pass through,
/// untracked). Ok(Some): reserved. Err: refused (message printed).
#[inline]
pub fn admit(api: &[u8], dev: Dev, n: u64) -> Result<Option<Charge>, ()> {
    let (r, limit) = match ctx(&dev) {
        Some(x) => x,
        // the container's usage file is unusable: refuse (the one line
        // naming the file was printed when it was opened)
        None if state::failed_closed() => return Err(()),
        None => return Ok(None),
    };
    let slot = match state::my_slot(&r) {
        Some(s) => s,
        None => {
            msg::refused_on(api, n, limit, dev.ordinal, dev.idx, r.used(dev.idx));
            return Err(());
        }
    };
    match r.try_admit(slot, dev.idx, n, limit) {
        Ok(()) => Ok(Some(Charge {
            slot,
            dev,
            n,
            region: r,
        })),
        Err(_) => admit_slow(api, r, slot, dev, n, limit),
    }
}

#[cold]
fn admit_slow(
    api: &[u8],
    r: Region,
    slot: usize,
    dev: Dev,
    n: u64,
    limit: u64,
) -> Result<Option<Charge>, ()> {
    // give back what our own pools no longer reserve, reclaim the slots of
    // dead processes, then try once more
    let freed = crate::pools::refresh_all(Some(dev.idx)) | crate::graphs::refresh_all();
    if (r.reclaim_dead(slot, &region::owner_alive) > 0 || freed)
        && r.try_admit(slot, dev.idx, n, limit).is_ok()
    {
        return Ok(Some(Charge {
            slot,
            dev,
            n,
            region: r,
        }));
    }
    r.count_refusal();
    msg::refused_on(api, n, limit, dev.ordinal, dev.idx, r.used(dev.idx));
    Err(())
}

/// The slice of a device being charged a context of `charge` bytes, when
/// the slice can never hold it (foreign GPUs excepted: their own line says
/// why they refuse): the caller refuses with [`msg::context_too_big`]
/// instead of the allocation's line.
pub fn slice_below(dev: Dev, charge: u64) -> Option<u64> {
    let (_, limit) = ctx(&dev)?;
    (charge > limit && !crate::foreign::is_foreign(dev.idx)).then_some(limit)
}

/// Does n more bytes fit right now (no reservation; graph memory nodes)?
pub fn fits(api: &[u8], dev: Dev, n: u64) -> bool {
    fits_after(api, dev, n, 0)
}

/// Does n more bytes fit next to `pending` bytes not charged yet (the
/// memory nodes an active capture asked before)? The refusal names n.
pub fn fits_after(api: &[u8], dev: Dev, n: u64, pending: u64) -> bool {
    let (r, limit) = match ctx(&dev) {
        Some(x) => x,
        None => return !state::failed_closed(),
    };
    let used = r.used(dev.idx).saturating_add(pending);
    if used.saturating_add(n) <= limit {
        return true;
    }
    if let Some(s) = state::my_slot(&r) {
        r.reclaim_dead(s, &region::owner_alive);
    }
    let used = r.used(dev.idx).saturating_add(pending);
    if used.saturating_add(n) <= limit {
        return true;
    }
    r.count_refusal();
    msg::refused_on(api, n, limit, dev.ordinal, dev.idx, used);
    false
}

impl Charge {
    pub fn rollback(self) {
        self.region.release(self.slot, self.dev.idx, self.n);
    }
    /// Grow (Ok) or fail (Err, nothing changed) — used when the real size
    /// turns out larger than estimated.
    pub fn grow(&mut self, api: &[u8], extra: u64) -> Result<(), ()> {
        let c = match config() {
            Some(c) => c,
            None => return Ok(()),
        };
        let ord = self.dev.ordinal;
        let limit = state::limit_for(c, self.dev.idx, &|| real_total(ord));
        match self.region.try_admit(self.slot, self.dev.idx, extra, limit) {
            Ok(()) => {
                self.n += extra;
                Ok(())
            }
            Err(used) => {
                self.region.count_refusal();
                msg::refused_on(api, extra, limit, self.dev.ordinal, self.dev.idx, used);
                Err(())
            }
        }
    }
    pub fn shrink(&mut self, less: u64) {
        let less = less.min(self.n);
        self.region.release(self.slot, self.dev.idx, less);
        self.n -= less;
    }
}

/// The context overhead of a device is charged once per process: normally
/// by the context wrappers; a context made through a path we did not see is
/// charged at the first allocation on the current context or memory query
/// (never refused: the context exists already).
#[inline]
pub fn ensure_ctx_charged(r: &Region, dev: Dev) {
    if dev.idx >= config::MAX_GPUS
        || state::CTX_CHARGED[dev.idx].load(Relaxed) != 0
        || crate::foreign::is_foreign(dev.idx)
    {
        return;
    }
    ensure_ctx_slow(r, dev)
}

#[cold]
fn ensure_ctx_slow(r: &Region, dev: Dev) {
    let ov = match config() {
        Some(c) if c.enforce => c.ctx_overhead,
        _ => 0,
    };
    if ov == 0 {
        return;
    }
    if state::CTX_CHARGED[dev.idx]
        .compare_exchange(0, 1, AcqRel, Acquire)
        .is_ok()
    {
        match state::my_slot(r) {
            Some(s) => {
                r.charge(s, dev.idx, ov);
                // a context the driver made out of our sight (the CUDA
                // runtime's own path) in a slice that cannot hold one: say
                // so now, before the first allocation's refusal line
                if let Some(slice) = slice_below(dev, ov) {
                    crate::msg::context_too_big(ov, slice, dev.ordinal);
                }
            }
            None => state::CTX_CHARGED[dev.idx].store(0, Release),
        }
    }
}

/// Charge n bytes on a region device without an admission check (memory
/// the driver already holds, e.g. a pool that grew by more than asked).
pub fn force_charge(idx: usize, n: u64) {
    if n == 0 || idx >= config::MAX_GPUS {
        return;
    }
    if let Some(r) = state::region() {
        if let Some(s) = state::my_slot(&r) {
            r.charge(s, idx, n);
        }
    }
}

/// Release n bytes on a region device.
pub fn release_bytes(idx: usize, n: u64) {
    if n == 0 || idx >= config::MAX_GPUS {
        return;
    }
    if let Some(r) = state::region() {
        if let Some(s) = state::my_slot(&r) {
            r.release(s, idx, n);
        }
    }
}

/// Give back a tracked allocation's bytes.
#[inline]
pub fn release(rec: Rec) {
    if let Some(r) = state::region() {
        if let Some(s) = state::my_slot(&r) {
            r.release(s, rec.dev as usize, rec.size);
        }
    }
}

/// Container usage of a region device (reclaiming dead slots first).
pub fn container_used(r: &Region, idx: usize) -> u64 {
    // Checking other processes' liveness costs a kill(2) and a /proc read
    // per slot: for memory queries (which frameworks may poll) do it at
    // most every RECLAIM_INTERVAL_NS per process. A refused allocation
    // always reclaims first (admit_slow), so admission never waits on this.
    static LAST: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
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
