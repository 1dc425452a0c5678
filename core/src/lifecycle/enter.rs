//! enter: the hook's createRuntime, after runc made the container's
//! namespaces and mounts, before pivot_root. It acts on **the reservation
//! made at prepare** (found by id, runc root and bundle, confirmed with the
//! container's pid), never on a second reading of the request under the
//! host policy of its own moment: the state directory is filled (the
//! limits, with the context charge), the r615 driver limit set, and the
//! mount plan (`mountplan::plan`) carried out inside the container's mount
//! namespace. Everything that touches the host is an [`EnterEffects`]
//! call, so the sequence is tested without root; [`HostEnter`] is this
//! host's (the helper children run there: `measure-context`,
//! `driver-limits set`).
use super::{admit, Bundle, Container, LifecycleError};
use crate::{
    config::Config,
    ctxcost,
    driver::{self, DriverFiles},
    drvlimit,
    ledger::LedgerError,
    mountplan::{self, Declared, Op},
    paths,
    rootfs::{MountEffects, Rootfs},
    spec, state, Ledger, Reservation,
};
use std::path::{Path, PathBuf};

/// What the hook was given: the OCI state's id and pid, its own `--root`
/// argument, the bundle.
#[derive(Debug)]
pub struct Entry<'a> {
    pub id: &'a str,
    /// `None`: the hook's entry has no `--root RUNC_ROOT` (written by an
    /// older runtime, or by hand).
    pub root: Option<&'a str>,
    pub pid: Option<u32>,
    pub bundle: &'a Bundle,
}

/// enter's outcome (a failure is the `Err`, and fails the container).
// one value per hook process: the larger variant is not worth a box
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub enum Entered {
    /// A container gpu-quota-runtime did not prepare: nothing to do.
    NotOurs,
    /// No reservation under this key: nothing was added; the line says why.
    NoReservation(String),
    /// The reservation confirmed, its state filled, the plan carried out.
    Mounted(Reservation),
}

/// The effects of enter, in the order [`enter`] calls them.
pub trait EnterEffects {
    /// The reservation made at prepare for `c` from `bundle`, confirmed
    /// with the container's `pid`.
    fn confirm(
        &mut self,
        c: &Container<'_>,
        bundle: &Bundle,
        pid: u32,
    ) -> Result<Reservation, LedgerError>;
    /// The host's driver files.
    fn driver_files(&mut self) -> Result<DriverFiles, LifecycleError>;
    /// The interceptor to bind into the container.
    fn interceptor(&mut self) -> Result<PathBuf, LifecycleError>;
    /// `context_overhead_bytes` for `r`'s limits.
    fn context_charge(
        &mut self,
        files: &DriverFiles,
        r: &Reservation,
    ) -> Result<u64, LifecycleError>;
    /// Fill the state directory `dir`, made by the runtime at prepare.
    fn fill_state(
        &mut self,
        dir: &Path,
        r: &Reservation,
        files: &DriverFiles,
        charge: u64,
    ) -> Result<(), LifecycleError>;
    /// Set the driver limit (r615+) and record it in `dir`. Never fatal:
    /// the interceptor enforces either way.
    fn driver_limits(&mut self, files: &DriverFiles, dir: &Path, r: &Reservation, pid: u32);
    /// Enter the mount namespace of `pid` and carry out `plan` on `rootfs`
    /// (whose declared mounts are `declared`).
    fn mount(
        &mut self,
        c: &Container<'_>,
        pid: u32,
        rootfs: &Path,
        declared: Vec<Declared>,
        plan: &[Op],
    ) -> Result<(), LifecycleError>;
}

/// The hook's createRuntime for the container `e` names.
pub fn enter(
    cfg: &Config,
    e: &Entry<'_>,
    program: &str,
    fx: &mut dyn EnterEffects,
) -> Result<Entered, LifecycleError> {
    let prepared = e.bundle.prepared_by_runtime();
    let Some(root) = e.root else {
        if !prepared {
            return Ok(Entered::NotOurs);
        }
        // given GPU devices, but its reservation cannot be told from
        // another one's with the same id: fail closed
        return Err(LifecycleError::NoHookKey {
            id: e.id.into(),
            config: e.bundle.config_path(),
        });
    };
    admit::checks(cfg, e.bundle, e.id)?;
    let pid = e.pid.ok_or(LifecycleError::NoPid)?;
    let c = Container {
        id: e.id,
        root: Some(root),
        program,
    };
    let r = match fx.confirm(&c, e.bundle, pid) {
        Ok(r) => r,
        // prepared for a reservation that is not there: fail closed (the
        // container has its GPU devices but no slice)
        Err(err) if prepared => return Err(err.into()),
        Err(LedgerError::NoReservation { .. }) => {
            return Ok(Entered::NoReservation(format!(
                "container {} has no reservation under runc root {root}: nothing added",
                e.id
            )))
        }
        Err(err) => return Err(err.into()),
    };
    let files = fx.driver_files()?;
    let interceptor = fx.interceptor()?;
    // made by gpu-quota-runtime before runc cloned the container's mount
    // namespace (so its tmpfs is visible there); filled in here
    let dir = state::container_dir(cfg, &r);
    let charge = fx.context_charge(&files, &r)?;
    fx.fill_state(&dir, &r, &files, charge)?;
    fx.driver_limits(&files, &dir, &r, pid);
    // its daemon was made to answer at create (lifecycle::prepare); the
    // container gets the view of its pipe directory (the client socket only)
    let pipe = r
        .share()
        .and_then(|s| crate::mps::dirs(cfg, &s.uuid))
        .map(|d| crate::mps::view::dir(&d));
    let plan = mountplan::plan(&dir, &files, &interceptor, pipe.as_deref());
    let rootfs = spec::rootfs_path(&e.bundle.dir, &e.bundle.config);
    let declared = Declared::from_config(&e.bundle.config);
    fx.mount(&c, pid, &rootfs, declared, &plan)?;
    Ok(Entered::Mounted(r))
}

/// enter's effects on this host, for `cfg`.
pub struct HostEnter<'a> {
    pub cfg: &'a Config,
}

impl HostEnter<'_> {
    fn warn(&self, msg: std::fmt::Arguments<'_>) {
        eprintln!("gpu-quota-hook: {msg}");
    }
}

impl EnterEffects for HostEnter<'_> {
    fn confirm(
        &mut self,
        c: &Container<'_>,
        bundle: &Bundle,
        pid: u32,
    ) -> Result<Reservation, LedgerError> {
        Ledger::new(self.cfg).confirm_hinted(
            c.id,
            Some(c.runc_root()),
            &bundle.dir.to_string_lossy(),
            pid,
            spec::record_hint(&bundle.config),
            &mut |_| {},
        )
    }

    fn driver_files(&mut self) -> Result<DriverFiles, LifecycleError> {
        Ok(driver::discover(&self.cfg.driver)?)
    }

    fn interceptor(&mut self) -> Result<PathBuf, LifecycleError> {
        paths::interceptor(self.cfg)
            .ok_or_else(|| LifecycleError::NoInterceptor(Config::path_from_env()))
    }

    fn context_charge(
        &mut self,
        files: &DriverFiles,
        r: &Reservation,
    ) -> Result<u64, LifecycleError> {
        let uuids: Vec<&str> = r.slices.iter().map(|s| s.uuid.as_str()).collect();
        let res = ctxcost::for_container(self.cfg, files, &uuids)?;
        if let ctxcost::Source::MeasureFailed(e) = &res.source {
            self.warn(format_args!(
                "warning: measuring the CUDA context failed ({e}); charging the built-in {} MiB (set context_overhead to override)",
                res.bytes >> 20
            ));
        }
        Ok(res.bytes)
    }

    fn fill_state(
        &mut self,
        dir: &Path,
        r: &Reservation,
        files: &DriverFiles,
        charge: u64,
    ) -> Result<(), LifecycleError> {
        state::fill(dir, r, files, charge).map_err(|err| LifecycleError::State {
            path: dir.into(),
            err,
        })
    }

    fn driver_limits(&mut self, files: &DriverFiles, dir: &Path, r: &Reservation, pid: u32) {
        let Some(nvml) = driver::libnvml_of(files) else {
            return;
        };
        let gpus = drvlimit::limits_of(r);
        let rec = match drvlimit::set_for_container(self.cfg, &nvml, pid, &gpus) {
            Ok(Some(rec)) => rec,
            Ok(None) => return,
            // cgroup v1 is the host's, not this container's: doctor says it
            Err(e) if !e.per_container() => return,
            Err(e) => return self.warn(format_args!("driver limits not set: {e}")),
        };
        // the marker first: the runtime's `delete` looks for a record only
        // where the marker exists
        let m = drvlimit::active_marker(self.cfg);
        if !m.exists() {
            if let Err(e) = crate::fsutil::write_atomic(&m, b"", 0o644) {
                self.warn(format_args!("driver limits set but {} not written ({e}); the runtime's `delete` will not clear them", m.display()));
            }
        }
        let bytes = serde_json::to_vec(&rec).expect("serializable");
        if let Err(e) = crate::fsutil::write_atomic(&dir.join(drvlimit::RECORD_FILE), &bytes, 0o644)
        {
            self.warn(format_args!("driver limits set but not recorded: {e}"));
        }
    }

    fn mount(
        &mut self,
        c: &Container<'_>,
        pid: u32,
        rootfs: &Path,
        declared: Vec<Declared>,
        plan: &[Op],
    ) -> Result<(), LifecycleError> {
        enter_mount_ns(pid)?;
        let failed = |err| LifecycleError::Mount {
            id: c.id.into(),
            rootfs: rootfs.into(),
            err,
        };
        let mut fx = MountEffects {
            rootfs: Rootfs::open(rootfs)
                .map_err(failed)?
                .with_declared(declared),
        };
        mountplan::execute(plan, &mut fx).map_err(failed)
    }
}

/// Join the container's mount namespace (the hook is single-threaded).
fn enter_mount_ns(pid: u32) -> Result<(), LifecycleError> {
    use std::os::fd::AsFd;
    let path = PathBuf::from(format!("/proc/{pid}/ns/mnt"));
    let ns = |err| LifecycleError::EnterNamespace {
        path: path.clone(),
        err,
    };
    let f = std::fs::File::open(&path).map_err(ns)?;
    nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| ns(std::io::Error::from(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every effect logged; `confirm` answers `reservation`.
    struct Log {
        calls: Vec<String>,
        reservation: Option<Reservation>,
    }
    impl EnterEffects for Log {
        fn confirm(
            &mut self,
            c: &Container<'_>,
            _: &Bundle,
            pid: u32,
        ) -> Result<Reservation, LedgerError> {
            self.calls
                .push(format!("confirm {} {} {pid}", c.id, c.runc_root()));
            self.reservation
                .clone()
                .ok_or_else(|| LedgerError::NoReservation {
                    id: c.id.into(),
                    root: c.runc_root().into(),
                    bundle: "/b".into(),
                })
        }
        fn driver_files(&mut self) -> Result<DriverFiles, LifecycleError> {
            self.calls.push("driver files".into());
            Ok(DriverFiles {
                libs: vec![],
                bins: vec![],
            })
        }
        fn interceptor(&mut self) -> Result<PathBuf, LifecycleError> {
            self.calls.push("interceptor".into());
            Ok("/lib/libgpuquota.so".into())
        }
        fn context_charge(
            &mut self,
            _: &DriverFiles,
            _: &Reservation,
        ) -> Result<u64, LifecycleError> {
            self.calls.push("charge".into());
            Ok(7)
        }
        fn fill_state(
            &mut self,
            dir: &Path,
            _: &Reservation,
            _: &DriverFiles,
            charge: u64,
        ) -> Result<(), LifecycleError> {
            let name = dir.file_name().unwrap().to_string_lossy();
            self.calls
                .push(format!("fill {} {charge}", name.split('-').next().unwrap()));
            Ok(())
        }
        fn driver_limits(&mut self, _: &DriverFiles, _: &Path, _: &Reservation, pid: u32) {
            self.calls.push(format!("limits {pid}"));
        }
        fn mount(
            &mut self,
            c: &Container<'_>,
            pid: u32,
            rootfs: &Path,
            _: Vec<Declared>,
            plan: &[Op],
        ) -> Result<(), LifecycleError> {
            assert!(!plan.is_empty());
            self.calls
                .push(format!("mount {} {pid} {}", c.id, rootfs.display()));
            Ok(())
        }
    }

    fn bundle(config: serde_json::Value) -> (tempfile::TempDir, Bundle) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.json"), config.to_string()).unwrap();
        let b = Bundle::load(d.path()).unwrap();
        (d, b)
    }
    fn prepared() -> serde_json::Value {
        json!({"root": {"path": "/r"}, "annotations": {spec::ASSIGNED_ANNOTATION: "GPU-1"}})
    }
    fn res() -> Reservation {
        Reservation::new("c1", Some("/run/one"), "/b", vec![], "vram=1g")
    }
    fn log(r: Option<Reservation>) -> Log {
        Log {
            calls: vec![],
            reservation: r,
        }
    }

    #[test]
    fn the_reservation_is_confirmed_then_state_limits_and_mounts_in_order() {
        let (_d, b) = bundle(prepared());
        let mut fx = log(Some(res()));
        let e = Entry {
            id: "c1",
            root: Some("/run/one"),
            pid: Some(42),
            bundle: &b,
        };
        let out = enter(&Config::default(), &e, "test", &mut fx).unwrap();
        assert_eq!(out, Entered::Mounted(res()));
        assert_eq!(
            fx.calls,
            [
                "confirm c1 /run/one 42",
                "driver files",
                "interceptor",
                "charge",
                "fill c1 7",
                "limits 42",
                "mount c1 42 /r"
            ]
        );
    }

    #[test]
    fn without_a_reservation_nothing_is_added_unless_the_runtime_prepared_it() {
        let (_d, plain) = bundle(json!({}));
        let e = Entry {
            id: "c1",
            root: Some("/run/one"),
            pid: Some(42),
            bundle: &plain,
        };
        let mut fx = log(None);
        let out = enter(&Config::default(), &e, "test", &mut fx).unwrap();
        assert!(matches!(out, Entered::NoReservation(m) if m.contains("/run/one")));
        assert_eq!(fx.calls, ["confirm c1 /run/one 42"]);
        // prepared by the runtime, so given GPU devices: fail closed
        let (_d, b) = bundle(prepared());
        let mut fx = log(None);
        let e = Entry { bundle: &b, ..e };
        assert!(matches!(
            enter(&Config::default(), &e, "test", &mut fx),
            Err(LifecycleError::Ledger(LedgerError::NoReservation { .. }))
        ));
        assert_eq!(fx.calls.len(), 1, "nothing after the confirmation");
    }

    #[test]
    fn without_the_key_argument_only_an_unprepared_container_passes() {
        let (_d, plain) = bundle(json!({}));
        let mut fx = log(Some(res()));
        let e = Entry {
            id: "c1",
            root: None,
            pid: Some(42),
            bundle: &plain,
        };
        assert_eq!(
            enter(&Config::default(), &e, "test", &mut fx).unwrap(),
            Entered::NotOurs
        );
        let (_d, b) = bundle(prepared());
        let e = Entry { bundle: &b, ..e };
        let err = enter(&Config::default(), &e, "test", &mut fx).unwrap_err();
        assert!(matches!(err, LifecycleError::NoHookKey { .. }), "{err}");
        assert!(
            fx.calls.is_empty(),
            "no reservation touched without its key"
        );
    }

    /// The checks prepare makes are made again before the ledger: an id
    /// that cannot name a directory, a declared mount over a path the hook
    /// writes; then a pid.
    #[test]
    fn bad_ids_declared_conflicts_and_no_pid_stop_before_the_ledger() {
        let (_d, b) = bundle(prepared());
        let mut fx = log(Some(res()));
        let e = Entry {
            id: "../x",
            root: Some("/run/one"),
            pid: Some(42),
            bundle: &b,
        };
        let cfg = Config::default();
        assert!(matches!(
            enter(&cfg, &e, "t", &mut fx),
            Err(LifecycleError::BadId(_))
        ));
        let mut over = prepared();
        over["mounts"] = json!([{"destination": "/run/gpu-quota", "type": "bind", "source": "/host/dir", "options": ["rbind"]}]);
        let (_d2, b2) = bundle(over);
        let e2 = Entry {
            id: "c1",
            bundle: &b2,
            ..e
        };
        assert!(matches!(
            enter(&cfg, &e2, "t", &mut fx),
            Err(LifecycleError::MountConflict(_))
        ));
        let e3 = Entry {
            id: "c1",
            pid: None,
            ..e
        };
        assert!(matches!(
            enter(&cfg, &e3, "t", &mut fx),
            Err(LifecycleError::NoPid)
        ));
        assert!(fx.calls.is_empty());
    }
}
