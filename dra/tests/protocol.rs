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

const G: u64 = 1 << 30;
/// The health stream's timeout in these tests (re-sent every second).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);
const GPU0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const GPU1: &str = "GPU-11111111-1111-1111-1111-111111111111";
const NODE: &str = "node-a";
const TRAIN: &str = "0e6f6a52-8d7c-4a43-b1f0-6c2b9d3e4f10";
const BIG: &str = "7a9d2e61-0b4c-4f3a-8e5d-9c1b2a3f4e50";
const INFER: &str = "c41d8f2e-6a7b-4c9d-8e0f-1a2b3c4d5e6f";

fn fixture(name: &str) -> ResourceClaim {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap();
    if name.ends_with(".json") {
        serde_json::from_str(&text).unwrap()
    } else {
        serde_norway::from_str(&text).unwrap()
    }
}

/// The API server's slices, in memory.
#[derive(Default)]
struct Slices(Mutex<BTreeMap<String, ResourceSlice>>);

#[tonic::async_trait]
impl SliceStore for Slices {
    async fn node_uid(&self, node: &str) -> Result<Option<String>, StoreError> {
        Ok((node == NODE).then(|| "9f8e7d6c-0000-4000-8000-node0000000a".to_string()))
    }
    async fn get(&self, name: &str) -> Result<Option<ResourceSlice>, StoreError> {
        Ok(self.0.lock().unwrap().get(name).cloned())
    }
    async fn apply(&self, s: &ResourceSlice) -> Result<(), StoreError> {
        let name = s.metadata.name.clone().unwrap();
        self.0.lock().unwrap().insert(name, s.clone());
        Ok(())
    }
    async fn delete(&self, name: &str) -> Result<(), StoreError> {
        self.0.lock().unwrap().remove(name);
        Ok(())
    }
}

/// The node's gpu-quota config: GPU 0 16 GiB and, with `gpu1`, GPU 1
/// 10.5 GiB; written atomically (the driver re-reads it at every poll).
fn write_config(root: &Path, gpu1: bool) {
    let r = root.display();
    let mut text = format!(
        "ledger_dir = \"{r}/ledger\"\nstate_dir = \"{r}/state\"\ncdi_dir = \"{r}/cdi\"\nlog_file = \"{r}/gq.log\"\nreserve = \"1g\"\n\
         [driver]\ndev_root = \"{r}/dev\"\n\
         [[inventory.gpu]]\nindex = 0\nuuid = \"{GPU0}\"\nmemory = \"16g\"\n"
    );
    if gpu1 {
        text += &format!("[[inventory.gpu]]\nindex = 1\nuuid = \"{GPU1}\"\nmemory = \"10752m\"\n");
    }
    let tmp = root.join("config.toml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, root.join("config.toml")).unwrap();
}

/// A node: GPU 0 16 GiB, GPU 1 10.5 GiB, reserve 1 GiB; sockets in temp dirs.
struct Host {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    claims: Arc<MemoryClaims>,
    slices: Arc<Slices>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    daemon: Option<tokio::task::JoinHandle<Result<(), daemon::DaemonError>>>,
}

impl Host {
    async fn start() -> Host {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        for d in ["ledger", "dev", "cdi", "plugins", "registry"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for n in ["nvidia0", "nvidia1"] {
            std::fs::write(root.join("dev").join(n), b"").unwrap();
        }
        write_config(&root, true);
        let claims = Arc::new(MemoryClaims::default());
        for f in [
            "claim-train-8gi.yaml",
            "claim-big-12gi.yaml",
            "claim-gpu1-default.json",
        ] {
            claims.insert(fixture(f));
        }
        let slices = Arc::new(Slices::default());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let opts = daemon::Options {
            plugin_dir: root.join("plugins"),
            registry_dir: root.join("registry"),
            node_name: NODE.into(),
            poll: Duration::from_millis(50),
            health_timeout: HEALTH_TIMEOUT,
        };
        let node: Arc<dyn Node> = Arc::new(HostNode {
            config_path: root.join("config.toml"),
        });
        let daemon = tokio::spawn(daemon::run(
            opts,
            node,
            claims.clone(),
            Some(slices.clone() as Arc<dyn SliceStore>),
            async move {
                let _ = rx.await;
            },
        ));
        let h = Host {
            _tmp: tmp,
            root,
            claims,
            slices,
            stop: Some(tx),
            daemon: Some(daemon),
        };
        h.wait(|| h.reg_sock().exists() && h.dra_sock().exists())
            .await;
        h
    }

    fn cfg(&self) -> gpuquota_core::Config {
        gpuquota_core::Config::load(&self.root.join("config.toml")).unwrap()
    }

    fn reg_sock(&self) -> PathBuf {
        self.root.join("registry/vram.gpu-quota.io-reg.sock")
    }

    fn dra_sock(&self) -> PathBuf {
        self.root.join("plugins/dra.sock")
    }

    fn cdi(&self, uid: &str) -> PathBuf {
        self.root
            .join(format!("cdi/vram.gpu-quota.io-claim-{uid}.json"))
    }

    /// (uid, gpu, bytes) of the claims the ledger holds.
    fn ledger(&self) -> Vec<(String, String, u64)> {
        let mut v: Vec<_> = gpuquota_core::claims::prepared(&self.cfg())
            .unwrap()
            .into_iter()
            .map(|a| (a.uid, a.gpu_uuid, a.bytes))
            .collect();
        v.sort();
        v
    }

    /// A reservation of a container that Kubernetes did not start (Docker),
    /// added to the ledger as the runtime writes it.
    fn outside_container(&self, gpu: &str, bytes: u64) {
        let path = self.root.join("ledger/ledger.json");
        let mut l: serde_json::Value = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).unwrap(),
            Err(_) => serde_json::json!({"version": 1, "reservations": []}),
        };
        let now = gpuquota_core::fsutil::now_unix();
        l["reservations"].as_array_mut().unwrap().push(serde_json::json!({
            "container_id": "docker-outside", "runtime_root": "/run/docker/runtime-runc/moby",
            "bundle": "/run/bundles/docker-outside",
            "slices": [{"uuid": gpu, "index": 0, "bytes": bytes}],
            "request": "", "created_unix": now, "started_unix": null, "pid": null,
            "pid_start": null, "state": "reserved", "pid_ns": null, "mnt_ns": null, "boot_id": null
        }));
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&l).unwrap()).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    async fn wait(&self, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(20), "timed out");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(mut self) -> Self {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.daemon.take().unwrap())
            .await
            .expect("daemon stops")
            .unwrap()
            .unwrap();
        self
    }
}

async fn channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://[::]:0")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
            }
        }))
        .await
        .unwrap()
}

fn claim(ns: &str, name: &str, uid: &str) -> dra::Claim {
    dra::Claim {
        namespace: ns.into(),
        name: name.into(),
        uid: uid.into(),
    }
}

async fn prepare(
    h: &Host,
    claims: Vec<dra::Claim>,
) -> BTreeMap<String, dra::NodePrepareResourceResponse> {
    let mut c = DraPluginClient::new(channel(&h.dra_sock()).await);
    let r = c
        .node_prepare_resources(dra::NodePrepareResourcesRequest { claims })
        .await
        .expect("per-claim errors, never a failed RPC")
        .into_inner();
    r.claims.into_iter().collect()
}

async fn unprepare(h: &Host, claims: Vec<dra::Claim>) -> BTreeMap<String, String> {
    let mut c = DraPluginClient::new(channel(&h.dra_sock()).await);
    let r = c
        .node_unprepare_resources(dra::NodeUnprepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner();
    r.claims.into_iter().map(|(k, v)| (k, v.error)).collect()
}

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
async fn the_slice_follows_the_ledger_and_is_deleted_at_stop() {
    let h = Host::start().await;
    let name = slice::slice_name(NODE);
    h.wait(|| h.slices.0.lock().unwrap().contains_key(&name))
        .await;
    let s = h.slices.0.lock().unwrap()[&name].clone();
    let mem: Vec<String> = s
        .spec
        .devices
        .as_ref()
        .unwrap()
        .iter()
        .map(|d| d.capacity.as_ref().unwrap()["memory"].value.0.clone())
        .collect();
    // usable: 16 - 1 and 10.5 - 1 GiB (rounded down to 256 MiB)
    assert_eq!(mem, ["15Gi", "9728Mi"]);
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
    assert_eq!(gpu0.capacity.as_ref().unwrap()["memory"].value.0, "11Gi");
    let _ = &h.claims;
    let h = h.stop().await;
    assert!(
        h.slices.0.lock().unwrap().is_empty(),
        "slice deleted at stop"
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
    // at once: both GPUs, the names the slice publishes
    let t = Instant::now();
    assert_eq!(health_of(&next(&mut s).await), [ok("gpu-0"), ok("gpu-1")]);
    assert!(t.elapsed() < Duration::from_secs(1), "right away");

    // nothing changes: re-sent, each within a third of the timeout or so
    for _ in 0..2 {
        let t = Instant::now();
        assert_eq!(health_of(&next(&mut s).await), [ok("gpu-0"), ok("gpu-1")]);
        assert!(t.elapsed() < HEALTH_TIMEOUT / 2, "{:?}", t.elapsed());
    }

    // GPU 1 leaves the inventory: still listed, UNHEALTHY, named
    write_config(&h.root, false);
    let t = Instant::now();
    let gone = loop {
        let m = health_of(&next(&mut s).await);
        if m[1].1 != HealthStatus::Healthy {
            break m;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "gpu-1 never unhealthy"
        );
    };
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert_eq!(gone[0], ok("gpu-0"));
    assert_eq!((&*gone[1].0, gone[1].1), ("gpu-1", HealthStatus::Unhealthy));
    assert!(
        gone[1].2.starts_with("gpu-quota: ") && gone[1].2.contains("gpu-1"),
        "{}",
        gone[1].2
    );
    // and it stays so in the re-sends
    assert_eq!(health_of(&next(&mut s).await), gone);

    // back: HEALTHY again
    write_config(&h.root, true);
    let t = Instant::now();
    while health_of(&next(&mut s).await) != [ok("gpu-0"), ok("gpu-1")] {
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

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK literal with incremental indexing, indexed name, raw value.
fn lit_indexed(name_index: u8, value: &str) -> Vec<u8> {
    assert!(name_index < 64 && value.len() < 127);
    let mut v = vec![0x40 | name_index, value.len() as u8];
    v.extend_from_slice(value.as_bytes());
    v
}

/// The first GetInfo's header block, as grpc-go encodes it (2 = :method
/// POST, 6 = :scheme http; then :path, :authority, content-type,
/// user-agent, te entered into the dynamic table).
fn grpc_go_first_block(authority: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86];
    b.extend(lit_indexed(4, "/pluginregistration.Registration/GetInfo"));
    b.extend(lit_indexed(1, authority));
    b.extend(lit_indexed(31, "application/grpc"));
    b.extend(lit_indexed(58, "grpc-go/1.72.1"));
    // te: no static entry with that name: literal name
    b.extend_from_slice(&[0x40, 2, b't', b'e', 8]);
    b.extend_from_slice(b"trailers");
    b
}

/// The same request again on the connection: every field from the tables
/// (:path 66, :authority 65, content-type 64, user-agent 63, te 62).
const GRPC_GO_SECOND_BLOCK: &[u8] = &[0x83, 0x86, 0xc2, 0xc1, 0xc0, 0xbf, 0xbe];

#[derive(Debug, PartialEq)]
enum Reply {
    /// :status, the gRPC message, grpc-status
    Ok(String, Vec<u8>, String),
    /// RST_STREAM / GOAWAY error code
    Reset(u32),
    GoAway(u32),
}

async fn read_frame(s: &mut tokio::net::UnixStream) -> (u8, u8, u32, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut h = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut h))
        .await
        .expect("a frame within 10 s")
        .expect("the connection stays open");
    let n = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
    let mut p = vec![0; n];
    s.read_exact(&mut p).await.unwrap();
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    (h[3], h[4], stream, p)
}

/// Send one GetInfo on `stream` with `block` and read its reply.
async fn kubelet_get_info(
    s: &mut tokio::net::UnixStream,
    dec: &mut loona_hpack::Decoder<'static>,
    stream: u32,
    block: &[u8],
) -> Reply {
    use tokio::io::AsyncWriteExt;
    let headers = h2_frame(1, 0x4, stream, block);
    // split mid-frame, as a socket may deliver it
    let (a, b) = headers.split_at(headers.len() / 2);
    s.write_all(a).await.unwrap();
    s.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.write_all(b).await.unwrap();
    // an empty InfoRequest: uncompressed, length 0
    s.write_all(&h2_frame(0, 0x1, stream, &[0, 0, 0, 0, 0]))
        .await
        .unwrap();
    let (mut status, mut body, mut grpc) = (String::new(), Vec::new(), String::new());
    loop {
        let (kind, flags, sid, p) = read_frame(s).await;
        match kind {
            // SETTINGS: acknowledge the server's
            4 if flags & 1 == 0 => s.write_all(&h2_frame(4, 1, 0, &[])).await.unwrap(),
            7 => return Reply::GoAway(u32::from_be_bytes(p[4..8].try_into().unwrap())),
            3 if sid == stream => {
                return Reply::Reset(u32::from_be_bytes(p[..4].try_into().unwrap()))
            }
            1 if sid == stream => {
                assert!(flags & 0x4 != 0, "the server's headers in one frame");
                dec.decode_with_cb(&p, |n, v| {
                    let (n, v) = (String::from_utf8_lossy(&n), String::from_utf8_lossy(&v));
                    match &*n {
                        ":status" => status = v.into_owned(),
                        "grpc-status" => grpc = v.into_owned(),
                        _ => {}
                    }
                })
                .unwrap();
                if flags & 0x1 != 0 {
                    return Reply::Ok(status, body, grpc);
                }
            }
            0 if sid == stream => body.extend_from_slice(&p),
            _ => {}
        }
    }
}

async fn kubelet_connection(path: &Path) -> tokio::net::UnixStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::UnixStream::connect(path).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    s.write_all(&h2_frame(4, 0, 0, &[])).await.unwrap();
    s
}

fn plugin_info(body: &[u8]) -> registration::PluginInfo {
    use prost::Message;
    assert!(
        body.len() >= 5 && body[0] == 0,
        "one uncompressed gRPC message"
    );
    let n = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(body.len(), 5 + n);
    registration::PluginInfo::decode(&body[5..]).unwrap()
}

#[tokio::test]
async fn the_kubelets_registration_dial_with_the_socket_path_as_authority_is_answered() {
    let h = Host::start().await;
    let authority = h.reg_sock().display().to_string();
    let mut s = kubelet_connection(&h.reg_sock()).await;
    let mut dec = loona_hpack::Decoder::new();
    for (stream, block) in [
        (1, grpc_go_first_block(&authority)),
        (3, GRPC_GO_SECOND_BLOCK.to_vec()),
    ] {
        match kubelet_get_info(&mut s, &mut dec, stream, &block).await {
            Reply::Ok(status, body, grpc) => {
                assert_eq!((&*status, &*grpc), ("200", "0"), "stream {stream}");
                let info = plugin_info(&body);
                assert_eq!(info.r#type, "DRAPlugin");
                assert_eq!(info.name, "vram.gpu-quota.io");
                assert_eq!(info.endpoint, h.dra_sock().display().to_string());
            }
            r => panic!("stream {stream} (:authority {authority}): {r:?} (1 = PROTOCOL_ERROR)"),
        }
    }
    drop(s);

    // a header block over the adapter's 64 KiB bound: the connection is
    // closed on the frame header (h2 alone would wait for the payload)
    let mut s = kubelet_connection(&h.reg_sock()).await;
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut head = h2_frame(1, 0x4, 1, &[]);
        head[..3].copy_from_slice(&((64u32 << 10) + 1).to_be_bytes()[1..]);
        s.write_all(&head).await.unwrap();
        let mut sink = [0u8; 4096];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match s.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "an oversize header block closes the connection"
        );
    }
    drop(s);

    // negative control: the same bytes on the DRA socket, which is served
    // without the adapter (the kubelet dials it as unix:<path>), are what
    // h2 refuses; so the client above reproduces the kubelet's failure
    let mut s = kubelet_connection(&h.dra_sock()).await;
    let mut dec = loona_hpack::Decoder::new();
    let dra_path = h.dra_sock().display().to_string();
    assert_eq!(
        kubelet_get_info(&mut s, &mut dec, 1, &grpc_go_first_block(&dra_path)).await,
        Reply::Reset(1),
        "h2 refuses a path as :authority with PROTOCOL_ERROR"
    );
    drop(s);
    h.stop().await;
}
