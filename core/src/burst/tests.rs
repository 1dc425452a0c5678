use super::*;
use crate::formats::grant::Burst;
use crate::ledger::{ResState, Reservation};
use std::collections::BTreeMap;

const G: u64 = 1 << 30;
const U: &str = "GPU-0";

/// A table of readings and words, as the host's files would give them.
#[derive(Default)]
struct Files {
    used: BTreeMap<String, u64>,
    want: BTreeMap<String, u64>,
    words: BTreeMap<String, u64>,
    /// By the driver; absent: the container holds nothing there.
    driver: BTreeMap<String, Option<u64>>,
}

impl Look for Files {
    fn reading(&self, r: &Reservation, _uuid: &str) -> Option<Reading> {
        Some(Reading {
            used: *self.used.get(&r.container_id).unwrap_or(&0),
            want: *self.want.get(&r.container_id).unwrap_or(&0),
        })
    }
    fn word(&self, r: &Reservation, _uuid: &str) -> Option<u64> {
        Some(*self.words.get(&r.container_id).unwrap_or(&0))
    }
    fn driver_held(&self, r: &Reservation, _uuid: &str) -> Option<u64> {
        *self.driver.get(&r.container_id).unwrap_or(&Some(0))
    }
}

fn res(id: &str, guarantee: u64, burst: Option<(u64, u32)>, created: u64) -> Reservation {
    let mut s = Slice::memory(U.into(), 0, guarantee);
    s.burst = burst.map(|(limit_bytes, priority)| Burst {
        limit_bytes,
        priority,
    });
    let mut r = Reservation::new(id, None, "/b", vec![s], "req");
    r.created_unix = created;
    r.state = ResState::Running;
    r
}

fn data(rs: Vec<Reservation>) -> LedgerData {
    LedgerData {
        version: 6,
        reservations: rs,
    }
}

fn ids(d: &LedgerData, round: &Round) -> Vec<String> {
    round
        .ends
        .iter()
        .map(|e| d.reservations[e.victim].container_id.clone())
        .collect()
}

/// Every container on a GPU with bursters gets the wait in its grant;
/// once no burster is left, it goes back to 0. (Mutation: giving the word
/// to bursters only leaves the guaranteed container without it.)
#[test]
fn the_reclaim_word_follows_the_bursters() {
    let d = data(vec![
        res("a", 60 * G, None, 1),
        res("b", 10 * G, Some((120 * G, 0)), 2),
    ]);
    let f = Files::default();
    let r = plan(&d, 30_000, &f, &|_| false);
    assert_eq!(
        r.words
            .iter()
            .map(|w| (w.container, w.word))
            .collect::<Vec<_>>(),
        [(0, 30_000), (1, 30_000)]
    );
    let mut f = Files::default();
    f.words.insert("a".into(), 30_000);
    let alone = data(vec![res("a", 60 * G, None, 1)]);
    let r = plan(&alone, 30_000, &f, &|_| false);
    assert_eq!(
        r.words,
        [WordChange {
            container: 0,
            uuid: U.into(),
            word: 0
        }]
    );
    // nothing to store when the word is right
    f.words.insert("b".into(), 30_000);
    assert!(plan(&d, 30_000, &f, &|_| false).words.is_empty());
}

/// The victim order: bursters above their guarantee first, then the
/// lowest priority, then the newest; never a guaranteed container, never
/// the waiter. (Mutation: ordering by oldest first picks "b1".)
#[test]
fn the_victim_order() {
    let mk = || {
        data(vec![
            res("a", 60 * G, None, 1),
            res("b1", 10 * G, Some((60 * G, 0)), 2),
            res("b2", 10 * G, Some((60 * G, 0)), 3),
            res("hi", 10 * G, Some((60 * G, 100)), 4),
            res("idle", 10 * G, Some((60 * G, 0)), 5),
        ])
    };
    let d = mk();
    let mut f = Files::default();
    for (id, used) in [
        ("a", 2 * G),
        ("b1", 50 * G),
        ("b2", 50 * G),
        ("hi", 50 * G),
        ("idle", G),
    ] {
        f.used.insert(id.into(), used);
    }
    // nobody waits: nobody is ended
    assert!(plan(&d, 30_000, &f, &|_| false).ends.is_empty());
    f.want.insert("a".into(), 50 * G);
    let r = plan(&d, 30_000, &f, &|_| false);
    assert_eq!(ids(&d, &r), ["b2"], "lowest priority, newest");
    let e = &r.ends[0];
    assert_eq!(
        (e.above, e.guarantee, e.want, e.bursters),
        (40 * G, 10 * G, 50 * G, 4)
    );
    assert!(end_line(e).starts_with("gpu-quota: container ended: it held 40.00 GiB above its guarantee of 10.00 GiB on GPU 0"), "{}", end_line(e));
    // once b2 is gone: b1, then the higher priority, then the idle one
    let mut order = vec![];
    let mut d = d;
    loop {
        let r = plan(&d, 30_000, &f, &|_| false);
        let Some(e) = r.ends.first() else { break };
        let id = d.reservations[e.victim].container_id.clone();
        d.reservations.retain(|r| r.container_id != id);
        order.push(id);
    }
    assert_eq!(
        order,
        ["b2", "b1", "hi", "idle"],
        "never the guaranteed one"
    );
    // a burster waiting within its own guarantee is never its own victim
    let d = mk();
    let mut f2 = Files::default();
    f2.want.insert("b2".into(), G);
    f2.used.insert("b1".into(), 50 * G);
    let r = plan(&d, 30_000, &f2, &|_| false);
    assert_eq!(ids(&d, &r), ["b1"]);
    // while the last victim's memory settles, and without a wait: no end
    assert!(plan(&d, 30_000, &f, &|_| true).ends.is_empty());
    assert!(plan(&d, 0, &f, &|_| false).ends.is_empty());
}

/// A burster that says it uses nothing moves to the end of the order, not
/// out of it. (Mutation: filtering on `above > 0` leaves no victim.)
#[test]
fn a_burster_cannot_lie_itself_out_of_the_order() {
    let d = data(vec![
        res("a", 60 * G, None, 1),
        res("liar", 10 * G, Some((120 * G, 0)), 2),
    ]);
    let mut f = Files::default();
    f.want.insert("a".into(), 50 * G);
    let r = plan(&d, 30_000, &f, &|_| false);
    assert_eq!(ids(&d, &r), ["liar"]);
}

/// A wait is believed only as far as the waiter's guarantee covers it by
/// the driver's account: a container that says it waits for more than its
/// guarantee leaves, or whose processes the driver cannot account, ends
/// nobody. (Mutation: believing the usage file's want alone ends "b" in
/// every case below.)
#[test]
fn a_wait_the_guarantee_does_not_cover_ends_nobody() {
    let d = data(vec![
        res("a", 60 * G, None, 1),
        res("b", 10 * G, Some((120 * G, 0)), 2),
    ]);
    let mut f = Files::default();
    f.used.insert("b".into(), 100 * G);
    f.want.insert("a".into(), 50 * G);
    f.driver.insert("a".into(), Some(20 * G));
    assert!(
        plan(&d, 30_000, &f, &|_| false).ends.is_empty(),
        "20 held + 50 > 60"
    );
    f.want.insert("a".into(), 70 * G);
    f.driver.insert("a".into(), Some(0));
    assert!(
        plan(&d, 30_000, &f, &|_| false).ends.is_empty(),
        "more than the guarantee"
    );
    f.want.insert("a".into(), 50 * G);
    f.driver.insert("a".into(), None);
    assert!(
        plan(&d, 30_000, &f, &|_| false).ends.is_empty(),
        "the driver cannot tell"
    );
    // control: 10 held + 50 fit in 60
    f.driver.insert("a".into(), Some(10 * G));
    assert_eq!(ids(&d, &plan(&d, 30_000, &f, &|_| false)), ["b"]);
}
