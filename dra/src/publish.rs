//! Keeping this node's ResourceSlices (the pool's devices and its counter
//! sets, crate::slice) in step with the ledger *and* with the API server's
//! copies: a new pool generation, for both, whenever the content changes,
//! and both written again whenever an API copy is not the one last written
//! (missing, deleted, edited by someone else). The
//! kubelet deletes every slice of its node when it starts
//! (`wipeResourceSlices`), and a slice can be deleted by hand or lost with
//! an etcd restore: a publisher that only compared with its own last write
//! would offer nothing after any of these, for good. The API's copy is
//! re-read (one GET by name) every `resync`, at every poll for a while after
//! a registration with the kubelet (its wipe may come after it), and at
//! every poll while the API server does not answer; writes happen only when
//! something differs.
use crate::health::Polled;
use crate::node::Offer;
use crate::quantity;
use crate::slice::{self, slices_for, SLICES};
use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::api::resource::v1::{ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

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
    /// The slices last written (and confirmed by the store); None: write
    /// at the next call of `next`.
    last: Option<[ResourceSlice; SLICES]>,
}

/// How the API server's copy compares with the last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drift {
    /// The same offer: nothing to do.
    InStep,
    /// Nothing written yet (or the last write failed): `next` writes anyway.
    Unwritten,
    /// The API has no such slice (the kubelet's wipe, a delete by hand).
    Missing,
    /// The API's copy differs (edited by someone else, or an older one).
    Edited,
}

/// The parts of a spec that make the offer, quantities as bytes (the API
/// server may write a quantity in another form than ours).
fn offer_of(spec: &ResourceSliceSpec) -> serde_json::Value {
    let mut v = serde_json::json!({
        "driver": spec.driver,
        "nodeName": spec.node_name,
        "pool": spec.pool,
        "devices": spec.devices,
        "sharedCounters": spec.shared_counters,
    });
    fn bytes_of_quantities(v: &mut serde_json::Value, key: Option<&str>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    bytes_of_quantities(x, Some(k));
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| bytes_of_quantities(x, key)),
            serde_json::Value::String(q)
                if matches!(key, Some("value" | "default" | "min" | "max" | "step")) =>
            {
                if let Ok(b) = quantity::bytes(q) {
                    *v = serde_json::Value::from(b);
                }
            }
            _ => {}
        }
    }
    bytes_of_quantities(&mut v, None);
    v
}

impl Publisher {
    /// `existing`: the pool's slices found on the API server at start
    /// (their highest pool generation is carried on, so the scheduler never
    /// sees one go back).
    pub fn new(
        node: &str,
        owner: Option<OwnerReference>,
        existing: &[Option<ResourceSlice>],
    ) -> Publisher {
        Publisher {
            node: node.into(),
            owner,
            generation: existing
                .iter()
                .flatten()
                .map(|s| s.spec.pool.generation)
                .max()
                .unwrap_or(0)
                .max(0),
            last: None,
        }
    }

    /// The slices to write for `offers` (named as `slice::slice_names`),
    /// or None when they would be the ones last written. The first call
    /// always writes.
    pub fn next(&mut self, offers: &[Offer]) -> Option<[ResourceSlice; SLICES]> {
        let mut s = slices_for(&self.node, offers);
        if self.last.as_ref().is_some_and(|l| {
            l.iter().zip(&s).all(|(a, b)| {
                a.spec.devices == b.spec.devices && a.spec.shared_counters == b.spec.shared_counters
            })
        }) {
            return None;
        }
        self.generation += 1;
        for x in &mut s {
            x.spec.pool.generation = self.generation;
            x.metadata.owner_references = self.owner.clone().map(|o| vec![o]);
        }
        self.last = Some(s.clone());
        Some(s)
    }

    /// The last write failed: write again at the next poll.
    pub fn failed(&mut self) {
        self.last = None;
    }

    /// Compare the API server's copy (`found`, None when it has none) with
    /// the last write. On any difference the next call of `next` writes
    /// again, at a pool generation above both (the scheduler must never
    /// see one go back, and an edited copy may carry a higher one).
    /// `found`: the API's copy of each slice, in `slice::slice_names`'
    /// order.
    pub fn check(&mut self, found: &[Option<ResourceSlice>; SLICES]) -> Drift {
        let Some(last) = &self.last else {
            return Drift::Unwritten;
        };
        let drift = if found.iter().any(Option::is_none) {
            Drift::Missing
        } else if found
            .iter()
            .flatten()
            .zip(last)
            .all(|(f, l)| offer_of(&f.spec) == offer_of(&l.spec))
        {
            return Drift::InStep;
        } else {
            Drift::Edited
        };
        for f in found.iter().flatten() {
            self.generation = self.generation.max(f.spec.pool.generation);
        }
        self.last = None;
        drift
    }
}

/// How often the loop below reads the API server's copy.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Between two reads when all is well (a GET of one slice by name).
    pub resync: Duration,
    /// After a registration with the kubelet, the copy is read at every
    /// poll for this long: the kubelet's wipe of its node's slices may come
    /// just after it registered us.
    pub after_registration: Duration,
    /// The retry interval of the first read (the generation to carry on).
    pub retry: Duration,
}

/// The default `Timing::resync` (`--resync-ms` of the binary).
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(5);
/// The default `Timing::after_registration`.
pub const AFTER_REGISTRATION: Duration = Duration::from_secs(30);

fn describe(o: &[Offer]) -> String {
    o.iter()
        .map(|g| {
            format!(
                "{} {} of {} bytes, {} {} bytes and {} %",
                slice::device_name(g.index),
                g.offer_bytes / slice::STEP_BYTES * slice::STEP_BYTES,
                g.total_bytes,
                slice::compute_device_name(g.index),
                g.share_bytes / slice::STEP_BYTES * slice::STEP_BYTES,
                g.share_percent
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Publish this node's slice at every change of the polled offers, and
/// again whenever the API server's copy is not the last write, until
/// `stop`. `registered` is notified at each registration with the kubelet.
/// At stop the slice is left in place (docs/kubernetes.md, "Stopping"): the
/// kubelet withdraws a driver's slices itself when it does not register
/// again, and a restart (a rolling update) does not stop the node's
/// scheduling meanwhile.
pub async fn run(
    node: String,
    timing: Timing,
    mut polled: watch::Receiver<Option<Arc<Polled>>>,
    store: Arc<dyn SliceStore>,
    registered: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let owner = match store.node_uid(&node).await {
        Ok(Some(uid)) => Some(slice::node_owner(&node, &uid)),
        Ok(None) => {
            tracing::warn!("node {node} not found on the API server: the slice has no owner");
            None
        }
        Err(e) => {
            tracing::warn!("{e}: the slice has no owner");
            None
        }
    };
    let names = slice::slice_names(&node);
    let name = names.join(" and ");
    // the slices left by an earlier run, so its pool generation is carried
    // on (the scheduler must never see a generation go back): read it
    // before writing anything, however long the API server takes
    let mut logged = false;
    let existing = loop {
        match get_all(&*store, &names).await {
            Ok(s) => break s,
            Err(e) if !logged => {
                tracing::warn!("{e}; retrying");
                logged = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(timing.retry) => {}
        }
    };
    let mut p = Publisher::new(&node, owner, &existing);
    let mut last_err = String::new();
    let mut api_down = false;
    let mut next_check = Instant::now() + timing.resync;
    let mut watchful_until = Instant::now();
    let mut check_now = false;
    loop {
        // the latest read (at once if one came while the slice was read)
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = polled.wait_for(|p| p.is_some()) => if r.is_err() { return },
        }
        let Some(read) = polled.borrow_and_update().clone() else {
            continue;
        };
        match &read.offers {
            Ok(o) => {
                last_err.clear();
                let now = Instant::now();
                if check_now || api_down || now >= next_check || now < watchful_until {
                    check_now = false;
                    next_check = now + timing.resync;
                    match get_all(&*store, &names).await {
                        Ok(found) => {
                            if api_down {
                                tracing::info!("the API server answers again");
                                api_down = false;
                            }
                            match p.check(&found) {
                                Drift::InStep | Drift::Unwritten => {}
                                Drift::Missing => tracing::warn!(
                                    "ResourceSlices {name}: one is gone from the API server (the kubelet's restart, or deleted by hand): publishing it again"
                                ),
                                Drift::Edited => tracing::warn!(
                                    "ResourceSlices {name}: one on the API server is not the one this driver wrote (edited by someone else): writing it again"
                                ),
                            }
                        }
                        Err(e) => {
                            if !api_down {
                                tracing::warn!("{e}; reading it again at every poll");
                                api_down = true;
                            }
                        }
                    }
                }
                if let Some(s) = p.next(o) {
                    match apply_all(&*store, &s).await {
                        Ok(()) => tracing::info!(
                            "published ResourceSlices {name} generation {}: {}",
                            s[0].spec.pool.generation,
                            describe(o)
                        ),
                        Err(e) => {
                            tracing::warn!("{e}; retrying");
                            p.failed();
                        }
                    }
                }
            }
            Err(e) => {
                if *e != last_err {
                    tracing::warn!(
                        "cannot read this node's GPUs ({e}); the slice is left as it was"
                    );
                    last_err = e.clone();
                }
            }
        }
        // the next read, or a registration (then the API's copy is read
        // with the next read and at every poll for a while)
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = polled.changed() => if r.is_err() { return },
            _ = registered.notified() => {
                check_now = true;
                watchful_until = Instant::now() + timing.after_registration;
            }
        }
    }
}

/// The API's copy of each of the pool's slices.
async fn get_all(
    store: &dyn SliceStore,
    names: &[String; SLICES],
) -> Result<[Option<ResourceSlice>; SLICES], StoreError> {
    Ok([store.get(&names[0]).await?, store.get(&names[1]).await?])
}

/// Write the pool's slices, its counter sets first: the devices that
/// consume them are never published before them.
async fn apply_all(store: &dyn SliceStore, s: &[ResourceSlice; SLICES]) -> Result<(), StoreError> {
    for x in s.iter().rev() {
        store.apply(x).await?;
    }
    Ok(())
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
            min_bytes: 0,
            share_bytes: free,
            share_percent: 100,
        }]
    }

    fn gens(s: &[ResourceSlice; SLICES]) -> [i64; SLICES] {
        [s[0].spec.pool.generation, s[1].spec.pool.generation]
    }

    fn found(s: &[ResourceSlice; SLICES]) -> [Option<ResourceSlice>; SLICES] {
        s.clone().map(Some)
    }

    #[test]
    fn writes_only_changes_with_a_new_generation_for_both_slices() {
        let owner = slice::node_owner("n", "node-uid");
        let mut p = Publisher::new("n", Some(owner.clone()), &[]);
        let s = p.next(&offers(15 * GI)).expect("first write");
        assert_eq!(gens(&s), [1, 1]);
        assert!(s
            .iter()
            .all(|x| x.metadata.owner_references == Some(vec![owner.clone()])));
        assert!(
            p.next(&offers(15 * GI)).is_none(),
            "same content: nothing to write"
        );
        // below the step: the published capacity is the same, nothing to write
        assert!(p.next(&offers(15 * GI + (100 << 20))).is_none());
        let s = p.next(&offers(9 * GI)).expect("changed");
        assert_eq!(gens(&s), [2, 2]);
        p.failed();
        assert_eq!(gens(&p.next(&offers(9 * GI)).expect("retried")), [3, 3]);
    }

    #[test]
    fn a_missing_or_edited_copy_is_written_again_above_its_generation() {
        let mut p = Publisher::new("n", None, &[]);
        assert_eq!(p.check(&[None, None]), Drift::Unwritten);
        let s = p.next(&offers(15 * GI)).unwrap();
        assert_eq!(p.check(&found(&s)), Drift::InStep);
        assert!(p.next(&offers(15 * GI)).is_none());
        // the same offer with its quantities in another form: in step
        let mut other = s.clone();
        let cap = other[0].spec.devices.as_mut().unwrap()[0]
            .capacity
            .as_mut()
            .unwrap()
            .get_mut(slice::MEMORY)
            .unwrap();
        cap.value = k8s_openapi::apimachinery::pkg::api::resource::Quantity((15 * GI).to_string());
        assert_eq!(p.check(&found(&other)), Drift::InStep);
        // either one gone: both written again
        assert_eq!(p.check(&[Some(s[0].clone()), None]), Drift::Missing);
        let s2 = p.next(&offers(15 * GI)).expect("written again");
        assert_eq!(gens(&s2), [2, 2]);
        assert_eq!(s2[0].spec.devices, s[0].spec.devices);
        assert_eq!(s2[1].spec.shared_counters, s[1].spec.shared_counters);
        // the counters edited, with a higher generation: written above it
        let mut edited = s2.clone();
        edited[1].spec.shared_counters.as_mut().unwrap()[0].name = "gpu-7".into();
        edited[1].spec.pool.generation = 9;
        assert_eq!(p.check(&found(&edited)), Drift::Edited);
        assert_eq!(gens(&p.next(&offers(15 * GI)).unwrap()), [10, 10]);
        // an older generation of the same devices is not the last write
        let mut old = s.clone();
        old[0].spec.pool.generation = 3;
        assert_eq!(p.check(&found(&old)), Drift::Edited);
    }

    #[test]
    fn carries_on_the_highest_generation_found_at_start() {
        let mut old = slices_for("n", &offers(GI));
        old[0].spec.pool.generation = 41;
        old[1].spec.pool.generation = 40;
        // an earlier release's one slice: its generation is carried on too
        let mut p = Publisher::new("n", None, &[Some(old[0].clone()), None]);
        let s = p.next(&offers(GI)).unwrap();
        assert_eq!(gens(&s), [42, 42]);
        assert!(s[0].metadata.owner_references.is_none());
        let mut p = Publisher::new("n", None, &found(&old));
        assert_eq!(gens(&p.next(&offers(GI)).unwrap()), [42, 42]);
    }
}
