//! deploy/kubernetes/*.yaml against the Kubernetes API types (k8s-openapi,
//! Kubernetes 1.36): every document deserializes into its kind's type, and
//! every field written in the file is one the type knows (a field the API
//! does not have — a typo, a wrong level — would be dropped by the
//! round trip and is reported). Then what gpu-quota relies on: the
//! RuntimeClass handler, the resource the examples ask for, the DaemonSet's
//! host paths and arguments (which the real binary must accept). The DRA
//! driver's manifests (deploy/kubernetes/dra/) are dra/tests/manifests.rs'.
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::api::node::v1::RuntimeClass;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[path = "common/manifest_types.rs"]
mod manifest_types;
use manifest_types::typed;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes")
}

#[derive(Default)]
struct Docs {
    daemonsets: Vec<DaemonSet>,
    runtimeclasses: Vec<RuntimeClass>,
    pods: Vec<(String, PodSpec)>,
}

fn load(dir: PathBuf) -> Docs {
    let mut d = Docs::default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for de in serde_norway::Deserializer::from_str(&text) {
            let doc: Value = serde::Deserialize::deserialize(de)
                .unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
            let kind = (
                doc["apiVersion"].as_str().unwrap_or(""),
                doc["kind"].as_str().unwrap_or(""),
            );
            match kind {
                ("apps/v1", "DaemonSet") => d.daemonsets.push(typed(&doc, &name)),
                ("node.k8s.io/v1", "RuntimeClass") => d.runtimeclasses.push(typed(&doc, &name)),
                ("v1", "Pod") => {
                    let p: Pod = typed(&doc, &name);
                    d.pods.push((name.clone(), p.spec.unwrap()));
                }
                ("batch/v1", "Job") => {
                    let j: Job = typed(&doc, &name);
                    let spec = j.spec.unwrap().template.spec.unwrap();
                    d.pods.push((name.clone(), spec));
                }
                other => panic!("{name}: unexpected kind {other:?}"),
            }
        }
    }
    d
}

#[test]
fn manifests_are_valid_kubernetes_objects() {
    let d = load(dir());
    assert_eq!(d.daemonsets.len(), 1);
    assert_eq!(d.runtimeclasses.len(), 1);
    assert!(d.pods.len() >= 2);

    let rc = &d.runtimeclasses[0];
    assert_eq!(rc.metadata.name.as_deref(), Some("gpu-quota"));
    assert_eq!(
        rc.handler, "gpu-quota",
        "the CRI handler `gpu-quota install` writes"
    );
    let rc_nodes = rc
        .scheduling
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap();

    for (file, spec) in &d.pods {
        assert_eq!(
            spec.runtime_class_name.as_deref(),
            Some("gpu-quota"),
            "{file}"
        );
        for c in &spec.containers {
            // k8s-openapi defaults missing required strings: check them here
            assert!(
                !c.name.is_empty() && c.image.as_deref().is_some_and(|i| !i.is_empty()),
                "{file}"
            );
            let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
            let units = limits
                .and_then(|l| l.get("gpu-quota.io/vram"))
                .unwrap_or_else(|| panic!("{file}: {} asks for no gpu-quota.io/vram", c.name));
            let n: u32 = units
                .0
                .parse()
                .unwrap_or_else(|_| panic!("{file}: {units:?}"));
            assert!(n >= 1, "{file}");
        }
    }

    let ds = &d.daemonsets[0];
    let tpl = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(
        tpl.node_selector.as_ref(),
        Some(&rc_nodes),
        "the plugin runs where the handler is"
    );
    assert_ne!(tpl.host_network, Some(true));
    assert_ne!(tpl.host_pid, Some(true));
    assert_ne!(tpl.host_ipc, Some(true));
    assert_eq!(tpl.automount_service_account_token, Some(false));
    let c = &tpl.containers[0];
    let mounts = c.volume_mounts.as_ref().unwrap();
    let vols = tpl.volumes.as_ref().unwrap();
    let host = |mount: &str| {
        let m = mounts
            .iter()
            .find(|m| m.mount_path == mount)
            .unwrap_or_else(|| panic!("no mount {mount}"));
        let v = vols.iter().find(|v| v.name == m.name).unwrap();
        (
            v.host_path.as_ref().unwrap().path.clone(),
            m.read_only.unwrap_or(false),
        )
    };
    assert_eq!(
        host("/var/lib/kubelet/device-plugins"),
        ("/var/lib/kubelet/device-plugins".to_string(), false),
        "kubelet.sock and the plugin's socket"
    );
    assert_eq!(host("/etc/gpu-quota"), ("/etc/gpu-quota".to_string(), true));
    assert_eq!(
        host("/var/lib/gpu-quota"),
        ("/var/lib/gpu-quota".to_string(), true)
    );
    for v in vols {
        let p = &v.host_path.as_ref().expect("only hostPath volumes").path;
        assert!(
            [
                "/var/lib/kubelet/device-plugins",
                "/etc/gpu-quota",
                "/var/lib/gpu-quota"
            ]
            .contains(&p.as_str())
                || p.ends_with("/libnvidia-ml.so.1"),
            "host path {p} is more than the plugin needs"
        );
    }
    // only the kubelet's directory is writable
    let writable: Vec<_> = mounts
        .iter()
        .filter(|m| m.read_only != Some(true))
        .collect();
    assert_eq!(writable.len(), 1, "{writable:?}");
    assert_eq!(
        c.security_context
            .as_ref()
            .and_then(|s| s.read_only_root_filesystem),
        Some(true)
    );

    // the binary takes exactly these arguments (clap refuses unknown ones
    // before it gets to --version)
    let args = c.args.clone().unwrap_or_default();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-quota-device-plugin"))
        .args(&args)
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "DaemonSet args {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-quota-device-plugin"))
        .args(["--no-such-flag", "--version"])
        .output()
        .unwrap();
    assert!(!bad.status.success(), "the argument check can fail");
}

#[test]
fn round_trip_check_catches_unknown_fields() {
    // the negative control of `typed`: a misplaced field is reported
    let doc: Value = serde_norway::from_str(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: x}\nhandler: x\nnodeSelector: {a: b}\n",
    )
    .unwrap();
    let r = std::panic::catch_unwind(|| typed::<RuntimeClass>(&doc, "t.yaml"));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains(".nodeSelector.a"), "{msg}");
    // and a value of the wrong type
    let doc: Value = serde_norway::from_str(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: x}\nhandler: [1]\n",
    )
    .unwrap();
    assert!(std::panic::catch_unwind(|| typed::<RuntimeClass>(&doc, "t.yaml")).is_err());
}
