//! The per-process CUDA context charge (`context_overhead_bytes` in a
//! container's limits): measured once per (driver version, GPU model) on
//! the host, cached in `<ledger_dir>/context-cost.json`, with the config key
//! `context_overhead` as an override.
//!
//! The measurement runs in a child process (`gpu-quota-driver
//! measure-context`, see hook/src/driver/stages.rs) with a cleared environment, in
//! its own process group, under a timeout; it loads the host's libcuda and
//! libnvidia-ml by their host paths (from [`crate::driver::discover`]),
//! creates a primary context, makes one small allocation and reads its own
//! process's NVML usage. This module owns the parent side, the cache and
//! the policy; the child is a separate binary so that a driver that hangs
//! or crashes cannot take the hook with it.
//!
//! Why a margin: the child's context loads no kernels, a framework's does
//! (CUDA loads modules lazily, into device memory). On the H200 (driver
//! 580, CUDA 13) a PyTorch process holding 4096 MiB of tensors (no kernel
//! launched) counts 4614 MiB in NVML, i.e. 518 MiB of context, and a bare
//! PyTorch process after one small kernel counts 612 MiB for a 2 MiB
//! block: its first kernel launch loaded ≈ 92 MiB of module memory on top.
//! [`MARGIN_BYTES`] (96 MiB) covers that. More module memory than that
//! (large kernel libraries) is a known gap listed in docs/interceptor.md.
use crate::formats::helper;
use crate::fsutil;
use crate::helper::{run_helper, HelperError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// The figures the interceptor shares (gpuquota_formats::ctxcost):
/// `MARGIN_BYTES` added to a measured context for lazily loaded modules (see
/// the module docs); `BUILTIN_DEFAULT_BYTES` for `auto` without a cache
/// entry and without a usable driver (CI, hosts with a simulated inventory):
/// the H200 figure, 520 MiB of context + the margin; `MAX_PLAUSIBLE_BYTES`,
/// above which a measured context is not believed (the child saw other
/// memory, e.g. a driver that reports the whole device for every process);
/// the cache's file name.
pub use gpuquota_formats::ctxcost::{
    BUILTIN_DEFAULT_BYTES, CACHE_FILE, MARGIN_BYTES, MAX_PLAUSIBLE_BYTES,
};
/// The child's limit: well inside the hook's own 45 s deadline and runc's
/// 60 s hook timeout.
pub const MEASURE_TIMEOUT: Duration = Duration::from_secs(20);
const CACHE_VERSION: u32 = 1;
/// A cached failure is retried after this long (a driver that was busy or
/// being upgraded gets measured again; a broken one costs one try an hour).
pub const FAILED_RETRY_SECS: u64 = 3600;

pub use crate::config::{parse_setting, Setting};

/// What the cache is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub driver_version: String,
    pub gpu_name: String,
}

/// What the child reports (one JSON object on stdout).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measurement {
    pub uuid: String,
    pub gpu_name: String,
    pub driver_version: String,
    /// NVML's per-process used memory of the child, context and allocation.
    pub nvml_used_bytes: u64,
    /// The child's one allocation.
    pub alloc_bytes: u64,
    /// `nvml_used_bytes - alloc_bytes`.
    pub context_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: Key,
    /// The charge to write into limits.
    pub charge_bytes: u64,
    pub measured: Option<Measurement>,
    /// Why the measurement failed (then `charge_bytes` is the built-in default).
    pub error: Option<String>,
    pub at_unix: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    entries: Vec<Entry>,
}

#[derive(Debug, thiserror::Error)]
pub enum CtxCostError {
    #[error(transparent)]
    Helper(#[from] HelperError),
    #[error("{what} printed no valid result: {message}")]
    Output { what: String, message: String },
    #[error("implausible measurement: {0}")]
    Implausible(String),
    #[error("cannot write {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("context_overhead in the config: {0}")]
    Setting(#[from] crate::units::SizeError),
}

/// The charge for a measured context: + margin, rounded up to 2 MiB.
pub fn charge_for(context_bytes: u64) -> u64 {
    let c = context_bytes.saturating_add(MARGIN_BYTES);
    c.div_ceil(2 * MIB) * (2 * MIB)
}

/// Driver version from the host's libcuda file name
/// (`libcuda.so.580.159.04` → `580.159.04`); else the file's path, so a
/// differently installed driver still gets its own key.
pub fn driver_version_of(libcuda: &Path) -> String {
    let name = libcuda
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.strip_prefix("libcuda.so.") {
        Some(v) if v.contains('.') && v.bytes().all(|b| b.is_ascii_digit() || b == b'.') => {
            v.to_string()
        }
        _ => format!("unversioned:{}", libcuda.display()),
    }
}

/// The cache file of a ledger directory (root-owned, mode 0644).
pub struct Cache {
    path: PathBuf,
}

impl Cache {
    pub fn new(ledger_dir: &Path) -> Cache {
        Cache {
            path: ledger_dir.join(CACHE_FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> CacheFile {
        // never through a symlink, never more than a cache can hold
        let Ok(bytes) = fsutil::read_regular_capped(&self.path, 1 << 20) else {
            return CacheFile::default();
        };
        match serde_json::from_slice::<CacheFile>(&bytes) {
            Ok(c) if c.version == CACHE_VERSION => c,
            _ => CacheFile::default(), // corrupt or from another version: measure again
        }
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.load()
            .entries
            .into_iter()
            .filter(|e| e.charge_bytes <= MAX_PLAUSIBLE_BYTES + MARGIN_BYTES)
            .collect()
    }

    pub fn get(&self, key: &Key) -> Option<Entry> {
        self.entries().into_iter().find(|e| &e.key == key)
    }

    /// The newest entry for a GPU model under any driver (used when the
    /// host's libcuda cannot be found, so the driver version is unknown).
    pub fn get_any_driver(&self, gpu_name: &str) -> Option<Entry> {
        self.entries()
            .into_iter()
            .filter(|e| e.key.gpu_name == gpu_name)
            .max_by_key(|e| e.at_unix)
    }

    /// Insert or replace the entry of its key (lock, read, write atomically).
    pub fn put(&self, entry: Entry) -> Result<(), CtxCostError> {
        let werr = |err| CtxCostError::Write {
            path: self.path.clone(),
            err,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fsutil::secure_dir(dir, 0o755).map_err(werr)?;
        let _lock = fsutil::lock_exclusive(&dir.join(".context-cost.lock")).map_err(werr)?;
        let mut c = self.load();
        c.version = CACHE_VERSION;
        c.entries.retain(|e| e.key != entry.key);
        c.entries.push(entry);
        let mut bytes = serde_json::to_vec_pretty(&c).expect("serializable");
        bytes.push(b'\n');
        fsutil::write_atomic(&self.path, &bytes, 0o644).map_err(werr)
    }
}

/// What a context is known to cost on this host, for admission
/// ([`crate::placement::ContextCosts`]): the configured size, else the
/// newest successful measurement per GPU model in the cache. The cache is
/// read only for a request that could be that small (under
/// `MAX_PLAUSIBLE_BYTES` + margin on some GPU), so large slices cost no read.
pub fn known_costs(cfg: &crate::Config, could_be_small: bool) -> crate::placement::ContextCosts {
    let mut out = crate::placement::ContextCosts::default();
    match cfg.context_overhead_setting() {
        Ok(Setting::Bytes(b)) => out.configured = Some(b),
        Ok(_) if could_be_small => {
            let mut measured: Vec<Entry> = Cache::new(&cfg.ledger_dir)
                .entries()
                .into_iter()
                .filter(|e| e.error.is_none() && e.measured.is_some())
                .collect();
            // the newest measurement of a model wins (as in get_any_driver)
            measured.sort_by_key(|e| e.at_unix);
            for e in measured {
                out.measured.insert(e.key.gpu_name, e.charge_bytes);
            }
        }
        _ => {}
    }
    out
}

/// Something that measures a context on one GPU (the child process; a
/// closure in tests).
pub trait Measurer {
    fn measure(&self, uuid: &str) -> Result<Measurement, CtxCostError>;
}

/// Where a charge came from (for logs, doctor and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Config,
    Cache,
    Measured,
    /// Measurement failed: built-in default (the failure is cached too, so
    /// a broken driver does not cost a timeout at every container start).
    MeasureFailed(String),
    /// No libcuda on the host and no cache entry: built-in default.
    Builtin,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub bytes: u64,
    pub source: Source,
}

/// One GPU of a container: its UUID and model name.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub uuid: &'a str,
    pub gpu_name: &'a str,
}

/// The context charge for a container on `targets` (the largest over its
/// GPU models). `driver_version` is None when the host has no libcuda;
/// `measurer` is None then too.
pub fn resolve(
    setting: Setting,
    cache: &Cache,
    driver_version: Option<&str>,
    targets: &[Target<'_>],
    measurer: Option<&dyn Measurer>,
) -> Resolved {
    if let Setting::Bytes(b) = setting {
        return Resolved {
            bytes: b,
            source: Source::Config,
        };
    }
    let mut best: Option<Resolved> = None;
    for t in targets {
        let r = resolve_one(cache, driver_version, t, measurer);
        match &best {
            Some(b) if b.bytes >= r.bytes => {}
            _ => best = Some(r),
        }
    }
    best.unwrap_or(Resolved {
        bytes: BUILTIN_DEFAULT_BYTES,
        source: Source::Builtin,
    })
}

fn resolve_one(
    cache: &Cache,
    driver_version: Option<&str>,
    t: &Target<'_>,
    measurer: Option<&dyn Measurer>,
) -> Resolved {
    let (Some(dv), Some(m)) = (driver_version, measurer) else {
        return match cache.get_any_driver(t.gpu_name) {
            Some(e) => Resolved {
                bytes: e.charge_bytes,
                source: Source::Cache,
            },
            None => Resolved {
                bytes: BUILTIN_DEFAULT_BYTES,
                source: Source::Builtin,
            },
        };
    };
    let key = Key {
        driver_version: dv.into(),
        gpu_name: t.gpu_name.into(),
    };
    if let Some(e) = cache.get(&key) {
        let fresh = fsutil::now_unix().saturating_sub(e.at_unix) < FAILED_RETRY_SECS;
        if e.error.is_none() || fresh {
            return Resolved {
                bytes: e.charge_bytes,
                source: Source::Cache,
            };
        }
    }
    let (entry, source) = measure_entry(key, t.uuid, m);
    let bytes = entry.charge_bytes;
    if let Err(e) = cache.put(entry) {
        eprintln!("gpu-quota: context cost not cached: {e}");
    }
    Resolved { bytes, source }
}

fn measure_entry(key: Key, uuid: &str, m: &dyn Measurer) -> (Entry, Source) {
    let at_unix = fsutil::now_unix();
    match m.measure(uuid).and_then(check_plausible) {
        Ok(meas) => (
            Entry {
                key,
                charge_bytes: charge_for(meas.context_bytes),
                measured: Some(meas),
                error: None,
                at_unix,
            },
            Source::Measured,
        ),
        Err(e) => {
            let msg = e.to_string();
            (
                Entry {
                    key,
                    charge_bytes: BUILTIN_DEFAULT_BYTES,
                    measured: None,
                    error: Some(msg.clone()),
                    at_unix,
                },
                Source::MeasureFailed(msg),
            )
        }
    }
}

fn check_plausible(m: Measurement) -> Result<Measurement, CtxCostError> {
    if m.nvml_used_bytes < m.alloc_bytes
        || m.context_bytes != m.nvml_used_bytes - m.alloc_bytes
        || m.context_bytes == 0
        || m.context_bytes > MAX_PLAUSIBLE_BYTES
    {
        return Err(CtxCostError::Implausible(format!("{m:?}")));
    }
    Ok(m)
}

/// Measure again and overwrite the cache (for `gpu-quota doctor`): one
/// entry per GPU model among `targets`.
pub fn remeasure(
    cache: &Cache,
    driver_version: &str,
    targets: &[Target<'_>],
    measurer: &dyn Measurer,
) -> Result<Vec<Entry>, CtxCostError> {
    let mut out: Vec<Entry> = Vec::new();
    for t in targets {
        if out.iter().any(|e| e.key.gpu_name == t.gpu_name) {
            continue;
        }
        let key = Key {
            driver_version: driver_version.into(),
            gpu_name: t.gpu_name.into(),
        };
        let (entry, _) = measure_entry(key, t.uuid, measurer);
        cache.put(entry.clone())?;
        out.push(entry);
    }
    Ok(out)
}

/// For `gpu-quota doctor`: measure every GPU model of this host again (the
/// same helper child the hook uses) and overwrite the cache entries.
pub fn measure_host(cfg: &crate::Config) -> Result<Vec<Entry>, CtxCostError> {
    let fail = |m: String| CtxCostError::Output {
        what: "context measurement".into(),
        message: m,
    };
    let files = crate::driver::discover(&cfg.driver).map_err(|e| fail(e.to_string()))?;
    let libcuda = crate::driver::libcuda_of(&files).ok_or_else(|| fail("no libcuda".into()))?;
    let libnvml =
        crate::driver::libnvml_of(&files).ok_or_else(|| fail("no libnvidia-ml".into()))?;
    let helper = crate::paths::driver_helper(cfg)
        .ok_or_else(|| fail(format!("{} not found", crate::paths::DRIVER_HELPER_NAME)))?;
    let inv = crate::Inventory::load(cfg).map_err(|e| fail(e.to_string()))?;
    let targets: Vec<Target> = inv
        .gpus
        .iter()
        .map(|g| Target {
            uuid: &g.uuid,
            gpu_name: &g.name,
        })
        .collect();
    let m = ChildMeasurer {
        helper,
        libcuda: libcuda.clone(),
        libnvml,
        timeout: MEASURE_TIMEOUT,
    };
    remeasure(
        &Cache::new(&cfg.ledger_dir),
        &driver_version_of(&libcuda),
        &targets,
        &m,
    )
}

/// The hook's charge for a container on the GPUs `uuids` (the largest
/// over their models): the config's `context_overhead` when it is a size;
/// else the cache, or a measurement by the `measure-context` child
/// ([`ChildMeasurer`]: gpu-quota-driver with the host's libcuda and
/// libnvidia-ml from `files`), cached for the next start. The GPUs' model
/// names come from the inventory known without NVML (the hook loads no
/// library). `Source::MeasureFailed` is for the caller to say.
pub fn for_container(
    cfg: &crate::Config,
    files: &crate::driver::DriverFiles,
    uuids: &[&str],
) -> Result<Resolved, CtxCostError> {
    let setting = cfg.context_overhead_setting()?;
    if let Setting::Bytes(bytes) = setting {
        return Ok(Resolved {
            bytes,
            source: Source::Config,
        });
    }
    let inv = crate::inventory::inventory_without_nvml(cfg);
    let names: Vec<&str> = uuids
        .iter()
        .map(|u| {
            inv.as_ref()
                .and_then(|i| i.find_uuid(u))
                .map_or("unknown", |g| g.name.as_str())
        })
        .collect();
    let targets: Vec<Target> = uuids
        .iter()
        .zip(&names)
        .map(|(uuid, gpu_name)| Target { uuid, gpu_name })
        .collect();
    let libcuda = crate::driver::libcuda_of(files);
    let measurer = match (
        &libcuda,
        crate::driver::libnvml_of(files),
        crate::paths::driver_helper(cfg),
    ) {
        (Some(c), Some(n), Some(helper)) => Some(ChildMeasurer {
            helper,
            libcuda: c.clone(),
            libnvml: n,
            timeout: MEASURE_TIMEOUT,
        }),
        _ => None,
    };
    let dv = libcuda.as_deref().map(driver_version_of);
    Ok(resolve(
        setting,
        &Cache::new(&cfg.ledger_dir),
        dv.as_deref(),
        &targets,
        measurer.as_ref().map(|m| m as &dyn Measurer),
    ))
}

/// The real measurer: `<gpu-quota-driver> measure-context --cuda LIB --nvml LIB --uuid U`.
pub struct ChildMeasurer {
    /// gpu-quota-driver.
    pub helper: PathBuf,
    pub libcuda: PathBuf,
    pub libnvml: PathBuf,
    pub timeout: Duration,
}

pub const MEASURE_SUBCOMMAND: &str = helper::Stage::MeasureContext.name();

impl Measurer for ChildMeasurer {
    fn measure(&self, uuid: &str) -> Result<Measurement, CtxCostError> {
        let what = format!("{} {MEASURE_SUBCOMMAND}", self.helper.display());
        let cuda = self.libcuda.to_string_lossy();
        let nvml = self.libnvml.to_string_lossy();
        let argv = helper::Measure {
            cuda: &cuda,
            nvml: &nvml,
            uuid,
        }
        .argv();
        let out = run_helper(&self.helper, &argv, &[], self.timeout, &what)?;
        let (line, text) = out.json_line();
        serde_json::from_str(&line).map_err(|e| CtxCostError::Output {
            what,
            message: format!("{e}: {:?}", text.chars().take(300).collect::<String>()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct Fake {
        calls: Cell<u32>,
        result: Result<u64, &'static str>,
    }
    impl Measurer for Fake {
        fn measure(&self, uuid: &str) -> Result<Measurement, CtxCostError> {
            self.calls.set(self.calls.get() + 1);
            match self.result {
                Ok(ctx) => Ok(Measurement {
                    uuid: uuid.into(),
                    gpu_name: "NVIDIA H200".into(),
                    driver_version: "580.159.04".into(),
                    nvml_used_bytes: ctx + 2 * MIB,
                    alloc_bytes: 2 * MIB,
                    context_bytes: ctx,
                }),
                Err(e) => Err(CtxCostError::Implausible(e.into())),
            }
        }
    }
    fn fake(result: Result<u64, &'static str>) -> Fake {
        Fake {
            calls: Cell::new(0),
            result,
        }
    }
    const H200: Target = Target {
        uuid: "GPU-1",
        gpu_name: "NVIDIA H200",
    };

    #[test]
    fn charge_adds_the_margin_rounded_to_2_mib() {
        assert_eq!(charge_for(518 * MIB), 614 * MIB);
        assert_eq!(charge_for(518 * MIB + 1), 616 * MIB);
        assert!(
            charge_for(520 * MIB) >= 612 * MIB,
            "covers the H200 bare torch figure"
        );
    }

    #[test]
    fn driver_version_from_the_file_name() {
        assert_eq!(
            driver_version_of(Path::new("/usr/lib/libcuda.so.580.159.04")),
            "580.159.04"
        );
        assert_eq!(
            driver_version_of(Path::new("/x/libcuda.so.1")),
            "unversioned:/x/libcuda.so.1"
        );
    }

    #[test]
    fn measured_once_then_cached_per_driver_and_model() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        let m = fake(Ok(450 * MIB));
        let r = resolve(Setting::Auto, &cache, Some("580.1"), &[H200], Some(&m));
        assert_eq!(r.source, Source::Measured);
        assert_eq!(r.bytes, charge_for(450 * MIB));
        let r2 = resolve(Setting::Auto, &cache, Some("580.1"), &[H200], Some(&m));
        assert_eq!((r2.source, r2.bytes), (Source::Cache, r.bytes));
        assert_eq!(m.calls.get(), 1, "the second container reads the cache");
        // another driver version: measured again
        resolve(Setting::Auto, &cache, Some("615.2"), &[H200], Some(&m));
        assert_eq!(m.calls.get(), 2);
        // the file: one entry per key, mode 0644, valid JSON
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(cache.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert_eq!(cache.entries().len(), 2);
        // an override wins and measures nothing
        let r3 = resolve(Setting::Bytes(MIB), &cache, Some("9"), &[H200], Some(&m));
        assert_eq!(
            (r3.source, r3.bytes, m.calls.get()),
            (Source::Config, MIB, 2)
        );
    }

    #[test]
    fn failure_is_the_builtin_default_and_cached() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        let m = fake(Err("boom"));
        let r = resolve(Setting::Auto, &cache, Some("580.1"), &[H200], Some(&m));
        assert!(matches!(r.source, Source::MeasureFailed(ref s) if s.contains("boom")));
        assert_eq!(r.bytes, BUILTIN_DEFAULT_BYTES);
        resolve(Setting::Auto, &cache, Some("580.1"), &[H200], Some(&m));
        assert_eq!(m.calls.get(), 1);
        let key = Key {
            driver_version: "580.1".into(),
            gpu_name: "NVIDIA H200".into(),
        };
        let mut e = cache.get(&key).unwrap();
        assert!(e.error.is_some());
        // an hour later the failure is retried; a success is kept forever
        e.at_unix -= FAILED_RETRY_SECS;
        cache.put(e).unwrap();
        let ok = fake(Ok(400 * MIB));
        let r = resolve(Setting::Auto, &cache, Some("580.1"), &[H200], Some(&ok));
        assert_eq!((r.source, ok.calls.get()), (Source::Measured, 1));
        let mut e = cache.get(&key).unwrap();
        e.at_unix -= 100 * FAILED_RETRY_SECS;
        cache.put(e).unwrap();
        resolve(Setting::Auto, &cache, Some("580.1"), &[H200], Some(&ok));
        assert_eq!(ok.calls.get(), 1);
    }

    /// The cache the hook writes is the one libgpuquota.so reads when it
    /// runs standalone (gpuquota_formats::ctxcost::max_charge_from_cache).
    #[test]
    fn the_interceptor_reads_the_cache_the_host_writes() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        for (gpu, charge) in [("NVIDIA H200", 645_922_816u64), ("NVIDIA A100", 700 * MIB)] {
            cache
                .put(Entry {
                    key: Key {
                        driver_version: "580.1".into(),
                        gpu_name: gpu.into(),
                    },
                    charge_bytes: charge,
                    measured: None,
                    error: None,
                    at_unix: 1,
                })
                .unwrap();
        }
        let text = std::fs::read(d.path().join(CACHE_FILE)).unwrap();
        assert_eq!(
            gpuquota_formats::ctxcost::max_charge_from_cache(&text),
            Some(700 * MIB),
            "{}",
            String::from_utf8_lossy(&text)
        );
    }

    #[test]
    fn implausible_measurements_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        for bad in [0, MAX_PLAUSIBLE_BYTES + 1] {
            let r = resolve(
                Setting::Auto,
                &cache,
                Some(&format!("v{bad}")),
                &[H200],
                Some(&fake(Ok(bad))),
            );
            assert_eq!(r.bytes, BUILTIN_DEFAULT_BYTES, "{bad}");
        }
    }

    #[test]
    fn no_driver_means_builtin_unless_cached() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        let r = resolve(Setting::Auto, &cache, None, &[H200], None);
        assert_eq!(
            (r.bytes, r.source),
            (BUILTIN_DEFAULT_BYTES, Source::Builtin)
        );
        assert_ne!(BUILTIN_DEFAULT_BYTES, 0);
        resolve(
            Setting::Auto,
            &cache,
            Some("580.1"),
            &[H200],
            Some(&fake(Ok(300 * MIB))),
        );
        let r = resolve(Setting::Auto, &cache, None, &[H200], None);
        assert_eq!((r.bytes, r.source), (charge_for(300 * MIB), Source::Cache));
    }

    #[test]
    fn largest_model_wins_and_corrupt_cache_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let cache = Cache::new(d.path());
        std::fs::write(cache.path(), b"{not json").unwrap();
        struct ByUuid;
        impl Measurer for ByUuid {
            fn measure(&self, uuid: &str) -> Result<Measurement, CtxCostError> {
                let ctx = if uuid == "GPU-big" {
                    700 * MIB
                } else {
                    400 * MIB
                };
                Ok(Measurement {
                    uuid: uuid.into(),
                    gpu_name: String::new(),
                    driver_version: String::new(),
                    nvml_used_bytes: ctx + MIB,
                    alloc_bytes: MIB,
                    context_bytes: ctx,
                })
            }
        }
        let t = [
            Target {
                uuid: "GPU-small",
                gpu_name: "A",
            },
            Target {
                uuid: "GPU-big",
                gpu_name: "B",
            },
        ];
        let r = resolve(Setting::Auto, &cache, Some("1.2"), &t, Some(&ByUuid));
        assert_eq!(r.bytes, charge_for(700 * MIB));
        assert_eq!(cache.entries().len(), 2);
    }
}
