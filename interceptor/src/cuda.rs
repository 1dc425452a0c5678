//! CUDA driver API wrappers. Each is exported (direct-link interposition)
//! and handed out by the dlsym / cuGetProcAddress paths.
//!
//! Producers reserve before the driver call and roll back when it fails;
//! frees always reach the driver and release only after it succeeded.

use crate::account::{self, Charge, Dev, DevSel, UNTRACKED};
use crate::ptrtable::{KIND_ARRAY, KIND_DPTR, KIND_MIPMAP, KIND_POOLPTR, KIND_VMM};
use crate::state::{self, config, TABLE};
use crate::symbols::{real_fn, S};
use core::sync::atomic::Ordering::*;
use libc::{c_int, c_uint, c_void};

pub type CUresult = c_int;
pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;

type CUstream = *mut c_void;
type CUdeviceptr = u64;

macro_rules! real_or {
    ($s:expr, $t:ty) => {
        match real_fn!($s, $t) {
            Some(f) => f,
            None => return CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}

/// Common shape of a charged producer.
#[inline(always)]
unsafe fn produce(
    api: &[u8],
    sel: DevSel,
    n: u64,
    kind: u32,
    call: impl FnOnce() -> CUresult,
    key: impl FnOnce() -> Option<u64>,
    undo: impl FnOnce(u64),
) -> CUresult {
    let enforce = match config() {
        Some(c) => c.enforce,
        None => false,
    };
    if !enforce {
        return call();
    }
    let dev = account::select(sel);
    let ch = match account::admit(api, dev, n) {
        Ok(c) => c,
        Err(()) => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let r = call();
    let ch = match ch {
        Some(c) => c,
        None => return r,
    };
    if r != CUDA_SUCCESS {
        ch.rollback();
        return r;
    }
    record(ch, kind, key(), undo, r)
}

#[inline(always)]
fn record(
    ch: Charge,
    kind: u32,
    key: Option<u64>,
    undo: impl FnOnce(u64),
    r: CUresult,
) -> CUresult {
    match key {
        Some(k) => {
            if TABLE.insert(k, kind, ch.n, ch.dev.idx as u32) {
                r
            } else {
                // cannot remember it, so cannot release it later: give it back
                undo(k);
                ch.rollback();
                CUDA_ERROR_OUT_OF_MEMORY
            }
        }
        None => {
            ch.rollback();
            r
        }
    }
}

/// Arguments the driver rejects (issue 17 §3): they reach the driver first,
/// uncharged, so the program gets the driver's own answer and not a
/// refusal; should the driver accept them after all, the charge follows
/// (refused: the allocation is undone and the answer is OUT_OF_MEMORY).
#[cold]
unsafe fn driver_first(
    api: &[u8],
    sel: DevSel,
    n: u64,
    kind: u32,
    call: impl FnOnce() -> CUresult,
    key: impl FnOnce() -> Option<u64>,
    undo: impl FnOnce(u64),
) -> CUresult {
    let r = call();
    if r != CUDA_SUCCESS || !config().map(|c| c.enforce).unwrap_or(false) {
        return r;
    }
    let k = key();
    match account::admit(api, account::select(sel), n) {
        Ok(Some(ch)) => record(ch, kind, k, undo, r),
        Ok(None) => r,
        Err(()) => {
            if let Some(k) = k {
                undo(k);
            }
            CUDA_ERROR_OUT_OF_MEMORY
        }
    }
}

/// A device attribute of an ordinal, cached (0: unknown).
fn dev_attr_cached(cache: &[core::sync::atomic::AtomicU64; 64], attr: c_int, ordinal: c_int) -> u64 {
    let slot = match cache.get(ordinal.clamp(0, 63) as usize) {
        Some(s) => s,
        None => return 0,
    };
    let v = slot.load(Relaxed);
    if v != 0 {
        return v;
    }
    type F = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CUresult;
    let mut x: c_int = 0;
    match real_fn!(S::cuDeviceGetAttribute, F) {
        Some(f) if unsafe { f(&mut x, attr, ordinal) } == CUDA_SUCCESS && x > 0 => {
            slot.store(x as u64, Relaxed);
            x as u64
        }
        _ => 0,
    }
}

/// Common shape of a free: forget, call the driver, release on success
/// (restore the record if the driver refused).
#[inline(always)]
fn consume(k: u64, kind: u32, call: impl FnOnce() -> CUresult) -> CUresult {
    let rec = TABLE.remove(k, kind);
    let r = call();
    if let Some(rec) = rec {
        if r == CUDA_SUCCESS {
            account::release(rec);
        } else {
            TABLE.insert(k, kind, rec.size, rec.dev);
        }
    }
    r
}

/// A device-pointer free: a plain record, or a stream-ordered one (whose
/// memory stays in its pool).
#[inline(always)]
fn free_ptr(k: u64, call: impl FnOnce() -> CUresult) -> CUresult {
    let rec = TABLE.remove(k, KIND_DPTR);
    if rec.is_none() && crate::pools::USED.load(Relaxed) != 0 {
        if let Some(pr) = TABLE.remove(k, KIND_POOLPTR) {
            let r = call();
            if r == CUDA_SUCCESS {
                crate::pools::freed(pr);
            } else {
                TABLE.insert(k, KIND_POOLPTR, pr.size, pr.dev);
            }
            return r;
        }
    }
    let r = call();
    if let Some(rec) = rec {
        if r == CUDA_SUCCESS {
            account::release(rec);
        } else {
            TABLE.insert(k, KIND_DPTR, rec.size, rec.dev);
        }
    }
    r
}

unsafe fn free_dptr(p: u64) {
    type F = unsafe extern "C" fn(CUdeviceptr) -> CUresult;
    if let Some(f) = real_fn!(S::cuMemFree_v2, F) {
        f(p);
    }
}

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
    let dev = account::current_dev_charged();
    // what the driver rejects reaches it (issue 17 §3): no output pointers,
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
                    match account::admit(api, dev, n) {
                        Ok(Some(ch)) => return record(ch, KIND_DPTR, Some(p), |k| free_dptr(k), r),
                        Ok(None) => return r,
                        Err(()) => {
                            free_dptr(p);
                            return CUDA_ERROR_OUT_OF_MEMORY;
                        }
                    }
                }
            }
            return r;
        }
    };
    let mut ch = match account::admit(api, dev, est) {
        Ok(Some(c)) => c,
        Ok(None) => return call(),
        Err(()) => return CUDA_ERROR_OUT_OF_MEMORY,
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
        if ch.grow(api, actual - ch.n).is_err() {
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
/// it can all become resident there).
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

// ------------------------------------------------------------ async / pools

type AllocAsync = unsafe extern "C" fn(*mut CUdeviceptr, usize, CUstream) -> CUresult;
type AllocFromPool =
    unsafe extern "C" fn(*mut CUdeviceptr, usize, *mut c_void, CUstream) -> CUresult;
type FreeAsync = unsafe extern "C" fn(CUdeviceptr, CUstream) -> CUresult;

#[inline(always)]
unsafe fn alloc_async(f: AllocAsync, dptr: *mut CUdeviceptr, size: usize, s: CUstream) -> CUresult {
    crate::pools::alloc_async(size as u64, dptr, s, || f(dptr, size, s))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    size: usize,
    s: CUstream,
) -> CUresult {
    alloc_async(real_or!(S::cuMemAllocAsync, AllocAsync), dptr, size, s)
}
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    size: usize,
    s: CUstream,
) -> CUresult {
    alloc_async(real_or!(S::cuMemAllocAsync_ptsz, AllocAsync), dptr, size, s)
}

#[inline(always)]
unsafe fn alloc_pool(
    f: AllocFromPool,
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: *mut c_void,
    s: CUstream,
) -> CUresult {
    crate::pools::alloc_from_pool(size as u64, dptr, pool, s, || f(dptr, size, pool, s))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: *mut c_void,
    s: CUstream,
) -> CUresult {
    alloc_pool(
        real_or!(S::cuMemAllocFromPoolAsync, AllocFromPool),
        dptr,
        size,
        pool,
        s,
    )
}
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: *mut c_void,
    s: CUstream,
) -> CUresult {
    alloc_pool(
        real_or!(S::cuMemAllocFromPoolAsync_ptsz, AllocFromPool),
        dptr,
        size,
        pool,
        s,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(p: CUdeviceptr, s: CUstream) -> CUresult {
    let f = real_or!(S::cuMemFreeAsync, FreeAsync);
    free_ptr(p, || f(p, s))
}
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(p: CUdeviceptr, s: CUstream) -> CUresult {
    let f = real_or!(S::cuMemFreeAsync_ptsz, FreeAsync);
    free_ptr(p, || f(p, s))
}

// ------------------------------------------------------------ VMM

const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;

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
    if handle.is_null() || size == 0 || flags != 0 || (gran != 0 && size as u64 % gran != 0) {
        let r = driver_first(
            b"cuMemCreate",
            DevSel::Ordinal(ord),
            size as u64,
            KIND_VMM,
            || f(handle, size, prop, flags),
            || if handle.is_null() { None } else { Some(*handle) },
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
    let slot = GRAN.get(p.loc_id.clamp(0, 63) as usize * 16 + (p.requested_handle_types & 15) as usize);
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

// ------------------------------------------------------------ pools

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: *mut c_void, keep: usize) -> CUresult {
    type F = unsafe extern "C" fn(*mut c_void, usize) -> CUresult;
    let f = real_or!(S::cuMemPoolTrimTo, F);
    let r = f(pool, keep);
    if r == CUDA_SUCCESS {
        crate::pools::trimmed(pool as u64);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut *mut c_void, props: *const u8) -> CUresult {
    type F = unsafe extern "C" fn(*mut *mut c_void, *const u8) -> CUresult;
    let f = real_or!(S::cuMemPoolCreate, F);
    let r = f(pool, props);
    if r == CUDA_SUCCESS && !pool.is_null() && !props.is_null() {
        // CUmemPoolProps: allocType, handleTypes, location {type, id}
        let loc_type = *(props.add(8) as *const c_int);
        let loc_id = *(props.add(12) as *const c_int);
        if loc_type == CU_MEM_LOCATION_TYPE_DEVICE {
            crate::pools::created(*pool as u64, loc_id);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: *mut c_void) -> CUresult {
    type F = unsafe extern "C" fn(*mut c_void) -> CUresult;
    let f = real_or!(S::cuMemPoolDestroy, F);
    let r = f(pool);
    if r == CUDA_SUCCESS {
        crate::pools::destroyed(pool as u64);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: c_int, pool: *mut c_void) -> CUresult {
    type F = unsafe extern "C" fn(c_int, *mut c_void) -> CUresult;
    let f = real_or!(S::cuDeviceSetMemPool, F);
    let r = f(dev, pool);
    if r == CUDA_SUCCESS {
        crate::pools::set_current(dev, pool as u64);
    }
    r
}

// Synchronisation points: where the driver gives pool memory above the
// release threshold back. One relaxed load unless a pool was freed into.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(s: CUstream) -> CUresult {
    let f = real_or!(
        S::cuStreamSynchronize,
        unsafe extern "C" fn(CUstream) -> CUresult
    );
    let r = f(s);
    at_sync();
    r
}
#[inline(always)]
fn at_sync() {
    crate::pools::at_sync();
    crate::graphs::at_sync();
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(s: CUstream) -> CUresult {
    let f = real_or!(
        S::cuStreamSynchronize_ptsz,
        unsafe extern "C" fn(CUstream) -> CUresult
    );
    let r = f(s);
    at_sync();
    r
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    let f = real_or!(S::cuCtxSynchronize, unsafe extern "C" fn() -> CUresult);
    let r = f();
    at_sync();
    r
}
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(e: *mut c_void) -> CUresult {
    let f = real_or!(
        S::cuEventSynchronize,
        unsafe extern "C" fn(*mut c_void) -> CUresult
    );
    let r = f(e);
    at_sync();
    r
}

// ------------------------------------------------------------ arrays

#[repr(C)]
pub struct ArrayDesc {
    pub width: usize,
    pub height: usize,
    pub format: c_uint,
    pub channels: c_uint,
}
#[repr(C)]
pub struct ArrayDescV1 {
    pub width: c_uint,
    pub height: c_uint,
    pub format: c_uint,
    pub channels: c_uint,
}
#[repr(C)]
pub struct Array3DDesc {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: c_uint,
    pub channels: c_uint,
    pub flags: c_uint,
}
#[repr(C)]
pub struct Array3DDescV1 {
    pub width: c_uint,
    pub height: c_uint,
    pub depth: c_uint,
    pub format: c_uint,
    pub channels: c_uint,
    pub flags: c_uint,
}

/// Bytes per channel of a CUarray_format (4 for anything unknown).
pub fn format_bytes(f: c_uint) -> u64 {
    match f {
        0x01 | 0x08 => 1,        // (UN)SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // INT32, FLOAT
        0xb0 => 2,               // NV12 (1.5, rounded up)
        0xc0..=0xc2 | 0xc6..=0xc8 => 1,
        0xc3..=0xc5 | 0xc9..=0xcb => 2,
        0x91..=0x9e => 1, // block-compressed: <= 1 byte/texel
        _ => 4,
    }
}

const ARRAY_ROUND: u64 = 64 << 10;

pub fn array_bytes(w: u64, h: u64, d: u64, format: c_uint, channels: c_uint) -> u64 {
    let texels = w.max(1).saturating_mul(h.max(1)).saturating_mul(d.max(1));
    let b = texels
        .saturating_mul(format_bytes(format))
        .saturating_mul((channels as u64).max(1));
    b.div_ceil(ARRAY_ROUND).saturating_mul(ARRAY_ROUND)
}

const CUDA_ARRAY3D_LAYERED: c_uint = 0x01;
const CUDA_ARRAY3D_CUBEMAP: c_uint = 0x04;

pub fn mipmap_bytes(
    w: u64,
    h: u64,
    d: u64,
    format: c_uint,
    channels: c_uint,
    flags: c_uint,
    levels: u32,
) -> u64 {
    let layered = flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) != 0;
    let mut total: u64 = 0;
    for l in 0..levels.clamp(1, 64) {
        let lw = (w >> l).max(1);
        let lh = if h == 0 { 0 } else { (h >> l).max(1) };
        let ld = if d == 0 || layered {
            d
        } else {
            (d >> l).max(1)
        };
        let texels = lw.saturating_mul(lh.max(1)).saturating_mul(ld.max(1));
        total = total.saturating_add(
            texels
                .saturating_mul(format_bytes(format))
                .saturating_mul((channels as u64).max(1)),
        );
        if lw == 1 && lh <= 1 && (ld <= 1 || layered) {
            break;
        }
    }
    total.div_ceil(ARRAY_ROUND).saturating_mul(ARRAY_ROUND)
}

type Handle = *mut c_void;

unsafe fn destroy_array(k: u64) {
    type F = unsafe extern "C" fn(Handle) -> CUresult;
    if let Some(f) = real_fn!(S::cuArrayDestroy, F) {
        f(k as Handle);
    }
}

/// NumChannels of an array descriptor: 1, 2 or 4 (else the driver says
/// INVALID_VALUE).
fn channels_ok(c: c_uint) -> bool {
    matches!(c, 1 | 2 | 4)
}

/// An array producer: charge the descriptor's estimated size (a NULL
/// descriptor goes straight to the driver, which reports the error).
unsafe fn create_array<D>(
    api: &[u8],
    h: *mut Handle,
    d: *const D,
    call: impl FnOnce(*mut Handle, *const D) -> CUresult,
    bytes: impl Fn(&D) -> u64,
    valid: impl FnOnce(&D) -> bool,
) -> CUresult {
    if d.is_null() || h.is_null() {
        return call(h, d);
    }
    if !valid(&*d) {
        // e.g. 3 channels: the driver's INVALID_VALUE, not a refusal
        return driver_first(
            api,
            DevSel::Current,
            bytes(&*d),
            KIND_ARRAY,
            || call(h, d),
            || Some(*h as u64),
            |k| destroy_array(k),
        );
    }
    produce(
        api,
        DevSel::Current,
        bytes(&*d),
        KIND_ARRAY,
        || call(h, d),
        || if h.is_null() { None } else { Some(*h as u64) },
        |k| destroy_array(k),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate_v2(h: *mut Handle, d: *const ArrayDesc) -> CUresult {
    let f = real_or!(
        S::cuArrayCreate_v2,
        unsafe extern "C" fn(*mut Handle, *const ArrayDesc) -> CUresult
    );
    create_array(
        b"cuArrayCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| array_bytes(d.width as u64, d.height as u64, 1, d.format, d.channels),
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate(h: *mut Handle, d: *const ArrayDescV1) -> CUresult {
    let f = real_or!(
        S::cuArrayCreate,
        unsafe extern "C" fn(*mut Handle, *const ArrayDescV1) -> CUresult
    );
    create_array(
        b"cuArrayCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| array_bytes(d.width as u64, d.height as u64, 1, d.format, d.channels),
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate_v2(h: *mut Handle, d: *const Array3DDesc) -> CUresult {
    let f = real_or!(
        S::cuArray3DCreate_v2,
        unsafe extern "C" fn(*mut Handle, *const Array3DDesc) -> CUresult
    );
    create_array(
        b"cuArray3DCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| {
            array_bytes(
                d.width as u64,
                d.height as u64,
                d.depth as u64,
                d.format,
                d.channels,
            )
        },
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate(h: *mut Handle, d: *const Array3DDescV1) -> CUresult {
    let f = real_or!(
        S::cuArray3DCreate,
        unsafe extern "C" fn(*mut Handle, *const Array3DDescV1) -> CUresult
    );
    create_array(
        b"cuArray3DCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| {
            array_bytes(
                d.width as u64,
                d.height as u64,
                d.depth as u64,
                d.format,
                d.channels,
            )
        },
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayDestroy(h: Handle) -> CUresult {
    let f = real_or!(S::cuArrayDestroy, unsafe extern "C" fn(Handle) -> CUresult);
    consume(h as u64, KIND_ARRAY, || f(h))
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    h: *mut Handle,
    d: *const Array3DDesc,
    levels: c_uint,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut Handle, *const Array3DDesc, c_uint) -> CUresult;
    let f = real_or!(S::cuMipmappedArrayCreate, F);
    if d.is_null() {
        return f(h, d, levels);
    }
    let n = mipmap_bytes(
        (*d).width as u64,
        (*d).height as u64,
        (*d).depth as u64,
        (*d).format,
        (*d).channels,
        (*d).flags,
        levels,
    );
    let undo = |k: u64| {
        type D = unsafe extern "C" fn(Handle) -> CUresult;
        if let Some(g) = real_fn!(S::cuMipmappedArrayDestroy, D) {
            g(k as Handle);
        }
    };
    if levels == 0 || h.is_null() || !channels_ok((*d).channels) {
        return driver_first(
            b"cuMipmappedArrayCreate",
            DevSel::Current,
            n,
            KIND_MIPMAP,
            || f(h, d, levels),
            || if h.is_null() { None } else { Some(*h as u64) },
            undo,
        );
    }
    produce(
        b"cuMipmappedArrayCreate",
        DevSel::Current,
        n,
        KIND_MIPMAP,
        || f(h, d, levels),
        || if h.is_null() { None } else { Some(*h as u64) },
        |k| {
            type D = unsafe extern "C" fn(Handle) -> CUresult;
            if let Some(g) = real_fn!(S::cuMipmappedArrayDestroy, D) {
                g(k as Handle);
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayDestroy(h: Handle) -> CUresult {
    let f = real_or!(
        S::cuMipmappedArrayDestroy,
        unsafe extern "C" fn(Handle) -> CUresult
    );
    consume(h as u64, KIND_MIPMAP, || f(h))
}

// ------------------------------------------------------------ reporting

/// (slice, free) to report for a device given the real numbers.
fn report(dev: Dev, real_free: u64, real_total: u64) -> Option<(u64, u64)> {
    let c = config()?;
    if !c.enforce || dev.idx == UNTRACKED {
        return None;
    }
    let limit = state::limit_for(c, dev.idx, &|| Some(real_total));
    let slice = limit.min(real_total);
    let used = match state::region() {
        Some(r) => {
            account::ensure_ctx_charged(&r, dev);
            account::container_used(&r, dev.idx)
        }
        None if state::failed_closed() => slice,
        None => 0,
    };
    Some((slice, slice.saturating_sub(used).min(real_free)))
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
    if free.is_null() || total.is_null() {
        if f(&mut rf, &mut rt) != CUDA_SUCCESS {
            return r;
        }
    }
    if !free.is_null() {
        rf = *free;
    }
    if !total.is_null() {
        rt = *total;
    }
    if let Some((slice, fr)) = report(account::current_dev(), rf as u64, rt as u64) {
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
    if let Some((slice, fr)) = report(account::current_dev(), rf as u64, rt as u64) {
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
    if let Some((slice, _)) = report(
        account::select(DevSel::Ordinal(dev)),
        u64::MAX,
        *bytes as u64,
    ) {
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
    let rt = account::real_total(dev).unwrap_or(*bytes as u64);
    if let Some((slice, _)) = report(account::select(DevSel::Ordinal(dev)), u64::MAX, rt) {
        *bytes = slice.min(c_uint::MAX as u64) as c_uint;
    }
    r
}

// ------------------------------------------------------------ contexts

/// Context overhead: charged once per process and device on the first
/// successful context creation / primary-context retain (0 = off).
#[inline(always)]
unsafe fn with_ctx_charge(api: &[u8], ordinal: c_int, call: impl FnOnce() -> CUresult) -> CUresult {
    let ov = match config() {
        Some(c) if c.enforce => c.ctx_overhead,
        _ => 0,
    };
    if ov == 0 {
        return call();
    }
    let dev = account::select(DevSel::Ordinal(ordinal));
    if dev.idx == UNTRACKED {
        return call();
    }
    let flag = &state::CTX_CHARGED[dev.idx];
    if flag.compare_exchange(0, 1, AcqRel, Acquire).is_err() {
        return call();
    }
    let ch = match account::admit(api, dev, ov) {
        Ok(c) => c,
        Err(()) => {
            flag.store(0, Release);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    };
    let r = call();
    if r != CUDA_SUCCESS {
        if let Some(c) = ch {
            c.rollback();
        }
        flag.store(0, Release);
    }
    r
}

type Ctx = *mut c_void;

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut Ctx, flags: c_uint, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuCtxCreate_v2,
        unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> CUresult
    );
    with_ctx_charge(b"cuCtxCreate (context overhead)", dev, || {
        f(pctx, flags, dev)
    })
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(pctx: *mut Ctx, flags: c_uint, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuCtxCreate,
        unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> CUresult
    );
    with_ctx_charge(b"cuCtxCreate (context overhead)", dev, || {
        f(pctx, flags, dev)
    })
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut Ctx,
    params: *mut c_void,
    n: c_int,
    flags: c_uint,
    dev: c_int,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut Ctx, *mut c_void, c_int, c_uint, c_int) -> CUresult;
    let f = real_or!(S::cuCtxCreate_v3, F);
    with_ctx_charge(b"cuCtxCreate (context overhead)", dev, || {
        f(pctx, params, n, flags, dev)
    })
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut Ctx,
    params: *mut c_void,
    flags: c_uint,
    dev: c_int,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut Ctx, *mut c_void, c_uint, c_int) -> CUresult;
    let f = real_or!(S::cuCtxCreate_v4, F);
    with_ctx_charge(b"cuCtxCreate (context overhead)", dev, || {
        f(pctx, params, flags, dev)
    })
}
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Ctx, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDevicePrimaryCtxRetain,
        unsafe extern "C" fn(*mut Ctx, c_int) -> CUresult
    );
    with_ctx_charge(b"cuDevicePrimaryCtxRetain (context overhead)", dev, || {
        f(pctx, dev)
    })
}

// ------------------------------------------------------------ graphs

/// Graph memory nodes: admission check only (the bytes must fit in what is
/// left now); the graph's pool is not charged. See docs/interceptor.md.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemAllocNode(
    node: *mut *mut c_void,
    graph: *mut c_void,
    deps: *const *mut c_void,
    ndeps: usize,
    params: *mut u8,
) -> CUresult {
    type F = unsafe extern "C" fn(
        *mut *mut c_void,
        *mut c_void,
        *const *mut c_void,
        usize,
        *mut u8,
    ) -> CUresult;
    let f = real_or!(S::cuGraphAddMemAllocNode, F);
    if !params.is_null() && config().map(|c| c.enforce).unwrap_or(false) {
        crate::graphs::note();
        // CUDA_MEM_ALLOC_NODE_PARAMS: poolProps.location at 8/12, bytesize at 104
        let loc_type = *(params.add(8) as *const c_int);
        let loc_id = *(params.add(12) as *const c_int);
        let bytes = *(params.add(104) as *const usize) as u64;
        if loc_type == CU_MEM_LOCATION_TYPE_DEVICE
            && !account::fits(
                b"cuGraphAddMemAllocNode",
                account::select(DevSel::Ordinal(loc_id)),
                bytes,
            )
        {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    f(node, graph, deps, ndeps, params)
}

// ------------------------------------------------------------ context lifetimes

/// cuCtxDestroy: every allocation of the context goes with it.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: Ctx) -> CUresult {
    let f = real_or!(S::cuCtxDestroy_v2, unsafe extern "C" fn(Ctx) -> CUresult);
    ctx_destroy(ctx, || f(ctx))
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy(ctx: Ctx) -> CUresult {
    let f = real_or!(S::cuCtxDestroy, unsafe extern "C" fn(Ctx) -> CUresult);
    ctx_destroy(ctx, || f(ctx))
}
unsafe fn ctx_destroy(ctx: Ctx, call: impl FnOnce() -> CUresult) -> CUresult {
    let enforce = config().map(|c| c.enforce).unwrap_or(false);
    let dev = if enforce {
        crate::ctxlife::ctx_device(ctx)
    } else {
        None
    };
    let r = call();
    if r == CUDA_SUCCESS && enforce {
        crate::ctxlife::context_gone(dev);
    }
    r
}

/// cuDevicePrimaryCtxReset: frees every allocation of the primary context.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDevicePrimaryCtxReset_v2,
        unsafe extern "C" fn(c_int) -> CUresult
    );
    let r = f(dev);
    if r == CUDA_SUCCESS {
        crate::ctxlife::context_gone(Some(dev));
    }
    r
}
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDevicePrimaryCtxReset,
        unsafe extern "C" fn(c_int) -> CUresult
    );
    let r = f(dev);
    if r == CUDA_SUCCESS {
        crate::ctxlife::context_gone(Some(dev));
    }
    r
}

/// The last release of the primary context destroys it (and its memory).
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDevicePrimaryCtxRelease_v2,
        unsafe extern "C" fn(c_int) -> CUresult
    );
    let r = f(dev);
    if r == CUDA_SUCCESS && !crate::ctxlife::primary_active(dev) {
        crate::ctxlife::context_gone(Some(dev));
    }
    r
}
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDevicePrimaryCtxRelease,
        unsafe extern "C" fn(c_int) -> CUresult
    );
    let r = f(dev);
    if r == CUDA_SUCCESS && !crate::ctxlife::primary_active(dev) {
        crate::ctxlife::context_gone(Some(dev));
    }
    r
}

/// cuCtxSetLimit: the device malloc heap and the thread stacks are charged
/// above their defaults.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CUresult {
    let f = real_or!(
        S::cuCtxSetLimit,
        unsafe extern "C" fn(c_int, usize) -> CUresult
    );
    if limit != crate::ctxlife::CU_LIMIT_MALLOC_HEAP_SIZE
        && limit != crate::ctxlife::CU_LIMIT_STACK_SIZE
    {
        return f(limit, value);
    }
    crate::ctxlife::set_limit(limit, value, || f(limit, value))
}

// ------------------------------------------------------------ graph memory

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    flags: u64,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u64) -> CUresult;
    let f = real_or!(S::cuGraphInstantiateWithFlags, F);
    crate::graphs::note();
    f(exec, graph, flags)
}
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    params: *mut c_void,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_void) -> CUresult;
    let f = real_or!(S::cuGraphInstantiateWithParams, F);
    crate::graphs::note();
    f(exec, graph, params)
}
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    err_node: *mut *mut c_void,
    log: *mut libc::c_char,
    log_size: usize,
) -> CUresult {
    type F = unsafe extern "C" fn(
        *mut *mut c_void,
        *mut c_void,
        *mut *mut c_void,
        *mut libc::c_char,
        usize,
    ) -> CUresult;
    let f = real_or!(S::cuGraphInstantiate_v2, F);
    crate::graphs::note();
    f(exec, graph, err_node, log, log_size)
}
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGraphMemTrim(dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDeviceGraphMemTrim,
        unsafe extern "C" fn(c_int) -> CUresult
    );
    let r = f(dev);
    if r == CUDA_SUCCESS {
        crate::graphs::refresh_all();
    }
    r
}

// ------------------------------------------------------------ stream capture (capture.rs)

type BeginV1 = unsafe extern "C" fn(CUstream) -> CUresult;
type BeginV2 = unsafe extern "C" fn(CUstream, c_int) -> CUresult;
type BeginToGraph = unsafe extern "C" fn(
    CUstream,
    *mut c_void,
    *const *mut c_void,
    *const c_void,
    usize,
    c_int,
) -> CUresult;
type EndCapture = unsafe extern "C" fn(CUstream, *mut *mut c_void) -> CUresult;
type Launch = unsafe extern "C" fn(*mut c_void, CUstream) -> CUresult;

#[inline(always)]
fn began(s: CUstream, r: CUresult) -> CUresult {
    if r == CUDA_SUCCESS {
        crate::capture::began(s);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture(s: CUstream) -> CUresult {
    began(s, real_or!(S::cuStreamBeginCapture, BeginV1)(s))
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_ptsz(s: CUstream) -> CUresult {
    began(s, real_or!(S::cuStreamBeginCapture_ptsz, BeginV1)(s))
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(s: CUstream, mode: c_int) -> CUresult {
    began(s, real_or!(S::cuStreamBeginCapture_v2, BeginV2)(s, mode))
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2_ptsz(s: CUstream, mode: c_int) -> CUresult {
    began(s, real_or!(S::cuStreamBeginCapture_v2_ptsz, BeginV2)(s, mode))
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCaptureToGraph(
    s: CUstream,
    g: *mut c_void,
    deps: *const *mut c_void,
    edges: *const c_void,
    n: usize,
    mode: c_int,
) -> CUresult {
    let f = real_or!(S::cuStreamBeginCaptureToGraph, BeginToGraph);
    began(s, f(s, g, deps, edges, n, mode))
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCaptureToGraph_ptsz(
    s: CUstream,
    g: *mut c_void,
    deps: *const *mut c_void,
    edges: *const c_void,
    n: usize,
    mode: c_int,
) -> CUresult {
    let f = real_or!(S::cuStreamBeginCaptureToGraph_ptsz, BeginToGraph);
    began(s, f(s, g, deps, edges, n, mode))
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(s: CUstream, g: *mut *mut c_void) -> CUresult {
    let r = real_or!(S::cuStreamEndCapture, EndCapture)(s, g);
    crate::capture::end_called(s);
    r
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture_ptsz(s: CUstream, g: *mut *mut c_void) -> CUresult {
    let r = real_or!(S::cuStreamEndCapture_ptsz, EndCapture)(s, g);
    crate::capture::end_called(s);
    r
}

/// cuGraphLaunch: the graph pool reserves the graph's memory now; the
/// charge follows it at once (a launch into a capturing stream is a node).
#[inline(always)]
unsafe fn launch(f: Launch, e: *mut c_void, s: CUstream) -> CUresult {
    let r = f(e, s);
    if r == CUDA_SUCCESS {
        crate::graphs::launched();
    }
    r
}
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(e: *mut c_void, s: CUstream) -> CUresult {
    launch(real_or!(S::cuGraphLaunch, Launch), e, s)
}
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(e: *mut c_void, s: CUstream) -> CUresult {
    launch(real_or!(S::cuGraphLaunch_ptsz, Launch), e, s)
}
