//! A claim's prepare and unprepare: what it is refused, what it reserves.
use super::*;

/// A claim below what a context costs on its GPU could run no CUDA program:
/// refused with the smallest useful size (the configured charge, else the
/// one measured for that model, else the built-in default), and the offer
/// says the same smallest size.
#[test]
fn a_claim_that_cannot_hold_a_context_is_refused_with_the_smallest_useful_size() {
    let (_d, cfg) = setup();
    let mi = 1u64 << 20;
    // no measurement: the built-in default charge (616 MiB) + 2 MiB
    let e = prepare(&cfg, &alloc("u-s", GPU0, 512 * mi)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::TooSmallForContext { smallest, .. } if smallest == "618.00 MiB"),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(
        m.contains("512.00 MiB (claim default/c-u-s)")
            && m.contains("charged 616.00 MiB")
            && m.contains("built-in default")
            && m.contains("smallest useful slice on this GPU is 618.00 MiB"),
        "{m}"
    );
    // less than one allocation above the context: as useless
    let e = prepare(&cfg, &alloc("u-s", GPU0, 617 * mi)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::TooSmallForContext { .. }),
        "{e:?}"
    );
    assert!(
        entries(&cfg).is_empty() && !cdi_path(&cfg, "u-s").exists(),
        "nothing reserved"
    );
    // measured on this host for the model: 400 MiB
    let mut costs = ContextCosts::default();
    costs.measured.insert("Simulated H100".into(), 400 * mi);
    prepare_waiting(&cfg, &alloc("u-s", GPU0, 512 * mi), &costs, Duration::ZERO).unwrap();
    assert_eq!(
        offers(&cfg, &costs).unwrap()[0].min_bytes,
        402 * mi,
        "the offer's smallest claim"
    );
    // configured: that size wins; 0 charges nothing and takes any claim
    let (_d2, mut cfg2) = setup();
    cfg2.context_overhead = "0".into();
    prepare(&cfg2, &alloc("u-t", GPU0, mi)).unwrap();
    assert_eq!(offers(&cfg2, &costs).unwrap()[0].min_bytes, 0);
}

#[test]
fn prepare_refuses_what_does_not_fit_naming_asked_free_and_gpu() {
    let (_d, cfg) = setup();
    container(&cfg, "docker1", 0, 10 * G);
    let e = prepare(&cfg, &alloc("u-1", GPU0, 8 * G)).unwrap_err();
    match refusal(&e) {
        PlacementError::DoesNotFit {
            requested,
            free,
            gpu,
            ..
        } => {
            assert_eq!(
                (requested.as_str(), free.as_str()),
                ("8.00 GiB (claim default/c-u-1)", "6.00 GiB")
            );
            assert!(gpu.contains(GPU0), "{gpu}");
        }
        other => panic!("{other:?}"),
    }
    let m = e.to_string();
    assert!(
        m.contains("held by container docker1 outside DRA (10.00 GiB)") && !m.contains("waiting"),
        "{m}"
    );
    assert_eq!(entries(&cfg).len(), 1, "nothing reserved");
    assert!(!cdi_path(&cfg, "u-1").exists(), "no CDI spec");
    // what is left fits; then claims count against claims on the node
    prepare(&cfg, &alloc("u-2", GPU0, 6 * G)).unwrap();
    let e = prepare(&cfg, &alloc("u-3", GPU0, G)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::DoesNotFit { free, .. } if free == "0 B"),
        "{e:?}"
    );
    // the other GPU is untouched
    prepare(&cfg, &alloc("u-3", GPU1, 16 * G)).unwrap();
    // a reserve is never handed out: more than the GPU can ever give
    let (_d2, mut cfg2) = setup();
    cfg2.reserve = "2g".into();
    let e = prepare(&cfg2, &alloc("u-4", GPU1, 15 * G)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::TooLarge { capacity, .. } if capacity == "14.00 GiB"),
        "{e:?}"
    );
    prepare(&cfg2, &alloc("u-4", GPU1, 14 * G)).unwrap();
}

#[test]
fn prepare_is_idempotent_and_a_different_allocation_of_the_uid_conflicts() {
    let (_d, cfg) = setup();
    let a = alloc("3f6c-uid", GPU0, 8 * G);
    let p = prepare(&cfg, &a).unwrap();
    assert_eq!(p.cdi_device_ids, ["vram.gpu-quota.io/claim=3f6c-uid"]);
    let t = token_of(&cfg, "3f6c-uid");
    // again, and again after the CDI directory was emptied (a reboot)
    assert_eq!(prepare(&cfg, &a).unwrap(), p);
    std::fs::remove_file(cdi_path(&cfg, "3f6c-uid")).unwrap();
    assert_eq!(prepare(&cfg, &a).unwrap(), p);
    assert_eq!(entries(&cfg).len(), 1, "one entry");
    assert_eq!(token_of(&cfg, "3f6c-uid"), t, "the same token");
    let spec = std::fs::read_to_string(cdi_path(&cfg, "3f6c-uid")).unwrap();
    assert!(spec.contains(&t), "the spec rewritten with it");
    // the same uid, other bytes or another GPU
    for other in [
        alloc("3f6c-uid", GPU0, 4 * G),
        alloc("3f6c-uid", GPU1, 8 * G),
    ] {
        let e = prepare(&cfg, &other).unwrap_err();
        assert!(matches!(e, ClaimError::Conflict { .. }), "{e:?}");
    }
    assert_eq!(entries(&cfg).len(), 1);
    assert_eq!(prepared(&cfg).unwrap(), [a]);
}

#[test]
fn bad_names_and_unknown_gpus_are_refused_before_anything_is_written() {
    let (_d, mut cfg) = setup();
    for a in [
        alloc("../x", GPU0, G),
        alloc("", GPU0, G),
        ClaimAlloc {
            namespace: "Default\n".into(),
            ..alloc("u", GPU0, G)
        },
        alloc("u", GPU0, 0),
        alloc("u", "GPU-0\u{1b}[2J", G),
        alloc("u", &"G".repeat(129), G),
        alloc("u", "", G),
    ] {
        let e = prepare(&cfg, &a).unwrap_err();
        assert!(matches!(e, ClaimError::Invalid { .. }), "{e:?}");
    }
    let e = prepare(&cfg, &alloc("u", "GPU-99", G)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::UnknownGpu { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains(GPU0), "{e}");
    // a GPU the config excludes from slicing is not offered either
    cfg.gpus = vec!["1".into()];
    let e = prepare(&cfg, &alloc("u", GPU0, G)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::NotSliceable { .. }),
        "{e:?}"
    );
    assert_eq!(offers(&cfg, &ContextCosts::default()).unwrap().len(), 1);
    assert!(!Ledger::new(&cfg).exists() && !cfg.cdi_dir.exists());
}

#[test]
fn unprepare_refuses_while_bound_then_releases_and_is_idempotent() {
    let (d, cfg) = setup();
    unprepare(&cfg, "never").unwrap();
    prepare(&cfg, &alloc("u-1", GPU0, 8 * G)).unwrap();
    let t = token_of(&cfg, "u-1");
    let root = d.path().join("runc").to_string_lossy().into_owned();
    bind(
        &cfg,
        &presenting("u-1", &t),
        "c1",
        &root,
        "/b",
        None,
        &mut vec![],
    )
    .unwrap();
    let e = unprepare(&cfg, "u-1").unwrap_err();
    assert!(
        matches!(&e, ClaimError::InUse { container, .. } if container == "c1"),
        "{e:?}"
    );
    assert!(cdi_path(&cfg, "u-1").exists(), "kept while in use");
    assert_eq!(entries(&cfg).len(), 2);
    // the container ends (any release path takes its entry out)
    Ledger::new(&cfg)
        .release(Key::Root {
            id: "c1",
            root: Some(&root),
        })
        .unwrap();
    assert_eq!(entries(&cfg).len(), 1, "the claim stays until unprepare");
    unprepare(&cfg, "u-1").unwrap();
    assert!(entries(&cfg).is_empty());
    assert!(!cdi_path(&cfg, "u-1").exists());
    unprepare(&cfg, "u-1").unwrap();
    // no container key matches a claim's entry, and gc never reclaims it
    prepare(&cfg, &alloc("u-2", GPU0, G)).unwrap();
    let l = Ledger::new(&cfg);
    l.transact(|d| {
        d.reservations[0].created_unix = 1; // older than any grace
        Ok(((), true))
    })
    .unwrap();
    assert!(l
        .release(Key::Root {
            id: "claim:u-2",
            root: None
        })
        .unwrap()
        .is_empty());
    assert!(l.gc().unwrap().is_empty());
    assert_eq!(entries(&cfg).len(), 1);
}

#[test]
fn a_prepare_waits_briefly_for_an_earlier_holder_that_is_releasing() {
    let (_d, cfg) = setup();
    // a force-deleted pod's claim holds 12 of GPU 0's 16 GiB; its
    // replacement's claim is prepared before the old one is unprepared
    prepare(&cfg, &alloc("old-uid", GPU0, 12 * G)).unwrap();
    let release = {
        let cfg = cfg.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(700));
            unprepare(&cfg, "old-uid").unwrap();
        })
    };
    let t = std::time::Instant::now();
    prepare_waiting(
        &cfg,
        &alloc("new-uid", GPU0, 8 * G),
        &ContextCosts::default(),
        RELEASE_WAIT,
    )
    .expect("prepared once the old claim is released");
    assert!(t.elapsed() >= std::time::Duration::from_millis(600));
    assert!(t.elapsed() < std::time::Duration::from_secs(3));
    release.join().unwrap();
    // nothing is released: refused after the bounded wait, naming the
    // holder and saying it has no running container and that it waited
    let t = std::time::Instant::now();
    let e = prepare_waiting(
        &cfg,
        &alloc("third", GPU0, 12 * G),
        &ContextCosts::default(),
        std::time::Duration::from_millis(800),
    )
    .unwrap_err();
    assert!(t.elapsed() >= std::time::Duration::from_millis(700));
    assert!(t.elapsed() < std::time::Duration::from_secs(3));
    let m = e.to_string();
    assert!(m.contains("after waiting"), "{m}");
    assert!(
        m.contains("claim default/c-new-uid (uid new-uid) (8.00 GiB, no running container"),
        "{m}"
    );
    assert_eq!(
        entries(&cfg).len(),
        1,
        "nothing reserved by the refused one"
    );
}
