//! One lifecycle for a container with a slice: admit → setup → release.
//!
//! * **admit** (runtime `create`/`run`): place the request in the ledger;
//!   reservations of dead containers reclaimed on the way are released
//!   here, and the admission or refusal is recorded.
//!   A container whose config presents a prepared DRA claim's variable
//!   (`GPU_QUOTA_CLAIM_<uid>=<token>`, from the claim's CDI device) is
//!   admitted by [`admit_claim`] instead: bound to that claim when the token
//!   matches (`claims::bind`), exactly the claim's slice, the variable taken
//!   out of config.json; requests are not read (issue 20).
//! * **setup** (runtime, before runc): the bundle's config.json is loaded
//!   once into a [`Bundle`], modified (device nodes, cgroup rules, the
//!   hook entries with the reservation's key, the assignment annotation)
//!   and flushed once, atomically, with its mode kept; the state directory
//!   (its own tmpfs) is made before runc clones the mount namespace.
//!   The hook then acts on *that reservation* ([`confirm_for_hook`]), found
//!   by id, runc root and bundle; it never reads the request again.
//! * **release**: every path that ends a container (runtime `delete`, hook
//!   `poststop`, `gc`, `gpu-quota release`, a refused or rolled-back create,
//!   a reclaim during admission) takes the reservations out of the ledger
//!   and calls [`release`], which for each one, in this order:
//!   1. clears the r615 driver limit the hook recorded in its state
//!      directory (`driver-limits.json`), while the cgroup may still exist;
//!   2. removes its state directory (and an old-named one nobody else
//!      holds, `state::remove_released`);
//!
//!   then records the event and bumps the counters once for all of them.
//!   A reservation released by force while its process still runs keeps its
//!   limit and its state (they are mounted in it); the runtime's `delete`
//!   ends them later ([`release_orphan`]); otherwise `gc`'s sweep removes
//!   the directory once no reservation owns it (without a clear).
//!
//! The effects of a release are behind [`Effects`], so the order is tested
//! without root.
use crate::{
    claims::{self, ClaimError, Presented},
    config::Config,
    ctxcost, devices, drvlimit, events, fsutil,
    ledger::{self, Key, LedgerError},
    paths, spec, state, Inventory, Ledger, Request, Reservation,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path} is not valid JSON ({err}) and seems to request GPU memory; refusing")]
    RequestInInvalidJson {
        path: PathBuf,
        err: serde_json::Error,
    },
    #[error("{path} is not valid JSON: {err}")]
    Json {
        path: PathBuf,
        err: serde_json::Error,
    },
    #[error("{path}: {message}")]
    Patch { path: PathBuf, message: String },
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("preparing {path}: {err}")]
    State { path: PathBuf, err: std::io::Error },
    #[error("gpu-quota-hook not found next to gpu-quota-runtime; set `hook` in {0}")]
    NoHook(PathBuf),
    #[error(transparent)]
    Devices(#[from] devices::DeviceError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    MountConflict(#[from] crate::mountplan::MountConflict),
    #[error("container id {0:?} has characters gpu-quota does not accept")]
    BadId(String),
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error(transparent)]
    Engine(#[from] crate::toolkit::ToolkitError),
}

// ------------------------------------------------------------------ Bundle

/// A bundle's config.json, read once and written back at most once.
#[derive(Debug)]
pub struct Bundle {
    pub dir: PathBuf,
    pub config: Value,
    mode: u32,
}

impl Bundle {
    pub fn config_path(&self) -> PathBuf {
        spec::config_path(&self.dir)
    }

    /// Load `dir/config.json`. A config that is not JSON is
    /// [`LifecycleError::RequestInInvalidJson`] when it seems to ask for
    /// GPU memory or carries a DRA claim's variable (never fail open),
    /// else [`LifecycleError::Json`].
    pub fn load(dir: &Path) -> Result<Bundle, LifecycleError> {
        let path = spec::config_path(dir);
        let bytes = std::fs::read(&path).map_err(|err| LifecycleError::Read {
            path: path.clone(),
            err,
        })?;
        let mode = std::fs::metadata(&path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
            .unwrap_or(0o644);
        let config = serde_json::from_slice(&bytes).map_err(|err| {
            if contains_request_key(&bytes) {
                LifecycleError::RequestInInvalidJson { path, err }
            } else {
                LifecycleError::Json { path, err }
            }
        })?;
        Ok(Bundle {
            dir: dir.into(),
            config,
            mode,
        })
    }

    /// Whether gpu-quota-runtime prepared this config for a reservation
    /// (its assignment annotation): the hook's one look at the config
    /// besides the mounts it declares, and never a request.
    pub fn prepared_by_runtime(&self) -> bool {
        self.config
            .pointer("/annotations")
            .and_then(|a| a.get(spec::ASSIGNED_ANNOTATION))
            .is_some()
    }

    /// Modify: device nodes and rules, the hook entries, the annotations
    /// (the assigned GPUs, the record hint).
    pub fn patch(
        &mut self,
        nodes: &[devices::DeviceNode],
        hook: &spec::HookSpec,
        assigned: &str,
        record: Option<&str>,
    ) -> Result<(), LifecycleError> {
        spec::patch(&mut self.config, nodes, hook, assigned, record).map_err(|message| {
            LifecycleError::Patch {
                path: self.config_path(),
                message,
            }
        })
    }

    /// Write the config back atomically, with the mode it had. Not
    /// fsync'd: runc and the hooks read it in this boot, and every engine
    /// writes the bundle anew at its next create (docs/security.md §11).
    pub fn flush(&self) -> Result<(), LifecycleError> {
        let path = self.config_path();
        let mut out = serde_json::to_vec(&self.config).expect("a Value serializes");
        out.push(b'\n');
        fsutil::replace_atomic(&path, &out, self.mode)
            .map_err(|err| LifecycleError::Write { path, err })
    }
}

fn contains_request_key(b: &[u8]) -> bool {
    use gpuquota_formats::keys;
    let s = String::from_utf8_lossy(b);
    s.contains(&format!("\"{}\"", keys::ANN_VRAM))
        || s.contains(keys::ANNOTATION_PREFIX)
        || s.contains(keys::ENV_VRAM)
        // a DRA claim's variable (issue 20): never run unbound, nor hand
        // its token to runc and the container
        || s.contains(keys::ENV_CLAIM_PREFIX)
}

// ------------------------------------------------------------------ admit

/// Admit `req` of container `id` (created under runc root `root` from
/// `bundle`): an id that cannot name a directory is refused; a volume,
/// host directory or tmpfs the bundle declares over a path the hook writes
/// is refused (recorded) before anything is reserved; then the ledger
/// places it. Reservations of dead containers reclaimed on the way are
/// released (cause "admission"); the admission or the refusal is recorded
/// under `src`.
pub fn admit(
    cfg: &Config,
    inv: &Inventory,
    bundle: &Bundle,
    req: &Request,
    id: &str,
    root: &str,
    src: events::Source<'_>,
) -> Result<Reservation, LifecycleError> {
    let request = || ledger::describe_request(req);
    precheck(cfg, bundle, id, &request, src)?;
    let ledger = Ledger::new(cfg);
    let mut reclaimed = vec![];
    let could_be_small = inv.gpus.iter().any(|g| {
        req.vram.resolve(g.total_bytes) <= ctxcost::MAX_PLAUSIBLE_BYTES + ctxcost::MARGIN_BYTES
    });
    let info = ledger::AdmitInfo {
        contexts: ctxcost::known_costs(cfg, could_be_small),
        workload: crate::workload::Workload::from_config(&bundle.config),
    };
    let admitted = ledger.admit_knowing(
        cfg,
        inv,
        &info,
        req,
        id,
        Some(root),
        &bundle.dir.to_string_lossy(),
        &mut reclaimed,
    );
    release_reclaimed(cfg, &reclaimed, src);
    record(cfg, src, id, &request, &admitted, events::reason_of);
    Ok(admitted?)
}

/// The event of an admission's outcome: admitted, or refused with `reason`.
fn record<E: std::fmt::Display>(
    cfg: &Config,
    src: events::Source<'_>,
    id: &str,
    request: &dyn Fn() -> String,
    outcome: &Result<Reservation, E>,
    reason: fn(&E) -> &'static str,
) {
    match outcome {
        Ok(r) => events::admitted(cfg, src, r),
        Err(e) => events::refused(cfg, src, id, &request(), reason(e), &e.to_string()),
    }
}

/// What every admission checks first: an id that can name a directory; no
/// volume, host directory or tmpfs the bundle declares over a path the
/// hook writes (recorded as a refusal).
fn precheck(
    cfg: &Config,
    bundle: &Bundle,
    id: &str,
    request: &dyn Fn() -> String,
    src: events::Source<'_>,
) -> Result<(), LifecycleError> {
    if !state::valid_container_id(id) {
        return Err(LifecycleError::BadId(id.into()));
    }
    // symlink-steered ones: the hook (EXDEV)
    if let Some(c) = crate::mountplan::declared_conflict(
        &crate::rootfs::Declared::from_config(&bundle.config),
        &cfg.driver.binaries,
    ) {
        events::refused(cfg, src, id, &request(), "mount_conflict", &c.to_string());
        return Err(c.into());
    }
    Ok(())
}

fn release_reclaimed(cfg: &Config, reclaimed: &[Reservation], src: events::Source<'_>) {
    release(
        &mut HostEffects::new(cfg),
        reclaimed,
        Ending::Reclaimed,
        events::Source {
            cause: "admission",
            ..src
        },
    );
}

/// The DRA claim a container's config.json presents (the variable its
/// claim's CDI device set), if any; two different ones are refused.
pub fn presented_claim(bundle: &Bundle) -> Result<Option<Presented>, ClaimError> {
    claims::presented(&bundle.config)
}

/// Admit container `id` bound to the prepared DRA claim it presents
/// (`claims::bind`: the token compared in constant time, one live
/// container per claim): it gets exactly the claim's slice on the claim's
/// GPU, whatever its annotations or environment ask, in every mode; the
/// claim variable is taken out of the bundle's config (written by
/// [`setup`]'s flush: runc and the container never see it). Refusals are
/// recorded under `src`, reclaimed dead holders released.
pub fn admit_claim(
    cfg: &Config,
    bundle: &mut Bundle,
    p: &Presented,
    id: &str,
    root: &str,
    src: events::Source<'_>,
) -> Result<Reservation, LifecycleError> {
    let request = || format!("claim {:?}", p.var); // the name is hostile
    precheck(cfg, bundle, id, &request, src)?;
    let mut reclaimed = vec![];
    let bound = claims::bind(
        cfg,
        p,
        id,
        root,
        &bundle.dir.to_string_lossy(),
        &mut reclaimed,
    );
    release_reclaimed(cfg, &reclaimed, src);
    record(cfg, src, id, &request, &bound, claims::reason_of);
    let r = bound?;
    claims::strip(&mut bundle.config);
    Ok(r)
}

/// For a container bound to a claim (`r`, from [`admit_claim`]): the
/// engine's own GPU request (a device plugin's `NVIDIA_VISIBLE_DEVICES` or
/// CDI devices beside the claim) must name the claim's GPU; a
/// contradiction ends the reservation and is refused; else the engine's
/// other GPUs are narrowed away as for any slice.
pub fn engine_request_for_claim(
    cfg: &Config,
    inv: &Inventory,
    bundle: &mut Bundle,
    r: &Reservation,
    src: events::Source<'_>,
) -> Result<(), LifecycleError> {
    use crate::request::{GpuRef, GpuSelector, Origin};
    use crate::toolkit;
    let host = toolkit::host_gpus(inv);
    let from = toolkit::VisibleFrom::for_root(cfg, r.runtime_root.as_deref());
    let engine = match toolkit::detect(&bundle.config, &host, from) {
        Ok(Some(e)) => e,
        Ok(None) => return Ok(()),
        Err(e) => return Err(refuse_bound(cfg, r, src, e)),
    };
    let ours = Request {
        vram: crate::units::Size::Bytes(r.slices.first().map_or(0, |s| s.vram_bytes)),
        gpus: GpuSelector::List(
            r.slices
                .iter()
                .map(|s| GpuRef::Uuid(s.uuid.clone()))
                .collect(),
        ),
        origin: Origin::Annotation(r.request.clone()),
    };
    if let Err(e) = toolkit::reconcile(&ours, true, &engine, &host) {
        return Err(refuse_bound(cfg, r, src, e));
    }
    toolkit::narrow_to_slices(&mut bundle.config, inv, &r.slices);
    Ok(())
}

fn refuse_bound(
    cfg: &Config,
    r: &Reservation,
    src: events::Source<'_>,
    e: crate::toolkit::ToolkitError,
) -> LifecycleError {
    let root = r.runtime_root.as_deref();
    end(
        cfg,
        Key::Root {
            id: &r.container_id,
            root,
        },
        events::Source {
            cause: "create-failed",
            ..src
        },
    );
    events::refused(
        cfg,
        src,
        &r.container_id,
        &r.request,
        "engine_request",
        &e.to_string(),
    );
    e.into()
}

// ------------------------------------------------------------------ setup

/// The hook entry for a container created under runc root `root`: the
/// hook binary, the config path in its environment, `--root ROOT`.
pub fn hook_spec(cfg: &Config, root: &str) -> Result<spec::HookSpec, LifecycleError> {
    let hook = paths::hook(cfg)
        .filter(|p| p.is_file())
        .ok_or_else(|| LifecycleError::NoHook(Config::path_from_env()))?;
    let hook = std::fs::canonicalize(&hook).unwrap_or(hook);
    let cp = Config::path_from_env();
    let cp = std::fs::canonicalize(&cp).unwrap_or(cp);
    Ok(spec::HookSpec {
        path: hook,
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            format!("{}={}", crate::config::ENV_PATH, cp.display()),
        ],
        // the hook's key: runc root (not in the OCI state) + id + bundle
        args: vec![spec::HOOK_ROOT_ARG.into(), root.into()],
        timeout_secs: 60,
    })
}

/// The runtime's part of setup for an admitted reservation `r`: patch the
/// bundle, make the state directory (before runc clones the container's
/// mount namespace, see `state::create`), flush the bundle. On error the
/// reservation is released (cause "create-failed").
pub fn setup(
    cfg: &Config,
    inv: &Inventory,
    bundle: &mut Bundle,
    r: &Reservation,
    src: events::Source<'_>,
) -> Result<(), LifecycleError> {
    let root = r.runtime_root.clone().unwrap_or_default();
    let done = (|| {
        let nodes = devices::nodes_for(&cfg.driver.dev_root, inv, &r.slices)?;
        let hs = hook_spec(cfg, &root)?;
        let assigned: Vec<&str> = r.slices.iter().map(|s| s.uuid.as_str()).collect();
        let record = crate::ledger::records::name_of(r);
        bundle.patch(&nodes, &hs, &assigned.join(","), record.as_deref())?;
        claims::shared_usage(cfg, r, state::UsageBacking::Tmpfs)?;
        state::create(cfg, r, state::UsageBacking::Tmpfs).map_err(|err| LifecycleError::State {
            path: state::container_dir(cfg, r),
            err,
        })?;
        bundle.flush()
    })();
    if done.is_err() {
        end(
            cfg,
            Key::Root {
                id: &r.container_id,
                root: Some(&root),
            },
            src,
        );
    }
    done
}

/// The hook's reservation: the one admitted at `create` for container `id`
/// under runc root `root` from `bundle`, confirmed with its process `pid`.
/// `Err(NoReservation)` when there is none: the hook adds nothing.
pub fn confirm_for_hook(
    cfg: &Config,
    id: &str,
    root: &str,
    bundle: &Bundle,
    pid: u32,
) -> Result<Reservation, LedgerError> {
    Ledger::new(cfg).confirm_hinted(
        id,
        Some(root),
        &bundle.dir.to_string_lossy(),
        pid,
        spec::record_hint(&bundle.config),
        &mut |_| {},
    )
}

// ------------------------------------------------------------------ release

/// How the container's reservations ended (which event is recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Given back by its container or the operator.
    Released,
    /// Taken back from a container that is gone.
    Reclaimed,
    /// Given back by the operator while its process still runs: its
    /// driver limit and state stay (they are mounted in it).
    ForcedWhileRunning,
}

/// The effects of a release, in the order [`release`] calls them.
pub trait Effects {
    /// Clear the driver limit recorded in `dir`, if any.
    fn clear_driver_limit(&mut self, dir: &Path);
    /// Remove the state of `r` (`held`: what the ledger still holds).
    fn remove_state(&mut self, r: &Reservation, held: Option<&[Reservation]>);
    /// The reservations still held, read after the release.
    fn held(&mut self) -> Option<Vec<Reservation>>;
    /// Record the event and bump the counters.
    fn record(&mut self, ending: Ending, src: events::Source<'_>, rs: &[Reservation]);
    /// Where `r`'s state is (its directory, or an old-named one).
    fn state_dir(&self, r: &Reservation) -> PathBuf;
}

/// The effects on this host.
pub struct HostEffects<'a> {
    cfg: &'a Config,
}

impl<'a> HostEffects<'a> {
    pub fn new(cfg: &'a Config) -> Self {
        HostEffects { cfg }
    }
}

impl Effects for HostEffects<'_> {
    fn clear_driver_limit(&mut self, dir: &Path) {
        if let Err(e) = drvlimit::clear_in_dir(self.cfg, dir) {
            eprintln!(
                "gpu-quota: warning: driver memory limit recorded in {} not cleared: {e}",
                dir.display()
            );
        }
    }
    fn remove_state(&mut self, r: &Reservation, held: Option<&[Reservation]>) {
        let _ = state::remove_released(self.cfg, r, held);
        claims::consumer_gone(self.cfg, r);
    }
    fn held(&mut self) -> Option<Vec<Reservation>> {
        Ledger::new(self.cfg).read().ok().map(|d| d.reservations)
    }
    fn record(&mut self, ending: Ending, src: events::Source<'_>, rs: &[Reservation]) {
        match ending {
            Ending::Reclaimed => events::reclaimed(self.cfg, src, rs),
            Ending::Released | Ending::ForcedWhileRunning => events::released(self.cfg, src, rs),
        }
    }
    fn state_dir(&self, r: &Reservation) -> PathBuf {
        state::existing_dir(self.cfg, r)
    }
}

/// The one release of reservations already taken out of the ledger: for
/// each, clear its driver limit, then remove its state; then record the
/// event and the counters. Ids that cannot be directory names (a
/// hand-edited ledger) touch no file.
pub fn release(
    fx: &mut dyn Effects,
    gone: &[Reservation],
    ending: Ending,
    src: events::Source<'_>,
) {
    if gone.is_empty() {
        return;
    }
    if ending != Ending::ForcedWhileRunning {
        let held = fx.held();
        for r in gone
            .iter()
            .filter(|r| state::valid_container_id(&r.container_id))
        {
            let dir = fx.state_dir(r);
            fx.clear_driver_limit(&dir);
            fx.remove_state(r, held.as_deref());
        }
    }
    fx.record(ending, src, gone);
}

/// Take container `key`'s reservation out of the ledger and release it
/// (runtime `delete`, a failed create, hook `poststop`).
pub fn end(cfg: &Config, key: Key<'_>, src: events::Source<'_>) -> Vec<Reservation> {
    end_with(cfg, key, src).unwrap_or_default()
}

/// [`end`], with the ledger's error.
pub fn end_with(
    cfg: &Config,
    key: Key<'_>,
    src: events::Source<'_>,
) -> Result<Vec<Reservation>, LedgerError> {
    let gone = Ledger::new(cfg).release(key)?;
    release(&mut HostEffects::new(cfg), &gone, Ending::Released, src);
    Ok(gone)
}

/// A state directory whose reservation was already released by force
/// (`gpu-quota release --force` of a running container), for the runtime's
/// `delete` once runc no longer knows the container: its driver limit is
/// cleared and it is removed, unless a reservation still held owns it.
pub fn release_orphan(cfg: &Config, id: &str, root: &str, bundle: &str) {
    if !state::valid_container_id(id) {
        return;
    }
    let Some(held) = HostEffects::new(cfg).held() else {
        return;
    };
    let dir = cfg
        .state_dir
        .join("containers")
        .join(state::dir_name(id, Some(root), bundle));
    if held.iter().any(|r| state::container_dir(cfg, r) == dir) {
        return;
    }
    if let Err(e) = drvlimit::clear_in_dir(cfg, &dir) {
        eprintln!(
            "gpu-quota: warning: driver memory limit recorded in {} not cleared: {e}",
            dir.display()
        );
    }
    let _ = state::remove(&dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        held: Vec<Reservation>,
    }
    impl Effects for Log {
        fn clear_driver_limit(&mut self, dir: &Path) {
            self.calls.push(format!("clear {}", dir.display()));
        }
        fn remove_state(&mut self, r: &Reservation, held: Option<&[Reservation]>) {
            self.calls.push(format!(
                "remove {} (held {})",
                r.container_id,
                held.map_or(0, <[_]>::len)
            ));
        }
        fn held(&mut self) -> Option<Vec<Reservation>> {
            self.calls.push("held".into());
            Some(self.held.clone())
        }
        fn record(&mut self, ending: Ending, src: events::Source<'_>, rs: &[Reservation]) {
            let ids: Vec<&str> = rs.iter().map(|r| r.container_id.as_str()).collect();
            self.calls
                .push(format!("record {ending:?} {} {}", src.cause, ids.join(",")));
        }
        fn state_dir(&self, r: &Reservation) -> PathBuf {
            PathBuf::from("/state").join(&r.container_id)
        }
    }

    fn res(id: &str) -> Reservation {
        Reservation::new(id, Some("/run/runc"), "/b", vec![], "vram=1g")
    }
    fn src(cause: &'static str) -> events::Source<'static> {
        events::Source {
            program: "test",
            engine: "runc",
            cause,
        }
    }

    #[test]
    fn release_clears_the_limit_then_removes_state_then_records_once() {
        let mut fx = Log {
            held: vec![res("other")],
            ..Default::default()
        };
        release(&mut fx, &[res("a"), res("b")], Ending::Reclaimed, src("gc"));
        assert_eq!(
            fx.calls,
            [
                "held",
                "clear /state/a",
                "remove a (held 1)",
                "clear /state/b",
                "remove b (held 1)",
                "record Reclaimed gc a,b"
            ]
        );
    }

    #[test]
    fn a_forced_release_of_a_running_container_keeps_its_limit_and_state() {
        let mut fx = Log::default();
        release(
            &mut fx,
            &[res("a")],
            Ending::ForcedWhileRunning,
            src("operator"),
        );
        assert_eq!(fx.calls, ["record ForcedWhileRunning operator a"]);
    }

    #[test]
    fn nothing_released_does_nothing_and_bad_ids_touch_no_file() {
        let mut fx = Log::default();
        release(&mut fx, &[], Ending::Released, src("delete"));
        assert!(fx.calls.is_empty());
        release(&mut fx, &[res("../x")], Ending::Released, src("delete"));
        assert_eq!(fx.calls, ["held", "record Released delete ../x"]);
    }

    #[test]
    fn bundle_loads_once_patches_and_flushes_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        std::fs::write(&p, br#"{"ociVersion":"1.0.2","zzz":1}"#).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut b = Bundle::load(d.path()).unwrap();
        assert!(!b.prepared_by_runtime());
        let hs = spec::HookSpec {
            path: "/h".into(),
            env: vec![],
            args: vec![spec::HOOK_ROOT_ARG.into(), "/r".into()],
            timeout_secs: 1,
        };
        b.patch(&[], &hs, "GPU-1", None).unwrap();
        b.flush().unwrap();
        let again = Bundle::load(d.path()).unwrap();
        assert!(again.prepared_by_runtime());
        assert_eq!(again.config["zzz"], 1);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        std::fs::write(&p, b"{\"vram\": ").unwrap();
        assert!(matches!(
            Bundle::load(d.path()),
            Err(LifecycleError::RequestInInvalidJson { .. })
        ));
        // a DRA claim's variable in a config serde_json refuses and Go's
        // encoding/json reads (a lone surrogate escape)
        std::fs::write(
            &p,
            b"{\"process\":{\"env\":[\"GPU_QUOTA_CLAIM_u=t\",\"X=\\udc00\"]}}",
        )
        .unwrap();
        assert!(matches!(
            Bundle::load(d.path()),
            Err(LifecycleError::RequestInInvalidJson { .. })
        ));
        std::fs::write(&p, b"{ nope").unwrap();
        assert!(matches!(
            Bundle::load(d.path()),
            Err(LifecycleError::Json { .. })
        ));
    }
}

/// The update phase (a running container's grant changes).
pub mod update;
