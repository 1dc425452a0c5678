//! DRA claims: the node side of the `vram.gpu-quota.io` driver.
//!
//! * [`offers`]: what each GPU can give claims — what the placer would
//!   grant a claim there (`Placer::room_for`) beside every reservation that
//!   is *not* a claim's (docker/podman/ctr containers, device-plugin
//!   containers). Claims are not subtracted: the scheduler accounts for
//!   them itself (`consumedCapacity`).
//! * [`prepare`]: the kubelet prepared a claim. Under the ledger's lock its
//!   bytes are reserved on its GPU as a *claim entry* (not a container's),
//!   decided by the placer that decides a container's start
//!   (`placement::Placer::place`, the claim's [`ClaimAlloc::request`]):
//!   its refusals are the placer's, with the same message; a random
//!   256-bit token is stored in the entry (the ledger is 0600) and written,
//!   in the same critical section, into the claim's CDI spec (0600, atomic):
//!   one device `vram.gpu-quota.io/claim=<uid>` whose only edit is the
//!   variable `GPU_QUOTA_CLAIM_<uid, - as _>=<token>`. Idempotent for the
//!   same uid, GPU, bytes, share and limit (same token, the spec
//!   rewritten). A claim's burst limit (`ClaimAlloc::burst`, its
//!   `memoryLimit`) is placed as a container's `vram-limit=` and kept in
//!   its slice, so every container bound to it carries it too.
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
    events,
    inventory::InventoryError,
    ledger::{ClaimEntry, LedgerError, Reservation},
    placement::{ContextCosts, PlacementError},
    request::{BurstAsk, GpuRef, GpuSelector, Origin, Request},
    units::{human, Size},
};
use gpuquota_formats::{
    grant::{Burst, PRIORITY_MAX, SM_MAX},
    mps::PROCS_MAX,
};
use std::path::PathBuf;

/// What claims may take together on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub uuid: String,
    pub index: u32,
    pub product: String,
    pub total_bytes: u64,
    /// Usable bytes (`placement::usable`) minus every reservation not held
    /// by a claim; 0 while the GPU serves compute shares (a claim's
    /// containers run outside MPS: the placer refuses a slice without a
    /// share there, `PlacementError::UnsharedBesideShares`).
    pub offer_bytes: u64,
    /// The smallest claim worth granting here: one that can hold a CUDA
    /// context (`ContextCosts::smallest` of [`contexts`]).
    pub min_bytes: u64,
    /// What a claim *with* a compute share may take: the bytes
    /// (`offer_bytes`' rule for a share: 0 while containers outside
    /// Kubernetes hold the GPU without one) and the percentage of the
    /// GPU's SMs those containers' shares leave (`Placer::share_room`).
    pub share_bytes: u64,
    pub share_percent: u32,
}

/// A claim the scheduler allocated on this node: `bytes` on `gpu_uuid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAlloc {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub gpu_uuid: String,
    pub bytes: u64,
    /// The compute share the scheduler granted (`consumedCapacity`'s
    /// `compute`, a percentage of the GPU's SMs), held by all the claim's
    /// containers together; `None`: a claim without one, whose containers
    /// run outside MPS.
    pub sm: Option<u32>,
    /// With `sm`: the CUDA processes it is split over, across every
    /// container bound to the claim (the claim's opaque `smProcs`
    /// parameter, 1 when it names none); 0 without.
    pub sm_procs: u32,
    /// A burst limit above `bytes` (the claim's opaque `memoryLimit`, the
    /// most all its containers together may hold, guarantee included) and
    /// its priority (the class's `burstPriority`, 0 when it names none);
    /// `None`: a guaranteed claim. A limit equal to `bytes` lends nothing:
    /// the claim is guaranteed (the placer leaves the slice's burst out).
    /// Never with `sm`: refused at prepare.
    pub burst: Option<Burst>,
}

impl ClaimAlloc {
    /// What the claim asks of the placer: its bytes, share and burst on its
    /// GPU. The placer checks the limit as a container's `vram-limit=`: at
    /// least the bytes, at most what the GPU can ever give.
    pub fn request(&self) -> Request {
        let mut r = request(
            Origin::Claim {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            },
            &self.gpu_uuid,
            self.bytes,
            self.sm.map(|p| (p, self.sm_procs)),
        );
        r.burst = self.burst.map(|b| BurstAsk {
            limit: Size::Bytes(b.limit_bytes),
            priority: b.priority,
            origin: Origin::ClaimParam {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                key: MEMORY_LIMIT,
            },
        });
        r
    }

    /// The burst its slice records once placed: none where the limit lends
    /// nothing (as the placer decides).
    fn lent(&self) -> Option<Burst> {
        self.burst.filter(|b| b.limit_bytes != self.bytes)
    }
}

/// The claim's opaque parameter that asks for a burst limit.
const MEMORY_LIMIT: &str = "memoryLimit";

/// The one place a claim's request is made, for its prepare and for the
/// offers: `bytes` and the share `(percent, processes)`, if any, on the
/// one GPU `gpu_uuid` the allocation names. Its user is not known before
/// a container binds to it (`bind` checks each container's as admission
/// checks a container's).
fn request(origin: Origin, gpu_uuid: &str, bytes: u64, share: Option<(u32, u32)>) -> Request {
    Request {
        vram: Size::Bytes(bytes),
        gpus: GpuSelector::List(vec![GpuRef::Uuid(gpu_uuid.to_string())]),
        origin,
        named_gpus: true,
        sm: share.map(|(p, _)| p),
        sm_procs: share.map_or(0, |(_, n)| n.max(1)),
        user: None,
        burst: None,
    }
}

/// What a CUDA context costs a claim's containers, for the placer: the
/// configured `context_overhead`, else the cost measured on this host for
/// the GPU's model (`costs`, from the context-cost cache:
/// `ctxcost::known_costs`), else the built-in default — a claim's offer
/// names its smallest size before any container of it has run.
pub fn contexts(cfg: &Config, costs: &ContextCosts) -> ContextCosts {
    ContextCosts {
        configured: match cfg.context_overhead_setting() {
            Ok(Setting::Bytes(b)) => Some(b),
            _ => None,
        },
        measured: costs.measured.clone(),
        unmeasured: Some(BUILTIN_DEFAULT_BYTES),
    }
}

/// What the kubelet hands the container runtime for a prepared claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Fully qualified CDI device names, e.g. `vram.gpu-quota.io/claim=<uid>`.
    pub cdi_device_ids: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The placer refused the claim, as it refuses a container asking the
    /// same on that GPU; what a claim knows more follows the message.
    #[error("{err}{}", after(holders.as_deref(), *waited_ms))]
    Refused {
        err: Box<PlacementError>,
        /// What holds the GPU where the bytes do not fit (`holders_of`).
        holders: Option<String>,
        /// How long the prepare waited for holders to release.
        waited_ms: u64,
    },
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
    #[error("claim {claim} asks for memoryLimit={limit} beside a compute share of {sm}% of the SMs; a compute share is a reservation served through MPS, and memory lent under MPS is not measured: allocate the GPU's plain device (no compute capacity) for a burstable claim, or leave memoryLimit out for a share")]
    BurstWithShare {
        claim: String,
        limit: String,
        sm: u32,
    },
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
        ClaimError::Refused { err, .. } => events::placement_reason(err),
        ClaimError::Invalid { .. } | ClaimError::BurstWithShare { .. } => "invalid_request",
        _ => "claim",
    }
}

/// What a claim's refusal says after the placer's message: who holds the
/// GPU, how long the prepare waited, and that the kubelet retries.
fn after(holders: Option<&str>, waited_ms: u64) -> String {
    let mut out = String::new();
    if let Some(h) = holders {
        out += &format!(". On this node the GPU is held by {h}");
    }
    if waited_ms > 0 {
        out += &format!(
            ". Refused after waiting {:.1} s for earlier holders to release",
            waited_ms as f64 / 1000.0
        );
    }
    if !out.is_empty() {
        out += ". The kubelet retries the prepare, and it succeeds once enough is released";
    }
    out
}

/// Longest uid, namespace or name accepted (Kubernetes: a UUID; names are
/// DNS subdomains of at most 253 characters).
const MAX_NAME: usize = 253;
const MAX_UID: usize = 128;
/// The token: 256 bits, hex.
const TOKEN_BYTES: usize = 32;

const UID_FORM: &str = "1 to 128 ASCII letters, digits or '-' (a Kubernetes UID)";
const NAME_FORM: &str = "1 to 253 lowercase letters, digits, '-' or '.'";
const SM_PROCS_FORM: &str =
    "with a compute share, 1 to 64 and at most its percentage (each process gets at least 1 %); none without";
const GPU_FORM: &str = "1 to 128 printable ASCII characters (a GPU's UUID, GPU-…)";

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
    if a.gpu_uuid.is_empty()
        || a.gpu_uuid.len() > MAX_UID
        || !a.gpu_uuid.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(bad("GPU", &a.gpu_uuid, GPU_FORM));
    }
    if a.bytes == 0 {
        return Err(bad("size", "0", "more than 0 bytes"));
    }
    match a.sm {
        None if a.sm_procs != 0 => {
            return Err(bad("smProcs", &a.sm_procs.to_string(), SM_PROCS_FORM))
        }
        None => {}
        Some(p) if p == 0 || p > SM_MAX => {
            return Err(bad(
                "compute",
                &p.to_string(),
                "1 to 100 (percent of the GPU's SMs)",
            ))
        }
        Some(p) if a.sm_procs == 0 || a.sm_procs > PROCS_MAX || a.sm_procs > p => {
            return Err(bad("smProcs", &a.sm_procs.to_string(), SM_PROCS_FORM))
        }
        Some(_) => {}
    }
    if let Some(b) = a.burst {
        if let Some(sm) = a.sm {
            // even a limit that lends nothing: as a container's sm= beside
            // vram-limit=, the two are not asked together
            return Err(ClaimError::BurstWithShare {
                claim: format!("{}/{}", a.namespace, a.name),
                limit: human(b.limit_bytes),
                sm,
            });
        }
        if b.priority > PRIORITY_MAX {
            return Err(bad(
                "burstPriority",
                &b.priority.to_string(),
                "0 to 1000 (who gives lent memory back first: the lowest)",
            ));
        }
    }
    Ok(())
}

fn claim_of<'a>(r: &'a Reservation, uid: &str) -> Option<&'a ClaimEntry> {
    r.claim.as_ref().filter(|c| c.uid == uid)
}

fn label(c: &ClaimEntry) -> String {
    format!("{}/{} (uid {})", c.namespace, c.name, c.uid)
}

fn describe_alloc(gpu: &str, bytes: u64, sm: u32, burst: Option<Burst>) -> String {
    let limit = burst.map_or(String::new(), |b| {
        format!(" (limit {}, priority {})", human(b.limit_bytes), b.priority)
    });
    match sm {
        0 => format!("{}{limit} on {gpu}", human(bytes)),
        p => format!("{}{limit} and {p}% of the SMs on {gpu}", human(bytes)),
    }
}

fn source(cause: &'static str) -> events::Source<'static> {
    events::Source {
        program: "gpu-quota-dra",
        engine: "dra",
        cause,
    }
}

mod bind;
mod cdi;
mod offers;
mod prepare;
pub use bind::{bind, presented, Presented};
pub use cdi::{cdi_device_id, cdi_path, cdi_spec, env_var};
pub use offers::offers;
pub use prepare::{prepare, prepare_waiting, prepared, unprepare, RELEASE_WAIT};
mod shared;
pub use shared::{consumer_gone, shared_usage, sweep_shared};

#[cfg(test)]
mod tests;
