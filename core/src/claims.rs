//! DRA claims: the node side of the `vram.gpu-quota.io` driver.
//!
//! * [`offers`]: what each GPU can give claims — the ledger's usable bytes
//!   minus every reservation that is *not* a claim's (docker/podman/ctr
//!   containers, device-plugin containers). Claims are not subtracted: the
//!   scheduler accounts for them itself (`consumedCapacity`).
//! * [`prepare`]: the kubelet prepared a claim. Under the ledger's lock its
//!   bytes are reserved on its GPU as a *claim entry* (not a container's),
//!   refused when the other reservations leave too little; a random
//!   256-bit token is stored in the entry (the ledger is 0600) and written,
//!   in the same critical section, into the claim's CDI spec (0600, atomic):
//!   one device `vram.gpu-quota.io/claim=<uid>` whose only edit is the
//!   variable `GPU_QUOTA_CLAIM_<uid, - as _>=<token>`. Idempotent for the
//!   same uid, GPU and bytes (same token, the spec rewritten).
//! * [`bind`] (called by `lifecycle` at the runtime's `create`): a
//!   container presenting that variable gets exactly the claim's slice if
//!   and only if the token matches (constant time). Every container the
//!   kubelet gave the claim's CDI device (its pod's containers, the pods a
//!   named claim is reserved for) is bound to it, at once or one after
//!   another, as they would share a device: their ledger entries record the
//!   claim's uid and never count (the claim's entry holds the bytes), and
//!   they share one usage file ([`shared_usage`], `state::claim_dir`), so
//!   together they never use more than the claim's slice. When one ends,
//!   [`consumer_gone`] frees its processes' usage in that file.
//! * [`unprepare`]: refused while a live container is bound; else the CDI
//!   spec goes and the claim's entry is taken out of the ledger and its
//!   release recorded (a claim has no driver limit: each container bound to
//!   it releases its own through `lifecycle`).
//!
//! The token never leaves the ledger and the CDI spec: no event, error or
//! `Debug` output carries it.
use crate::{
    config::{Config, Setting, BUILTIN_DEFAULT_BYTES},
    events, fsutil,
    inventory::{Gpu, Inventory, InventoryError},
    ledger::{ClaimEntry, Key, Ledger, LedgerError, Reservation},
    placement::{self, ContextCosts, Slice},
    state,
    units::human,
};
use gpuquota_formats::keys;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What claims may take together on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub uuid: String,
    pub index: u32,
    pub product: String,
    pub total_bytes: u64,
    /// Usable bytes (total minus the configured reserve) minus every
    /// reservation not held by a claim; 0 while the GPU serves compute
    /// shares (a claim's containers run outside MPS: [`ClaimError::BesideShares`]).
    pub offer_bytes: u64,
    /// The smallest claim worth granting here: one that can hold a CUDA
    /// context ([`smallest_useful`]).
    pub min_bytes: u64,
}

/// A claim the scheduler allocated on this node: `bytes` on `gpu_uuid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAlloc {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub gpu_uuid: String,
    pub bytes: u64,
}

/// What the kubelet hands the container runtime for a prepared claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Fully qualified CDI device names, e.g. `vram.gpu-quota.io/claim=<uid>`.
    pub cdi_device_ids: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("claim asks for {} on GPU {gpu}, but only {} of it are free for claims{}; held by {holders}. The memory is still held on this node: the kubelet retries the prepare, and it succeeds once a holder ends (check `gpu-quota ls`)", human(*asked), human(*free), waited(*waited_ms))]
    DoesNotFit {
        asked: u64,
        free: u64,
        gpu: String,
        /// What holds the GPU, for the message (`holders_of`).
        holders: String,
        /// How long the prepare waited for holders to release.
        waited_ms: u64,
    },
    #[error("claim asks for {} on GPU {gpu}, which cannot hold a CUDA context: every process in its container is charged {} for its context there, so no CUDA program could run in it. The smallest useful claim on this GPU is {}; ask for at least that (the ResourceSlice's request policy says so too)", human(*asked), human(*charge), human(*smallest))]
    TooSmallForContext {
        asked: u64,
        gpu: u32,
        charge: u64,
        smallest: u64,
    },
    #[error("claim asks for {} on GPU {gpu}, which serves {holders} compute share(s) ({used}% of its SMs) through MPS: a claim's containers run outside MPS and would time-slice against them, so this node offers the GPU to claims again only once its shares end (check `gpu-quota ls`)", human(*asked))]
    BesideShares {
        asked: u64,
        gpu: String,
        used: u32,
        holders: usize,
    },
    #[error("claim names GPU {gpu}, which is not a GPU gpu-quota may slice on this host; sliceable GPUs: {known}")]
    UnknownGpu { gpu: String, known: String },
    #[error("claim {uid} is already prepared as {held}, not {asked}; unprepare it first")]
    Conflict {
        uid: String,
        held: String,
        asked: String,
    },
    #[error("claim {uid} is in use by running container {container}; delete the container (the pod) before unpreparing the claim")]
    InUse { uid: String, container: String },
    #[error("invalid claim {what} {value:?}: {accepted}")]
    Invalid {
        what: &'static str,
        value: String,
        accepted: &'static str,
    },
    #[error("the container's environment carries {var:?}, but no claim with that uid is prepared on this host; a claim's variable comes only from its CDI device (resourceClaims in the pod spec), never from a pod's env")]
    UnknownClaim { var: String },
    #[error("the container's {var:?} does not match the token of the prepared claim {claim}; a claim's variable comes only from its CDI device (resourceClaims in the pod spec), never from a pod's env")]
    WrongToken { var: String, claim: String },
    #[error("the container's environment carries two different claims ({first:?}, {second:?}); a container is bound to at most one claim: request one claim per container")]
    TwoClaims { first: String, second: String },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// The stable reason label of a refused binding (a metric label).
pub fn reason_of(e: &ClaimError) -> &'static str {
    match e {
        ClaimError::Ledger(l) => events::reason_of(l),
        ClaimError::UnknownClaim { .. } => "claim_unknown",
        ClaimError::WrongToken { .. } => "claim_token",
        ClaimError::TwoClaims { .. } => "claim_two",
        ClaimError::InUse { .. } => "claim_bound",
        ClaimError::BesideShares { .. } => "share_mix",
        ClaimError::Invalid { .. } => "invalid_request",
        _ => "claim",
    }
}

fn waited(ms: u64) -> String {
    if ms == 0 {
        String::new()
    } else {
        format!(
            " after waiting {:.1} s for earlier holders to release",
            ms as f64 / 1000.0
        )
    }
}

/// How long a prepare waits for the GPU's earlier holders to release: the
/// kubelet prepares a force-deleted pod's replacement while the old pod's
/// claim is still being unprepared (about a second later), and a refusal
/// costs the new pod the kubelet's back-off (tens of seconds).
pub const RELEASE_WAIT: Duration = Duration::from_secs(5);
/// Between two tries while waiting (each one a transaction under the
/// ledger's lock, as any prepare).
const RELEASE_POLL: Duration = Duration::from_millis(100);
/// Holders named in a refusal; the rest are counted.
const MAX_HOLDERS_NAMED: usize = 6;

/// What holds GPU `gpu` in `held`, for a refusal: each claim (and whether
/// a running container is bound to it; one without is waiting for the
/// kubelet's unprepare, its pod having ended) and each container outside
/// DRA, with its bytes.
fn holders_of(ledger: &Ledger, held: &[Reservation], gpu: &str, now: u64) -> String {
    let bytes = |r: &Reservation| -> u64 {
        r.slices
            .iter()
            .filter(|s| s.uuid == gpu)
            .map(|s| s.vram_bytes)
            .sum()
    };
    let mut named: Vec<String> = held
        .iter()
        .filter(|r| r.counts() && bytes(r) > 0)
        .map(|r| match &r.claim {
            Some(c) => {
                let running = held
                    .iter()
                    .filter(|b| {
                        b.bound_claim.as_deref() == Some(c.uid.as_str()) && !ledger.is_stale(b, now)
                    })
                    .count();
                let state = match running {
                    0 => "no running container: its pods have ended and the kubelet has not unprepared it yet".to_string(),
                    1 => "1 running container".to_string(),
                    n => format!("{n} running containers"),
                };
                format!("claim {} ({}, {state})", label(c), human(bytes(r)))
            }
            None => format!(
                "container {} outside DRA ({}{})",
                r.container_id.chars().take(64).collect::<String>(),
                human(bytes(r)),
                if ledger.is_stale(r, now) {
                    ", exited, not yet released"
                } else {
                    ""
                }
            ),
        })
        .collect();
    if named.is_empty() {
        return "nothing (the configured reserve)".into();
    }
    let more = named.len().saturating_sub(MAX_HOLDERS_NAMED);
    named.truncate(MAX_HOLDERS_NAMED);
    if more > 0 {
        named.push(format!("{more} more"));
    }
    named.join(", ")
}

/// Longest uid, namespace or name accepted (Kubernetes: a UUID; names are
/// DNS subdomains of at most 253 characters).
const MAX_NAME: usize = 253;
const MAX_UID: usize = 128;
/// The token: 256 bits, hex.
const TOKEN_BYTES: usize = 32;

const UID_FORM: &str = "1 to 128 ASCII letters, digits or '-' (a Kubernetes UID)";
const NAME_FORM: &str = "1 to 253 lowercase letters, digits, '-' or '.'";

fn valid_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= MAX_UID
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fn check(a: &ClaimAlloc) -> Result<(), ClaimError> {
    let bad = |what, value: &str, accepted| ClaimError::Invalid {
        what,
        value: value.chars().take(64).collect(),
        accepted,
    };
    if !valid_uid(&a.uid) {
        return Err(bad("uid", &a.uid, UID_FORM));
    }
    if !valid_name(&a.namespace) {
        return Err(bad("namespace", &a.namespace, NAME_FORM));
    }
    if !valid_name(&a.name) {
        return Err(bad("name", &a.name, NAME_FORM));
    }
    if a.bytes == 0 {
        return Err(bad("size", "0", "more than 0 bytes"));
    }
    Ok(())
}

/// The variable that binds a container to claim `uid`.
pub fn env_var(uid: &str) -> String {
    format!("{}{}", keys::ENV_CLAIM_PREFIX, uid.replace('-', "_"))
}

/// The claim's CDI device, fully qualified.
pub fn cdi_device_id(uid: &str) -> String {
    format!("{}={uid}", keys::DRA_CDI_KIND)
}

/// The claim's CDI spec file.
pub fn cdi_path(cfg: &Config, uid: &str) -> PathBuf {
    cfg.cdi_dir
        .join(format!("{}-claim-{uid}.json", keys::DRA_DRIVER))
}

/// The CDI spec of a prepared claim: one device, one variable.
pub fn cdi_spec(uid: &str, token: &str) -> Vec<u8> {
    let v = serde_json::json!({
        "cdiVersion": "0.6.0",
        "kind": keys::DRA_CDI_KIND,
        "devices": [{
            "name": uid,
            "containerEdits": {"env": [format!("{}={token}", env_var(uid))]}
        }]
    });
    let mut out = serde_json::to_vec_pretty(&v).expect("a Value serializes");
    out.push(b'\n');
    out
}

/// 256 random bits from the kernel (getrandom, else /dev/urandom), hex.
fn new_token() -> std::io::Result<String> {
    let mut buf = [0u8; TOKEN_BYTES];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled rest of buf.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOSYS) => {
                    use std::io::Read;
                    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf[filled..])?;
                    break;
                }
                _ => return Err(e),
            }
        }
        filled += n as usize;
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal without an early exit (the time taken does not say how much of a
/// guess was right).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn claim_of<'a>(r: &'a Reservation, uid: &str) -> Option<&'a ClaimEntry> {
    r.claim.as_ref().filter(|c| c.uid == uid)
}

fn label(c: &ClaimEntry) -> String {
    format!("{}/{} (uid {})", c.namespace, c.name, c.uid)
}

fn describe_alloc(gpu: &str, bytes: u64) -> String {
    format!("{} on {gpu}", human(bytes))
}

fn source(cause: &'static str) -> events::Source<'static> {
    events::Source {
        program: "gpu-quota-dra",
        engine: "dra",
        cause,
    }
}

/// What claims may take on each sliceable GPU of the inventory.
pub fn offers(cfg: &Config, costs: &ContextCosts) -> Result<Vec<Offer>, ClaimError> {
    let inv = Inventory::load(cfg)?;
    let ledger = Ledger::new(cfg);
    let data = ledger.read()?;
    let now = fsutil::now_unix();
    Ok(offers_of(cfg, costs, &inv, &data.reservations, &|r| {
        ledger.is_stale(r, now)
    }))
}

fn offers_of(
    cfg: &Config,
    costs: &ContextCosts,
    inv: &Inventory,
    held: &[Reservation],
    stale: &dyn Fn(&Reservation) -> bool,
) -> Vec<Offer> {
    let reserve = cfg.reserve_bytes().unwrap_or(0);
    inv.gpus
        .iter()
        .filter(|g| placement::is_sliceable(&cfg.gpus, g))
        .map(|g| {
            let others: u64 = held
                .iter()
                .filter(|r| !r.is_claim() && r.counts())
                .flat_map(|r| r.slices.iter().filter(|s| s.uuid == g.uuid))
                .map(|s| s.vram_bytes)
                .sum();
            // a dead container's share does not keep claims away (gc or
            // the next admission reclaims it)
            let shared = crate::ledger::live_shares_on(held, &g.uuid, stale)
                .next()
                .is_some();
            Offer {
                uuid: g.uuid.clone(),
                index: g.index,
                product: g.name.clone(),
                total_bytes: g.total_bytes,
                offer_bytes: if shared {
                    0
                } else {
                    placement::usable(g, reserve).saturating_sub(others)
                },
                min_bytes: smallest_useful(cfg, costs, g),
            }
        })
        .collect()
}

/// Write the claim's CDI spec: the directory made 0755 when missing (and
/// checked as every host directory of gpu-quota), the file replaced
/// atomically, 0600.
fn write_cdi(cfg: &Config, uid: &str, token: &str) -> Result<(), ClaimError> {
    fsutil::secure_dir(&cfg.cdi_dir, 0o755).map_err(|e| ClaimError::Io(cfg.cdi_dir.clone(), e))?;
    let p = cdi_path(cfg, uid);
    fsutil::write_atomic(&p, &cdi_spec(uid, token), 0o600).map_err(|e| ClaimError::Io(p, e))
}

fn remove_cdi(cfg: &Config, uid: &str) -> Result<(), ClaimError> {
    let p = cdi_path(cfg, uid);
    match std::fs::remove_file(&p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ClaimError::Io(p, e)),
        _ => Ok(()),
    }
}

/// Reserve the claim's bytes on its GPU, make its token and its CDI spec.
/// Idempotent for the same uid, GPU and bytes. Refused at once when the
/// bytes are not free ([`prepare_waiting`] waits for releases), or when
/// they cannot hold a CUDA context.
pub fn prepare(cfg: &Config, a: &ClaimAlloc) -> Result<Prepared, ClaimError> {
    prepare_waiting(cfg, a, &ContextCosts::default(), Duration::ZERO)
}

/// What a process's CUDA context is charged on GPU `g`, as a claim's
/// container will be charged it: the configured `context_overhead`, else
/// the cost measured on this host for that model (`costs`, from the
/// context-cost cache: `ctxcost::known_costs`), else the built-in default.
pub fn context_charge(cfg: &Config, costs: &ContextCosts, g: &Gpu) -> u64 {
    match cfg.context_overhead_setting() {
        Ok(Setting::Bytes(b)) => b,
        _ => costs
            .measured
            .get(&g.name)
            .copied()
            .unwrap_or(BUILTIN_DEFAULT_BYTES),
    }
}

/// The smallest claim worth granting on GPU `g`: its context charge and
/// one allocation above it (0 where no context is charged). A smaller
/// claim could not create a CUDA context in its container.
pub fn smallest_useful(cfg: &Config, costs: &ContextCosts, g: &Gpu) -> u64 {
    match context_charge(cfg, costs, g) {
        0 => 0,
        c => c.saturating_add(placement::MIN_USEFUL_ABOVE_CONTEXT),
    }
}

/// [`prepare`], and while the claim's bytes are held by others, try again
/// every 100 ms for at most `wait` (the driver: [`RELEASE_WAIT`]), each
/// try under the ledger's lock. The refusal names what holds the GPU and
/// how long it waited.
pub fn prepare_waiting(
    cfg: &Config,
    a: &ClaimAlloc,
    costs: &ContextCosts,
    wait: Duration,
) -> Result<Prepared, ClaimError> {
    let start = Instant::now();
    loop {
        match prepare_once(cfg, a, costs) {
            // a share that is ending (its container released a moment
            // ago) frees the GPU as a holder's release does
            Err(ClaimError::DoesNotFit { .. } | ClaimError::BesideShares { .. })
                if start.elapsed() + RELEASE_POLL <= wait =>
            {
                std::thread::sleep(RELEASE_POLL)
            }
            Err(ClaimError::DoesNotFit {
                asked,
                free,
                gpu,
                holders,
                ..
            }) => {
                return Err(ClaimError::DoesNotFit {
                    asked,
                    free,
                    gpu,
                    holders,
                    waited_ms: if wait.is_zero() {
                        0
                    } else {
                        start.elapsed().as_millis() as u64
                    },
                })
            }
            r => return r,
        }
    }
}

fn prepare_once(
    cfg: &Config,
    a: &ClaimAlloc,
    costs: &ContextCosts,
) -> Result<Prepared, ClaimError> {
    check(a)?;
    let inv = Inventory::load(cfg)?;
    let Some(g) = inv.gpus.iter().find(|g| {
        g.uuid.eq_ignore_ascii_case(&a.gpu_uuid) && placement::is_sliceable(&cfg.gpus, g)
    }) else {
        let known: Vec<String> = inv
            .gpus
            .iter()
            .filter(|g| placement::is_sliceable(&cfg.gpus, g))
            .map(|g| format!("{} ({})", g.index, g.uuid))
            .collect();
        return Err(ClaimError::UnknownGpu {
            gpu: a.gpu_uuid.chars().take(80).collect(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        });
    };
    let smallest = smallest_useful(cfg, costs, g);
    if a.bytes < smallest {
        return Err(ClaimError::TooSmallForContext {
            asked: a.bytes,
            gpu: g.index,
            charge: context_charge(cfg, costs, g),
            smallest,
        });
    }
    let capacity = placement::usable(g, cfg.reserve_bytes().unwrap_or(0));
    let prepared = Prepared {
        cdi_device_ids: vec![cdi_device_id(&a.uid)],
    };
    let ledger = Ledger::new(cfg);
    let added = ledger.transact(|d| {
        if let Some(r) = d
            .reservations
            .iter()
            .find(|r| claim_of(r, &a.uid).is_some())
        {
            let c = r.claim.as_ref().expect("found by its claim");
            let same = r.slices.len() == 1
                && r.slices[0].uuid == g.uuid
                && r.slices[0].vram_bytes == a.bytes
                && c.namespace == a.namespace
                && c.name == a.name;
            if !same {
                let held = r
                    .slices
                    .first()
                    .map(|s| describe_alloc(&s.uuid, s.vram_bytes))
                    .unwrap_or_default();
                return Ok((
                    Err(ClaimError::Conflict {
                        uid: a.uid.clone(),
                        held: format!("{}/{} {held}", c.namespace, c.name),
                        asked: format!(
                            "{}/{} {}",
                            a.namespace,
                            a.name,
                            describe_alloc(&g.uuid, a.bytes)
                        ),
                    }),
                    false,
                ));
            }
            // again (a kubelet retry, a reboot emptied the CDI directory)
            return Ok((write_cdi(cfg, &a.uid, &c.token).map(|()| None), false));
        }
        let now = fsutil::now_unix();
        let stale = |r: &Reservation| ledger.is_stale(r, now);
        let shares: Vec<&Slice> =
            crate::ledger::live_shares_on(&d.reservations, &g.uuid, &stale).collect();
        if !shares.is_empty() {
            return Ok((
                Err(ClaimError::BesideShares {
                    asked: a.bytes,
                    gpu: g.uuid.clone(),
                    used: shares.iter().map(|s| s.sm_percent).sum(),
                    holders: shares.len(),
                }),
                false,
            ));
        }
        let used = d.usage().get(&g.uuid).map_or(0, |u| u.bytes);
        let free = capacity.saturating_sub(used);
        if a.bytes > free {
            return Ok((
                Err(ClaimError::DoesNotFit {
                    asked: a.bytes,
                    free,
                    gpu: g.uuid.clone(),
                    holders: holders_of(&ledger, &d.reservations, &g.uuid, fsutil::now_unix()),
                    waited_ms: 0,
                }),
                false,
            ));
        }
        let token = match new_token() {
            Ok(t) => t,
            Err(e) => return Ok((Err(ClaimError::Io("getrandom".into(), e)), false)),
        };
        // in the critical section: a failed write leaves the ledger unchanged
        if let Err(e) = write_cdi(cfg, &a.uid, &token) {
            return Ok((Err(e), false));
        }
        let r = Reservation {
            created_unix: fsutil::now_unix(),
            claim: Some(ClaimEntry {
                uid: a.uid.clone(),
                namespace: a.namespace.clone(),
                name: a.name.clone(),
                token,
            }),
            ..Reservation::new(
                format!("claim:{}", a.uid),
                None,
                "",
                vec![Slice {
                    uuid: g.uuid.clone(),
                    index: g.index,
                    vram_bytes: a.bytes,
                    sm_percent: 0,
                    sm_user: None,
                    sm_procs: 0,
                }],
                format!("claim {}/{}", a.namespace, a.name),
            )
        };
        d.reservations.push(r.clone());
        Ok((Ok(Some(r)), true))
    })??;
    if let Some(r) = added {
        events::admitted(cfg, source("prepare"), &r);
    }
    Ok(prepared)
}

/// Remove the claim's CDI spec and its reservation. Idempotent: an unknown
/// uid is Ok. Refused while a live container is bound to the claim.
pub fn unprepare(cfg: &Config, uid: &str) -> Result<(), ClaimError> {
    if !valid_uid(uid) {
        return Ok(()); // never prepared: nothing of it exists
    }
    let ledger = Ledger::new(cfg);
    if !ledger.exists() {
        return remove_cdi(cfg, uid);
    }
    let gone = ledger.transact(|d| {
        let Some(i) = d
            .reservations
            .iter()
            .position(|r| claim_of(r, uid).is_some())
        else {
            return Ok((remove_cdi(cfg, uid).map(|()| None), false));
        };
        let now = fsutil::now_unix();
        if let Some(c) = d
            .reservations
            .iter()
            .find(|r| r.bound_claim.as_deref() == Some(uid) && !ledger.is_stale(r, now))
        {
            return Ok((
                Err(ClaimError::InUse {
                    uid: uid.into(),
                    container: c.container_id.clone(),
                }),
                false,
            ));
        }
        if let Err(e) = remove_cdi(cfg, uid) {
            return Ok((Err(e), false));
        }
        if !d
            .reservations
            .iter()
            .any(|r| r.bound_claim.as_deref() == Some(uid))
        {
            let _ = state::remove(&state::claim_dir(cfg, uid));
        }
        Ok((Ok(Some(d.reservations.remove(i))), true))
    })??;
    if let Some(r) = gone {
        events::released(cfg, source("unprepare"), &[r]);
    }
    Ok(())
}

/// The claims the ledger holds (for the driver's resync after a restart).
pub fn prepared(cfg: &Config) -> Result<Vec<ClaimAlloc>, ClaimError> {
    let data = Ledger::new(cfg).read()?;
    Ok(data
        .reservations
        .iter()
        .filter_map(|r| {
            let c = r.claim.as_ref()?;
            let s = r.slices.first()?;
            Some(ClaimAlloc {
                uid: c.uid.clone(),
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                gpu_uuid: s.uuid.clone(),
                bytes: s.vram_bytes,
            })
        })
        .collect())
}

// ------------------------------------------------------------------ binding

/// The claim variable a container's config.json presents.
#[derive(Clone, PartialEq, Eq)]
pub struct Presented {
    /// The variable's name (`GPU_QUOTA_CLAIM_<uid, - as _>`).
    pub var: String,
    token: String,
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presented")
            .field("var", &self.var)
            .finish_non_exhaustive()
    }
}

/// The claim variable in the OCI `process.env` of `config`, if any. Two
/// different ones (names or values) are refused. Linear in the
/// environment; names and values are capped.
pub fn presented(config: &Value) -> Result<Option<Presented>, ClaimError> {
    let Some(env) = config.pointer("/process/env").and_then(Value::as_array) else {
        return Ok(None);
    };
    let mut found: Option<Presented> = None;
    for v in env.iter().filter_map(Value::as_str) {
        if !v.starts_with(keys::ENV_CLAIM_PREFIX) {
            continue;
        }
        let (var, token) = v.split_once('=').unwrap_or((v, ""));
        let var: String = var
            .chars()
            .take(keys::ENV_CLAIM_PREFIX.len() + MAX_UID)
            .collect();
        let p = Presented {
            var,
            token: token.chars().take(4 * TOKEN_BYTES).collect(),
        };
        match &found {
            None => found = Some(p),
            Some(f) if *f == p => {}
            Some(f) => {
                return Err(ClaimError::TwoClaims {
                    first: f.var.clone(),
                    second: p.var,
                })
            }
        }
    }
    Ok(found)
}

/// Bind container `id` (runc root `root`, `bundle`) to the claim it
/// presents: under the ledger's lock, the token is compared in constant
/// time with the claim entry's. Containers already bound to the claim stay
/// bound (they share it); dead ones are reclaimed on the way (appended to
/// `reclaimed`, for the caller's release). The container's entry gets the
/// claim's slice and the claim's uid.
pub fn bind(
    cfg: &Config,
    p: &Presented,
    id: &str,
    root: &str,
    bundle: &str,
    reclaimed: &mut Vec<Reservation>,
) -> Result<Reservation, ClaimError> {
    let ledger = Ledger::new(cfg);
    let key = Key::Root {
        id,
        root: Some(root),
    };
    ledger.transact(|d| {
        let now = fsutil::now_unix();
        // any live one of this key (the partition below drops every match)
        if let Some(r) = d
            .reservations
            .iter()
            .find(|r| key.matches(r) && !ledger.is_stale(r, now))
        {
            return Err(LedgerError::Duplicate {
                id: id.into(),
                slices: crate::ledger::describe_slices(&r.slices),
            });
        }
        let Some(entry) = d
            .reservations
            .iter()
            .find(|r| r.claim.as_ref().is_some_and(|c| env_var(&c.uid) == p.var))
            .cloned()
        else {
            return Ok((Err(ClaimError::UnknownClaim { var: p.var.clone() }), false));
        };
        let c = entry.claim.as_ref().expect("found by its claim");
        if !ct_eq(c.token.as_bytes(), p.token.as_bytes()) {
            return Ok((
                Err(ClaimError::WrongToken {
                    var: p.var.clone(),
                    claim: label(c),
                }),
                false,
            ));
        }
        let dead_holder = |r: &Reservation| {
            r.bound_claim.as_deref() == Some(&c.uid) && !key.matches(r) && ledger.is_stale(r, now)
        };
        // dead holders of the claim and a dead entry of this container's key
        let (gone, keep): (Vec<_>, Vec<_>) = d
            .reservations
            .drain(..)
            .partition(|r| dead_holder(r) || key.matches(r));
        d.reservations = keep;
        reclaimed.extend(gone);
        let r = Reservation {
            created_unix: now,
            bound_claim: Some(c.uid.clone()),
            ..Reservation::new(
                id,
                Some(root),
                bundle,
                entry.slices.clone(),
                format!("claim {}/{}", c.namespace, c.name),
            )
            .admitted_now()
        };
        d.reservations.push(r.clone());
        Ok((Ok(r), true))
    })?
}

mod shared;
pub use shared::{consumer_gone, shared_usage, sweep_shared};

#[cfg(test)]
mod tests;
