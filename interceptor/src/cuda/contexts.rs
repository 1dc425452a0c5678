//! Context creation (each context charged, crate::contexts) and context
//! lifetimes; the bookkeeping is crate::contexts.
use super::*;

// ------------------------------------------------------------ contexts

type Ctx = *mut c_void;

/// A context the process creates itself: charged until it is destroyed.
#[inline(always)]
unsafe fn created(dev: c_int, pctx: *mut Ctx, call: impl FnOnce() -> CUresult) -> CUresult {
    crate::contexts::create(b"cuCtxCreate (context)", dev, || {
        let r = call();
        let h = if r == CUDA_SUCCESS && !pctx.is_null() {
            *pctx as u64
        } else {
            0
        };
        (r, h)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut Ctx, flags: c_uint, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuCtxCreate_v2,
        unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> CUresult
    );
    created(dev, pctx, || f(pctx, flags, dev))
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(pctx: *mut Ctx, flags: c_uint, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuCtxCreate,
        unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> CUresult
    );
    created(dev, pctx, || f(pctx, flags, dev))
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
    created(dev, pctx, || f(pctx, params, n, flags, dev))
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
    created(dev, pctx, || f(pctx, params, flags, dev))
}
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Ctx, dev: c_int) -> CUresult {
    let f = real_or!(
        S::cuDevicePrimaryCtxRetain,
        unsafe extern "C" fn(*mut Ctx, c_int) -> CUresult
    );
    crate::contexts::retain_primary(b"cuDevicePrimaryCtxRetain (context overhead)", dev, || {
        f(pctx, dev)
    })
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
        crate::contexts::ctx_device(ctx)
    } else {
        None
    };
    let r = call();
    if r == CUDA_SUCCESS && enforce {
        crate::contexts::destroyed(ctx as u64);
        crate::contexts::context_gone(dev);
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
        crate::contexts::context_gone(Some(dev));
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
        crate::contexts::context_gone(Some(dev));
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
    if r == CUDA_SUCCESS && !crate::contexts::primary_active(dev) {
        crate::contexts::context_gone(Some(dev));
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
    if r == CUDA_SUCCESS && !crate::contexts::primary_active(dev) {
        crate::contexts::context_gone(Some(dev));
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
    if limit != crate::contexts::CU_LIMIT_MALLOC_HEAP_SIZE
        && limit != crate::contexts::CU_LIMIT_STACK_SIZE
    {
        return f(limit, value);
    }
    crate::contexts::set_limit(limit, value, || f(limit, value))
}
