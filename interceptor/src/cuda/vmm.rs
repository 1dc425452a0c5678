//! Virtual memory management (cuMemCreate, map/unmap, handles); the
//! bookkeeping is crate::vmm.
use super::*;

// ------------------------------------------------------------ VMM

#[repr(C)]
pub struct CUmemAllocationProp {
    pub type_: c_int,
    pub requested_handle_types: c_int,
    pub loc_type: c_int,
    pub loc_id: c_int,
    pub win32: *mut c_void,
    pub alloc_flags: u64,
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut u64, usize, *const CUmemAllocationProp, u64) -> CUresult;
    let f = real_or!(S::cuMemCreate, F);
    if prop.is_null() || (*prop).loc_type != CU_MEM_LOCATION_TYPE_DEVICE {
        return f(handle, size, prop, flags); // host memory: not charged
    }
    let ord = (*prop).loc_id;
    let release = |k: u64| {
        type R = unsafe extern "C" fn(u64) -> CUresult;
        if let Some(r) = real_fn!(S::cuMemRelease, R) {
            r(k);
        }
    };
    // a size that is not a multiple of the minimum granularity, reserved
    // flags, no handle: the driver's INVALID_VALUE, not a refusal
    let gran = vmm_granularity(prop);
    if handle.is_null()
        || size == 0
        || flags != 0
        || (gran != 0 && !(size as u64).is_multiple_of(gran))
    {
        let r = driver_first(
            b"cuMemCreate",
            DevSel::Ordinal(ord),
            size as u64,
            KIND_VMM,
            || f(handle, size, prop, flags),
            || {
                if handle.is_null() {
                    None
                } else {
                    Some(*handle)
                }
            },
            release,
        );
        if r == CUDA_SUCCESS && !handle.is_null() && TABLE.get(*handle, KIND_VMM).is_some() {
            crate::vmm::created(*handle);
        }
        return r;
    }
    let r = produce(
        b"cuMemCreate",
        DevSel::Ordinal(ord),
        size as u64,
        KIND_VMM,
        || f(handle, size, prop, flags),
        || {
            if handle.is_null() {
                None
            } else {
                Some(*handle)
            }
        },
        |k| {
            type R = unsafe extern "C" fn(u64) -> CUresult;
            if let Some(r) = real_fn!(S::cuMemRelease, R) {
                r(k);
            }
        },
    );
    if r == CUDA_SUCCESS && !handle.is_null() && TABLE.get(*handle, KIND_VMM).is_some() {
        crate::vmm::created(*handle);
    }
    r
}

/// The minimum allocation granularity of a device allocation's properties,
/// cached per ordinal and requested handle types (no allocation flags:
/// asked every time); 0: unknown.
unsafe fn vmm_granularity(prop: *const CUmemAllocationProp) -> u64 {
    // per (ordinal, requested handle types): [ordinal * 16 + handle types]
    static GRAN: [core::sync::atomic::AtomicU64; 64 * 16] =
        [const { core::sync::atomic::AtomicU64::new(0) }; 64 * 16];
    let p = &*prop;
    let plain = (0..16).contains(&p.requested_handle_types) && p.alloc_flags == 0;
    let slot =
        GRAN.get(p.loc_id.clamp(0, 63) as usize * 16 + (p.requested_handle_types & 15) as usize);
    if plain {
        if let Some(v) = slot.map(|s| s.load(Relaxed)).filter(|&v| v != 0) {
            return v;
        }
    }
    type F = unsafe extern "C" fn(*mut usize, *const CUmemAllocationProp, c_int) -> CUresult;
    let mut g: usize = 0;
    match real_fn!(S::cuMemGetAllocationGranularity, F) {
        Some(f) if f(&mut g, prop, 0) == CUDA_SUCCESS && g != 0 => {
            if plain {
                if let Some(s) = slot {
                    s.store(g as u64, Relaxed);
                }
            }
            g as u64
        }
        _ => 0,
    }
}

/// The charge of a handle stays while it has references or mappings
/// (vmm.rs): a release only drops one reference.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    let f = real_or!(S::cuMemRelease, unsafe extern "C" fn(u64) -> CUresult);
    let r = f(handle);
    if r == CUDA_SUCCESS {
        crate::vmm::released(handle);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    va: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CUresult {
    type F = unsafe extern "C" fn(CUdeviceptr, usize, usize, u64, u64) -> CUresult;
    let f = real_or!(S::cuMemMap, F);
    let r = f(va, size, offset, handle, flags);
    if r == CUDA_SUCCESS {
        crate::vmm::mapped(va, size as u64, handle);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(va: CUdeviceptr, size: usize) -> CUresult {
    type F = unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult;
    let f = real_or!(S::cuMemUnmap, F);
    let asked = crate::vmm::before_unmap(va, size as u64);
    let r = f(va, size);
    if r == CUDA_SUCCESS {
        crate::vmm::unmapped(va, size as u64, &asked);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut u64,
    addr: *mut c_void,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut u64, *mut c_void) -> CUresult;
    let f = real_or!(S::cuMemRetainAllocationHandle, F);
    let r = f(handle, addr);
    if r == CUDA_SUCCESS && !handle.is_null() {
        crate::vmm::retained(*handle);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shh: *mut c_void,
    handle: u64,
    htype: c_int,
    flags: u64,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut c_void, u64, c_int, u64) -> CUresult;
    let f = real_or!(S::cuMemExportToShareableHandle, F);
    let r = f(shh, handle, htype, flags);
    if r == CUDA_SUCCESS {
        crate::vmm::exported(handle);
    }
    r
}
