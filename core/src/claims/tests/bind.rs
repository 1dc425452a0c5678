//! Binding containers to a claim, and the usage they share.
use super::*;

#[test]
fn a_claims_bytes_count_once_whatever_is_bound_to_it() {
    let (_d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU0, 8 * G)).unwrap();
    let t = token_of(&cfg, "u-1");
    let r = bind(
        &cfg,
        &presenting("u-1", &t),
        "pod-c",
        "/run/k8s",
        "/b",
        None,
        &mut vec![],
    )
    .unwrap();
    assert_eq!(r.slices, [Slice::memory(GPU0.into(), 0, 8 * G)]);
    let u = Ledger::new(&cfg).read().unwrap().usage();
    assert_eq!(u.get(GPU0).map(|u| (u.bytes, u.holders)), Some((8 * G, 1)));
    // 8 GiB more still fit on the 16 GiB GPU (counted twice they would not)
    container(&cfg, "docker1", 0, 8 * G);
}

#[test]
fn binding_takes_the_right_token_only_and_every_consumer_shares_the_claim() {
    let (d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU1, 8 * G)).unwrap();
    let t = token_of(&cfg, "u-1");
    let root = d.path().join("runc").to_string_lossy().into_owned();
    let before = entries(&cfg);
    // negative control first: the right token binds (so the refusals below
    // are the token's doing)
    let mut wrong = t.clone().into_bytes();
    wrong[63] = if wrong[63] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).unwrap();
    for (p, want) in [
        (presenting("u-1", &wrong), "WrongToken"),
        (presenting("u-1", ""), "WrongToken"),
        (presenting("u-1", &t[..32]), "WrongToken"),
        (presenting("u-2", &t), "UnknownClaim"),
    ] {
        let e = bind(&cfg, &p, "c1", &root, "/b", None, &mut vec![]).unwrap_err();
        assert!(format!("{e:?}").starts_with(want), "{want}: {e:?}");
        assert_eq!(entries(&cfg), before, "{want}: nothing reserved");
    }
    let r = bind(
        &cfg,
        &presenting("u-1", &t),
        "c1",
        &root,
        "/b",
        None,
        &mut vec![],
    )
    .unwrap();
    assert_eq!(r.bound_claim.as_deref(), Some("u-1"));
    assert_eq!(r.slices[0].vram_bytes, 8 * G);
    assert_eq!(r.slices[0].uuid, GPU1);
    // a second container while c1 lives: bound too (its pod's sidecar, or
    // another pod the named claim is reserved for); the claim's bytes
    // still count once
    let r2 = bind(
        &cfg,
        &presenting("u-1", &t),
        "c3",
        &root,
        "/b3",
        None,
        &mut vec![],
    )
    .unwrap();
    assert_eq!(r2.bound_claim.as_deref(), Some("u-1"));
    assert_eq!(r2.slices, r.slices);
    let data = Ledger::new(&cfg).read().unwrap();
    assert_eq!(data.usage()[GPU1].bytes, 8 * G, "counted once");
    // each consumer has its own group in the shared usage file
    assert_ne!(state::consumer_group(&r), state::consumer_group(&r2));
    assert!(state::limits_text(&r, 0)
        .unwrap()
        .contains(&format!("consumer_group={}\n", state::consumer_group(&r))));
    // the forged ones are still refused with consumers bound
    let e = bind(
        &cfg,
        &presenting("u-1", &wrong),
        "c4",
        &root,
        "/b4",
        None,
        &mut vec![],
    )
    .unwrap_err();
    assert!(matches!(e, ClaimError::WrongToken { .. }), "{e:?}");
    Ledger::new(&cfg)
        .release(crate::ledger::Key::Root {
            id: "c3",
            root: Some(&root),
        })
        .unwrap();
    // c1 gone (created long ago, runc has no state for it): c2 takes the claim
    Ledger::new(&cfg)
        .transact(|d| {
            d.reservations
                .iter_mut()
                .filter(|r| r.container_id == "c1")
                .for_each(|r| r.created_unix = 1);
            Ok(((), true))
        })
        .unwrap();
    let mut reclaimed = vec![];
    bind(
        &cfg,
        &presenting("u-1", &t),
        "c2",
        &root,
        "/b",
        None,
        &mut reclaimed,
    )
    .unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].container_id, "c1");
    let ids: Vec<String> = entries(&cfg).into_iter().map(|r| r.container_id).collect();
    assert_eq!(ids, ["claim:u-1", "c2"]);
}

#[test]
fn presented_finds_one_claim() {
    let cfg = |env: &[&str]| serde_json::json!({"process": {"env": env}});
    assert_eq!(presented(&cfg(&["PATH=/bin"])).unwrap(), None);
    let p = presented(&cfg(&["GPU_QUOTA_CLAIM_a_b=t1", "GPU_QUOTA_CLAIM_a_b=t1"]))
        .unwrap()
        .unwrap();
    assert_eq!(p.var, "GPU_QUOTA_CLAIM_a_b");
    for two in [
        ["GPU_QUOTA_CLAIM_a=t1", "GPU_QUOTA_CLAIM_b=t1"],
        ["GPU_QUOTA_CLAIM_a=t1", "GPU_QUOTA_CLAIM_a=t2"],
    ] {
        let e = presented(&cfg(&two)).unwrap_err();
        assert!(matches!(e, ClaimError::TwoClaims { .. }), "{e:?}");
    }
    assert_eq!(env_var("3f6c-a1-9"), "GPU_QUOTA_CLAIM_3f6c_a1_9");
}

/// The variable's name comes from the image or the pod
/// spec (an image's `ENV` may name anything), and the refusal is printed on
/// the engine's terminal and in its log: control characters in it must
/// come out escaped, as every other hostile value in a gpu-quota message.
#[test]
fn a_hostile_variable_name_is_printed_escaped_in_every_refusal() {
    let (d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap();
    let t = token_of(&cfg, "u-1");
    let root = d.path().join("runc").to_string_lossy().into_owned();
    let env = |e: &[String]| serde_json::json!({"process": {"env": e}});
    let evil = "GPU_QUOTA_CLAIM_x\u{1b}]0;owned\u{7}\u{1b}[2J\ngpu-quota: admitted";
    let clean = |e: &ClaimError| {
        let m = e.to_string();
        assert!(
            !m.chars().any(|c| c.is_control()),
            "raw control characters in {m:?}"
        );
        assert!(m.contains("\\u{1b}"), "the name is still shown: {m:?}");
    };
    // unknown claim
    let p = presented(&env(&[format!("{evil}=1")])).unwrap().unwrap();
    let e = bind(&cfg, &p, "c1", &root, "/b", None, &mut vec![]).unwrap_err();
    assert!(matches!(e, ClaimError::UnknownClaim { .. }), "{e:?}");
    clean(&e);
    // two claims, the hostile one second
    let e = presented(&env(&[
        format!("{}={t}", env_var("u-1")),
        format!("{evil}=1"),
    ]))
    .unwrap_err();
    assert!(matches!(e, ClaimError::TwoClaims { .. }), "{e:?}");
    clean(&e);
    // control: a well-formed name is printed as it is, quoted
    let e = bind(
        &cfg,
        &presenting("u-1", "x"),
        "c1",
        &root,
        "/b",
        None,
        &mut vec![],
    )
    .unwrap_err();
    assert!(matches!(e, ClaimError::WrongToken { .. }), "{e:?}");
    assert!(e.to_string().contains("\"GPU_QUOTA_CLAIM_u_1\""), "{e}");
}

/// The token is compared as it is — no case folding,
/// no trimming, no prefix, nothing after the first `=` ignored — and an
/// empty value, a bare name or a second copy with another value never
/// binds. Negative control: the exact token binds.
#[test]
fn only_the_exact_token_binds_no_case_space_or_duplicate_tricks() {
    let (d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap();
    let t = token_of(&cfg, "u-1");
    assert!(t
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    let root = d.path().join("runc").to_string_lossy().into_owned();
    let var = env_var("u-1");
    let env = |e: &[String]| serde_json::json!({"process": {"env": e}});
    let before = entries(&cfg);
    for (what, e) in [
        ("uppercase", vec![format!("{var}={}", t.to_uppercase())]),
        ("leading space", vec![format!("{var}= {t}")]),
        ("trailing space", vec![format!("{var}={t} ")]),
        ("trailing newline", vec![format!("{var}={t}\n")]),
        ("longer", vec![format!("{var}={t}{t}")]),
        ("=-suffixed", vec![format!("{var}={t}=")]),
        ("empty", vec![format!("{var}=")]),
        ("bare name", vec![var.clone()]),
        ("uppercase uid", vec![format!("{}={t}", env_var("U-1"))]),
        ("dashes", vec![format!("GPU_QUOTA_CLAIM_u-1={t}")]),
    ] {
        let r = presented(&env(&e))
            .map_err(|e| e.to_string())
            .and_then(|p| {
                bind(&cfg, &p.unwrap(), "c1", &root, "/b", None, &mut vec![])
                    .map_err(|e| e.to_string())
            });
        assert!(r.is_err(), "{what}: bound");
        assert_eq!(entries(&cfg), before, "{what}: nothing reserved");
    }
    for e in [
        vec![format!("{var}={t}"), format!("{var}=")],
        vec![format!("{var}="), format!("{var}={t}")],
        vec![format!("{var}={t}"), format!("{var}={}", t.to_uppercase())],
    ] {
        let r = presented(&env(&e));
        assert!(
            matches!(r, Err(ClaimError::TwoClaims { .. })),
            "{e:?}: {r:?}"
        );
    }
    // control
    let p = presented(&env(&[format!("{var}={t}"), format!("{var}={t}")]))
        .unwrap()
        .unwrap();
    bind(&cfg, &p, "c1", &root, "/b", None, &mut vec![]).unwrap();
}

#[test]
fn the_shared_usage_of_a_claim_goes_with_its_last_consumer_and_gc_sweeps_orphans() {
    let (d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU1, 8 * G)).unwrap();
    let t = token_of(&cfg, "u-1");
    let root = d.path().join("runc").to_string_lossy().into_owned();
    let a = bind(
        &cfg,
        &presenting("u-1", &t),
        "c1",
        &root,
        "/b1",
        None,
        &mut vec![],
    )
    .unwrap();
    let b = bind(
        &cfg,
        &presenting("u-1", &t),
        "c2",
        &root,
        "/b2",
        None,
        &mut vec![],
    )
    .unwrap();
    shared_usage(&cfg, &a, state::UsageBacking::Plain).unwrap();
    shared_usage(&cfg, &b, state::UsageBacking::Plain).unwrap();
    let dir = state::claim_dir(&cfg, "u-1");
    assert!(state::usage_path(&dir).is_file());
    // one consumer ends: the other still uses the file
    let gone = Ledger::new(&cfg)
        .release(crate::ledger::Key::Root {
            id: "c1",
            root: Some(&root),
        })
        .unwrap();
    consumer_gone(&cfg, &gone[0]);
    assert!(state::usage_path(&dir).is_file(), "kept for c2");
    assert_eq!(
        sweep_shared(&cfg).unwrap(),
        Vec::<PathBuf>::new(),
        "c2 is bound"
    );
    // the last one ends: the file goes with it
    let gone = Ledger::new(&cfg)
        .release(crate::ledger::Key::Root {
            id: "c2",
            root: Some(&root),
        })
        .unwrap();
    consumer_gone(&cfg, &gone[0]);
    assert!(!dir.exists());
    // a crash left one behind: gc's sweep removes it
    shared_usage(&cfg, &b, state::UsageBacking::Plain).unwrap();
    assert_eq!(sweep_shared(&cfg).unwrap(), vec![dir.clone()]);
    assert!(!dir.exists());
}
