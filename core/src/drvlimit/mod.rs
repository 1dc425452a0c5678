//! Driver-enforced limits (NVIDIA r615+, CUDA 13.4+, cgroup v2):
//! `nvmlDeviceSetMemoryLimits_v1(device, {nameSpace, softLimit, hardLimit})`
//! on the container's own leaf cgroup. The declaration followed here is the
//! one of nvml.h (CUDA 13.4):
//!
//! ```c
//! typedef struct {
//!     const char* nameSpace;         // Full path to sysfs cgroup file name
//!     unsigned long long softLimit;  // Soft memory limit in Bytes.
//!     unsigned long long hardLimit;  // Hard memory limit in Bytes.
//! } nvmlSetMemoryLimits_v1_t;
//! nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits);
//! ```
//!
//! gpu-quota sets only the hard limit (soft 0, so the dmem backend's
//! ancestor reservation is never raised) to the slice, at createRuntime, and
//! clears it (soft 0, hard max) before the cgroup goes. runc destroys the
//! cgroup *before* it runs poststop hooks (libcontainer `destroy()`:
//! `cgroupManager.Destroy()`, then `runPoststopHooks`), so the clear runs in
//! the runtime's `delete` before it calls runc (see [`clear_recorded`]).
//! NVML is only ever loaded in a helper child (`gpu-quota-driver
//! driver-limits …`) with a timeout: the hook itself must stay
//! single-threaded to enter the container's mount namespace.
//!
//! Not run on a real r615 driver: the H200 used for this project has
//! driver 580 (no such symbol). Tested with the fake NVML (tests/fake).
use crate::formats::helper;
use crate::helper::{run_helper, HelperError};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod probe;
pub use probe::{
    detect, detect_at, is_cgroup_v2, maybe_supported, maybe_supported_cached, Detection,
    PROBE_CACHE_FILE,
};

pub const SYMBOL: &str = "nvmlDeviceSetMemoryLimits_v1";
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// In the container's state directory: what was set, for the clear.
pub const RECORD_FILE: &str = "driver-limits.json";
pub const HELPER_SUBCOMMAND: &str = helper::Stage::DriverLimits.name();
/// In the ledger directory: written once the hook has set a driver limit on
/// this host; tells the runtime that a foreground `run` needs `--keep`.
pub const ACTIVE_MARKER: &str = "driver-limits-active";

pub fn active_marker(cfg: &crate::Config) -> PathBuf {
    cfg.ledger_dir.join(ACTIVE_MARKER)
}
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// hardLimit of a cleared limit ("max": device capacity).
pub const HARD_MAX: u64 = u64::MAX;

#[derive(Debug, thiserror::Error)]
pub enum DrvLimitError {
    #[error("cannot load {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("{0} is not in this driver's libnvidia-ml (needs r615+)")]
    NoSymbol(&'static str),
    #[error("NVML {call} failed with code {code}")]
    Nvml { call: &'static str, code: i32 },
    #[error("GPU {0} is in MIG mode: driver limits do not apply to MIG")]
    Mig(String),
    #[error("not cgroup v2 ({0})")]
    NotCgroupV2(String),
    #[error("cgroup of pid {pid}: {message}")]
    Cgroup { pid: u32, message: String },
    #[error("cannot stat {path}: {err}")]
    Stat { path: PathBuf, err: std::io::Error },
    #[error(transparent)]
    Helper(#[from] HelperError),
    #[error("driver-limits helper printed no valid record: {0}")]
    Output(String),
}

impl DrvLimitError {
    /// Whether this is worth a line in runc's log for each container. Not a
    /// host without cgroup v2: that holds for every container alike, and
    /// `gpu-quota doctor` says it once (`Detection::describe`).
    pub fn per_container(&self) -> bool {
        !matches!(self, DrvLimitError::NotCgroupV2(_))
    }
}

/// The container's own cgroup directory from `/proc/<pid>/cgroup` (cgroup
/// v2: the single `0::/path` line), checked to be a real directory below
/// `cgroup_root` (no `..`, no symlink).
pub fn container_cgroup(
    proc_root: &Path,
    cgroup_root: &Path,
    pid: u32,
) -> Result<PathBuf, DrvLimitError> {
    if !is_cgroup_v2(cgroup_root) {
        return Err(DrvLimitError::NotCgroupV2(format!(
            "{} has no cgroup.controllers",
            cgroup_root.display()
        )));
    }
    let bad = |message: String| DrvLimitError::Cgroup { pid, message };
    let p = proc_root.join(pid.to_string()).join("cgroup");
    let text = std::fs::read_to_string(&p).map_err(|e| bad(format!("{}: {e}", p.display())))?;
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| bad(format!("no cgroup v2 line in {}", p.display())))?;
    if !rel.starts_with('/')
        || rel == "/"
        || rel
            .split('/')
            .any(|c| c == ".." || c == "." || c.contains('\0'))
        || rel.ends_with(" (deleted)")
    {
        return Err(bad(format!("unusable cgroup path {rel:?}")));
    }
    let dir = cgroup_root.join(rel.trim_start_matches('/'));
    let canon = std::fs::canonicalize(&dir).map_err(|e| bad(format!("{}: {e}", dir.display())))?;
    let root = std::fs::canonicalize(cgroup_root).map_err(|e| bad(e.to_string()))?;
    if canon != dir || !canon.starts_with(&root) || !canon.is_dir() {
        return Err(bad(format!(
            "{} is not a plain cgroup directory",
            dir.display()
        )));
    }
    Ok(canon)
}

/// The effect: set one GPU's limits on one cgroup.
pub trait LimitDriver {
    fn set(&mut self, uuid: &str, cgroup: &Path, soft: u64, hard: u64)
        -> Result<(), DrvLimitError>;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLimit {
    pub uuid: String,
    pub hard_bytes: u64,
}

/// What was set on which cgroup (kept in the container's state directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub cgroup: PathBuf,
    /// Identity of the cgroup directory: a later cgroup of the same path
    /// (a new container) is never cleared.
    pub dev: u64,
    pub ino: u64,
    pub gpus: Vec<GpuLimit>,
}

fn ident(p: &Path) -> Result<(u64, u64), DrvLimitError> {
    let m = std::fs::metadata(p).map_err(|err| DrvLimitError::Stat {
        path: p.into(),
        err,
    })?;
    Ok((m.dev(), m.ino()))
}

/// The driver-level limits of a reservation: each GPU's grant, as it is.
pub fn limits_of(r: &crate::Reservation) -> Vec<GpuLimit> {
    r.slices
        .iter()
        .map(|s| GpuLimit {
            uuid: s.uuid.clone(),
            hard_bytes: s.vram_bytes,
        })
        .collect()
}

/// Set `hard = slice, soft = 0` for every GPU; all or nothing.
pub fn apply(
    drv: &mut dyn LimitDriver,
    cgroup: &Path,
    gpus: &[GpuLimit],
) -> Result<Record, DrvLimitError> {
    let (dev, ino) = ident(cgroup)?;
    for (i, g) in gpus.iter().enumerate() {
        if let Err(e) = drv.set(&g.uuid, cgroup, 0, g.hard_bytes) {
            for done in &gpus[..i] {
                let _ = drv.set(&done.uuid, cgroup, 0, HARD_MAX);
            }
            return Err(e);
        }
    }
    Ok(Record {
        cgroup: cgroup.into(),
        dev,
        ino,
        gpus: gpus.to_vec(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cleared {
    Cleared,
    /// The cgroup is already gone (nothing left to clear).
    Gone,
    /// Another cgroup now has that path: left alone.
    Replaced,
}

/// Clear (soft 0, hard max) what `rec` set, if its cgroup still exists.
pub fn clear(drv: &mut dyn LimitDriver, rec: &Record) -> Result<Cleared, DrvLimitError> {
    match std::fs::metadata(&rec.cgroup) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Cleared::Gone),
        Err(err) => {
            return Err(DrvLimitError::Stat {
                path: rec.cgroup.clone(),
                err,
            })
        }
        Ok(m) if (m.dev(), m.ino()) != (rec.dev, rec.ino) => return Ok(Cleared::Replaced),
        Ok(_) => {}
    }
    let mut first_err = None;
    for g in &rec.gpus {
        if let Err(e) = drv.set(&g.uuid, &rec.cgroup, 0, HARD_MAX) {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(Cleared::Cleared),
    }
}

// ------------------------------------------------------- parent side (hook, runtime)

/// Run the helper to set the limits; Ok(None) when the driver turns out
/// not to have the call (the pre-check can be fooled by a string).
pub fn apply_via_helper(
    hook: &Path,
    libnvml: &Path,
    cgroup: &Path,
    gpus: &[GpuLimit],
) -> Result<Option<Record>, DrvLimitError> {
    let (nvml, cgroup) = (libnvml.to_string_lossy(), cgroup.to_string_lossy());
    let limits: Vec<String> = gpus
        .iter()
        .map(|g| {
            helper::LimitArg {
                uuid: &g.uuid,
                bytes: g.hard_bytes,
            }
            .to_string()
        })
        .collect();
    let mut a: Vec<&str> = helper::Set {
        nvml: &nvml,
        cgroup: &cgroup,
    }
    .argv()
    .to_vec();
    for l in &limits {
        a.extend([helper::Flag::Limit.name(), l]);
    }
    let what = format!("{HELPER_SUBCOMMAND} {}", helper::Action::Set);
    let out = run_helper(hook, &a, &[], HELPER_TIMEOUT, &what)?;
    let (line, text) = out.json_line();
    let v: HelperReply =
        serde_json::from_str(&line).map_err(|e| DrvLimitError::Output(format!("{e}: {text:?}")))?;
    match v {
        HelperReply::Set(r) => Ok(Some(r)),
        HelperReply::Unsupported(_) => Ok(None),
        HelperReply::Cleared(_) => Err(DrvLimitError::Output(text)),
    }
}

/// The hook's part (createRuntime, r615+): set `gpus`' hard limits on the
/// cgroup of the container whose init is `pid`, through the
/// `driver-limits set` child (gpu-quota-driver with the host's
/// libnvidia-ml `nvml`). Ok(None): nothing set — the driver cannot have
/// the call (one file read per driver install, cached in `state_dir`, no
/// child), or turned out not to have it. The caller records the result
/// (`RECORD_FILE`, after [`ACTIVE_MARKER`]) for the clear.
pub fn set_for_container(
    cfg: &crate::Config,
    nvml: &Path,
    pid: u32,
    gpus: &[GpuLimit],
) -> Result<Option<Record>, DrvLimitError> {
    if !maybe_supported_cached(&cfg.state_dir, nvml) {
        return Ok(None);
    }
    let cg = container_cgroup(Path::new("/proc"), Path::new(CGROUP_ROOT), pid)?;
    let helper = crate::paths::driver_helper(cfg).ok_or_else(|| {
        DrvLimitError::Output(format!(
            "{} not found beside the hook (set `driver_helper` in the config)",
            crate::paths::DRIVER_HELPER_NAME
        ))
    })?;
    apply_via_helper(&helper, nvml, &cg, gpus)
}

/// What the helper prints (one JSON line).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HelperReply {
    Set(Record),
    Unsupported(String),
    Cleared(Cleared),
}

/// Clear what a container's state directory records (the runtime calls
/// this in `delete` before runc removes the cgroup). No record: nothing
/// was set, nothing to do. The record is removed once cleared.
pub fn clear_recorded(
    hook: &Path,
    libnvml: &Path,
    state_dir: &Path,
) -> Result<Option<Cleared>, DrvLimitError> {
    let p = state_dir.join(RECORD_FILE);
    let Ok(bytes) = crate::fsutil::read_regular_capped(&p, 64 << 10) else {
        return Ok(None);
    };
    let rec: Record =
        serde_json::from_slice(&bytes).map_err(|e| DrvLimitError::Output(e.to_string()))?;
    let rec_s = serde_json::to_string(&rec).expect("serializable");
    let nv = libnvml.to_string_lossy();
    let argv = helper::Clear {
        nvml: &nv,
        record: &rec_s,
    }
    .argv();
    let what = format!("{HELPER_SUBCOMMAND} {}", helper::Action::Clear);
    let out = run_helper(hook, &argv, &[], HELPER_TIMEOUT, &what)?;
    let (line, text) = out.json_line();
    match serde_json::from_str::<HelperReply>(&line) {
        Ok(HelperReply::Cleared(c)) => {
            let _ = std::fs::remove_file(&p);
            Ok(Some(c))
        }
        _ => Err(DrvLimitError::Output(text)),
    }
}

/// For the runtime's `delete`, before it calls runc (runc removes the
/// cgroup before poststop hooks run): clear the driver limits of container
/// `id` under runc root `root`, if the hook set any. Ok(None): nothing set,
/// or the container's init is still alive and `force` is not set (a
/// `delete` without `--force` of a running container fails in runc and
/// must not drop the limit).
pub fn clear_for_container(
    cfg: &crate::Config,
    id: &str,
    root: Option<&str>,
    force: bool,
) -> Result<Option<Cleared>, DrvLimitError> {
    // the hook writes the marker (before it records a limit) the first time
    // it sets one on this host: without it there is nothing to clear, and
    // the ledger is not read (a `delete` must not parse every reservation)
    if !active_marker(cfg).exists() {
        return Ok(None);
    }
    let Ok(data) = crate::Ledger::new(cfg).read() else {
        return Ok(None);
    };
    let Some(r) = data
        .reservations
        .iter()
        .find(|r| r.container_id == id && r.runtime_root.as_deref() == root)
    else {
        return Ok(None);
    };
    let dir = crate::state::existing_dir(cfg, r);
    if !dir.join(RECORD_FILE).is_file() {
        return Ok(None);
    }
    if let (Some(pid), Some(start), false) = (r.pid, r.pid_start, force) {
        if crate::fsutil::process_alive(pid, start) {
            return Ok(None);
        }
    }
    clear_in_dir(cfg, &dir)
}

/// gpu-quota-driver and the host's libnvidia-ml, for a change made after
/// the container started (a resize, a release).
fn helper_and_nvml(cfg: &crate::Config) -> Result<(PathBuf, PathBuf), DrvLimitError> {
    let helper = crate::paths::driver_helper(cfg).ok_or_else(|| {
        DrvLimitError::Output(format!("{} not found", crate::paths::DRIVER_HELPER_NAME))
    })?;
    let files = crate::driver::discover(&cfg.driver).map_err(|e| DrvLimitError::Load {
        path: cfg.driver.ldcache.clone(),
        message: e.to_string(),
    })?;
    let nvml = crate::driver::libnvml_of(&files).ok_or_else(|| DrvLimitError::Load {
        path: "libnvidia-ml.so.1".into(),
        message: "not found among the driver files".into(),
    })?;
    Ok((helper, nvml))
}

/// Change one GPU's hard limit in what state directory `dir` records (a
/// resize of a running container): set through gpu-quota-driver on the
/// recorded cgroup, if it is still that container's, then recorded.
/// Ok(false): nothing recorded there (no driver limit on this host or for
/// this container), nothing to change.
pub fn update_in_dir(
    cfg: &crate::Config,
    dir: &Path,
    uuid: &str,
    hard_bytes: u64,
) -> Result<bool, DrvLimitError> {
    let p = dir.join(RECORD_FILE);
    let Ok(bytes) = crate::fsutil::read_regular_capped(&p, 64 << 10) else {
        return Ok(false);
    };
    let mut rec: Record =
        serde_json::from_slice(&bytes).map_err(|e| DrvLimitError::Output(e.to_string()))?;
    if ident(&rec.cgroup)? != (rec.dev, rec.ino) {
        return Ok(false); // the container's cgroup is gone: nothing holds the limit
    }
    let (helper, nvml) = helper_and_nvml(cfg)?;
    let one = [GpuLimit {
        uuid: uuid.into(),
        hard_bytes,
    }];
    if apply_via_helper(&helper, &nvml, &rec.cgroup, &one)?.is_none() {
        return Ok(false);
    }
    for g in rec.gpus.iter_mut().filter(|g| g.uuid == uuid) {
        g.hard_bytes = hard_bytes;
    }
    let out = serde_json::to_vec(&rec).expect("serializable");
    crate::fsutil::write_atomic(&p, &out, 0o644).map_err(|err| DrvLimitError::Stat {
        path: p.clone(),
        err,
    })?;
    Ok(true)
}

/// Clear the driver limit recorded in state directory `dir` through
/// gpu-quota-driver and the host's NVML. Ok(None): nothing recorded there
/// (drivers before r615, cgroup v1: the common case costs one stat and no
/// child).
pub fn clear_in_dir(cfg: &crate::Config, dir: &Path) -> Result<Option<Cleared>, DrvLimitError> {
    if !dir.join(RECORD_FILE).is_file() {
        return Ok(None);
    }
    let (helper, nvml) = helper_and_nvml(cfg)?;
    clear_recorded(&helper, &nvml, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        calls: Vec<(String, PathBuf, u64, u64)>,
        fail_uuid: Option<String>,
    }
    impl LimitDriver for Log {
        fn set(
            &mut self,
            uuid: &str,
            cg: &Path,
            soft: u64,
            hard: u64,
        ) -> Result<(), DrvLimitError> {
            self.calls.push((uuid.into(), cg.into(), soft, hard));
            if self.fail_uuid.as_deref() == Some(uuid) {
                return Err(DrvLimitError::Nvml {
                    call: SYMBOL,
                    code: 4,
                });
            }
            Ok(())
        }
    }
    fn gl(u: &str, b: u64) -> GpuLimit {
        GpuLimit {
            uuid: u.into(),
            hard_bytes: b,
        }
    }

    fn fake_cgroup_fs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("cg");
        let proc_ = d.path().join("proc");
        std::fs::create_dir_all(root.join("system.slice/ctr-1.scope")).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory misc\n").unwrap();
        std::fs::create_dir_all(proc_.join("42")).unwrap();
        std::fs::write(proc_.join("42/cgroup"), "0::/system.slice/ctr-1.scope\n").unwrap();
        (d, root, proc_)
    }

    #[test]
    fn cgroup_of_the_container() {
        let (_d, root, proc_) = fake_cgroup_fs();
        let cg = container_cgroup(&proc_, &root, 42).unwrap();
        assert_eq!(
            cg,
            std::fs::canonicalize(root.join("system.slice/ctr-1.scope")).unwrap()
        );
        for bad in [
            "0::/../../etc\n",
            "0::/\n",
            "0::relative\n",
            "1:cpu:/x\n",
            "0::/missing\n",
        ] {
            std::fs::write(proc_.join("42/cgroup"), bad).unwrap();
            assert!(container_cgroup(&proc_, &root, 42).is_err(), "{bad:?}");
        }
        std::os::unix::fs::symlink("/etc", root.join("evil")).unwrap();
        std::fs::write(proc_.join("42/cgroup"), "0::/evil\n").unwrap();
        assert!(container_cgroup(&proc_, &root, 42).is_err(), "symlink");
        std::fs::remove_file(root.join("cgroup.controllers")).unwrap();
        assert!(matches!(
            container_cgroup(&proc_, &root, 42),
            Err(DrvLimitError::NotCgroupV2(_))
        ));
    }

    /// On cgroup v1 every container start logged "driver limits
    /// not set: not cgroup v2"; a host condition is said once, by doctor.
    #[test]
    fn not_cgroup_v2_is_not_said_per_container() {
        let (_d, root, proc_) = fake_cgroup_fs();
        std::fs::write(proc_.join("42/cgroup"), "0::/missing\n").unwrap();
        let e = container_cgroup(&proc_, &root, 42).unwrap_err();
        assert!(
            e.per_container(),
            "a container's own cgroup problem is said: {e}"
        );
        std::fs::remove_file(root.join("cgroup.controllers")).unwrap();
        let e = container_cgroup(&proc_, &root, 42).unwrap_err();
        assert!(matches!(e, DrvLimitError::NotCgroupV2(_)), "{e}");
        assert!(!e.per_container(), "cgroup v1 is a host condition: {e}");
    }

    #[test]
    fn apply_sets_hard_only_and_clear_resets_to_max() {
        let (_d, root, _) = fake_cgroup_fs();
        let cg = root.join("system.slice/ctr-1.scope");
        let mut log = Log::default();
        let rec = apply(&mut log, &cg, &[gl("GPU-a", 4 << 30), gl("GPU-b", 4 << 30)]).unwrap();
        assert_eq!(
            log.calls,
            vec![
                ("GPU-a".into(), cg.clone(), 0, 4 << 30),
                ("GPU-b".into(), cg.clone(), 0, 4 << 30)
            ]
        );
        log.calls.clear();
        assert_eq!(clear(&mut log, &rec).unwrap(), Cleared::Cleared);
        assert_eq!(
            log.calls,
            vec![
                ("GPU-a".into(), cg.clone(), 0, HARD_MAX),
                ("GPU-b".into(), cg.clone(), 0, HARD_MAX)
            ]
        );
        // a new cgroup at the same path is not touched; a gone one needs nothing
        log.calls.clear();
        std::fs::remove_dir(&cg).unwrap();
        assert_eq!(clear(&mut log, &rec).unwrap(), Cleared::Gone);
        std::fs::create_dir(&cg).unwrap();
        let mut rec2 = rec.clone();
        rec2.ino = rec.ino.wrapping_add(12345);
        assert_eq!(clear(&mut log, &rec2).unwrap(), Cleared::Replaced);
        assert!(log.calls.is_empty());
    }

    #[test]
    fn apply_is_all_or_nothing() {
        let (_d, root, _) = fake_cgroup_fs();
        let cg = root.join("system.slice/ctr-1.scope");
        let mut log = Log {
            fail_uuid: Some("GPU-b".into()),
            ..Log::default()
        };
        assert!(apply(&mut log, &cg, &[gl("GPU-a", 1 << 30), gl("GPU-b", 1 << 30)]).is_err());
        assert_eq!(
            log.calls.last().unwrap(),
            &("GPU-a".to_string(), cg.clone(), 0, HARD_MAX)
        );
    }

    #[test]
    fn delete_looks_for_a_record_only_where_the_marker_is() {
        use crate::ledger::{LedgerData, ResState, Reservation};
        let d = tempfile::tempdir().unwrap();
        let cfg = crate::Config {
            ledger_dir: d.path().join("ledger"),
            state_dir: d.path().join("state"),
            hook: Some(d.path().join("no-such-hook")),
            ..crate::Config::default()
        };
        let r = Reservation {
            started_unix: Some(0),
            pid: Some(u32::MAX - 1),
            pid_start: Some(1),
            state: ResState::Running,
            ..Reservation::new("c1", Some("/run/x"), "/b", vec![], "vram=1g")
        };
        std::fs::create_dir_all(&cfg.ledger_dir).unwrap();
        let data = LedgerData {
            reservations: vec![r.clone()],
            ..LedgerData::default()
        };
        std::fs::write(
            cfg.ledger_dir.join("ledger.json"),
            serde_json::to_vec(&data).unwrap(),
        )
        .unwrap();
        let dir = crate::state::container_dir(&cfg, &r);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(RECORD_FILE), b"{}").unwrap();
        // no marker: nothing was ever set on this host, nothing is read
        assert!(matches!(
            clear_for_container(&cfg, "c1", Some("/run/x"), true),
            Ok(None)
        ));
        // with the marker the record is found and a clear attempted (which
        // fails here: no hook, no NVML)
        std::fs::write(active_marker(&cfg), b"").unwrap();
        assert!(clear_for_container(&cfg, "c1", Some("/run/x"), true).is_err());
        assert!(matches!(
            clear_for_container(&cfg, "c2", Some("/run/x"), true),
            Ok(None)
        ));
    }
}
