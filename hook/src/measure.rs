//! The call sites in `create-runtime` of the driver's helper children,
//! which run in gpu-quota-driver (hook/src/driver/main.rs): the context
//! measurement and the r615 driver limit. The hook is statically linked and
//! loads no library; NVML and CUDA are loaded only in those children (the
//! hook must also stay single-threaded to enter the container's mount
//! namespace). The parent runs them through `helper::run_helper`: empty
//! environment, own process group, timeout, group killed on timeout.
use anyhow::{anyhow, Result};
use gpuquota_core::{
    config::Config,
    ctxcost::{self, Cache, ChildMeasurer, Setting, Source, Target},
    driver::{self, DriverFiles},
    drvlimit::{self, GpuLimit},
    paths, Reservation,
};
use std::path::{Path, PathBuf};

/// gpu-quota-driver, which runs the children.
fn driver_helper(cfg: &Config) -> Result<PathBuf> {
    paths::driver_helper(cfg).ok_or_else(|| {
        anyhow!(
            "{} not found beside the hook (set `driver_helper` in the config)",
            paths::DRIVER_HELPER_NAME
        )
    })
}

/// `context_overhead_bytes` for the container's limits.
pub fn context_charge(cfg: &Config, files: &DriverFiles, r: &Reservation) -> Result<u64> {
    let setting = cfg.context_overhead_setting()?;
    if let Setting::Bytes(b) = setting {
        return Ok(b);
    }
    let inv = gpuquota_core::inventory::inventory_without_nvml(cfg);
    let names: Vec<(String, String)> = r
        .slices
        .iter()
        .map(|s| {
            let name = inv
                .as_ref()
                .and_then(|i| i.find_uuid(&s.uuid))
                .map(|g| g.name.clone())
                .unwrap_or_else(|| "unknown".into());
            (s.uuid.clone(), name)
        })
        .collect();
    let targets: Vec<Target> = names
        .iter()
        .map(|(u, n)| Target {
            uuid: u,
            gpu_name: n,
        })
        .collect();
    let libcuda = driver::libcuda_of(files);
    let measurer = match (&libcuda, driver::libnvml_of(files), driver_helper(cfg)) {
        (Some(c), Some(n), Ok(helper)) => Some(ChildMeasurer {
            helper,
            libcuda: c.clone(),
            libnvml: n,
            timeout: ctxcost::MEASURE_TIMEOUT,
        }),
        _ => None,
    };
    let dv = libcuda.as_deref().map(ctxcost::driver_version_of);
    let res = ctxcost::resolve(
        setting,
        &Cache::new(&cfg.ledger_dir),
        dv.as_deref(),
        &targets,
        measurer.as_ref().map(|m| m as &dyn ctxcost::Measurer),
    );
    if let Source::MeasureFailed(e) = &res.source {
        eprintln!(
            "gpu-quota-hook: warning: measuring the CUDA context failed ({e}); charging the built-in {} MiB (set context_overhead to override)",
            res.bytes >> 20
        );
    }
    Ok(res.bytes)
}

/// Set the driver limit on the container's cgroup when the driver has
/// one (r615+) and record it in `dir` for the clear. Never fatal: the
/// interceptor enforces either way.
pub fn driver_limits(cfg: &Config, files: &DriverFiles, dir: &Path, r: &Reservation, pid: u32) {
    let Some(nvml) = driver::libnvml_of(files) else {
        return;
    };
    if !drvlimit::maybe_supported_cached(&cfg.state_dir, &nvml) {
        return; // drivers before r615: one file read per driver install (cached), no child
    }
    let cg =
        match drvlimit::container_cgroup(Path::new("/proc"), Path::new(drvlimit::CGROUP_ROOT), pid)
        {
            Ok(c) => c,
            Err(e) => {
                // cgroup v1 is the host's, not this container's: doctor says it
                if e.per_container() {
                    eprintln!("gpu-quota-hook: driver limits not set: {e}");
                }
                return;
            }
        };
    let gpus: Vec<GpuLimit> = r
        .slices
        .iter()
        .map(|s| GpuLimit {
            uuid: s.uuid.clone(),
            hard_bytes: s.vram_bytes,
        })
        .collect();
    let res = driver_helper(cfg)
        .and_then(|exe| drvlimit::apply_via_helper(&exe, &nvml, &cg, &gpus).map_err(Into::into));
    match res {
        Ok(Some(rec)) => {
            // the marker first: the runtime's `delete` looks for a record
            // only where the marker exists
            let m = drvlimit::active_marker(cfg);
            if !m.exists() {
                if let Err(e) = gpuquota_core::fsutil::write_atomic(&m, b"", 0o644) {
                    eprintln!("gpu-quota-hook: driver limits set but {} not written ({e}); the runtime's `delete` will not clear them", m.display());
                }
            }
            let bytes = serde_json::to_vec(&rec).expect("serializable");
            if let Err(e) =
                gpuquota_core::fsutil::write_atomic(&dir.join(drvlimit::RECORD_FILE), &bytes, 0o644)
            {
                eprintln!("gpu-quota-hook: driver limits set but not recorded: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("gpu-quota-hook: driver limits not set: {e:#}"),
    }
}
