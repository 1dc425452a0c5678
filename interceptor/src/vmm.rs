//! VMM lifetimes (cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease /
//! cuMemRetainAllocationHandle / cuMemExportToShareableHandle).
//!
//! The driver keeps the physical memory of a handle alive while the handle
//! has references (create = 1, each retain + 1, each release − 1) *or* any
//! mapping of it exists. So each handle we charged has one counter,
//! references + mappings (a raw KIND_VMMREF entry); the charge goes when it
//! reaches 0. Every mapping is remembered by its address (KIND_MAP: size;
//! KIND_MAPH: the handle), so cuMemUnmap knows which handles lose a mapping.
//!
//! A handle value that does not fit a raw entry (56 bits) is not stored:
//! cuMemUnmap then asks the driver which handle backs each mapping
//! (cuMemRetainAllocationHandle, released again at once) before unmapping.
//!
//! Exported handles: another process of the container may import and map
//! the memory, and we cannot see when it lets go; the exporter therefore
//! keeps the charge until it exits (a pin bit in the counter). Importers are
//! not charged (exactly once in the container while the exporter lives).

use crate::account::ACCT;
use crate::ptrtable::{KIND_MAP, KIND_MAPH, KIND_VMM, KIND_VMMREF, RAW_MASK};
use crate::state::TABLE;
use core::sync::atomic::Ordering::*;

const PIN: u64 = 1 << 40;

/// After a successful cuMemCreate that was charged and recorded.
pub fn created(h: u64) {
    if !TABLE.insert_raw(h, KIND_VMMREF, 1) {
        // no counter: cuMemRelease then releases at once (old behaviour)
    }
}

/// One more reference or mapping of h (if it is one of ours).
pub fn add_ref(h: u64) -> bool {
    match TABLE.raw_cell(h, KIND_VMMREF) {
        Some(c) => {
            c.fetch_add(1, AcqRel);
            true
        }
        None => false,
    }
}

/// One reference or mapping less; the charge goes with the last one.
pub fn drop_ref(h: u64) {
    let c = match TABLE.raw_cell(h, KIND_VMMREF) {
        Some(c) => c,
        None => {
            // untracked counter (table was full): release with the handle
            if let Some(rec) = TABLE.remove(h, KIND_VMM) {
                ACCT.release_rec(rec);
            }
            return;
        }
    };
    let prev = c.fetch_sub(1, AcqRel);
    if prev & RAW_MASK == 0 {
        c.fetch_add(1, AcqRel); // over-release: never borrow from the kind byte
        return;
    }
    if (prev - 1) & RAW_MASK == 0 {
        TABLE.remove_raw(h, KIND_VMMREF);
        if let Some(rec) = TABLE.remove(h, KIND_VMM) {
            ACCT.release_rec(rec);
        }
    }
}

/// cuMemRelease(h) succeeded.
pub fn released(h: u64) {
    if TABLE.get(h, KIND_VMM).is_some() {
        drop_ref(h);
    }
}

/// cuMemMap(va, size, 0, h) succeeded.
pub fn mapped(va: u64, size: u64, h: u64) {
    let rec = match TABLE.get(h, KIND_VMM) {
        Some(r) => r,
        None => return, // not ours (imported, host memory, untracked)
    };
    if !add_ref(h) {
        return;
    }
    if !TABLE.insert(va, KIND_MAP, size, rec.dev) {
        return; // the mapping's reference stays: charged until exit
    }
    // a handle too wide for a raw entry is asked of the driver at unmap
    let _ = TABLE.insert_raw(va, KIND_MAPH, h);
}

/// Handles found before an unmap for mappings without a stored handle.
pub struct Asked {
    n: usize,
    h: [(u64, u64); 32], // (va, handle)
}

/// Before cuMemUnmap(va, size): for mappings in the run whose handle we
/// could not store, ask the driver now (afterwards the address is gone).
pub fn before_unmap(va: u64, size: u64) -> Asked {
    let mut a = Asked {
        n: 0,
        h: [(0, 0); 32],
    };
    type Retain = unsafe extern "C" fn(*mut u64, *mut libc::c_void) -> crate::cu::CUresult;
    type Release = unsafe extern "C" fn(u64) -> crate::cu::CUresult;
    let end = va.saturating_add(size);
    let mut cur = va;
    while cur < end {
        let rec = match TABLE.get(cur, KIND_MAP) {
            Some(r) => r,
            None => break,
        };
        if TABLE.raw_cell(cur, KIND_MAPH).is_none() && a.n < a.h.len() {
            if let (Some(ret), Some(rel)) = (
                crate::symbols::real_fn!(crate::symbols::S::cuMemRetainAllocationHandle, Retain),
                crate::symbols::real_fn!(crate::symbols::S::cuMemRelease, Release),
            ) {
                let mut h: u64 = 0;
                if unsafe { ret(&mut h, cur as *mut libc::c_void) } == 0 {
                    // the mapping keeps the handle valid: give the extra reference back
                    unsafe { rel(h) };
                    a.h[a.n] = (cur, h);
                    a.n += 1;
                }
            }
        }
        if rec.size == 0 {
            break;
        }
        cur = cur.saturating_add(rec.size);
    }
    a
}

/// cuMemUnmap(va, size) succeeded: every mapping in the contiguous run of
/// mappings starting at va loses its reference.
pub fn unmapped(va: u64, size: u64, asked: &Asked) {
    let end = va.saturating_add(size);
    let mut cur = va;
    while cur < end {
        let rec = match TABLE.remove(cur, KIND_MAP) {
            Some(r) => r,
            None => break,
        };
        match TABLE.remove_raw(cur, KIND_MAPH) {
            Some(h) => drop_ref(h),
            None => {
                if let Some(&(_, h)) = asked.h[..asked.n].iter().find(|x| x.0 == cur) {
                    drop_ref(h);
                }
            }
        }
        if rec.size == 0 {
            break;
        }
        cur = cur.saturating_add(rec.size);
    }
}

/// cuMemRetainAllocationHandle succeeded: the returned handle has one more
/// reference (released again with cuMemRelease).
pub fn retained(h: u64) {
    add_ref(h);
}

/// cuMemExportToShareableHandle succeeded: pin the charge to this process.
pub fn exported(h: u64) {
    if let Some(c) = TABLE.raw_cell(h, KIND_VMMREF) {
        c.fetch_or(PIN, AcqRel);
    }
}
