//! `gpu-quota release ID`: give back one container's reservation by hand.
//!
//! Asks first unless `--yes`; refuses while the container still runs
//! unless `--force`. The check is made again under the ledger's lock, so
//! a reservation that changed in between (a container that was recreated
//! under the same id) is left alone. Prints the same lines as `gc`.
//!
//! A container is known by its whole id (`lookup::find`, as `resize`
//! finds one, but never by a prefix or a name) and the runc root it was
//! created under (two engines may use one id): when the id is held under
//! more than one root, `--runtime-root` must say which.
use crate::lookup::{self, Accept, Miss};
use crate::ops::{cli_source, describe_reclaim, load};
use anyhow::{bail, Result};
use gpuquota_core::{fsutil, ledger::describe_slices, lifecycle, Reservation};
use std::io::BufRead;

#[derive(clap::Args)]
pub struct ReleaseArgs {
    /// Container id, whole, as `gpu-quota ls --json` shows it (not a
    /// prefix, not a name).
    pub id: String,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Release even though the container still runs (its processes keep
    /// the GPU; the ledger stops counting their slice).
    #[arg(long)]
    pub force: bool,
    /// The runc root the container was created under (`runtime_root` in
    /// `gpu-quota ls --json`); needed when the id is held under several.
    #[arg(long, value_name = "DIR")]
    pub runtime_root: Option<String>,
}

pub fn release(a: &ReleaseArgs) -> Result<()> {
    let (cfg, ledger) = load()?;
    let now = fsutil::now_unix();
    let held = ledger.read()?.reservations;
    if let Some(c) = held
        .iter()
        .filter_map(|r| r.claim.as_ref().map(|c| (r, c)))
        .find(|(r, c)| r.container_id == a.id || c.uid == a.id)
    {
        bail!(
            "{} is the DRA claim {}/{} (uid {}), not a container; a claim is released when the kubelet unprepares it (delete the pod that uses it); a container bound to it is released with its own id",
            a.id,
            c.1.namespace,
            c.1.name,
            c.1.uid
        );
    }
    // the whole id only (`lookup::Accept::Id` says why)
    let r = match lookup::find(&held, &a.id, a.runtime_root.as_deref(), Accept::Id, &|_| {
        true
    }) {
        Ok(r) => r.clone(),
        Err(Miss::Ambiguous(m)) => bail!("{m}"),
        Err(Miss::NotFound) => bail!(
            "no reservation for container {}{} in {} (see `gpu-quota ls --json`)",
            a.id,
            a.runtime_root
                .as_deref()
                .map(|r| format!(" under runc root {r}"))
                .unwrap_or_default(),
            ledger.path().display()
        ),
    };
    let id = r.container_id.clone();
    let found = [r];
    let live: Vec<&Reservation> = found.iter().filter(|r| !ledger.is_stale(r, now)).collect();
    if !live.is_empty() && !a.force {
        bail!(
            "container {} is still running ({}{}); delete it with its engine (that releases its slice), or pass --force to release the slice anyway",
            id,
            describe_slices(&live[0].slices),
            live[0].pid.map(|p| format!(", pid {p}")).unwrap_or_default()
        );
    }
    if !a.yes {
        let what: Vec<String> = found.iter().map(|r| describe_slices(&r.slices)).collect();
        eprint!(
            "release {} ({}){}? [y/N] ",
            id,
            what.join("; "),
            if live.is_empty() {
                ""
            } else {
                " although it still runs"
            }
        );
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        if !matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            bail!("not released (answer y, or pass --yes)");
        }
    }
    let force = a.force;
    let gone = ledger.transact(|d| {
        let (gone, keep): (Vec<_>, Vec<_>) = d
            .reservations
            .drain(..)
            .partition(|r| found.contains(r) && (force || ledger.is_stale(r, fsutil::now_unix())));
        d.reservations = keep;
        let changed = !gone.is_empty();
        Ok((gone, changed))
    })?;
    // forced: the container's process is not gone (its driver limit and
    // state directory stay with it; its `delete` or `gc`'s sweep ends them)
    let now = fsutil::now_unix();
    let (ended, running): (Vec<_>, Vec<_>) =
        gone.iter().cloned().partition(|r| ledger.is_stale(r, now));
    let mut fx = lifecycle::HostEffects::new(&cfg);
    let src = cli_source("operator");
    lifecycle::release(&mut fx, &ended, lifecycle::Ending::Released, src);
    lifecycle::release(
        &mut fx,
        &running,
        lifecycle::Ending::ForcedWhileRunning,
        src,
    );
    for r in &gone {
        let line = describe_reclaim("released", r);
        if ended.contains(r) {
            gpuquota_core::outln!("{line}");
        } else {
            gpuquota_core::outln!(
                "{}",
                line.replace(
                    &format!(", pid {} gone", r.pid.unwrap_or(0)),
                    &format!(", pid {} still running", r.pid.unwrap_or(0))
                )
            );
        }
    }
    if gone.is_empty() {
        bail!(
            "nothing released: the reservation of {} changed meanwhile (see `gpu-quota ls`)",
            id
        );
    }
    Ok(())
}
