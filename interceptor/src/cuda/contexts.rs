//! Context creation (charged per context) and context lifetimes; the
//! bookkeeping is crate::ctxlife.
use super::*;

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
    // a slice smaller than one context: no CUDA program can run in it, and
    // the line should say so rather than describe a refused allocation
    if let Some(slice) = account::slice_below(dev, ov) {
        flag.store(0, Release);
        crate::msg::context_too_big(ov, slice, dev.ordinal);
        return CUDA_ERROR_OUT_OF_MEMORY;
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
