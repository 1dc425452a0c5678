//! Claims with a compute share: placed, bound and offered as a container's
//! share is.
use super::*;

fn share_alloc(uid: &str, gpu: &str, bytes: u64, sm: u32, procs: u32) -> ClaimAlloc {
    ClaimAlloc {
        sm: Some(sm),
        sm_procs: procs,
        ..alloc(uid, gpu, bytes)
    }
}

fn claim_entry(cfg: &Config, uid: &str) -> Reservation {
    entries(cfg)
        .into_iter()
        .find(|r| r.claim.as_ref().is_some_and(|c| c.uid == uid))
        .unwrap()
}

/// A claim's share is reserved as a container's: shares add up to at most
/// the GPU, and a GPU serves claims of one kind at a time (a claim
/// without a share beside shares, or the reverse, is refused: the
/// scheduler's counter keeps them apart, the ledger holds it anyway).
#[test]
fn a_claims_share_is_reserved_and_keeps_its_gpu_to_one_kind() {
    let (_d, cfg) = setup();
    prepare(&cfg, &share_alloc("u-1", GPU0, 4 * G, 50, 2)).unwrap();
    let s = &claim_entry(&cfg, "u-1").slices[0];
    assert_eq!((s.sm_percent, s.sm_procs, s.sm_user), (50, 2, None));
    prepare(&cfg, &share_alloc("u-2", GPU0, 4 * G, 50, 1)).unwrap();
    let e = prepare(&cfg, &share_alloc("u-3", GPU0, 4 * G, 25, 1)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::ShareDoesNotFit { free: 0, .. }),
        "{e:?}"
    );
    let e = prepare(&cfg, &alloc("u-4", GPU0, 4 * G)).unwrap_err();
    assert!(
        matches!(
            refusal(&e),
            PlacementError::UnsharedBesideShares { used: 100, .. }
        ),
        "{e:?}"
    );
    // the other GPU, taken by a claim without a share first
    prepare(&cfg, &alloc("u-5", GPU1, 4 * G)).unwrap();
    let e = prepare(&cfg, &share_alloc("u-6", GPU1, 4 * G, 25, 1)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::ShareBesideUnshared { .. }),
        "{e:?}"
    );
    // the same claim prepared again is the same; with another share it conflicts
    prepare(&cfg, &share_alloc("u-1", GPU0, 4 * G, 50, 2)).unwrap();
    let e = prepare(&cfg, &share_alloc("u-1", GPU0, 4 * G, 40, 2)).unwrap_err();
    assert!(matches!(e, ClaimError::Conflict { .. }), "{e:?}");
    assert!(e.to_string().contains("50% of the SMs"), "{e}");
    // the driver's resync after a restart gets the share back
    let mut back = prepared(&cfg).unwrap();
    back.sort_by(|a, b| a.uid.cmp(&b.uid));
    assert_eq!(back[0], share_alloc("u-1", GPU0, 4 * G, 50, 2));
    assert_eq!(back[2], alloc("u-5", GPU1, 4 * G));
}

/// Invalid shares are refused before anything is written.
#[test]
fn a_share_outside_1_to_100_or_its_processes_is_refused() {
    let (_d, cfg) = setup();
    for a in [
        share_alloc("u", GPU0, G, 0, 1),
        share_alloc("u", GPU0, G, 101, 1),
        share_alloc("u", GPU0, G, 25, 0),
        share_alloc("u", GPU0, G, 4, 5),
        share_alloc("u", GPU0, G, 100, 65),
        ClaimAlloc {
            sm_procs: 2,
            ..alloc("u", GPU0, G)
        },
    ] {
        let e = prepare(&cfg, &a).unwrap_err();
        assert!(matches!(e, ClaimError::Invalid { .. }), "{a:?}: {e:?}");
    }
    assert!(entries(&cfg).is_empty());
}

/// A container binds to a claim with a share only as admission admits a
/// container's share: its host user known and not root (unless the
/// operator allows root's shares). Its slice records the user, so its
/// process is kept from becoming root and a root process in it is refused
/// at `cuInit`; the claim's containers may run as different users.
#[test]
fn a_share_claim_binds_only_containers_that_cannot_become_host_root() {
    let (_d, mut cfg) = setup();
    let root = "/run/k8s".to_string();
    prepare(&cfg, &share_alloc("u-1", GPU0, 4 * G, 25, 2)).unwrap();
    let t = token_of(&cfg, "u-1");
    let p = presenting("u-1", &t);
    let e = bind(&cfg, &p, "c0", &root, "/b", Some(0), &mut vec![]).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::ShareAsHostRoot { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("claim default/c-u-1"), "{e}");
    let e = bind(&cfg, &p, "c0", &root, "/b", None, &mut vec![]).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::ShareUserUnknown { .. }),
        "{e:?}"
    );
    let r = bind(&cfg, &p, "c1", &root, "/b", Some(1000), &mut vec![]).unwrap();
    let s = &r.slices[0];
    assert_eq!((s.sm_percent, s.sm_procs, s.sm_user), (25, 2, Some(1000)));
    let r = bind(&cfg, &p, "c2", &root, "/b", Some(1001), &mut vec![]).unwrap();
    assert_eq!(r.slices[0].sm_user, Some(1001));
    cfg.mps_root_shares = true;
    let r = bind(&cfg, &p, "c3", &root, "/b", Some(0), &mut vec![]).unwrap();
    assert_eq!(r.slices[0].sm_user, Some(0));
    // negative control: a claim without a share binds root as before
    cfg.mps_root_shares = false;
    prepare(&cfg, &alloc("u-2", GPU1, 4 * G)).unwrap();
    let t2 = token_of(&cfg, "u-2");
    let r = bind(
        &cfg,
        &presenting("u-2", &t2),
        "c4",
        &root,
        "/b",
        Some(0),
        &mut vec![],
    )
    .unwrap();
    assert_eq!((r.slices[0].sm_percent, r.slices[0].sm_user), (0, None));
}

/// A share claim and a container share refused for the same reason get
/// the same message, counting the claim's share among the holders.
#[test]
fn a_share_claim_and_a_share_container_refused_alike_get_the_same_message() {
    let (_d, cfg) = setup();
    share(&cfg, "s"); // 25 % on GPU 0
    prepare(&cfg, &share_alloc("u-1", GPU0, 2 * G, 50, 1)).unwrap();
    let claim = prepare(&cfg, &share_alloc("u-2", GPU0, 2 * G, 30, 1))
        .unwrap_err()
        .to_string();
    let inv = Inventory::load(&cfg).unwrap();
    let req = Request::share_for_test(2 * G, 0, 30);
    let started = match Ledger::new(&cfg).admit(
        &cfg,
        &inv,
        &req,
        "c",
        Some("/run/runc"),
        "/b",
        &mut vec![],
    ) {
        Err(LedgerError::Refused { err, .. }) => err.to_string(),
        other => panic!("not refused: {other:?}"),
    };
    // (this refusal names the share, not who asked)
    assert!(claim.contains("only 25% of its compute"), "{claim}");
    assert!(
        claim.starts_with(&started),
        "share does not fit:\n claim:     {claim}\n container: {started}"
    );
}

/// What the node offers a claim with a share: the bytes and the
/// percentage that containers outside Kubernetes leave. Their shares are
/// subtracted, claims' are not (the scheduler counts those); a container
/// outside MPS leaves no room for a share, and shares none for a claim
/// without one.
#[test]
fn offers_for_shares_subtract_outside_shares_only() {
    let (_d, cfg) = setup();
    share(&cfg, "s"); // 2 GiB and 25 % of GPU 0
    container(&cfg, "d", 1, 4 * G); // GPU 1, outside MPS
    prepare(&cfg, &share_alloc("u-1", GPU0, 4 * G, 50, 1)).unwrap();
    let o = offers(&cfg, &ContextCosts::default()).unwrap();
    let got: Vec<_> = o
        .iter()
        .map(|o| (o.offer_bytes, o.share_bytes, o.share_percent))
        .collect();
    assert_eq!(got, [(0, 14 * G, 75), (12 * G, 0, 0)]);
}
