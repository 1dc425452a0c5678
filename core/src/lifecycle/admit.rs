//! Admission, prepare's decision: a request placed in the ledger (after the
//! engine's own GPU request — `--gpus`, CDI devices — is reconciled with
//! it), or the container bound to the prepared DRA claim it presents. What
//! both check first, [`checks`], is the hook's first check too.
use super::{release, Bundle, Container, Exit, LifecycleError};
use crate::{
    claims::{self, Presented},
    config::Config,
    ctxcost, events,
    ledger::{self, Ledger},
    mountplan, spec, state,
    toolkit::{self, VisibleFrom},
    Inventory, Request, Reservation,
};

/// What a container asks for: one source, never both (a presented claim
/// makes requests unread).
#[derive(Debug)]
pub(super) enum Ask {
    Request(Request),
    Claim(Presented),
}

/// An admitted container: its reservation, and whether the engine asked for
/// GPUs itself (then the spec is narrowed to the slice).
#[derive(Debug)]
pub(super) struct Admitted {
    pub reservation: Reservation,
    pub engine_request: bool,
}

/// Admit container `c` (its bundle `bundle`) for `ask`; every refusal is
/// recorded.
pub(super) fn admit(
    cfg: &Config,
    inv: &Inventory,
    bundle: &Bundle,
    c: &Container<'_>,
    ask: &Ask,
) -> Result<Admitted, LifecycleError> {
    match ask {
        Ask::Request(req) => {
            // the engine's GPU request reconciled with ours, refused before
            // anything is reserved when they contradict
            let from = VisibleFrom::for_root(cfg, Some(c.runc_root()));
            let (req, engine) = toolkit::request_for_create(&bundle.config, req, inv, from)
                .inspect_err(|e| {
                    let request = ledger::describe_request(req);
                    let src = c.source("create");
                    events::refused(cfg, src, c.id, &request, "engine_request", &e.to_string());
                })?;
            // a share is admitted for the host user MPS will see, root
            // where the container can become it
            let req = Request {
                user: req.sm.and_then(|_| spec::share_uid(&bundle.config)),
                ..req
            };
            Ok(Admitted {
                reservation: admit_request(cfg, inv, bundle, &req, c)?,
                engine_request: engine.is_some(),
            })
        }
        Ask::Claim(p) => {
            let r = admit_claim(cfg, bundle, p, c)?;
            let engine_request = engine_request_for_claim(cfg, inv, bundle, &r, c)?;
            Ok(Admitted {
                reservation: r,
                engine_request,
            })
        }
    }
}

/// What prepare and enter check before the ledger: an id that can name a
/// directory; no volume, host directory or tmpfs the bundle declares over
/// a path the hook writes (symlink-steered ones: the hook, EXDEV).
pub(super) fn checks(cfg: &Config, bundle: &Bundle, id: &str) -> Result<(), LifecycleError> {
    if !state::valid_container_id(id) {
        return Err(LifecycleError::BadId(id.into()));
    }
    if let Some(c) = mountplan::declared_conflict(
        &mountplan::Declared::from_config(&bundle.config),
        &cfg.driver.binaries,
    ) {
        return Err(c.into());
    }
    Ok(())
}

/// [`checks`], with a mount conflict recorded as a refusal.
fn precheck(
    cfg: &Config,
    bundle: &Bundle,
    c: &Container<'_>,
    request: &dyn Fn() -> String,
) -> Result<(), LifecycleError> {
    checks(cfg, bundle, c.id).inspect_err(|e| {
        if let LifecycleError::MountConflict(m) = e {
            let src = c.source("create");
            events::refused(cfg, src, c.id, &request(), "mount_conflict", &m.to_string());
        }
    })
}

/// Place `req` in the ledger under its lock. Reservations of dead
/// containers reclaimed on the way are released (cause "admission"); the
/// admission or the refusal is recorded.
fn admit_request(
    cfg: &Config,
    inv: &Inventory,
    bundle: &Bundle,
    req: &Request,
    c: &Container<'_>,
) -> Result<Reservation, LifecycleError> {
    let request = || ledger::describe_request(req);
    precheck(cfg, bundle, c, &request)?;
    let could_be_small = inv.gpus.iter().any(|g| {
        req.vram.resolve(g.total_bytes) <= ctxcost::MAX_PLAUSIBLE_BYTES + ctxcost::MARGIN_BYTES
    });
    let info = ledger::AdmitInfo {
        contexts: ctxcost::known_costs(cfg, could_be_small),
        workload: crate::workload::Workload::from_config(&bundle.config),
    };
    let mut reclaimed = vec![];
    let admitted = Ledger::new(cfg).admit_knowing(
        cfg,
        inv,
        &info,
        req,
        c.id,
        Some(c.runc_root()),
        &bundle.dir.to_string_lossy(),
        &mut reclaimed,
    );
    release_reclaimed(cfg, &reclaimed, c);
    record(cfg, c, &request, &admitted, events::reason_of);
    Ok(admitted?)
}

/// Bind the container to the prepared DRA claim it presents
/// (`claims::bind`: the token compared in constant time; every consumer of
/// a claim shares its usage file): it gets exactly the claim's slice on
/// the claim's GPU, whatever its annotations or environment ask, in every
/// mode. The claim's variable is taken out of the spec by prepare's edits
/// (`spec::Environment::without_claim`): runc and the container never see
/// it.
fn admit_claim(
    cfg: &Config,
    bundle: &Bundle,
    p: &Presented,
    c: &Container<'_>,
) -> Result<Reservation, LifecycleError> {
    let request = || format!("claim {:?}", p.var); // the name is hostile
    precheck(cfg, bundle, c, &request)?;
    let mut reclaimed = vec![];
    let bound = claims::bind(
        cfg,
        p,
        c.id,
        c.runc_root(),
        &bundle.dir.to_string_lossy(),
        spec::share_uid(&bundle.config),
        &mut reclaimed,
    );
    release_reclaimed(cfg, &reclaimed, c);
    record(cfg, c, &request, &bound, claims::reason_of);
    Ok(bound?)
}

/// For a container bound to a claim (`r`): the engine's own GPU request (a
/// device plugin's `NVIDIA_VISIBLE_DEVICES` or CDI devices beside the
/// claim) must name the claim's GPU; a contradiction ends the reservation
/// and is refused. Whether the engine asked (then its other GPUs are
/// narrowed away as for any slice).
fn engine_request_for_claim(
    cfg: &Config,
    inv: &Inventory,
    bundle: &Bundle,
    r: &Reservation,
    c: &Container<'_>,
) -> Result<bool, LifecycleError> {
    let host = toolkit::host_gpus(inv);
    let from = VisibleFrom::for_root(cfg, Some(c.runc_root()));
    let engine = match toolkit::detect(&bundle.config, &host, from) {
        Ok(Some(e)) => e,
        Ok(None) => return Ok(false),
        Err(e) => return Err(refuse_bound(cfg, r, c, e)),
    };
    // the claim's GPUs are decided: the engine may only agree with them
    let uuids: Vec<String> = r.slices.iter().map(|s| s.uuid.clone()).collect();
    match toolkit::agrees_with(&uuids, &engine, &host) {
        Ok(()) => Ok(true),
        Err(e) => Err(refuse_bound(cfg, r, c, e)),
    }
}

fn refuse_bound(
    cfg: &Config,
    r: &Reservation,
    c: &Container<'_>,
    e: toolkit::ToolkitError,
) -> LifecycleError {
    let _ = super::end(cfg, c, Exit::CreateFailed);
    let src = c.source("create");
    events::refused(cfg, src, c.id, &r.request, "engine_request", &e.to_string());
    e.into()
}

/// The event of an admission's outcome: admitted, or refused with `reason`.
fn record<E: std::fmt::Display>(
    cfg: &Config,
    c: &Container<'_>,
    request: &dyn Fn() -> String,
    outcome: &Result<Reservation, E>,
    reason: fn(&E) -> &'static str,
) {
    let src = c.source("create");
    match outcome {
        Ok(r) => events::admitted(cfg, src, r),
        Err(e) => events::refused(cfg, src, c.id, &request(), reason(e), &e.to_string()),
    }
}

fn release_reclaimed(cfg: &Config, reclaimed: &[Reservation], c: &Container<'_>) {
    release::release(
        &mut release::HostEffects::new(cfg),
        reclaimed,
        release::Ending::Reclaimed,
        c.source("admission"),
    );
}
