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
use super::held;
use crate::config::Config;
use crate::events;
use crate::inventory::Inventory;
use crate::ledger::resize::ResizeError;
use crate::ledger::{Key, LedgerError, Reservation};
use crate::placement::ContextCosts;
use crate::units::{human, Size};
use crate::{drvlimit, grantfile, state, Ledger};
use gpuquota_formats::grant;
use std::path::Path;

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
}

/// Finish every resize a crash interrupted: the container gets what its
/// reservation holds, the marker goes.
pub fn repair(cfg: &Config) -> Result<Repaired, LedgerError> {
    let ledger = Ledger::new(cfg);
    let mut out = Repaired::default();
    for r in ledger.read()?.reservations {
        let Some(p) = r.resizing.clone() else {
            continue;
        };
        let bytes = r
            .slices
            .iter()
            .find(|s| s.uuid == p.uuid)
            .map(|s| s.vram_bytes)
            .unwrap_or(p.from);
        match apply(cfg, &state::existing_dir(cfg, &r), &p.uuid, bytes) {
            // a container whose state is gone has no limit to agree with
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                out.failed.push((r.container_id.clone(), e));
                continue;
            }
        }
        let key = Key::Root {
            id: &r.container_id,
            root: r.runtime_root.as_deref(),
        };
        if let Some(r) = ledger.resize_end(key, bytes)? {
            out.done.push(r);
        }
    }
    Ok(out)
}

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
    resize_observed(cfg, inv, contexts, key, gpu, to, by, src, &mut |_| {})
}

/// As [`resize`], calling `observe` after each [`Step`].
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
    observe: &mut dyn FnMut(Step),
) -> Result<Option<Resized>, UpdateError> {
    repair(cfg)?;
    let ledger = Ledger::new(cfg);
    let Some(b) = ledger.resize_begin(cfg, inv, contexts, key.clone(), gpu, to)? else {
        return Ok(None);
    };
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
        match ledger.resize_end(key.clone(), p.from) {
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
        let held = held::held_on(cfg, &dir, r, &p.uuid);
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
    let r = ledger
        .resize_end(key, p.to)?
        .unwrap_or_else(|| b.reservation.clone());
    observe(Step::Ended);
    events::resized(cfg, src, &r, index, p.from, p.to, by);
    Ok(Some(Resized {
        reservation: r,
        gpu: index,
        from: p.from,
        to: p.to,
    }))
}
