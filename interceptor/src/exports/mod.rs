//! The entry layer's table: for every intercepted symbol of
//! crate::symbols, the wrapper this library hands out (exported for direct
//! linking, returned by dlsym and cuGetProcAddress). It sits at the top:
//! it names the wrappers of every family (crate::cuda, crate::nvml, and
//! cuGetProcAddress here in gpa.rs); the dlsym entry is dlsym.rs.

use crate::symbols::{name_eq, NSYMS, S, SYMS};
use crate::sys::c_char;

mod dlsym;
mod gpa;

use crate::cuda as c;
use crate::nvml as n;
use gpa as g;

/// `wrappers!{ S::name => path; .. }`: the table indexed by symbol, checked
/// at compile time against crate::symbols (each intercepted symbol has a
/// wrapper, no helper has one, none is named twice).
macro_rules! wrappers {
    ( $( $id:ident => $f:path ; )* ) => {
        /// Our wrapper of each symbol; null for the helpers we only call.
        static WRAPPERS: Table = Table({
            let mut w = [core::ptr::null::<()>(); NSYMS];
            let mut seen = [false; NSYMS];
            $(
                assert!(!seen[S::$id as usize], "a symbol named twice");
                assert!(SYMS[S::$id as usize].wrapped, "a wrapper for a helper symbol");
                seen[S::$id as usize] = true;
                w[S::$id as usize] = $f as *const ();
            )*
            let mut i = 0;
            while i < NSYMS {
                assert!(seen[i] == SYMS[i].wrapped, "an intercepted symbol without a wrapper");
                i += 1;
            }
            w
        });
    };
}

struct Table([*const (); NSYMS]);
unsafe impl Sync for Table {}

wrappers! {
    cuInit => c::cuInit;
    cuMemAlloc => c::cuMemAlloc;
    cuMemAlloc_v2 => c::cuMemAlloc_v2;
    cuMemAllocPitch => c::cuMemAllocPitch;
    cuMemAllocPitch_v2 => c::cuMemAllocPitch_v2;
    cuMemFree => c::cuMemFree;
    cuMemFree_v2 => c::cuMemFree_v2;
    cuMemAllocManaged => c::cuMemAllocManaged;
    cuMemAllocAsync => c::cuMemAllocAsync;
    cuMemAllocAsync_ptsz => c::cuMemAllocAsync_ptsz;
    cuMemAllocFromPoolAsync => c::cuMemAllocFromPoolAsync;
    cuMemAllocFromPoolAsync_ptsz => c::cuMemAllocFromPoolAsync_ptsz;
    cuMemFreeAsync => c::cuMemFreeAsync;
    cuMemFreeAsync_ptsz => c::cuMemFreeAsync_ptsz;
    cuMemCreate => c::cuMemCreate;
    cuMemRelease => c::cuMemRelease;
    cuArrayCreate => c::cuArrayCreate;
    cuArrayCreate_v2 => c::cuArrayCreate_v2;
    cuArray3DCreate => c::cuArray3DCreate;
    cuArray3DCreate_v2 => c::cuArray3DCreate_v2;
    cuArrayDestroy => c::cuArrayDestroy;
    cuMipmappedArrayCreate => c::cuMipmappedArrayCreate;
    cuMipmappedArrayDestroy => c::cuMipmappedArrayDestroy;
    cuMemGetInfo => c::cuMemGetInfo;
    cuMemGetInfo_v2 => c::cuMemGetInfo_v2;
    cuDeviceTotalMem => c::cuDeviceTotalMem;
    cuDeviceTotalMem_v2 => c::cuDeviceTotalMem_v2;
    cuCtxCreate => c::cuCtxCreate;
    cuCtxCreate_v2 => c::cuCtxCreate_v2;
    cuCtxCreate_v3 => c::cuCtxCreate_v3;
    cuCtxCreate_v4 => c::cuCtxCreate_v4;
    cuDevicePrimaryCtxRetain => c::cuDevicePrimaryCtxRetain;
    cuGraphAddMemAllocNode => c::cuGraphAddMemAllocNode;
    cuGetProcAddress => g::cuGetProcAddress;
    cuGetProcAddress_v2 => g::cuGetProcAddress_v2;
    nvmlDeviceGetMemoryInfo => n::nvmlDeviceGetMemoryInfo;
    nvmlDeviceGetMemoryInfo_v2 => n::nvmlDeviceGetMemoryInfo_v2;
    cuMemMap => c::cuMemMap;
    cuMemUnmap => c::cuMemUnmap;
    cuMemRetainAllocationHandle => c::cuMemRetainAllocationHandle;
    cuMemExportToShareableHandle => c::cuMemExportToShareableHandle;
    cuMemPoolTrimTo => c::cuMemPoolTrimTo;
    cuMemPoolCreate => c::cuMemPoolCreate;
    cuDeviceSetMemPool => c::cuDeviceSetMemPool;
    cuMemPoolDestroy => c::cuMemPoolDestroy;
    cuStreamSynchronize => c::cuStreamSynchronize;
    cuStreamSynchronize_ptsz => c::cuStreamSynchronize_ptsz;
    cuCtxSynchronize => c::cuCtxSynchronize;
    cuEventSynchronize => c::cuEventSynchronize;
    cuCtxDestroy => c::cuCtxDestroy;
    cuCtxDestroy_v2 => c::cuCtxDestroy_v2;
    cuDevicePrimaryCtxReset => c::cuDevicePrimaryCtxReset;
    cuDevicePrimaryCtxReset_v2 => c::cuDevicePrimaryCtxReset_v2;
    cuDevicePrimaryCtxRelease => c::cuDevicePrimaryCtxRelease;
    cuDevicePrimaryCtxRelease_v2 => c::cuDevicePrimaryCtxRelease_v2;
    cuCtxSetLimit => c::cuCtxSetLimit;
    cuGraphInstantiateWithFlags => c::cuGraphInstantiateWithFlags;
    cuGraphInstantiateWithParams => c::cuGraphInstantiateWithParams;
    cuGraphInstantiate_v2 => c::cuGraphInstantiate_v2;
    cuDeviceGraphMemTrim => c::cuDeviceGraphMemTrim;
    cuStreamBeginCapture => c::cuStreamBeginCapture;
    cuStreamBeginCapture_ptsz => c::cuStreamBeginCapture_ptsz;
    cuStreamBeginCapture_v2 => c::cuStreamBeginCapture_v2;
    cuStreamBeginCapture_v2_ptsz => c::cuStreamBeginCapture_v2_ptsz;
    cuStreamBeginCaptureToGraph => c::cuStreamBeginCaptureToGraph;
    cuStreamBeginCaptureToGraph_ptsz => c::cuStreamBeginCaptureToGraph_ptsz;
    cuStreamEndCapture => c::cuStreamEndCapture;
    cuStreamEndCapture_ptsz => c::cuStreamEndCapture_ptsz;
    cuGraphLaunch => c::cuGraphLaunch;
    cuGraphLaunch_ptsz => c::cuGraphLaunch_ptsz;
}

/// The wrapper of symbol i (null: a helper).
#[inline]
pub fn wrapper(i: usize) -> *const () {
    WRAPPERS.0[i]
}

/// Is p one of our wrappers?
pub fn is_ours(p: usize) -> bool {
    p != 0 && WRAPPERS.0.iter().any(|&w| w as usize == p)
}

/// Find an intercepted (wrapped) symbol by exact exported name.
pub unsafe fn lookup_wrapped(name: *const c_char) -> Option<usize> {
    SYMS.iter().position(|s| s.wrapped && name_eq(name, s.name))
}
