//! Reading the node: the same config, inventory and ledger as the runtime.
//!
//! Which ledger reservations are Kubernetes' own is decided by the runc
//! root the runtime recorded for them (`runtime_root`, taken from the
//! engine's `runc --root`, never from anything a pod author controls): the
//! CRI runs every pod container under a root of its own — containerd's CRI
//! plugin in its `k8s.io` namespace (`/run/containerd/runc/k8s.io`), CRI-O
//! under the handler's `runtime_root` (`/run/gpu-quota-runc`, written by
//! `gpu-quota install crio`). Everything else in the ledger (Docker, podman,
//! `ctr` in other namespaces, bare runc) was started outside Kubernetes.
use crate::units::{self, NodeState, Snapshot};
use gpuquota_core::ledger::Reservation;
use gpuquota_core::{Config, Inventory, Ledger};
use std::path::PathBuf;

/// The runc roots of CRI-managed containers, by default (the runtime's
/// default `kubernetes_runc_roots` too).
pub use gpuquota_core::config::KUBERNETES_RUNC_ROOTS;

/// Where the plugin's view of the node comes from (a trait so the daemon
/// can be driven by a scripted node in tests).
pub trait Node: Send {
    fn snapshot(&mut self, prev: &Snapshot) -> Snapshot;
    fn policy(&self) -> gpuquota_core::config::Policy;
}

/// The host, read afresh at every poll: config file, inventory (NVML
/// cached by the runtime, or static), ledger.
pub struct HostNode {
    pub config_path: PathBuf,
    pub kubernetes_roots: Vec<String>,
    policy: gpuquota_core::config::Policy,
}

impl HostNode {
    pub fn new(config_path: PathBuf, kubernetes_roots: Vec<String>) -> HostNode {
        HostNode {
            config_path,
            kubernetes_roots,
            policy: Default::default(),
        }
    }

    pub fn is_kubernetes(&self, r: &Reservation) -> bool {
        let Some(root) = r.runtime_root.as_deref() else {
            return false;
        };
        let root = root.trim_end_matches('/');
        self.kubernetes_roots
            .iter()
            .any(|k| k.trim_end_matches('/') == root)
    }
}

impl Node for HostNode {
    fn snapshot(&mut self, prev: &Snapshot) -> Snapshot {
        let cfg = match Config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => {
                let inv: Result<&Inventory, String> = Err(e.to_string());
                return units::compute(
                    prev,
                    &NodeState {
                        inventory: inv,
                        ledger: Err(String::new()),
                        reserve: 0,
                        sliceable: &[],
                        present: &|_| false,
                        kubernetes: &|_| false,
                        stale: &|_| false,
                    },
                );
            }
        };
        self.policy = cfg.placement;
        let inv = Inventory::load(&cfg).map_err(|e| e.to_string());
        let ledger = Ledger::new(&cfg);
        let data = ledger.read().map_err(|e| e.to_string());
        let now = gpuquota_core::fsutil::now_unix();
        let dev_root = cfg.driver.dev_root.clone();
        units::compute(
            prev,
            &NodeState {
                inventory: inv.as_ref().map_err(Clone::clone),
                ledger: data.as_ref().map_err(Clone::clone),
                reserve: cfg.reserve_bytes().unwrap_or(0),
                sliceable: &cfg.gpus,
                present: &|g| dev_root.join(format!("nvidia{}", g.minor)).exists(),
                kubernetes: &|r| self.is_kubernetes(r),
                stale: &|r| ledger.is_stale(r, now),
            },
        )
    }

    fn policy(&self) -> gpuquota_core::config::Policy {
        self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuquota_core::ledger::ResState;

    fn res(root: Option<&str>) -> Reservation {
        Reservation {
            state: ResState::Running,
            ..Reservation::new("c", root, "/b", vec![], "")
        }
    }

    #[test]
    fn kubernetes_is_the_cri_runc_roots_only() {
        let n = HostNode::new(
            "/x".into(),
            KUBERNETES_RUNC_ROOTS.map(String::from).to_vec(),
        );
        assert!(n.is_kubernetes(&res(Some("/run/containerd/runc/k8s.io"))));
        assert!(n.is_kubernetes(&res(Some("/run/containerd/runc/k8s.io/"))));
        assert!(n.is_kubernetes(&res(Some("/run/gpu-quota-runc"))));
        for other in [
            Some("/run/containerd/runc/default"),
            Some("/run/docker/runtime-runc/moby"),
            Some("/run/runc"),
            Some("/run/containerd/runc/k8s.io.evil"),
            Some("/run/containerd/runc"),
            None,
        ] {
            assert!(!n.is_kubernetes(&res(other)), "{other:?}");
        }
    }
}
