//! The table of intercepted (and helper) driver symbols: exported name, the
//! base name cuGetProcAddress is asked for, the CUDA version that introduced
//! this variant, per-thread-stream flag, whether we wrap it, and the real
//! pointer (resolved once, lazily). The wrappers themselves are the entry
//! layer's (the exports module): this table is below everything that calls the
//! driver, so it cannot name them.

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
    /// true: intercepted (the entry layer's table, the exports module, holds
    /// its wrapper); false: a helper we only call
    pub wrapped: bool,
}

macro_rules! symtab {
    ( $( $id:ident : $base:literal, $ver:expr, $ptsz:expr, $lib:expr, $wrapped:expr ; )* ) => {
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
            wrapped: $wrapped,
        }, )* ];
    };
}

symtab! {
    cuInit: "cuInit", 2000, false, LIB_CUDA, true;
    cuMemAlloc: "cuMemAlloc", 2000, false, LIB_CUDA, true;
    cuMemAlloc_v2: "cuMemAlloc", 3020, false, LIB_CUDA, true;
    cuMemAllocPitch: "cuMemAllocPitch", 2000, false, LIB_CUDA, true;
    cuMemAllocPitch_v2: "cuMemAllocPitch", 3020, false, LIB_CUDA, true;
    cuMemFree: "cuMemFree", 2000, false, LIB_CUDA, true;
    cuMemFree_v2: "cuMemFree", 3020, false, LIB_CUDA, true;
    cuMemAllocManaged: "cuMemAllocManaged", 6000, false, LIB_CUDA, true;
    cuMemAllocAsync: "cuMemAllocAsync", 11020, false, LIB_CUDA, true;
    cuMemAllocAsync_ptsz: "cuMemAllocAsync", 11020, true, LIB_CUDA, true;
    cuMemAllocFromPoolAsync: "cuMemAllocFromPoolAsync", 11020, false, LIB_CUDA, true;
    cuMemAllocFromPoolAsync_ptsz: "cuMemAllocFromPoolAsync", 11020, true, LIB_CUDA, true;
    cuMemFreeAsync: "cuMemFreeAsync", 11020, false, LIB_CUDA, true;
    cuMemFreeAsync_ptsz: "cuMemFreeAsync", 11020, true, LIB_CUDA, true;
    cuMemCreate: "cuMemCreate", 10020, false, LIB_CUDA, true;
    cuMemRelease: "cuMemRelease", 10020, false, LIB_CUDA, true;
    cuArrayCreate: "cuArrayCreate", 2000, false, LIB_CUDA, true;
    cuArrayCreate_v2: "cuArrayCreate", 3020, false, LIB_CUDA, true;
    cuArray3DCreate: "cuArray3DCreate", 2000, false, LIB_CUDA, true;
    cuArray3DCreate_v2: "cuArray3DCreate", 3020, false, LIB_CUDA, true;
    cuArrayDestroy: "cuArrayDestroy", 2000, false, LIB_CUDA, true;
    cuMipmappedArrayCreate: "cuMipmappedArrayCreate", 5000, false, LIB_CUDA, true;
    cuMipmappedArrayDestroy: "cuMipmappedArrayDestroy", 5000, false, LIB_CUDA, true;
    cuMemGetInfo: "cuMemGetInfo", 2000, false, LIB_CUDA, true;
    cuMemGetInfo_v2: "cuMemGetInfo", 3020, false, LIB_CUDA, true;
    cuDeviceTotalMem: "cuDeviceTotalMem", 2000, false, LIB_CUDA, true;
    cuDeviceTotalMem_v2: "cuDeviceTotalMem", 3020, false, LIB_CUDA, true;
    cuCtxCreate: "cuCtxCreate", 2000, false, LIB_CUDA, true;
    cuCtxCreate_v2: "cuCtxCreate", 3020, false, LIB_CUDA, true;
    cuCtxCreate_v3: "cuCtxCreate", 11040, false, LIB_CUDA, true;
    cuCtxCreate_v4: "cuCtxCreate", 12050, false, LIB_CUDA, true;
    cuDevicePrimaryCtxRetain: "cuDevicePrimaryCtxRetain", 7000, false, LIB_CUDA, true;
    cuGraphAddMemAllocNode: "cuGraphAddMemAllocNode", 11040, false, LIB_CUDA, true;
    cuGetProcAddress: "cuGetProcAddress", 11030, false, LIB_CUDA, true;
    cuGetProcAddress_v2: "cuGetProcAddress", 12000, false, LIB_CUDA, true;
    nvmlDeviceGetMemoryInfo: "nvmlDeviceGetMemoryInfo", 0, false, LIB_NVML, true;
    nvmlDeviceGetMemoryInfo_v2: "nvmlDeviceGetMemoryInfo_v2", 0, false, LIB_NVML, true;
    cuMemMap: "cuMemMap", 10020, false, LIB_CUDA, true;
    cuMemUnmap: "cuMemUnmap", 10020, false, LIB_CUDA, true;
    cuMemRetainAllocationHandle: "cuMemRetainAllocationHandle", 11000, false, LIB_CUDA, true;
    cuMemExportToShareableHandle: "cuMemExportToShareableHandle", 10020, false, LIB_CUDA, true;
    cuMemPoolTrimTo: "cuMemPoolTrimTo", 11020, false, LIB_CUDA, true;
    cuMemPoolCreate: "cuMemPoolCreate", 11020, false, LIB_CUDA, true;
    cuDeviceSetMemPool: "cuDeviceSetMemPool", 11020, false, LIB_CUDA, true;
    cuMemPoolDestroy: "cuMemPoolDestroy", 11020, false, LIB_CUDA, true;
    cuStreamSynchronize: "cuStreamSynchronize", 2000, false, LIB_CUDA, true;
    cuStreamSynchronize_ptsz: "cuStreamSynchronize", 7000, true, LIB_CUDA, true;
    cuCtxSynchronize: "cuCtxSynchronize", 2000, false, LIB_CUDA, true;
    cuEventSynchronize: "cuEventSynchronize", 2000, false, LIB_CUDA, true;
    cuCtxDestroy: "cuCtxDestroy", 2000, false, LIB_CUDA, true;
    cuCtxDestroy_v2: "cuCtxDestroy", 4000, false, LIB_CUDA, true;
    cuDevicePrimaryCtxReset: "cuDevicePrimaryCtxReset", 7000, false, LIB_CUDA, true;
    cuDevicePrimaryCtxReset_v2: "cuDevicePrimaryCtxReset", 11000, false, LIB_CUDA, true;
    cuDevicePrimaryCtxRelease: "cuDevicePrimaryCtxRelease", 7000, false, LIB_CUDA, true;
    cuDevicePrimaryCtxRelease_v2: "cuDevicePrimaryCtxRelease", 11000, false, LIB_CUDA, true;
    cuCtxSetLimit: "cuCtxSetLimit", 3010, false, LIB_CUDA, true;
    cuGraphInstantiateWithFlags: "cuGraphInstantiateWithFlags", 11040, false, LIB_CUDA, true;
    cuGraphInstantiateWithParams: "cuGraphInstantiateWithParams", 12000, false, LIB_CUDA, true;
    cuGraphInstantiate_v2: "cuGraphInstantiate", 11000, false, LIB_CUDA, true;
    cuDeviceGraphMemTrim: "cuDeviceGraphMemTrim", 11040, false, LIB_CUDA, true;
    cuStreamBeginCapture: "cuStreamBeginCapture", 10000, false, LIB_CUDA, true;
    cuStreamBeginCapture_ptsz: "cuStreamBeginCapture", 10000, true, LIB_CUDA, true;
    cuStreamBeginCapture_v2: "cuStreamBeginCapture", 10010, false, LIB_CUDA, true;
    cuStreamBeginCapture_v2_ptsz: "cuStreamBeginCapture", 10010, true, LIB_CUDA, true;
    cuStreamBeginCaptureToGraph: "cuStreamBeginCaptureToGraph", 12030, false, LIB_CUDA, true;
    cuStreamBeginCaptureToGraph_ptsz: "cuStreamBeginCaptureToGraph", 12030, true, LIB_CUDA, true;
    cuStreamEndCapture: "cuStreamEndCapture", 10000, false, LIB_CUDA, true;
    cuStreamEndCapture_ptsz: "cuStreamEndCapture", 10000, true, LIB_CUDA, true;
    cuGraphLaunch: "cuGraphLaunch", 10000, false, LIB_CUDA, true;
    cuGraphLaunch_ptsz: "cuGraphLaunch", 10000, true, LIB_CUDA, true;
    // helpers: called, never wrapped
    cuDeviceGetAttribute: "cuDeviceGetAttribute", 2000, false, LIB_CUDA, false;
    cuStreamIsCapturing: "cuStreamIsCapturing", 10000, false, LIB_CUDA, false;
    cuMemGetAllocationGranularity: "cuMemGetAllocationGranularity", 10020, false, LIB_CUDA, false;
    cuDeviceGetGraphMemAttribute: "cuDeviceGetGraphMemAttribute", 11040, false, LIB_CUDA, false;
    cuMemPoolGetAttribute: "cuMemPoolGetAttribute", 11020, false, LIB_CUDA, false;
    cuDeviceGetMemPool: "cuDeviceGetMemPool", 11020, false, LIB_CUDA, false;
    cuDeviceGetDefaultMemPool: "cuDeviceGetDefaultMemPool", 11020, false, LIB_CUDA, false;
    cuStreamGetCtx: "cuStreamGetCtx", 9020, false, LIB_CUDA, false;
    cuCtxPushCurrent_v2: "cuCtxPushCurrent", 4000, false, LIB_CUDA, false;
    cuCtxPopCurrent_v2: "cuCtxPopCurrent", 4000, false, LIB_CUDA, false;
    cuPointerGetAttribute: "cuPointerGetAttribute", 4000, false, LIB_CUDA, false;
    cuMemAdvise: "cuMemAdvise", 8000, false, LIB_CUDA, false;
    cuMemPrefetchAsync: "cuMemPrefetchAsync", 8000, false, LIB_CUDA, false;
    cuDevicePrimaryCtxGetState: "cuDevicePrimaryCtxGetState", 7000, false, LIB_CUDA, false;
    cuCtxGetDevice: "cuCtxGetDevice", 2000, false, LIB_CUDA, false;
    cuDeviceGetCount: "cuDeviceGetCount", 2000, false, LIB_CUDA, false;
    cuDeviceGetUuid: "cuDeviceGetUuid", 9020, false, LIB_CUDA, false;
    cuDeviceGetUuid_v2: "cuDeviceGetUuid", 11040, false, LIB_CUDA, false;
    nvmlDeviceGetUUID: "nvmlDeviceGetUUID", 0, false, LIB_NVML, false;
}

static REAL: [AtomicUsize; NSYMS] = [const { AtomicUsize::new(0) }; NSYMS];
static LIB_HANDLE: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

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

/// Record a real pointer for symbol i unless one is known. The callers
/// that may hold one of our wrappers (dlsym, cuGetProcAddress: the entry
/// layer) check that first.
pub fn offer_real(i: usize, p: usize) {
    if p == 0 {
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
    // Neither lookup can answer with one of our wrappers: RTLD_NEXT searches
    // the objects after this one, a driver library's handle that library
    // and its own dependencies (never a preloaded object).
    unsafe {
        // 1. the next definition after us in the global scope (direct link)
        let p = sys::real_dlsym(sys::RTLD_NEXT, name) as usize;
        if p != 0 {
            offer_real(i, p);
            return REAL[i].load(Acquire);
        }
        // 2. the driver library itself (dlopen'ed RTLD_LOCAL by the app)
        let h = lib_handle(s.lib, load);
        if !h.is_null() {
            let p = sys::real_dlsym(h, name) as usize;
            if p != 0 {
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

/// The driver's UUID of a CUDA ordinal (None: it cannot tell, e.g. before
/// cuInit).
pub fn device_uuid(ordinal: libc::c_int) -> Option<[u8; 16]> {
    type GetUuid = unsafe extern "C" fn(*mut u8, libc::c_int) -> libc::c_int;
    let mut u = [0u8; 16];
    for s in [S::cuDeviceGetUuid_v2, S::cuDeviceGetUuid] {
        let p = real(s);
        if p == 0 {
            continue;
        }
        // SAFETY: the driver's cuDeviceGetUuid{,_v2}
        let f = unsafe { core::mem::transmute::<usize, GetUuid>(p) };
        if unsafe { f(u.as_mut_ptr(), ordinal) } == 0 {
            return Some(u);
        }
    }
    None
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
