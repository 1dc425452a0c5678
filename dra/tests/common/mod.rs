//! What the DRA driver's protocol tests share: the node (a temp gpu-quota
//! config, ledger and CDI directory under the real `core::claims`), the
//! daemon started on real unix sockets, and the kubelet's calls.
#![allow(dead_code, unused_imports)]
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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

pub const G: u64 = 1 << 30;
/// The health stream's timeout in these tests (re-sent every second).
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);
pub const GPU0: &str = "GPU-00000000-0000-0000-0000-000000000000";
pub const GPU1: &str = "GPU-11111111-1111-1111-1111-111111111111";
pub const NODE: &str = "node-a";
pub const TRAIN: &str = "0e6f6a52-8d7c-4a43-b1f0-6c2b9d3e4f10";
pub const BIG: &str = "7a9d2e61-0b4c-4f3a-8e5d-9c1b2a3f4e50";
pub const INFER: &str = "c41d8f2e-6a7b-4c9d-8e0f-1a2b3c4d5e6f";
pub const SERVE: &str = "5d3c2b1a-0f9e-4d8c-b7a6-95e4d3c2b1a0";

pub fn fixture(name: &str) -> ResourceClaim {
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

/// The API server's slices, in memory; `writes` counts applies and
/// deletes, `down` makes every call fail as an unreachable API server.
#[derive(Default)]
pub struct Slices(
    pub Mutex<BTreeMap<String, ResourceSlice>>,
    pub AtomicUsize,
    pub AtomicBool,
);

impl Slices {
    pub fn writes(&self) -> usize {
        self.1.load(SeqCst)
    }
    pub fn set_down(&self, down: bool) {
        self.2.store(down, SeqCst)
    }
    fn up(&self, what: &str) -> Result<(), StoreError> {
        if self.2.load(SeqCst) {
            return Err(StoreError {
                what: what.into(),
                err: "connection refused".into(),
            });
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl SliceStore for Slices {
    async fn node_uid(&self, node: &str) -> Result<Option<String>, StoreError> {
        self.up("get node")?;
        Ok((node == NODE).then(|| "9f8e7d6c-0000-4000-8000-node0000000a".to_string()))
    }
    async fn get(&self, name: &str) -> Result<Option<ResourceSlice>, StoreError> {
        self.up("get resourceslice")?;
        Ok(self.0.lock().unwrap().get(name).cloned())
    }
    async fn apply(&self, s: &ResourceSlice) -> Result<(), StoreError> {
        self.up("apply resourceslice")?;
        let name = s.metadata.name.clone().unwrap();
        self.0.lock().unwrap().insert(name, s.clone());
        self.1.fetch_add(1, SeqCst);
        Ok(())
    }
    async fn delete(&self, name: &str) -> Result<(), StoreError> {
        self.up("delete resourceslice")?;
        self.0.lock().unwrap().remove(name);
        self.1.fetch_add(1, SeqCst);
        Ok(())
    }
}

/// The node's gpu-quota config: GPU 0 16 GiB and, with `gpu1`, GPU 1
/// 10.5 GiB; written atomically (the driver re-reads it at every poll).
pub fn write_config(root: &Path, gpu1: bool) {
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
pub struct Host {
    pub _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub claims: Arc<MemoryClaims>,
    pub slices: Arc<Slices>,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub daemon: Option<tokio::task::JoinHandle<Result<(), daemon::DaemonError>>>,
}

impl Host {
    pub async fn start() -> Host {
        Host::start_full(
            Duration::from_millis(300),
            Arc::new(Slices::default()),
            gpuquota_dra::conns::LIMITS,
        )
        .await
    }

    /// A node whose driver re-reads the API's copy of its slice every
    /// `resync`, publishing into `slices` (a slice already there is what an
    /// earlier run left).
    pub async fn start_with(resync: Duration, slices: Arc<Slices>) -> Host {
        Host::start_full(resync, slices, gpuquota_dra::conns::LIMITS).await
    }

    /// A node whose sockets have these connection bounds.
    pub async fn start_limited(limits: gpuquota_dra::conns::Limits) -> Host {
        Host::start_full(
            Duration::from_millis(300),
            Arc::new(Slices::default()),
            limits,
        )
        .await
    }

    async fn start_full(
        resync: Duration,
        slices: Arc<Slices>,
        limits: gpuquota_dra::conns::Limits,
    ) -> Host {
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
            "claim-compute-4gi-25.yaml",
        ] {
            claims.insert(fixture(f));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let opts = daemon::Options {
            plugin_dir: root.join("plugins"),
            registry_dir: root.join("registry"),
            node_name: NODE.into(),
            poll: Duration::from_millis(50),
            resync,
            health_timeout: HEALTH_TIMEOUT,
            limits,
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

    pub fn cfg(&self) -> gpuquota_core::Config {
        gpuquota_core::Config::load(&self.root.join("config.toml")).unwrap()
    }

    pub fn reg_sock(&self) -> PathBuf {
        self.root.join("registry/vram.gpu-quota.io-reg.sock")
    }

    pub fn dra_sock(&self) -> PathBuf {
        self.root.join("plugins/dra.sock")
    }

    pub fn cdi(&self, uid: &str) -> PathBuf {
        self.root
            .join(format!("cdi/vram.gpu-quota.io-claim-{uid}.json"))
    }

    /// (uid, gpu, bytes) of the claims the ledger holds.
    pub fn ledger(&self) -> Vec<(String, String, u64)> {
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
    pub fn outside_container(&self, gpu: &str, bytes: u64) {
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

    pub async fn wait(&self, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(20), "timed out");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(mut self) -> Self {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.daemon.take().unwrap())
            .await
            .expect("daemon stops")
            .unwrap()
            .unwrap();
        self
    }
}

pub async fn channel(path: &Path) -> Channel {
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

pub fn claim(ns: &str, name: &str, uid: &str) -> dra::Claim {
    dra::Claim {
        namespace: ns.into(),
        name: name.into(),
        uid: uid.into(),
    }
}

pub async fn prepare(
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

pub async fn unprepare(h: &Host, claims: Vec<dra::Claim>) -> BTreeMap<String, String> {
    let mut c = DraPluginClient::new(channel(&h.dra_sock()).await);
    let r = c
        .node_unprepare_resources(dra::NodeUnprepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner();
    r.claims.into_iter().map(|(k, v)| (k, v.error)).collect()
}
