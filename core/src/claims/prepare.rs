//! A claim's prepare and unprepare: its entry in the ledger, its CDI spec.
use super::cdi::{new_token, remove_cdi, write_cdi};
use super::{
    cdi_device_id, check, claim_of, contexts, describe_alloc, label, source, valid_uid, ClaimAlloc,
    ClaimError, Prepared,
};
use crate::config::Config;
use crate::inventory::Inventory;
use crate::ledger::{self, ClaimEntry, Ledger, Reservation};
use crate::placement::{ContextCosts, PlacementError, Placer};
use crate::units::human;
use crate::{events, fsutil, state};
use std::time::{Duration, Instant};

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

/// Reserve the claim's bytes on its GPU, make its token and its CDI spec.
/// Idempotent for the same uid, GPU and bytes. Refused at once where the
/// placer refuses it ([`prepare_waiting`] waits for releases): its GPU
/// unknown or not sliceable, the bytes more than the GPU can ever give or
/// than are free, too few to hold a CUDA context, or the GPU serving
/// compute shares.
pub fn prepare(cfg: &Config, a: &ClaimAlloc) -> Result<Prepared, ClaimError> {
    prepare_waiting(cfg, a, &ContextCosts::default(), Duration::ZERO)
}

/// Whether a refusal can end by itself as holders release: the bytes or
/// the share not free, or a holder of the other kind beside (compute
/// shares beside a claim without one, or the reverse: a holder that is
/// ending, its container released a moment ago, frees the GPU).
fn releasable(e: &PlacementError) -> bool {
    matches!(
        e,
        PlacementError::DoesNotFit { .. }
            | PlacementError::UnsharedBesideShares { .. }
            | PlacementError::ShareDoesNotFit { .. }
            | PlacementError::ShareBesideUnshared { .. }
    )
}

/// [`prepare`], and while the GPU is held by others, try again every
/// 100 ms for at most `wait` (the driver: [`RELEASE_WAIT`]), each try
/// under the ledger's lock. The refusal names what holds the GPU and how
/// long it waited.
pub fn prepare_waiting(
    cfg: &Config,
    a: &ClaimAlloc,
    costs: &ContextCosts,
    wait: Duration,
) -> Result<Prepared, ClaimError> {
    let start = Instant::now();
    loop {
        match prepare_once(cfg, a, costs) {
            Err(ClaimError::Refused { err, .. })
                if releasable(&err) && start.elapsed() + RELEASE_POLL <= wait =>
            {
                std::thread::sleep(RELEASE_POLL)
            }
            Err(ClaimError::Refused { err, holders, .. }) if releasable(&err) => {
                return Err(ClaimError::Refused {
                    err,
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
    let contexts = contexts(cfg, costs);
    // the placer of a container's start, asked the claim's request
    let placer = Placer::new(cfg, &inv, &contexts);
    let req = a.request();
    // the GPU as the inventory spells its uuid, where it knows it
    let gpu = inv
        .find_uuid(&a.gpu_uuid)
        .map_or(a.gpu_uuid.as_str(), |g| g.uuid.as_str());
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
                && r.slices[0].uuid == gpu
                && r.slices[0].vram_bytes == a.bytes
                && r.slices[0].sm_percent == a.sm.unwrap_or(0)
                && r.slices[0].sm_procs == a.sm_procs
                && r.slices[0].burst == a.lent()
                && c.namespace == a.namespace
                && c.name == a.name;
            if !same {
                let held = r
                    .slices
                    .first()
                    .map(|s| describe_alloc(&s.uuid, s.vram_bytes, s.sm_percent, s.burst))
                    .unwrap_or_default();
                return Ok((
                    Err(ClaimError::Conflict {
                        uid: a.uid.clone(),
                        held: format!("{}/{} {held}", c.namespace, c.name),
                        asked: format!(
                            "{}/{} {}",
                            a.namespace,
                            a.name,
                            describe_alloc(gpu, a.bytes, a.sm.unwrap_or(0), a.lent())
                        ),
                    }),
                    false,
                ));
            }
            // again (a kubelet retry, a reboot emptied the CDI directory)
            return Ok((write_cdi(cfg, &a.uid, &c.token).map(|()| None), false));
        }
        let now = fsutil::now_unix();
        // every holder's bytes, a dead container's until it is reclaimed
        // (the driver reclaims nothing), but no dead container's share
        let usage = ledger::usage_unreclaimed(&d.reservations, &|r| ledger.is_stale(r, now));
        let slices = match placer.place(&req, &usage) {
            Ok(s) => s,
            Err(err) => {
                let holders = matches!(err, PlacementError::DoesNotFit { .. })
                    .then(|| holders_of(&ledger, &d.reservations, gpu, now));
                return Ok((
                    Err(ClaimError::Refused {
                        err: Box::new(err),
                        holders,
                        waited_ms: 0,
                    }),
                    false,
                ));
            }
        };
        let token = match new_token() {
            Ok(t) => t,
            Err(e) => return Ok((Err(ClaimError::Io("getrandom".into(), e)), false)),
        };
        // in the critical section: a failed write leaves the ledger unchanged
        if let Err(e) = write_cdi(cfg, &a.uid, &token) {
            return Ok((Err(e), false));
        }
        let r = Reservation {
            created_unix: now,
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
                slices,
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
        let shared = r.share().is_some();
        events::released(cfg, source("unprepare"), &[r]);
        if shared {
            // the claim held its GPU's daemon up for its containers: the
            // last share there gone, it stops now, not at the next gc
            for w in crate::mps::settle_released(cfg) {
                eprintln!("gpu-quota: warning: {w}");
            }
        }
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
                sm: (s.sm_percent > 0).then_some(s.sm_percent),
                sm_procs: s.sm_procs,
                burst: s.burst,
            })
        })
        .collect())
}
