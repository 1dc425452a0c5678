//! Beside the NVIDIA Container Toolkit, an
//! engine's GPU request (`--gpus` → the toolkit's legacy prestart hook and
//! NVIDIA_VISIBLE_DEVICES; CDI → device nodes in linux.devices) never widens
//! a slice, and without a gpu-quota request nothing changes.
//!
//! containerd's `ctr run --gpus` hook (the real `containerd
//! oci-hook` running tests/toolkit/nvidia-container-cli, a stand-in that
//! makes the nodes and device-cgroup rules `--device` names), NVIDIA's
//! always-on hooks.d hook (the image's NVIDIA_VISIBLE_DEVICES), other GPUs'
//! DRM nodes and a reused bundle are narrowed to the slice too.
//!
//! The toolkit's hook is tests/toolkit/nvidia-container-runtime-hook, a
//! stand-in that makes the /dev/nvidiaN nodes NVIDIA_VISIBLE_DEVICES names
//! in the container and records each run; the specs are written the way
//! dockerd 26 writes them for `--gpus` (tests/engines/run.sh checks that
//! against the real dockerd).
use gpu_quota_e2e::*;
use serde_json::{json, Value};
use std::path::PathBuf;

const PROBE: &str =
    "ls /dev > /out/dev; cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits 2>/dev/null; touch /out/done";

/// A host whose runc root counts as Docker's (`docker_runc_roots`): there
/// NVIDIA_VISIBLE_DEVICES beside Docker's hook is the engine's request.
fn docker_host() -> Host {
    Host::new(HostOpts {
        extra_config: "docker_runc_roots = [\"@HOST@/runc-root\"]".into(),
        ..HostOpts::default()
    })
}

/// The stand-in hook, installed in this host's directory.
fn standin(h: &Host) -> (PathBuf, PathBuf) {
    let dir = h.path().join("toolkit");
    std::fs::create_dir_all(&dir).unwrap();
    let hook = dir.join("nvidia-container-runtime-hook");
    for f in ["nvidia-container-runtime-hook", "nvidia-container-cli"] {
        std::fs::copy(repo_dir().join("tests/toolkit").join(f), dir.join(f)).unwrap();
    }
    let log = dir.join("standin.log");
    std::fs::write(
        dir.join("standin.conf"),
        format!(
            "dev_root={}\nlog={}\n",
            h.path().join("dev").display(),
            log.display()
        ),
    )
    .unwrap();
    (hook, log)
}

/// What dockerd 26 adds for `--gpus X`: NVIDIA_VISIBLE_DEVICES appended to
/// the env (after the image's own) and the toolkit's prestart hook.
fn docker_gpus(b: &Bundle, hook: &std::path::Path, visible: &str) {
    let mut c = b.config();
    let env = c["process"]["env"].as_array_mut().unwrap();
    env.push(json!(format!("NVIDIA_VISIBLE_DEVICES={visible}")));
    c["hooks"] = json!({"prestart": [{"path": hook, "args": ["nvidia-container-runtime-hook", "prestart"]}]});
    b.write_config(&c);
}

/// What a CDI device `nvidia.com/gpu=…` adds: the GPU nodes, the control
/// nodes, their cgroup rules, an nvidia-cdi-hook (here: `true`).
fn cdi(b: &Bundle, gpus: &[u32]) {
    let mut c = b.config();
    let mut devs = vec![];
    let mut rules = vec![json!({"allow": false, "access": "rwm"})];
    for (p, maj, min) in gpus
        .iter()
        .map(|i| (format!("/dev/nvidia{i}"), 195, *i))
        .chain([("/dev/nvidiactl".to_string(), 195, 255)])
    {
        devs.push(json!({"path": p, "type": "c", "major": maj, "minor": min, "fileMode": 0o666, "uid": 0, "gid": 0}));
        rules
            .push(json!({"allow": true, "type": "c", "major": maj, "minor": min, "access": "rwm"}));
    }
    c["linux"]["devices"] = json!(devs);
    c["linux"]["resources"]["devices"] = json!(rules);
    c["process"]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!("NVIDIA_VISIBLE_DEVICES=void"));
    c["hooks"] = json!({"createContainer": [{"path": "/bin/true", "args": ["nvidia-cdi-hook", "update-ldcache"]}]});
    b.write_config(&c);
}

fn gpu_nodes(b: &Bundle) -> Vec<String> {
    b.wait_out("done", 20).expect("container ran its probe");
    std::fs::read_to_string(b.out.join("dev"))
        .unwrap()
        .lines()
        .filter(|l| {
            l.strip_prefix("nvidia")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect()
}

fn slices(h: &Host) -> Vec<(u64, u64)> {
    h.reservations()
        .iter()
        .flat_map(|r| r["slices"].as_array().unwrap().clone())
        .map(|s| (s["index"].as_u64().unwrap(), s["bytes"].as_u64().unwrap()))
        .collect()
}

fn run_one(h: &Host, b: &Bundle, id: &str) -> std::process::Output {
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), id]);
    if o.status.success() {
        assert_ok(&h.runtime(&["start", id]), "start");
    }
    o
}

fn log_of(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The negative control: plain runc runs the stand-in, which gives the
/// container every GPU NVIDIA_VISIBLE_DEVICES names.
#[test]
fn standin_hook_widens_under_plain_runc() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let (hook, log) = standin(&h);
    let b = h.bundle("plain");
    b.set(&[("vram", "4g")], PROBE, &[]);
    docker_gpus(&b, &hook, "all");
    assert_ok(
        &h.runc(&["run", "--bundle", &b.bundle_arg(), "plain"]),
        "runc run",
    );
    assert_eq!(gpu_nodes(&b), ["nvidia0", "nvidia1"], "the stand-in's work");
    assert!(log_of(&log).contains("ran plain NVIDIA_VISIBLE_DEVICES=all nodes=0,1"));
}

/// `docker run --runtime gpu-quota --gpus all --annotation vram=4g`: one
/// GPU, the one admitted; the toolkit's hook never runs.
#[test]
fn gpus_all_with_vram_gets_its_slice_only() {
    require_e2e!();
    let h = docker_host();
    let (hook, log) = standin(&h);
    let b = h.bundle("all");
    b.set(&[("vram", "4g")], PROBE, &["NVIDIA_VISIBLE_DEVICES=all"]);
    docker_gpus(&b, &hook, "all");
    assert_ok(&run_one(&h, &b, "all"), "create");
    let s = slices(&h);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].1, 4 * GIB);
    assert_eq!(gpu_nodes(&b), [format!("nvidia{}", s[0].0)]);
    assert_eq!(log_of(&log), "", "the toolkit's hook did not run");
    let c = b.config();
    assert!(!c.to_string().contains("nvidia-container-runtime-hook"));
    let want = format!("NVIDIA_VISIBLE_DEVICES={}", uuid(s[0].0 as u32));
    assert!(
        c["process"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e.as_str().unwrap().starts_with("NVIDIA_VISIBLE_DEVICES="))
            .all(|e| e == &json!(want)),
        "{}",
        c["process"]["env"]
    );
    assert_ok(&h.runtime(&["delete", "--force", "all"]), "delete");
    assert!(h.reservations().is_empty());
}

/// `--gpus '"device=1"'` chooses the GPU; `--gpus 2` is gpus=2.
#[test]
fn gpus_device_and_count() {
    require_e2e!();
    let h = docker_host();
    let (hook, log) = standin(&h);
    let b = h.bundle("dev1");
    b.set(&[("vram", "4g")], PROBE, &[]);
    docker_gpus(&b, &hook, "1");
    assert_ok(&run_one(&h, &b, "dev1"), "create device=1");
    assert_eq!(slices(&h), [(1, 4 * GIB)]);
    assert_eq!(gpu_nodes(&b), ["nvidia1"]);
    assert_ok(&h.runtime(&["delete", "--force", "dev1"]), "delete");
    let b = h.bundle("two");
    b.set(&[("vram", "2g")], PROBE, &[]);
    docker_gpus(&b, &hook, "0,1");
    assert_ok(&run_one(&h, &b, "two"), "create --gpus 2");
    let mut s = slices(&h);
    s.sort();
    assert_eq!(s, [(0, 2 * GIB), (1, 2 * GIB)]);
    assert_eq!(gpu_nodes(&b), ["nvidia0", "nvidia1"]);
    let limits = std::fs::read_to_string(b.out.join("limits")).unwrap();
    assert!(
        limits.contains(&format!("gpus={},{}\n", uuid(0), uuid(1)))
            || limits.contains(&format!("gpus={},{}\n", uuid(1), uuid(0))),
        "{limits}"
    );
    assert_ok(&h.runtime(&["delete", "--force", "two"]), "delete");
    assert_eq!(log_of(&log), "");
}

/// `--gpus '"device=1"'` with the annotation gpu=0: refused before anything
/// is reserved, naming both; count mismatches too.
#[test]
fn contradiction_is_refused_before_reserving() {
    require_e2e!();
    let h = docker_host();
    let (hook, log) = standin(&h);
    for (id, ann, vis) in [
        ("c1", vec![("vram", "4g"), ("gpu", "0")], "1"),
        ("c2", vec![("vram", "4g"), ("gpus", "1")], "0,1"),
    ] {
        let b = h.bundle(id);
        b.set(&ann, PROBE, &[]);
        docker_gpus(&b, &hook, vis);
        let before = std::fs::read(b.config_path()).unwrap();
        let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), id]);
        assert!(!o.status.success(), "{id} was created");
        let e = stderr(&o);
        assert!(
            e.contains(&format!("NVIDIA_VISIBLE_DEVICES={vis}")) && e.contains("contradict"),
            "{e}"
        );
        assert!(
            e.contains(if id == "c1" { "gpu=0" } else { "gpus=1" }),
            "{e}"
        );
        assert!(h.reservations().is_empty(), "nothing reserved");
        assert_eq!(std::fs::read(b.config_path()).unwrap(), before);
    }
    assert_eq!(log_of(&log), "");
}

/// `--device nvidia.com/gpu=all` (CDI) with vram: narrowed to the slice.
#[test]
fn cdi_devices_are_narrowed_to_the_slice() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("cdi");
    b.set(&[("vram", "4g")], PROBE, &[]);
    cdi(&b, &[0, 1]);
    assert_ok(&run_one(&h, &b, "cdi"), "create");
    let s = slices(&h);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(gpu_nodes(&b), [format!("nvidia{}", s[0].0)]);
    let c = b.config();
    let rules: Vec<&Value> = c["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["major"] == 195 && r["minor"].as_u64().is_some_and(|m| m < 254))
        .collect();
    assert!(rules.iter().all(|r| r["minor"] == s[0].0), "{rules:?}");
    assert_eq!(
        c["hooks"]["createContainer"].as_array().unwrap().len(),
        1,
        "CDI hook kept"
    );
    assert_ok(&h.runtime(&["delete", "--force", "cdi"]), "delete");
    // CDI naming one GPU chooses it
    let b = h.bundle("cdi1");
    b.set(&[("vram", "4g")], PROBE, &[]);
    cdi(&b, &[1]);
    assert_ok(&run_one(&h, &b, "cdi1"), "create");
    assert_eq!(slices(&h), [(1, 4 * GIB)]);
    assert_eq!(gpu_nodes(&b), ["nvidia1"]);
}

/// Without a gpu-quota request nothing changes: `--gpus all`, `--gpus 1`,
/// CDI: config.json byte-identical, the toolkit's hook ran and the
/// container has what it asked; no ledger. A CUDA-style image's ENV alone
/// with vram is an ordinary request (one GPU, env untouched).
#[test]
fn without_vram_untouched_and_image_env_is_no_request() {
    require_e2e!();
    let h = docker_host();
    let (hook, log) = standin(&h);
    for (id, vis, want) in [
        ("n-all", "all", vec!["nvidia0", "nvidia1"]),
        ("n-one", "1", vec!["nvidia1"]),
    ] {
        let b = h.bundle(id);
        b.set(
            &[("unrelated", "x")],
            PROBE,
            &["NVIDIA_VISIBLE_DEVICES=all"],
        );
        docker_gpus(&b, &hook, vis);
        let before = std::fs::read(b.config_path()).unwrap();
        assert_ok(&h.runtime(&["run", "--bundle", &b.bundle_arg(), id]), "run");
        assert_eq!(
            std::fs::read(b.config_path()).unwrap(),
            before,
            "{id}: config.json byte-identical"
        );
        assert_eq!(gpu_nodes(&b), want, "{id}");
        assert!(
            log_of(&log).contains(&format!("ran {id} NVIDIA_VISIBLE_DEVICES={vis}")),
            "{}",
            log_of(&log)
        );
    }
    let b = h.bundle("n-cdi");
    b.set(&[], PROBE, &[]);
    cdi(&b, &[0, 1]);
    let before = std::fs::read(b.config_path()).unwrap();
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "n-cdi"]),
        "run",
    );
    assert_eq!(std::fs::read(b.config_path()).unwrap(), before);
    assert_eq!(gpu_nodes(&b), ["nvidia0", "nvidia1"]);
    assert!(h.ledger_bytes().is_none(), "no ledger touched");
    // image ENV NVIDIA_VISIBLE_DEVICES=all, no --gpus: not an engine request
    let b = h.bundle("img");
    b.set(&[("vram", "4g")], PROBE, &["NVIDIA_VISIBLE_DEVICES=all"]);
    assert_ok(&run_one(&h, &b, "img"), "create");
    let s = slices(&h);
    assert_eq!(s.len(), 1);
    assert_eq!(gpu_nodes(&b), [format!("nvidia{}", s[0].0)]);
    assert!(
        b.config()["process"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("NVIDIA_VISIBLE_DEVICES=all")),
        "image env left alone"
    );
}

/// Lists the GPU nodes and whether each opens past the device cgroup
/// (the fake nodes have no driver: ENXIO when allowed, EPERM when not).
const PROBE_OPEN: &str = "ls /dev > /out/dev; ls /dev/dri > /out/dri 2>/dev/null; for n in /dev/nvidia[0-9]*; do [ -e $n ] && echo \"$n $( (: <$n) 2>&1 | sed 's/.*: //')\"; done > /out/open; touch /out/done";

/// What containerd's `contrib/nvidia` writes for `ctr run --gpus DEVICE`
/// (nerdctl's `--gpus` too): the real `containerd oci-hook --` running the
/// stand-in nvidia-container-cli found where ctr would find it.
fn ctr_gpus(b: &Bundle, cli: &std::path::Path, device: &str) {
    let containerd = gpu_quota_e2e::which("containerd").expect("containerd installed");
    let mut c = b.config();
    c["hooks"] = json!({"prestart": [{"path": containerd, "args": [
        "containerd", "oci-hook", "--", cli, "--load-kmods", "configure",
        format!("--device={device}"), "--compute", "--compat32", "--graphics", "--utility",
        "--video", "--display", "--pid={{pid}}", "{{rootfs}}"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}]});
    b.write_config(&c);
}

fn cli_path(h: &Host) -> PathBuf {
    h.path().join("toolkit/nvidia-container-cli")
}

/// The negative control of the stand-in: under plain runc containerd's
/// hook gives the container GPU 1's node and lets it open it.
#[test]
fn ctr_gpus_standin_works_under_plain_runc() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let (_, log) = standin(&h);
    let b = h.bundle("ctr-plain");
    b.set(&[], PROBE_OPEN, &[]);
    ctr_gpus(&b, &cli_path(&h), "1");
    assert_ok(
        &h.runc(&["run", "--bundle", &b.bundle_arg(), "ctr-plain"]),
        "runc run",
    );
    assert_eq!(gpu_nodes(&b), ["nvidia1"]);
    let open = std::fs::read_to_string(b.out.join("open")).unwrap();
    assert!(open.contains("/dev/nvidia1 No such device"), "{open}");
    assert!(
        log_of(&log).contains("cli ran") && log_of(&log).contains("devices=1"),
        "{}",
        log_of(&log)
    );
}

/// `ctr run --gpus 1 --annotation vram=4g`: the slice is on GPU 1 (ctr's
/// choice), the container has GPU 1's node only, and containerd's hook
/// never runs (on 6cea19e the hook stayed: the slice went to GPU 0 and the
/// hook added GPU 1 outside the ledger).
#[test]
fn ctr_gpus_with_vram_gets_its_slice_only() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let (_, log) = standin(&h);
    let b = h.bundle("ctr1");
    b.set(&[("vram", "4g")], PROBE_OPEN, &[]);
    ctr_gpus(&b, &cli_path(&h), "1");
    assert_ok(&run_one(&h, &b, "ctr1"), "create");
    assert_eq!(slices(&h), [(1, 4 * GIB)]);
    assert_eq!(gpu_nodes(&b), ["nvidia1"]);
    assert_eq!(log_of(&log), "", "containerd's hook did not run");
    assert!(!b.config().to_string().contains("oci-hook"));
    assert_ok(&h.runtime(&["delete", "--force", "ctr1"]), "delete");
    // gpu=0 beside --gpus 1: refused, nothing reserved, config untouched
    let b = h.bundle("ctr2");
    b.set(&[("vram", "4g"), ("gpu", "0")], PROBE_OPEN, &[]);
    ctr_gpus(&b, &cli_path(&h), "1");
    let before = std::fs::read(b.config_path()).unwrap();
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), "ctr2"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--device=1") && stderr(&o).contains("gpu=0"),
        "{}",
        stderr(&o)
    );
    assert!(h.reservations().is_empty());
    assert_eq!(std::fs::read(b.config_path()).unwrap(), before);
    // without a request: byte-identical, the hook ran, GPU 1 is there
    let b = h.bundle("ctr3");
    b.set(&[], PROBE_OPEN, &[]);
    ctr_gpus(&b, &cli_path(&h), "1");
    let before = std::fs::read(b.config_path()).unwrap();
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "ctr3"]),
        "run",
    );
    assert_eq!(std::fs::read(b.config_path()).unwrap(), before);
    assert_eq!(gpu_nodes(&b), ["nvidia1"]);
    assert!(log_of(&log).contains("cli ran"));
    assert!(
        h.reservations().is_empty(),
        "no reservation without a request"
    );
}

/// NVIDIA's always-on hooks.d hook (podman, CRI-O): an image with
/// `ENV NVIDIA_VISIBLE_DEVICES=0,1` and vram=1g gets one 1 GiB slice
/// (on 6cea19e: two, both charged), only its node, and the variables name
/// the slice. `=1` does not move it either.
#[test]
fn always_on_hook_image_env_chooses_nothing() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let (hook, log) = standin(&h);
    for (id, image) in [("ao-both", "0,1"), ("ao-one", "1")] {
        let b = h.bundle(id);
        b.set(
            &[("vram", "1g")],
            PROBE_OPEN,
            &[
                &format!("NVIDIA_VISIBLE_DEVICES={image}"),
                "CUDA_VISIBLE_DEVICES=1",
            ],
        );
        let mut c = b.config();
        // oci-nvidia-hook.json: the old name, only PATH in its env
        c["hooks"] = json!({"prestart": [{"path": hook.with_file_name("nvidia-container-toolkit"), "args": ["nvidia-container-toolkit", "prestart"], "env": ["PATH=/usr/bin:/bin"]}]});
        std::fs::copy(&hook, hook.with_file_name("nvidia-container-toolkit")).unwrap();
        b.write_config(&c);
        assert_ok(&run_one(&h, &b, id), "create");
        let s = slices(&h);
        assert_eq!(s.len(), 1, "{id}: one slice, not the image's GPUs: {s:?}");
        assert_eq!(s[0].1, GIB);
        assert_eq!(gpu_nodes(&b), [format!("nvidia{}", s[0].0)], "{id}");
        let env = b.config()["process"]["env"].clone();
        for var in ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"] {
            assert!(
                env.as_array()
                    .unwrap()
                    .contains(&json!(format!("{var}={}", uuid(s[0].0 as u32)))),
                "{env}"
            );
        }
        assert_ok(&h.runtime(&["delete", "--force", id]), "delete");
    }
    assert_eq!(log_of(&log), "", "the hook never ran");
}

/// Negative control: Docker's `--gpus '"device=1"'` under Docker's runc
/// root still chooses GPU 1, and an unknown GPU is named as the engine's.
#[test]
fn docker_gpus_still_honoured_under_docker_root() {
    require_e2e!();
    let h = docker_host();
    let (hook, _) = standin(&h);
    let b = h.bundle("dk1");
    b.set(&[("vram", "1g")], PROBE, &["NVIDIA_VISIBLE_DEVICES=0"]);
    docker_gpus(&b, &hook, "1");
    assert_ok(&run_one(&h, &b, "dk1"), "create");
    assert_eq!(slices(&h), [(1, GIB)]);
    assert_ok(&h.runtime(&["delete", "--force", "dk1"]), "delete");
    let b = h.bundle("dk7");
    b.set(&[("vram", "1g")], PROBE, &[]);
    docker_gpus(&b, &hook, "7");
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), "dk7"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("NVIDIA_VISIBLE_DEVICES=7") && e.contains("GPU 7"),
        "{e}"
    );
    assert!(!e.contains("annotation vram names"), "{e}");
}

/// CDI's DRM nodes of both GPUs (as `nvidia-ctk cdi generate` lists them
/// where nvidia-drm is loaded): with a slice none that sysfs cannot prove
/// the slice's is left (this host has no DRM nodes: all go), nor their
/// major-226 rules (on 6cea19e both GPUs' stayed); without a request they
/// are all there.
#[test]
fn cdi_drm_nodes_of_other_gpus_go() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let add_drm = |b: &Bundle| {
        let mut c = b.config();
        for (p, m) in [
            ("card1", 1),
            ("renderD128", 128),
            ("card2", 2),
            ("renderD129", 129),
        ] {
            c["linux"]["devices"].as_array_mut().unwrap().push(json!({"path": format!("/dev/dri/{p}"), "type": "c", "major": 226, "minor": m, "fileMode": 0o666, "uid": 0, "gid": 0}));
            c["linux"]["resources"]["devices"]
                .as_array_mut()
                .unwrap()
                .push(
                    json!({"allow": true, "type": "c", "major": 226, "minor": m, "access": "rwm"}),
                );
        }
        b.write_config(&c);
    };
    let b = h.bundle("drm");
    b.set(&[("vram", "4g")], PROBE_OPEN, &[]);
    cdi(&b, &[0, 1]);
    add_drm(&b);
    assert_ok(&run_one(&h, &b, "drm"), "create");
    assert_eq!(slices(&h).len(), 1);
    b.wait_out("done", 20).unwrap();
    assert_eq!(
        std::fs::read_to_string(b.out.join("dri")).unwrap_or_default(),
        ""
    );
    let c = b.config();
    assert!(
        c["linux"]["resources"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["major"] != 226),
        "{}",
        c["linux"]["resources"]["devices"]
    );
    assert_ok(&h.runtime(&["delete", "--force", "drm"]), "delete");
    let b = h.bundle("drm-plain");
    b.set(&[], PROBE_OPEN, &[]);
    cdi(&b, &[0, 1]);
    add_drm(&b);
    let before = std::fs::read(b.config_path()).unwrap();
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "drm-plain"]),
        "run",
    );
    assert_eq!(std::fs::read(b.config_path()).unwrap(), before);
    b.wait_out("done", 20).unwrap();
    assert_eq!(
        std::fs::read_to_string(b.out.join("dri")).unwrap(),
        "card1\ncard2\nrenderD128\nrenderD129\n"
    );
}

/// A bundle reused after a create carries the first container's node of
/// its GPU: that is not a CDI request. 10g on each 16g GPU: the second
/// container goes to the other GPU (on 6cea19e it was pinned to the
/// first one's and refused).
#[test]
fn reused_bundle_is_not_pinned_to_its_first_gpu() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    let b = h.bundle("reuse");
    b.set(&[("vram", "10g")], "sleep 30", &[]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "r1"]),
        "create r1",
    );
    let first = slices(&h);
    assert_eq!(first.len(), 1);
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), "r2"]);
    assert_ok(&o, "create r2 from the same bundle");
    let mut s = slices(&h);
    s.sort();
    assert_eq!(s, [(0, 10 * GIB), (1, 10 * GIB)]);
    let c = b.config();
    let nodes: Vec<&str> = c["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["path"].as_str())
        .filter(|p| {
            p.strip_prefix("/dev/nvidia")
                .is_some_and(|n| n.bytes().all(|c| c.is_ascii_digit()))
        })
        .collect();
    assert_eq!(
        nodes,
        [format!("/dev/nvidia{}", 1 - first[0].0)],
        "only r2's GPU"
    );
    for id in ["r1", "r2"] {
        assert_ok(&h.runtime(&["delete", "--force", id]), "delete");
    }
}
