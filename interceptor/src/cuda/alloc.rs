//! cuMemAlloc, pitched allocations, frees, managed memory.
use super::*;

// ------------------------------------------------------------ cuMemAlloc

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    let f = real_or!(
        S::cuMemAlloc_v2,
        unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult
    );
    if dptr.is_null() || size == 0 {
        return f(dptr, size); // the driver's INVALID_VALUE
    }
    if account::bursts() {
        return burst::alloc(dptr, size, f);
    }
    produce(
        b"cuMemAlloc",
        DevSel::Current,
        size as u64,
        KIND_DPTR,
        || f(dptr, size),
        || if dptr.is_null() { None } else { Some(*dptr) },
        |k| free_dptr(k),
    )
}

/// Legacy 32-bit cuMemAlloc.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut c_uint, size: c_uint) -> CUresult {
    let f = real_or!(
        S::cuMemAlloc,
        unsafe extern "C" fn(*mut c_uint, c_uint) -> CUresult
    );
    if dptr.is_null() || size == 0 {
        return f(dptr, size);
    }
    produce(
        b"cuMemAlloc",
        DevSel::Current,
        size as u64,
        KIND_DPTR,
        || f(dptr, size),
        || {
            if dptr.is_null() {
                None
            } else {
                Some(*dptr as u64)
            }
        },
        |k| free_dptr(k),
    )
}

// ------------------------------------------------------------ pitch

const PITCH_EST_ALIGN: u64 = 512;
const CU_DEVICE_ATTRIBUTE_MAX_PITCH: c_int = 11;
static MAX_PITCH: [core::sync::atomic::AtomicU64; 64] =
    [const { core::sync::atomic::AtomicU64::new(0) }; 64];

#[inline(always)]
unsafe fn pitch_common(
    width: u64,
    height: u64,
    elem: c_uint,
    outs_ok: bool,
    call: impl FnOnce() -> CUresult,
    result: impl FnOnce() -> Option<(u64, u64)>, // (ptr, pitch)
) -> CUresult {
    let enforce = config().map(|c| c.enforce).unwrap_or(false);
    if !enforce {
        return call();
    }
    let api = b"cuMemAllocPitch";
    let dev = crate::contexts::current_dev_charged();
    // what the driver rejects reaches it: no output pointers,
    // an empty extent, an element size other than 4/8/16, a row wider than
    // the device's maximum pitch, a size beyond 64 bits
    let max_pitch = dev_attr_cached(&MAX_PITCH, CU_DEVICE_ATTRIBUTE_MAX_PITCH, dev.ordinal);
    let est = width
        .checked_next_multiple_of(PITCH_EST_ALIGN)
        .and_then(|w| w.checked_mul(height));
    let est = match est {
        Some(e)
            if outs_ok
                && width != 0
                && height != 0
                && matches!(elem, 4 | 8 | 16)
                && (max_pitch == 0 || width <= max_pitch) =>
        {
            e
        }
        _ => {
            let r = call();
            if r == CUDA_SUCCESS {
                // accepted after all: charge what it holds, or undo
                if let Some((p, pitch)) = result() {
                    let n = pitch.saturating_mul(height);
                    match ACCT.admit(api, dev, n) {
                        Ok(Some(ch)) => return record(ch, KIND_DPTR, Some(p), |k| free_dptr(k), r),
                        Ok(None) => return r,
                        Err(Refused) => {
                            free_dptr(p);
                            return CUDA_ERROR_OUT_OF_MEMORY;
                        }
                    }
                }
            }
            return r;
        }
    };
    let mut ch = match ACCT.admit(api, dev, est) {
        Ok(Some(c)) => c,
        Ok(None) => return call(),
        Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let r = call();
    if r != CUDA_SUCCESS {
        ch.rollback();
        return r;
    }
    let (p, pitch) = match result() {
        Some(x) => x,
        None => {
            ch.rollback();
            return r;
        }
    };
    let actual = pitch.saturating_mul(height);
    if actual > ch.n {
        let extra = actual - ch.n;
        if ACCT.grow(api, &mut ch, extra).is_err() {
            free_dptr(p);
            ch.rollback();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if actual < ch.n {
        ch.shrink(ch.n - actual);
    }
    record(ch, KIND_DPTR, Some(p), |k| free_dptr(k), r)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> CUresult;
    let f = real_or!(S::cuMemAllocPitch_v2, F);
    pitch_common(
        width as u64,
        height as u64,
        elem,
        !dptr.is_null() && !pitch.is_null(),
        || f(dptr, pitch, width, height, elem),
        || {
            if dptr.is_null() || pitch.is_null() {
                None
            } else {
                Some((*dptr, *pitch as u64))
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut c_uint,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    elem: c_uint,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut c_uint, *mut c_uint, c_uint, c_uint, c_uint) -> CUresult;
    let f = real_or!(S::cuMemAllocPitch, F);
    pitch_common(
        width as u64,
        height as u64,
        elem,
        !dptr.is_null() && !pitch.is_null(),
        || f(dptr, pitch, width, height, elem),
        || {
            if dptr.is_null() || pitch.is_null() {
                None
            } else {
                Some((*dptr as u64, *pitch as u64))
            }
        },
    )
}

// ------------------------------------------------------------ frees

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(p: CUdeviceptr) -> CUresult {
    let f = real_or!(
        S::cuMemFree_v2,
        unsafe extern "C" fn(CUdeviceptr) -> CUresult
    );
    free_ptr(p, || f(p))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree(p: c_uint) -> CUresult {
    let f = real_or!(S::cuMemFree, unsafe extern "C" fn(c_uint) -> CUresult);
    free_ptr(p as u64, || f(p))
}

// ------------------------------------------------------------ managed

/// Managed memory is charged in full to the current device (conservative:
/// it can all become resident there); in a burstable slice, past the
/// guarantee, as a burst.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    size: usize,
    flags: c_uint,
) -> CUresult {
    let f = real_or!(
        S::cuMemAllocManaged,
        unsafe extern "C" fn(*mut CUdeviceptr, usize, c_uint) -> CUresult
    );
    // CU_MEM_ATTACH_GLOBAL (1) or CU_MEM_ATTACH_HOST (2), else the driver's answer
    if dptr.is_null() || size == 0 || !matches!(flags, 1 | 2) {
        return driver_first(
            b"cuMemAllocManaged",
            DevSel::Current,
            size as u64,
            KIND_DPTR,
            || f(dptr, size, flags),
            || if dptr.is_null() { None } else { Some(*dptr) },
            |k| free_dptr(k),
        );
    }
    if account::bursts() {
        return burst::managed(dptr, size, || f(dptr, size, flags));
    }
    produce(
        b"cuMemAllocManaged",
        DevSel::Current,
        size as u64,
        KIND_DPTR,
        || f(dptr, size, flags),
        || if dptr.is_null() { None } else { Some(*dptr) },
        |k| free_dptr(k),
    )
}
