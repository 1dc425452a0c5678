//! Stream-ordered allocation (cuMemAllocAsync, pools) and the synchronisation
//! points that settle pool usage; the bookkeeping is crate::pools.
use super::*;

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
