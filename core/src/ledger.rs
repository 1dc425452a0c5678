//! The host ledger: one JSON file of reservations per host.
//!
//! Every read-modify-write holds an exclusive `flock` on `ledger.lock`
//! (never on the data file, which is replaced by rename). Writes are atomic
//! (temp, fsync, rename, fsync dir). The schema is versioned; a file that
//! does not parse is kept in place, copied aside for inspection, and every
//! operation refuses with an error naming both paths — never silently reset.
use crate::config::Config;
use crate::fsutil::{self, WriteStep};
use crate::inventory::Inventory;
use crate::placement::{PlacementError, Placer, Slice, Usage};
use crate::request::Request;
use crate::units::human;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResState {
    /// Admitted by the runtime at `create`; no container process yet.
    Reserved,
    /// Confirmed by the hook with the container's pid.
    Running,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub container_id: String,
    /// runc `--root` of the engine that created it (None: runc's default).
    pub runtime_root: Option<String>,
    pub bundle: String,
    pub slices: Vec<Slice>,
    /// The request as the user wrote it, for `gpu-quota ls`.
    pub request: String,
    pub created_unix: u64,
    pub started_unix: Option<u64>,
    pub pid: Option<u32>,
    pub pid_start: Option<u64>,
    pub state: ResState,
    /// Where `pid` (and the runc state dir) mean something: the pid and
    /// mount namespaces of the gpu-quota process that recorded them, and the
    /// boot they belong to. Liveness is judged only from the same
    /// namespaces; a different boot means the container is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mnt_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerData {
    pub version: u32,
    pub reservations: Vec<Reservation>,
}

impl Default for LedgerData {
    fn default() -> Self {
        Self {
            version: SCHEMA_VERSION,
            reservations: vec![],
        }
    }
}

impl LedgerData {
    /// Bytes held and number of holders per GPU uuid.
    pub fn usage(&self) -> Usage {
        let mut u = Usage::new();
        for r in &self.reservations {
            for s in &r.slices {
                let e = u.entry(s.uuid.clone()).or_insert((0, 0));
                e.0 += s.bytes;
                e.1 += 1;
            }
        }
        u
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("ledger {path} is corrupt ({message}); it was left in place and a copy saved as {saved}. Check which containers still run, then move the file away (or run `gpu-quota gc --reset-corrupt`) to start a new ledger")]
    Corrupt {
        path: PathBuf,
        saved: PathBuf,
        message: String,
    },
    #[error("ledger {path} has schema version {found}, newer than this gpu-quota understands ({SCHEMA_VERSION}); upgrade gpu-quota")]
    TooNew { path: PathBuf, found: u32 },
    #[error("cannot start container {id}: {err}")]
    Refused {
        id: String,
        err: Box<PlacementError>,
    },
    #[error("container {id} already holds a reservation in this ledger ({slices}); delete it first (runc delete {id}) or run `gpu-quota gc`")]
    Duplicate { id: String, slices: String },
    #[error("container {id} (bundle {bundle}, runc root {root}) asks for GPU memory but has no reservation under that root and bundle; it must be created through gpu-quota-runtime")]
    NoReservation {
        id: String,
        root: String,
        bundle: String,
    },
}

/// Handle on the ledger files in `dir`.
pub struct Ledger {
    pub dir: PathBuf,
    pub grace_secs: u64,
}

/// Which reservation an operation is about. A container is known by its
/// id *and* the runc root it was created under: two engines (two roots) may
/// use the same id, even with the same bundle directory.
#[derive(Debug, Clone)]
pub enum Key<'a> {
    /// From the runtime: id + runc root.
    Root { id: &'a str, root: Option<&'a str> },
    /// From a hook: id + the runc root the runtime wrote into the hook's
    /// entry in config.json + the bundle directory of the OCI state (which
    /// must agree with the one recorded at admission).
    Hook {
        id: &'a str,
        root: Option<&'a str>,
        bundle: &'a str,
    },
}

impl Key<'_> {
    pub fn matches(&self, r: &Reservation) -> bool {
        match self {
            Key::Root { id, root } => r.container_id == *id && r.runtime_root.as_deref() == *root,
            Key::Hook { id, root, bundle } => {
                r.container_id == *id
                    && r.runtime_root.as_deref() == *root
                    && same_path(&r.bundle, bundle)
            }
        }
    }
}

fn same_path(a: &str, b: &str) -> bool {
    a == b || {
        let ca = std::fs::canonicalize(a);
        let cb = std::fs::canonicalize(b);
        matches!((ca, cb), (Ok(x), Ok(y)) if x == y)
    }
}

impl Ledger {
    pub fn new(cfg: &Config) -> Ledger {
        Ledger {
            dir: cfg.ledger_dir.clone(),
            grace_secs: cfg.create_grace_secs,
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("ledger.json")
    }

    fn io(&self, p: &Path) -> impl Fn(std::io::Error) -> LedgerError + '_ {
        let p = p.to_path_buf();
        move |err| LedgerError::Io {
            path: p.clone(),
            err,
        }
    }

    fn load_unlocked(&self, save_corrupt: bool) -> Result<LedgerData, LedgerError> {
        let path = self.path();
        let bytes = match fsutil::read_regular_capped(&path, MAX_LEDGER_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LedgerData::default()),
            Err(e) => return Err(self.io(&path)(e)),
        };
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let corrupt = |message: String| {
            // one copy per distinct content (not one per failing call), made
            // with O_EXCL|O_NOFOLLOW: never written through a planted link
            let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
            });
            let saved = self.dir.join(format!("ledger.json.corrupt-{h:016x}"));
            if save_corrupt {
                let _ = write_new(&saved, &bytes, 0o600);
            }
            LedgerError::Corrupt {
                path: path.clone(),
                saved,
                message,
            }
        };
        let v: Version = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if v.version > SCHEMA_VERSION {
            return Err(LedgerError::TooNew {
                path,
                found: v.version,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))
    }

    /// A consistent snapshot for read-only commands: writes are atomic
    /// renames, so no lock is needed, and nothing is created (a missing
    /// directory or file is an empty ledger; see `exists`).
    pub fn read(&self) -> Result<LedgerData, LedgerError> {
        self.load_unlocked(false)
    }

    /// Whether the ledger file exists (it is made by the first admission).
    pub fn exists(&self) -> bool {
        self.path().is_file()
    }

    fn lock(&self) -> Result<fsutil::LockGuard, LedgerError> {
        fsutil::secure_dir(&self.dir, 0o755).map_err(self.io(&self.dir))?;
        let lp = self.dir.join("ledger.lock");
        let g = fsutil::lock_exclusive(&lp).map_err(self.io(&lp))?;
        self.remove_crashed_temps();
        Ok(g)
    }

    /// Temp files of writes that crashed before their rename (only a
    /// writer holding the lock makes them, so under the lock they are all
    /// leftovers).
    fn remove_crashed_temps(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in rd.flatten() {
            let n = e.file_name();
            if n.to_string_lossy().starts_with(".ledger.json.tmp.") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Read-modify-write under the lock. `f` returns a value and whether it
    /// changed the data; only changed data is written.
    pub fn transact<T>(
        &self,
        f: impl FnOnce(&mut LedgerData) -> Result<(T, bool), LedgerError>,
    ) -> Result<T, LedgerError> {
        self.transact_observed(f, &mut |_| {})
    }

    /// As `transact`, calling `observe` at each step of the write (tests
    /// inject crashes there).
    pub fn transact_observed<T>(
        &self,
        f: impl FnOnce(&mut LedgerData) -> Result<(T, bool), LedgerError>,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<T, LedgerError> {
        let _g = self.lock()?;
        let mut data = self.load_unlocked(true)?;
        let (out, changed) = f(&mut data)?;
        if changed {
            data.version = SCHEMA_VERSION;
            let mut bytes = serde_json::to_vec_pretty(&data).expect("ledger serializes");
            bytes.push(b'\n');
            let path = self.path();
            fsutil::write_atomic_observed(&path, &bytes, 0o644, observe).map_err(self.io(&path))?;
        }
        Ok(out)
    }

    /// Whether the container behind `r` is gone. Judged only where the
    /// reservation's pid and runc state mean something: a reservation
    /// recorded in another pid or mount namespace (a containerized
    /// containerd, Docker-in-Docker, kind) is never stale from here — only
    /// a different boot makes it so.
    pub fn is_stale(&self, r: &Reservation, now: u64) -> bool {
        if let (Some(b), Some(cur)) = (&r.boot_id, fsutil::boot_id()) {
            if *b != cur {
                return true;
            }
        }
        let foreign = |recorded: Option<u64>, kind: &str| matches!((recorded, fsutil::namespace_id(kind)), (Some(a), Some(b)) if a != b);
        if foreign(r.pid_ns, "pid") || foreign(r.mnt_ns, "mnt") {
            return false;
        }
        match (r.pid, r.pid_start) {
            (Some(pid), Some(start)) => !fsutil::process_alive(pid, start),
            _ => {
                let old = now.saturating_sub(r.created_unix) > self.grace_secs;
                let state_dir_exists = r
                    .runtime_root
                    .as_ref()
                    .map(|root| Path::new(root).join(&r.container_id).exists())
                    .unwrap_or(false);
                old && !state_dir_exists
            }
        }
    }

    fn reclaim(&self, d: &mut LedgerData) -> Vec<Reservation> {
        let now = fsutil::now_unix();
        let (stale, keep): (Vec<_>, Vec<_>) = d
            .reservations
            .drain(..)
            .partition(|r| self.is_stale(r, now));
        d.reservations = keep;
        stale
    }

    /// Reclaim reservations whose container is gone; returns them.
    pub fn gc(&self) -> Result<Vec<Reservation>, LedgerError> {
        self.transact(|d| {
            let s = self.reclaim(d);
            let changed = !s.is_empty();
            Ok((s, changed))
        })
    }

    /// Admission: place `req` and record it, atomically with respect to
    /// every other admission on this host.
    /// Reservations of dead containers reclaimed on the way are appended to
    /// `reclaimed` (also when the admission is refused), so the caller can
    /// remove their state.
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        cfg: &Config,
        inv: &Inventory,
        req: &Request,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        reclaimed: &mut Vec<Reservation>,
    ) -> Result<Reservation, LedgerError> {
        let reserve = cfg.reserve_bytes().unwrap_or(0);
        let placer = Placer {
            inventory: inv,
            policy: cfg.placement,
            reserve,
            sliceable: &cfg.gpus,
        };
        self.transact(|d| {
            if let Some(r) = d
                .reservations
                .iter()
                .find(|r| Key::Root { id, root }.matches(r))
            {
                if !self.is_stale(r, fsutil::now_unix()) {
                    return Err(LedgerError::Duplicate {
                        id: id.into(),
                        slices: describe_slices(&r.slices),
                    });
                }
            }
            let slices = match placer.place(req, &d.usage()) {
                Ok(s) => s,
                Err(_) => {
                    // Before refusing, reclaim what dead containers still hold.
                    let gone = self.reclaim(d);
                    let changed = !gone.is_empty();
                    reclaimed.extend(gone);
                    match placer.place(req, &d.usage()) {
                        Ok(s) => s,
                        Err(err) => {
                            if changed {
                                // keep the reclaim; the refusal is reported after the write
                                return Ok((
                                    Err(LedgerError::Refused {
                                        id: id.into(),
                                        err: Box::new(err),
                                    }),
                                    true,
                                ));
                            }
                            return Err(LedgerError::Refused {
                                id: id.into(),
                                err: Box::new(err),
                            });
                        }
                    }
                }
            };
            d.reservations
                .retain(|r| !Key::Root { id, root }.matches(r));
            let r = Reservation {
                container_id: id.into(),
                runtime_root: root.map(str::to_string),
                bundle: bundle.into(),
                slices,
                request: describe_request(req),
                created_unix: fsutil::now_unix(),
                started_unix: None,
                pid: None,
                pid_start: None,
                state: ResState::Reserved,
                pid_ns: fsutil::namespace_id("pid"),
                mnt_ns: fsutil::namespace_id("mnt"),
                boot_id: fsutil::boot_id(),
            };
            d.reservations.push(r.clone());
            Ok((Ok(r), true))
        })?
    }

    /// The hook confirms the reservation of container `id` created under
    /// runc root `root` from `bundle` with the container's process.
    pub fn confirm(
        &self,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        pid: u32,
    ) -> Result<Reservation, LedgerError> {
        let start = fsutil::process_start_time(pid);
        let key = Key::Hook { id, root, bundle };
        self.transact(|d| {
            let Some(r) = d.reservations.iter_mut().find(|r| key.matches(r)) else {
                return Err(LedgerError::NoReservation {
                    id: id.into(),
                    root: root.unwrap_or("(runc's default)").into(),
                    bundle: bundle.into(),
                });
            };
            r.pid = Some(pid);
            r.pid_start = start;
            r.state = ResState::Running;
            r.pid_ns = fsutil::namespace_id("pid");
            r.mnt_ns = fsutil::namespace_id("mnt");
            r.boot_id = fsutil::boot_id();
            r.started_unix = Some(fsutil::now_unix());
            Ok((r.clone(), true))
        })
    }

    /// Release; idempotent (releasing twice, or something never admitted,
    /// is not an error). Returns what was released.
    pub fn release(&self, key: Key<'_>) -> Result<Vec<Reservation>, LedgerError> {
        self.transact(|d| {
            let (gone, keep): (Vec<_>, Vec<_>) =
                d.reservations.drain(..).partition(|r| key.matches(r));
            d.reservations = keep;
            let changed = !gone.is_empty();
            Ok((gone, changed))
        })
    }

    /// Move a corrupt ledger aside and start empty (operator action).
    pub fn reset_corrupt(&self) -> Result<Option<PathBuf>, LedgerError> {
        let _g = self.lock()?;
        match self.load_unlocked(true) {
            Err(LedgerError::Corrupt { path, .. }) => {
                let aside = self
                    .dir
                    .join(format!("ledger.json.reset-{}", fsutil::now_unix()));
                std::fs::rename(&path, &aside).map_err(self.io(&path))?;
                Ok(Some(aside))
            }
            Err(e) => Err(e),
            Ok(_) => Ok(None),
        }
    }
}

/// Upper bound on a ledger file we parse (a host has at most a few
/// thousand reservations; anything larger is not ours).
pub const MAX_LEDGER_BYTES: u64 = 64 << 20;

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(bytes)
}

pub fn describe_slices(s: &[Slice]) -> String {
    s.iter()
        .map(|s| format!("{} on GPU {}", human(s.bytes), s.index))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn describe_request(req: &Request) -> String {
    use crate::request::GpuSelector;
    let v = match req.vram {
        crate::units::Size::Bytes(b) => human(b),
        crate::units::Size::Ppm(p) => format!("{}%", p as f64 / 10_000.0),
    };
    let g = match &req.gpus {
        GpuSelector::Count(1) => String::new(),
        GpuSelector::Count(n) => format!(" gpus={n}"),
        GpuSelector::All => " gpus=all".into(),
        GpuSelector::List(l) => format!(
            " gpu={}",
            l.iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    format!("vram={v}{g}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Gpu;
    use crate::request::{GpuRef, GpuSelector, Origin};
    use crate::units::Size;
    const G: u64 = 1 << 30;

    fn setup() -> (tempfile::TempDir, Config, Inventory) {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            ledger_dir: d.path().into(),
            ..Config::default()
        };
        let inv = Inventory {
            gpus: (0..2)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "t".into(),
                    total_bytes: 16 * G,
                    minor: i,
                    simulated: true,
                })
                .collect(),
            driver_version: "simulated".into(),
        };
        (d, cfg, inv)
    }
    fn req(b: u64, gpu: Option<u32>) -> Request {
        Request {
            vram: Size::Bytes(b),
            gpus: gpu
                .map(|g| GpuSelector::List(vec![GpuRef::Index(g)]))
                .unwrap_or(GpuSelector::Count(1)),
            origin: Origin::Annotation("vram".into()),
        }
    }

    #[test]
    fn admit_refuse_release() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        l.admit(
            &cfg,
            &inv,
            &req(8 * G, Some(0)),
            "a",
            None,
            "/b/a",
            &mut vec![],
        )
        .unwrap();
        l.admit(
            &cfg,
            &inv,
            &req(8 * G, Some(0)),
            "b",
            None,
            "/b/b",
            &mut vec![],
        )
        .unwrap();
        let before = std::fs::read(l.path()).unwrap();
        let e = l
            .admit(
                &cfg,
                &inv,
                &req(8 * G, Some(0)),
                "c",
                None,
                "/b/c",
                &mut vec![],
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("8.00 GiB") && e.contains("GPU 0") && e.contains("only 0 B"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(l.path()).unwrap(),
            before,
            "a refusal leaves the ledger untouched"
        );
        let r = l
            .admit(
                &cfg,
                &inv,
                &req(8 * G, None),
                "c",
                None,
                "/b/c",
                &mut vec![],
            )
            .unwrap();
        assert_eq!(r.slices[0].index, 1);
        assert!(matches!(
            l.admit(&cfg, &inv, &req(G, None), "c", None, "/b/c", &mut vec![]),
            Err(LedgerError::Duplicate { .. })
        ));
        assert_eq!(
            l.release(Key::Root {
                id: "a",
                root: None
            })
            .unwrap()
            .len(),
            1
        );
        assert_eq!(
            l.release(Key::Root {
                id: "a",
                root: None
            })
            .unwrap()
            .len(),
            0,
            "idempotent"
        );
        assert_eq!(l.read().unwrap().reservations.len(), 2);
    }

    #[test]
    fn confirm_and_stale_pid_reclaimed() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        l.admit(
            &cfg,
            &inv,
            &req(16 * G, Some(0)),
            "a",
            None,
            "/b/a",
            &mut vec![],
        )
        .unwrap();
        // a child that exits: its reservation becomes stale
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let r = l.confirm("a", None, "/b/a", pid).unwrap();
        assert_eq!(r.state, ResState::Running);
        child.wait().unwrap();
        // GPU 0 is full by a dead container: admission reclaims it
        l.admit(
            &cfg,
            &inv,
            &req(16 * G, Some(0)),
            "b",
            None,
            "/b/b",
            &mut vec![],
        )
        .unwrap();
        let d = l.read().unwrap();
        assert_eq!(d.reservations.len(), 1);
        assert_eq!(d.reservations[0].container_id, "b");
        assert!(matches!(
            l.confirm("zzz", None, "/b/zzz", 1),
            Err(LedgerError::NoReservation { .. })
        ));
    }

    /// Issue 16 §4: the same id and bundle under two runc roots are two
    /// containers; every lookup (duplicate check, confirm, release) keys on
    /// the root as well.
    #[test]
    fn same_id_and_bundle_under_two_roots_are_two_reservations() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        let (r1, r2) = (Some("/run/one"), Some("/run/two"));
        for root in [r1, r2] {
            l.admit(
                &cfg,
                &inv,
                &req(G, None),
                "dup",
                root,
                "/b/dup",
                &mut vec![],
            )
            .unwrap();
        }
        assert!(
            matches!(
                l.admit(&cfg, &inv, &req(G, None), "dup", r2, "/b/dup", &mut vec![]),
                Err(LedgerError::Duplicate { .. })
            ),
            "same id, same root: a duplicate"
        );
        // each hook confirms its own root's reservation with its own pid
        let mut c1 = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut c2 = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let a = l.confirm("dup", r2, "/b/dup", c2.id()).unwrap();
        let b = l.confirm("dup", r1, "/b/dup", c1.id()).unwrap();
        assert_eq!((a.runtime_root.as_deref(), a.pid), (r2, Some(c2.id())));
        assert_eq!((b.runtime_root.as_deref(), b.pid), (r1, Some(c1.id())));
        let d = l.read().unwrap();
        for (root, pid) in [(r1, c1.id()), (r2, c2.id())] {
            let mine: Vec<_> = d
                .reservations
                .iter()
                .filter(|r| r.runtime_root.as_deref() == root)
                .collect();
            assert_eq!(mine.len(), 1);
            assert_eq!(mine[0].pid, Some(pid), "{root:?}");
        }
        // neither another root, nor runc's default, nor another bundle matches
        for (root, bundle) in [
            (Some("/run/three"), "/b/dup"),
            (None, "/b/dup"),
            (r1, "/b/other"),
        ] {
            assert!(
                matches!(
                    l.confirm("dup", root, bundle, c1.id()),
                    Err(LedgerError::NoReservation { .. })
                ),
                "{root:?} {bundle}"
            );
        }
        // releasing one root's container leaves the other's
        let gone = l
            .release(Key::Root {
                id: "dup",
                root: r1,
            })
            .unwrap();
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].runtime_root.as_deref(), r1);
        let left = l.read().unwrap().reservations;
        assert_eq!(left.len(), 1);
        assert_eq!(
            (left[0].runtime_root.as_deref(), left[0].pid),
            (r2, Some(c2.id()))
        );
        let gone = l
            .release(Key::Hook {
                id: "dup",
                root: r2,
                bundle: "/b/dup",
            })
            .unwrap();
        assert_eq!(gone.len(), 1);
        assert!(l.read().unwrap().reservations.is_empty());
        for c in [&mut c1, &mut c2] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    #[test]
    fn corrupt_is_kept_and_reported() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        std::fs::write(l.path(), b"{\"version\":1,\"reserv").unwrap();
        let e = l
            .admit(&cfg, &inv, &req(G, None), "a", None, "/b", &mut vec![])
            .unwrap_err();
        assert!(matches!(e, LedgerError::Corrupt { .. }), "{e}");
        assert_eq!(
            std::fs::read(l.path()).unwrap(),
            b"{\"version\":1,\"reserv",
            "left in place"
        );
        assert!(e.to_string().contains("corrupt"));
        let aside = l.reset_corrupt().unwrap().unwrap();
        assert!(aside.exists());
        l.admit(&cfg, &inv, &req(G, None), "a", None, "/b", &mut vec![])
            .unwrap();
        std::fs::write(l.path(), b"{\"version\":99,\"reservations\":[]}").unwrap();
        assert!(matches!(l.read(), Err(LedgerError::TooNew { .. })));
    }

    fn dead_reservation(l: &Ledger, cfg: &Config, inv: &Inventory, id: &str, gpu: u32) {
        l.admit(
            cfg,
            inv,
            &req(16 * G, Some(gpu)),
            id,
            None,
            &format!("/b/{id}"),
            &mut vec![],
        )
        .unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        l.confirm(id, None, &format!("/b/{id}"), child.id())
            .unwrap();
        child.wait().unwrap();
    }

    /// Issue 8, class 4: reservations reclaimed during an admission were
    /// dropped, so their state directories were never removed.
    #[test]
    fn admission_reports_what_it_reclaimed() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        dead_reservation(&l, &cfg, &inv, "dead", 0);
        let mut reclaimed = vec![];
        l.admit(
            &cfg,
            &inv,
            &req(16 * G, Some(0)),
            "b",
            None,
            "/b/b",
            &mut reclaimed,
        )
        .unwrap();
        assert_eq!(reclaimed.len(), 1);
        assert_eq!(reclaimed[0].container_id, "dead");
        // also when the admission is refused after reclaiming
        dead_reservation(&l, &cfg, &inv, "dead2", 1);
        let mut reclaimed = vec![];
        assert!(l
            .admit(
                &cfg,
                &inv,
                &req(17 * G, None),
                "c",
                None,
                "/b/c",
                &mut reclaimed
            )
            .is_err());
        assert_eq!(reclaimed.len(), 1, "the refusal still reports the reclaim");
    }

    /// Issue 8, class 4: liveness was judged by pid alone, so `gc` or an
    /// admission from another pid namespace saw every live container as dead.
    #[test]
    fn liveness_is_never_judged_across_namespaces_but_a_new_boot_ends_all() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        l.admit(&cfg, &inv, &req(G, None), "a", None, "/b/a", &mut vec![])
            .unwrap();
        let mut r = l.confirm("a", None, "/b/a", std::process::id()).unwrap();
        assert!(r.pid_ns.is_some() && r.mnt_ns.is_some() && r.boot_id.is_some());
        let now = fsutil::now_unix();
        assert!(!l.is_stale(&r, now), "our own live process");
        // recorded in another pid namespace, with a pid that is dead here
        r.pid = Some(u32::MAX - 7);
        r.pid_ns = Some(1);
        assert!(
            !l.is_stale(&r, now),
            "dead-looking pid of another namespace"
        );
        r.pid_ns = fsutil::namespace_id("pid");
        assert!(l.is_stale(&r, now), "same namespace, dead pid");
        // another mount namespace: the runc state dir check is meaningless
        let mut q = r.clone();
        q.pid = None;
        q.pid_start = None;
        q.created_unix = 0;
        q.mnt_ns = Some(1);
        assert!(!l.is_stale(&q, now));
        // a reservation from an earlier boot is gone, whatever its namespace
        r.pid_ns = Some(1);
        r.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
        assert!(l.is_stale(&r, now));
    }

    #[test]
    fn read_only_use_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            ledger_dir: d.path().join("absent/ledger"),
            ..Config::default()
        };
        let l = Ledger::new(&cfg);
        assert_eq!(l.read().unwrap().reservations.len(), 0);
        assert!(!l.exists());
        assert!(
            !d.path().join("absent").exists(),
            "read() created the directory"
        );
    }

    #[test]
    fn crashed_temps_are_removed_and_corrupt_copies_are_made_once_without_following_links() {
        let (d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        let tmp = d.path().join(".ledger.json.tmp.999999");
        std::fs::write(&tmp, b"half").unwrap();
        l.admit(&cfg, &inv, &req(G, None), "a", None, "/b/a", &mut vec![])
            .unwrap();
        assert!(!tmp.exists(), "a crashed write's temp file stays");
        std::fs::write(l.path(), b"{not json").unwrap();
        // a planted link at the copy's name is never written through
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        for _ in 0..3 {
            assert!(matches!(
                l.admit(&cfg, &inv, &req(G, None), "b", None, "/b/b", &mut vec![]),
                Err(LedgerError::Corrupt { .. })
            ));
        }
        let copies: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("corrupt"))
            .collect();
        assert_eq!(copies.len(), 1, "one copy per content, not per call");
        let name = copies[0].path();
        std::fs::remove_file(&name).unwrap();
        std::os::unix::fs::symlink(&victim, &name).unwrap();
        let _ = l.admit(&cfg, &inv, &req(G, None), "b", None, "/b/b", &mut vec![]);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // read-only use never writes a copy
        std::fs::remove_file(&name).unwrap();
        assert!(l.read().is_err());
        assert!(!name.exists());
    }

    #[test]
    fn a_symlinked_ledger_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let cfg = Config {
            ledger_dir: d.path().join("link"),
            ..Config::default()
        };
        let (_d2, _, inv) = setup();
        let e = Ledger::new(&cfg)
            .admit(&cfg, &inv, &req(G, None), "a", None, "/b/a", &mut vec![])
            .unwrap_err()
            .to_string();
        assert!(e.contains("symlink"), "{e}");
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
    }
}
