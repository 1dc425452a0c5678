//! core::toolkit: detection, reconciliation and narrowing.
use super::*;
use crate::request::{EnvRequests, Origin};
use crate::units::Size;
use serde_json::json;

fn host() -> Vec<HostGpu> {
    (0..4)
        .map(|i| HostGpu {
            index: i,
            uuid: format!("GPU-0000000{i}-0000-0000-0000-000000000000"),
            minor: i,
        })
        .collect()
}
fn req(gpus: GpuSelector) -> Request {
    Request {
        vram: Size::Bytes(8 << 30),
        gpus,
        origin: Origin::Annotation("vram".into()),
        named_gpus: false,
        sm: None,
        sm_procs: 0,
        user: Some(0),
        burst: None,
    }
}
/// `r` as a request that did (`true`) or did not name its GPUs.
fn named(r: Request, named_gpus: bool) -> Request {
    Request { named_gpus, ..r }
}
/// What dockerd 26 writes for `--gpus X` (legacy hook + env).
fn docker(visible: &str) -> Value {
    json!({
        "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", format!("NVIDIA_VISIBLE_DEVICES={visible}")]},
        "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["/usr/bin/nvidia-container-runtime-hook", "prestart"]}]},
        "annotations": {"vram": "8g"}
    })
}
fn engine(v: &Value) -> EngineRequest {
    detect(v, &host(), VisibleFrom::Engine).unwrap().unwrap()
}

#[test]
fn image_env_alone_is_not_a_request() {
    let v = json!({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4"]},
                    "hooks": {"prestart": [{"path": "/usr/bin/other-hook"}]}});
    assert_eq!(detect(&v, &host(), VisibleFrom::Engine), Ok(None));
    assert_eq!(detect(&json!({}), &host(), VisibleFrom::Engine), Ok(None));
}

#[test]
fn docker_gpus_forms() {
    assert_eq!(engine(&docker("all")).gpus, EngineGpus::All);
    assert_eq!(engine(&docker("0,1")).gpus, EngineGpus::Count(2));
    assert_eq!(engine(&docker("0")).gpus, EngineGpus::Count(1));
    assert_eq!(
        engine(&docker("1")).gpus,
        EngineGpus::List(vec![GpuRef::Index(1)])
    );
    assert_eq!(
        engine(&docker("1,GPU-ABCD-01")).gpus,
        EngineGpus::List(vec![GpuRef::Index(1), GpuRef::Uuid("GPU-abcd-01".into())])
    );
    assert_eq!(engine(&docker("void")).gpus, EngineGpus::Nothing);
    assert_eq!(engine(&docker("none")).gpus, EngineGpus::Nothing);
    // the last definition counts (the image's `all` comes first)
    let e = engine(&docker("2"));
    assert!(e.legacy_hook && !e.cdi_nodes);
    assert!(
        e.described.contains("NVIDIA_VISIBLE_DEVICES=2"),
        "{}",
        e.described
    );
    // the old hook name, in createRuntime
    let v = json!({"hooks": {"createRuntime": [{"path": "/x/nvidia-container-toolkit"}]}});
    assert_eq!(engine(&v).gpus, EngineGpus::All, "unset: all");
    for bad in ["MIG-1234", "0:1", "GPU-xyz", "one"] {
        assert!(
            matches!(
                detect(&docker(bad), &host(), VisibleFrom::Engine),
                Err(ToolkitError::Invalid { .. })
            ),
            "{bad}"
        );
    }
}

#[test]
fn cdi_nodes() {
    let v = json!({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
        "linux": {"devices": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia2"}, {"path": "/dev/nvidia-uvm"}]},
        "hooks": {"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}]}});
    let e = engine(&v);
    assert!(e.cdi_nodes && !e.legacy_hook);
    assert!(has_cdi_hook(&v));
    assert_eq!(
        e.gpus,
        EngineGpus::List(vec![GpuRef::Uuid(host()[2].uuid.clone())])
    );
    let all = json!({"linux": {"devices": (0..4).map(|i| json!({"path": format!("/dev/nvidia{i}")})).collect::<Vec<_>>()}});
    assert_eq!(engine(&all).gpus, EngineGpus::All);
    let unknown = json!({"linux": {"devices": [{"path": "/dev/nvidia9"}]}});
    assert!(matches!(
        detect(&unknown, &host(), VisibleFrom::Engine),
        Err(ToolkitError::UnknownNode { .. })
    ));
    assert_eq!(gpu_node_minor("/dev/nvidia-uvm"), None);
    assert_eq!(gpu_node_minor("/dev/nvidiactl"), None);
    assert_eq!(gpu_node_minor("/dev/nvidia12"), Some(12));
}

#[test]
fn reconcile_rules() {
    let h = host();
    let one = req(GpuSelector::Count(1));
    // --gpus device=1 chooses the GPU of the slice
    let r = reconcile(&named(one.clone(), false), &engine(&docker("1")), &h).unwrap();
    assert_eq!(r.gpus, GpuSelector::List(vec![GpuRef::Index(1)]));
    // --gpus 2 is gpus=2
    let r = reconcile(&named(one.clone(), false), &engine(&docker("0,1")), &h).unwrap();
    assert_eq!(r.gpus, GpuSelector::Count(2));
    // --gpus all: placement chooses what the request says
    let r = reconcile(&named(one.clone(), false), &engine(&docker("all")), &h).unwrap();
    assert_eq!(r.gpus, GpuSelector::Count(1));
    let r = reconcile(
        &named(req(GpuSelector::Count(3)), true),
        &engine(&docker("all")),
        &h,
    )
    .unwrap();
    assert_eq!(r.gpus, GpuSelector::Count(3));
    // agreeing: by index on one side, UUID on the other
    let g1 = req(GpuSelector::List(vec![GpuRef::Uuid(h[1].uuid.clone())]));
    let r = reconcile(&named(g1.clone(), true), &engine(&docker("1")), &h).unwrap();
    assert_eq!(r.gpus, g1.gpus);
    let r = reconcile(
        &named(req(GpuSelector::Count(2)), true),
        &engine(&docker("0,1")),
        &h,
    )
    .unwrap();
    assert_eq!(r.gpus, GpuSelector::Count(2));
    // contradictions, naming both
    let g0 = req(GpuSelector::List(vec![GpuRef::Index(0)]));
    let e = reconcile(&named(g0.clone(), true), &engine(&docker("1")), &h).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("NVIDIA_VISIBLE_DEVICES=1") && msg.contains("gpu=0"),
        "{msg}"
    );
    assert!(reconcile(
        &named(req(GpuSelector::Count(1)), true),
        &engine(&docker("0,1")),
        &h
    )
    .is_err());
    assert!(reconcile(
        &named(req(GpuSelector::All), true),
        &engine(&docker("0,1")),
        &h
    )
    .is_err());
    assert!(reconcile(
        &named(req(GpuSelector::Count(2)), true),
        &engine(&docker("1")),
        &h
    )
    .is_err());
    assert!(reconcile(
        &named(
            req(GpuSelector::List(vec![GpuRef::Index(2), GpuRef::Index(3)])),
            true
        ),
        &engine(&docker("0,1")),
        &h
    )
    .is_ok());
    assert!(reconcile(
        &named(req(GpuSelector::List(vec![GpuRef::Index(2)])), true),
        &engine(&docker("0,1")),
        &h
    )
    .is_err());
}

fn inventory() -> crate::Inventory {
    crate::Inventory {
        gpus: host()
            .into_iter()
            .map(|g| crate::Gpu {
                index: g.index,
                uuid: g.uuid,
                name: "NVIDIA H200".into(),
                total_bytes: 16 << 30,
                minor: g.minor,
                simulated: true,
            })
            .collect(),
        driver_version: "simulated".into(),
    }
}

/// Whether the user named GPUs is the Request's, read once: the create
/// path never goes back to config.json's request keys, so keys that
/// appear or vanish after the Request was built change nothing (the
/// runtime edits the config between reading and admitting it).
#[test]
fn whether_gpus_were_named_is_read_once_with_the_request() {
    let inv = inventory();
    // `gpu=0` with `--gpus device=1`: a contradiction, refused
    let mut v = docker("1");
    v["annotations"]["gpu"] = json!("0");
    let r = Request::from_config(&v, EnvRequests::Ignored)
        .unwrap()
        .unwrap();
    assert!(r.named_gpus);
    v["annotations"].as_object_mut().unwrap().remove("gpu");
    assert!(
        matches!(
            request_for_create(&v, &r, &inv, VisibleFrom::Engine),
            Err(ToolkitError::Contradiction { .. })
        ),
        "the request named GPU 0; the key removed later must not make it unnamed"
    );
    // no GPU named: the engine's GPU 1 is taken, whatever keys appear later
    let mut v = docker("1");
    let r = Request::from_config(&v, EnvRequests::Ignored)
        .unwrap()
        .unwrap();
    assert!(!r.named_gpus);
    v["annotations"]["gpu-quota.io/gpus"] = json!("2");
    v["process"]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!("GPU_QUOTA_GPU=3"));
    let (admit, engine) = request_for_create(&v, &r, &inv, VisibleFrom::Engine).unwrap();
    assert!(engine.is_some());
    assert_eq!(admit.gpus, GpuSelector::List(vec![GpuRef::Index(1)]));
}

#[test]
fn narrow_to_the_slice() {
    let mut v = json!({
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "A=b", "NVIDIA_VISIBLE_DEVICES=void"]},
        "hooks": {
            "prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}, {"path": "/usr/bin/keep"}],
            "createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}]
        },
        "mounts": [
            {"destination": "/dev/nvidia3", "source": "/dev/nvidia3", "type": "bind"},
            {"destination": "/usr/lib/libcuda.so.1", "source": "/usr/lib/libcuda.so.1", "type": "bind"}
        ],
        "linux": {
            "devices": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}, {"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/null"}],
            "resources": {"devices": [
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
                {"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"},
                {"allow": true, "type": "c", "major": 195, "minor": 255, "access": "rwm"},
                {"allow": true, "type": "c", "major": 195, "access": "rwm"},
                {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
            ]}
        }
    });
    let n = narrow(&mut v, &[1], &|_| None);
    assert_eq!(n.removed_hooks, 1);
    assert_eq!(n.removed_nodes, vec!["/dev/nvidia0".to_string()]);
    assert_eq!(n.removed_rules, 2);
    assert_eq!(n.removed_mounts, 1);
    assert_eq!(v["hooks"]["prestart"], json!([{"path": "/usr/bin/keep"}]));
    assert_eq!(
        v["hooks"]["createContainer"].as_array().unwrap().len(),
        1,
        "CDI hooks kept"
    );
    let paths: Vec<&str> = v["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/dev/nvidia1",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/null"
        ]
    );
    let minors: Vec<Value> = v["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["minor"].clone())
        .collect();
    assert_eq!(minors, [Value::Null, json!(1), json!(255), json!(3)]);
    assert_eq!(
        v["process"]["env"],
        json!([
            "NVIDIA_VISIBLE_DEVICES=all",
            "A=b",
            "NVIDIA_VISIBLE_DEVICES=void"
        ]),
        "the environment is spec::Environment's"
    );
    assert!(!has_legacy_hook(&v));
    // idempotent
    let once = v.clone();
    assert_eq!(narrow(&mut v, &[1], &|_| None), Narrowed::default());
    assert_eq!(v, once);
}

/// What containerd's `contrib/nvidia` writes for `ctr run --gpus N`
/// (nerdctl's `--gpus` too): its own binary as an `oci-hook` running
/// nvidia-container-cli with `--device`.
fn ctr_gpus(device: &str) -> Value {
    json!({
        "process": {"env": ["PATH=/bin"]},
        "hooks": {"prestart": [{"path": "/usr/local/bin/containerd", "args": ["containerd", "oci-hook", "--", "/usr/bin/nvidia-container-cli", "--load-kmods", "configure", format!("--device={device}"), "--compute", "--utility", "--pid={{pid}}", "{{rootfs}}"]}]},
        "annotations": {"vram": "8g"}
    })
}

/// `ctr run --gpus 1 --annotation vram=…` chooses GPU 1, whoever set the
/// environment; narrowing removes the hook (it would add its GPU's node
/// and cgroup rule outside the ledger).
#[test]
fn ctr_gpus_hook_is_an_engine_request_and_is_removed() {
    let h = host();
    let mut v = ctr_gpus("1");
    let e = detect(&v, &h, VisibleFrom::Unknown).unwrap().unwrap();
    assert!(e.cli_hook && !e.legacy_hook);
    assert_eq!(e.gpus, EngineGpus::List(vec![GpuRef::Index(1)]));
    assert!(e.described.contains("--device=1"), "{}", e.described);
    let r = reconcile(&named(req(GpuSelector::Count(1)), false), &e, &h).unwrap();
    assert_eq!(r.gpus, GpuSelector::List(vec![GpuRef::Index(1)]));
    // gpu=0 with --gpus 1: a contradiction, naming both
    let g0 = req(GpuSelector::List(vec![GpuRef::Index(0)]));
    let msg = reconcile(&named(g0.clone(), true), &e, &h)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("--device=1") && msg.contains("gpu=0"), "{msg}");
    let n = narrow(&mut v, &[1], &|_| None);
    assert_eq!(n.removed_hooks, 1);
    assert_eq!(v["hooks"]["prestart"], json!([]));
    // --device=all and a UUID
    assert_eq!(
        detect(&ctr_gpus("all"), &h, VisibleFrom::Unknown)
            .unwrap()
            .unwrap()
            .gpus,
        EngineGpus::All
    );
    let u = detect(&ctr_gpus(&h[2].uuid), &h, VisibleFrom::Unknown)
        .unwrap()
        .unwrap();
    assert_eq!(
        u.gpus,
        EngineGpus::List(vec![GpuRef::Uuid(h[2].uuid.clone())])
    );
    // a wrapper-named legacy hook (Kata's nvidia-container-toolkit.sh)
    let mut k = json!({"hooks": {"prestart": [{"path": "/usr/share/oci/hooks/prestart/nvidia-container-toolkit.sh", "args": ["nvidia-container-toolkit.sh", "prestart"]}]}});
    assert!(detect(&k, &h, VisibleFrom::Engine).unwrap().is_some());
    assert_eq!(narrow(&mut k, &[0], &|_| None).removed_hooks, 1);
}

/// NVIDIA's always-on hooks.d hook (podman, CRI-O) puts the legacy hook
/// into every container: NVIDIA_VISIBLE_DEVICES is then the image's, and
/// must not choose GPUs; it is rewritten to the slice. Docker's own
/// `--gpus` (its hook shape, under its runc root) is still honoured.
#[test]
fn always_on_hook_leaves_the_image_env_unread() {
    let h = host();
    let hooksd = |hook: &str| {
        json!({
            "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES=1"]},
            "hooks": {"prestart": [{"path": format!("/usr/bin/{hook}"), "args": [hook, "prestart"], "env": ["PATH=/usr/bin"]}]},
            "annotations": {"vram": "1g"}
        })
    };
    for hook in ["nvidia-container-runtime-hook", "nvidia-container-toolkit"] {
        let mut v = hooksd(hook);
        let e = detect(&v, &h, VisibleFrom::Unknown).unwrap().unwrap();
        assert_eq!(
            e.gpus,
            EngineGpus::All,
            "{hook}: the image's value is not read"
        );
        assert!(e.described.contains("not read"), "{}", e.described);
        let r = reconcile(&named(req(GpuSelector::Count(1)), false), &e, &h).unwrap();
        assert_eq!(r.gpus, GpuSelector::Count(1), "gpu-quota's keys decide");
        // an invalid value in the image is not even parsed
        let mut bad = v.clone();
        bad["process"]["env"][1] = json!("NVIDIA_VISIBLE_DEVICES=MIG-1");
        assert!(detect(&bad, &h, VisibleFrom::Unknown).is_ok());
        // the image's value is rewritten to the slice by spec::Environment
        narrow(&mut v, &[2], &|_| None);
        assert!(!has_legacy_hook(&v));
    }
    // the old name under Docker's root is not Docker's shape: not read
    let e = detect(&hooksd("nvidia-container-toolkit"), &h, VisibleFrom::Engine)
        .unwrap()
        .unwrap();
    assert_eq!(e.gpus, EngineGpus::All);
    // negative control: Docker's --gpus 2 under Docker's root is gpus=2
    let e = detect(
        &hooksd("nvidia-container-runtime-hook"),
        &h,
        VisibleFrom::Engine,
    )
    .unwrap()
    .unwrap();
    assert_eq!(e.gpus, EngineGpus::Count(2));
    assert_eq!(
        VisibleFrom::for_root(
            &crate::Config::default(),
            Some("/run/docker/runtime-runc/moby")
        ),
        VisibleFrom::Engine
    );
    for root in [
        None,
        Some("/run/runc"),
        Some("/run/containerd/runc/default"),
    ] {
        assert_eq!(
            VisibleFrom::for_root(&crate::Config::default(), root),
            VisibleFrom::Unknown
        );
    }
}

/// `nvidia-ctk cdi generate` lists each GPU's DRM nodes: narrowing keeps
/// only the slice's (by the host's sysfs), and their rules; a node whose
/// owner cannot be read goes.
#[test]
fn drm_nodes_of_other_gpus_go() {
    let d = tempfile::tempdir().unwrap();
    let hp = drm::tests::fake_host(d.path());
    let node =
        |p: &str, maj: u32, min: u32| json!({"path": p, "type": "c", "major": maj, "minor": min});
    let rule = |maj: u32, min: Option<u32>| match min {
        Some(m) => json!({"allow": true, "type": "c", "major": maj, "minor": m, "access": "rwm"}),
        None => json!({"allow": true, "type": "c", "major": maj, "access": "rwm"}),
    };
    let mut v = json!({"linux": {
        "devices": [node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1),
                    node("/dev/dri/card1", 226, 1), node("/dev/dri/renderD129", 226, 129),
                    node("/dev/dri/card2", 226, 2), node("/dev/dri/renderD130", 226, 130),
                    node("/dev/dri/card9", 226, 9), json!({"path": "/dev/dri/renderD131"})],
        "resources": {"devices": [json!({"allow": false, "access": "rwm"}),
            rule(226, Some(1)), rule(226, Some(129)), rule(226, Some(2)), rule(226, Some(130)),
            rule(226, None), rule(195, Some(1)), rule(1, Some(3))]}
    }});
    let n = narrow(&mut v, &[1], &|m| drm::owner(&hp, m));
    let paths: Vec<&str> = v["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        ["/dev/nvidia1", "/dev/dri/card2", "/dev/dri/renderD130"]
    );
    assert_eq!(n.removed_nodes.len(), 5, "{n:?}");
    let rules: Vec<(Value, Value)> = v["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["major"].clone(), r["minor"].clone()))
        .collect();
    assert_eq!(
        rules,
        [
            (Value::Null, Value::Null),
            (json!(226), json!(2)),
            (json!(226), json!(130)),
            (json!(195), json!(1)),
            (json!(1), json!(3))
        ]
    );
}

/// A bundle reused after a create carries gpu-quota's own node of the
/// GPU it assigned: that is no engine request (the second container is
/// not pinned to the first one's GPU), but it is still narrowed away when
/// the new slice is elsewhere. Another GPU's node is still a request.
#[test]
fn own_nodes_of_a_reused_bundle_are_no_request() {
    let h = host();
    let mut v = json!({
        "linux": {"devices": [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "fileMode": 438, "uid": 0, "gid": 0}],
                  "resources": {"devices": [{"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"}]}},
        "annotations": {"vram": "1g", ASSIGNED_ANNOTATION: h[1].uuid.to_uppercase()}
    });
    let e = detect(&v, &h, VisibleFrom::Unknown).unwrap().unwrap();
    assert_eq!(e.gpus, EngineGpus::All);
    let r = reconcile(&named(req(GpuSelector::Count(1)), false), &e, &h).unwrap();
    assert_eq!(r.gpus, GpuSelector::Count(1));
    let n = narrow(&mut v, &[0], &|_| None);
    assert_eq!(n.removed_nodes, ["/dev/nvidia1"]);
    assert_eq!(n.removed_rules, 1);
    // CDI's node of another GPU beside our own: still a request for it
    let mut v2 = v.clone();
    v2["linux"]["devices"] = json!([{"path": "/dev/nvidia1"}, {"path": "/dev/nvidia3"}]);
    let e = detect(&v2, &h, VisibleFrom::Unknown).unwrap().unwrap();
    assert_eq!(
        e.gpus,
        EngineGpus::List(vec![GpuRef::Uuid(h[3].uuid.clone())])
    );
}

/// A GPU the host lacks, named by the engine, is reported as the
/// engine's, not as the annotation's.
#[test]
fn unknown_engine_gpu_names_its_source() {
    let h = host();
    let e = engine(&docker("7"));
    let err = reconcile(&named(req(GpuSelector::Count(1)), false), &e, &h).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ToolkitError::UnknownGpu { .. }), "{msg}");
    assert!(
        msg.contains("NVIDIA_VISIBLE_DEVICES=7") && msg.contains("GPU 7"),
        "{msg}"
    );
    assert!(!msg.contains("annotation vram"), "{msg}");
    let e = detect(&ctr_gpus("GPU-ffff"), &h, VisibleFrom::Unknown)
        .unwrap()
        .unwrap();
    let msg = reconcile(&named(req(GpuSelector::Count(1)), false), &e, &h)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("--device=GPU-ffff"), "{msg}");
}

/// A DRA claim's GPUs are decided before the engine's request is read: it
/// may only agree with them (the claim path builds no Request of its own).
#[test]
fn a_decided_slice_only_takes_an_engine_request_that_agrees() {
    let h = host();
    let claim = vec![h[1].uuid.clone()];
    for agreeing in ["1", "all", "void"] {
        assert_eq!(
            agrees_with(&claim, &engine(&docker(agreeing)), &h),
            Ok(()),
            "{agreeing}"
        );
    }
    // `--gpus 1` is written as device 0: a count of one, which agrees
    assert_eq!(agrees_with(&claim, &engine(&docker("0")), &h), Ok(()));
    for other in ["2", "0,1", "1,2"] {
        let e = agrees_with(&claim, &engine(&docker(other)), &h).unwrap_err();
        assert!(
            matches!(&e, ToolkitError::Contradiction { ours, .. } if ours.contains(&h[1].uuid)),
            "{other}: {e}"
        );
    }
    assert!(matches!(
        agrees_with(&claim, &engine(&docker("7")), &h),
        Err(ToolkitError::UnknownGpu { .. })
    ));
}
