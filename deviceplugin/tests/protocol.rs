//! Protocol test: no kubelet is packaged for these machines.
//!
//! The real `gpu-quota-device-plugin` binary against the test kubelet of
//! `kubelet/` over real gRPC unix sockets, with a simulated node (static
//! inventory, fake device nodes, a ledger written by the test):
//! registration, ListAndWatch updates (ledger holders outside Kubernetes,
//! a GPU that disappears), GetPreferredAllocation packing under both
//! placement policies, Allocate, a kubelet restart, SIGTERM.
mod kubelet;

use gpuquota_core::ledger::{LedgerData, Reservation};
use gpuquota_core::placement::Slice;
use gpuquota_deviceplugin::api;
use kubelet::{plugin_client, TestKubelet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::Streaming;

const G: u64 = 1 << 30;
const GPU0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const GPU1: &str = "GPU-11111111-1111-1111-1111-111111111111";
const T: Duration = Duration::from_secs(20);

struct Node {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Node {
    /// GPU 0: 16 GiB, GPU 1: 10.5 GiB, reserve 1 GiB → 15 + 9 units.
    fn new(placement: &str) -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        for d in ["dp", "ledger", "dev"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for n in ["nvidia0", "nvidia1"] {
            std::fs::write(root.join("dev").join(n), b"").unwrap();
        }
        let n = Node { _tmp: tmp, root };
        n.config(placement);
        n
    }

    fn config(&self, placement: &str) {
        let r = self.root.display();
        let text = format!(
            "ledger_dir = \"{r}/ledger\"\nstate_dir = \"{r}/state\"\nreserve = \"1g\"\nplacement = \"{placement}\"\n\
             [driver]\ndev_root = \"{r}/dev\"\n\
             [[inventory.gpu]]\nindex = 0\nuuid = \"{GPU0}\"\nmemory = \"16g\"\n\
             [[inventory.gpu]]\nindex = 1\nuuid = \"{GPU1}\"\nmemory = \"10752m\"\n"
        );
        write_atomic(&self.root.join("config.toml"), text.as_bytes());
    }

    fn dp(&self) -> PathBuf {
        self.root.join("dp")
    }

    fn ledger(&self, reservations: Vec<Reservation>) {
        let d = LedgerData {
            version: 1,
            reservations,
        };
        write_atomic(
            &self.root.join("ledger/ledger.json"),
            &serde_json::to_vec(&d).unwrap(),
        );
    }

    fn plugin(&self) -> Plugin {
        let log = self.root.join("plugin.log");
        let child = Command::new(env!("CARGO_BIN_EXE_gpu-quota-device-plugin"))
            .arg("--config")
            .arg(self.root.join("config.toml"))
            .arg("--plugin-dir")
            .arg(self.dp())
            .args(["--poll-ms", "100"])
            .env_remove("GPU_QUOTA_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Plugin { child, log }
    }
}

fn write_atomic(p: &Path, b: &[u8]) {
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, b).unwrap();
    std::fs::rename(&tmp, p).unwrap();
}

fn res(id: &str, root: &str, gpu: &str, bytes: u64) -> Reservation {
    let slice = Slice::memory(gpu.into(), if gpu == GPU0 { 0 } else { 1 }, bytes);
    Reservation {
        // just created: never stale within the grace period
        created_unix: gpuquota_core::fsutil::now_unix(),
        ..Reservation::new(
            id,
            Some(root),
            format!("/run/bundles/{id}"),
            vec![slice],
            "",
        )
    }
}

struct Plugin {
    child: Child,
    log: PathBuf,
}

impl Plugin {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (uuid, unit, healthy) of a ListAndWatch response.
fn units(r: &api::ListAndWatchResponse) -> Vec<(String, u32, bool)> {
    r.devices
        .iter()
        .map(|d| {
            let (u, n) = gpuquota_deviceplugin::units::parse_device_id(&d.id)
                .unwrap_or_else(|| panic!("device id {:?} is not <uuid>_<n>", d.id));
            (u.to_string(), n, d.health == api::HEALTHY)
        })
        .collect()
}

fn healthy_on(r: &api::ListAndWatchResponse, gpu: &str) -> (usize, usize) {
    let u = units(r);
    let on: Vec<_> = u.iter().filter(|x| x.0 == gpu).collect();
    (on.iter().filter(|x| x.2).count(), on.len())
}

/// Read updates until one satisfies `ok`.
async fn until(
    s: &mut Streaming<api::ListAndWatchResponse>,
    what: &str,
    ok: impl Fn(&api::ListAndWatchResponse) -> bool,
) -> api::ListAndWatchResponse {
    let deadline = Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let r = tokio::time::timeout(left, s.message())
            .await
            .unwrap_or_else(|_| panic!("no ListAndWatch update with {what}"))
            .expect("stream error")
            .expect("stream ended");
        if ok(&r) {
            return r;
        }
    }
}

fn ids(gpu: &str, ns: impl IntoIterator<Item = u32>) -> Vec<String> {
    ns.into_iter().map(|n| format!("{gpu}_{n}")).collect()
}

fn prefer_req(avail: Vec<String>, size: i32) -> api::PreferredAllocationRequest {
    api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_i_ds: avail,
            must_include_device_i_ds: vec![],
            allocation_size: size,
        }],
    }
}

#[tokio::test]
async fn protocol_registration_list_and_watch_preferred_allocation_allocate() {
    let node = Node::new("binpack");
    let mut kubelet = TestKubelet::start(&node.dp());
    let plugin = node.plugin();
    let reg = kubelet.registration(T).await;
    assert_eq!(reg.request.version, "v1beta1");
    assert_eq!(reg.request.resource_name, "gpu-quota.io/vram");
    assert_eq!(reg.request.endpoint, "gpu-quota-vram.sock");
    assert!(reg.options.get_preferred_allocation_available);
    assert!(!reg.options.pre_start_required);
    let opts = reg.request.options.expect("options in RegisterRequest");
    assert!(opts.get_preferred_allocation_available);

    let mut c = plugin_client(&node.dp().join(&reg.request.endpoint))
        .await
        .unwrap();
    let mut watch = c.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().unwrap();
    // ⌊(16 − 1) / 1⌋ = 15 and ⌊(10.5 − 1) / 1⌋ = 9, all healthy
    assert_eq!(healthy_on(&first, GPU0), (15, 15));
    assert_eq!(healthy_on(&first, GPU1), (9, 9));
    for d in &first.devices {
        assert!(d.id.len() <= 63, "{}", d.id);
    }

    // 2.5 GiB held by a Docker container, 8 GiB by a pod: only the Docker
    // bytes are lost to Kubernetes (⌊(15 − 2.5)⌋ = 12 usable)
    node.ledger(vec![
        res("docker-1", "/run/docker/runtime-runc/moby", GPU0, 5 * G / 2),
        res("pod-1", "/run/containerd/runc/k8s.io", GPU0, 8 * G),
    ]);
    let r = until(&mut watch, "3 units of GPU 0 unhealthy", |r| {
        healthy_on(r, GPU0) == (12, 15)
    })
    .await;
    // the unhealthy ones are the top units
    assert!(units(&r)
        .iter()
        .filter(|u| u.0 == GPU0)
        .all(|(_, n, h)| *h == (*n < 12)));
    // Docker container gone: healthy again
    node.ledger(vec![res(
        "pod-1",
        "/run/containerd/runc/k8s.io",
        GPU0,
        8 * G,
    )]);
    until(&mut watch, "GPU 0 healthy again", |r| {
        healthy_on(r, GPU0) == (15, 15)
    })
    .await;

    // GPU 1 disappears (its device node goes away): all its units unhealthy
    std::fs::remove_file(node.root.join("dev/nvidia1")).unwrap();
    let r = until(&mut watch, "GPU 1 unhealthy", |r| {
        healthy_on(r, GPU1) == (0, 9)
    })
    .await;
    assert_eq!(healthy_on(&r, GPU0), (15, 15));
    std::fs::write(node.root.join("dev/nvidia1"), b"").unwrap();
    until(&mut watch, "GPU 1 back", |r| healthy_on(r, GPU1) == (9, 9)).await;

    // GetPreferredAllocation: GPU 0 has 7 units left (8 allocated), GPU 1 has 9
    let mut avail = ids(GPU0, 8..15);
    avail.extend(ids(GPU1, 0..9));
    let p = c
        .get_preferred_allocation(prefer_req(avail.clone(), 4))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        p.container_responses[0].device_i_ds,
        ids(GPU0, 8..12),
        "binpack: the fuller GPU"
    );
    let p = c
        .get_preferred_allocation(prefer_req(avail.clone(), 8))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        p.container_responses[0].device_i_ds,
        ids(GPU1, 0..8),
        "8 units fit only on GPU 1"
    );
    // the node's policy is the runtime's: switch the config to spread
    node.config("spread");
    let deadline = Instant::now() + T;
    loop {
        let p = c
            .get_preferred_allocation(prefer_req(avail.clone(), 4))
            .await
            .unwrap()
            .into_inner();
        if p.container_responses[0].device_i_ds == ids(GPU1, 0..4) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "spread never took the emptier GPU: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Allocate: the runtime's request, as container annotations
    let a = c
        .allocate(api::AllocateRequest {
            container_requests: vec![
                api::ContainerAllocateRequest {
                    devices_ids: ids(GPU0, 8..12),
                },
                api::ContainerAllocateRequest {
                    devices_ids: ids(GPU1, [0]),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.container_responses.len(), 2);
    let a0 = &a.container_responses[0];
    assert_eq!(a0.annotations["gpu-quota.io/vram"], "4GiB");
    assert_eq!(a0.annotations["gpu-quota.io/gpu"], GPU0);
    assert_eq!(a0.annotations.len(), 2);
    assert!(a0.envs.is_empty() && a0.mounts.is_empty() && a0.devices.is_empty());
    assert_eq!(
        a.container_responses[1].annotations["gpu-quota.io/vram"],
        "1GiB"
    );
    assert_eq!(
        a.container_responses[1].annotations["gpu-quota.io/gpu"],
        GPU1
    );
    // units on two GPUs are not one slice: refused, with the reason
    let mut split = ids(GPU0, [12]);
    split.extend(ids(GPU1, [1]));
    let e = c
        .allocate(api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest { devices_ids: split }],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("span 2 GPUs"), "{}", e.message());
    let e = c
        .allocate(api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest {
                devices_ids: vec!["GPU-ffff_0".into()],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    let log = plugin.log();
    assert!(log.contains("registered gpu-quota.io/vram"), "{log}");
    assert!(log.contains("allocate 4 units"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "no terminal colours in logs: {log}"
    );
    drop(plugin);
    kubelet.stop().await;
}

#[tokio::test]
async fn protocol_kubelet_restart_reregisters_and_sigterm_stops_cleanly() {
    let node = Node::new("binpack");
    // the plugin starts before the kubelet: it waits for kubelet.sock
    let mut plugin = node.plugin();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut kubelet = TestKubelet::start(&node.dp());
    let reg = kubelet.registration(T).await;
    let sock = node.dp().join(&reg.request.endpoint);
    let mut c = plugin_client(&sock).await.unwrap();
    let mut watch = c.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().devices.len(), 24);
    assert!(
        !kubelet.registers_again(Duration::from_millis(800)).await,
        "registered twice without a kubelet restart"
    );

    // kubelet restart: its socket and the plugin sockets are removed, a new
    // kubelet.sock appears
    kubelet.stop().await;
    assert!(!sock.exists());
    // the old stream ends once the plugin notices
    let ended = tokio::time::timeout(T, async {
        while let Ok(Some(_)) = watch.message().await {}
    })
    .await;
    assert!(ended.is_ok(), "old ListAndWatch stream never ended");
    let mut kubelet = TestKubelet::start(&node.dp());
    let reg2 = kubelet.registration(T).await;
    assert_eq!(reg2.request.resource_name, "gpu-quota.io/vram");
    assert!(sock.exists(), "plugin socket served again");
    let mut c = plugin_client(&sock).await.unwrap();
    let r = c
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.devices.len(), 24);

    // SIGTERM: exits 0, removes its socket, says so
    let pid = plugin.child.id() as libc::pid_t;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = plugin.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}\n{}", plugin.log());
    assert!(!sock.exists(), "socket left behind");
    let log = plugin.log();
    assert!(log.contains("waiting for the kubelet socket"), "{log}");
    assert!(log.contains("serving and registering again"), "{log}");
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert_eq!(
        log.matches("registered gpu-quota.io/vram").count(),
        2,
        "{log}"
    );
    kubelet.stop().await;
}
