#![allow(unused_imports)]
//! Protocol test: no kubelet or API server in CI.
//!
//! The driver's daemon over real gRPC unix sockets, a tonic client playing
//! the kubelet (plugin watcher + DRA manager), the REAL node side
//! (`core::claims` on a temp gpu-quota config, ledger and CDI directory,
//! static inventory) and, in place of the API server, ResourceClaims
//! deserialized from fixtures/ exactly as the API server sends them, and an
//! in-memory ResourceSlice store.
use gpuquota_dra::api::dra::{self, dra_plugin_client::DraPluginClient};
use gpuquota_dra::api::health::{
    self, dra_resource_health_client::DraResourceHealthClient, HealthStatus,
};
use gpuquota_dra::api::registration::{self, registration_client::RegistrationClient};
use gpuquota_dra::node::{HostNode, Node};
use gpuquota_dra::publish::{SliceStore, StoreError};
use gpuquota_dra::source::MemoryClaims;
use gpuquota_dra::{daemon, slice};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

mod common;
use common::*;

#[tokio::test]
async fn registration_names_the_driver_its_socket_and_v1() {
    let h = Host::start().await;
    let mut c = RegistrationClient::new(channel(&h.reg_sock()).await);
    let info = c
        .get_info(registration::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, "vram.gpu-quota.io");
    assert_eq!(info.endpoint, h.dra_sock().display().to_string());
    assert_eq!(info.supported_versions, ["v1.DRAPlugin"]);
    c.notify_registration_status(registration::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    // the endpoint it names answers the DRA service
    assert!(prepare(&h, vec![]).await.is_empty());
    let h = h.stop().await;
    assert!(
        !h.reg_sock().exists() && !h.dra_sock().exists(),
        "sockets removed at stop"
    );
}

#[tokio::test]
async fn prepare_reserves_what_fits_refuses_the_rest_and_unprepare_releases() {
    let h = Host::start().await;
    let r = prepare(
        &h,
        vec![
            claim("ml", "train-0-vram-x7k2p", TRAIN),
            claim("ml", "big-vram", BIG),
        ],
    )
    .await;
    assert_eq!(r.len(), 2);
    let ok = &r[TRAIN];
    assert_eq!(ok.error, "");
    assert_eq!(
        ok.devices,
        [dra::Device {
            request_names: vec!["vram".into()],
            pool_name: NODE.into(),
            device_name: "gpu-0".into(),
            cdi_device_ids: vec![format!("vram.gpu-quota.io/claim={TRAIN}")],
            share_id: Some("4c1e0b7a-93d2-4f5e-8a6b-2d7c9e0f1a3b".into()),
        }]
    );
    let e = &r[BIG].error;
    assert!(r[BIG].devices.is_empty());
    assert!(
        e.starts_with("gpu-quota: ") && e.matches("gpu-quota:").count() == 1,
        "{e}"
    );
    assert!(
        e.contains("ml/big-vram") && e.contains("12") && e.contains("7"),
        "asked and free: {e}"
    );
    // exactly the fitting claim is held, on its GPU, and its CDI spec exists
    assert_eq!(h.ledger(), [(TRAIN.to_string(), GPU0.to_string(), 8 * G)]);
    assert!(h.cdi(TRAIN).exists());
    assert!(!h.cdi(BIG).exists());

    // the kubelet retries: the same answer, nothing reserved twice
    let again = prepare(&h, vec![claim("ml", "train-0-vram-x7k2p", TRAIN)]).await;
    assert_eq!(again[TRAIN], *ok);
    assert_eq!(h.ledger(), [(TRAIN.to_string(), GPU0.to_string(), 8 * G)]);

    // a claim with no amount gets the policy's default (1Gi) on GPU 1
    let r = prepare(&h, vec![claim("default", "infer-vram", INFER)]).await;
    assert_eq!(r[INFER].error, "");
    assert_eq!(r[INFER].devices[0].device_name, "gpu-1");
    assert_eq!(h.ledger().len(), 2);

    let u = unprepare(
        &h,
        vec![
            claim("ml", "train-0-vram-x7k2p", TRAIN),
            claim("ml", "big-vram", BIG),
        ],
    )
    .await;
    assert_eq!(u[TRAIN], "");
    assert_eq!(u[BIG], "", "unpreparing what was never prepared is fine");
    assert_eq!(h.ledger(), [(INFER.to_string(), GPU1.to_string(), G)]);
    assert!(!h.cdi(TRAIN).exists());
    // released: the big claim fits now
    let r = prepare(&h, vec![claim("ml", "big-vram", BIG)]).await;
    assert_eq!(r[BIG].error, "");
    h.stop().await;
}

/// A claim allocated a GPU's compute device is prepared with its share:
/// the scheduler's `consumedCapacity` compute, split over the claim's
/// `smProcs`, reserved in the ledger beside its bytes; a claim without
/// compute is then refused on that GPU, as the scheduler's counter would
/// have kept it off.
#[tokio::test]
async fn a_compute_claim_is_prepared_with_its_share() {
    let h = Host::start().await;
    let r = prepare(&h, vec![claim("ml", "serve-0-vram-q9w4t", SERVE)]).await;
    assert_eq!(r[SERVE].error, "");
    assert_eq!(r[SERVE].devices[0].device_name, "gpu-1-compute");
    let held: Vec<_> = gpuquota_core::claims::prepared(&h.cfg())
        .unwrap()
        .into_iter()
        .map(|a| (a.uid, a.gpu_uuid, a.bytes, a.sm, a.sm_procs))
        .collect();
    assert_eq!(
        held,
        [(SERVE.to_string(), GPU1.to_string(), 4 * G, Some(25), 2)]
    );
    // the default claim of GPU 1 has no share: refused beside it
    let r = prepare(&h, vec![claim("default", "infer-vram", INFER)]).await;
    assert!(r[INFER].error.contains("outside MPS"), "{}", r[INFER].error);
    h.stop().await;
}

#[tokio::test]
async fn a_claim_whose_uid_is_not_the_api_objects_is_refused() {
    let h = Host::start().await;
    let stale = "11111111-2222-4333-8444-555555555555";
    let r = prepare(&h, vec![claim("ml", "train-0-vram-x7k2p", stale)]).await;
    let e = &r[stale].error;
    assert!(
        e.starts_with("gpu-quota: ") && e.contains(stale) && e.contains(TRAIN),
        "{e}"
    );
    assert!(r[stale].devices.is_empty());
    // a claim the API server does not have
    let r = prepare(&h, vec![claim("ml", "nope", stale)]).await;
    assert!(r[stale].error.contains("ml/nope"), "{}", r[stale].error);
    assert!(h.ledger().is_empty(), "nothing reserved");
    assert!(
        std::fs::read_dir(h.root.join("cdi"))
            .unwrap()
            .next()
            .is_none(),
        "no CDI spec"
    );
    h.stop().await;
}

#[tokio::test]
async fn the_slice_follows_the_ledger_and_is_left_at_stop() {
    let h = Host::start().await;
    let name = slice::slice_name(NODE);
    h.wait(|| h.slices.0.lock().unwrap().contains_key(&name))
        .await;
    let s = h.slices.0.lock().unwrap()[&name].clone();
    let mem: Vec<(String, String)> = s
        .spec
        .devices
        .as_ref()
        .unwrap()
        .iter()
        .map(|d| {
            let c = d.capacity.as_ref().unwrap();
            let compute = c.get("compute").map_or("-".into(), |q| q.value.0.clone());
            (format!("{} {}", d.name, c["memory"].value.0), compute)
        })
        .collect();
    // usable: 16 - 1 and 10.5 - 1 GiB (rounded down to 256 MiB), on the
    // plain device and the compute device alike, with all the SMs
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        mem,
        [
            pair("gpu-0 15Gi", "-"),
            pair("gpu-0-compute 15Gi", "100"),
            pair("gpu-1 9728Mi", "-"),
            pair("gpu-1-compute 9728Mi", "100")
        ]
    );
    // and the pool's counter sets, one per GPU, in its second slice
    let counters = h.slices.0.lock().unwrap()[&slice::counters_slice_name(NODE)].clone();
    assert_eq!(counters.spec.pool.generation, s.spec.pool.generation);
    assert_eq!(counters.spec.shared_counters.as_ref().unwrap().len(), 2);
    assert_eq!(
        s.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Node"
    );
    let gen = s.spec.pool.generation;
    // claims are the scheduler's to count: preparing one changes nothing
    assert_eq!(
        prepare(&h, vec![claim("ml", "train-0-vram-x7k2p", TRAIN)]).await[TRAIN].error,
        ""
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.slices.0.lock().unwrap()[&name].spec.pool.generation, gen);
    // a container started outside Kubernetes takes 4 GiB of GPU 0: the
    // published capacity shrinks, in a new generation
    h.outside_container(GPU0, 4 * G);
    h.wait(|| h.slices.0.lock().unwrap()[&name].spec.pool.generation > gen)
        .await;
    let s = h.slices.0.lock().unwrap()[&name].clone();
    assert_eq!(s.spec.pool.generation, gen + 1);
    let gpu0 = &s.spec.devices.as_ref().unwrap()[0];
    assert_eq!(gpu0.name, "gpu-0");
    assert_eq!(gpu0.capacity.as_ref().unwrap()["memory"].value.0, "11Gi");
    let _ = &h.claims;
    // left for the kubelet to withdraw when the driver does not come back
    // (a restart must not stop the node's scheduling meanwhile)
    let h = h.stop().await;
    assert_eq!(
        h.slices.0.lock().unwrap()[&name].spec.pool.generation,
        gen + 1,
        "slice left as it was at stop"
    );
}

/// (device name, health, message) of one health response, and checks what
/// every entry must carry: this node's pool, the timeout, a fresh time.
fn health_of(r: &health::NodeWatchResourcesResponse) -> Vec<(String, HealthStatus, String)> {
    let now = gpuquota_core::fsutil::now_unix() as i64;
    r.devices
        .iter()
        .map(|d| {
            let id = d.device.as_ref().expect("a device identifier");
            assert_eq!(id.pool_name, NODE, "the pool is the node's name");
            assert_eq!(
                d.health_check_timeout_seconds,
                HEALTH_TIMEOUT.as_secs() as i64
            );
            assert!(
                (now - 5..=now + 1).contains(&d.last_updated_time),
                "last_updated_time {} is unix seconds now ({now})",
                d.last_updated_time
            );
            (id.device_name.clone(), d.health(), d.message.clone())
        })
        .collect()
}

/// The next health message, within the health timeout.
async fn next(
    s: &mut tonic::Streaming<health::NodeWatchResourcesResponse>,
) -> health::NodeWatchResourcesResponse {
    tokio::time::timeout(HEALTH_TIMEOUT, s.message())
        .await
        .expect("a message within the health timeout")
        .expect("the stream is not failed")
        .expect("the stream goes on")
}

/// The kubelet's DRAResourceHealth stream: every published device HEALTHY
/// at once, a GPU gone from the inventory UNHEALTHY (named) and HEALTHY
/// again when back, re-sent well within the timeout while nothing changes
/// (else the kubelet marks the devices Unknown), and the stream ends when
/// the driver stops.
#[tokio::test]
async fn the_health_stream_follows_the_gpus_and_is_resent_within_the_timeout() {
    let mut h = Host::start().await;
    let mut c = DraResourceHealthClient::new(channel(&h.dra_sock()).await);
    let mut s = c
        .node_watch_resources(health::NodeWatchResourcesRequest {})
        .await
        .expect("NodeWatchResources is served")
        .into_inner();
    let ok = |n: &str| (n.to_string(), HealthStatus::Healthy, String::new());
    let all = || {
        [
            ok("gpu-0"),
            ok("gpu-0-compute"),
            ok("gpu-1"),
            ok("gpu-1-compute"),
        ]
    };
    // at once: both GPUs, the names the slice publishes
    let t = Instant::now();
    assert_eq!(health_of(&next(&mut s).await), all());
    assert!(t.elapsed() < Duration::from_secs(1), "right away");

    // nothing changes: re-sent, each within a third of the timeout or so
    for _ in 0..2 {
        let t = Instant::now();
        assert_eq!(health_of(&next(&mut s).await), all());
        assert!(t.elapsed() < HEALTH_TIMEOUT / 2, "{:?}", t.elapsed());
    }

    // GPU 1 leaves the inventory: still listed, UNHEALTHY, named
    write_config(&h.root, false);
    let t = Instant::now();
    let gone = loop {
        let m = health_of(&next(&mut s).await);
        if m[2].1 != HealthStatus::Healthy {
            break m;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "gpu-1 never unhealthy"
        );
    };
    assert_eq!(gone.len(), 4, "{gone:?}");
    assert_eq!(gone[..2], all()[..2]);
    for (g, name) in gone[2..].iter().zip(["gpu-1", "gpu-1-compute"]) {
        assert_eq!((&*g.0, g.1), (name, HealthStatus::Unhealthy));
        assert!(
            g.2.starts_with("gpu-quota: ") && g.2.contains(name),
            "{}",
            g.2
        );
    }
    // and it stays so in the re-sends
    assert_eq!(health_of(&next(&mut s).await), gone);

    // back: HEALTHY again
    write_config(&h.root, true);
    let t = Instant::now();
    while health_of(&next(&mut s).await) != all() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "gpu-1 never healthy again"
        );
    }

    // the driver stops: the stream ends (the kubelet sees EOF and retries)
    let _ = h.stop.take().unwrap().send(());
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.message().await {
                Ok(Some(_)) => {}
                other => break other,
            }
        }
    })
    .await
    .expect("the stream ends when the driver stops");
    assert!(matches!(end, Ok(None)), "{end:?}");
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), h.daemon.take().unwrap())
        .await
        .expect("daemon stops")
        .unwrap()
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "no wait on the stream"
    );
}

/// The real binary: serves and registers even while the API server is
/// unreachable (the slice is retried), and SIGTERM removes both sockets and
/// exits 0. Without a node name it refuses to start.
#[tokio::test]
async fn the_binary_serves_and_exits_0_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // an API server that is not there (port 9, discard, is closed here)
    std::fs::write(
        root.join("kubeconfig"),
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:9\", insecure-skip-tls-verify: true}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: x, context: {cluster: c, user: u}}]\n",
    )
    .unwrap();
    std::fs::write(
        root.join("config.toml"),
        "[[inventory.gpu]]\nindex = 0\nuuid = \"GPU-0\"\nmemory = \"16g\"\n",
    )
    .unwrap();
    let run = |node: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-quota-dra"));
        c.arg("--config")
            .arg(root.join("config.toml"))
            .arg("--kubeconfig")
            .arg(root.join("kubeconfig"))
            .arg("--plugin-dir")
            .arg(root.join("plugins"))
            .arg("--registry-dir")
            .arg(root.join("registry"))
            .args(["--poll-ms", "100"])
            .env_remove("NODE_NAME")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(n) = node {
            c.args(["--node-name", n]);
        }
        c
    };
    let o = run(None).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("gpu-quota: no node name") && err.contains("NODE_NAME"),
        "{err}"
    );

    let mut child = run(Some(NODE)).spawn().unwrap();
    let (reg, dra) = (
        root.join("registry/vram.gpu-quota.io-reg.sock"),
        root.join("plugins/dra.sock"),
    );
    let t = Instant::now();
    while !(reg.exists() && dra.exists()) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "sockets never appeared"
        );
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let info = RegistrationClient::new(channel(&reg).await)
        .get_info(registration::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.endpoint, dra.display().to_string());
    let st = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut log = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut log).unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert!(!reg.exists() && !dra.exists(), "sockets removed\n{log}");
}

// --- the kubelet's registration dial, byte for byte (h2authority) ---
//
// The plugin watcher dials the registration socket with
// `grpc.DialContext(ctx, path, WithContextDialer(..))`: grpc-go sends the
// socket PATH as the HTTP/2 :authority, which h2 (tonic's server) answers
// with RST_STREAM PROTOCOL_ERROR unless the registration socket's adapter
// rewrites it. A hand-built HTTP/2 client, encoding the headers as
// golang.org/x/net/http2/hpack does (literals with incremental indexing,
// then the same fields as dynamic-table references on the next request).
