//! Which device a call is about: CUDA ordinal -> region device index (the
//! position of the device's UUID in the region's table, pre-filled from the
//! hook's `gpus` list, otherwise filled in first-use order), the current
//! context's device, a device's real total. Cached per ordinal.

use crate::config::MAX_GPUS;
use crate::policy::{Dev, UNTRACKED};
use crate::state;
use crate::symbols::{self, real_fn, S};
use core::sync::atomic::{AtomicI32, AtomicU8, Ordering::*};
use libc::c_int;

/// CUDA ordinal -> region device index (0xff unknown, 0xfe untracked)
static DEVMAP: [AtomicU8; 64] = [const { AtomicU8::new(0xff) }; 64];
/// the driver's device count (-1: not asked yet)
static DEVCOUNT: AtomicI32 = AtomicI32::new(-1);

#[derive(Clone, Copy)]
pub enum DevSel {
    Current,
    Ordinal(c_int),
}

/// The driver's device count, -1 while unknown.
pub fn count() -> i32 {
    DEVCOUNT.load(Relaxed)
}

/// Region device index of a CUDA ordinal.
pub fn dev_index(ordinal: c_int) -> usize {
    if !(0..64).contains(&ordinal) {
        return UNTRACKED;
    }
    let m = &DEVMAP[ordinal as usize];
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
    let callable =
        symbols::real(S::cuDeviceGetUuid_v2) != 0 || symbols::real(S::cuDeviceGetUuid) != 0;
    let uuid = symbols::device_uuid(ordinal);
    if let Some(uuid) = uuid {
        if let Some(r) = state::region() {
            if let Some(i) = r.uuid_index(&uuid, true) {
                crate::foreign::note(i, &uuid);
                return (i, true);
            }
        }
    }
    let idx = if (ordinal as usize) < MAX_GPUS {
        ordinal as usize
    } else {
        UNTRACKED
    };
    (idx, uuid.is_some() || !callable)
}

/// The current context's device.
#[inline]
pub fn current_dev() -> Dev {
    let mut n = DEVCOUNT.load(Relaxed);
    if n < 0 {
        type F = unsafe extern "C" fn(*mut c_int) -> c_int;
        let mut cnt: c_int = 0;
        if let Some(f) = real_fn!(S::cuDeviceGetCount, F) {
            if unsafe { f(&mut cnt) } == 0 && cnt > 0 {
                DEVCOUNT.store(cnt, Relaxed);
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

/// A device by ordinal.
pub fn of_ordinal(o: c_int) -> Dev {
    Dev {
        ordinal: o,
        idx: dev_index(o),
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
