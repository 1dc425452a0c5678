//! Graph memory nodes, graph instantiation and stream capture; the
//! bookkeeping is crate::graphs and crate::capture.
use super::*;

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
            && !ACCT.fits_after(
                b"cuGraphAddMemAllocNode",
                devices::of_ordinal(loc_id),
                bytes,
                0,
            )
        {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    f(node, graph, deps, ndeps, params)
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
    began(
        s,
        real_or!(S::cuStreamBeginCapture_v2_ptsz, BeginV2)(s, mode),
    )
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
