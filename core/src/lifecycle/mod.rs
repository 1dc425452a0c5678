//! One lifecycle for a container with a slice: **prepare → enter →
//! release**. gpu-quota-runtime (shim/), gpu-quota-hook (hook/) and the
//! operator CLI (install/) are argument adapters over these phases, the way
//! youki's binary sits over libcontainer: they read their command line and
//! call one function per phase.
//!
//! * **prepare** ([`prepare`], the runtime's `create`/`run`, before runc):
//!   the bundle's config.json is loaded once ([`Bundle`]) and the outcome is
//!   one of: pass through untouched (no request, no claim); admitted — the
//!   request placed in the ledger, or the container bound to the prepared
//!   DRA claim it presents (`GPU_QUOTA_CLAIM_<uid>=<token>`), the
//!   spec edited by one list of modifiers (`spec::Modifier`), the state
//!   directory (its own tmpfs) made before runc clones the mount namespace,
//!   the bundle flushed once; or refused, with the refusal recorded
//!   (`core::events`) wherever the host config could be read.
//! * **enter** ([`enter`], the hook's createRuntime, after runc made the
//!   namespaces): the reservation made at prepare is confirmed with the
//!   container's pid (never a second reading of the request), the state
//!   directory filled (the context charge measured by the
//!   `measure-context` child where needed, the r615 driver limit set by the
//!   `driver-limits` child), and the mount plan carried out inside the
//!   container's mount namespace. Its effects are behind [`EnterEffects`].
//! * **release** ([`end`] for one container; [`release`] for reservations
//!   already taken out of the ledger, which `gc`, `gpu-quota release` and
//!   a reclaim during admission call): every path that ends a container —
//!   the hook's poststop, a failed setup or runc, the end of a foreground
//!   `run`, the runtime's `delete` — goes through it: the driver limit
//!   cleared, the state directory removed, the event recorded once.
//!   runc removes the cgroup before it runs poststop hooks, so the
//!   runtime's `delete` also clears the driver limit *before* runc
//!   ([`before_runc_delete`]).
//!
//! * **update** ([`update`], `gpu-quota resize`): a running container's
//!   grant changes (see that module).
use crate::{claims::ClaimError, devices, events, ledger::LedgerError};
use std::path::PathBuf;

mod admit;
mod bundle;
mod enter;
/// What a container holds on a GPU, for a shrink (`update`).
pub mod held;
mod prepare;
mod release;
/// The update phase (a running container's grant changes).
pub mod update;

pub use bundle::Bundle;
pub use enter::{enter, EnterEffects, Entered, Entry, HostEnter};
pub use prepare::{prepare, Create, Prepared};
pub use release::{before_runc_delete, end, release, Effects, Ending, Exit, HostEffects};

/// runc's default state root (for root): the runc root of a command line
/// without `--root`.
pub const DEFAULT_RUNC_ROOT: &str = "/run/runc";

/// The container a binary acts on, as its command line names it: the id
/// and the runc root are the reservation's key (with the bundle for the
/// hook); `program` is who records the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Container<'a> {
    pub id: &'a str,
    /// runc's `--root` (the hook's `--root` argument); `None`: runc's
    /// default, [`DEFAULT_RUNC_ROOT`].
    pub root: Option<&'a str>,
    /// "gpu-quota-runtime", "gpu-quota-hook".
    pub program: &'a str,
}

impl<'a> Container<'a> {
    /// The runc root the container lives under.
    pub fn runc_root(&self) -> &'a str {
        self.root.unwrap_or(DEFAULT_RUNC_ROOT)
    }

    /// Who records an event with `cause`: this program, for the engine
    /// behind the runc root.
    pub fn source(&self, cause: &'a str) -> events::Source<'a> {
        events::Source {
            program: self.program,
            engine: events::engine_of(Some(self.runc_root())),
            cause,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path} is not valid JSON to gpu-quota ({err}) and seems to request GPU memory, or runc may read it all the same; refusing")]
    RequestInInvalidJson {
        path: PathBuf,
        err: serde_json::Error,
    },
    #[error("{path} is not valid JSON: {err}")]
    Json {
        path: PathBuf,
        err: serde_json::Error,
    },
    /// Keys runc's decoder reads otherwise than gpu-quota
    /// (`spec::decode`): refused, whatever the spec asks.
    #[error("{path}: {message}")]
    SpecKeys { path: PathBuf, message: String },
    #[error("{path}: {err}")]
    Edit {
        path: PathBuf,
        err: crate::spec::EditError,
    },
    #[error("writing {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },
    #[error("preparing {path}: {err}")]
    State { path: PathBuf, err: std::io::Error },
    #[error("gpu-quota-hook not found next to gpu-quota-runtime; set `hook` in {0}")]
    NoHook(PathBuf),
    #[error("libgpuquota.so not found (looked in ../lib/gpu-quota/ and next to gpu-quota-hook); set `interceptor` in {0}")]
    NoInterceptor(PathBuf),
    #[error("runc's command line names no container id")]
    NoId,
    #[error(
        "the OCI state has no pid; gpu-quota-hook must run as a createRuntime or prestart hook"
    )]
    NoPid,
    #[error("container {id} was given GPU devices by gpu-quota-runtime, but this hook's entry in {config} has no `{} RUNC_ROOT`, so its reservation cannot be told from another container's with the same id under another runc root: none was confirmed and nothing was mounted. Create the container through this version of gpu-quota-runtime", crate::spec::HOOK_ROOT_ARG)]
    NoHookKey { id: String, config: PathBuf },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Inventory(#[from] crate::inventory::InventoryError),
    #[error(transparent)]
    Request(#[from] crate::request::RequestError),
    #[error(transparent)]
    Devices(#[from] devices::DeviceError),
    #[error(transparent)]
    Driver(#[from] crate::driver::DriverError),
    #[error(transparent)]
    ContextCost(#[from] crate::ctxcost::CtxCostError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Mps(#[from] crate::mps::MpsError),
    #[error(transparent)]
    MountConflict(#[from] crate::mountplan::MountConflict),
    #[error("entering {path}: {err}")]
    EnterNamespace { path: PathBuf, err: std::io::Error },
    #[error("setting up container {id} (rootfs {rootfs}): {err}")]
    Mount {
        id: String,
        rootfs: PathBuf,
        err: crate::mountplan::EffectError,
    },
    #[error("container id {0:?} has characters gpu-quota does not accept")]
    BadId(String),
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error(transparent)]
    Engine(#[from] crate::toolkit::ToolkitError),
}
