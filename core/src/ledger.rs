//! The host ledger: the reservations of one host, in two places.
//!
//! * `ledger.json`: what must outlive a boot (a DRA claim's entry) and what
//!   any whole-ledger transaction (`transact`: claims, `gc`, `gpu-quota
//!   release`, a reclaim) adds; written atomically and durably (temp, fsync,
//!   rename, fsync dir).
//! * `boot-<boot_id>/`: one record per container admitted on the fast path
//!   ([`records`]): admission, the hook's confirmation and the release each
//!   touch only their container's record, and an admission reads the other
//!   records' names, not their contents — a container start does the same
//!   work with 1 or 200 containers on the host.
//!
//! Every read-modify-write holds an exclusive `flock` on `ledger.lock`
//! (never on a data file, which is replaced by rename). The schema is
//! versioned (2: records may exist beside ledger.json; a release that knows
//! only version 1 refuses to run instead of admitting past them); a
//! ledger.json that does not parse is kept in place, copied aside for
//! inspection, and every operation refuses with an error naming both paths
//! — never silently reset.
use crate::config::Config;
use crate::fsutil::{self, WriteStep};
use crate::inventory::Inventory;
use crate::placement::{ContextCosts, PlacementError, Placer, Slice, Usage};
use crate::request::Request;
use crate::units::human;
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const SCHEMA_VERSION: u32 = 2;
/// The version ledger.json is written with while a reservation in it holds
/// a compute share (`sm=`). A release before shares ignored the unknown
/// `sm` field and would write the ledger back without it, the shares then
/// gone from every later admission and daemon decision; it refuses a
/// version it does not know (`TooNew`) instead. Without shares the file
/// goes back to [`SCHEMA_VERSION`], which every release since records
/// reads. 5: builds that wrote shares as 3 did not know a share's host uid
/// (`sm_user`), builds that wrote 4 not the processes a share is split
/// over (`sm_procs`), and would drop them the same way. A share read from
/// a ledger of 3 or 4 is of one process ([`LedgerData::shares_of_one_process`]).
pub const SHARES_SCHEMA_VERSION: u32 = 5;
/// The version ledger.json is written with while a reservation in it holds
/// a burst limit (`vram-limit=`): a release before bursts would drop the
/// limit on a rewrite, and the burster would then look guaranteed, never
/// a victim of a reclaim. The newest version this release reads.
pub const BURSTS_SCHEMA_VERSION: u32 = 6;

mod container;
mod duplicates;
pub(crate) mod records;
pub mod resize;

/// The ledger file's mode: root's only (claim tokens are in it).
pub const LEDGER_MODE: u32 = 0o600;

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
    /// Set on a DRA claim's own entry (`core::claims::prepare`): this
    /// reservation is the claim's, not a container's. It holds the claim's
    /// bytes until `unprepare`; it is never stale and no container key
    /// matches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimEntry>,
    /// Set on a container bound to a prepared claim (its uid): the
    /// container's slice is the claim's, whose entry already counts the
    /// bytes, so sums and fit checks skip this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_claim: Option<String>,
    /// Who the container is to its engine (pod, namespace, name), for the
    /// operator's view only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    /// A resize of one of its slices under way (`ledger::resize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resizing: Option<resize::PendingResize>,
}

/// A prepared DRA claim, as its ledger entry records it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimEntry {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// 256 random bits, hex: what a container must present
    /// (`GPU_QUOTA_CLAIM_<uid>`, from the claim's CDI spec) to be bound.
    /// Kept only here (the ledger is 0600) and in the CDI spec; never
    /// printed (`Debug` leaves it out, `gpu-quota ls --json` drops it).
    pub token: String,
}

impl std::fmt::Debug for ClaimEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimEntry")
            .field("uid", &self.uid)
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("token", &"(secret)")
            .finish()
    }
}

impl Reservation {
    /// The GPU of its compute share, if it has one (a share is of one GPU:
    /// `gpuquota_formats::grant::share`).
    pub fn share(&self) -> Option<&Slice> {
        gpuquota_formats::grant::share(&self.slices)
    }

    /// A reservation of `slices` for container `container_id` under runc
    /// root `runtime_root` from `bundle`, as the user asked (`request`):
    /// `Reserved`, no process, nothing else recorded (created at 0).
    pub fn new(
        container_id: impl Into<String>,
        runtime_root: Option<&str>,
        bundle: impl Into<String>,
        slices: Vec<Slice>,
        request: impl Into<String>,
    ) -> Reservation {
        Reservation {
            container_id: container_id.into(),
            runtime_root: runtime_root.map(str::to_string),
            bundle: bundle.into(),
            slices,
            request: request.into(),
            created_unix: 0,
            started_unix: None,
            pid: None,
            pid_start: None,
            state: ResState::Reserved,
            pid_ns: None,
            mnt_ns: None,
            boot_id: None,
            claim: None,
            bound_claim: None,
            workload: None,
            resizing: None,
        }
    }

    /// This reservation as admitted now by this process: created now, in
    /// this process's pid and mount namespaces and boot (what `is_stale`
    /// judges liveness by).
    pub fn admitted_now(self) -> Reservation {
        Reservation {
            created_unix: fsutil::now_unix(),
            pid_ns: fsutil::namespace_id("pid"),
            mnt_ns: fsutil::namespace_id("mnt"),
            boot_id: fsutil::boot_id(),
            ..self
        }
    }

    /// Whether this is a DRA claim's entry rather than a container's.
    pub fn is_claim(&self) -> bool {
        self.claim.is_some()
    }

    /// Whether its bytes count in sums over the ledger: a container bound
    /// to a claim does not (the claim's entry holds them, counted once).
    pub fn counts(&self) -> bool {
        self.bound_claim.is_none()
    }
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

/// What `held` holds on each GPU, judged without reclaiming anything
/// (`stale`: the caller's judgement of a dead container): a dead
/// container's bytes count until it is reclaimed (by `gc` or a container's
/// admission), its compute does not ([`crate::placement::GpuUse::add_idle`]:
/// no process of it runs there). What a DRA claim's prepare and offers are
/// placed against: the DRA driver reclaims nothing (a container's cleanup
/// is its runtime's). The device plugin's units are judged against it too.
pub fn usage_unreclaimed<'a>(
    held: impl IntoIterator<Item = &'a Reservation>,
    stale: &dyn Fn(&Reservation) -> bool,
) -> Usage {
    let mut u = Usage::new();
    for r in held.into_iter().filter(|r| r.counts()) {
        let dead = stale(r);
        for s in &r.slices {
            let e = u.entry(s.uuid.clone()).or_default();
            if dead {
                e.add_idle(s)
            } else {
                e.add(s)
            }
        }
    }
    u
}

impl LedgerData {
    /// The ledger as read: a share recorded before shares were split over
    /// processes (schema 3 or 4, no `sm_procs`) is a share of one process,
    /// which is what its container got (its grant file said no count).
    fn shares_of_one_process(mut self) -> Self {
        for s in self
            .reservations
            .iter_mut()
            .flat_map(|r| r.slices.iter_mut())
        {
            if s.sm_percent > 0 && s.sm_procs == 0 {
                s.sm_procs = 1;
            }
        }
        self
    }

    /// What the reservations that count hold on each GPU (by uuid).
    pub fn usage(&self) -> Usage {
        let mut u = Usage::new();
        for r in self.reservations.iter().filter(|r| r.counts()) {
            for s in &r.slices {
                u.entry(s.uuid.clone()).or_default().add(s);
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
    #[error("ledger {path} has schema version {found}, newer than this gpu-quota understands ({BURSTS_SCHEMA_VERSION}); upgrade gpu-quota")]
    TooNew { path: PathBuf, found: u32 },
    #[error("cannot start container {id}: {err}")]
    Refused {
        id: String,
        err: Box<PlacementError>,
    },
    #[error("ledger record {path} is corrupt ({message}); it was left in place. Check which containers still run, then remove it")]
    CorruptRecord { path: PathBuf, message: String },
    #[error("container {id} already holds a reservation in this ledger ({slices}); delete it first (runc delete {id}) or run `gpu-quota gc`")]
    Duplicate { id: String, slices: String },
    #[error("container {id} (bundle {bundle}, runc root {root}) asks for GPU memory but has no reservation under that root and bundle; it must be created through gpu-quota-runtime")]
    NoReservation {
        id: String,
        root: String,
        bundle: String,
    },
}

/// A reservation read from its record.
struct Loaded {
    path: PathBuf,
    res: Reservation,
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
    /// The container id and runc root the key names.
    fn id_root(&self) -> (&str, Option<&str>) {
        match self {
            Key::Root { id, root } | Key::Hook { id, root, .. } => (id, *root),
        }
    }

    pub fn matches(&self, r: &Reservation) -> bool {
        if r.is_claim() {
            return false; // a claim's entry is no container's
        }
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
            use crate::formats::names::{fnv1a, FNV_OFFSET};
            let h = fnv1a(FNV_OFFSET, &bytes);
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
        // One parse of the whole file on the path every transaction takes
        // (at 200 reservations a parse is most of a transaction's growth,
        // docs/benchmarks.md); the version alone is read only to tell a
        // newer schema from a broken file when that parse fails.
        let too_new = |found: u32| LedgerError::TooNew {
            path: path.clone(),
            found,
        };
        match serde_json::from_slice::<LedgerData>(&bytes) {
            Ok(d) if d.version > BURSTS_SCHEMA_VERSION => Err(too_new(d.version)),
            Ok(d) => Ok(d.shares_of_one_process()),
            Err(full) => {
                let v: Version =
                    serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
                if v.version > BURSTS_SCHEMA_VERSION {
                    return Err(too_new(v.version));
                }
                Err(corrupt(full.to_string()))
            }
        }
    }

    /// The ledger for read-only commands, without the lock: ledger.json,
    /// then every boot's records. Each file is replaced atomically, so each
    /// reads whole; a whole-ledger write running meanwhile can show an
    /// entry it moves from a record to ledger.json twice or not at all (an
    /// earlier boot's, stale), never a torn one. A container a crash left
    /// held twice is shown once, merged as the next transaction will hold
    /// it (`duplicates`). Nothing is created (a missing directory or file
    /// is an empty ledger; see `exists`).
    pub fn read(&self) -> Result<LedgerData, LedgerError> {
        let mut d = self.load_unlocked(false)?;
        d.reservations.extend(
            self.load_records(&self.scan(false)?, false)?
                .into_iter()
                .map(|l| l.res),
        );
        duplicates::merge(&mut d);
        Ok(d)
    }

    fn write_json(
        &self,
        data: &LedgerData,
        sync_dir: bool,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<(), LedgerError> {
        let shares = data
            .reservations
            .iter()
            .any(|r| r.slices.iter().any(|s| s.sm_percent > 0));
        let bursts = data
            .reservations
            .iter()
            .any(|r| r.slices.iter().any(|s| s.burst.is_some()));
        let version = if bursts {
            BURSTS_SCHEMA_VERSION
        } else if shares {
            SHARES_SCHEMA_VERSION
        } else {
            data.version.min(SCHEMA_VERSION)
        };
        let marked;
        let data = if version == data.version {
            data
        } else {
            marked = LedgerData {
                version,
                reservations: data.reservations.clone(),
            };
            &marked
        };
        // compact: its size is the part of a whole-ledger write that grows
        // with the number of entries (pretty printing made it 1.4× larger)
        let mut bytes = serde_json::to_vec(data).expect("ledger serializes");
        bytes.push(b'\n');
        let path = self.path();
        // 0600: a prepared claim's entry holds its token (core::claims)
        let durability = if sync_dir {
            fsutil::Durability::FileAndDir
        } else {
            fsutil::Durability::File
        };
        fsutil::write_atomic_steps(&path, &bytes, LEDGER_MODE, durability, observe)
            .map_err(self.io(&path))
    }

    /// Whether the ledger exists: ledger.json (made by the first
    /// admission) or a boot's record directory.
    pub fn exists(&self) -> bool {
        self.path().is_file() || self.scan(false).is_ok_and(|d| !d.is_empty())
    }

    /// The lock, and every boot's record directory (this boot's `true`),
    /// from the one listing of the ledger directory made under it, which
    /// also removes the temp files of writes that crashed before their
    /// rename (only a writer holding the lock makes them, so under the lock
    /// they are all leftovers).
    fn lock(&self) -> Result<(fsutil::LockGuard, Vec<(PathBuf, bool)>), LedgerError> {
        fsutil::secure_dir(&self.dir, 0o755).map_err(self.io(&self.dir))?;
        let lp = self.dir.join("ledger.lock");
        let g = fsutil::lock_exclusive(&lp).map_err(self.io(&lp))?;
        let dirs = self.scan(true)?;
        Ok((g, dirs))
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
        self.transact_steps(f, true, observe)
    }

    fn transact_steps<T>(
        &self,
        f: impl FnOnce(&mut LedgerData) -> Result<(T, bool), LedgerError>,
        sync_dir: bool,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<T, LedgerError> {
        let (_g, dirs) = self.lock()?;
        let mut data = self.load_unlocked(true)?;
        let recs = self.load_records(&dirs, true)?;
        data.reservations.extend(recs.iter().map(|l| l.res.clone()));
        // a container a crash left held twice is held once from here on,
        // written back even when `f` changes nothing
        let merged = duplicates::merge(&mut data);
        let (out, changed) = f(&mut data)?;
        if changed || merged {
            self.save(data, &recs, &dirs, sync_dir, observe)?;
        }
        Ok(out)
    }

    /// Whether the container behind `r` is gone. Judged only where the
    /// reservation's pid and runc state mean something: a reservation
    /// recorded in another pid or mount namespace (a containerized
    /// containerd, Docker-in-Docker, kind) is never stale from here — only
    /// a different boot makes it so.
    pub fn is_stale(&self, r: &Reservation, now: u64) -> bool {
        if r.is_claim() {
            return false; // held until `claims::unprepare`, whatever the boot
        }
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

    /// Move a corrupt ledger aside and start empty (operator action).
    pub fn reset_corrupt(&self) -> Result<Option<PathBuf>, LedgerError> {
        let (_g, _) = self.lock()?;
        match self.load_unlocked(true) {
            Err(LedgerError::Corrupt { path, .. }) => {
                let aside = self
                    .dir
                    .join(format!("ledger.json.reset-{}", fsutil::now_unix()));
                // linked aside, then replaced atomically by a new, empty
                // ledger.json that still marks the schema (there is no
                // moment without one): the boot's records stay held, and an
                // older release refuses them
                std::fs::hard_link(&path, &aside).map_err(self.io(&path))?;
                self.write_json(&LedgerData::default(), true, &mut |_| {})?;
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

/// What admission knows besides the request: what a context costs here
/// (a slice that cannot hold one is refused) and who the container is to
/// its engine (recorded with the reservation).
#[derive(Debug, Clone, Default)]
pub struct AdmitInfo {
    pub contexts: ContextCosts,
    pub workload: Option<Workload>,
}

pub fn describe_slices(s: &[Slice]) -> String {
    s.iter()
        .map(|s| match (s.sm_percent, s.sm_procs) {
            (0, _) => format!("{} on GPU {}", human(s.vram_bytes), s.index),
            (p, 0 | 1) => format!(
                "{} and {p}% of the SMs on GPU {}",
                human(s.vram_bytes),
                s.index
            ),
            (p, n) => format!(
                "{} and {p}% of the SMs on GPU {} over {n} processes",
                human(s.vram_bytes),
                s.index
            ),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn describe_request(req: &Request) -> String {
    use crate::request::GpuSelector;
    let v = req.vram.to_string();
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
    let burst = match &req.burst {
        Some(b) if b.priority > 0 => {
            format!(" vram-limit={} vram-priority={}", b.limit, b.priority)
        }
        Some(b) => format!(" vram-limit={}", b.limit),
        None => String::new(),
    };
    match (req.sm, req.sm_procs) {
        (Some(p), 0 | 1) => format!("vram={v}{g} sm={p}%"),
        (Some(p), n) => format!("vram={v}{g} sm={p}% sm-procs={n}"),
        (None, _) => format!("vram={v}{g}{burst}"),
    }
}

#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod tests;
