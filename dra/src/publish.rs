//! Keeping this node's ResourceSlice in step with the ledger: a new pool
//! generation whenever the content changes, nothing written otherwise, the
//! slice deleted when the driver stops.
use crate::node::Offer;
use crate::slice::{self, slice_for};
use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

#[derive(Debug, thiserror::Error)]
#[error("{what}: {err}")]
pub struct StoreError {
    pub what: String,
    pub err: String,
}

/// Where slices are written: the API server, or memory in tests.
#[tonic::async_trait]
pub trait SliceStore: Send + Sync {
    /// The Node object's uid (for the owner reference); None when absent.
    async fn node_uid(&self, node: &str) -> Result<Option<String>, StoreError>;
    async fn get(&self, name: &str) -> Result<Option<ResourceSlice>, StoreError>;
    /// Create or update (server-side apply, this driver as field manager).
    async fn apply(&self, s: &ResourceSlice) -> Result<(), StoreError>;
    /// Delete; absent is fine.
    async fn delete(&self, name: &str) -> Result<(), StoreError>;
}

/// What to write next, from what was written last.
#[derive(Debug)]
pub struct Publisher {
    node: String,
    owner: Option<OwnerReference>,
    generation: i64,
    last: Option<Option<Vec<Device>>>,
}

impl Publisher {
    /// `existing`: the slice found on the API server at start (its pool
    /// generation is carried on, so the scheduler never sees one go back).
    pub fn new(
        node: &str,
        owner: Option<OwnerReference>,
        existing: Option<&ResourceSlice>,
    ) -> Publisher {
        Publisher {
            node: node.into(),
            owner,
            generation: existing.map(|s| s.spec.pool.generation).unwrap_or(0).max(0),
            last: None,
        }
    }

    /// The slice to write for `offers`, or None when it would be the one
    /// last written. The first call always writes.
    pub fn next(&mut self, offers: &[Offer]) -> Option<ResourceSlice> {
        let mut s = slice_for(&self.node, offers);
        if self.last.as_ref() == Some(&s.spec.devices) {
            return None;
        }
        self.generation += 1;
        s.spec.pool.generation = self.generation;
        s.metadata.owner_references = self.owner.clone().map(|o| vec![o]);
        self.last = Some(s.spec.devices.clone());
        Some(s)
    }

    /// The last write failed: write again at the next poll.
    pub fn failed(&mut self) {
        self.last = None;
    }

    pub fn name(&self) -> String {
        slice::slice_name(&self.node)
    }
}

/// The API server through kube-rs.
pub struct KubeSlices(pub kube::Client);

const MANAGER: &str = "gpu-quota-dra";

fn err(what: String) -> impl FnOnce(kube::Error) -> StoreError {
    move |e| StoreError {
        what,
        err: e.to_string(),
    }
}

#[tonic::async_trait]
impl SliceStore for KubeSlices {
    async fn node_uid(&self, node: &str) -> Result<Option<String>, StoreError> {
        let api: kube::Api<NodeObject> = kube::Api::all(self.0.clone());
        let n = api
            .get_opt(node)
            .await
            .map_err(err(format!("get node {node}")))?;
        Ok(n.and_then(|n| n.metadata.uid))
    }

    async fn get(&self, name: &str) -> Result<Option<ResourceSlice>, StoreError> {
        let api: kube::Api<ResourceSlice> = kube::Api::all(self.0.clone());
        api.get_opt(name)
            .await
            .map_err(err(format!("get resourceslice {name}")))
    }

    async fn apply(&self, s: &ResourceSlice) -> Result<(), StoreError> {
        let name = s.metadata.name.clone().unwrap_or_default();
        let api: kube::Api<ResourceSlice> = kube::Api::all(self.0.clone());
        let pp = kube::api::PatchParams::apply(MANAGER).force();
        api.patch(&name, &pp, &kube::api::Patch::Apply(s))
            .await
            .map(|_| ())
            .map_err(err(format!("apply resourceslice {name}")))
    }

    async fn delete(&self, name: &str) -> Result<(), StoreError> {
        let api: kube::Api<ResourceSlice> = kube::Api::all(self.0.clone());
        match api.delete(name, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(err(format!("delete resourceslice {name}"))(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u64 = 1 << 30;

    fn offers(free: u64) -> Vec<Offer> {
        vec![Offer {
            uuid: "GPU-a".into(),
            index: 0,
            product: "P".into(),
            total_bytes: 16 * GI,
            offer_bytes: free,
        }]
    }

    #[test]
    fn writes_only_changes_with_a_new_generation() {
        let owner = slice::node_owner("n", "node-uid");
        let mut p = Publisher::new("n", Some(owner.clone()), None);
        let s = p.next(&offers(15 * GI)).expect("first write");
        assert_eq!(s.spec.pool.generation, 1);
        assert_eq!(s.metadata.owner_references, Some(vec![owner]));
        assert!(
            p.next(&offers(15 * GI)).is_none(),
            "same content: nothing to write"
        );
        // below the step: the published capacity is the same, nothing to write
        assert!(p.next(&offers(15 * GI + (100 << 20))).is_none());
        let s = p.next(&offers(9 * GI)).expect("changed");
        assert_eq!(s.spec.pool.generation, 2);
        p.failed();
        assert_eq!(
            p.next(&offers(9 * GI))
                .expect("retried")
                .spec
                .pool
                .generation,
            3
        );
    }

    #[test]
    fn carries_on_the_generation_found_at_start() {
        let mut old = slice_for("n", &offers(GI));
        old.spec.pool.generation = 41;
        let mut p = Publisher::new("n", None, Some(&old));
        let s = p.next(&offers(GI)).unwrap();
        assert_eq!(s.spec.pool.generation, 42);
        assert!(s.metadata.owner_references.is_none());
    }
}
