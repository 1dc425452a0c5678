//! The update phase against one fake 16 GiB GPU: a repair racing a live
//! resize, every path that changes a reservation racing every other, and
//! a crash at each write of a resize.
use super::*;
use crate::config::LogTarget;
use crate::inventory::Gpu;
use crate::lifecycle::held::{self, DriverView};
use crate::request::Request;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

const G: u64 = 1 << 30;
const CAPACITY: u64 = 16 * G;
const UUID: &str = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";

struct Host {
    _d: tempfile::TempDir,
    cfg: Config,
    inv: Inventory,
}

fn host() -> Host {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        ledger_dir: d.path().join("ledger"),
        state_dir: d.path().join("state"),
        // the test's containers are never confirmed: none goes stale
        create_grace_secs: 1 << 30,
        log: LogTarget::Off,
        ..Config::default()
    };
    let inv = Inventory {
        gpus: vec![Gpu {
            index: 0,
            uuid: UUID.into(),
            name: "Fake".into(),
            total_bytes: CAPACITY,
            minor: 0,
            simulated: true,
        }],
        driver_version: "simulated".into(),
    };
    Host { _d: d, cfg, inv }
}

fn key(id: &str) -> Key<'_> {
    Key::Root { id, root: None }
}

fn request(bytes: u64) -> Request {
    Request::slice_for_test(bytes, 0)
}

fn admit(h: &Host, id: &str, bytes: u64) -> Result<Reservation, LedgerError> {
    Ledger::new(&h.cfg).admit(
        &h.cfg,
        &h.inv,
        &request(bytes),
        id,
        None,
        &format!("/b/{id}"),
        &mut vec![],
    )
}

/// Admit `id` and give it the state directory and grant file the runtime
/// would (its live limit).
fn start(h: &Host, id: &str, bytes: u64) {
    let r = admit(h, id, bytes).unwrap();
    let dir = state::container_dir(&h.cfg, &r);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(grant::FILE_NAME),
        grantfile::bytes(&r.slices).unwrap(),
    )
    .unwrap();
}

/// The container's live limit: the word of its grant file.
fn live(h: &Host, id: &str) -> u64 {
    let r = Reservation::new(id, None, format!("/b/{id}"), vec![], "");
    let t = grantfile::read(&state::container_dir(&h.cfg, &r).join(grant::FILE_NAME)).unwrap();
    t.gpus()[0].vram_bytes
}

/// The container's reservations as the ledger shows them (bytes,
/// marker), read without writing anything.
fn held(h: &Host, id: &str) -> Vec<(u64, bool)> {
    Ledger::new(&h.cfg)
        .read()
        .unwrap()
        .reservations
        .iter()
        .filter(|r| r.container_id == id)
        .map(|r| (r.slices[0].vram_bytes, r.resizing.is_some()))
        .collect()
}

/// What the ledger counts on the GPU, read under its lock.
fn sum(h: &Host) -> u64 {
    Ledger::new(&h.cfg)
        .transact(|d| Ok((d.usage().get(UUID).map_or(0, |u| u.bytes), false)))
        .unwrap()
}

/// The record files of container `id` in this boot's directory.
fn records_of(h: &Host, id: &str) -> Vec<String> {
    let boot = crate::fsutil::boot_id().expect("a boot id");
    let dir = h.cfg.ledger_dir.join(format!("boot-{boot}"));
    let prefix = format!("r-{:016x}-", crate::ledger::records::key_hash(id, None));
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    v.sort();
    v
}

fn src() -> events::Source<'static> {
    events::Source {
        program: "test",
        engine: "runc",
        cause: "test",
    }
}

fn resize_a(
    h: &Host,
    to: u64,
    observe: &mut dyn FnMut(Step),
) -> Result<Option<Resized>, UpdateError> {
    resize_observed(
        &h.cfg,
        &h.inv,
        &ContextCosts::default(),
        key("a"),
        None,
        Size::Bytes(to),
        "the test",
        src(),
        &NothingHeld,
        observe,
    )
}

/// These tests are about markers, locks and crashes, not a shrink's
/// floor: the host's account (NVML's per-process memory) is not there, so
/// each container is measured as holding nothing.
struct NothingHeld;

impl crate::lifecycle::held::Measure for NothingHeld {
    fn held_on(&self, _: &Config, _: &Path, _: &Reservation, _: &str) -> held::Held {
        held::Held {
            file: (0, String::new()),
            driver: Ok(DriverView::default()),
        }
    }
}

/// What `gpu-quota gc` does to the ledger: the repair, then the reclaim.
fn gc(h: &Host) {
    repair(&h.cfg).unwrap();
    Ledger::new(&h.cfg).gc().unwrap();
}

/// A resize running in its own thread, held after [`Step::Begun`].
struct Held<'scope> {
    thread: std::thread::ScopedJoinHandle<'scope, Result<Option<Resized>, UpdateError>>,
    go: mpsc::Sender<()>,
}

impl Held<'_> {
    /// Let it run to its end; (from, to) of what it did.
    fn finish(self) -> (u64, u64) {
        self.go.send(()).unwrap();
        let r = self.thread.join().unwrap().unwrap().unwrap();
        (r.from, r.to)
    }
}

/// Start a resize of "a" to `to` and return once it has begun (its
/// marker written, its lock held).
fn held_resize<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    h: &'scope Host,
    to: u64,
) -> Held<'scope> {
    let (at_tx, at) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let thread = s.spawn(move || {
        resize_a(h, to, &mut |step| {
            if step == Step::Begun {
                at_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            }
        })
    });
    at.recv().unwrap();
    Held { thread, go }
}

/// A repair that read the ledger while a shrink was under way, and acts
/// after the shrink ended, leaves the container at the shrunk size: it
/// does not put back the size it read.
#[test]
fn a_repair_that_read_a_live_shrink_does_not_undo_it() {
    let h = host();
    start(&h, "a", 8 * G);
    std::thread::scope(|s| {
        let mut shrink = Some(held_resize(s, &h, 4 * G));
        repair_observed(&h.cfg, &mut |step| {
            if step == RepairStep::Read {
                // the repair has read 8 GiB and the shrink's marker
                let done = shrink.take().unwrap().finish();
                assert_eq!(done, (8 * G, 4 * G));
            }
        })
        .unwrap();
    });
    assert_eq!(held(&h, "a"), vec![(4 * G, false)]);
    assert_eq!(live(&h, "a"), 4 * G, "the live limit is the ledger's");
}

/// The interleaving security round 4 found: a repair reads during a
/// shrink; the shrink ends, another container takes what it freed, a
/// second shrink begins; then the repair acts. It must neither give the
/// container the size it read nor end the second shrink's marker (which
/// wrote that old size back to the ledger: 20 GiB on a 16 GiB GPU, and
/// the second shrink reported success).
#[test]
fn a_repair_never_ends_a_later_resizes_marker() {
    let h = host();
    start(&h, "a", 8 * G);
    std::thread::scope(|s| {
        let mut shrink = Some(held_resize(s, &h, 4 * G));
        let mut second = None;
        repair_observed(&h.cfg, &mut |step| {
            if step != RepairStep::Read {
                return;
            }
            let done = shrink.take().unwrap().finish();
            assert_eq!(done, (8 * G, 4 * G));
            // b takes the 4 GiB the shrink freed: the GPU is full
            admit(&h, "b", 12 * G).unwrap();
            second = Some(held_resize(s, &h, 2 * G));
        })
        .unwrap();
        assert_eq!(second.unwrap().finish(), (4 * G, 2 * G));
    });
    assert!(
        sum(&h) <= CAPACITY,
        "{} reserved on a 16 GiB GPU: a {:?}",
        human(sum(&h)),
        held(&h, "a")
    );
    assert_eq!(
        held(&h, "a"),
        vec![(2 * G, false)],
        "the second shrink's size"
    );
    assert_eq!(live(&h, "a"), 2 * G, "the live limit is the ledger's");
}

/// A tiny deterministic generator (the test's schedule differs per round
/// and per thread, the same on every run).
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What a simulated crash unwinds with (`resume_unwind` runs no panic
/// hook: the test's output stays quiet).
struct Crash;

/// Run `f`, which may "crash" by unwinding with [`Crash`].
fn crashing<T>(f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(p) if p.is::<Crash>() => None,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// `gc`'s repair, resizes of "a" (grow and shrink, some crashing at a
/// step or inside a ledger write), the release and admission of "b", all
/// at once against one GPU: the ledger never counts more than the GPU
/// holds, and at each quiet point (after a gc where a resize crashed)
/// "a" has one record, no marker, and its live limit is what the ledger
/// counts. It also counts that the races it is for happened.
#[test]
fn repairs_resizes_releases_and_admissions_racing_never_overcommit() {
    use std::sync::atomic::AtomicUsize;
    let h = host();
    start(&h, "a", 4 * G);
    let over = std::sync::Mutex::new(None::<String>);
    // markers seen while a resize ran, crashes, b admitted, resizes done
    let seen = [(); 4].map(|_| AtomicUsize::new(0));
    let bump = |i: usize| seen[i].fetch_add(1, Ordering::Relaxed);
    for round in 0..50u64 {
        let done = AtomicBool::new(false);
        let crashed = AtomicBool::new(false);
        std::thread::scope(|s| {
            // the ledger's sum, under its lock, all the time
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let (u, marked) = Ledger::new(&h.cfg)
                        .transact(|d| {
                            let u = d.usage().get(UUID).map_or(0, |u| u.bytes);
                            let m = d.reservations.iter().any(|r| r.resizing.is_some());
                            Ok(((u, m), false))
                        })
                        .unwrap();
                    if marked {
                        bump(0);
                    }
                    if u > CAPACITY {
                        *over.lock().unwrap() = Some(format!("round {round}: {}", human(u)));
                    }
                }
            });
            // gc's repair, all the time
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    repair(&h.cfg).unwrap();
                }
            });
            // b comes and goes, 12 or 6 GiB
            s.spawn(|| {
                let mut rng = Rng(round * 7 + 3);
                for _ in 0..4 {
                    if admit(&h, "b", [12, 6][rng.next(2) as usize] * G).is_ok() {
                        bump(2);
                    }
                    std::thread::yield_now();
                    Ledger::new(&h.cfg).release(key("b")).unwrap();
                }
            });
            let resizer = s.spawn(|| {
                let mut rng = Rng(round * 13 + 1);
                for _ in 0..4 {
                    let to = [2, 4, 8][rng.next(3) as usize] * G;
                    // one resize in three crashes at one of its points
                    let crash_at = (rng.next(3) == 0).then(|| rng.next(30));
                    let mut n = 0;
                    let mut points = |_: Trace| {
                        if Some(n) == crash_at {
                            std::panic::resume_unwind(Box::new(Crash));
                        }
                        n += 1;
                    };
                    let out = crashing(|| {
                        resize_traced(
                            &h.cfg,
                            &h.inv,
                            &ContextCosts::default(),
                            key("a"),
                            None,
                            Size::Bytes(to),
                            "the test",
                            src(),
                            &NothingHeld,
                            &mut points,
                        )
                    });
                    match out {
                        None => {
                            crashed.store(true, Ordering::Relaxed);
                            bump(1);
                        }
                        Some(Ok(Some(_))) => {
                            bump(3);
                        }
                        // refused (does not fit, under way): nothing changed
                        Some(Err(_)) | Some(Ok(None)) => {}
                    }
                }
            });
            resizer.join().unwrap();
            done.store(true, Ordering::Relaxed);
        });
        // a quiet point
        if crashed.load(Ordering::Relaxed) {
            gc(&h);
        }
        if let Some(m) = over.lock().unwrap().take() {
            panic!("the ledger counted more than the GPU holds: {m}");
        }
        let recs = records_of(&h, "a");
        assert_eq!(recs.len(), 1, "round {round}: one record of a: {recs:?}");
        let a = held(&h, "a");
        assert!(!a[0].1, "round {round}: no marker left: {a:?}");
        assert_eq!(
            live(&h, "a"),
            a[0].0,
            "round {round}: a's live limit is what the ledger counts"
        );
        assert!(sum(&h) <= CAPACITY, "round {round}: {}", human(sum(&h)));
    }
    let seen = seen.map(|c| c.into_inner());
    assert!(
        seen.iter().all(|&n| n > 0),
        "markers seen while a resize ran, crashes, b admitted, resizes done: {seen:?}"
    );
}

/// Every write step of a resize of "a" from 4 GiB to `to`, crashed at in
/// turn (beside "c", 1 GiB): `next` (gc, or a resize of "c") leaves one
/// record of "a", no marker, its live limit at what the ledger counts
/// (the old size or the new one); admission in between never counts less
/// than the containers may hold, and after it exactly that.
fn crash_at_every_write(to: u64, next: &dyn Fn(&Host)) {
    let mut n = 0;
    loop {
        let h = host();
        start(&h, "a", 4 * G);
        start(&h, "c", G);
        let mut seen = 0;
        let mut write = |t: Trace| {
            if let Trace::Write(_) = t {
                if seen == n {
                    std::panic::resume_unwind(Box::new(Crash));
                }
                seen += 1;
            }
        };
        let out = crashing(|| {
            resize_traced(
                &h.cfg,
                &h.inv,
                &ContextCosts::default(),
                key("a"),
                None,
                Size::Bytes(to),
                "the test",
                src(),
                &NothingHeld,
                &mut write,
            )
        });
        if let Some(out) = out {
            out.unwrap();
            assert!(n > 3, "the resize wrote the ledger {n} times");
            return;
        }
        let fits = CAPACITY - live(&h, "a") - live(&h, "c");
        let probe = admit(&h, "probe", fits + 1);
        assert!(
            probe.is_err(),
            "write {n}: {} admitted past a",
            human(fits + 1)
        );
        next(&h);
        let recs = records_of(&h, "a");
        assert_eq!(recs.len(), 1, "write {n}: one record of a: {recs:?}");
        let a = held(&h, "a");
        assert_eq!(a.len(), 1, "write {n}: {a:?}");
        assert!(!a[0].1, "write {n}: repaired: {a:?}");
        assert!(a[0].0 == 4 * G || a[0].0 == to, "write {n}: {a:?}");
        assert_eq!(live(&h, "a"), a[0].0, "write {n}: the live limit agrees");
        let rest = CAPACITY - a[0].0 - live(&h, "c");
        assert!(admit(&h, "probe", rest + 1).is_err(), "write {n}");
        admit(&h, "probe", rest).unwrap_or_else(|e| panic!("write {n}: {e}"));
        n += 1;
    }
}

#[test]
fn a_crash_at_any_write_of_a_grow_leaves_one_record_after_gc() {
    crash_at_every_write(6 * G, &gc);
}

#[test]
fn a_crash_at_any_write_of_a_shrink_leaves_one_record_after_gc() {
    crash_at_every_write(2 * G, &gc);
}

/// The next resize, of any container, finishes it too.
#[test]
fn a_crash_at_any_write_of_a_resize_leaves_one_record_after_the_next_resize() {
    for to in [6 * G, 2 * G] {
        crash_at_every_write(to, &|h: &Host| {
            let c = resize_observed(
                &h.cfg,
                &h.inv,
                &ContextCosts::default(),
                key("c"),
                None,
                Size::Bytes(2 * G),
                "the test",
                src(),
                &NothingHeld,
                &mut |_| {},
            );
            assert_eq!(c.unwrap().unwrap().to, 2 * G);
        });
    }
}
