use super::*;
use serde_json::json;
const G: u64 = 1 << 30;

fn ann(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn compute_share() {
    let r = |v: Value| Request::from_parts(Some(&ann(v)), &[], EnvRequests::Ignored);
    let ok = r(json!({"vram": "8g", "sm": "25%"})).unwrap().unwrap();
    assert_eq!((ok.sm, ok.vram), (Some(25), Size::Bytes(8 * G)));
    assert_eq!(
        r(json!({"vram": "8g", "gpu-quota.io/sm": "100"}))
            .unwrap()
            .unwrap()
            .sm,
        Some(100)
    );
    assert_eq!(r(json!({"vram": "8g"})).unwrap().unwrap().sm, None);
    for (bad, why) in [
        ("0%", "no share"),
        ("101%", "whole GPU"),
        ("-5%", "negative"),
        ("12.5%", "whole percentage"),
        ("%", "empty"),
        ("1000", "whole percentage"),
    ] {
        let e = r(json!({"vram": "8g", "sm": bad})).unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
    let e = r(json!({"sm": "25%"})).unwrap_err().to_string();
    assert!(
        e.contains("without a memory slice") && e.contains("vram="),
        "{e}"
    );
    // the environment form, only where env requests are allowed, and
    // never beside an annotation
    let env = [
        "GPU_QUOTA_VRAM=4g".to_string(),
        "GPU_QUOTA_SM=50%".to_string(),
    ];
    let allowed = Request::from_parts(None, &env, EnvRequests::Allowed)
        .unwrap()
        .unwrap();
    assert_eq!(allowed.sm, Some(50));
    assert_eq!(
        Request::from_parts(None, &env, EnvRequests::Ignored).unwrap(),
        None
    );
    let a = Request::from_parts(
        Some(&ann(json!({"vram": "1g"}))),
        &env,
        EnvRequests::Allowed,
    )
    .unwrap()
    .unwrap();
    assert_eq!(a.sm, None, "an image ENV never adds a share to annotations");
}

/// `sm-procs=N` splits a share over N CUDA processes (default 1), only
/// beside a share, from 1 to 64 and at most the share's percentage; every
/// refusal names the key, the value and what to do.
#[test]
fn compute_share_split_over_processes() {
    let r = |v: Value| Request::from_parts(Some(&ann(v)), &[], EnvRequests::Ignored);
    let one = r(json!({"vram": "8g", "sm": "25%"})).unwrap().unwrap();
    assert_eq!(
        (one.sm, one.sm_procs),
        (Some(25), 1),
        "one process by default"
    );
    let four = r(json!({"vram": "8g", "sm": "25%", "sm-procs": "4"}))
        .unwrap()
        .unwrap();
    assert_eq!(four.sm_procs, 4);
    let ns = r(json!({"vram": "8g", "gpu-quota.io/sm": "64", "gpu-quota.io/sm-procs": " 64 "}))
        .unwrap()
        .unwrap();
    assert_eq!(ns.sm_procs, 64);
    assert_eq!(r(json!({"vram": "8g"})).unwrap().unwrap().sm_procs, 0);
    for (a, why) in [
        (json!({"vram": "8g", "sm-procs": "4"}), "none was asked for"),
        (json!({"sm-procs": "4"}), "none was asked for"),
        (
            json!({"vram": "8g", "sm": "25%", "sm-procs": "0"}),
            "leave sm-procs out",
        ),
        (
            json!({"vram": "8g", "sm": "100%", "sm-procs": "65"}),
            "at most 64",
        ),
        (
            json!({"vram": "8g", "sm": "25%", "sm-procs": "26"}),
            "at most 25 processes",
        ),
        (
            json!({"vram": "8g", "sm": "25%", "sm-procs": "-1"}),
            "whole number",
        ),
        (
            json!({"vram": "8g", "sm": "25%", "sm-procs": "2.5"}),
            "whole number",
        ),
        (json!({"vram": "8g", "sm": "25%", "sm-procs": ""}), "empty"),
        (
            json!({"vram": "8g", "sm": "25%", "sm-procs": 4}),
            "must be strings",
        ),
        (
            json!({"vram": "8g", "sm": "25%", "sm-procs": "4", "gpu-quota.io/sm-procs": "2"}),
            "contradicts",
        ),
    ] {
        let e = r(a.clone()).expect_err(&a.to_string()).to_string();
        assert!(e.contains(why) && e.contains("sm-procs"), "{a}: {e}");
        assert!(e.contains("accepted:"), "{e}");
    }
    // the environment form, only where env requests are allowed
    let env = [
        "GPU_QUOTA_VRAM=4g".to_string(),
        "GPU_QUOTA_SM=50%".to_string(),
        "GPU_QUOTA_SM_PROCS=2".to_string(),
    ];
    let allowed = Request::from_parts(None, &env, EnvRequests::Allowed)
        .unwrap()
        .unwrap();
    assert_eq!((allowed.sm, allowed.sm_procs), (Some(50), 2));
    assert!(env_request_vars(&env).contains(&"GPU_QUOTA_SM_PROCS"));
    // an image's ENV never splits (or widens) a share of annotations
    let a = Request::from_parts(
        Some(&ann(json!({"vram": "1g", "sm": "50%"}))),
        &env,
        EnvRequests::Allowed,
    )
    .unwrap()
    .unwrap();
    assert_eq!(a.sm_procs, 1);
}

#[test]
fn no_request() {
    assert_eq!(
        Request::from_parts(
            Some(&ann(json!({"foo": "bar"}))),
            &["PATH=/bin".into()],
            EnvRequests::Allowed
        ),
        Ok(None)
    );
    assert_eq!(
        Request::from_parts(None, &[], EnvRequests::Ignored),
        Ok(None)
    );
}

#[test]
fn annotation_and_aliases() {
    let r = Request::from_parts(Some(&ann(json!({"vram": "4g"}))), &[], EnvRequests::Ignored)
        .unwrap()
        .unwrap();
    assert_eq!(r.vram, Size::Bytes(4 * G));
    assert_eq!(r.gpus, GpuSelector::Count(1));
    let r = Request::from_parts(
        Some(&ann(
            json!({"gpu-quota.io/vram": "2g", "gpu-quota.io/gpu": "1"}),
        )),
        &[],
        EnvRequests::Ignored,
    )
    .unwrap()
    .unwrap();
    assert_eq!(r.vram, Size::Bytes(2 * G));
    assert_eq!(r.gpus, GpuSelector::List(vec![GpuRef::Index(1)]));
    // same value under both keys is fine
    assert!(Request::from_parts(
        Some(&ann(json!({"vram": "2g", "gpu-quota.io/vram": "2g"}))),
        &[],
        EnvRequests::Ignored
    )
    .is_ok());
}

#[test]
fn kubernetes_sandbox_is_left_alone() {
    let c = json!({"annotations": {"gpu-quota.io/vram": "8g", "io.kubernetes.cri.container-type": "sandbox"}});
    assert_eq!(Request::from_config(&c, EnvRequests::Ignored), Ok(None));
    let c = json!({"annotations": {"gpu-quota.io/vram": "8g", "io.kubernetes.cri-o.ContainerType": "sandbox"}});
    assert_eq!(Request::from_config(&c, EnvRequests::Ignored), Ok(None));
    let c = json!({"annotations": {"gpu-quota.io/vram": "8g", "io.kubernetes.cri.container-type": "container"}});
    assert!(Request::from_config(&c, EnvRequests::Ignored)
        .unwrap()
        .is_some());
}

/// Class 2: annotation `vram=1g` plus image `ENV GPU_QUOTA_GPUS=2`
/// gave the container two GPUs (fields were merged one by one). One
/// request has one source.
#[test]
fn annotations_make_the_environment_irrelevant() {
    let env = vec![
        "GPU_QUOTA_VRAM=8g".to_string(),
        "GPU_QUOTA_GPUS=2".to_string(),
    ];
    for policy in [EnvRequests::Allowed, EnvRequests::Ignored] {
        let r = Request::from_parts(Some(&ann(json!({"vram": "1g"}))), &env, policy)
            .unwrap()
            .unwrap();
        assert_eq!(r.vram, Size::Bytes(G));
        assert_eq!(
            r.gpus,
            GpuSelector::Count(1),
            "{policy:?}: env must not add GPUs"
        );
        assert_eq!(r.origin, Origin::Annotation("vram".into()));
    }
    // an annotation naming only the GPU still makes the env irrelevant
    // (and is refused for lacking a slice, not completed from the env)
    let e = Request::from_parts(Some(&ann(json!({"gpu": "0"}))), &env, EnvRequests::Allowed)
        .unwrap_err();
    assert!(e.to_string().contains("without a memory slice"), "{e}");
    // where the host allows env requests and no annotation is present
    let r = Request::from_parts(None, &env, EnvRequests::Allowed)
        .unwrap()
        .unwrap();
    assert_eq!(r.vram, Size::Bytes(8 * G));
    assert_eq!(r.gpus, GpuSelector::Count(2));
    assert_eq!(r.origin, Origin::Env("GPU_QUOTA_VRAM"));
    // by default the environment is never a request
    assert_eq!(
        Request::from_parts(None, &env, EnvRequests::Ignored),
        Ok(None)
    );
    assert_eq!(
        env_request_vars(&env),
        vec!["GPU_QUOTA_VRAM", "GPU_QUOTA_GPUS"]
    );
    // the first definition wins, as getenv sees it
    let dup = vec![
        "GPU_QUOTA_VRAM=2g".to_string(),
        "GPU_QUOTA_VRAM=8g".to_string(),
    ];
    let r = Request::from_parts(None, &dup, EnvRequests::Allowed)
        .unwrap()
        .unwrap();
    assert_eq!(r.vram, Size::Bytes(2 * G));
}

/// Whether the user named GPUs is read once, from the request's one
/// source, with the request (toolkit::reconcile takes it from here).
#[test]
fn named_gpus_comes_from_the_requests_one_source() {
    let named = |a: Option<Value>, env: &[&str]| {
        let env: Vec<String> = env.iter().map(|e| e.to_string()).collect();
        Request::from_parts(a.map(ann).as_ref(), &env, EnvRequests::Allowed)
            .unwrap()
            .unwrap()
            .named_gpus
    };
    assert!(!named(Some(json!({"vram": "1g"})), &[]));
    assert!(named(Some(json!({"vram": "1g", "gpus": "1"})), &[]));
    assert!(named(
        Some(json!({"vram": "1g", "gpu-quota.io/gpu": "0"})),
        &[]
    ));
    assert!(named(
        Some(json!({"vram": "1g", "gpu": "0", "gpus": "1"})),
        &[]
    ));
    // the environment's GPU keys do not name GPUs of an annotation request
    assert!(!named(Some(json!({"vram": "1g"})), &["GPU_QUOTA_GPUS=2"]));
    assert!(named(None, &["GPU_QUOTA_VRAM=1g", "GPU_QUOTA_GPU=1"]));
    assert!(named(None, &["GPU_QUOTA_VRAM=1g", "GPU_QUOTA_GPUS=all"]));
    assert!(!named(None, &["GPU_QUOTA_VRAM=1g"]));
    // an annotation of a GPU key does not name GPUs of an env request:
    // a lone `gpu` annotation is a request of its own (refused)
    assert!(Request::from_parts(
        Some(&ann(json!({"gpu": "1"}))),
        &["GPU_QUOTA_VRAM=1g".into()],
        EnvRequests::Allowed
    )
    .is_err());
}

#[test]
fn gpu_forms() {
    let r = Request::from_parts(
        Some(&ann(json!({"vram": "1g", "gpu": "0, GPU-ABCDEF01-2345"}))),
        &[],
        EnvRequests::Ignored,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        r.gpus,
        GpuSelector::List(vec![
            GpuRef::Index(0),
            GpuRef::Uuid("GPU-abcdef01-2345".into())
        ])
    );
    let r = Request::from_parts(
        Some(&ann(json!({"vram": "1g", "gpus": "all"}))),
        &[],
        EnvRequests::Ignored,
    )
    .unwrap()
    .unwrap();
    assert_eq!(r.gpus, GpuSelector::All);
    let r = Request::from_parts(
        Some(&ann(json!({"vram": "1g", "gpus": "2", "gpu": "0,1"}))),
        &[],
        EnvRequests::Ignored,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        r.gpus,
        GpuSelector::List(vec![GpuRef::Index(0), GpuRef::Index(1)])
    );
}

/// Table of malformed requests: each is refused with a message naming the
/// key, the value and what is accepted.
#[test]
fn malformed_table() {
    let long = "9".repeat(100);
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"vram": ""}), "annotation vram", "empty value"),
        (json!({"vram": "0"}), "annotation vram", "zero"),
        (json!({"vram": "-4g"}), "annotation vram", "negative"),
        (json!({"vram": "NaN"}), "annotation vram", "not a number"),
        (
            json!({"vram": "99999999999999999999g"}),
            "annotation vram",
            "64 bits",
        ),
        (json!({"vram": "4q"}), "annotation vram", "unknown unit"),
        (json!({"vram": long}), "annotation vram", "longer than"),
        (json!({"vram": 4}), "annotation vram", "must be strings"),
        (
            json!({"vram": "1g", "gpu-quota.io/vram": "2g"}),
            "annotation gpu-quota.io/vram",
            "contradicts",
        ),
        (
            json!({"vram": "1g", "gpu": "0,0"}),
            "annotation gpu",
            "listed twice",
        ),
        (
            json!({"vram": "1g", "gpu": "GPU-abc,gpu-ABC"}),
            "annotation gpu",
            "listed twice",
        ),
        (json!({"vram": "1g", "gpu": ""}), "annotation gpu", "empty"),
        (
            json!({"vram": "1g", "gpu": "0,,1"}),
            "annotation gpu",
            "empty element",
        ),
        (
            json!({"vram": "1g", "gpu": "-1"}),
            "annotation gpu",
            "negative",
        ),
        (
            json!({"vram": "1g", "gpu": "first"}),
            "annotation gpu",
            "neither",
        ),
        (
            json!({"vram": "1g", "gpu": "MIG-1234"}),
            "annotation gpu",
            "MIG",
        ),
        (
            json!({"vram": "1g", "gpu": "99999999999"}),
            "annotation gpu",
            "out of range",
        ),
        (
            json!({"vram": "1g", "gpus": "0"}),
            "annotation gpus",
            "zero",
        ),
        (
            json!({"vram": "1g", "gpus": "-2"}),
            "annotation gpus",
            "negative",
        ),
        (
            json!({"vram": "1g", "gpus": "two"}),
            "annotation gpus",
            "whole number",
        ),
        (
            json!({"vram": "1g", "gpus": "1000"}),
            "annotation gpus",
            "more GPUs",
        ),
        (
            json!({"vram": "1g", "gpus": "2", "gpu": "0"}),
            "annotation gpus",
            "contradicts",
        ),
        (
            json!({"vram": "1g", "gpus": "all", "gpu": "0"}),
            "annotation gpus",
            "contradicts",
        ),
        (
            json!({"gpu": "0"}),
            "annotation gpu",
            "without a memory slice",
        ),
    ];
    for (a, origin, reason) in cases {
        let e = Request::from_parts(Some(&ann(a.clone())), &[], EnvRequests::Ignored)
            .expect_err(&a.to_string());
        let msg = e.to_string();
        assert!(msg.contains(origin), "{msg} should name {origin}");
        assert!(msg.contains(reason), "{msg} should say {reason}");
        assert!(msg.contains("accepted:"), "{msg}");
    }
    let e = Request::from_parts(None, &["GPU_QUOTA_VRAM=lots".into()], EnvRequests::Allowed)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("environment variable GPU_QUOTA_VRAM"),
        "{e}"
    );
}

proptest::proptest! {
    #[test]
    fn any_annotation_never_panics(v in ".{0,80}", g in ".{0,40}", n in ".{0,12}") {
        let a = ann(json!({"vram": v, "gpu": g, "gpus": n}));
        let _ = Request::from_parts(Some(&a), &[], EnvRequests::Ignored);
    }
}

#[test]
fn a_burst_limit_and_its_priority() {
    let r = |v: Value| Request::from_parts(Some(&ann(v)), &[], EnvRequests::Ignored);
    let b = r(json!({"vram": "4g", "vram-limit": "16g"}))
        .unwrap()
        .unwrap();
    assert_eq!(b.vram, Size::Bytes(4 * G));
    let ask = b.burst.unwrap();
    assert_eq!((ask.limit, ask.priority), (Size::Bytes(16 * G), 0));
    let b = r(json!({"vram": "4g", "gpu-quota.io/vram-limit": "50%", "vram-priority": "100"}))
        .unwrap()
        .unwrap()
        .burst
        .unwrap();
    assert_eq!((b.limit, b.priority), (Size::Ppm(500_000), 100));
    // a limit equal to the guarantee lends nothing: a guaranteed slice
    assert_eq!(
        r(json!({"vram": "4g", "vram-limit": "4g"}))
            .unwrap()
            .unwrap()
            .burst,
        None
    );
    for (v, why) in [
        (json!({"vram-limit": "16g"}), "without a guarantee"),
        (json!({"vram-priority": "1"}), "without a guarantee"),
        (
            json!({"vram": "4g", "vram-priority": "1"}),
            "asked for none",
        ),
        (
            json!({"vram": "8g", "vram-limit": "4g"}),
            "below the guarantee",
        ),
        (
            json!({"vram": "4g", "vram-limit": "16g", "vram-priority": "1001"}),
            "more than 1000",
        ),
        (
            json!({"vram": "4g", "vram-limit": "16g", "vram-priority": "-1"}),
            "negative",
        ),
        (
            json!({"vram": "4g", "vram-limit": "16g", "vram-priority": "1.5"}),
            "whole number",
        ),
        (json!({"vram": "4g", "vram-limit": "0"}), "zero"),
        (
            json!({"vram": "4g", "vram-limit": "16g", "sm": "25%"}),
            "MPS",
        ),
        (
            json!({"vram": "4g", "vram-limit": "16g", "gpu-quota.io/vram-limit": "8g"}),
            "contradicts",
        ),
    ] {
        let e = r(v.clone()).unwrap_err().to_string();
        assert!(e.contains(why), "{v}: {e}");
    }
    // the environment form, only where the host allows it
    let env = [
        "GPU_QUOTA_VRAM=4g".to_string(),
        format!("{}=16g", keys::ENV_VRAM_LIMIT),
        format!("{}=7", keys::ENV_VRAM_PRIORITY),
    ];
    let e = Request::from_parts(None, &env, EnvRequests::Allowed)
        .unwrap()
        .unwrap()
        .burst
        .unwrap();
    assert_eq!((e.limit, e.priority), (Size::Bytes(16 * G), 7));
    assert_eq!(
        Request::from_parts(None, &env, EnvRequests::Ignored).unwrap(),
        None
    );
    // an annotation request ignores the environment's limit
    let a = Request::from_parts(
        Some(&ann(json!({"vram": "4g"}))),
        &env,
        EnvRequests::Allowed,
    )
    .unwrap()
    .unwrap();
    assert_eq!(a.burst, None);
}
