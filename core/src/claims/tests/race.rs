//! A claim's prepare racing containers' admissions and releases on one
//! small GPU. Both decide under the ledger's lock through the same placer,
//! so the GPU is never promised more than it can hold and every grant is
//! held exactly once.
use super::*;
use crate::units::human;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Workers of each kind (claims, containers), and grants each one tries.
const WORKERS: usize = 3;
const ROUNDS: usize = 100;

/// One GPU of 8 GiB with 1 GiB reserved: 7 GiB usable, so two or three
/// grants of 2–3 GiB fill it and the workers contend for it.
fn small_gpu() -> (tempfile::TempDir, Config, u64) {
    let (d, mut cfg) = setup();
    cfg.inventory.gpu.truncate(1);
    cfg.inventory.gpu[0].memory = "8g".into();
    cfg.reserve = "1g".into();
    let inv = Inventory::load(&cfg).unwrap();
    let usable = crate::placement::usable(&inv.gpus[0], cfg.reserve_bytes().unwrap());
    assert_eq!(usable, 7 * G);
    (d, cfg, usable)
}

/// Under the ledger's lock: the bytes counted on GPU 0, and how many
/// entries each container id (a claim's is `claim:<uid>`) has.
fn census(cfg: &Config) -> (u64, BTreeMap<String, usize>) {
    Ledger::new(cfg)
        .transact(|d| {
            let bytes = d.usage().get(GPU0).map_or(0, |u| u.bytes);
            let mut n = BTreeMap::new();
            for r in &d.reservations {
                *n.entry(r.container_id.clone()).or_insert(0) += 1;
            }
            Ok(((bytes, n), false))
        })
        .unwrap()
}

/// What the workers saw go wrong (the first few), and what they granted.
#[derive(Default)]
struct Log {
    wrong: Mutex<Vec<String>>,
    /// Grants still held when their worker ended: key → bytes.
    held: Mutex<BTreeMap<String, u64>>,
    /// Grants and refusals of claims, then of containers.
    seen: [AtomicUsize; 4],
}

impl Log {
    fn wrong(&self, m: String) {
        let mut w = self.wrong.lock().unwrap();
        if w.len() < 5 {
            w.push(m);
        }
    }

    /// The ledger at a step: within the GPU, and `key` held `want` times.
    fn check(&self, cfg: &Config, usable: u64, key: &str, want: usize, step: &str) {
        let (bytes, n) = census(cfg);
        if bytes > usable {
            self.wrong(format!(
                "{step}: {} counted on GPU 0, {} usable",
                human(bytes),
                human(usable)
            ));
        }
        let got = n.get(key).copied().unwrap_or(0);
        if got != want {
            self.wrong(format!("{step}: {key} held {got} times, not {want}"));
        }
    }
}

/// One worker preparing and unpreparing claims, its last grant kept.
fn claims(cfg: &Config, usable: u64, w: usize, log: &Log) {
    for n in 0..ROUNDS {
        let uid = format!("u-{w}-{n}");
        let key = format!("claim:{uid}");
        let bytes = [2, 3][(n + w) % 2] * G;
        match prepare(cfg, &alloc(&uid, GPU0, bytes)) {
            Ok(_) => {
                log.seen[0].fetch_add(1, Ordering::Relaxed);
                log.check(cfg, usable, &key, 1, &format!("prepared {uid}"));
                if n + 1 == ROUNDS {
                    log.held.lock().unwrap().insert(key, bytes);
                    return;
                }
                std::thread::yield_now();
                unprepare(cfg, &uid).unwrap();
                log.check(cfg, usable, &key, 0, &format!("unprepared {uid}"));
            }
            Err(ClaimError::Refused { err, .. })
                if matches!(*err, PlacementError::DoesNotFit { .. }) =>
            {
                log.seen[1].fetch_add(1, Ordering::Relaxed);
                log.check(cfg, usable, &key, 0, &format!("refused {uid}"));
            }
            Err(e) => log.wrong(format!("prepare {uid}: {e}")),
        }
    }
}

/// One worker admitting and releasing containers, its last grant kept.
fn containers(cfg: &Config, usable: u64, w: usize, log: &Log) {
    let inv = Inventory::load(cfg).unwrap();
    let l = Ledger::new(cfg);
    for n in 0..ROUNDS {
        let id = format!("c-{w}-{n}");
        let bytes = [1, 2, 3][(n + w) % 3] * G;
        let req = Request::slice_for_test(bytes, 0);
        match l.admit(cfg, &inv, &req, &id, Some("/run/runc"), "/b", &mut vec![]) {
            Ok(_) => {
                log.seen[2].fetch_add(1, Ordering::Relaxed);
                log.check(cfg, usable, &id, 1, &format!("admitted {id}"));
                if n + 1 == ROUNDS {
                    log.held.lock().unwrap().insert(id, bytes);
                    return;
                }
                std::thread::yield_now();
                l.release(Key::Root {
                    id: &id,
                    root: Some("/run/runc"),
                })
                .unwrap();
                log.check(cfg, usable, &id, 0, &format!("released {id}"));
            }
            Err(LedgerError::Refused { err, .. })
                if matches!(*err, PlacementError::DoesNotFit { .. }) =>
            {
                log.seen[3].fetch_add(1, Ordering::Relaxed);
                log.check(cfg, usable, &id, 0, &format!("refused {id}"));
            }
            Err(e) => log.wrong(format!("admit {id}: {e}")),
        }
    }
}

/// Claims prepared and unprepared while containers are admitted and
/// released on the same 7 GiB GPU, and a watcher reading the ledger under
/// its lock all the while: the bytes counted on the GPU never exceed what
/// it can hold, each grant is in the ledger exactly once while it is held
/// and not at all once released, and at the end the ledger holds exactly
/// the grants kept. It also checks that both sides were granted and
/// refused (that they contended).
#[test]
fn claims_prepared_racing_container_admissions_never_overcommit_a_gpu() {
    let (_d, cfg, usable) = small_gpu();
    let log = Log::default();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let (bytes, n) = census(&cfg);
                if bytes > usable {
                    log.wrong(format!(
                        "watcher: {} counted on GPU 0, {} usable",
                        human(bytes),
                        human(usable)
                    ));
                }
                if let Some((k, c)) = n.iter().find(|(_, &c)| c > 1) {
                    log.wrong(format!("watcher: {k} held {c} times"));
                }
            }
        });
        let workers: Vec<_> = (0..WORKERS)
            .flat_map(|w| {
                let (cfg, log) = (&cfg, &log);
                [
                    s.spawn(move || claims(cfg, usable, w, log)),
                    s.spawn(move || containers(cfg, usable, w, log)),
                ]
            })
            .collect();
        for t in workers {
            t.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
    });
    let wrong = log.wrong.into_inner().unwrap();
    assert!(wrong.is_empty(), "{}", wrong.join("; "));
    let held = log.held.into_inner().unwrap();
    let (bytes, n) = census(&cfg);
    assert_eq!(
        n,
        held.keys().map(|k| (k.clone(), 1)).collect(),
        "the ledger holds exactly the grants kept"
    );
    assert_eq!(bytes, held.values().sum::<u64>());
    assert!(bytes <= usable, "{}", human(bytes));
    let seen = log.seen.map(|c| c.into_inner());
    assert!(
        seen.iter().all(|&n| n > 0),
        "claims granted, refused; containers granted, refused: {seen:?}"
    );
}
