//! The update phase: a running container's grant changes
//! (`gpu-quota resize`).
//!
//! The ledger decides (`ledger::resize`: a grow is admitted like a new
//! container, a shrink is written last), the container's `grant` file
//! carries the live limit every one of its processes reads at its next
//! call (`grantfile`), and the driver-level limit (r615+, where the hook set
//! one) follows in the safe order: raised after the ledger grows, lowered
//! before the ledger shrinks. A shrink is refused while the container holds
//! more than the new size on that GPU, by the driver's account or by its
//! own, and while the host cannot see what it holds (`held`): the lower
//! limit is put in place first, so nothing new is admitted past it while
//! the usage is read, and taken back when the usage does not fit.
//!
//! A crash anywhere leaves the reservation's marker; [`repair`] gives the
//! container the reservation's bytes and clears it (every resize repairs
//! first, and so does `gpu-quota gc`), so the ledger and the container
//! agree on the old size or the new one.
//!
//! A crashed resize and a running one are told apart by the container's
//! resize lock (`ledger::resize::lock`, a `flock` the kernel lets go when
//! its holder dies): a resize holds it from before its marker is written
//! until after it is ended, and a repair acts only on a marker whose lock
//! it got, deciding and acting in one transaction under the ledger's
//! lock. The resize ends only its own marker (each has a token), and an
//! end never grows a slice. So after each quiet point (no resize running,
//! and a `gc` or resize after a crash) the container's live limit is what
//! the ledger counts, and the ledger never counts more than the GPU holds.
use super::held;
use crate::config::Config;
use crate::events;
use crate::fsutil::WriteStep;
use crate::inventory::Inventory;
use crate::ledger::resize::ResizeError;
use crate::ledger::{Key, LedgerError, Reservation};
use crate::placement::ContextCosts;
use crate::units::{human, Size};
use crate::{drvlimit, grantfile, state, Ledger};
use gpuquota_formats::grant;
use std::path::Path;
use std::time::Duration;

/// The container id a key names.
fn key_id(key: &Key<'_>) -> String {
    match key {
        Key::Root { id, .. } | Key::Hook { id, .. } => id.to_string(),
    }
}

/// The steps of a resize, in order (tests stop a resize at each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The ledger holds the marker (and, for a grow, the new bytes).
    Begun,
    /// The driver-level limit was raised (grow) or lowered (shrink).
    Driver,
    /// The container's live limit is the new size.
    Granted,
    /// A shrink read the container's usage.
    Checked,
    /// The ledger holds the new size, the marker is gone.
    Ended,
}

pub const STEPS: [Step; 5] = [
    Step::Begun,
    Step::Driver,
    Step::Granted,
    Step::Checked,
    Step::Ended,
];

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Resize(#[from] ResizeError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("cannot shrink container {id} to {to} on GPU {gpu}: {why}")]
    Held {
        id: String,
        gpu: u32,
        to: String,
        why: held::Refusal,
    },
    #[error("container {id}: its live limit ({path}) cannot be changed: {err}; the ledger was left at {kept}")]
    Grant {
        id: String,
        path: String,
        err: std::io::Error,
        kept: String,
    },
    #[error("container {id}: the driver-level limit on GPU {gpu} cannot be changed ({err}); the ledger was left at {kept}")]
    Driver {
        id: String,
        gpu: u32,
        err: drvlimit::DrvLimitError,
        kept: String,
    },
}

/// A resize that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    pub reservation: Reservation,
    pub gpu: u32,
    pub from: u64,
    pub to: u64,
}

/// Give the container whose state directory is `dir` the slice `bytes` on
/// GPU `uuid`: its live limit, then its driver-level limit where one is
/// set (a repair or an undo, where the order no longer matters: the ledger
/// still counts the larger of the two sizes until the marker goes).
fn apply(cfg: &Config, dir: &Path, uuid: &str, bytes: u64) -> std::io::Result<()> {
    grantfile::set_vram(&dir.join(grant::FILE_NAME), uuid, bytes)?;
    drvlimit::update_in_dir(cfg, dir, uuid, bytes)
        .map(|_| ())
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// What [`repair`] did.
#[derive(Debug, Default)]
pub struct Repaired {
    /// Reservations whose interrupted resize is finished (their container
    /// has their bytes, or is gone).
    pub done: Vec<Reservation>,
    /// Containers whose limit could not be set (id, why): their marker
    /// stays, the next repair tries again.
    pub failed: Vec<(String, std::io::Error)>,
    /// Containers a resize is running on right now (it holds their resize
    /// lock): not interrupted, left to that resize.
    pub under_way: Vec<String>,
}

/// The points a repair passes (tests hold it there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairStep {
    /// It read the ledger for markers (without the ledger's lock).
    Read,
}

/// Finish every resize a crash interrupted: the container gets what its
/// reservation holds, the marker goes.
///
/// A marker found in the unlocked read only says which containers to look
/// at. For each, the repair takes the container's resize lock without
/// waiting (`ledger::resize::lock`): held, a resize is running and ends
/// its own marker (the container is `under_way`); got, the resize that
/// wrote the marker is dead and none can start. Then, in one transaction
/// under the ledger's lock, it reads the marker again, gives the container
/// the reservation's bytes and clears that marker: no release, reclaim or
/// new admission of the same container can come between what it decided
/// and what it did. (The driver-level limit, where one is set, is changed
/// inside that transaction too; its helper has a timeout. Repairs are
/// rare: only after a crash.)
pub fn repair(cfg: &Config) -> Result<Repaired, LedgerError> {
    repair_observed(cfg, &mut |_| {})
}

/// As [`repair`], calling `observe` at each [`RepairStep`].
pub fn repair_observed(
    cfg: &Config,
    observe: &mut dyn FnMut(RepairStep),
) -> Result<Repaired, LedgerError> {
    let ledger = Ledger::new(cfg);
    let mut out = Repaired::default();
    let mut marked: Vec<(String, Option<String>)> = ledger
        .read()?
        .reservations
        .into_iter()
        .filter(|r| r.resizing.is_some())
        .map(|r| (r.container_id, r.runtime_root))
        .collect();
    marked.sort();
    marked.dedup();
    observe(RepairStep::Read);
    for (id, root) in &marked {
        let key = Key::Root {
            id,
            root: root.as_deref(),
        };
        let Some(_lock) = ledger.resize_lock(&key, Duration::ZERO)? else {
            out.under_way.push(id.clone());
            continue;
        };
        let mut failed = None;
        let done = ledger.transact(|d| {
            let Some(r) = d
                .reservations
                .iter_mut()
                .find(|r| key.matches(r) && r.resizing.is_some())
            else {
                return Ok((None, false)); // ended before we got the lock
            };
            let uuid = r
                .resizing
                .as_ref()
                .map(|p| p.uuid.clone())
                .unwrap_or_default();
            let Some(bytes) = r
                .slices
                .iter()
                .find(|s| s.uuid == uuid)
                .map(|s| s.vram_bytes)
            else {
                // a marker of no slice it holds: nothing to give
                r.resizing = None;
                return Ok((Some(r.clone()), true));
            };
            match apply(cfg, &state::existing_dir(cfg, r), &uuid, bytes) {
                // a container whose state is gone has no limit to agree with
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    failed = Some(e);
                    return Ok((None, false));
                }
            }
            r.resizing = None;
            Ok((Some(r.clone()), true))
        })?;
        if let Some(e) = failed {
            out.failed.push((id.clone(), e));
        }
        out.done.extend(done);
    }
    Ok(out)
}

/// How long a resize waits for another resize (or a repair) of the same
/// container to let its lock go before it says so.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Resize container `key`'s slice on GPU `gpu` (its host index; `None`
/// when it holds one) to `to`. `by` says who asked (for the event).
/// `Ok(None)`: it already has that size.
#[allow(clippy::too_many_arguments)]
pub fn resize(
    cfg: &Config,
    inv: &Inventory,
    contexts: &ContextCosts,
    key: Key<'_>,
    gpu: Option<u32>,
    to: Size,
    by: &str,
    src: events::Source<'_>,
) -> Result<Option<Resized>, UpdateError> {
    resize_observed(
        cfg,
        inv,
        contexts,
        key,
        gpu,
        to,
        by,
        src,
        &held::OnHost,
        &mut |_| {},
    )
}

/// As [`resize`], learning what the container holds from `measure` and
/// calling `observe` after each [`Step`].
#[allow(clippy::too_many_arguments)]
pub fn resize_observed(
    cfg: &Config,
    inv: &Inventory,
    contexts: &ContextCosts,
    key: Key<'_>,
    gpu: Option<u32>,
    to: Size,
    by: &str,
    src: events::Source<'_>,
    measure: &dyn held::Measure,
    observe: &mut dyn FnMut(Step),
) -> Result<Option<Resized>, UpdateError> {
    let mut traced = |t: Trace| {
        if let Trace::Step(s) = t {
            observe(s)
        }
    };
    resize_traced(
        cfg,
        inv,
        contexts,
        key,
        gpu,
        to,
        by,
        src,
        measure,
        &mut traced,
    )
}

/// What [`resize_traced`] reports: each [`Step`], and each step of its
/// ledger writes (tests stop a resize inside a write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trace {
    Step(Step),
    Write(WriteStep),
}

/// As [`resize`], calling `observe` at each [`Trace`] point.
#[allow(clippy::too_many_arguments)]
pub fn resize_traced(
    cfg: &Config,
    inv: &Inventory,
    contexts: &ContextCosts,
    key: Key<'_>,
    gpu: Option<u32>,
    to: Size,
    by: &str,
    src: events::Source<'_>,
    measure: &dyn held::Measure,
    observe: &mut dyn FnMut(Trace),
) -> Result<Option<Resized>, UpdateError> {
    // interrupted resizes first (this container's too: a marker left on it
    // would refuse this one)
    repair(cfg)?;
    let ledger = Ledger::new(cfg);
    // held until the resize has ended its marker (or undone it): a repair
    // leaves the marker alone meanwhile
    let Some(_lock) = ledger.resize_lock(&key, LOCK_WAIT)? else {
        return Err(ResizeError::Busy { id: key_id(&key) }.into());
    };
    // the ledger's write steps and the resize's, in one sequence
    let observe = std::cell::RefCell::new(observe);
    let write = |w: WriteStep| (observe.borrow_mut())(Trace::Write(w));
    let step = |s: Step| (observe.borrow_mut())(Trace::Step(s));
    let Some(b) =
        ledger.resize_begin_observed(cfg, inv, contexts, key.clone(), gpu, to, &mut { write })?
    else {
        return Ok(None);
    };
    let observe = step;
    observe(Step::Begun);
    let r = &b.reservation;
    let p = &b.resize;
    let index = r
        .slices
        .iter()
        .find(|s| s.uuid == p.uuid)
        .map(|s| s.index)
        .unwrap_or(0);
    let id = r.container_id.clone();
    // the container's state directory, found once
    let dir = state::existing_dir(cfg, r);
    // a step that fails undoes the resize as a whole: the container keeps
    // (shrink) or gets back (grow) its old size, and the ledger says so
    let undo = |e: UpdateError| -> UpdateError {
        let _ = apply(cfg, &dir, &p.uuid, p.from);
        match ledger.resize_end_observed(key.clone(), p, p.from, &mut { write }) {
            Ok(_) => e,
            Err(l) => l.into(),
        }
    };
    let grant = |bytes: u64| {
        grantfile::set_vram(&dir.join(grant::FILE_NAME), &p.uuid, bytes).map_err(|err| {
            undo(UpdateError::Grant {
                id: id.clone(),
                path: dir.join(grant::FILE_NAME).display().to_string(),
                err,
                kept: human(p.from),
            })
        })
    };
    let driver = |bytes: u64| {
        drvlimit::update_in_dir(cfg, &dir, &p.uuid, bytes).map_err(|err| {
            undo(UpdateError::Driver {
                id: id.clone(),
                gpu: index,
                err,
                kept: human(p.from),
            })
        })
    };
    if b.grows() {
        // the ledger already counts the new size: raise the driver's limit,
        // then the container's
        driver(p.to)?;
        observe(Step::Driver);
        grant(p.to)?;
        observe(Step::Granted);
    } else {
        // nothing new is admitted past the new size from here on
        grant(p.to)?;
        observe(Step::Granted);
        let held = measure.held_on(cfg, &dir, r, &p.uuid);
        observe(Step::Checked);
        if let Some(why) = held.refusal(p.to) {
            return Err(undo(UpdateError::Held {
                id,
                gpu: index,
                to: human(p.to),
                why,
            }));
        }
        driver(p.to)?;
        observe(Step::Driver);
    }
    // `None`: the container was released meanwhile (its marker went with it)
    let Some(r) = ledger.resize_end_observed(key, p, p.to, &mut { write })? else {
        return Err(ResizeError::NotFound { id }.into());
    };
    observe(Step::Ended);
    events::resized(cfg, src, &r, index, p.from, p.to, by);
    Ok(Some(Resized {
        reservation: r,
        gpu: index,
        from: p.from,
        to: p.to,
    }))
}

#[cfg(test)]
mod tests;
