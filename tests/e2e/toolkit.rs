//! Issue 19 against real runc: beside the NVIDIA Container Toolkit, an
//! engine's GPU request (`--gpus` → the toolkit's legacy prestart hook and
//! NVIDIA_VISIBLE_DEVICES; CDI → device nodes in linux.devices) never widens
//! a slice, and without a gpu-quota request nothing changes.
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
    "ls /dev > /out/dev; cat /run/gpu-quota/limits > /out/limits 2>/dev/null; touch /out/done";

/// The stand-in hook, installed in this host's directory.
fn standin(h: &Host) -> (PathBuf, PathBuf) {
    let dir = h.path().join("toolkit");
    std::fs::create_dir_all(&dir).unwrap();
    let hook = dir.join("nvidia-container-runtime-hook");
    std::fs::copy(
        repo_dir().join("tests/toolkit/nvidia-container-runtime-hook"),
        &hook,
    )
    .unwrap();
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
    let h = Host::new(HostOpts::default());
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
    let h = Host::new(HostOpts::default());
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
    let h = Host::new(HostOpts::default());
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
    let h = Host::new(HostOpts::default());
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
