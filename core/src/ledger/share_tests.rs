//! The ledger's compute shares: the schema they mark, the host user and
//! the process count they record.
use super::tests::{req, setup, G};
use super::*;
use crate::request::Request;

/// While a share is in the ledger, a release that does not know shares
/// refuses the file (it would write it back without them); once the share
/// is gone, it reads the ledger again.
#[test]
fn a_share_marks_the_ledger_for_releases_that_know_shares() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let version = || -> u32 {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(l.path()).unwrap()).unwrap();
        v["version"].as_u64().unwrap() as u32
    };
    let mut shared = req(G, Some(0));
    shared.sm = Some(25);
    shared.sm_procs = 4;
    shared.user = Some(1000);
    l.admit(&cfg, &inv, &shared, "s", None, "/b", &mut vec![])
        .unwrap();
    assert_eq!(version(), SHARES_SCHEMA_VERSION);
    // an older release refuses it
    const _: () = assert!(SHARES_SCHEMA_VERSION > SCHEMA_VERSION);
    let d = l.read().unwrap();
    let s = &d.reservations[0].slices[0];
    assert_eq!((s.sm_percent, s.sm_procs), (25, 4), "read back");
    assert!(d.reservations[0].request.ends_with("sm=25% sm-procs=4"));
    l.release(Key::Root {
        id: "s",
        root: None,
    })
    .unwrap();
    assert_eq!(version(), SCHEMA_VERSION, "back once no share is left");
}

/// A share's host uid is recorded in its grant. A share for host root is
/// refused unless the operator allows root shares (MPS takes commands
/// from root on the client socket that steer the GPU's server), a share
/// whose spec does not say its user is refused, and shares of different
/// non-root users share a GPU (the daemons are multi-user).
#[test]
fn a_share_records_its_host_user_and_root_is_refused_unless_allowed() {
    let (_d, mut cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let share = |gpu: Option<u32>, user: Option<u32>| Request {
        sm: Some(25),
        user,
        ..req(G, gpu)
    };
    let adm =
        |cfg: &Config, r: &Request, id: &str| l.admit(cfg, &inv, r, id, None, "/b", &mut vec![]);
    let e = adm(&cfg, &share(Some(0), Some(0)), "root").unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("host root") && m.contains("--user 1000") && m.contains("mps_root_shares"),
        "{m}"
    );
    let e = adm(&cfg, &share(None, None), "u").unwrap_err();
    assert!(e.to_string().contains("which host user"), "{e}");
    let r = adm(&cfg, &share(Some(0), Some(1000)), "a").unwrap();
    assert_eq!(r.slices[0].sm_user, Some(1000));
    let b = adm(&cfg, &share(Some(0), Some(100000)), "b").unwrap();
    assert_eq!(
        (b.slices[0].index, b.slices[0].sm_user),
        (0, Some(100000)),
        "beside another user's share"
    );
    // the operator's choice: root shares on a host of trusted tenants
    cfg.mps_root_shares = true;
    let c = adm(&cfg, &share(Some(0), Some(0)), "c").unwrap();
    assert_eq!((c.slices[0].index, c.slices[0].sm_user), (0, Some(0)));
    let plain = adm(&cfg, &req(G, Some(0)), "e").unwrap_err();
    assert!(
        plain.to_string().contains("without a compute share"),
        "{plain}"
    );
}

/// A share recorded before shares were split over processes (schema 4, no
/// `sm_procs`) reads as a share of one process, which is what its
/// container's grant gave it; this build writes the ledger as 5, which a
/// build that knows 4 refuses (it would drop the count).
#[test]
fn a_share_recorded_before_process_counts_is_of_one_process() {
    let (_d, cfg, _inv) = setup();
    let l = Ledger::new(&cfg);
    std::fs::create_dir_all(&cfg.ledger_dir).unwrap();
    let old = serde_json::json!({"version": 4, "reservations": [{
        "container_id": "old", "bundle": "/b", "request": "vram=1g sm=25%",
        "state": "running", "created_unix": 1,
        "slices": [{"uuid": "GPU-0", "index": 0, "bytes": G, "sm": 25, "sm_user": 0}],
    }]});
    std::fs::write(l.path(), serde_json::to_vec(&old).unwrap()).unwrap();
    let d = l.read().unwrap();
    assert_eq!(d.reservations[0].slices[0].sm_procs, 1);
    assert_eq!(SHARES_SCHEMA_VERSION, 5);
    // a slice without a share stays without a count
    let plain = serde_json::json!({"version": 2, "reservations": [{
        "container_id": "p", "bundle": "/b", "request": "vram=1g",
        "state": "running", "created_unix": 1,
        "slices": [{"uuid": "GPU-1", "index": 1, "bytes": G}],
    }]});
    std::fs::write(l.path(), serde_json::to_vec(&plain).unwrap()).unwrap();
    assert_eq!(l.read().unwrap().reservations[0].slices[0].sm_procs, 0);
}

/// A reservation's request as `ls` shows it names the process count only
/// where the share is split.
#[test]
fn a_split_share_is_described_with_its_process_count() {
    let mut one = req(8 * G, Some(0));
    one.sm = Some(25);
    let mut four = one.clone();
    four.sm_procs = 4;
    assert_eq!(
        describe_request(&four),
        "vram=8.00 GiB gpu=0 sm=25% sm-procs=4"
    );
    assert_eq!(describe_request(&one), "vram=8.00 GiB gpu=0 sm=25%");
}

/// A burst's limit lives in ledger.json, marked with the bursts' schema
/// version: a release before bursts refuses it rather than drop the limit.
#[test]
fn a_burst_is_kept_in_the_ledger_under_its_schema() {
    let (_d, cfg, inv) = setup();
    let l = Ledger::new(&cfg);
    let mut r = Request::slice_for_test(G, 0);
    r.burst = Some(crate::request::BurstAsk {
        limit: crate::units::Size::Bytes(2 * G),
        priority: 9,
        origin: crate::request::Origin::Annotation("vram-limit".into()),
    });
    let version = || -> u32 {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(l.path()).unwrap()).unwrap();
        v["version"].as_u64().unwrap() as u32
    };
    l.admit(&cfg, &inv, &r, "b", None, "/b", &mut vec![])
        .unwrap();
    assert_eq!(version(), BURSTS_SCHEMA_VERSION);
    let d = l.read().unwrap();
    let s = &d.reservations[0].slices[0];
    assert_eq!(
        s.burst,
        Some(crate::formats::grant::Burst {
            limit_bytes: 2 * G,
            priority: 9
        })
    );
    assert_eq!(records::name_of(&d.reservations[0]), None, "not a record");
    assert!(
        d.reservations[0]
            .request
            .ends_with("vram-limit=2.00 GiB vram-priority=9"),
        "{}",
        d.reservations[0].request
    );
    l.release(Key::Root {
        id: "b",
        root: None,
    })
    .unwrap();
    assert_eq!(version(), SCHEMA_VERSION, "back once no burst is held");
}
