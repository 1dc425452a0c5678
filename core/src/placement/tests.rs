use super::*;
use crate::request::Origin;
use crate::units::Size;
const G: u64 = 1 << 30;

fn inv(n: u32, mem: u64) -> Inventory {
    Inventory {
        gpus: (0..n)
            .map(|i| Gpu {
                index: i,
                uuid: format!("GPU-{i:04}"),
                name: "t".into(),
                total_bytes: mem,
                minor: i,
                simulated: true,
            })
            .collect(),
        driver_version: "simulated".into(),
    }
}
fn req(vram: Size, gpus: GpuSelector) -> Request {
    Request {
        vram,
        gpus,
        origin: Origin::Annotation("vram".into()),
        named_gpus: false,
        sm: None,
        sm_procs: 0,
        user: Some(0),
        burst: None,
    }
}
fn used(v: &[(u32, u64)]) -> Usage {
    v.iter()
        .map(|(i, b)| {
            (
                format!("GPU-{i:04}"),
                GpuUse {
                    bytes: *b,
                    holders: 1,
                    ..GpuUse::default()
                },
            )
        })
        .collect()
}

#[test]
fn binpack_and_spread() {
    let i = inv(2, 16 * G);
    let u = used(&[(1, 4 * G)]);
    let r = req(Size::Bytes(G), GpuSelector::Count(1));
    let p = Placer {
        inventory: &i,
        policy: Policy::Binpack,
        reserve: 0,
        sliceable: &[],
        contexts: &ContextCosts::default(),
    };
    assert_eq!(
        p.place(&r, &u).unwrap()[0].index,
        1,
        "binpack fills the used GPU"
    );
    let p = Placer {
        inventory: &i,
        policy: Policy::Spread,
        reserve: 0,
        sliceable: &[],
        contexts: &ContextCosts::default(),
    };
    assert_eq!(
        p.place(&r, &u).unwrap()[0].index,
        0,
        "spread takes the emptiest"
    );
}

#[test]
fn named_gpu_full_is_refused_with_numbers() {
    let i = inv(2, 16 * G);
    let u = used(&[(0, 16 * G)]);
    let p = Placer {
        inventory: &i,
        policy: Policy::Binpack,
        reserve: 0,
        sliceable: &[],
        contexts: &ContextCosts::default(),
    };
    let e = p
        .place(
            &req(
                Size::Bytes(8 * G),
                GpuSelector::List(vec![GpuRef::Index(0)]),
            ),
            &u,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("8.00 GiB")
            && e.contains("GPU 0")
            && e.contains("only 0 B")
            && e.contains("GPU 1: 16.00 GiB"),
        "{e}"
    );
    // unnamed: goes to GPU 1
    assert_eq!(
        p.place(&req(Size::Bytes(8 * G), GpuSelector::Count(1)), &u)
            .unwrap()[0]
            .index,
        1
    );
}

#[test]
fn too_large_reserve_percent_and_multi() {
    let i = inv(2, 16 * G);
    let p = Placer {
        inventory: &i,
        policy: Policy::Binpack,
        reserve: G,
        sliceable: &[],
        contexts: &ContextCosts::default(),
    };
    let e = p
        .place(
            &req(Size::Bytes(16 * G), GpuSelector::Count(1)),
            &Usage::new(),
        )
        .unwrap_err();
    assert!(matches!(e, PlacementError::TooLarge { .. }), "{e}");
    let s = p
        .place(
            &req(Size::Ppm(250_000), GpuSelector::Count(2)),
            &Usage::new(),
        )
        .unwrap();
    assert_eq!(
        s.iter().map(|s| s.vram_bytes).collect::<Vec<_>>(),
        vec![4 * G, 4 * G]
    );
    let e = p
        .place(&req(Size::Bytes(G), GpuSelector::Count(3)), &Usage::new())
        .unwrap_err();
    assert!(matches!(e, PlacementError::NotEnoughGpus { .. }));
    assert_eq!(
        p.place(&req(Size::Bytes(G), GpuSelector::All), &Usage::new())
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn unknown_excluded_and_duplicate() {
    let i = inv(2, 16 * G);
    let sl = vec!["0".to_string()];
    let p = Placer {
        inventory: &i,
        policy: Policy::Binpack,
        reserve: 0,
        sliceable: &sl,
        contexts: &ContextCosts::default(),
    };
    let r = |g: Vec<GpuRef>| req(Size::Bytes(G), GpuSelector::List(g));
    assert!(matches!(
        p.place(&r(vec![GpuRef::Index(5)]), &Usage::new()),
        Err(PlacementError::UnknownGpu { .. })
    ));
    assert!(matches!(
        p.place(&r(vec![GpuRef::Uuid("GPU-ffff".into())]), &Usage::new()),
        Err(PlacementError::UnknownGpu { .. })
    ));
    assert!(matches!(
        p.place(&r(vec![GpuRef::Index(1)]), &Usage::new()),
        Err(PlacementError::NotSliceable { .. })
    ));
    assert!(matches!(
        p.place(
            &r(vec![GpuRef::Index(0), GpuRef::Uuid("GPU-0000".into())]),
            &Usage::new()
        ),
        Err(PlacementError::Duplicate { .. })
    ));
    let empty = inv(0, 0);
    let p = Placer {
        inventory: &empty,
        policy: Policy::Binpack,
        reserve: 0,
        sliceable: &[],
        contexts: &ContextCosts::default(),
    };
    assert_eq!(
        p.place(&r(vec![GpuRef::Index(0)]), &Usage::new()),
        Err(PlacementError::NoGpus)
    );
}

#[test]
#[allow(clippy::result_large_err)]
fn a_slice_that_cannot_hold_a_known_context_is_refused_with_the_figures() {
    let i = inv(2, 16 * G);
    let mib = 1u64 << 20;
    let measured = ContextCosts {
        configured: None,
        measured: [(i.gpus[0].name.clone(), 614 * mib)].into(),
        unmeasured: None,
    };
    let place = |c: &ContextCosts, b: u64| {
        Placer {
            inventory: &i,
            policy: Policy::Binpack,
            reserve: 0,
            sliceable: &[],
            contexts: c,
        }
        .place(&req(Size::Bytes(b), GpuSelector::Count(1)), &Usage::new())
    };
    let err = place(&measured, 512 * mib).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, PlacementError::TooSmallForContext { .. }),
        "{msg}"
    );
    for want in [
        "512.00 MiB",
        "614.00 MiB",
        "616.00 MiB",
        "measured on this host",
        "vram=616m",
    ] {
        assert!(msg.contains(want), "{want:?} missing in: {msg}");
    }
    // exactly the context: nothing left for an allocation; less than one
    // allocation above it is refused too (the smallest useful slice is the
    // rule, for a claim's prepare as for a container)
    assert!(place(&measured, 614 * mib).is_err());
    assert!(place(&measured, 615 * mib).is_err());
    // negative controls: one granule more fits; unknown cost = no check;
    // a configured 0 charges nothing
    assert!(place(&measured, 616 * mib).is_ok());
    assert!(place(&ContextCosts::default(), 512 * mib).is_ok());
    let zero = ContextCosts {
        configured: Some(0),
        ..measured.clone()
    };
    assert!(place(&zero, 512 * mib).is_ok());
    // the configured figure wins over the measured one
    let conf = ContextCosts {
        configured: Some(256 * mib),
        ..measured
    };
    assert!(place(&conf, 512 * mib).is_ok());
    let msg = place(&conf, 200 * mib).unwrap_err().to_string();
    assert!(msg.contains("the config's context_overhead"), "{msg}");
}

static NO_COSTS: ContextCosts = ContextCosts {
    configured: None,
    measured: BTreeMap::new(),
    unmeasured: None,
};
fn binpack(i: &Inventory) -> Placer<'_> {
    Placer {
        inventory: i,
        policy: Policy::Binpack,
        reserve: 0,
        sliceable: &[],
        contexts: &NO_COSTS,
    }
}
fn with_sm(mut r: Request, p: u32) -> Request {
    r.sm = Some(p);
    r
}
/// `(gpu, bytes, share)` per holder.
fn held(v: &[(u32, u64, u32)]) -> Usage {
    let mut u = Usage::new();
    for (i, b, p) in v {
        u.entry(format!("GPU-{i:04}")).or_default().add(&Slice {
            uuid: format!("GPU-{i:04}"),
            index: *i,
            vram_bytes: *b,
            sm_percent: *p,
            sm_user: None,
            sm_procs: if *p > 0 { 1 } else { 0 },
            burst: None,
        });
    }
    u
}

#[test]
fn compute_shares_add_up_to_at_most_the_gpu() {
    let i = inv(1, 80 * G);
    let p = binpack(&i);
    let r = |pct| with_sm(req(Size::Bytes(8 * G), GpuSelector::Count(1)), pct);
    let got = p.place(&r(25), &Usage::new()).unwrap();
    assert_eq!((got[0].sm_percent, got[0].vram_bytes), (25, 8 * G));
    let u = held(&[(0, 8 * G, 60), (0, 8 * G, 15)]);
    assert_eq!(
        p.place(&r(25), &u).unwrap()[0].sm_percent,
        25,
        "75 + 25 fit"
    );
    let e = p.place(&r(26), &u).unwrap_err();
    assert!(
        matches!(
            e,
            PlacementError::ShareDoesNotFit {
                requested: 26,
                free: 25,
                used: 75,
                holders: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(m.contains("sm=26%") && m.contains("only 25%"), "{m}");
    // the same GPU named explicitly: the same refusal
    let named = with_sm(
        req(
            Size::Bytes(8 * G),
            GpuSelector::List(vec![GpuRef::Index(0)]),
        ),
        26,
    );
    assert!(matches!(
        p.place(&named, &u),
        Err(PlacementError::ShareDoesNotFit { .. })
    ));
    // a share released: its percent is free again
    let mut u = u;
    u.get_mut("GPU-0000").unwrap().remove(&Slice {
        uuid: "GPU-0000".into(),
        index: 0,
        vram_bytes: 8 * G,
        sm_percent: 60,
        sm_user: None,
        sm_procs: 1,
        burst: None,
    });
    assert!(p.place(&r(85), &u).is_ok());
}

#[test]
fn shares_and_slices_without_one_do_not_mix_on_a_gpu() {
    let i = inv(2, 80 * G);
    let p = binpack(&i);
    let plain = req(Size::Bytes(8 * G), GpuSelector::Count(1));
    let shared = with_sm(plain.clone(), 25);
    // GPU 0 runs a share: a slice without one goes to GPU 1 (binpack
    // would have filled GPU 0), a share goes to GPU 0
    let u = held(&[(0, 8 * G, 50)]);
    assert_eq!(p.place(&plain, &u).unwrap()[0].index, 1);
    assert_eq!(p.place(&shared, &u).unwrap()[0].index, 0);
    // GPU 0 runs a slice without a share: the reverse
    let u = held(&[(0, 8 * G, 0)]);
    assert_eq!(p.place(&shared, &u).unwrap()[0].index, 1);
    assert_eq!(p.place(&plain, &u).unwrap()[0].index, 0);
    // named, the mix is refused with what to do
    let on0 = |r: &Request| Request {
        gpus: GpuSelector::List(vec![GpuRef::Index(0)]),
        ..r.clone()
    };
    let e = p.place(&on0(&shared), &held(&[(0, 8 * G, 0)])).unwrap_err();
    assert!(
        matches!(e, PlacementError::ShareBesideUnshared { unshared: 1, .. }),
        "{e:?}"
    );
    let e = p.place(&on0(&plain), &held(&[(0, 8 * G, 30)])).unwrap_err();
    assert!(
        matches!(
            e,
            PlacementError::UnsharedBesideShares {
                used: 30,
                free: 70,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("Ask for a share too"), "{e}");
    // both GPUs taken by the other kind: the compute is named, not the bytes
    let e = p
        .place(&shared, &held(&[(0, 8 * G, 0), (1, 8 * G, 0)]))
        .unwrap_err();
    assert!(
        matches!(e, PlacementError::ShareBesideUnshared { .. }),
        "{e:?}"
    );
}

/// gpu-quota's daemons are multi-user (one server for every uid), so
/// shares of different host users share a GPU.
#[test]
fn shares_of_different_host_users_share_a_gpu() {
    let i = inv(2, 80 * G);
    let p = binpack(&i);
    let mut u = Usage::new();
    u.entry("GPU-0000".into()).or_default().add(&Slice {
        uuid: "GPU-0000".into(),
        index: 0,
        vram_bytes: 8 * G,
        sm_percent: 50,
        sm_user: Some(1000),
        sm_procs: 1,
        burst: None,
    });
    for uid in [1000, 1001, 100000] {
        let r = Request {
            user: Some(uid),
            ..with_sm(
                req(
                    Size::Bytes(8 * G),
                    GpuSelector::List(vec![GpuRef::Index(0)]),
                ),
                25,
            )
        };
        assert_eq!(p.place(&r, &u).unwrap()[0].index, 0, "uid {uid}");
    }
}

#[test]
fn a_share_is_of_one_gpu() {
    let i = inv(2, 80 * G);
    let p = binpack(&i);
    for gpus in [
        GpuSelector::Count(2),
        GpuSelector::All,
        GpuSelector::List(vec![GpuRef::Index(0), GpuRef::Index(1)]),
    ] {
        let e = p
            .place(&with_sm(req(Size::Bytes(G), gpus), 10), &Usage::new())
            .unwrap_err();
        assert!(
            matches!(e, PlacementError::ShareNeedsOneGpu { count: 2, .. }),
            "{e:?}"
        );
    }
}

fn with_burst(mut r: Request, limit: Size, priority: u32) -> Request {
    r.burst = Some(crate::request::BurstAsk {
        limit,
        priority,
        origin: Origin::Annotation("vram-limit".into()),
    });
    r
}

/// Admission sums guarantees only: two 4g..16g bursters and an 8g slice
/// fill a 16 GiB GPU, and the next guarantee is refused exactly as beside
/// three plain slices.
#[test]
fn admission_sums_guarantees_only() {
    let i = inv(1, 16 * G);
    let p = binpack(&i);
    let one = GpuSelector::List(vec![GpuRef::Index(0)]);
    let burster = with_burst(req(Size::Bytes(4 * G), one.clone()), Size::Bytes(16 * G), 0);
    let mut u = Usage::new();
    for r in [
        burster.clone(),
        burster.clone(),
        req(Size::Bytes(8 * G), one.clone()),
    ] {
        let s = p.place(&r, &u).unwrap();
        u.entry(s[0].uuid.clone()).or_default().add(&s[0]);
    }
    assert_eq!(u["GPU-0000"].bytes, 16 * G, "limits are not summed");
    let e = p.place(&req(Size::Bytes(G), one.clone()), &u).unwrap_err();
    assert!(matches!(e, PlacementError::DoesNotFit { .. }), "{e}");
    let e = p.place(&burster, &u).unwrap_err();
    assert!(matches!(e, PlacementError::DoesNotFit { .. }), "{e}");
    // the grant carries the limit and the priority as bytes
    let s = p
        .place(
            &with_burst(req(Size::Bytes(4 * G), one.clone()), Size::Ppm(500_000), 7),
            &Usage::new(),
        )
        .unwrap();
    assert_eq!(
        s[0].burst,
        Some(Burst {
            limit_bytes: 8 * G,
            priority: 7
        })
    );
    // a limit past what the GPU can ever give, or below the guarantee
    // (a percentage beside bytes is compared here, per GPU)
    let e = p
        .place(
            &with_burst(req(Size::Bytes(4 * G), one.clone()), Size::Bytes(17 * G), 0),
            &Usage::new(),
        )
        .unwrap_err();
    assert!(
        matches!(e, PlacementError::TooLarge { .. }) && e.to_string().contains("vram-limit"),
        "{e}"
    );
    let e = p
        .place(
            &with_burst(req(Size::Bytes(8 * G), one.clone()), Size::Ppm(250_000), 0),
            &Usage::new(),
        )
        .unwrap_err();
    assert!(
        matches!(e, PlacementError::LimitBelowGuarantee { .. }),
        "{e}"
    );
    // a limit that resolves to the guarantee lends nothing
    let s = p
        .place(
            &with_burst(req(Size::Bytes(8 * G), one), Size::Ppm(500_000), 0),
            &Usage::new(),
        )
        .unwrap();
    assert_eq!(s[0].burst, None);
}
