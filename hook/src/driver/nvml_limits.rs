//! The driver-limits helper child's NVML (`gpu-quota-driver driver-limits
//! set|clear`): `nvmlDeviceSetMemoryLimits_v1` on a cgroup, behind core's
//! `drvlimit::LimitDriver` (the policy, the record and the parent side stay
//! in core/src/drvlimit/). Loaded only in the child, never in the hook
//! itself (which must stay single-threaded to enter a mount namespace).
use gpuquota_core::dl::Lib;
use gpuquota_core::drvlimit::{DrvLimitError, LimitDriver, SYMBOL};
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::Path;

#[repr(C)]
struct SetMemoryLimitsV1 {
    name_space: *const c_char,
    soft_limit: u64,
    hard_limit: u64,
}

type InitFn = unsafe extern "C" fn() -> c_int;
type ByUuidFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type SetFn = unsafe extern "C" fn(*mut c_void, *mut SetMemoryLimitsV1) -> c_int;
type MigFn = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_uint) -> c_int;

/// The host's NVML, for the helper child only.
pub struct NvmlLimits {
    _lib: Lib,
    by_uuid: ByUuidFn,
    set: SetFn,
    mig: Option<MigFn>,
    shutdown: Option<InitFn>,
}

impl NvmlLimits {
    pub fn open(path: &Path) -> Result<NvmlLimits, DrvLimitError> {
        let lib = Lib::open(path).map_err(|message| DrvLimitError::Load {
            path: path.into(),
            message,
        })?;
        let set = lib.sym(SYMBOL).ok_or(DrvLimitError::NoSymbol(SYMBOL))?;
        let init = lib
            .sym("nvmlInit_v2")
            .ok_or(DrvLimitError::NoSymbol("nvmlInit_v2"))?;
        let by_uuid = lib
            .sym("nvmlDeviceGetHandleByUUID")
            .ok_or(DrvLimitError::NoSymbol("nvmlDeviceGetHandleByUUID"))?;
        // SAFETY: the symbols have the types of nvml.h.
        unsafe {
            let init: InitFn = std::mem::transmute(init);
            let code = init();
            if code != 0 {
                return Err(DrvLimitError::Nvml {
                    call: "nvmlInit_v2",
                    code,
                });
            }
            Ok(NvmlLimits {
                by_uuid: std::mem::transmute::<*mut c_void, ByUuidFn>(by_uuid),
                set: std::mem::transmute::<*mut c_void, SetFn>(set),
                mig: lib
                    .sym("nvmlDeviceGetMigMode")
                    .map(|p| std::mem::transmute::<*mut c_void, MigFn>(p)),
                shutdown: lib
                    .sym("nvmlShutdown")
                    .map(|p| std::mem::transmute::<*mut c_void, InitFn>(p)),
                _lib: lib,
            })
        }
    }
}

impl Drop for NvmlLimits {
    fn drop(&mut self) {
        if let Some(f) = self.shutdown {
            // SAFETY: nvmlShutdown after a successful nvmlInit_v2.
            unsafe { f() };
        }
    }
}

impl LimitDriver for NvmlLimits {
    fn set(
        &mut self,
        uuid: &str,
        cgroup: &Path,
        soft: u64,
        hard: u64,
    ) -> Result<(), DrvLimitError> {
        let u = CString::new(uuid).map_err(|_| DrvLimitError::Nvml {
            call: "nvmlDeviceGetHandleByUUID",
            code: 2,
        })?;
        let ns = CString::new(cgroup.as_os_str().as_encoded_bytes()).map_err(|_| {
            DrvLimitError::Nvml {
                call: SYMBOL,
                code: 2,
            }
        })?;
        let mut dev: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid pointers for the duration of the calls.
        unsafe {
            let code = (self.by_uuid)(u.as_ptr(), &mut dev);
            if code != 0 {
                return Err(DrvLimitError::Nvml {
                    call: "nvmlDeviceGetHandleByUUID",
                    code,
                });
            }
            if let Some(mig) = self.mig {
                let (mut cur, mut pend) = (0 as c_uint, 0 as c_uint);
                if mig(dev, &mut cur, &mut pend) == 0 && cur == 1 {
                    return Err(DrvLimitError::Mig(uuid.into()));
                }
            }
            let mut l = SetMemoryLimitsV1 {
                name_space: ns.as_ptr(),
                soft_limit: soft,
                hard_limit: hard,
            };
            let code = (self.set)(dev, &mut l);
            if code != 0 {
                return Err(DrvLimitError::Nvml { call: SYMBOL, code });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layout_is_the_headers() {
        assert_eq!(std::mem::size_of::<SetMemoryLimitsV1>(), 24);
        assert_eq!(std::mem::offset_of!(SetMemoryLimitsV1, soft_limit), 8);
        assert_eq!(std::mem::offset_of!(SetMemoryLimitsV1, hard_limit), 16);
    }
}
