//! The daemons' start, stop and limits against a recording control.
use super::*;
use std::cell::RefCell;

/// Daemons as a set of GPUs, and what was asked of them.
#[derive(Default)]
struct Fake {
    running: RefCell<BTreeSet<String>>,
    log: RefCell<Vec<String>>,
    /// GPUs whose daemon does not quit
    stuck: BTreeSet<String>,
    /// each GPU's client limit, as set
    limits: RefCell<BTreeMap<String, String>>,
}
fn gpu_of(d: &Dirs) -> String {
    d.root.file_name().unwrap().to_str().unwrap().to_string()
}
impl Control for Fake {
    fn answers(&self, d: &Dirs) -> bool {
        self.running.borrow().contains(&gpu_of(d))
    }
    fn start(&self, uuid: &str, d: &Dirs) -> Result<(), String> {
        assert!(d.pipe.is_dir() && d.log.is_dir(), "directories first");
        self.log.borrow_mut().push(format!("start {uuid}"));
        self.running.borrow_mut().insert(uuid.into());
        Ok(())
    }
    fn kill(&self, d: &Dirs) {
        self.log.borrow_mut().push(format!("kill {}", gpu_of(d)));
        self.running.borrow_mut().remove(&gpu_of(d));
    }
    fn quit(&self, d: &Dirs) -> Result<(), String> {
        if self.stuck.contains(&gpu_of(d)) {
            return Err("still there".into());
        }
        self.log.borrow_mut().push(format!("quit {}", gpu_of(d)));
        self.running.borrow_mut().remove(&gpu_of(d));
        Ok(())
    }
    fn limit(&self, d: &Dirs, pct: ClientShare) -> Result<(), String> {
        if self.stuck.contains(&gpu_of(d)) {
            return Err("no answer".into());
        }
        let v = pct.value().as_str().to_string();
        self.limits.borrow_mut().insert(gpu_of(d), v);
        Ok(())
    }
}

fn cfg(t: &Path) -> Config {
    Config {
        state_dir: t.join("state"),
        ..Config::default()
    }
}

#[test]
fn one_daemon_per_gpu_from_the_first_share_to_the_last() {
    let t = tempfile::tempdir().unwrap();
    let c = cfg(t.path());
    let f = Fake::default();
    let d = ensure(&c, "GPU-a", &f).unwrap();
    assert_eq!(d.pipe, c.state_dir.join("mps/GPU-a/pipe"));
    ensure(&c, "GPU-a", &f).unwrap();
    ensure(&c, "GPU-b", &f).unwrap();
    assert_eq!(*f.log.borrow(), ["start GPU-a", "start GPU-b"], "once each");
    // GPU-a still has a share: only GPU-b's daemon goes, with its directory
    let s = settle(&c, || Some(["GPU-a".to_string()].into()), false, &f).unwrap();
    assert_eq!(s.stopped, ["GPU-b"]);
    assert!(!c.state_dir.join("mps/GPU-b").exists());
    assert!(c.state_dir.join("mps/GPU-a/pipe").is_dir());
    // a ledger that does not read stops nothing
    let s = settle(&c, || None, false, &f).unwrap();
    assert!(s.started.is_empty() && s.stopped.is_empty() && s.failed.is_empty());
    // the daemon died; gc starts it again where shares are
    f.running.borrow_mut().clear();
    let s = settle(&c, || Some(["GPU-a".to_string()].into()), true, &f).unwrap();
    assert_eq!(s.started, ["GPU-a"]);
    let s = settle(&c, || Some(BTreeSet::new()), false, &f).unwrap();
    assert_eq!(s.stopped, ["GPU-a"]);
    assert_eq!(f.log.borrow().last().unwrap(), "quit GPU-a");
    assert!(f.running.borrow().is_empty());
}

#[test]
fn one_gpu_that_fails_does_not_stop_the_others() {
    let t = tempfile::tempdir().unwrap();
    let c = cfg(t.path());
    let f = Fake {
        stuck: ["GPU-a".to_string()].into(),
        ..Fake::default()
    };
    for g in ["GPU-a", "GPU-b"] {
        ensure(&c, g, &f).unwrap();
    }
    let s = settle(&c, || Some(BTreeSet::new()), false, &f).unwrap();
    assert_eq!(s.stopped, ["GPU-b"], "GPU-b after GPU-a's failure");
    assert_eq!(s.failed.len(), 1);
    assert!(
        c.state_dir.join("mps/GPU-a").exists(),
        "a daemon that did not quit keeps its directory"
    );
    assert!(!c.state_dir.join("mps/GPU-b").exists());
}

#[test]
fn only_the_pipe_directory_is_open_to_others() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let c = cfg(t.path());
    let d = ensure(&c, "GPU-a", &Fake::default()).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&base(&c)), 0o700);
    assert_eq!(mode(&d.root), 0o700);
    assert_eq!(mode(&d.log), 0o700);
    assert_eq!(mode(&d.pipe), 0o755);
    // the containers' view of it (view.rs)
    assert_eq!(mode(&view::dir(&d)), 0o755);
}

#[test]
fn a_socket_path_past_sun_path_is_refused_before_a_daemon_starts() {
    let t = tempfile::tempdir().unwrap();
    let c = Config {
        state_dir: t.path().join("x".repeat(80)),
        ..Config::default()
    };
    let f = Fake::default();
    let e = ensure(&c, "GPU-a", &f).unwrap_err().to_string();
    assert!(e.contains("control_privileged") && e.contains("107"), "{e}");
    assert!(f.log.borrow().is_empty(), "no daemon started");
    assert!(!base(&c).exists());
    // the path Config::parse checks is the one a daemon makes
    let uuid = format!("GPU-{}", "0".repeat(names::GPU_UUID_LEN - 4));
    assert_eq!(
        dirs(&c, &uuid).unwrap().pipe.join(names::LONGEST_SOCKET),
        crate::config::longest_mps_socket(&c.state_dir)
    );
}

/// A process that bypasses libgpuquota.so sets its own percentage, which
/// MPS lets only lower its daemon's limit: each GPU's daemon is limited
/// to the largest part of a share there, a share split over its
/// processes.
#[test]
fn each_daemon_bounds_its_clients_by_the_largest_part_of_a_share() {
    use crate::ledger::{LedgerData, Reservation};
    let t = tempfile::tempdir().unwrap();
    let c = cfg(t.path());
    let share = |id: &str, gpu: &str, sm: u32, procs: u32| {
        Reservation::new(
            id,
            None,
            "/b",
            vec![crate::placement::Slice {
                uuid: gpu.into(),
                index: 0,
                vram_bytes: 1 << 30,
                sm_percent: sm,
                sm_user: Some(0),
                sm_procs: procs,
                burst: None,
            }],
            "",
        )
    };
    let data = LedgerData {
        reservations: vec![
            share("a", "GPU-a", 25, 4),
            share("b", "GPU-a", 20, 1),
            share("c", "GPU-b", 75, 3),
            share("d", "GPU-c", 50, 2),
        ],
        ..LedgerData::default()
    };
    let limits = client_limits(&data);
    let as_text = |m: &BTreeMap<String, ClientShare>| -> Vec<(String, String)> {
        m.iter()
            .map(|(g, p)| (g.clone(), p.value().as_str().to_string()))
            .collect()
    };
    assert_eq!(
        as_text(&limits),
        [
            ("GPU-a".to_string(), "20".to_string()),
            ("GPU-b".into(), "25".into()),
            ("GPU-c".into(), "25".into()),
        ]
    );
    let f = Fake {
        stuck: ["GPU-b".to_string()].into(),
        ..Fake::default()
    };
    // no daemon yet: nothing to bound, no directory made
    assert!(limit_clients(&c, || Some(limits.clone()), &f)
        .unwrap()
        .is_empty());
    assert!(!base(&c).exists());
    ensure(&c, "GPU-a", &f).unwrap();
    ensure(&c, "GPU-b", &f).unwrap();
    let failed = limit_clients(&c, || Some(limits.clone()), &f).unwrap();
    assert_eq!(
        *f.limits.borrow(),
        BTreeMap::from([("GPU-a".to_string(), "20".to_string())]),
        "GPU-c has no daemon that answers"
    );
    assert_eq!(failed.len(), 1, "GPU-b's daemon did not take it");
    assert!(failed[0].to_string().contains("25%"), "{}", failed[0]);
    // a share leaves: the limit follows the shares that are left
    let data = LedgerData {
        reservations: vec![share("a", "GPU-a", 25, 4)],
        ..LedgerData::default()
    };
    limit_clients(&c, || Some(client_limits(&data)), &f).unwrap();
    assert_eq!(f.limits.borrow()["GPU-a"], "6.25");
}

#[test]
fn names_that_are_not_gpus_name_no_directory() {
    let t = tempfile::tempdir().unwrap();
    let c = cfg(t.path());
    for bad in ["", "..", "GPU-a/../../x", "a b"] {
        assert!(dirs(&c, bad).is_none(), "{bad:?}");
        assert!(ensure(&c, bad, &Fake::default()).is_err(), "{bad:?}");
    }
    // a stray file or directory under mps/ that is no GPU is left alone
    std::fs::create_dir_all(c.state_dir.join("mps/not a gpu")).unwrap();
    let f = Fake::default();
    let s = settle(&c, || Some(BTreeSet::new()), false, &f).unwrap();
    assert!(s.started.is_empty() && s.stopped.is_empty() && s.failed.is_empty());
}
