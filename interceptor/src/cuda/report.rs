//! What the process sees of memory: cuMemGetInfo and cuDeviceTotalMem report
//! the slice (a burstable slice's limit; account::shown).
use super::*;

// ------------------------------------------------------------ reporting

/// (slice, free) to report for a device given the real numbers.
fn report(dev: Dev, real_free: u64, real_total: u64) -> Option<(u64, u64)> {
    let c = config()?;
    if !c.enforce || dev.idx == UNTRACKED {
        return None;
    }
    let limit = account::limit_for(c, dev.idx, &|| Some(real_total));
    account::show_limit(dev.idx, limit);
    let used = match state::region() {
        Some(r) => {
            crate::contexts::ensure_base(dev, true);
            account::container_used(&r, dev.idx)
        }
        None if state::failed_closed() => return Some((limit.min(real_total), 0)),
        None => 0,
    };
    Some(account::shown(dev.idx, limit, used, real_total, real_free))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    type F = unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult;
    let f = real_or!(S::cuMemGetInfo_v2, F);
    let r = f(free, total);
    if r != CUDA_SUCCESS || (free.is_null() && total.is_null()) {
        return r;
    }
    if !config().map(|c| c.enforce).unwrap_or(false) {
        return r;
    }
    let (mut rf, mut rt) = (0usize, 0usize);
    if (free.is_null() || total.is_null()) && f(&mut rf, &mut rt) != CUDA_SUCCESS {
        return r;
    }
    if !free.is_null() {
        rf = *free;
    }
    if !total.is_null() {
        rt = *total;
    }
    if let Some((slice, fr)) = report(devices::current_dev(), rf as u64, rt as u64) {
        if !free.is_null() {
            *free = fr as usize;
        }
        if !total.is_null() {
            *total = slice as usize;
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CUresult {
    type F = unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> CUresult;
    let f = real_or!(S::cuMemGetInfo, F);
    let r = f(free, total);
    if r != CUDA_SUCCESS || (free.is_null() && total.is_null()) {
        return r;
    }
    if !config().map(|c| c.enforce).unwrap_or(false) {
        return r;
    }
    // real numbers from the 64-bit call when there is one
    type F2 = unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult;
    let (mut rf, mut rt) = (0usize, 0usize);
    let ok = match real_fn!(S::cuMemGetInfo_v2, F2) {
        Some(g) => g(&mut rf, &mut rt) == CUDA_SUCCESS,
        None => false,
    };
    if !ok {
        let (mut a, mut b) = (0 as c_uint, 0 as c_uint);
        if f(&mut a, &mut b) != CUDA_SUCCESS {
            return r;
        }
        rf = a as usize;
        rt = b as usize;
    }
    if let Some((slice, fr)) = report(devices::current_dev(), rf as u64, rt as u64) {
        if !free.is_null() {
            *free = fr.min(c_uint::MAX as u64) as c_uint;
        }
        if !total.is_null() {
            *total = slice.min(c_uint::MAX as u64) as c_uint;
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDeviceTotalMem_v2,
        unsafe extern "C" fn(*mut usize, c_int) -> CUresult
    );
    let r = f(bytes, dev);
    if r != CUDA_SUCCESS || bytes.is_null() {
        return r;
    }
    if let Some((slice, _)) = report(devices::of_ordinal(dev), u64::MAX, *bytes as u64) {
        *bytes = slice as usize;
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDeviceTotalMem,
        unsafe extern "C" fn(*mut c_uint, c_int) -> CUresult
    );
    let r = f(bytes, dev);
    if r != CUDA_SUCCESS || bytes.is_null() {
        return r;
    }
    if !config().map(|c| c.enforce).unwrap_or(false) {
        return r;
    }
    let rt = devices::real_total(dev).unwrap_or(*bytes as u64);
    if let Some((slice, _)) = report(devices::of_ordinal(dev), u64::MAX, rt) {
        *bytes = slice.min(c_uint::MAX as u64) as c_uint;
    }
    r
}
