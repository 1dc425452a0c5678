//! deploy/kubernetes/dra/*.yaml against the Kubernetes 1.36 API types
//! (k8s-openapi): every document deserializes into its kind's type and
//! every field written is one the type knows. Then what the driver relies
//! on: the DaemonSet's host paths, privileges, NODE_NAME and arguments
//! (which the real binary must accept), RBAC exactly what the driver calls,
//! the DeviceClass selecting the driver the slice names, the example claim
//! asking what the request policy accepts.
use gpuquota_dra::{api, quantity, slice};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[path = "../../deviceplugin/tests/common/manifest_types.rs"]
mod manifest_types;
use manifest_types::typed;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/dra")
}

#[derive(Default)]
struct Docs {
    daemonsets: Vec<DaemonSet>,
    accounts: Vec<ServiceAccount>,
    roles: Vec<ClusterRole>,
    bindings: Vec<ClusterRoleBinding>,
    classes: Vec<DeviceClass>,
    templates: Vec<ResourceClaimTemplate>,
    pods: Vec<Pod>,
}

fn load() -> Docs {
    let mut d = Docs::default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains("DESIGN SKETCH"), "{}", f.display());
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
                ("v1", "ServiceAccount") => d.accounts.push(typed(&doc, &name)),
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => d.roles.push(typed(&doc, &name)),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    d.bindings.push(typed(&doc, &name))
                }
                ("resource.k8s.io/v1", "DeviceClass") => d.classes.push(typed(&doc, &name)),
                ("resource.k8s.io/v1", "ResourceClaimTemplate") => {
                    d.templates.push(typed(&doc, &name))
                }
                ("v1", "Pod") => d.pods.push(typed(&doc, &name)),
                other => panic!("{name}: unexpected kind {other:?}"),
            }
        }
    }
    d
}

#[test]
fn daemonset_mounts_what_the_driver_uses_and_passes_accepted_args() {
    let d = load();
    assert_eq!(d.daemonsets.len(), 1);
    let ds = &d.daemonsets[0];
    let tpl = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(
        tpl.service_account_name.as_deref(),
        d.accounts[0].metadata.name.as_deref()
    );
    assert_ne!(
        tpl.automount_service_account_token,
        Some(false),
        "it talks to the API server"
    );
    assert_ne!(tpl.host_network, Some(true));
    assert_ne!(tpl.host_pid, Some(true));
    let c = &tpl.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.privileged, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let node_name = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "NODE_NAME")
        .expect("NODE_NAME");
    assert_eq!(
        node_name
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "spec.nodeName",
        "the downward API"
    );
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
    for (path, ro) in [
        ("/var/lib/kubelet/plugins", false),
        ("/var/lib/kubelet/plugins_registry", false),
        ("/var/lib/gpu-quota", false),
        ("/run/gpu-quota", false),
        ("/etc/gpu-quota", true),
        ("/var/run/cdi", false),
    ] {
        assert_eq!(host(path), (path.to_string(), ro), "{path}");
    }
    // the sockets' directories are the binary's defaults and under the mounts
    let args = c.args.clone().unwrap_or_default();
    assert!(
        args.contains(&format!("--plugin-dir={}", api::PLUGIN_DIR)),
        "{args:?}"
    );
    assert!(
        args.contains(&format!("--registry-dir={}", api::REGISTRY_DIR)),
        "{args:?}"
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-quota-dra"))
        .args(&args)
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "DaemonSet args {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-quota-dra"))
        .args(["--no-such-flag", "--version"])
        .output()
        .unwrap();
    assert!(!bad.status.success(), "the argument check can fail");
}

#[test]
fn rbac_is_what_the_driver_calls() {
    let d = load();
    let role = &d.roles[0];
    let mut got: Vec<(String, String, Vec<String>)> = role
        .rules
        .as_ref()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let groups = r.api_groups.clone().unwrap();
            let res = r.resources.clone().unwrap();
            groups.into_iter().flat_map(move |g| {
                let verbs = r.verbs.clone();
                res.clone()
                    .into_iter()
                    .map(move |x| (g.clone(), x, verbs.clone()))
            })
        })
        .collect();
    got.sort();
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        got,
        [
            ("".into(), "nodes".into(), v(&["get"])),
            (
                "resource.k8s.io".into(),
                "resourceclaims".into(),
                v(&["get"])
            ),
            (
                "resource.k8s.io".into(),
                "resourceslices".into(),
                v(&["get", "list", "watch", "create", "update", "patch", "delete"])
            ),
        ]
    );
    let b = &d.bindings[0];
    assert_eq!(Some(&b.role_ref.name), role.metadata.name.as_ref());
    let subj = &b.subjects.as_ref().unwrap()[0];
    let sa = &d.accounts[0].metadata;
    assert_eq!(
        (Some(&subj.name), subj.namespace.as_ref()),
        (sa.name.as_ref(), sa.namespace.as_ref())
    );
    assert_eq!(
        subj.namespace.as_deref(),
        d.daemonsets[0].metadata.namespace.as_deref()
    );
}

#[test]
fn deviceclass_and_example_claim_match_the_published_slice() {
    let d = load();
    let dc = &d.classes[0];
    let cel = &dc.spec.selectors.as_ref().unwrap()[0]
        .cel
        .as_ref()
        .unwrap()
        .expression;
    assert_eq!(
        cel,
        &format!(
            "device.driver == \"{}\"",
            slice::slices_for("n", &[])[0].spec.driver
        )
    );
    let t = &d.templates[0];
    let req = &t
        .spec
        .spec
        .devices
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()[0];
    let ex = req.exactly.as_ref().unwrap();
    assert_eq!(Some(&ex.device_class_name), dc.metadata.name.as_ref());
    let asked =
        quantity::bytes(&ex.capacity.as_ref().unwrap().requests.as_ref().unwrap()["memory"].0)
            .unwrap();
    assert!(
        asked >= slice::STEP_BYTES && asked.is_multiple_of(slice::STEP_BYTES),
        "{asked}: on the request policy's steps"
    );
    let pod = d.pods[0].spec.as_ref().unwrap();
    assert_eq!(
        pod.runtime_class_name.as_deref(),
        Some("gpu-quota"),
        "the runtime enforces the claim"
    );
    let claims = pod.resource_claims.as_ref().unwrap();
    assert_eq!(
        claims[0].resource_claim_template_name.as_deref(),
        t.metadata.name.as_deref()
    );
    let used = pod.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .claims
        .as_ref()
        .unwrap();
    assert_eq!(used[0].name, claims[0].name);
}

#[test]
fn round_trip_check_catches_unknown_fields() {
    // the negative control of `typed`: a field at the wrong level is reported
    let doc: Value = serde_norway::from_str(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\nspec: {selectors: [{expression: x}]}\n",
    )
    .unwrap();
    let r = std::panic::catch_unwind(|| typed::<DeviceClass>(&doc, "t.yaml"));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains(".spec.selectors[0].expression"), "{msg}");
}
