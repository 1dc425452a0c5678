use super::*;
use crate::inventory::Gpu;
use crate::request::{GpuRef, GpuSelector, Origin};
use crate::units::Size;
pub(super) const G: u64 = 1 << 30;

pub(super) fn setup() -> (tempfile::TempDir, Config, Inventory) {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        ledger_dir: d.path().into(),
        ..Config::default()
    };
    let inv = Inventory {
        gpus: (0..2)
            .map(|i| Gpu {
                index: i,
                uuid: format!("GPU-{i}"),
                name: "t".into(),
                total_bytes: 16 * G,
                minor: i,
                simulated: true,
            })
            .collect(),
        driver_version: "simulated".into(),
    };
    (d, cfg, inv)
}
pub(super) fn req(b: u64, gpu: Option<u32>) -> Request {
    Request {
        vram: Size::Bytes(b),
        gpus: gpu
            .map(|g| GpuSelector::List(vec![GpuRef::Index(g)]))
            .unwrap_or(GpuSelector::Count(1)),
        origin: Origin::Annotation("vram".into()),
        named_gpus: gpu.is_some(),
        sm: None,
        sm_procs: 0,
        user: Some(0),
        burst: None,
    }
}

/// `l.admit` of `req(bytes, gpu)` for container `id` under `root`, from
/// bundle `/b/<id>`.
pub(super) fn adm(
    l: &Ledger,
    cfg: &Config,
    inv: &Inventory,
    bytes: u64,
    gpu: Option<u32>,
    id: &str,
    root: Option<&str>,
) -> Result<Reservation, LedgerError> {
    l.admit(
        cfg,
        inv,
        &req(bytes, gpu),
        id,
        root,
        &format!("/b/{id}"),
        &mut vec![],
    )
}

#[test]
fn confirm_syncs_the_file_before_the_rename_but_not_the_directory_and_admit_syncs_both() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let mut admit_steps = vec![];
    l.transact_observed(
        |d| {
            let r = Reservation::new("c", None, "/b", vec![], "vram=1g");
            d.reservations.push(r);
            Ok(((), true))
        },
        &mut |s| admit_steps.push(s),
    )
    .unwrap();
    assert_eq!(admit_steps, fsutil::WRITE_STEPS.to_vec());
    let mut steps = vec![];
    let r = l
        .confirm_observed("c", None, "/b", std::process::id(), &mut |s| steps.push(s))
        .unwrap();
    assert_eq!(
        steps,
        fsutil::WRITE_STEPS[..5].to_vec(),
        "fsync'd before the rename, no directory fsync"
    );
    assert_eq!(*steps.last().unwrap(), WriteStep::Renamed);
    assert_eq!(r.state, ResState::Running);
    assert_eq!(l.read().unwrap().reservations, vec![r]);
    let _ = inv;
}

#[test]
fn admit_refuse_release() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    adm(&l, &cfg, &inv, 8 * G, Some(0), "a", None).unwrap();
    adm(&l, &cfg, &inv, 8 * G, Some(0), "b", None).unwrap();
    let before = std::fs::read(l.path()).unwrap();
    let e = adm(&l, &cfg, &inv, 8 * G, Some(0), "c", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("8.00 GiB") && e.contains("GPU 0") && e.contains("only 0 B"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(l.path()).unwrap(),
        before,
        "a refusal leaves the ledger untouched"
    );
    let r = adm(&l, &cfg, &inv, 8 * G, None, "c", None).unwrap();
    assert_eq!(r.slices[0].index, 1);
    assert!(matches!(
        adm(&l, &cfg, &inv, G, None, "c", None),
        Err(LedgerError::Duplicate { .. })
    ));
    assert_eq!(
        l.release(Key::Root {
            id: "a",
            root: None
        })
        .unwrap()
        .len(),
        1
    );
    assert_eq!(
        l.release(Key::Root {
            id: "a",
            root: None
        })
        .unwrap()
        .len(),
        0,
        "idempotent"
    );
    assert_eq!(l.read().unwrap().reservations.len(), 2);
}

#[test]
fn confirm_and_stale_pid_reclaimed() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    adm(&l, &cfg, &inv, 16 * G, Some(0), "a", None).unwrap();
    // a child that exits: its reservation becomes stale
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    let r = l.confirm("a", None, "/b/a", pid).unwrap();
    assert_eq!(r.state, ResState::Running);
    child.wait().unwrap();
    // GPU 0 is full by a dead container: admission reclaims it
    adm(&l, &cfg, &inv, 16 * G, Some(0), "b", None).unwrap();
    let d = l.read().unwrap();
    assert_eq!(d.reservations.len(), 1);
    assert_eq!(d.reservations[0].container_id, "b");
    assert!(matches!(
        l.confirm("zzz", None, "/b/zzz", 1),
        Err(LedgerError::NoReservation { .. })
    ));
}

/// The same id and bundle under two runc roots are two
/// containers; every lookup (duplicate check, confirm, release) keys on
/// the root as well.
#[test]
fn same_id_and_bundle_under_two_roots_are_two_reservations() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let (r1, r2) = (Some("/run/one"), Some("/run/two"));
    for root in [r1, r2] {
        l.admit(
            &cfg,
            &inv,
            &req(G, None),
            "dup",
            root,
            "/b/dup",
            &mut vec![],
        )
        .unwrap();
    }
    assert!(
        matches!(
            l.admit(&cfg, &inv, &req(G, None), "dup", r2, "/b/dup", &mut vec![]),
            Err(LedgerError::Duplicate { .. })
        ),
        "same id, same root: a duplicate"
    );
    // each hook confirms its own root's reservation with its own pid
    let mut c1 = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let mut c2 = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let a = l.confirm("dup", r2, "/b/dup", c2.id()).unwrap();
    let b = l.confirm("dup", r1, "/b/dup", c1.id()).unwrap();
    assert_eq!((a.runtime_root.as_deref(), a.pid), (r2, Some(c2.id())));
    assert_eq!((b.runtime_root.as_deref(), b.pid), (r1, Some(c1.id())));
    let d = l.read().unwrap();
    for (root, pid) in [(r1, c1.id()), (r2, c2.id())] {
        let mine: Vec<_> = d
            .reservations
            .iter()
            .filter(|r| r.runtime_root.as_deref() == root)
            .collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].pid, Some(pid), "{root:?}");
    }
    // neither another root, nor runc's default, nor another bundle matches
    for (root, bundle) in [
        (Some("/run/three"), "/b/dup"),
        (None, "/b/dup"),
        (r1, "/b/other"),
    ] {
        assert!(
            matches!(
                l.confirm("dup", root, bundle, c1.id()),
                Err(LedgerError::NoReservation { .. })
            ),
            "{root:?} {bundle}"
        );
    }
    // releasing one root's container leaves the other's
    let gone = l
        .release(Key::Root {
            id: "dup",
            root: r1,
        })
        .unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].runtime_root.as_deref(), r1);
    let left = l.read().unwrap().reservations;
    assert_eq!(left.len(), 1);
    assert_eq!(
        (left[0].runtime_root.as_deref(), left[0].pid),
        (r2, Some(c2.id()))
    );
    let gone = l
        .release(Key::Hook {
            id: "dup",
            root: r2,
            bundle: "/b/dup",
        })
        .unwrap();
    assert_eq!(gone.len(), 1);
    assert!(l.read().unwrap().reservations.is_empty());
    for c in [&mut c1, &mut c2] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

#[test]
fn corrupt_is_kept_and_reported() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    std::fs::write(l.path(), b"{\"version\":1,\"reserv").unwrap();
    let e = l
        .admit(&cfg, &inv, &req(G, None), "a", None, "/b", &mut vec![])
        .unwrap_err();
    assert!(matches!(e, LedgerError::Corrupt { .. }), "{e}");
    assert_eq!(
        std::fs::read(l.path()).unwrap(),
        b"{\"version\":1,\"reserv",
        "left in place"
    );
    assert!(e.to_string().contains("corrupt"));
    let aside = l.reset_corrupt().unwrap().unwrap();
    assert!(aside.exists());
    l.admit(&cfg, &inv, &req(G, None), "a", None, "/b", &mut vec![])
        .unwrap();
    std::fs::write(l.path(), b"{\"version\":99,\"reservations\":[]}").unwrap();
    assert!(matches!(l.read(), Err(LedgerError::TooNew { .. })));
    // a newer schema this one cannot parse is still "too new", not corrupt
    std::fs::write(l.path(), b"{\"version\":7,\"reservations\":\"elsewhere\"}").unwrap();
    assert!(matches!(
        l.read(),
        Err(LedgerError::TooNew { found: 7, .. })
    ));
    // the same shape at this version is corrupt, with the parse's message
    std::fs::write(l.path(), b"{\"version\":2,\"reservations\":\"elsewhere\"}").unwrap();
    let e = l.read().unwrap_err();
    assert!(
        matches!(e, LedgerError::Corrupt { ref message, .. } if message.contains("invalid type")),
        "{e}"
    );
}

fn dead_reservation(l: &Ledger, cfg: &Config, inv: &Inventory, id: &str, gpu: u32) {
    l.admit(
        cfg,
        inv,
        &req(16 * G, Some(gpu)),
        id,
        None,
        &format!("/b/{id}"),
        &mut vec![],
    )
    .unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    l.confirm(id, None, &format!("/b/{id}"), child.id())
        .unwrap();
    child.wait().unwrap();
}

/// Class 4: reservations reclaimed during an admission were
/// dropped, so their state directories were never removed.
#[test]
fn admission_reports_what_it_reclaimed() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    dead_reservation(&l, &cfg, &inv, "dead", 0);
    let mut reclaimed = vec![];
    l.admit(
        &cfg,
        &inv,
        &req(16 * G, Some(0)),
        "b",
        None,
        "/b/b",
        &mut reclaimed,
    )
    .unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].container_id, "dead");
    // also when the admission is refused after reclaiming
    dead_reservation(&l, &cfg, &inv, "dead2", 1);
    let mut reclaimed = vec![];
    assert!(l
        .admit(
            &cfg,
            &inv,
            &req(17 * G, None),
            "c",
            None,
            "/b/c",
            &mut reclaimed
        )
        .is_err());
    assert_eq!(reclaimed.len(), 1, "the refusal still reports the reclaim");
}

/// Class 4: liveness was judged by pid alone, so `gc` or an
/// admission from another pid namespace saw every live container as dead.
#[test]
fn liveness_is_never_judged_across_namespaces_but_a_new_boot_ends_all() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    adm(&l, &cfg, &inv, G, None, "a", None).unwrap();
    let mut r = l.confirm("a", None, "/b/a", std::process::id()).unwrap();
    assert!(r.pid_ns.is_some() && r.mnt_ns.is_some() && r.boot_id.is_some());
    let now = fsutil::now_unix();
    assert!(!l.is_stale(&r, now), "our own live process");
    // recorded in another pid namespace, with a pid that is dead here
    r.pid = Some(u32::MAX - 7);
    r.pid_ns = Some(1);
    assert!(
        !l.is_stale(&r, now),
        "dead-looking pid of another namespace"
    );
    r.pid_ns = fsutil::namespace_id("pid");
    assert!(l.is_stale(&r, now), "same namespace, dead pid");
    // another mount namespace: the runc state dir check is meaningless
    let mut q = r.clone();
    q.pid = None;
    q.pid_start = None;
    q.created_unix = 0;
    q.mnt_ns = Some(1);
    assert!(!l.is_stale(&q, now));
    // a reservation from an earlier boot is gone, whatever its namespace
    r.pid_ns = Some(1);
    r.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
    assert!(l.is_stale(&r, now));
}

#[test]
fn read_only_use_creates_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        ledger_dir: d.path().join("absent/ledger"),
        ..Config::default()
    };
    let l = Ledger::new(&cfg);
    assert_eq!(l.read().unwrap().reservations.len(), 0);
    assert!(!l.exists());
    assert!(
        !d.path().join("absent").exists(),
        "read() created the directory"
    );
}

#[test]
fn crashed_temps_are_removed_and_corrupt_copies_are_made_once_without_following_links() {
    let (d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let tmp = d.path().join(".ledger.json.tmp.999999");
    std::fs::write(&tmp, b"half").unwrap();
    adm(&l, &cfg, &inv, G, None, "a", None).unwrap();
    assert!(!tmp.exists(), "a crashed write's temp file stays");
    std::fs::write(l.path(), b"{not json").unwrap();
    // a planted link at the copy's name is never written through
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    for _ in 0..3 {
        assert!(matches!(
            adm(&l, &cfg, &inv, G, None, "b", None),
            Err(LedgerError::Corrupt { .. })
        ));
    }
    let copies: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("corrupt"))
        .collect();
    assert_eq!(copies.len(), 1, "one copy per content, not per call");
    let name = copies[0].path();
    std::fs::remove_file(&name).unwrap();
    std::os::unix::fs::symlink(&victim, &name).unwrap();
    let _ = adm(&l, &cfg, &inv, G, None, "b", None);
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // read-only use never writes a copy
    std::fs::remove_file(&name).unwrap();
    assert!(l.read().is_err());
    assert!(!name.exists());
}

#[test]
fn a_symlinked_ledger_dir_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let real = d.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
    let cfg = Config {
        ledger_dir: d.path().join("link"),
        ..Config::default()
    };
    let (_d2, _, inv) = setup();
    let e = Ledger::new(&cfg)
        .admit(&cfg, &inv, &req(G, None), "a", None, "/b/a", &mut vec![])
        .unwrap_err()
        .to_string();
    assert!(e.contains("symlink"), "{e}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

pub(super) fn record_files(l: &Ledger) -> Vec<String> {
    let Some(dir) = l.boot_dir() else {
        return vec![];
    };
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    };
    v.sort();
    v
}

/// A container start (admission, the hook's confirmation) and
/// its release touch only that container's record; ledger.json is written
/// once, to mark the schema that has records.
#[test]
fn a_start_and_a_release_touch_only_their_own_record() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let a = adm(&l, &cfg, &inv, 4 * G, Some(0), "a", Some("/r")).unwrap();
    let json: LedgerData = serde_json::from_slice(&std::fs::read(l.path()).unwrap()).unwrap();
    assert_eq!(
        (json.version, json.reservations.len()),
        (2, 0),
        "the first record marks ledger.json as version 2 (an older release refuses it)"
    );
    let json_before = std::fs::read(l.path()).unwrap();
    adm(&l, &cfg, &inv, 4 * G, Some(0), "b", Some("/r")).unwrap();
    let files = record_files(&l);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().all(|f| f.starts_with("r-")), "{files:?}");
    // the hook's confirmation: the record rewritten, nothing fsync'd
    let mut steps = vec![];
    let c = l
        .confirm_observed("a", Some("/r"), "/b/a", std::process::id(), &mut |s| {
            steps.push(s)
        })
        .unwrap();
    assert_eq!(
        steps,
        [
            WriteStep::TempCreated,
            WriteStep::HalfWritten,
            WriteStep::Written,
            WriteStep::Renamed
        ]
    );
    assert_eq!(
        (c.state, c.pid),
        (ResState::Running, Some(std::process::id()))
    );
    assert_eq!(c.slices, a.slices);
    // an admission reads the other records' names, not their contents:
    // one made unreadable does not stop it (read() reports it)
    let b_path = l.boot_dir().unwrap().join(
        files
            .iter()
            .find(|f| records::parse_name(f).unwrap().key == records::key_hash("b", Some("/r")))
            .unwrap(),
    );
    let b_bytes = std::fs::read(&b_path).unwrap();
    std::fs::write(&b_path, b"{torn").unwrap();
    adm(&l, &cfg, &inv, 8 * G, Some(0), "c", Some("/r"))
        .expect("a fitting admission reads no other record");
    // one that does not fit goes through the whole ledger, which reads b
    // (the 8 GiB left on GPU 0 were counted from b's name: 4 + 4 + 8)
    let e = adm(&l, &cfg, &inv, G, Some(0), "d", Some("/r")).unwrap_err();
    assert!(matches!(e, LedgerError::CorruptRecord { .. }), "{e}");
    assert!(matches!(l.read(), Err(LedgerError::CorruptRecord { .. })));
    std::fs::write(&b_path, &b_bytes).unwrap();
    let e = adm(&l, &cfg, &inv, G, Some(0), "d", Some("/r")).unwrap_err();
    assert!(e.to_string().contains("only 0 B"), "{e}");
    assert!(matches!(
        adm(&l, &cfg, &inv, G, None, "c", Some("/r")),
        Err(LedgerError::Duplicate { .. })
    ));
    assert_eq!(
        std::fs::read(l.path()).unwrap(),
        json_before,
        "ledger.json untouched"
    );
    let gone = l
        .release(Key::Hook {
            id: "a",
            root: Some("/r"),
            bundle: "/b/a",
        })
        .unwrap();
    assert_eq!(gone, vec![c]);
    assert_eq!(record_files(&l).len(), 2);
    assert_eq!(
        std::fs::read(l.path()).unwrap(),
        json_before,
        "ledger.json untouched"
    );
    let held: Vec<String> = l
        .read()
        .unwrap()
        .reservations
        .into_iter()
        .map(|r| r.container_id)
        .collect();
    assert_eq!(held.len(), 2);
    assert!(held.contains(&"b".into()) && held.contains(&"c".into()));
}

/// A whole-ledger transaction (claims, gc) keeps a record a record, and
/// what it adds goes to ledger.json (durable).
#[test]
fn a_whole_ledger_transaction_keeps_records_and_adds_to_ledger_json() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    adm(&l, &cfg, &inv, G, Some(0), "a", None).unwrap();
    let files = record_files(&l);
    l.transact(|d| {
        assert_eq!(d.reservations.len(), 1, "records are part of the data");
        d.reservations
            .push(Reservation::new("j", None, "/b/j", vec![], "vram=1g"));
        d.reservations[0].request = "changed".into();
        Ok(((), true))
    })
    .unwrap();
    assert_eq!(
        record_files(&l),
        files,
        "a changed record stays where it is"
    );
    let json: LedgerData = serde_json::from_slice(&std::fs::read(l.path()).unwrap()).unwrap();
    assert_eq!(json.reservations.len(), 1);
    assert_eq!(json.reservations[0].container_id, "j");
    let all = l.read().unwrap().reservations;
    assert_eq!(
        all.iter().find(|r| r.container_id == "a").unwrap().request,
        "changed"
    );
    // removing both: the record goes, ledger.json keeps nothing
    l.transact(|d| {
        d.reservations.clear();
        Ok(((), true))
    })
    .unwrap();
    assert!(record_files(&l).is_empty());
    assert!(l.read().unwrap().reservations.is_empty());
}

const EARLIER_BOOT: &str = "00000000-0000-0000-0000-000000000000";

/// A record of container `id` (runc root `root`) holding `bytes` on GPU
/// `gpu`, written as an earlier boot left it; returns that boot's
/// directory and the reservation.
fn earlier_boot_record(
    d: &tempfile::TempDir,
    id: &str,
    root: Option<&str>,
    gpu: u32,
    bytes: u64,
) -> (PathBuf, Reservation) {
    let old = d.path().join(format!("boot-{EARLIER_BOOT}"));
    std::fs::create_dir_all(&old).unwrap();
    let mut r = Reservation::new(
        id,
        root,
        format!("/b/{id}"),
        vec![Slice::memory(format!("GPU-{gpu}"), gpu, bytes)],
        "vram",
    );
    r.boot_id = Some(EARLIER_BOOT.into());
    std::fs::write(
        old.join(records::name_of(&r).unwrap()),
        serde_json::to_vec(&r).unwrap(),
    )
    .unwrap();
    (old, r)
}

/// Records of an earlier boot are stale: they place nothing, `gc` takes
/// them back, and one torn by the power loss that ended that boot is
/// removed without an error; this boot's torn record is an error.
#[test]
fn an_earlier_boots_records_are_stale_and_a_torn_one_is_dropped() {
    let (d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let (old, r) = earlier_boot_record(&d, "old", None, 0, 16 * G);
    let torn = Reservation::new("torn", None, "/b/t", vec![], "vram=1g");
    std::fs::write(old.join(records::name_of(&torn).unwrap()), b"").unwrap();
    assert_eq!(l.read().unwrap().reservations, vec![r.clone()]);
    adm(&l, &cfg, &inv, 16 * G, Some(0), "new", None)
        .expect("an earlier boot's record places nothing");
    let gone = l.gc().unwrap();
    assert_eq!(gone, vec![r]);
    assert!(
        !old.exists(),
        "the earlier boot's directory is removed once empty"
    );
    let names = record_files(&l);
    std::fs::write(l.boot_dir().unwrap().join(&names[0]), b"").unwrap();
    assert!(matches!(l.gc(), Err(LedgerError::CorruptRecord { .. })));
}

/// A record of an earlier boot (review of the records change, finding 1):
/// a container started again after a reboot from its old config.json
/// (hook entry included) without a new admission must not revive it — the
/// hook gets no reservation, and the GPU stays admissible in full.
#[test]
fn an_earlier_boots_record_is_never_confirmed_again() {
    let (d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let (old, _) = earlier_boot_record(&d, "job", Some("/r"), 0, 16 * G);
    assert!(matches!(
        l.confirm("job", Some("/r"), "/b/job", std::process::id()),
        Err(LedgerError::NoReservation { .. })
    ));
    l.admit(
        &cfg,
        &inv,
        &req(16 * G, Some(0)),
        "other",
        Some("/r"),
        "/b/o",
        &mut vec![],
    )
    .unwrap();
    // a whole-ledger change to an earlier boot's record lands in ledger.json
    // (counted by every admission), never back in that boot's directory
    l.transact(|d| {
        let r = d
            .reservations
            .iter_mut()
            .find(|r| r.container_id == "job")
            .unwrap();
        r.request = "changed".into();
        Ok(((), true))
    })
    .unwrap();
    assert!(
        !old.exists(),
        "the earlier boot's directory is gone, its record moved"
    );
    let json: LedgerData = serde_json::from_slice(&std::fs::read(l.path()).unwrap()).unwrap();
    assert_eq!(json.reservations[0].container_id, "job");
}

/// An id reused after a reboot (review finding 2): the new admission
/// replaces the earlier boot's reservation of the same id and root.
#[test]
fn an_id_reused_after_a_reboot_is_held_once() {
    let (d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    earlier_boot_record(&d, "job", Some("/r"), 1, G);
    let new = adm(&l, &cfg, &inv, G, Some(0), "job", Some("/r")).unwrap();
    let same: Vec<_> = l
        .read()
        .unwrap()
        .reservations
        .into_iter()
        .filter(|x| x.container_id == "job")
        .collect();
    assert_eq!(same, vec![new]);
    assert!(l.exists());
}

/// Second review: a stale copy of a container's key listed first (left by
/// a crash between a whole-ledger write's steps, or by the first version
/// of the records change) must not hide the live one, which the admission
/// would then drop with every other match.
#[test]
fn a_stale_copy_listed_first_does_not_hide_a_live_reservation() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let live = adm(&l, &cfg, &inv, 8 * G, Some(0), "job", Some("/r")).unwrap();
    l.confirm("job", Some("/r"), "/b/job", std::process::id())
        .unwrap();
    let mut stale = live.clone();
    stale.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
    stale.created_unix = 1;
    let j = LedgerData {
        version: 2,
        reservations: vec![stale],
    };
    std::fs::write(l.path(), serde_json::to_vec(&j).unwrap()).unwrap();
    assert!(matches!(
        adm(&l, &cfg, &inv, 4 * G, Some(0), "job", Some("/r")),
        Err(LedgerError::Duplicate { .. })
    ));
    assert!(l
        .read()
        .unwrap()
        .reservations
        .iter()
        .any(|r| r.pid == Some(std::process::id())));
}

/// `gc --reset-corrupt` keeps the schema mark (an older release still
/// refuses the records), and a ledger of records alone exists and reads.
#[test]
fn a_reset_keeps_the_schema_mark_and_records_alone_are_a_ledger() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    l.admit(
        &cfg,
        &inv,
        &req(G, Some(0)),
        "a",
        Some("/r"),
        "/b",
        &mut vec![],
    )
    .unwrap();
    std::fs::write(l.path(), b"{\"version\":2,\"reserv").unwrap();
    let aside = l.reset_corrupt().unwrap().unwrap();
    assert_eq!(std::fs::read(aside).unwrap(), b"{\"version\":2,\"reserv");
    let j: LedgerData = serde_json::from_slice(&std::fs::read(l.path()).unwrap()).unwrap();
    assert_eq!((j.version, j.reservations.len()), (2, 0));
    std::fs::remove_file(l.path()).unwrap();
    assert!(l.exists());
    assert_eq!(l.read().unwrap().reservations.len(), 1);
}
