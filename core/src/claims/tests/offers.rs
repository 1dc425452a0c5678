//! What the node offers claims.
use super::*;

#[test]
fn offers_leave_claims_out_but_subtract_every_other_reservation() {
    let (_d, mut cfg) = setup();
    cfg.reserve = "1g".into();
    container(&cfg, "docker1", 0, 4 * G);
    prepare(&cfg, &alloc("u-1", GPU0, 8 * G)).unwrap();
    prepare(&cfg, &alloc("u-2", GPU1, 2 * G)).unwrap();
    // a container bound to claim u-2 holds nothing of its own
    let t = token_of(&cfg, "u-2");
    bind(
        &cfg,
        &presenting("u-2", &t),
        "pod-c",
        "/run/k8s",
        "/b",
        None,
        &mut vec![],
    )
    .unwrap();
    let o = offers(&cfg, &ContextCosts::default()).unwrap();
    assert_eq!(
        o,
        [
            Offer {
                uuid: GPU0.into(),
                index: 0,
                product: "Simulated H100".into(),
                total_bytes: 16 * G,
                offer_bytes: 11 * G,  // 16 - 1 reserve - 4 docker
                min_bytes: 618 << 20, // the built-in context charge + 2 MiB
                // the docker container runs outside MPS: no share here
                share_bytes: 0,
                share_percent: 0,
            },
            Offer {
                uuid: GPU1.into(),
                index: 1,
                product: "Simulated H100".into(),
                total_bytes: 16 * G,
                offer_bytes: 15 * G,
                min_bytes: 618 << 20,
                share_bytes: 15 * G,
                share_percent: 100,
            }
        ]
    );
}

/// A GPU that serves compute shares is offered to no claim (a claim's
/// containers run outside MPS and would time-slice against the shares),
/// and a claim placed there anyway (an offer published before the share)
/// is refused at prepare, before its CDI spec is written; the other GPU is
/// offered and prepared as before, and the GPU is offered again once its
/// shares end.
#[test]
fn a_gpu_with_compute_shares_is_not_offered_to_claims() {
    let (_d, cfg) = setup();
    share(&cfg, "s");
    let l = Ledger::new(&cfg);
    let bytes = |o: Vec<Offer>| o.iter().map(|o| o.offer_bytes).collect::<Vec<_>>();
    let costs = ContextCosts::default();
    let e = prepare(&cfg, &alloc("u-1", GPU0, 4 * G)).unwrap_err();
    assert!(
        matches!(
            refusal(&e),
            PlacementError::UnsharedBesideShares {
                used: 25,
                holders: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("outside MPS"), "{e}");
    assert!(!cdi_path(&cfg, "u-1").exists(), "no CDI spec for it");
    assert_eq!(bytes(offers(&cfg, &costs).unwrap()), [0, 16 * G]);
    prepare(&cfg, &alloc("u-2", GPU1, 4 * G)).unwrap();
    l.release(crate::ledger::Key::Root {
        id: "s",
        root: Some("/run/runc"),
    })
    .unwrap();
    assert_eq!(bytes(offers(&cfg, &costs).unwrap()), [16 * G, 16 * G]);
    // a dead container's share (an earlier boot's) keeps no claim away
    let mut dead = share(&cfg, "s2");
    l.release(crate::ledger::Key::Root {
        id: "s2",
        root: Some("/run/runc"),
    })
    .unwrap();
    dead.boot_id = Some("00000000-0000-0000-0000-00000000dead".into());
    l.transact(|d| {
        d.reservations.push(dead.clone());
        Ok(((), true))
    })
    .unwrap();
    // (its bytes count until it is reclaimed, as any dead container's)
    assert_eq!(bytes(offers(&cfg, &costs).unwrap())[0], 14 * G);
    prepare(&cfg, &alloc("u-1", GPU0, 4 * G)).unwrap();
}
