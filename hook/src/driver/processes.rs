//! `gpu-processes --nvml LIB --uuid GPU-…` (child): the processes NVML
//! lists on one GPU with the memory it attributes to each, by pid in this
//! process's pid namespace (the host's), as one
//! `gpuquota_core::procmem::ProcessesReply` JSON line. The compute list
//! (`nvmlDeviceGetComputeRunningProcesses_v3`, else `_v2`: the same
//! `nvmlProcessInfo_t`) and, where the driver has it, the MPS clients' list
//! (`nvmlDeviceGetMPSComputeRunningProcesses_v3`). NVML_ERROR_NOT_SUPPORTED
//! is an answer (`unsupported`); any other failure is an error (exit 1).
use anyhow::{anyhow, bail, Result};
use gpuquota_core::dl::Lib;
use gpuquota_core::formats::helper::Processes;
use gpuquota_core::procmem::{GpuProcess, ProcessesReply, MAX_PROCESSES, NVML_VALUE_NOT_AVAILABLE};
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::Path;

/// nvml.h's `nvmlProcessInfo_t` (the `_v2`/`_v3` calls' element), for
/// this child and the NVML stages alike.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ProcessInfo {
    pub(crate) pid: c_uint,
    pub(crate) used_gpu_memory: u64,
    pub(crate) gpu_instance_id: c_uint,
    pub(crate) compute_instance_id: c_uint,
}

type NInit = unsafe extern "C" fn() -> c_int;
type NByUuid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type NProcs = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut ProcessInfo) -> c_int;

const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;

/// A symbol of `lib` as its C type, if it has it.
///
/// SAFETY: the caller names the symbol's real C type as `F`.
unsafe fn sym<F: Copy>(lib: &Lib, n: &str) -> Option<F> {
    lib.sym(n)
        .map(|p| std::mem::transmute_copy::<*mut c_void, F>(&p))
}

pub fn main(args: &[String]) -> Result<()> {
    let a = Processes::parse(args).map_err(|e| anyhow!("{e}"))?;
    let reply = list(Path::new(a.nvml), a.uuid)?;
    gpuquota_core::outln!("{}", serde_json::to_string(&reply)?);
    Ok(())
}

/// One of NVML's lists on `dev`: `Ok(None)` where the driver does not
/// support it.
///
/// SAFETY: `f` is one of the `…RunningProcesses_v2/_v3` calls, `dev` a
/// handle of the same library.
unsafe fn one_list(f: NProcs, dev: *mut c_void, call: &str) -> Result<Option<Vec<GpuProcess>>> {
    // the list may grow between the calls: ask again with room for more
    let mut cap: c_uint = 64;
    for _ in 0..8 {
        let mut buf = vec![ProcessInfo::default(); cap as usize];
        let mut n = cap;
        match f(dev, &mut n, buf.as_mut_ptr()) {
            0 => {
                return Ok(Some(
                    buf[..(n as usize).min(buf.len())]
                        .iter()
                        .map(|p| GpuProcess {
                            pid: p.pid,
                            used_bytes: (p.used_gpu_memory != NVML_VALUE_NOT_AVAILABLE)
                                .then_some(p.used_gpu_memory),
                        })
                        .collect(),
                ))
            }
            NVML_ERROR_INSUFFICIENT_SIZE if (n as usize) < MAX_PROCESSES => cap = n.max(cap) + 32,
            NVML_ERROR_INSUFFICIENT_SIZE => {
                bail!("{call}: more than {MAX_PROCESSES} processes")
            }
            NVML_ERROR_NOT_SUPPORTED => return Ok(None),
            code => bail!("{call} returned {code}"),
        }
    }
    bail!("{call}: the list kept growing")
}

fn list(nvml: &Path, uuid: &str) -> Result<ProcessesReply> {
    let lib = Lib::open(nvml).map_err(|m| anyhow!("cannot load {}: {m}", nvml.display()))?;
    const COMPUTE: [&str; 2] = [
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    ];
    const MPS: &str = "nvmlDeviceGetMPSComputeRunningProcesses_v3";
    // SAFETY: every symbol is called with the types of nvml.h.
    unsafe {
        let Some((call, compute)) = COMPUTE
            .iter()
            .find_map(|n| sym::<NProcs>(&lib, n).map(|f| (*n, f)))
        else {
            return Ok(ProcessesReply::Unsupported(format!(
                "{} has no {}",
                nvml.display(),
                COMPUTE.join(" or ")
            )));
        };
        let init = sym::<NInit>(&lib, "nvmlInit_v2").ok_or_else(|| anyhow!("no nvmlInit_v2"))?;
        let by_uuid = sym::<NByUuid>(&lib, "nvmlDeviceGetHandleByUUID")
            .ok_or_else(|| anyhow!("no nvmlDeviceGetHandleByUUID"))?;
        let code = init();
        if code != 0 {
            bail!("nvmlInit_v2 returned {code}");
        }
        let u = CString::new(uuid)?;
        let mut dev: *mut c_void = std::ptr::null_mut();
        let code = by_uuid(u.as_ptr(), &mut dev);
        let reply = if code != 0 {
            Err(anyhow!("nvmlDeviceGetHandleByUUID({uuid}) returned {code}"))
        } else {
            match one_list(compute, dev, call) {
                Ok(None) => Ok(ProcessesReply::Unsupported(format!(
                    "{call} is not supported on {uuid}"
                ))),
                Ok(Some(c)) => match sym::<NProcs>(&lib, MPS).map(|f| one_list(f, dev, MPS)) {
                    None | Some(Ok(None)) => Ok(ProcessesReply::merged(&[&c])),
                    Some(Ok(Some(m))) => Ok(ProcessesReply::merged(&[&c, &m])),
                    Some(Err(e)) => Err(e),
                },
                Err(e) => Err(e),
            }
        };
        if let Some(shutdown) = sym::<NInit>(&lib, "nvmlShutdown") {
            shutdown();
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layout_is_the_headers() {
        assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
        assert_eq!(std::mem::offset_of!(ProcessInfo, used_gpu_memory), 8);
    }
}
