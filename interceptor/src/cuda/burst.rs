//! Burstable slices: cuMemAlloc past the guarantee becomes memory the
//! driver can take back, and an allocation within a guarantee that the
//! driver refused while bursters share the GPU waits for the host to end
//! them.
//!
//! Past the guarantee, up to the limit, `cuMemAlloc_v2` is made as
//! managed memory (`CU_MEM_ATTACH_GLOBAL`) preferring the device and
//! prefetched there: it runs at device-memory speed while resident, and
//! when another container's ordinary allocation needs the room, the driver
//! moves these pages to host memory instead of failing it (measured on the
//! H200: docs/burst.md). A burst is lent only from memory the GPU really
//! has free at that moment: lending it from another burster by
//! oversubscribing would only move the eviction between bursters.
use super::*;

/// `CU_MEM_ATTACH_GLOBAL`.
const ATTACH_GLOBAL: c_uint = 1;
/// `CU_MEM_ADVISE_SET_PREFERRED_LOCATION`.
const ADVISE_PREFERRED_LOCATION: c_int = 3;
/// How often a waiting allocation asks the driver again.
const RETRY_MS: u64 = 20;

/// cuMemAlloc_v2 in a container with a burstable slice.
#[cold]
pub(super) unsafe fn alloc(
    dptr: *mut CUdeviceptr,
    size: usize,
    f: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult,
) -> CUresult {
    let api = b"cuMemAlloc";
    let n = size as u64;
    let dev = select(DevSel::Current);
    let (ch, tier) = match ACCT.admit_tiered(api, dev, n) {
        Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
        Ok(None) => return f(dptr, size),
        Ok(Some(x)) => x,
    };
    let r = match tier {
        Tier::Guaranteed => reclaiming(api, dev, n, || f(dptr, size)),
        Tier::Burst => lend(dptr, size, dev),
    };
    if r != CUDA_SUCCESS {
        ch.rollback();
        return r;
    }
    record(ch, KIND_DPTR, Some(*dptr), |k| free_dptr(k), r)
}

/// A program's own managed memory in a container with a burstable slice:
/// evictable already, so past the guarantee it is a burst as it is.
#[cold]
pub(super) unsafe fn managed(
    dptr: *mut CUdeviceptr,
    size: usize,
    call: impl Fn() -> CUresult,
) -> CUresult {
    let dev = select(DevSel::Current);
    let ch = match ACCT.admit_tiered(b"cuMemAllocManaged", dev, size as u64) {
        Err(Refused) => return CUDA_ERROR_OUT_OF_MEMORY,
        Ok(None) => return call(),
        Ok(Some((ch, _))) => ch,
    };
    let r = call();
    if r != CUDA_SUCCESS {
        ch.rollback();
        return r;
    }
    record(ch, KIND_DPTR, Some(*dptr), |k| free_dptr(k), r)
}

/// Make `size` bytes of lent memory on `dev`, if the GPU has them free.
unsafe fn lend(dptr: *mut CUdeviceptr, size: usize, dev: Dev) -> CUresult {
    type Info = unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult;
    type Managed = unsafe extern "C" fn(*mut CUdeviceptr, usize, c_uint) -> CUresult;
    type Advise = unsafe extern "C" fn(CUdeviceptr, usize, c_int, c_int) -> CUresult;
    type Prefetch = unsafe extern "C" fn(CUdeviceptr, usize, c_int, CUstream) -> CUresult;
    let (Some(info), Some(managed)) = (
        real_fn!(S::cuMemGetInfo_v2, Info),
        real_fn!(S::cuMemAllocManaged, Managed),
    ) else {
        return CUDA_ERROR_OUT_OF_MEMORY;
    };
    let (mut free, mut total) = (0usize, 0usize);
    if info(&mut free, &mut total) != CUDA_SUCCESS || free < size {
        crate::msg::burst_no_room(size as u64, free as u64, dev.ordinal);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let r = managed(dptr, size, ATTACH_GLOBAL);
    if r != CUDA_SUCCESS {
        return r;
    }
    let p = *dptr;
    if let Some(advise) = real_fn!(S::cuMemAdvise, Advise) {
        advise(p, size, ADVISE_PREFERRED_LOCATION, dev.ordinal);
    }
    // placing the pages now keeps the first kernel at device speed; during
    // a capture a prefetch would be recorded or invalidate it, and the
    // first touch places them on the preferred device anyway
    if !crate::capture::any() {
        if let Some(prefetch) = real_fn!(S::cuMemPrefetchAsync, Prefetch) {
            prefetch(p, size, dev.ordinal, core::ptr::null_mut());
        }
    }
    CUDA_SUCCESS
}

/// Call an allocation within the guarantee; when the driver refuses it and
/// the host says bursters share the GPU (the grant's reclaim word), mark
/// the wait in the usage file, where the host's burst supervisor sees it
/// and ends bursters in order, and ask again until the wait the host
/// allows has passed. Elsewhere the driver's answer is final at once.
#[inline]
pub(super) unsafe fn reclaiming(
    api: &[u8],
    dev: Dev,
    n: u64,
    mut call: impl FnMut() -> CUresult,
) -> CUresult {
    let r = call();
    if r != CUDA_ERROR_OUT_OF_MEMORY || dev.idx == UNTRACKED {
        return r;
    }
    wait_for_reclaim(api, dev, n, &mut call, r)
}

#[cold]
unsafe fn wait_for_reclaim(
    api: &[u8],
    dev: Dev,
    n: u64,
    call: &mut dyn FnMut() -> CUresult,
    first: CUresult,
) -> CUresult {
    let wait = account::reclaim_wait_ms(dev.idx);
    let Some(region) = state::region() else {
        return first;
    };
    // during a stream capture the driver may be asked nothing more than the
    // program asked: the refusal stands
    if wait == 0 || crate::capture::any() {
        return first;
    }
    let start = crate::sys::monotonic_ns() / 1_000_000;
    region.set_reclaim_want(dev.idx, n, start.max(1));
    let mut r = first;
    loop {
        let now = crate::sys::monotonic_ns() / 1_000_000;
        if now.saturating_sub(start) >= wait {
            break;
        }
        crate::sys::sleep_ms(RETRY_MS);
        r = call();
        if r != CUDA_ERROR_OUT_OF_MEMORY {
            break;
        }
    }
    region.set_reclaim_want(dev.idx, 0, 0);
    let waited = (crate::sys::monotonic_ns() / 1_000_000).saturating_sub(start);
    if r == CUDA_SUCCESS {
        region.count_reclaim_wait(waited);
    } else {
        crate::msg::reclaim_failed(api, n, dev.ordinal, waited);
    }
    r
}
