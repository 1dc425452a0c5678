use super::*;
use crate::config::{LogTarget, StaticGpu};
use crate::request::{GpuRef, GpuSelector, Origin, Request};
use crate::units::Size;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const G: u64 = 1 << 30;
const GPU0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const GPU1: &str = "GPU-11111111-1111-1111-1111-111111111111";

fn setup() -> (tempfile::TempDir, Config) {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        ledger_dir: d.path().join("ledger"),
        state_dir: d.path().join("state"),
        cdi_dir: d.path().join("cdi"),
        log: LogTarget::File,
        log_file: d.path().join("events.log"),
        inventory: crate::config::InventoryConfig {
            gpu: [GPU0, GPU1]
                .iter()
                .enumerate()
                .map(|(i, u)| StaticGpu {
                    index: i as u32,
                    uuid: u.to_string(),
                    name: "Simulated H100".into(),
                    memory: "16g".into(),
                    minor: None,
                })
                .collect(),
            ..Default::default()
        },
        ..Config::default()
    };
    (d, cfg)
}

fn alloc(uid: &str, gpu: &str, bytes: u64) -> ClaimAlloc {
    ClaimAlloc {
        uid: uid.into(),
        namespace: "default".into(),
        name: format!("c-{uid}"),
        gpu_uuid: gpu.into(),
        bytes,
    }
}

/// A docker-style container holding `bytes` on GPU `gpu` (not a claim).
fn container(cfg: &Config, id: &str, gpu: u32, bytes: u64) -> Reservation {
    let inv = Inventory::load(cfg).unwrap();
    let req = Request {
        vram: Size::Bytes(bytes),
        gpus: GpuSelector::List(vec![GpuRef::Index(gpu)]),
        origin: Origin::Annotation("vram".into()),
        named_gpus: true,
        sm: None,
        sm_procs: 0,
        user: Some(0),
    };
    Ledger::new(cfg)
        .admit(cfg, &inv, &req, id, Some("/run/runc"), "/b", &mut vec![])
        .unwrap()
}

fn entries(cfg: &Config) -> Vec<Reservation> {
    Ledger::new(cfg).read().unwrap().reservations
}

fn token_of(cfg: &Config, uid: &str) -> String {
    entries(cfg)
        .iter()
        .find_map(|r| {
            r.claim
                .as_ref()
                .filter(|c| c.uid == uid)
                .map(|c| c.token.clone())
        })
        .unwrap()
}

fn presenting(uid: &str, token: &str) -> Presented {
    presented(&serde_json::json!({"process": {"env": [
        "PATH=/bin",
        format!("{}={token}", env_var(uid)),
    ]}}))
    .unwrap()
    .unwrap()
}

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
        matches!(e, ClaimError::TooSmallForContext { smallest, .. } if smallest == 618 * mi),
        "{e:?}"
    );
    let m = e.to_string();
    assert!(
        m.contains("512.00 MiB")
            && m.contains("charged 616.00 MiB")
            && m.contains("smallest useful claim on this GPU is 618.00 MiB"),
        "{m}"
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
    match &e {
        ClaimError::DoesNotFit {
            asked, free, gpu, ..
        } => {
            assert_eq!((*asked, *free, gpu.as_str()), (8 * G, 6 * G, GPU0))
        }
        other => panic!("{other:?}"),
    }
    let m = e.to_string();
    assert!(
        m.contains("8.00 GiB") && m.contains("6.00 GiB") && m.contains(GPU0),
        "{m}"
    );
    assert!(
        m.contains("held by container docker1 outside DRA (10.00 GiB)") && !m.contains("waiting"),
        "{m}"
    );
    assert_eq!(entries(&cfg).len(), 1, "nothing reserved");
    assert!(!cdi_path(&cfg, "u-1").exists(), "no CDI spec");
    // what is left fits; then claims count against claims on the node
    prepare(&cfg, &alloc("u-2", GPU0, 6 * G)).unwrap();
    let e = prepare(&cfg, &alloc("u-3", GPU0, G)).unwrap_err();
    assert!(matches!(e, ClaimError::DoesNotFit { free: 0, .. }), "{e:?}");
    // the other GPU is untouched
    prepare(&cfg, &alloc("u-3", GPU1, 16 * G)).unwrap();
    // a reserve is never handed out
    let (_d2, mut cfg2) = setup();
    cfg2.reserve = "2g".into();
    let e = prepare(&cfg2, &alloc("u-4", GPU1, 15 * G)).unwrap_err();
    assert!(
        matches!(e, ClaimError::DoesNotFit { free, .. } if free == 14 * G),
        "{e:?}"
    );
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
    ] {
        let e = prepare(&cfg, &a).unwrap_err();
        assert!(matches!(e, ClaimError::Invalid { .. }), "{e:?}");
    }
    let e = prepare(&cfg, &alloc("u", "GPU-99", G)).unwrap_err();
    assert!(matches!(e, ClaimError::UnknownGpu { .. }), "{e:?}");
    assert!(e.to_string().contains(GPU0), "{e}");
    // a GPU the config excludes from slicing is not offered either
    cfg.gpus = vec!["1".into()];
    let e = prepare(&cfg, &alloc("u", GPU0, G)).unwrap_err();
    assert!(matches!(e, ClaimError::UnknownGpu { .. }), "{e:?}");
    assert_eq!(offers(&cfg, &ContextCosts::default()).unwrap().len(), 1);
    assert!(!Ledger::new(&cfg).exists() && !cfg.cdi_dir.exists());
}

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
            },
            Offer {
                uuid: GPU1.into(),
                index: 1,
                product: "Simulated H100".into(),
                total_bytes: 16 * G,
                offer_bytes: 15 * G,
                min_bytes: 618 << 20,
            }
        ]
    );
}

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
        &mut vec![],
    )
    .unwrap();
    assert_eq!(
        r.slices,
        [Slice {
            uuid: GPU0.into(),
            index: 0,
            vram_bytes: 8 * G,
            sm_percent: 0,
            sm_user: None,
            sm_procs: 0,
        }]
    );
    let u = Ledger::new(&cfg).read().unwrap().usage();
    assert_eq!(u.get(GPU0).map(|u| (u.bytes, u.holders)), Some((8 * G, 1)));
    // 8 GiB more still fit on the 16 GiB GPU (counted twice they would not)
    container(&cfg, "docker1", 0, 8 * G);
}

#[test]
fn the_cdi_spec_is_the_one_variable_in_a_0600_file_in_a_0755_directory() {
    let (_d, cfg) = setup();
    prepare(&cfg, &alloc("3f6c-a1", GPU1, 8 * G)).unwrap();
    let t = token_of(&cfg, "3f6c-a1");
    let p = cfg.cdi_dir.join("vram.gpu-quota.io-claim-3f6c-a1.json");
    assert_eq!(p, cdi_path(&cfg, "3f6c-a1"));
    let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "cdiVersion": "0.6.0",
            "kind": "vram.gpu-quota.io/claim",
            "devices": [{"name": "3f6c-a1", "containerEdits": {"env": [format!("GPU_QUOTA_CLAIM_3f6c_a1={t}")]}}]
        })
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&p), 0o600);
    assert_eq!(mode(&cfg.cdi_dir), 0o755);
    assert_eq!(
        mode(&Ledger::new(&cfg).path()),
        0o600,
        "the ledger holds the token"
    );
    // no temp file left
    let names: Vec<_> = std::fs::read_dir(&cfg.cdi_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn tokens_are_random_256_bits_and_never_logged_or_printed() {
    let (_d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap();
    prepare(&cfg, &alloc("u-2", GPU0, G)).unwrap();
    let (a, b) = (token_of(&cfg, "u-1"), token_of(&cfg, "u-2"));
    for t in [&a, &b] {
        assert_eq!(t.len(), 64, "{t}");
        assert!(t.bytes().all(|c| c.is_ascii_hexdigit()));
    }
    assert_ne!(a, b);
    assert_ne!(a, "0".repeat(64));
    // a binding refused for a wrong token; an unprepare refused while bound
    let e = bind(&cfg, &presenting("u-1", &b), "x", "/r", "/b", &mut vec![]).unwrap_err();
    bind(&cfg, &presenting("u-1", &a), "y", "/r", "/b", &mut vec![]).unwrap();
    let inuse = unprepare(&cfg, "u-1").unwrap_err();
    unprepare(&cfg, "u-2").unwrap();
    let log = std::fs::read_to_string(&cfg.log_file).unwrap();
    assert!(
        log.contains("claim:u-1") && log.contains("claim:u-2"),
        "events logged: {log}"
    );
    let data = Ledger::new(&cfg).read().unwrap();
    let printed = format!(
        "{log}{e}{e:?}{inuse}{inuse:?}{data:?}{:?}",
        presenting("u-1", &a)
    );
    for t in [&a, &b] {
        assert!(!printed.contains(t.as_str()), "token {t} in {printed}");
    }
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
        let e = bind(&cfg, &p, "c1", &root, "/b", &mut vec![]).unwrap_err();
        assert!(format!("{e:?}").starts_with(want), "{want}: {e:?}");
        assert_eq!(entries(&cfg), before, "{want}: nothing reserved");
    }
    let r = bind(&cfg, &presenting("u-1", &t), "c1", &root, "/b", &mut vec![]).unwrap();
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
        &mut reclaimed,
    )
    .unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].container_id, "c1");
    let ids: Vec<String> = entries(&cfg).into_iter().map(|r| r.container_id).collect();
    assert_eq!(ids, ["claim:u-1", "c2"]);
}

#[test]
fn unprepare_refuses_while_bound_then_releases_and_is_idempotent() {
    let (d, cfg) = setup();
    unprepare(&cfg, "never").unwrap();
    prepare(&cfg, &alloc("u-1", GPU0, 8 * G)).unwrap();
    let t = token_of(&cfg, "u-1");
    let root = d.path().join("runc").to_string_lossy().into_owned();
    bind(&cfg, &presenting("u-1", &t), "c1", &root, "/b", &mut vec![]).unwrap();
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
    let e = bind(&cfg, &p, "c1", &root, "/b", &mut vec![]).unwrap_err();
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
                bind(&cfg, &p.unwrap(), "c1", &root, "/b", &mut vec![]).map_err(|e| e.to_string())
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
    bind(&cfg, &p, "c1", &root, "/b", &mut vec![]).unwrap();
}

/// What a prepare does with a hostile CDI directory or
/// spec path, and an old 0644 ledger. A directory that is a link or
/// writable by others is refused with nothing reserved; a link planted at
/// the spec path is replaced, never written through; a temp file name
/// planted as a link is not followed; a ledger left 0644 by an older
/// gpu-quota is 0600 from the write that first puts a token in it.
#[test]
fn hostile_cdi_paths_and_an_old_0644_ledger() {
    use std::os::unix::fs::symlink;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    // the CDI directory a link (to a directory an attacker chose)
    let (d, cfg) = setup();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, &cfg.cdi_dir).unwrap();
    let e = prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    assert!(entries(&cfg).is_empty(), "nothing reserved");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // group-writable
    let (_d, cfg) = setup();
    std::fs::create_dir(&cfg.cdi_dir).unwrap();
    std::fs::set_permissions(&cfg.cdi_dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let e = prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap_err();
    assert!(e.to_string().contains("writable by group"), "{e}");
    assert!(entries(&cfg).is_empty(), "nothing reserved");
    // a link at the spec path, a link at the temp file's name, an old ledger
    let (d, cfg) = setup();
    container(&cfg, "docker1", 1, G);
    std::fs::set_permissions(
        Ledger::new(&cfg).path(),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::create_dir(&cfg.cdi_dir).unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let spec = cdi_path(&cfg, "u-1");
    symlink(&victim, &spec).unwrap();
    let tmp = cfg.cdi_dir.join(format!(
        ".{}.tmp.{}",
        spec.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    symlink(&victim, &tmp).unwrap();
    assert!(
        prepare(&cfg, &alloc("u-1", GPU0, G)).is_err(),
        "the planted temp link is not followed"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(entries(&cfg).len(), 1, "nothing reserved");
    std::fs::remove_file(&tmp).unwrap();
    prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(!std::fs::symlink_metadata(&spec)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(mode(&spec), 0o600);
    assert_eq!(mode(&Ledger::new(&cfg).path()), 0o600, "tightened");
    // a directory at the spec path: refused, nothing reserved
    std::fs::create_dir(cdi_path(&cfg, "u-2")).unwrap();
    assert!(prepare(&cfg, &alloc("u-2", GPU0, G)).is_err());
    assert_eq!(entries(&cfg).len(), 2);
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
        &mut vec![],
    )
    .unwrap();
    let b = bind(
        &cfg,
        &presenting("u-1", &t),
        "c2",
        &root,
        "/b2",
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

/// A GPU that serves compute shares is offered to no claim (a claim's
/// containers run outside MPS and would time-slice against the shares),
/// and a claim placed there anyway (an offer published before the share)
/// is refused at prepare, before its CDI spec is written; the other GPU is
/// offered and prepared as before, and the GPU is offered again once its
/// shares end.
#[test]
fn a_gpu_with_compute_shares_is_not_offered_to_claims() {
    let (_d, cfg) = setup();
    let inv = Inventory::load(&cfg).unwrap();
    let share = Request::share_for_test(2 * G, 0, 25);
    let l = Ledger::new(&cfg);
    l.admit(
        &cfg,
        &inv,
        &share,
        "s",
        Some("/run/runc"),
        "/b",
        &mut vec![],
    )
    .unwrap();
    let bytes = |o: Vec<Offer>| o.iter().map(|o| o.offer_bytes).collect::<Vec<_>>();
    let costs = ContextCosts::default();
    let e = prepare(&cfg, &alloc("u-1", GPU0, 4 * G)).unwrap_err();
    assert!(
        matches!(
            e,
            ClaimError::BesideShares {
                used: 25,
                holders: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("through MPS"), "{e}");
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
    let mut dead = l
        .admit(
            &cfg,
            &inv,
            &share,
            "s2",
            Some("/run/runc"),
            "/b",
            &mut vec![],
        )
        .unwrap();
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
