//! Operator events: for each admission, refusal, release and reclaim, one
//! structured log line (through `tracing`) and one increment of the
//! persistent counters (`counters`).
//!
//! Lines go to journald when its socket exists (`log = "auto"`, the
//! default) and otherwise to `log_file`, appended with `O_NOFOLLOW`, as one
//! JSON object per line. Never to the process's stdout/stderr: the runtime
//! and the hook share those with runc and the container. Recording is
//! best effort: a log or counter that cannot be written never fails a
//! container operation.
use crate::config::{Config, LogTarget};
use crate::counters::{self, Bump};
use crate::ledger::{LedgerError, Reservation};
use crate::placement::PlacementError;
use crate::units::human;
use std::path::Path;

pub const JOURNALD_SOCKET: &str = "/run/systemd/journal/socket";

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Admission,
    Refusal,
    Release,
    Reclaim,
    Resize,
    MpsRestart,
    BurstReclaim,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Admission => "admission",
            Kind::Refusal => "refusal",
            Kind::Release => "release",
            Kind::Reclaim => "reclaim",
            Kind::Resize => "resized",
            Kind::MpsRestart => "mps_restart",
            Kind::BurstReclaim => "burst_reclaim",
        }
    }
}

/// Who records it: `program` is the binary, `engine` the container
/// engine behind it (see `engine_of`), `cause` why (e.g. "delete",
/// "poststop", "runc-failed", "gc", "operator", "admission").
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub program: &'a str,
    pub engine: &'a str,
    pub cause: &'a str,
}

/// Where the lines go for this config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    Journald,
    File(std::path::PathBuf),
    Off,
}

pub fn sink(cfg: &Config, journald_socket: &Path) -> Sink {
    match cfg.log {
        LogTarget::Off => Sink::Off,
        LogTarget::Journald => Sink::Journald,
        LogTarget::File => Sink::File(cfg.log_file.clone()),
        LogTarget::Auto if journald_socket.exists() => Sink::Journald,
        LogTarget::Auto => Sink::File(cfg.log_file.clone()),
    }
}

/// The engine behind a runc `--root` (a best guess from the engines'
/// default roots; "runc" when nothing matches).
pub fn engine_of(runc_root: Option<&str>) -> &'static str {
    let r = runc_root.unwrap_or("");
    if r.starts_with("/run/docker") || r.starts_with("/var/run/docker") {
        "docker"
    } else if r.contains("containerd") || r.contains("k8s.io") || r.contains("moby") {
        "containerd"
    } else if r.contains("libpod") || r.contains("podman") {
        "podman"
    } else if r.contains("crio") || r.contains("cri-o") {
        "crio"
    } else {
        "runc"
    }
}

/// The reason label of a refused admission (stable: it is a metric label).
pub fn reason_of(e: &LedgerError) -> &'static str {
    match e {
        LedgerError::Refused { err, .. } => placement_reason(err),
        LedgerError::Duplicate { .. } => "duplicate",
        LedgerError::Corrupt { .. } | LedgerError::CorruptRecord { .. } => "ledger_corrupt",
        LedgerError::TooNew { .. } => "ledger_too_new",
        LedgerError::Io { .. } => "ledger_io",
        LedgerError::NoReservation { .. } => "no_reservation",
    }
}

/// The reason label of a placement's refusal, for a container's admission
/// and a DRA claim's prepare alike (stable: it is a metric label).
pub fn placement_reason(e: &PlacementError) -> &'static str {
    match e {
        PlacementError::NoGpus => "no_gpus",
        PlacementError::UnknownGpu { .. } => "unknown_gpu",
        PlacementError::NotSliceable { .. } => "not_sliceable",
        PlacementError::Duplicate { .. } => "invalid_request",
        PlacementError::NotEnoughGpus { .. } => "not_enough_gpus",
        PlacementError::TooLarge { .. } => "too_large",
        PlacementError::LimitBelowGuarantee { .. } => "invalid_request",
        PlacementError::TooSmallForContext { .. } => "too_small_for_context",
        PlacementError::DoesNotFit { .. } | PlacementError::NoFit { .. } => "does_not_fit",
        PlacementError::ShareNeedsOneGpu { .. } => "invalid_request",
        PlacementError::ShareDoesNotFit { .. } => "share_does_not_fit",
        PlacementError::ShareUserUnknown { .. } | PlacementError::ShareAsHostRoot { .. } => {
            "share_user"
        }
        PlacementError::ShareBesideUnshared { .. }
        | PlacementError::UnsharedBesideShares { .. } => "share_mix",
    }
}

fn slices_fields(r: &Reservation) -> (String, String, u64) {
    let gpus = r
        .slices
        .iter()
        .map(|s| s.index.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let uuids = r
        .slices
        .iter()
        .map(|s| s.uuid.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let bytes = r.slices.first().map(|s| s.vram_bytes).unwrap_or(0);
    (gpus, uuids, bytes)
}

/// A container was admitted.
pub fn admitted(cfg: &Config, src: Source<'_>, r: &Reservation) {
    let _ = counters::bump(&cfg.ledger_dir, Bump::Admission);
    emit_reservation(cfg, src, Kind::Admission, r, "");
}

/// A request was refused (`reason` is a stable label, `message` the text
/// the user saw).
pub fn refused(
    cfg: &Config,
    src: Source<'_>,
    container_id: &str,
    request: &str,
    reason: &str,
    message: &str,
) {
    let _ = counters::bump(&cfg.ledger_dir, Bump::Refusal(reason));
    emit(cfg, src, &|| {
        tracing::warn!(
            event = Kind::Refusal.as_str(),
            container_id,
            engine = src.engine,
            program = src.program,
            cause = src.cause,
            request,
            reason,
            message,
        )
    });
}

/// Slices were given back by their container (delete, poststop, a
/// failed create) or by the operator.
pub fn released(cfg: &Config, src: Source<'_>, rs: &[Reservation]) {
    if rs.is_empty() {
        return;
    }
    let _ = counters::bump(&cfg.ledger_dir, Bump::Release(rs.len() as u64));
    for r in rs {
        emit_reservation(cfg, src, Kind::Release, r, "");
    }
}

/// Slices of containers that are gone were taken back.
pub fn reclaimed(cfg: &Config, src: Source<'_>, rs: &[Reservation]) {
    if rs.is_empty() {
        return;
    }
    let _ = counters::bump(&cfg.ledger_dir, Bump::Reclaim(rs.len() as u64));
    for r in rs {
        emit_reservation(cfg, src, Kind::Reclaim, r, "container gone");
    }
}

/// A running container's slice on GPU `gpu` changed from `from` to `to`
/// bytes (`by`: who asked, e.g. `uid 0 (root)`).
pub fn resized(
    cfg: &Config,
    src: Source<'_>,
    r: &Reservation,
    gpu: u32,
    from: u64,
    to: u64,
    by: &str,
) {
    let _ = counters::bump(&cfg.ledger_dir, Bump::Resize);
    let reason = format!(
        "GPU {gpu}: {} -> {} by {by}",
        crate::units::human(from),
        crate::units::human(to)
    );
    emit_reservation(cfg, src, Kind::Resize, r, &reason);
}

/// GPU `uuid`'s MPS daemon was found gone or hung (`why`) and a new one
/// started, or starting one failed (`error`).
pub fn mps_restarted(cfg: &Config, src: Source<'_>, uuid: &str, why: &str, error: Option<&str>) {
    let now = crate::fsutil::now_unix();
    let ok = error.is_none();
    let _ = counters::bump(&cfg.ledger_dir, Bump::MpsRestart { uuid, ok, now });
    let error = error.unwrap_or("");
    emit(cfg, src, &|| {
        if ok {
            tracing::warn!(
                event = Kind::MpsRestart.as_str(),
                uuid,
                program = src.program,
                cause = src.cause,
                reason = why,
                "restarted the MPS daemon of {uuid}: {why}"
            )
        } else {
            tracing::error!(
                event = Kind::MpsRestart.as_str(),
                uuid,
                program = src.program,
                cause = src.cause,
                reason = why,
                error,
                "could not restart the MPS daemon of {uuid} ({why}): {error}"
            )
        }
    });
}

/// A burster ended on a GPU to give lent memory back.
#[derive(Debug, Clone, Copy)]
pub struct BurstEnd<'a> {
    pub uuid: &'a str,
    pub index: u32,
    /// The victim's use above its guarantee, and its priority.
    pub above: u64,
    pub priority: u32,
    /// What the waiting allocation within a guarantee asked for.
    pub want: u64,
}

/// A burster ended to give lent memory back (`how`: "ended"), or an end
/// that failed (`error`): who, for whom, on which GPU, how much.
pub fn burst_reclaim(
    cfg: &Config,
    src: Source<'_>,
    victim: &Reservation,
    waiter: &Reservation,
    e: BurstEnd<'_>,
    error: Option<&str>,
) {
    if error.is_none() {
        let _ = counters::bump(&cfg.ledger_dir, Bump::BurstEnd { uuid: e.uuid });
    }
    let (victim_id, waiter_id, uuid) = (
        victim.container_id.as_str(),
        waiter.container_id.as_str(),
        e.uuid,
    );
    let (above_bytes, want_bytes, priority) = (e.above, e.want, e.priority);
    emit(cfg, src, &|| {
        match error {
        None => tracing::warn!(
            event = Kind::BurstReclaim.as_str(),
            how = "ended",
            container_id = victim_id,
            needed_by = waiter_id,
            uuid,
            gpu = e.index,
            above_bytes,
            want_bytes,
            priority,
            program = src.program,
            cause = src.cause,
            "ended burstable container {victim_id} ({} above its guarantee on GPU {}, vram-priority {priority}): container {waiter_id} waits for {} within its guarantee",
            human(above_bytes),
            e.index,
            human(want_bytes)
        ),
        Some(error) => tracing::error!(
            event = Kind::BurstReclaim.as_str(),
            how = "end-failed",
            container_id = victim_id,
            needed_by = waiter_id,
            uuid,
            gpu = e.index,
            error,
            program = src.program,
            cause = src.cause,
            "could not end burstable container {victim_id} for container {waiter_id} on GPU {}: {error}",
            e.index
        ),
    }
    });
}

fn emit_reservation(cfg: &Config, src: Source<'_>, kind: Kind, r: &Reservation, reason: &str) {
    let (gpu, uuid, slice_bytes) = slices_fields(r);
    let total_bytes: u64 = r.slices.iter().map(|s| s.vram_bytes).sum();
    let sm_percent: u32 = r.share().map_or(0, |s| s.sm_percent);
    let pid = r.pid.unwrap_or(0);
    let age_secs = crate::fsutil::now_unix().saturating_sub(r.created_unix);
    // who the container is to its engine (empty where the engine said nothing)
    let w = r.workload.clone().unwrap_or_default();
    let part = |v: &Option<String>| v.clone().unwrap_or_default();
    let (namespace, pod, pod_uid, container_name) = (
        part(&w.namespace),
        part(&w.pod),
        part(&w.pod_uid),
        part(&w.container),
    );
    emit(cfg, src, &|| {
        tracing::info!(
            event = kind.as_str(),
            container_id = r.container_id.as_str(),
            engine = src.engine,
            program = src.program,
            cause = src.cause,
            gpu = gpu.as_str(),
            uuid = uuid.as_str(),
            slice_bytes,
            total_bytes,
            sm_percent,
            request = r.request.as_str(),
            namespace = namespace.as_str(),
            pod = pod.as_str(),
            pod_uid = pod_uid.as_str(),
            container_name = container_name.as_str(),
            pid,
            age_secs,
            reason,
            "{} {} ({})",
            kind.as_str(),
            r.container_id,
            crate::ledger::describe_slices(&r.slices)
        )
    });
}

/// Run `f` (one tracing event) with a subscriber for this config's sink.
fn emit(cfg: &Config, src: Source<'_>, f: &dyn Fn()) {
    use tracing_subscriber::layer::SubscriberExt;
    let d = match sink(cfg, Path::new(JOURNALD_SOCKET)) {
        Sink::Off => return,
        Sink::Journald => match tracing_journald::layer() {
            Ok(l) => tracing::Dispatch::new(
                tracing_subscriber::registry().with(
                    l.with_syslog_identifier(src.program.into())
                        .with_field_prefix(None),
                ),
            ),
            Err(_) => match file_dispatch(&cfg.log_file) {
                Some(d) => d,
                None => return,
            },
        },
        Sink::File(p) => match file_dispatch(&p) {
            Some(d) => d,
            None => return,
        },
    };
    tracing::dispatcher::with_default(&d, f);
}

fn file_dispatch(p: &Path) -> Option<tracing::Dispatch> {
    let f = open_log(p).ok()?;
    let sub = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(f))
        .finish();
    Some(tracing::Dispatch::new(sub))
}

/// Open the log for appending: created 0640 when missing, never through a
/// symlink, only a regular file.
pub fn open_log(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    crate::fsutil::open_regular(
        p,
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ResState;
    use crate::placement::Slice;

    fn res(id: &str) -> Reservation {
        let slice = Slice::memory("GPU-1".into(), 1, 4 << 30);
        Reservation {
            pid: Some(42),
            state: ResState::Running,
            ..Reservation::new(id, None, "/b", vec![slice], "vram=4.00 GiB")
        }
    }
    const SRC: Source = Source {
        program: "gpu-quota-runtime",
        engine: "docker",
        cause: "test",
    };

    fn cfg(d: &Path, log: LogTarget) -> Config {
        Config {
            ledger_dir: d.join("ledger"),
            log,
            log_file: d.join("gq.log"),
            ..Config::default()
        }
    }

    fn lines(p: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect(l))
            .collect()
    }

    #[test]
    fn one_json_line_per_event_with_the_fields_and_counters() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), LogTarget::File);
        admitted(&c, SRC, &res("c1"));
        refused(&c, SRC, "c2", "vram=99g", "does_not_fit", "only 0 B free");
        released(&c, SRC, &[res("c1")]);
        reclaimed(&c, SRC, &[res("c3"), res("c4")]);
        released(&c, SRC, &[]);
        let l = lines(&c.log_file);
        assert_eq!(l.len(), 5, "{l:?}");
        assert_eq!(l[0]["event"], "admission");
        assert_eq!(l[0]["container_id"], "c1");
        assert_eq!(l[0]["engine"], "docker");
        assert_eq!(l[0]["gpu"], "1");
        assert_eq!(l[0]["uuid"], "GPU-1");
        assert_eq!(l[0]["slice_bytes"], 4u64 << 30);
        assert_eq!(l[0]["level"], "INFO");
        assert_eq!(l[0]["message"], "admission c1 (4.00 GiB on GPU 1)");
        assert!(l[0]["timestamp"].is_string());
        assert_eq!(l[1]["event"], "refusal");
        assert_eq!(l[1]["reason"], "does_not_fit");
        assert_eq!(l[1]["request"], "vram=99g");
        assert_eq!(l[1]["level"], "WARN");
        assert_eq!(l[2]["event"], "release");
        assert_eq!(l[3]["event"], "reclaim");
        assert_eq!(l[4]["container_id"], "c4");
        let n = counters::read(&c.ledger_dir).unwrap();
        assert_eq!(
            (
                n.admissions,
                n.refusals["does_not_fit"],
                n.releases,
                n.reclaims
            ),
            (1, 1, 1, 2)
        );
    }

    #[test]
    fn an_mps_restart_is_one_line_and_counted_by_gpu() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), LogTarget::File);
        let src = Source {
            program: "gpu-quota",
            engine: "operator",
            cause: "supervisor",
        };
        mps_restarted(&c, src, "GPU-a", "no daemon process", None);
        mps_restarted(
            &c,
            src,
            "GPU-a",
            "pid 9 did not answer",
            Some("already running"),
        );
        let l = lines(&c.log_file);
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[0]["event"], "mps_restart");
        assert_eq!(l[0]["uuid"], "GPU-a");
        assert_eq!(l[0]["reason"], "no daemon process");
        assert_eq!(l[0]["cause"], "supervisor");
        assert_eq!(l[0]["level"], "WARN");
        assert_eq!(l[1]["level"], "ERROR");
        assert_eq!(l[1]["error"], "already running");
        let m = &counters::read(&c.ledger_dir).unwrap().mps["GPU-a"];
        assert_eq!((m.restarts, m.failures), (1, 1));
        assert!(m.last_restart_unix > 0);
    }

    #[test]
    fn an_admission_names_the_pod_where_the_engine_said() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), LogTarget::File);
        let r = Reservation {
            workload: Some(crate::workload::Workload {
                namespace: Some("ml".into()),
                pod: Some("train-0".into()),
                pod_uid: Some("u-1".into()),
                container: Some("trainer".into()),
            }),
            ..res("c1")
        };
        admitted(&c, SRC, &r);
        admitted(&c, SRC, &res("c2"));
        let l = lines(&c.log_file);
        assert_eq!(
            (
                &l[0]["namespace"],
                &l[0]["pod"],
                &l[0]["pod_uid"],
                &l[0]["container_name"]
            ),
            (
                &"ml".into(),
                &"train-0".into(),
                &"u-1".into(),
                &"trainer".into()
            )
        );
        assert_eq!(l[1]["pod"], "", "no workload: empty");
    }

    #[test]
    fn off_writes_no_line_but_still_counts() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), LogTarget::Off);
        admitted(&c, SRC, &res("c1"));
        assert!(!c.log_file.exists());
        assert_eq!(counters::read(&c.ledger_dir).unwrap().admissions, 1);
    }

    #[test]
    fn the_log_is_never_written_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), LogTarget::File);
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"").unwrap();
        std::os::unix::fs::symlink(&victim, &c.log_file).unwrap();
        admitted(&c, SRC, &res("c1"));
        assert_eq!(std::fs::read(&victim).unwrap(), b"");
    }

    #[test]
    fn auto_picks_journald_only_when_its_socket_exists() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path(), LogTarget::Auto);
        let sock = d.path().join("socket");
        assert_eq!(sink(&c, &sock), Sink::File(c.log_file.clone()));
        std::fs::write(&sock, b"").unwrap();
        assert_eq!(sink(&c, &sock), Sink::Journald);
        assert_eq!(sink(&cfg(d.path(), LogTarget::Off), &sock), Sink::Off);
    }

    #[test]
    fn engines_from_runc_roots() {
        assert_eq!(engine_of(Some("/run/docker/runtime-runc/moby")), "docker");
        assert_eq!(engine_of(Some("/run/containerd/runc/k8s.io")), "containerd");
        assert_eq!(engine_of(Some("/run/user/0/libpod/runc")), "podman");
        assert_eq!(engine_of(Some("/run/runc")), "runc");
        assert_eq!(engine_of(None), "runc");
    }
}
