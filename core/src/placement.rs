//! Placement: which GPU(s) a request gets, given what the ledger already
//! handed out. Pure: no I/O, so every policy decision is unit-tested.
use crate::config::{Config, Policy};
use crate::inventory::{describe, Gpu, Inventory};
use crate::request::{GpuRef, GpuSelector, Request};
use crate::units::human;
use std::collections::BTreeMap;

/// One GPU's share of a reservation: the grant, the one type every layer
/// from here to the interceptor uses (`formats::grant`), naming its GPU by
/// NVML's text UUID on the host.
pub type Slice = GpuGrant<String>;
use gpuquota_formats::grant::Burst;
pub use gpuquota_formats::grant::GpuGrant;

/// Why a request cannot be placed; every message says what was asked, what
/// is free, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("this host has no GPU that gpu-quota may slice (inventory empty or every GPU excluded by `gpus` in the config); run `gpu-quota doctor`")]
    NoGpus,
    #[error("{origin} names GPU {gpu}, which this host does not have; GPUs here: {known}")]
    UnknownGpu {
        origin: String,
        gpu: String,
        known: String,
    },
    #[error(
        "{origin} names GPU {gpu}, which the config excludes from slicing; sliceable GPUs: {known}"
    )]
    NotSliceable {
        origin: String,
        gpu: String,
        known: String,
    },
    #[error("{origin} names {gpu} more than once")]
    Duplicate { origin: String, gpu: String },
    #[error("the request asks for {count} GPUs but only {available} may be sliced here")]
    NotEnoughGpus { count: u32, available: usize },
    #[error("requested {requested} per GPU, which is larger than {gpu} can ever give ({capacity} = {total} total − {reserve} reserve); ask for at most {capacity}")]
    TooLarge {
        requested: String,
        gpu: String,
        capacity: String,
        total: String,
        reserve: String,
    },
    #[error("requested {requested} on {gpu}, but only {free} of its {capacity} are free ({used} held by {holders} other slice(s)); free elsewhere: {elsewhere}. Ask for less, choose another GPU, or wait until a slice is released (see `gpu-quota ls`)")]
    DoesNotFit {
        requested: String,
        gpu: String,
        free: String,
        capacity: String,
        used: String,
        holders: usize,
        elsewhere: String,
    },
    #[error("requested {requested} on {gpu}, which cannot hold a CUDA context: every process is charged {charge} for its context on this GPU ({how}), so no CUDA program could run in it. The smallest useful slice on this GPU is {smallest}; ask for at least that (e.g. vram={suggest})")]
    TooSmallForContext {
        requested: String,
        gpu: String,
        charge: String,
        how: &'static str,
        smallest: String,
        suggest: String,
    },
    #[error("requested {requested} on {count} GPU(s), but no {count} GPU(s) have that much free; free now: {free}. Ask for less or wait until a slice is released (see `gpu-quota ls`)")]
    NoFit {
        requested: String,
        count: u32,
        free: String,
    },
    #[error("{origin}={limit} is below the guarantee of {guarantee} on {gpu}; a limit is the most the container may hold, guarantee included: ask for at least the guarantee")]
    LimitBelowGuarantee {
        origin: String,
        limit: String,
        guarantee: String,
        gpu: String,
    },
    #[error("{origin} asks for a compute share of {count} GPUs; a share is of one GPU's SMs (served by that GPU's MPS daemon, and a process joins one). Ask for one GPU with sm=, or leave sm out")]
    ShareNeedsOneGpu { origin: String, count: usize },
    #[error("requested sm={requested}% of {gpu}, but only {free}% of its compute is unreserved ({used}% held by {holders} slice(s) with a share); unreserved elsewhere: {elsewhere}. Ask for less, choose another GPU, or wait until a share is released (see `gpu-quota ls`)")]
    ShareDoesNotFit {
        requested: u32,
        gpu: String,
        free: u32,
        used: u32,
        holders: usize,
        elsewhere: String,
    },
    #[error("{origin} asks for a compute share, but its spec does not say which host user its process runs as (it joins a user namespace, or no uid mapping holds its uid), and a share is served only to a process that cannot become host root. Run it without sm=, or with its user namespace's mappings in the spec")]
    ShareUserUnknown { origin: String },
    #[error("{origin} asks for a compute share for a process that runs as, or can become, host root (uid 0): MPS takes commands from host root on the client socket that change every client's percentage and end other containers' clients, so shares are served to other host users only. Run the container as another user (e.g. --user 1000, or runAsUser in a pod) or in a user namespace of its own that maps no uid to host root (Docker userns-remap, podman --uidmap), or leave sm out; an operator whose tenants all trust each other can set mps_root_shares = true")]
    ShareAsHostRoot { origin: String },
    #[error("requested sm={requested}% of {gpu}, which runs {unshared} sliced container(s) without a compute share: outside MPS they time-slice against every share there, so no share could be kept. Choose another GPU or wait until they end (see `gpu-quota ls`)")]
    ShareBesideUnshared {
        requested: u32,
        gpu: String,
        unshared: usize,
    },
    #[error("requested {requested} on {gpu} without a compute share, but {used}% of its compute is reserved by {holders} container(s) with sm=: outside MPS this container would time-slice against them. Ask for a share too (sm=…, {free}% is unreserved), choose another GPU, or wait until the shares end (see `gpu-quota ls`)")]
    UnsharedBesideShares {
        requested: String,
        gpu: String,
        used: u32,
        holders: usize,
        free: u32,
    },
}

/// What is already held on one GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuUse {
    /// Bytes of the slices that count.
    pub bytes: u64,
    /// Slices that count (containers and claims).
    pub holders: usize,
    /// Compute shares, in percent of the GPU's SMs.
    pub sm: u32,
    /// Holders with a share.
    pub shared: usize,
    /// Holders whose container has ended but is not reclaimed yet
    /// ([`GpuUse::add_idle`]): their bytes count, their compute does not.
    pub idle: usize,
}

impl GpuUse {
    /// Count `s` in.
    pub fn add(&mut self, s: &Slice) {
        self.bytes += s.vram_bytes;
        self.holders += 1;
        if s.sm_percent > 0 {
            self.sm += s.sm_percent;
            self.shared += 1;
        }
    }
    /// Count in `s` of a container that has ended but is not reclaimed
    /// yet: its bytes stay held, but no process of it runs on the GPU, so
    /// it neither holds a share nor time-slices against one.
    pub fn add_idle(&mut self, s: &Slice) {
        self.bytes += s.vram_bytes;
        self.holders += 1;
        self.idle += 1;
    }
    /// Leave `s` out again.
    pub fn remove(&mut self, s: &Slice) {
        self.bytes = self.bytes.saturating_sub(s.vram_bytes);
        self.holders = self.holders.saturating_sub(1);
        if s.sm_percent > 0 {
            self.sm = self.sm.saturating_sub(s.sm_percent);
            self.shared = self.shared.saturating_sub(1);
        }
    }
    /// Holders without a share whose containers run: outside MPS,
    /// time-sliced.
    pub fn unshared(&self) -> usize {
        self.holders
            .saturating_sub(self.shared)
            .saturating_sub(self.idle)
    }
}

/// What is already held on each GPU (by uuid).
pub type Usage = BTreeMap<String, GpuUse>;

/// What a CUDA context is known to cost on this host, per GPU model: the
/// config's `context_overhead` when it is a size, else what the hook
/// measured here (`context-cost.json`), else `unmeasured`. Every process
/// in a slice is charged that much before its first allocation, so a slice
/// smaller than the charge and one allocation ([`ContextCosts::smallest`])
/// can run no CUDA code: placement refuses it with the figures. Unknown:
/// no check here; for a container the interceptor names the quota at its
/// first CUDA call instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextCosts {
    pub configured: Option<u64>,
    /// GPU model name → measured charge.
    pub measured: BTreeMap<String, u64>,
    /// The charge where nothing is configured or measured: `None` for a
    /// container (its hook measures at its start), the built-in default
    /// for a DRA claim (its offer names a smallest size before any
    /// container of it has run).
    pub unmeasured: Option<u64>,
}

/// The smallest slice worth granting above a context: one allocation of the
/// driver's 2 MiB granularity.
pub const MIN_USEFUL_ABOVE_CONTEXT: u64 = 2 << 20;

impl ContextCosts {
    /// The charge on GPU `g` and where it comes from, when known.
    pub fn of(&self, g: &Gpu) -> Option<(u64, &'static str)> {
        match self.configured {
            Some(0) => None,
            Some(b) => Some((b, "the config's context_overhead")),
            None => match self.measured.get(&g.name) {
                Some(b) => Some((*b, "measured on this host")),
                None => self.unmeasured.map(|b| {
                    (
                        b,
                        "gpu-quota's built-in default: not measured on this host yet",
                    )
                }),
            },
        }
    }

    /// The smallest slice worth granting on `g`: the charge and one
    /// allocation above it; 0 where no charge is known.
    pub fn smallest(&self, g: &Gpu) -> u64 {
        self.of(g)
            .map_or(0, |(c, _)| c.saturating_add(MIN_USEFUL_ABOVE_CONTEXT))
    }
}

/// What GPU `g` can ever give slices: its memory less the configured
/// reserve. Every reader of a GPU's capacity (placement, DRA offers and
/// claims, the device plugin's units, `ls`, `metrics`, `top`) asks here.
pub fn usable(g: &Gpu, reserve: u64) -> u64 {
    g.total_bytes.saturating_sub(reserve)
}

pub struct Placer<'a> {
    pub inventory: &'a Inventory,
    pub policy: Policy,
    pub reserve: u64,
    /// GPUs that may be sliced (indices or UUIDs); empty = all.
    pub sliceable: &'a [String],
    /// What a context costs here, where known.
    pub contexts: &'a ContextCosts,
}

/// Whether `g` may be sliced under the config's `gpus` list (indices or
/// UUIDs; empty = all).
pub fn is_sliceable(sliceable: &[String], g: &Gpu) -> bool {
    sliceable.is_empty()
        || sliceable
            .iter()
            .any(|s| s.trim() == g.index.to_string() || s.trim().eq_ignore_ascii_case(&g.uuid))
}

impl<'a> Placer<'a> {
    /// The placer of this host's config: its policy, reserve and sliceable
    /// GPUs, with what a context costs (`contexts`).
    pub fn new(cfg: &'a Config, inventory: &'a Inventory, contexts: &'a ContextCosts) -> Self {
        Placer {
            inventory,
            policy: cfg.placement,
            reserve: cfg.reserve_bytes().unwrap_or(0),
            sliceable: &cfg.gpus,
            contexts,
        }
    }
}

impl Placer<'_> {
    fn is_sliceable(&self, g: &Gpu) -> bool {
        is_sliceable(self.sliceable, g)
    }

    fn capacity(&self, g: &Gpu) -> u64 {
        usable(g, self.reserve)
    }

    /// What of `g`'s capacity `usage` leaves free.
    pub fn free_on(&self, g: &Gpu, usage: &Usage) -> u64 {
        self.capacity(g)
            .saturating_sub(usage.get(&g.uuid).map(|u| u.bytes).unwrap_or(0))
    }

    /// The most that a request like `req` (its compute share and origin;
    /// its size aside) would be granted on `g` beside `usage`: what is
    /// free there, or 0 where the GPU's compute refuses it (the rule
    /// [`Placer::place`] applies). What a DRA offer publishes.
    pub fn room_for(&self, req: &Request, g: &Gpu, usage: &Usage) -> u64 {
        if self.compute_refusal(req, g, usage).is_some() {
            0
        } else {
            self.free_on(g, usage)
        }
    }

    /// The most compute a share could be granted on `g` beside `usage`:
    /// what the shares there leave, 0 where a holder runs outside MPS (the
    /// rule [`Placer::compute_refusal`] applies). What a DRA offer
    /// publishes as the GPU's `compute`.
    pub fn share_room(&self, g: &Gpu, usage: &Usage) -> u32 {
        let u = usage.get(&g.uuid).copied().unwrap_or_default();
        if u.unshared() > 0 {
            0
        } else {
            crate::formats::grant::SM_MAX.saturating_sub(u.sm)
        }
    }

    /// Why a share may not be served to `user` (the host uid its process
    /// runs as; `None` where its spec cannot say): MPS takes commands that
    /// steer every client from host root on the client socket, so a share
    /// is for a known user that is not root, unless the operator allows
    /// root's shares (`mps_root_shares`). A container's admission and a
    /// claim's binding of each of its containers ask this.
    pub fn share_user_refusal(
        user: Option<u32>,
        root_shares: bool,
        origin: impl FnOnce() -> String,
    ) -> Option<PlacementError> {
        match user {
            None => Some(PlacementError::ShareUserUnknown { origin: origin() }),
            Some(0) if !root_shares => Some(PlacementError::ShareAsHostRoot { origin: origin() }),
            Some(_) => None,
        }
    }

    /// Why `g`'s compute cannot take `req` as it is held now: a share
    /// needs room among the shares and no holder outside MPS beside it; a
    /// slice without a share needs no share beside it (measured on the
    /// H200: a process outside MPS and an MPS client time-slice, 302 of
    /// 447 TFLOPS left to a 50 % client). The device plugin asks it too,
    /// for the container its units would start.
    pub fn compute_refusal(&self, req: &Request, g: &Gpu, usage: &Usage) -> Option<PlacementError> {
        let u = usage.get(&g.uuid).copied().unwrap_or_default();
        let free = crate::formats::grant::SM_MAX.saturating_sub(u.sm);
        match req.sm {
            Some(p) if u.unshared() > 0 => Some(PlacementError::ShareBesideUnshared {
                requested: p,
                gpu: describe(g),
                unshared: u.unshared(),
            }),
            Some(p) if p > free => Some(PlacementError::ShareDoesNotFit {
                requested: p,
                gpu: describe(g),
                free,
                used: u.sm,
                holders: u.shared,
                elsewhere: self.share_list(usage, &g.uuid),
            }),
            None if u.shared > 0 => Some(PlacementError::UnsharedBesideShares {
                requested: format!(
                    "{} ({})",
                    human(req.vram.resolve(g.total_bytes)),
                    req.origin
                ),
                gpu: describe(g),
                used: u.sm,
                holders: u.shared,
                free,
            }),
            _ => None,
        }
    }

    fn share_list(&self, usage: &Usage, except: &str) -> String {
        let v: Vec<String> = self
            .inventory
            .gpus
            .iter()
            .filter(|g| self.is_sliceable(g) && g.uuid != except)
            .map(|g| {
                let u = usage.get(&g.uuid).copied().unwrap_or_default();
                if u.unshared() > 0 {
                    format!("GPU {}: none (runs slices without a share)", g.index)
                } else {
                    format!(
                        "GPU {}: {}%",
                        g.index,
                        crate::formats::grant::SM_MAX.saturating_sub(u.sm)
                    )
                }
            })
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    fn free_list(&self, usage: &Usage, except: Option<&str>) -> String {
        let v: Vec<String> = self
            .inventory
            .gpus
            .iter()
            .filter(|g| self.is_sliceable(g) && Some(g.uuid.as_str()) != except)
            .map(|g| format!("GPU {}: {}", g.index, human(self.free_on(g, usage))))
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    fn known(&self, only_sliceable: bool) -> String {
        let v: Vec<String> = self
            .inventory
            .gpus
            .iter()
            .filter(|g| !only_sliceable || self.is_sliceable(g))
            .map(|g| format!("{} ({})", g.index, g.uuid))
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    fn too_large(&self, req: &Request, g: &Gpu, bytes: u64) -> PlacementError {
        PlacementError::TooLarge {
            requested: format!("{} ({})", human(bytes), req.origin),
            gpu: describe(g),
            capacity: human(self.capacity(g)),
            total: human(g.total_bytes),
            reserve: human(self.reserve),
        }
    }

    /// Choose GPUs for `req` given `usage`. (The error carries the whole
    /// message for the user; it is built only on the cold refusal path.)
    #[allow(clippy::result_large_err)]
    pub fn place(&self, req: &Request, usage: &Usage) -> Result<Vec<Slice>, PlacementError> {
        let origin = req.origin.to_string();
        let candidates: Vec<&Gpu> = self
            .inventory
            .gpus
            .iter()
            .filter(|g| self.is_sliceable(g))
            .collect();
        if candidates.is_empty() {
            return Err(PlacementError::NoGpus);
        }
        if req.sm.is_some() {
            let count = match &req.gpus {
                GpuSelector::Count(n) => *n as usize,
                GpuSelector::List(l) => l.len(),
                GpuSelector::All => candidates.len(),
            };
            if count != 1 {
                return Err(PlacementError::ShareNeedsOneGpu { origin, count });
            }
        }
        let slice = |g: &Gpu| Slice {
            uuid: g.uuid.clone(),
            index: g.index,
            vram_bytes: req.vram.resolve(g.total_bytes),
            sm_percent: req.sm.unwrap_or(0),
            sm_user: req.sm.and(req.user),
            // a request built without a count is of one process
            sm_procs: req.sm.map_or(0, |_| req.sm_procs.max(1)),
            burst: req.burst.as_ref().and_then(|b| {
                let limit_bytes = b.limit.resolve(g.total_bytes);
                // a limit that lends nothing is a guaranteed slice; one below
                // the guarantee is refused below, per GPU
                (limit_bytes != req.vram.resolve(g.total_bytes)).then_some(Burst {
                    limit_bytes,
                    priority: b.priority,
                })
            }),
        };
        let chosen: Vec<&Gpu> = match &req.gpus {
            GpuSelector::List(refs) => {
                let mut out: Vec<&Gpu> = Vec::new();
                for r in refs {
                    let g = match r {
                        GpuRef::Index(i) => self.inventory.find_index(*i),
                        GpuRef::Uuid(u) => self.inventory.find_uuid(u),
                    };
                    let Some(g) = g else {
                        return Err(PlacementError::UnknownGpu {
                            origin: origin.clone(),
                            gpu: r.to_string(),
                            known: self.known(false),
                        });
                    };
                    if !self.is_sliceable(g) {
                        return Err(PlacementError::NotSliceable {
                            origin: origin.clone(),
                            gpu: r.to_string(),
                            known: self.known(true),
                        });
                    }
                    if out.iter().any(|o| o.uuid == g.uuid) {
                        return Err(PlacementError::Duplicate {
                            origin: origin.clone(),
                            gpu: describe(g),
                        });
                    }
                    out.push(g);
                }
                out
            }
            GpuSelector::All => candidates.clone(),
            GpuSelector::Count(n) => {
                let n = *n as usize;
                if n > candidates.len() {
                    return Err(PlacementError::NotEnoughGpus {
                        count: n as u32,
                        available: candidates.len(),
                    });
                }
                let bytes_fit: Vec<&Gpu> = candidates
                    .iter()
                    .copied()
                    .filter(|g| slice(g).vram_bytes <= self.free_on(g, usage))
                    .collect();
                let mut fit: Vec<&Gpu> = bytes_fit
                    .iter()
                    .copied()
                    .filter(|g| self.compute_refusal(req, g, usage).is_none())
                    .collect();
                if fit.len() < n && bytes_fit.len() >= n {
                    // the bytes would fit: say why the compute does not
                    let g = bytes_fit
                        .iter()
                        .find(|g| self.compute_refusal(req, g, usage).is_some())
                        .expect("a GPU the compute refused");
                    return Err(self
                        .compute_refusal(req, g, usage)
                        .expect("refused just above"));
                }
                if fit.len() < n {
                    if candidates
                        .iter()
                        .all(|c| slice(c).vram_bytes > self.capacity(c))
                    {
                        let g = candidates
                            .iter()
                            .max_by_key(|c| self.capacity(c))
                            .expect("non-empty");
                        return Err(self.too_large(req, g, slice(g).vram_bytes));
                    }
                    return Err(PlacementError::NoFit {
                        requested: format!(
                            "{} ({})",
                            human(slice(candidates[0]).vram_bytes),
                            req.origin
                        ),
                        count: n as u32,
                        free: self.free_list(usage, None),
                    });
                }
                match self.policy {
                    Policy::Binpack => fit.sort_by_key(|g| (self.free_on(g, usage), g.index)),
                    Policy::Spread => {
                        fit.sort_by_key(|g| (std::cmp::Reverse(self.free_on(g, usage)), g.index))
                    }
                }
                fit.truncate(n);
                fit.sort_by_key(|g| g.index);
                fit
            }
        };
        for g in &chosen {
            let bytes = slice(g).vram_bytes;
            if bytes > self.capacity(g) {
                return Err(self.too_large(req, g, bytes));
            }
            if let Some(b) = slice(g).burst {
                // only the guarantee is summed; the limit is checked against
                // what the GPU can ever give, and against the guarantee
                if b.limit_bytes < bytes {
                    let origin = req.burst.as_ref().map(|a| a.origin.to_string());
                    return Err(PlacementError::LimitBelowGuarantee {
                        origin: origin.unwrap_or_default(),
                        limit: human(b.limit_bytes),
                        guarantee: human(bytes),
                        gpu: describe(g),
                    });
                }
                if b.limit_bytes > self.capacity(g) {
                    let ask = req.burst.as_ref().expect("a burst was asked for");
                    return Err(PlacementError::TooLarge {
                        requested: format!("{} ({})", human(b.limit_bytes), ask.origin),
                        gpu: describe(g),
                        capacity: human(self.capacity(g)),
                        total: human(g.total_bytes),
                        reserve: human(self.reserve),
                    });
                }
            }
            let free = self.free_on(g, usage);
            if bytes > free {
                let GpuUse {
                    bytes: used,
                    holders,
                    ..
                } = usage.get(&g.uuid).copied().unwrap_or_default();
                return Err(PlacementError::DoesNotFit {
                    requested: format!("{} ({})", human(bytes), req.origin),
                    gpu: describe(g),
                    free: human(free),
                    capacity: human(self.capacity(g)),
                    used: human(used),
                    holders,
                    elsewhere: self.free_list(usage, Some(&g.uuid)),
                });
            }
            if let Some((charge, how)) = self.contexts.of(g) {
                let smallest = self.contexts.smallest(g);
                if bytes < smallest {
                    let mib = 1u64 << 20;
                    return Err(PlacementError::TooSmallForContext {
                        requested: format!("{} ({})", human(bytes), req.origin),
                        gpu: describe(g),
                        charge: human(charge),
                        how,
                        smallest: human(smallest),
                        suggest: format!("{}m", smallest.div_ceil(mib)),
                    });
                }
            }
            if let Some(e) = self.compute_refusal(req, g, usage) {
                return Err(e);
            }
        }
        Ok(chosen.into_iter().map(slice).collect())
    }
}

#[cfg(test)]
mod tests;
