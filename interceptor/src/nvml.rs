//! NVML memory reporting: nvidia-smi and friends see the slice.

use crate::account;
use crate::config;
use crate::state::{self, config};
use crate::symbols::{real_fn, S};
use libc::{c_char, c_int, c_uint, c_void};

pub type NvmlReturn = c_int;
const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;

#[repr(C)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// (total, free) to show for an NVML device (account::shown).
unsafe fn slice_of(dev: *mut c_void, real_total: u64, real_free: u64) -> Option<(u64, u64)> {
    let c = config()?;
    if !c.enforce {
        return None;
    }
    let mut idx: Option<usize> = None;
    let mut uuid: Option<[u8; 16]> = None;
    type U = unsafe extern "C" fn(*mut c_void, *mut c_char, c_uint) -> NvmlReturn;
    if let Some(f) = real_fn!(S::nvmlDeviceGetUUID, U) {
        let mut buf = [0u8; 96];
        if f(dev, buf.as_mut_ptr() as *mut c_char, buf.len() as c_uint) == 0 {
            let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            if let Some(u) = config::parse_uuid(&buf[..n]) {
                if crate::foreign::uuid_is_foreign(&u) {
                    return Some((0, 0)); // not part of the slice: nothing
                }
                if let Some(r) = state::region() {
                    idx = r.uuid_index(&u, false);
                    if let Some(i) = idx {
                        crate::foreign::note(i, &u);
                    }
                }
                uuid = Some(u);
            }
        }
    }
    if uuid.is_none() && crate::foreign::has_slice_list() {
        return Some((0, 0)); // cannot be shown to be part of the slice
    }
    let limit = match (idx, uuid) {
        (Some(i), _) => account::limit_for(c, i, &|| Some(real_total)),
        (None, Some(u)) if c.from_grant() => c.slice_of_uuid(&u).unwrap_or(0),
        _ => c.limit.resolve(real_total),
    };
    if let Some(i) = idx {
        account::show_limit(i, limit);
    }
    let used = match (idx, state::region()) {
        (Some(i), Some(r)) => account::container_used(&r, i),
        // fail closed: nothing can be allocated, so nothing is free
        _ if state::failed_closed() => limit,
        _ => 0, // no process of this container has used the device yet
    };
    Some(match idx {
        Some(i) => account::shown(i, limit, used, real_total, real_free),
        // before any CUDA process of the container named the GPU: a
        // burstable slice still shows its limit as the total
        None => {
            let total = uuid
                .and_then(|u| c.burst_of_uuid(&u))
                .filter(|b| *b > limit)
                .unwrap_or(limit)
                .min(real_total);
            (total, total.saturating_sub(used).min(real_free))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    dev: *mut c_void,
    mem: *mut NvmlMemory,
) -> NvmlReturn {
    type F = unsafe extern "C" fn(*mut c_void, *mut NvmlMemory) -> NvmlReturn;
    let f = match real_fn!(S::nvmlDeviceGetMemoryInfo, F) {
        Some(f) => f,
        None => return NVML_ERROR_UNINITIALIZED,
    };
    let r = f(dev, mem);
    if r != 0 || mem.is_null() {
        return r;
    }
    if let Some((slice, free)) = slice_of(dev, (*mem).total, (*mem).free) {
        (*mem).total = slice;
        (*mem).free = free;
        (*mem).used = slice - free;
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    dev: *mut c_void,
    mem: *mut NvmlMemoryV2,
) -> NvmlReturn {
    type F = unsafe extern "C" fn(*mut c_void, *mut NvmlMemoryV2) -> NvmlReturn;
    let f = match real_fn!(S::nvmlDeviceGetMemoryInfo_v2, F) {
        Some(f) => f,
        None => return NVML_ERROR_UNINITIALIZED,
    };
    let r = f(dev, mem);
    if r != 0 || mem.is_null() {
        return r;
    }
    if let Some((slice, free)) = slice_of(dev, (*mem).total, (*mem).free) {
        let reserved = (*mem).reserved.min(slice - free);
        (*mem).total = slice;
        (*mem).free = free;
        (*mem).reserved = reserved;
        (*mem).used = slice - free - reserved;
    }
    r
}
