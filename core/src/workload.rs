//! Who a container is to the engine that made it: under Kubernetes its pod
//! (namespace, name, uid) and container name, from the CRI's annotations in
//! config.json (containerd's `io.kubernetes.cri.*`, CRI-O's
//! `io.kubernetes.pod.*` / `io.kubernetes.container.name`); elsewhere a name
//! where the engine passes one (nerdctl's `nerdctl/name`; Docker, podman and
//! ctr pass none). Read once at admission and kept in the reservation for
//! the operator's view (`gpu-quota ls`, `top`, the metrics' labels, the
//! event log).
//!
//! Nothing is granted by it: the annotations are as hostile as the rest of
//! config.json, and a forged pod name misleads only the view of the
//! container that forged it, and refuses only its own resize
//! (`gpu-quota resize` leaves a pod's slice to Kubernetes). So a value is kept only when it is a plausible
//! name (at most [`MAX_LEN`] bytes of `[A-Za-z0-9._:@/-]`): never a control
//! character into a terminal or a log line.
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest value kept (a DNS subdomain, Kubernetes' longest name).
pub const MAX_LEN: usize = 253;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The container's name (in its pod, or the engine's name for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// The annotation keys of each field, in the order they are tried.
const NAMESPACE: &[&str] = &[
    "io.kubernetes.cri.sandbox-namespace",
    "io.kubernetes.pod.namespace",
];
const POD: &[&str] = &["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"];
const POD_UID: &[&str] = &["io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"];
const CONTAINER: &[&str] = &[
    "io.kubernetes.cri.container-name",
    "io.kubernetes.container.name",
    "nerdctl/name",
];

fn plausible(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_LEN
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:@/-".contains(&b))
}

impl Workload {
    /// From config.json's annotations; None when no key is there (or none
    /// holds a plausible name).
    pub fn from_config(config: &Value) -> Option<Workload> {
        let ann = config.get("annotations")?.as_object()?;
        let get = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| ann.get(*k)?.as_str().filter(|v| plausible(v)))
                .map(str::to_string)
        };
        let w = Workload {
            namespace: get(NAMESPACE),
            pod: get(POD),
            pod_uid: get(POD_UID),
            container: get(CONTAINER),
        };
        (w != Workload::default()).then_some(w)
    }

    /// The pod, as `namespace/pod` (or the pod alone), when there is one.
    pub fn pod_label(&self) -> Option<String> {
        let p = self.pod.as_ref()?;
        Some(match &self.namespace {
            Some(n) => format!("{n}/{p}"),
            None => p.clone(),
        })
    }

    /// As an operator reads it: `namespace/pod/container`, or the parts
    /// known.
    pub fn label(&self) -> String {
        match (&self.namespace, &self.pod, &self.container) {
            (Some(n), Some(p), Some(c)) => format!("{n}/{p}/{c}"),
            (Some(n), Some(p), None) => format!("{n}/{p}"),
            (None, Some(p), Some(c)) => format!("{p}/{c}"),
            (_, Some(p), None) => p.clone(),
            (_, None, Some(c)) => c.clone(),
            (Some(n), None, None) => format!("{n}/?"),
            (None, None, None) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containerd_and_crio_keys_and_a_nerdctl_name() {
        let ctd = json!({"annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-namespace": "ml",
            "io.kubernetes.cri.sandbox-name": "train-7f9c",
            "io.kubernetes.cri.sandbox-uid": "0b6f3c1e-7d2a-4c55-9a43-5e9f3a1d2c10",
            "io.kubernetes.cri.container-name": "trainer",
            "vram": "8g"}});
        let w = Workload::from_config(&ctd).unwrap();
        assert_eq!(w.label(), "ml/train-7f9c/trainer");
        assert_eq!(
            w.pod_uid.as_deref(),
            Some("0b6f3c1e-7d2a-4c55-9a43-5e9f3a1d2c10")
        );
        let crio = json!({"annotations": {
            "io.kubernetes.pod.namespace": "ml", "io.kubernetes.pod.name": "p",
            "io.kubernetes.container.name": "c"}});
        assert_eq!(Workload::from_config(&crio).unwrap().label(), "ml/p/c");
        let nerdctl = json!({"annotations": {"nerdctl/name": "web-1"}});
        assert_eq!(Workload::from_config(&nerdctl).unwrap().label(), "web-1");
    }

    #[test]
    fn nothing_known_and_hostile_values_give_no_workload() {
        assert_eq!(Workload::from_config(&json!({})), None);
        assert_eq!(
            Workload::from_config(&json!({"annotations": {"vram": "8g"}})),
            None
        );
        for bad in [
            json!("evil\u{1b}[2Jname"),
            json!("line\nbreak"),
            json!("a b"),
            json!(""),
            json!("x".repeat(MAX_LEN + 1)),
            json!(7),
        ] {
            let c = json!({"annotations": {"io.kubernetes.cri.sandbox-name": bad}});
            assert_eq!(Workload::from_config(&c), None, "{c}");
        }
        // one bad field drops that field only
        let c = json!({"annotations": {"io.kubernetes.cri.sandbox-name": "p",
            "io.kubernetes.cri.container-name": "c\u{7}"}});
        assert_eq!(Workload::from_config(&c).unwrap().label(), "p");
        let long = "x".repeat(MAX_LEN);
        let c = json!({"annotations": {"io.kubernetes.cri.sandbox-name": long}});
        assert!(Workload::from_config(&c).is_some());
    }
}
