//! What the driver sees each process hold on one GPU: NVML's per-process
//! memory (`nvmlDeviceGetComputeRunningProcesses_v3`, and
//! `nvmlDeviceGetMPSComputeRunningProcesses_v3` for MPS clients where the
//! driver has it), by pid in the caller's pid namespace (the host's).
//!
//! The host's own view of a container's memory, which nothing in the
//! container writes (its usage file is the container's own word): a shrink
//! (`lifecycle::update`) rests on it. NVML is loaded only in
//! gpu-quota-driver's `gpu-processes` child (`helper::run_helper`: empty
//! environment, own process group, killed at [`HELPER_TIMEOUT`]); it prints
//! one [`ProcessesReply`] as a JSON line.
use crate::formats::helper;
use crate::helper::{run_helper, HelperError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// NVML's `NVML_VALUE_NOT_AVAILABLE` in `usedGpuMemory`: the driver does
/// not attribute the process's memory (WDDM, some virtualised GPUs).
pub const NVML_VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// How long the child may take (NVML's init on 8 GPUs takes about 1 s).
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(15);
/// The most processes one reply lists (a GPU runs far fewer; NVML's own
/// limit is well below).
pub const MAX_PROCESSES: usize = 4096;
pub const SUBCOMMAND: &str = helper::Stage::GpuProcesses.name();

/// One process NVML lists on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// In the helper's pid namespace (the host's, as the helper runs there).
    pub pid: u32,
    /// What the driver attributes to it on this GPU; `None` when NVML says
    /// [`NVML_VALUE_NOT_AVAILABLE`].
    pub used_bytes: Option<u64>,
}

/// What the `gpu-processes` child prints (one JSON line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessesReply {
    /// Every process NVML lists on the GPU, once each.
    Listed(Vec<GpuProcess>),
    /// NVML cannot list them on this GPU (why).
    Unsupported(String),
}

impl ProcessesReply {
    /// One entry per pid from NVML's lists: a process can be in the compute
    /// and the MPS list; its known bytes are the larger figure, unknown only
    /// where no list gives a figure. More than [`MAX_PROCESSES`]: unsupported
    /// (none is left out silently).
    pub fn merged(lists: &[&[GpuProcess]]) -> ProcessesReply {
        let mut out: Vec<GpuProcess> = Vec::new();
        for p in lists.iter().flat_map(|l| l.iter()) {
            if let Some(q) = out.iter_mut().find(|q| q.pid == p.pid) {
                q.used_bytes = match (q.used_bytes, p.used_bytes) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            } else if out.len() < MAX_PROCESSES {
                out.push(*p);
            } else {
                // a process left out could be the one asked about
                return ProcessesReply::Unsupported(format!(
                    "NVML lists more than {MAX_PROCESSES} processes on the GPU"
                ));
            }
        }
        ProcessesReply::Listed(out)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProcMemError {
    #[error(
        "{} is not found (set `driver_helper` in the config)",
        crate::paths::DRIVER_HELPER_NAME
    )]
    NoHelper,
    #[error("the host's libnvidia-ml is not found among the driver files ({0})")]
    NoNvml(String),
    #[error(transparent)]
    Helper(#[from] HelperError),
    #[error("{what} printed no process list: {message}")]
    Output { what: String, message: String },
}

/// NVML's processes on GPU `uuid`, through `helper gpu-processes` with the
/// host's libnvidia-ml `nvml`.
pub fn read_via_helper(
    helper: &Path,
    nvml: &Path,
    uuid: &str,
) -> Result<ProcessesReply, ProcMemError> {
    let nv = nvml.to_string_lossy();
    let argv = helper::Processes { nvml: &nv, uuid }.argv();
    let what = format!("{} {SUBCOMMAND}", helper.display());
    let out = run_helper(helper, &argv, &[], HELPER_TIMEOUT, &what)?;
    let (line, text) = out.json_line();
    serde_json::from_str(&line).map_err(|e| ProcMemError::Output {
        what,
        message: format!("{e}: {:?}", text.chars().take(300).collect::<String>()),
    })
}

/// gpu-quota-driver and the host's libnvidia-ml, as the configuration
/// finds them.
fn helper_and_nvml(cfg: &crate::Config) -> Result<(PathBuf, PathBuf), ProcMemError> {
    let helper = crate::paths::driver_helper(cfg).ok_or(ProcMemError::NoHelper)?;
    let files =
        crate::driver::discover(&cfg.driver).map_err(|e| ProcMemError::NoNvml(e.to_string()))?;
    let nvml = crate::driver::libnvml_of(&files)
        .ok_or_else(|| ProcMemError::NoNvml("no libnvidia-ml.so.1".into()))?;
    Ok((helper, nvml))
}

/// NVML's processes on GPU `uuid` of this host.
pub fn read(cfg: &crate::Config, uuid: &str) -> Result<ProcessesReply, ProcMemError> {
    let (helper, nvml) = helper_and_nvml(cfg)?;
    read_via_helper(&helper, &nvml, uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, used_bytes: Option<u64>) -> GpuProcess {
        GpuProcess { pid, used_bytes }
    }

    #[test]
    fn a_process_in_both_lists_is_counted_once_by_its_known_figure() {
        let compute = [p(1, Some(5)), p(2, None), p(3, None)];
        let mps = [p(1, Some(7)), p(2, Some(4)), p(4, Some(1))];
        assert_eq!(
            ProcessesReply::merged(&[&compute, &mps]),
            ProcessesReply::Listed(vec![
                p(1, Some(7)),
                p(2, Some(4)),
                p(3, None),
                p(4, Some(1))
            ])
        );
    }

    /// A stand-in for gpu-quota-driver: a script that checks its argv and
    /// prints what the test gives it.
    fn fake_helper(d: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let h = d.join("helper");
        std::fs::write(&h, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755)).unwrap();
        h
    }

    #[test]
    fn the_child_is_asked_for_one_gpu_and_its_reply_read_back() {
        let d = tempfile::tempdir().unwrap();
        let reply = ProcessesReply::Listed(vec![p(42, Some(7 << 30)), p(43, None)]);
        let json = serde_json::to_string(&reply).unwrap();
        let h = fake_helper(
            d.path(),
            &format!(
                "[ \"$*\" = '{SUBCOMMAND} --nvml /l/nvml --uuid GPU-1' ] || exit 3\necho 'nvml loaded'\necho '{json}'"
            ),
        );
        let got = read_via_helper(&h, Path::new("/l/nvml"), "GPU-1").unwrap();
        assert_eq!(got, reply);
        let h = fake_helper(d.path(), "echo '{\"listed\": 1}'");
        let e = read_via_helper(&h, Path::new("/l/nvml"), "GPU-1").unwrap_err();
        assert!(e.to_string().contains("printed no process list"), "{e}");
        let h = fake_helper(d.path(), "echo 'cannot load' >&2; exit 1");
        let e = read_via_helper(&h, Path::new("/l/nvml"), "GPU-1").unwrap_err();
        assert!(e.to_string().contains("cannot load"), "{e}");
    }
}
