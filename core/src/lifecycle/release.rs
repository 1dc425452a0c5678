//! release: every path that ends a container goes through [`end`] (one
//! container, by its key) and [`release`] (reservations already taken out
//! of the ledger: `gc`, `gpu-quota release`, a reclaim during admission),
//! which for each reservation, in this order:
//! 1. clears the r615 driver limit the hook recorded in its state directory
//!    (`driver-limits.json`), while the cgroup may still exist;
//! 2. removes its state directory (and an old-named one nobody else holds,
//!    `state::remove_released`);
//!
//! then records the event and bumps the counters once for all of them. A
//! reservation released by force while its process still runs keeps its
//! limit and its state (they are mounted in it); the runtime's `delete`
//! ends them later ([`Exit::Deleted`]); otherwise `gc`'s sweep removes the
//! directory once no reservation owns it (without a clear).
//!
//! The effects are behind [`Effects`], so the order is tested without root.
use super::Container;
use crate::{
    claims,
    config::Config,
    drvlimit, events,
    ledger::{Key, LedgerError},
    mps, state, Ledger, Reservation,
};
use std::path::{Path, PathBuf};

/// How a container's life ended, as the binary that saw it end knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit<'a> {
    /// The runtime's own work after admission failed (cause
    /// "create-failed").
    CreateFailed,
    /// `runc create`/`run` failed: the container never started.
    RuncFailed,
    /// A foreground `runc run` returned: runc already deleted it.
    RunExited,
    /// The hook's poststop; `bundle` completes the hook's key.
    Poststop { bundle: &'a str },
    /// The runtime's `delete`, once runc no longer knows the container.
    /// `bundle`: the one runc recorded for it (read before the delete), by
    /// which a state directory whose reservation was already released by
    /// force (`gpu-quota release --force` of a running container) is found
    /// and ended: its driver limit cleared, the directory removed, unless a
    /// reservation still held owns it.
    Deleted { bundle: Option<&'a str> },
}

impl Exit<'_> {
    fn cause(&self) -> &'static str {
        match self {
            Exit::CreateFailed => "create-failed",
            Exit::RuncFailed => "runc-failed",
            Exit::RunExited => "run-exited",
            Exit::Poststop { .. } => "poststop",
            Exit::Deleted { .. } => "delete",
        }
    }
}

/// End container `c`: take its reservation out of the ledger and
/// [`release`] it (cause: the exit's). The reservations ended; the
/// ledger's error when it could not be read or written.
pub fn end(
    cfg: &Config,
    c: &Container<'_>,
    exit: Exit<'_>,
) -> Result<Vec<Reservation>, LedgerError> {
    let root = Some(c.runc_root());
    let key = match exit {
        Exit::Poststop { bundle } => Key::Hook {
            id: c.id,
            root,
            bundle,
        },
        _ => Key::Root { id: c.id, root },
    };
    let gone = Ledger::new(cfg).release(key);
    if let Ok(gone) = &gone {
        release(
            &mut HostEffects::new(cfg),
            gone,
            Ending::Released,
            c.source(exit.cause()),
        );
    }
    if let Exit::Deleted {
        bundle: Some(bundle),
    } = exit
    {
        if gone.as_ref().map_or(true, Vec::is_empty) {
            release_orphan(cfg, c, bundle);
        }
    }
    gone
}

/// For the runtime's `delete` (and the end of a foreground `run --keep`),
/// before it calls runc, which removes the cgroup before it runs poststop
/// hooks: clear the driver limit (r615+) of container `c` while the cgroup
/// still exists. `force`: also while its init is alive (`delete --force`;
/// without it runc refuses to delete a running container, which must keep
/// its limit).
pub fn before_runc_delete(cfg: &Config, c: &Container<'_>, force: bool) {
    if let Err(e) = drvlimit::clear_for_container(cfg, c.id, Some(c.runc_root()), force) {
        eprintln!(
            "{}: warning: driver memory limit not cleared: {e}",
            c.program
        );
    }
}

/// How the container's reservations ended (which event is recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Given back by its container or the operator.
    Released,
    /// Taken back from a container that is gone.
    Reclaimed,
    /// Given back by the operator while its process still runs: its
    /// driver limit and state stay (they are mounted in it).
    ForcedWhileRunning,
}

/// The effects of a release, in the order [`release`] calls them.
pub trait Effects {
    /// Clear the driver limit recorded in `dir`, if any.
    fn clear_driver_limit(&mut self, dir: &Path);
    /// Remove the state of `r` (`held`: what the ledger still holds).
    fn remove_state(&mut self, r: &Reservation, held: Option<&[Reservation]>);
    /// The reservations still held, read after the release.
    fn held(&mut self) -> Option<Vec<Reservation>>;
    /// Record the event and bump the counters.
    fn record(&mut self, ending: Ending, src: events::Source<'_>, rs: &[Reservation]);
    /// Where `r`'s state is (its directory, or an old-named one).
    fn state_dir(&self, r: &Reservation) -> PathBuf;
    /// Stop the MPS daemons of GPUs left without a share (after the
    /// reservations with shares among `gone` were released).
    fn settle_mps(&mut self);
}

/// The effects on this host.
pub struct HostEffects<'a> {
    cfg: &'a Config,
}

impl<'a> HostEffects<'a> {
    pub fn new(cfg: &'a Config) -> Self {
        HostEffects { cfg }
    }
}

fn clear_limit_in(cfg: &Config, dir: &Path) {
    if let Err(e) = drvlimit::clear_in_dir(cfg, dir) {
        eprintln!(
            "gpu-quota: warning: driver memory limit recorded in {} not cleared: {e}",
            dir.display()
        );
    }
}

impl Effects for HostEffects<'_> {
    fn clear_driver_limit(&mut self, dir: &Path) {
        clear_limit_in(self.cfg, dir);
    }
    fn remove_state(&mut self, r: &Reservation, held: Option<&[Reservation]>) {
        let _ = state::remove_released(self.cfg, r, held);
        claims::consumer_gone(self.cfg, r);
    }
    fn held(&mut self) -> Option<Vec<Reservation>> {
        Ledger::new(self.cfg).read().ok().map(|d| d.reservations)
    }
    fn record(&mut self, ending: Ending, src: events::Source<'_>, rs: &[Reservation]) {
        match ending {
            Ending::Reclaimed => events::reclaimed(self.cfg, src, rs),
            Ending::Released | Ending::ForcedWhileRunning => events::released(self.cfg, src, rs),
        }
    }
    fn state_dir(&self, r: &Reservation) -> PathBuf {
        state::existing_dir(self.cfg, r)
    }
    fn settle_mps(&mut self) {
        for w in mps::settle_released(self.cfg) {
            eprintln!("gpu-quota: warning: {w}");
        }
    }
}

/// The one release of reservations already taken out of the ledger: for
/// each, clear its driver limit, then remove its state; then record the
/// event and the counters. Ids that cannot be directory names (a
/// hand-edited ledger) touch no file.
pub fn release(
    fx: &mut dyn Effects,
    gone: &[Reservation],
    ending: Ending,
    src: events::Source<'_>,
) {
    if gone.is_empty() {
        return;
    }
    if ending != Ending::ForcedWhileRunning {
        let held = fx.held();
        for r in gone
            .iter()
            .filter(|r| state::valid_container_id(&r.container_id))
        {
            let dir = fx.state_dir(r);
            fx.clear_driver_limit(&dir);
            fx.remove_state(r, held.as_deref());
        }
    }
    if gone.iter().any(|r| r.share().is_some()) {
        // also for a container given back while it runs: its share no
        // longer counts, and the next admission may need the GPU outside MPS
        fx.settle_mps();
    }
    fx.record(ending, src, gone);
}

/// A state directory whose reservation was already released by force, for
/// the runtime's `delete` once runc no longer knows the container: its
/// driver limit is cleared and it is removed, unless a reservation still
/// held owns it (after runc's delete, so the clear finds a live cgroup
/// only where it outlives the delete).
fn release_orphan(cfg: &Config, c: &Container<'_>, bundle: &str) {
    if !state::valid_container_id(c.id) {
        return;
    }
    let Some(held) = HostEffects::new(cfg).held() else {
        return;
    };
    let dir =
        cfg.state_dir
            .join("containers")
            .join(state::dir_name(c.id, Some(c.runc_root()), bundle));
    if held.iter().any(|r| state::container_dir(cfg, r) == dir) {
        return;
    }
    clear_limit_in(cfg, &dir);
    let _ = state::remove(&dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        held: Vec<Reservation>,
    }
    impl Effects for Log {
        fn clear_driver_limit(&mut self, dir: &Path) {
            self.calls.push(format!("clear {}", dir.display()));
        }
        fn remove_state(&mut self, r: &Reservation, held: Option<&[Reservation]>) {
            self.calls.push(format!(
                "remove {} (held {})",
                r.container_id,
                held.map_or(0, <[_]>::len)
            ));
        }
        fn held(&mut self) -> Option<Vec<Reservation>> {
            self.calls.push("held".into());
            Some(self.held.clone())
        }
        fn record(&mut self, ending: Ending, src: events::Source<'_>, rs: &[Reservation]) {
            let ids: Vec<&str> = rs.iter().map(|r| r.container_id.as_str()).collect();
            self.calls
                .push(format!("record {ending:?} {} {}", src.cause, ids.join(",")));
        }
        fn state_dir(&self, r: &Reservation) -> PathBuf {
            PathBuf::from("/state").join(&r.container_id)
        }
        fn settle_mps(&mut self) {
            self.calls.push("settle mps".into());
        }
    }

    fn res(id: &str) -> Reservation {
        Reservation::new(id, Some("/run/runc"), "/b", vec![], "vram=1g")
    }
    fn src(cause: &'static str) -> events::Source<'static> {
        events::Source {
            program: "test",
            engine: "runc",
            cause,
        }
    }

    #[test]
    fn release_clears_the_limit_then_removes_state_then_records_once() {
        let mut fx = Log {
            held: vec![res("other")],
            ..Default::default()
        };
        release(&mut fx, &[res("a"), res("b")], Ending::Reclaimed, src("gc"));
        assert_eq!(
            fx.calls,
            [
                "held",
                "clear /state/a",
                "remove a (held 1)",
                "clear /state/b",
                "remove b (held 1)",
                "record Reclaimed gc a,b"
            ]
        );
    }

    #[test]
    fn a_share_released_on_any_path_settles_the_mps_daemons() {
        let shared = || {
            let mut r = res("s");
            r.slices.push(crate::placement::Slice {
                uuid: "GPU-a".into(),
                index: 0,
                vram_bytes: 1 << 30,
                sm_percent: 25,
                sm_user: None,
                sm_procs: 1,
                burst: None,
            });
            r
        };
        for ending in [
            Ending::Released,
            Ending::Reclaimed,
            Ending::ForcedWhileRunning,
        ] {
            let mut fx = Log::default();
            release(&mut fx, &[res("a"), shared()], ending, src("x"));
            assert_eq!(
                fx.calls.iter().filter(|c| *c == "settle mps").count(),
                1,
                "{ending:?}: {:?}",
                fx.calls
            );
            assert!(
                fx.calls.last().unwrap().starts_with("record"),
                "{:?}",
                fx.calls
            );
        }
        let mut fx = Log::default();
        release(&mut fx, &[res("a")], Ending::Released, src("x"));
        assert!(
            !fx.calls.iter().any(|c| c == "settle mps"),
            "no share, no daemon work"
        );
    }

    #[test]
    fn a_forced_release_of_a_running_container_keeps_its_limit_and_state() {
        let mut fx = Log::default();
        release(
            &mut fx,
            &[res("a")],
            Ending::ForcedWhileRunning,
            src("operator"),
        );
        assert_eq!(fx.calls, ["record ForcedWhileRunning operator a"]);
    }

    #[test]
    fn nothing_released_does_nothing_and_bad_ids_touch_no_file() {
        let mut fx = Log::default();
        release(&mut fx, &[], Ending::Released, src("delete"));
        assert!(fx.calls.is_empty());
        release(&mut fx, &[res("../x")], Ending::Released, src("delete"));
        assert_eq!(fx.calls, ["held", "record Released delete ../x"]);
    }

    /// Each way a container ends records its own cause (the events and
    /// counters tell a failed runc from a delete).
    #[test]
    fn every_exit_has_its_cause() {
        let causes: Vec<&str> = [
            Exit::CreateFailed,
            Exit::RuncFailed,
            Exit::RunExited,
            Exit::Poststop { bundle: "/b" },
            Exit::Deleted { bundle: None },
        ]
        .iter()
        .map(Exit::cause)
        .collect();
        assert_eq!(
            causes,
            [
                "create-failed",
                "runc-failed",
                "run-exited",
                "poststop",
                "delete"
            ]
        );
    }
}
