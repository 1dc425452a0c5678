//! Claims with a burst limit (`memoryLimit`): placed as a container's
//! `vram-limit=`, the limit kept in the claim's slice and in every bound
//! container's.
use super::*;
use gpuquota_formats::grant::Burst;

fn burst_alloc(uid: &str, gpu: &str, bytes: u64, limit: u64, priority: u32) -> ClaimAlloc {
    ClaimAlloc {
        burst: Some(Burst {
            limit_bytes: limit,
            priority,
        }),
        ..alloc(uid, gpu, bytes)
    }
}

fn claim_slice(cfg: &Config, uid: &str) -> Slice {
    entries(cfg)
        .into_iter()
        .find(|r| r.claim.as_ref().is_some_and(|c| c.uid == uid))
        .unwrap()
        .slices[0]
        .clone()
}

/// Only the guarantee is summed: two 4 GiB claims with a 12 GiB limit and
/// an 8 GiB one fit on a 16 GiB GPU; the claim's slice and a bound
/// container's carry the limit and the priority.
#[test]
fn a_claims_limit_is_in_its_slice_and_every_bound_containers() {
    let (d, cfg) = setup();
    prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 12 * G, 100)).unwrap();
    let want = Some(Burst {
        limit_bytes: 12 * G,
        priority: 100,
    });
    let s = claim_slice(&cfg, "u-1");
    assert_eq!((s.vram_bytes, s.burst), (4 * G, want));
    prepare(&cfg, &burst_alloc("u-2", GPU0, 4 * G, 12 * G, 0)).unwrap();
    prepare(&cfg, &alloc("u-3", GPU0, 8 * G)).unwrap();
    let u = Ledger::new(&cfg).read().unwrap().usage();
    assert_eq!(u.get(GPU0).map(|u| u.bytes), Some(16 * G));
    let root = d.path().join("runc").to_string_lossy().into_owned();
    let t = token_of(&cfg, "u-1");
    for id in ["c1", "c2"] {
        let r = bind(
            &cfg,
            &presenting("u-1", &t),
            id,
            &root,
            "/b",
            None,
            &mut vec![],
        )
        .unwrap();
        assert_eq!(r.slices[0].burst, want, "{id}");
        assert_eq!(r.slices[0].vram_bytes, 4 * G, "{id}");
    }
    // the same claim again is the same; another limit conflicts, naming both
    prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 12 * G, 100)).unwrap();
    let e = prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 8 * G, 100)).unwrap_err();
    assert!(matches!(e, ClaimError::Conflict { .. }), "{e:?}");
    assert!(e.to_string().contains("limit 12.00 GiB"), "{e}");
    assert!(e.to_string().contains("limit 8.00 GiB"), "{e}");
    // the driver's resync after a restart gets the limit back
    let back = prepared(&cfg).unwrap();
    let b = back.iter().find(|a| a.uid == "u-1").unwrap();
    assert_eq!(b, &burst_alloc("u-1", GPU0, 4 * G, 12 * G, 100));
}

/// A limit equal to the bytes lends nothing: a guaranteed claim.
#[test]
fn a_limit_equal_to_the_memory_is_a_guaranteed_claim() {
    let (_d, cfg) = setup();
    prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 4 * G, 7)).unwrap();
    assert_eq!(claim_slice(&cfg, "u-1").burst, None);
    // prepared again the same way, it is the same claim
    prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 4 * G, 7)).unwrap();
    prepare(&cfg, &alloc("u-1", GPU0, 4 * G)).unwrap();
}

/// The placer's checks of a container's limit, in the claim's words.
#[test]
fn a_limit_below_the_memory_or_above_the_gpu_is_refused() {
    let (_d, cfg) = setup();
    let e = prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 2 * G, 0)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::LimitBelowGuarantee { .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(
            "claim default/c-u-1 parameter memoryLimit=2.00 GiB is below the guarantee of 4.00 GiB"
        ),
        "{e}"
    );
    let e = prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 17 * G, 0)).unwrap_err();
    assert!(
        matches!(refusal(&e), PlacementError::TooLarge { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("parameter memoryLimit"), "{e}");
    assert!(entries(&cfg).is_empty());
}

/// A compute share never comes with a burst: refused before anything is
/// written, even with a limit that lends nothing.
#[test]
fn a_limit_beside_a_compute_share_is_refused() {
    let (_d, cfg) = setup();
    for limit in [16 * G, 4 * G] {
        let a = ClaimAlloc {
            sm: Some(25),
            sm_procs: 1,
            ..burst_alloc("u-1", GPU0, 4 * G, limit, 0)
        };
        let e = prepare(&cfg, &a).unwrap_err();
        assert!(
            matches!(e, ClaimError::BurstWithShare { sm: 25, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("claim default/c-u-1 asks for memoryLimit="),
            "{e}"
        );
        assert!(e.to_string().contains("plain device"), "{e}");
        assert_eq!(reason_of(&e), "invalid_request");
    }
    let e = prepare(&cfg, &burst_alloc("u-1", GPU0, 4 * G, 8 * G, 1001)).unwrap_err();
    assert!(
        matches!(
            e,
            ClaimError::Invalid {
                what: "burstPriority",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(entries(&cfg).is_empty());
}
