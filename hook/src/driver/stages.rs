//! The driver's helper stages, run by gpu-quota-driver: each loads a host
//! driver library by path and answers with one JSON line.
//!
//! * `measure-context --cuda LIB --nvml LIB --uuid GPU-…`: loads the host's
//!   libcuda and libnvidia-ml, creates the primary context on that GPU,
//!   allocates 2 MiB, and prints one [`Measurement`]: NVML's per-process
//!   used memory of this process (host pid namespace) minus the allocation.
//! * `driver-limits set|clear …`: the r615 driver limit (core/src/drvlimit/).
use crate::nvml_limits::NvmlLimits;
use anyhow::{anyhow, bail, Result};
use gpuquota_core::{
    ctxcost::Measurement,
    dl::Lib,
    drvlimit::{self, GpuLimit, HelperReply, Record},
    formats::helper::{Action, ArgError, Clear, Measure, Set},
};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;
const ALLOC: u64 = 2 * MIB;

fn bad(e: ArgError) -> anyhow::Error {
    anyhow!("{e}")
}

/// `driver-limits set|clear …` (child); the command line is
/// gpuquota_formats::helper's, which the parent writes.
pub fn driver_limits_main(args: &[String]) -> Result<()> {
    let reply = match args.first().and_then(|a| Action::parse(a)) {
        Some(Action::Set) => {
            let a = Set::parse(args).map_err(bad)?;
            let (nvml, cg) = (PathBuf::from(a.nvml), PathBuf::from(a.cgroup));
            let mut gpus = Vec::new();
            for l in Set::limits(args) {
                let l = l.map_err(bad)?;
                gpus.push(GpuLimit {
                    uuid: l.uuid.into(),
                    hard_bytes: l.bytes,
                });
            }
            match NvmlLimits::open(&nvml) {
                Err(drvlimit::DrvLimitError::NoSymbol(s)) => HelperReply::Unsupported(s.into()),
                Err(e) => return Err(e.into()),
                Ok(mut n) => HelperReply::Set(drvlimit::apply(&mut n, &cg, &gpus)?),
            }
        }
        Some(Action::Clear) => {
            let a = Clear::parse(args).map_err(bad)?;
            let rec: Record = serde_json::from_str(a.record)?;
            let mut n = NvmlLimits::open(Path::new(a.nvml))?;
            HelperReply::Cleared(drvlimit::clear(&mut n, &rec)?)
        }
        None => bail!(
            "driver-limits: unknown action {:?} ({}, {})",
            args.first(),
            Action::Set,
            Action::Clear
        ),
    };
    gpuquota_core::outln!("{}", serde_json::to_string(&reply)?);
    Ok(())
}

// ------------------------------------------------------------ measure-context

/// A symbol of `lib` as its C type.
///
/// SAFETY: the caller names the symbol's real C type as `F`.
unsafe fn f<F: Copy>(lib: &Lib, n: &str) -> Result<F> {
    let p = lib
        .sym(n)
        .ok_or_else(|| anyhow!("{n} not in {}", lib.path().display()))?;
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
}

fn open(p: &str) -> Result<Lib> {
    Lib::open(Path::new(p)).map_err(|m| anyhow!("cannot load {p}: {m}"))
}

use crate::processes::ProcessInfo;

fn check(what: &str, code: c_int) -> Result<()> {
    if code != 0 {
        bail!("{what} returned {code}");
    }
    Ok(())
}

fn fmt_uuid(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// `measure-context --cuda LIB --nvml LIB --uuid GPU-…` (child).
pub fn measure_main(args: &[String]) -> Result<()> {
    let a = Measure::parse(args).map_err(bad)?;
    let m = measure(a.cuda, a.nvml, a.uuid)?;
    gpuquota_core::outln!("{}", serde_json::to_string(&m)?);
    Ok(())
}

type I1 = unsafe extern "C" fn(c_uint) -> c_int;
type IPtr = unsafe extern "C" fn(*mut c_int) -> c_int;
type DevGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type DevUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
type CtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type CtxSet = unsafe extern "C" fn(*mut c_void) -> c_int;
type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type NInit = unsafe extern "C" fn() -> c_int;
type NByUuid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type NName = unsafe extern "C" fn(*mut c_void, *mut c_char, c_uint) -> c_int;
type NDrv = unsafe extern "C" fn(*mut c_char, c_uint) -> c_int;
type NProcs = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut ProcessInfo) -> c_int;

fn measure(cuda_path: &str, nvml_path: &str, uuid: &str) -> Result<Measurement> {
    let cuda = open(cuda_path)?;
    let nvml = open(nvml_path)?;
    // SAFETY: every symbol is called with the types of cuda.h / nvml.h.
    unsafe {
        check("cuInit", f::<I1>(&cuda, "cuInit")?(0))?;
        let mut n: c_int = 0;
        check(
            "cuDeviceGetCount",
            f::<IPtr>(&cuda, "cuDeviceGetCount")?(&mut n),
        )?;
        let get_uuid: DevUuid = f::<DevUuid>(&cuda, "cuDeviceGetUuid_v2")
            .or_else(|_| f::<DevUuid>(&cuda, "cuDeviceGetUuid"))?;
        let dev_get = f::<DevGet>(&cuda, "cuDeviceGet")?;
        let mut dev = None;
        for i in 0..n {
            let mut d: c_int = 0;
            check("cuDeviceGet", dev_get(&mut d, i))?;
            let mut u = [0u8; 16];
            check("cuDeviceGetUuid", get_uuid(&mut u, d))?;
            if fmt_uuid(&u).eq_ignore_ascii_case(uuid) {
                dev = Some(d);
            }
        }
        let dev = dev.ok_or_else(|| anyhow!("no CUDA device has uuid {uuid} ({n} devices)"))?;
        let mut ctx: *mut c_void = std::ptr::null_mut();
        check(
            "cuDevicePrimaryCtxRetain",
            f::<CtxRetain>(&cuda, "cuDevicePrimaryCtxRetain")?(&mut ctx, dev),
        )?;
        check(
            "cuCtxSetCurrent",
            f::<CtxSet>(&cuda, "cuCtxSetCurrent")?(ctx),
        )?;
        let mut p: u64 = 0;
        check(
            "cuMemAlloc_v2",
            f::<MemAlloc>(&cuda, "cuMemAlloc_v2")?(&mut p, ALLOC as usize),
        )?;

        check("nvmlInit_v2", f::<NInit>(&nvml, "nvmlInit_v2")?())?;
        let cu = CString::new(uuid)?;
        let mut h: *mut c_void = std::ptr::null_mut();
        check(
            "nvmlDeviceGetHandleByUUID",
            f::<NByUuid>(&nvml, "nvmlDeviceGetHandleByUUID")?(cu.as_ptr(), &mut h),
        )?;
        let mut name = [0 as c_char; 96];
        check(
            "nvmlDeviceGetName",
            f::<NName>(&nvml, "nvmlDeviceGetName")?(h, name.as_mut_ptr(), 96),
        )?;
        let mut ver = [0 as c_char; 80];
        check(
            "nvmlSystemGetDriverVersion",
            f::<NDrv>(&nvml, "nvmlSystemGetDriverVersion")?(ver.as_mut_ptr(), 80),
        )?;
        let procs: NProcs = f::<NProcs>(&nvml, "nvmlDeviceGetComputeRunningProcesses_v3")
            .or_else(|_| f::<NProcs>(&nvml, "nvmlDeviceGetComputeRunningProcesses_v2"))?;
        let me = std::process::id();
        let mut used = None;
        // NVML may list a new process a little late: poll up to ~2 s.
        for _ in 0..40 {
            let mut cap: c_uint = 64;
            let mut buf = vec![ProcessInfo::default(); 64];
            let mut code = procs(h, &mut cap, buf.as_mut_ptr());
            if code == 7 {
                // NVML_ERROR_INSUFFICIENT_SIZE: cap holds the count
                cap += 16;
                buf = vec![ProcessInfo::default(); cap as usize];
                code = procs(h, &mut cap, buf.as_mut_ptr());
            }
            check("nvmlDeviceGetComputeRunningProcesses", code)?;
            let n = (cap as usize).min(buf.len());
            if let Some(pi) = buf[..n].iter().find(|pi| pi.pid == me) {
                if pi.used_gpu_memory != u64::MAX && pi.used_gpu_memory >= ALLOC {
                    used = Some(pi.used_gpu_memory);
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let used = used.ok_or_else(|| {
            anyhow!("NVML does not list this process (pid {me}) with its memory on {uuid}")
        })?;
        Ok(Measurement {
            uuid: uuid.into(),
            gpu_name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
            driver_version: CStr::from_ptr(ver.as_ptr()).to_string_lossy().into_owned(),
            nvml_used_bytes: used,
            alloc_bytes: ALLOC,
            context_bytes: used - ALLOC,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_format_is_nvmls() {
        let mut u = [0u8; 16];
        for (i, b) in u.iter_mut().enumerate() {
            *b = i as u8 * 0x11;
        }
        assert_eq!(fmt_uuid(&u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
    }
}
