//! The table of intercepted (and helper) driver symbols: exported name, the
//! base name cuGetProcAddress is asked for, the CUDA version that introduced
//! this variant, per-thread-stream flag, our wrapper, and the real pointer
//! (resolved once, lazily).

use crate::sys::{self, c_char, c_void};
use core::sync::atomic::{AtomicUsize, Ordering::*};

pub const LIB_CUDA: u8 = 0;
pub const LIB_NVML: u8 = 1;

pub struct Sym {
    /// NUL-terminated exported name
    pub name: &'static [u8],
    /// base name (no NUL) as passed to cuGetProcAddress
    pub base: &'static [u8],
    /// cudaVersion that introduced this variant (cuGetProcAddress mapping)
    pub ver: i32,
    pub ptsz: bool,
    pub lib: u8,
    /// our wrapper, null for helper symbols we only call
    pub wrapper: *const (),
}
unsafe impl Sync for Sym {}

macro_rules! symtab {
    ( $( $id:ident : $base:literal, $ver:expr, $ptsz:expr, $lib:expr, $wrap:expr ; )* ) => {
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        #[repr(usize)]
        pub enum S { $( $id, )* }
        pub const NSYMS: usize = [$( S::$id ),*].len();
        pub static SYMS: [Sym; NSYMS] = [ $( Sym {
            name: concat!(stringify!($id), "\0").as_bytes(),
            base: $base.as_bytes(),
            ver: $ver,
            ptsz: $ptsz,
            lib: $lib,
            wrapper: $wrap,
        }, )* ];
    };
}

use crate::cuda as c;
use crate::gpa as g;
use crate::nvml as n;
const NOWRAP: *const () = core::ptr::null();

symtab! {
    cuMemAlloc: "cuMemAlloc", 2000, false, LIB_CUDA, c::cuMemAlloc as *const ();
    cuMemAlloc_v2: "cuMemAlloc", 3020, false, LIB_CUDA, c::cuMemAlloc_v2 as *const ();
    cuMemAllocPitch: "cuMemAllocPitch", 2000, false, LIB_CUDA, c::cuMemAllocPitch as *const ();
    cuMemAllocPitch_v2: "cuMemAllocPitch", 3020, false, LIB_CUDA, c::cuMemAllocPitch_v2 as *const ();
    cuMemFree: "cuMemFree", 2000, false, LIB_CUDA, c::cuMemFree as *const ();
    cuMemFree_v2: "cuMemFree", 3020, false, LIB_CUDA, c::cuMemFree_v2 as *const ();
    cuMemAllocManaged: "cuMemAllocManaged", 6000, false, LIB_CUDA, c::cuMemAllocManaged as *const ();
    cuMemAllocAsync: "cuMemAllocAsync", 11020, false, LIB_CUDA, c::cuMemAllocAsync as *const ();
    cuMemAllocAsync_ptsz: "cuMemAllocAsync", 11020, true, LIB_CUDA, c::cuMemAllocAsync_ptsz as *const ();
    cuMemAllocFromPoolAsync: "cuMemAllocFromPoolAsync", 11020, false, LIB_CUDA, c::cuMemAllocFromPoolAsync as *const ();
    cuMemAllocFromPoolAsync_ptsz: "cuMemAllocFromPoolAsync", 11020, true, LIB_CUDA, c::cuMemAllocFromPoolAsync_ptsz as *const ();
    cuMemFreeAsync: "cuMemFreeAsync", 11020, false, LIB_CUDA, c::cuMemFreeAsync as *const ();
    cuMemFreeAsync_ptsz: "cuMemFreeAsync", 11020, true, LIB_CUDA, c::cuMemFreeAsync_ptsz as *const ();
    cuMemCreate: "cuMemCreate", 10020, false, LIB_CUDA, c::cuMemCreate as *const ();
    cuMemRelease: "cuMemRelease", 10020, false, LIB_CUDA, c::cuMemRelease as *const ();
    cuArrayCreate: "cuArrayCreate", 2000, false, LIB_CUDA, c::cuArrayCreate as *const ();
    cuArrayCreate_v2: "cuArrayCreate", 3020, false, LIB_CUDA, c::cuArrayCreate_v2 as *const ();
    cuArray3DCreate: "cuArray3DCreate", 2000, false, LIB_CUDA, c::cuArray3DCreate as *const ();
    cuArray3DCreate_v2: "cuArray3DCreate", 3020, false, LIB_CUDA, c::cuArray3DCreate_v2 as *const ();
    cuArrayDestroy: "cuArrayDestroy", 2000, false, LIB_CUDA, c::cuArrayDestroy as *const ();
    cuMipmappedArrayCreate: "cuMipmappedArrayCreate", 5000, false, LIB_CUDA, c::cuMipmappedArrayCreate as *const ();
    cuMipmappedArrayDestroy: "cuMipmappedArrayDestroy", 5000, false, LIB_CUDA, c::cuMipmappedArrayDestroy as *const ();
    cuMemGetInfo: "cuMemGetInfo", 2000, false, LIB_CUDA, c::cuMemGetInfo as *const ();
    cuMemGetInfo_v2: "cuMemGetInfo", 3020, false, LIB_CUDA, c::cuMemGetInfo_v2 as *const ();
    cuDeviceTotalMem: "cuDeviceTotalMem", 2000, false, LIB_CUDA, c::cuDeviceTotalMem as *const ();
    cuDeviceTotalMem_v2: "cuDeviceTotalMem", 3020, false, LIB_CUDA, c::cuDeviceTotalMem_v2 as *const ();
    cuCtxCreate: "cuCtxCreate", 2000, false, LIB_CUDA, c::cuCtxCreate as *const ();
    cuCtxCreate_v2: "cuCtxCreate", 3020, false, LIB_CUDA, c::cuCtxCreate_v2 as *const ();
    cuCtxCreate_v3: "cuCtxCreate", 11040, false, LIB_CUDA, c::cuCtxCreate_v3 as *const ();
    cuCtxCreate_v4: "cuCtxCreate", 12050, false, LIB_CUDA, c::cuCtxCreate_v4 as *const ();
    cuDevicePrimaryCtxRetain: "cuDevicePrimaryCtxRetain", 7000, false, LIB_CUDA, c::cuDevicePrimaryCtxRetain as *const ();
    cuGraphAddMemAllocNode: "cuGraphAddMemAllocNode", 11040, false, LIB_CUDA, c::cuGraphAddMemAllocNode as *const ();
    cuGetProcAddress: "cuGetProcAddress", 11030, false, LIB_CUDA, g::cuGetProcAddress as *const ();
    cuGetProcAddress_v2: "cuGetProcAddress", 12000, false, LIB_CUDA, g::cuGetProcAddress_v2 as *const ();
    nvmlDeviceGetMemoryInfo: "nvmlDeviceGetMemoryInfo", 0, false, LIB_NVML, n::nvmlDeviceGetMemoryInfo as *const ();
    nvmlDeviceGetMemoryInfo_v2: "nvmlDeviceGetMemoryInfo_v2", 0, false, LIB_NVML, n::nvmlDeviceGetMemoryInfo_v2 as *const ();
    cuMemMap: "cuMemMap", 10020, false, LIB_CUDA, c::cuMemMap as *const ();
    cuMemUnmap: "cuMemUnmap", 10020, false, LIB_CUDA, c::cuMemUnmap as *const ();
    cuMemRetainAllocationHandle: "cuMemRetainAllocationHandle", 11000, false, LIB_CUDA, c::cuMemRetainAllocationHandle as *const ();
    cuMemExportToShareableHandle: "cuMemExportToShareableHandle", 10020, false, LIB_CUDA, c::cuMemExportToShareableHandle as *const ();
    cuMemPoolTrimTo: "cuMemPoolTrimTo", 11020, false, LIB_CUDA, c::cuMemPoolTrimTo as *const ();
    cuMemPoolCreate: "cuMemPoolCreate", 11020, false, LIB_CUDA, c::cuMemPoolCreate as *const ();
    cuDeviceSetMemPool: "cuDeviceSetMemPool", 11020, false, LIB_CUDA, c::cuDeviceSetMemPool as *const ();
    cuMemPoolDestroy: "cuMemPoolDestroy", 11020, false, LIB_CUDA, c::cuMemPoolDestroy as *const ();
    cuStreamSynchronize: "cuStreamSynchronize", 2000, false, LIB_CUDA, c::cuStreamSynchronize as *const ();
    cuStreamSynchronize_ptsz: "cuStreamSynchronize", 7000, true, LIB_CUDA, c::cuStreamSynchronize_ptsz as *const ();
    cuCtxSynchronize: "cuCtxSynchronize", 2000, false, LIB_CUDA, c::cuCtxSynchronize as *const ();
    cuEventSynchronize: "cuEventSynchronize", 2000, false, LIB_CUDA, c::cuEventSynchronize as *const ();
    cuCtxDestroy: "cuCtxDestroy", 2000, false, LIB_CUDA, c::cuCtxDestroy as *const ();
    cuCtxDestroy_v2: "cuCtxDestroy", 4000, false, LIB_CUDA, c::cuCtxDestroy_v2 as *const ();
    cuDevicePrimaryCtxReset: "cuDevicePrimaryCtxReset", 7000, false, LIB_CUDA, c::cuDevicePrimaryCtxReset as *const ();
    cuDevicePrimaryCtxReset_v2: "cuDevicePrimaryCtxReset", 11000, false, LIB_CUDA, c::cuDevicePrimaryCtxReset_v2 as *const ();
    cuDevicePrimaryCtxRelease: "cuDevicePrimaryCtxRelease", 7000, false, LIB_CUDA, c::cuDevicePrimaryCtxRelease as *const ();
    cuDevicePrimaryCtxRelease_v2: "cuDevicePrimaryCtxRelease", 11000, false, LIB_CUDA, c::cuDevicePrimaryCtxRelease_v2 as *const ();
    cuCtxSetLimit: "cuCtxSetLimit", 3010, false, LIB_CUDA, c::cuCtxSetLimit as *const ();
    cuGraphInstantiateWithFlags: "cuGraphInstantiateWithFlags", 11040, false, LIB_CUDA, c::cuGraphInstantiateWithFlags as *const ();
    cuGraphInstantiateWithParams: "cuGraphInstantiateWithParams", 12000, false, LIB_CUDA, c::cuGraphInstantiateWithParams as *const ();
    cuGraphInstantiate_v2: "cuGraphInstantiate", 11000, false, LIB_CUDA, c::cuGraphInstantiate_v2 as *const ();
    cuDeviceGraphMemTrim: "cuDeviceGraphMemTrim", 11040, false, LIB_CUDA, c::cuDeviceGraphMemTrim as *const ();
    cuStreamBeginCapture: "cuStreamBeginCapture", 10000, false, LIB_CUDA, c::cuStreamBeginCapture as *const ();
    cuStreamBeginCapture_ptsz: "cuStreamBeginCapture", 10000, true, LIB_CUDA, c::cuStreamBeginCapture_ptsz as *const ();
    cuStreamBeginCapture_v2: "cuStreamBeginCapture", 10010, false, LIB_CUDA, c::cuStreamBeginCapture_v2 as *const ();
    cuStreamBeginCapture_v2_ptsz: "cuStreamBeginCapture", 10010, true, LIB_CUDA, c::cuStreamBeginCapture_v2_ptsz as *const ();
    cuStreamBeginCaptureToGraph: "cuStreamBeginCaptureToGraph", 12030, false, LIB_CUDA, c::cuStreamBeginCaptureToGraph as *const ();
    cuStreamBeginCaptureToGraph_ptsz: "cuStreamBeginCaptureToGraph", 12030, true, LIB_CUDA, c::cuStreamBeginCaptureToGraph_ptsz as *const ();
    cuStreamEndCapture: "cuStreamEndCapture", 10000, false, LIB_CUDA, c::cuStreamEndCapture as *const ();
    cuStreamEndCapture_ptsz: "cuStreamEndCapture", 10000, true, LIB_CUDA, c::cuStreamEndCapture_ptsz as *const ();
    cuGraphLaunch: "cuGraphLaunch", 10000, false, LIB_CUDA, c::cuGraphLaunch as *const ();
    cuGraphLaunch_ptsz: "cuGraphLaunch", 10000, true, LIB_CUDA, c::cuGraphLaunch_ptsz as *const ();
    // helpers: called, never wrapped
    cuDeviceGetAttribute: "cuDeviceGetAttribute", 2000, false, LIB_CUDA, NOWRAP;
    cuStreamIsCapturing: "cuStreamIsCapturing", 10000, false, LIB_CUDA, NOWRAP;
    cuMemGetAllocationGranularity: "cuMemGetAllocationGranularity", 10020, false, LIB_CUDA, NOWRAP;
    cuDeviceGetGraphMemAttribute: "cuDeviceGetGraphMemAttribute", 11040, false, LIB_CUDA, NOWRAP;
    cuMemPoolGetAttribute: "cuMemPoolGetAttribute", 11020, false, LIB_CUDA, NOWRAP;
    cuDeviceGetMemPool: "cuDeviceGetMemPool", 11020, false, LIB_CUDA, NOWRAP;
    cuDeviceGetDefaultMemPool: "cuDeviceGetDefaultMemPool", 11020, false, LIB_CUDA, NOWRAP;
    cuStreamGetCtx: "cuStreamGetCtx", 9020, false, LIB_CUDA, NOWRAP;
    cuCtxPushCurrent_v2: "cuCtxPushCurrent", 4000, false, LIB_CUDA, NOWRAP;
    cuCtxPopCurrent_v2: "cuCtxPopCurrent", 4000, false, LIB_CUDA, NOWRAP;
    cuPointerGetAttribute: "cuPointerGetAttribute", 4000, false, LIB_CUDA, NOWRAP;
    cuDevicePrimaryCtxGetState: "cuDevicePrimaryCtxGetState", 7000, false, LIB_CUDA, NOWRAP;
    cuCtxGetDevice: "cuCtxGetDevice", 2000, false, LIB_CUDA, NOWRAP;
    cuDeviceGetCount: "cuDeviceGetCount", 2000, false, LIB_CUDA, NOWRAP;
    cuDeviceGetUuid: "cuDeviceGetUuid", 9020, false, LIB_CUDA, NOWRAP;
    cuDeviceGetUuid_v2: "cuDeviceGetUuid", 11040, false, LIB_CUDA, NOWRAP;
    nvmlDeviceGetUUID: "nvmlDeviceGetUUID", 0, false, LIB_NVML, NOWRAP;
}

static REAL: [AtomicUsize; NSYMS] = [const { AtomicUsize::new(0) }; NSYMS];
static LIB_HANDLE: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

/// Is p one of our wrappers?
pub fn is_ours(p: usize) -> bool {
    p != 0 && SYMS.iter().any(|s| s.wrapper as usize == p)
}

/// Compare a C string with a table name (NUL-terminated).
#[inline]
pub unsafe fn name_eq(c: *const c_char, name: &[u8]) -> bool {
    let mut i = 0;
    loop {
        let a = *c.add(i) as u8;
        let b = name[i];
        if a != b {
            return false;
        }
        if a == 0 {
            return true;
        }
        i += 1;
    }
}

/// Find an intercepted (wrapped) symbol by exact exported name.
pub unsafe fn lookup_wrapped(name: *const c_char) -> Option<usize> {
    SYMS.iter()
        .position(|s| !s.wrapper.is_null() && name_eq(name, s.name))
}

/// Record a real pointer for symbol i unless one is known or it is ours.
pub fn offer_real(i: usize, p: usize) {
    if p == 0 || is_ours(p) {
        return;
    }
    let _ = REAL[i].compare_exchange(0, p, AcqRel, Acquire);
}

pub fn real_known(i: usize) -> usize {
    REAL[i].load(Acquire)
}

fn lib_handle(lib: u8, load: bool) -> *mut c_void {
    let h = LIB_HANDLE[lib as usize].load(Acquire);
    if h != 0 {
        return h as *mut c_void;
    }
    let name: &core::ffi::CStr = if lib == LIB_CUDA {
        c"libcuda.so.1"
    } else {
        c"libnvidia-ml.so.1"
    };
    let mut p = unsafe { sys::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if p.is_null() && load {
        p = unsafe { sys::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    }
    if !p.is_null() {
        LIB_HANDLE[lib as usize].store(p as usize, Release);
    }
    p
}

/// The real implementation of symbol i, or 0 when the driver lacks it.
#[inline]
pub fn real(i: S) -> usize {
    let v = REAL[i as usize].load(Acquire);
    if v != 0 {
        return v;
    }
    resolve(i as usize, true)
}

#[cold]
pub fn resolve(i: usize, load: bool) -> usize {
    let s = &SYMS[i];
    let name = s.name.as_ptr() as *const c_char;
    unsafe {
        // 1. the next definition after us in the global scope (direct link)
        let p = sys::real_dlsym(sys::RTLD_NEXT, name) as usize;
        if p != 0 && !is_ours(p) {
            offer_real(i, p);
            return REAL[i].load(Acquire);
        }
        // 2. the driver library itself (dlopen'ed RTLD_LOCAL by the app)
        let h = lib_handle(s.lib, load);
        if !h.is_null() {
            let p = sys::real_dlsym(h, name) as usize;
            if p != 0 && !is_ours(p) {
                offer_real(i, p);
                return REAL[i].load(Acquire);
            }
        }
    }
    0
}

/// Resolve every CUDA entry once (for pointer matching in cuGetProcAddress).
pub fn resolve_all_cuda() {
    static DONE: AtomicUsize = AtomicUsize::new(0);
    if DONE.load(Acquire) != 0 {
        return;
    }
    for (i, s) in SYMS.iter().enumerate() {
        if s.lib == LIB_CUDA && REAL[i].load(Acquire) == 0 {
            resolve(i, false);
        }
    }
    DONE.store(1, Release);
}

/// Typed access to a real function: `real_fn!(S::cuMemAlloc_v2, fn(..) -> ..)`.
macro_rules! real_fn {
    ($s:expr, $t:ty) => {{
        let p = $crate::symbols::real($s);
        if p == 0 {
            None
        } else {
            Some(unsafe { core::mem::transmute::<usize, $t>(p) })
        }
    }};
}
pub(crate) use real_fn;
