//! The published offer converges to the node's truth: the driver's slice
//! is written again when the API server's copy is missing (the kubelet's
//! wipe at its start, a delete by hand, an API server that lost it) or
//! edited by someone else, at once on a registration with the kubelet, and
//! not written at all while nothing changes. The API server is the
//! in-memory store of tests/common, changed behind the driver's back.
mod common;

use common::*;
use gpuquota_dra::api::registration::{self, registration_client::RegistrationClient};
use gpuquota_dra::slice;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn name() -> String {
    slice::slice_name(NODE)
}

fn generation(h: &Host) -> Option<i64> {
    h.slices
        .0
        .lock()
        .unwrap()
        .get(&name())
        .map(|s| s.spec.pool.generation)
}

fn gpu0_memory(h: &Host) -> Option<String> {
    let m = h.slices.0.lock().unwrap();
    let s = m.get(&name())?;
    Some(
        s.spec.devices.as_ref()?[0].capacity.as_ref()?["memory"]
            .value
            .0
            .clone(),
    )
}

/// Wait for `f` at most `limit`; false when it did not hold by then.
async fn within(limit: Duration, f: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn published(h: &Host) -> i64 {
    assert!(within(Duration::from_secs(5), || generation(h).is_some()).await);
    generation(h).unwrap()
}

async fn register(h: &Host) {
    let mut c = RegistrationClient::new(channel(&h.reg_sock()).await);
    c.notify_registration_status(registration::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_deleted_slice_is_published_again_and_nothing_is_written_while_in_step() {
    let h = Host::start_with(Duration::from_millis(300), Arc::new(Slices::default())).await;
    let gen = published(&h).await;
    let writes = h.slices.writes();
    // a second of polls (every 50 ms) and re-reads (every 300 ms): nothing differs
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        h.slices.writes(),
        writes,
        "no write while the copy is in step"
    );
    // `kubectl delete resourceslices --all`
    h.slices.0.lock().unwrap().clear();
    assert!(
        within(Duration::from_secs(2), || generation(&h).is_some()).await,
        "the deleted slice is published again within the resync"
    );
    assert_eq!(generation(&h), Some(gen + 1), "a new generation");
    assert_eq!(gpu0_memory(&h).as_deref(), Some("15Gi"));
    h.stop().await;
}

#[tokio::test]
async fn a_slice_edited_by_someone_else_is_written_back_above_its_generation() {
    let h = Host::start_with(Duration::from_millis(300), Arc::new(Slices::default())).await;
    let gen = published(&h).await;
    {
        let mut m = h.slices.0.lock().unwrap();
        let s = m.get_mut(&name()).unwrap();
        s.spec.devices.as_mut().unwrap()[0]
            .capacity
            .as_mut()
            .unwrap()
            .get_mut("memory")
            .unwrap()
            .value = Quantity("100Gi".into());
        s.spec.pool.generation = gen + 10;
    }
    assert!(
        within(Duration::from_secs(2), || gpu0_memory(&h).as_deref()
            == Some("15Gi"))
        .await,
        "the node's offer is written back"
    );
    // above the edited copy's generation: the scheduler never sees one go back
    assert_eq!(generation(&h), Some(gen + 11));
    // the same offer with its quantity written in another form (as an API
    // server may return it) is in step: nothing written
    let writes = h.slices.writes();
    {
        let mut m = h.slices.0.lock().unwrap();
        let s = m.get_mut(&name()).unwrap();
        s.spec.devices.as_mut().unwrap()[0]
            .capacity
            .as_mut()
            .unwrap()
            .get_mut("memory")
            .unwrap()
            .value = Quantity((15u64 << 30).to_string());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.slices.writes(), writes);
    h.stop().await;
}

#[tokio::test]
async fn a_kubelet_restart_wipes_the_slice_and_the_registration_republishes_it() {
    // a resync far longer than the test: only the registration can bring it back
    let h = Host::start_with(Duration::from_secs(3600), Arc::new(Slices::default())).await;
    let gen = published(&h).await;
    // the kubelet starts: it deletes its node's slices, then registers us
    h.slices.0.lock().unwrap().clear();
    register(&h).await;
    assert!(
        within(Duration::from_secs(2), || generation(&h).is_some()).await,
        "published again within 2 s of the registration"
    );
    assert_eq!(generation(&h), Some(gen + 1));
    // the wipe may also come just after the registration: the copy is
    // re-read at every poll for a while after it
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.slices.0.lock().unwrap().clear();
    assert!(
        within(Duration::from_secs(2), || generation(&h).is_some()).await,
        "published again after a wipe that followed the registration"
    );
    h.stop().await;
}

#[tokio::test]
async fn the_slice_lost_while_the_api_server_was_down_is_published_when_it_is_back() {
    let h = Host::start_with(Duration::from_millis(300), Arc::new(Slices::default())).await;
    published(&h).await;
    h.slices.set_down(true);
    // an etcd restored from a backup without this node's slice
    h.slices.0.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.slices.set_down(false);
    assert!(
        within(Duration::from_secs(2), || generation(&h).is_some()).await,
        "published again within 2 s of the API server answering"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_driver_writes_at_once_above_the_generation_it_finds() {
    let slices = Arc::new(Slices::default());
    let h = Host::start_with(Duration::from_millis(300), slices.clone()).await;
    let gen = published(&h).await;
    h.stop().await;
    // the slice was left at stop; someone bumped it meanwhile
    slices
        .0
        .lock()
        .unwrap()
        .get_mut(&name())
        .unwrap()
        .spec
        .pool
        .generation = gen + 5;
    let h = Host::start_with(Duration::from_secs(3600), slices).await;
    assert!(within(Duration::from_secs(2), || generation(&h) == Some(gen + 6)).await);
    h.stop().await;
}
