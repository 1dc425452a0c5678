//! Which units this node advertises and which of them are healthy.
//!
//! Per GPU: ⌊(memory − reserve) / 1 GiB⌋ units, named `<uuid>_<n>`. The
//! ledger is the node's truth: bytes held there by containers that
//! Kubernetes did not start (Docker, podman, ctr, …) cannot be handed to a
//! pod, so that many units are reported unhealthy — the highest-numbered
//! ones, since allocation prefers low numbers. A GPU that was advertised and
//! is gone (not in the inventory, or its device node vanished) keeps its
//! units in the list, all unhealthy, so the kubelet stops counting on them.
//! A GPU that serves compute shares (`sm=`, through MPS) has every unit
//! unhealthy while it does: a pod's container would run outside MPS beside
//! them, which admission refuses (docs/compute.md).
use crate::api;
use crate::UNIT_BYTES;
use gpuquota_core::inventory::Gpu;
use gpuquota_core::ledger::{LedgerData, Reservation};
use gpuquota_core::Inventory;

/// One GPU's units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUnits {
    pub uuid: String,
    pub index: u32,
    /// Units advertised.
    pub units: u32,
    /// Units `0..usable` are healthy.
    pub usable: u32,
    /// Why not every unit is usable (for the log), empty when all are.
    pub why: String,
}

/// Everything the plugin advertises, in inventory order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub gpus: Vec<GpuUnits>,
}

/// The device id of unit `n` of a GPU. UUIDs never contain `_`.
pub fn device_id(uuid: &str, n: u32) -> String {
    format!("{uuid}_{n}")
}

/// `<uuid>_<n>` back to its parts; None for anything else. Only the
/// spelling `device_id` produces is accepted (decimal, no sign, no leading
/// zero), so each unit has exactly one id: `_1` and `_01` are not two units.
pub fn parse_device_id(id: &str) -> Option<(&str, u32)> {
    let (uuid, n) = id.rsplit_once('_')?;
    if uuid.is_empty() || n.is_empty() || n.len() > 6 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if n.len() > 1 && n.starts_with('0') {
        return None;
    }
    Some((uuid, n.parse().ok()?))
}

impl Snapshot {
    pub fn gpu(&self, uuid: &str) -> Option<&GpuUnits> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }

    /// The ListAndWatch device list.
    pub fn devices(&self) -> Vec<api::Device> {
        self.gpus
            .iter()
            .flat_map(|g| {
                (0..g.units).map(move |n| api::Device {
                    id: device_id(&g.uuid, n),
                    health: if n < g.usable {
                        api::HEALTHY
                    } else {
                        api::UNHEALTHY
                    }
                    .into(),
                    topology: None,
                })
            })
            .collect()
    }

    pub fn healthy(&self) -> u32 {
        self.gpus.iter().map(|g| g.usable).sum()
    }

    pub fn total(&self) -> u32 {
        self.gpus.iter().map(|g| g.units).sum()
    }

    /// One line for the log: "GPU 0 GPU-…: 139/139, GPU 1 GPU-…: 131/139 (…)".
    pub fn describe(&self) -> String {
        if self.gpus.is_empty() {
            return "no GPUs".into();
        }
        self.gpus
            .iter()
            .map(|g| {
                let mut s = format!(
                    "GPU {} {}: {}/{} healthy",
                    g.index, g.uuid, g.usable, g.units
                );
                if !g.why.is_empty() {
                    s.push_str(&format!(" ({})", g.why));
                }
                s
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What the node looks like right now (see `node::Node`).
pub struct NodeState<'a> {
    /// The inventory, or why it could not be read.
    pub inventory: Result<&'a Inventory, String>,
    /// The ledger, or why it could not be read.
    pub ledger: Result<&'a LedgerData, String>,
    pub reserve: u64,
    /// `gpus` from the config: which GPUs may be sliced (empty = all).
    pub sliceable: &'a [String],
    /// Whether the GPU's device node exists.
    pub present: &'a dyn Fn(&Gpu) -> bool,
    /// Whether a reservation belongs to a container Kubernetes started.
    pub kubernetes: &'a dyn Fn(&Reservation) -> bool,
    /// Whether a reservation's container is gone (its bytes are free).
    pub stale: &'a dyn Fn(&Reservation) -> bool,
}

use gpuquota_core::placement::is_sliceable as sliceable;

/// What a pod's container asks once Allocate gave it units of `g`: their
/// bytes on that GPU through the request annotations, without a compute
/// share. Whether `g`'s compute takes it is the placer's decision, as for
/// every other path ([`gpuquota_core::placement::Placer::compute_refusal`]).
fn pod_request(g: &Gpu) -> gpuquota_core::request::Request {
    use gpuquota_core::request::{GpuRef, GpuSelector, Origin, Request};
    use gpuquota_core::units::Size;
    Request {
        vram: Size::Bytes(UNIT_BYTES),
        gpus: GpuSelector::List(vec![GpuRef::Uuid(g.uuid.clone())]),
        origin: Origin::Annotation(gpuquota_core::formats::keys::ANN_NS_VRAM.into()),
        named_gpus: true,
        sm: None,
        sm_procs: 0,
        user: None,
        // extended resources have requests equal to limits: no burst
        burst: None,
    }
}

/// The next snapshot, given the previous one (GPUs advertised before and
/// gone now stay listed, unhealthy).
pub fn compute(prev: &Snapshot, node: &NodeState<'_>) -> Snapshot {
    let gone = |g: &GpuUnits, why: &str| GpuUnits {
        usable: 0,
        why: why.to_string(),
        ..g.clone()
    };
    let inv = match &node.inventory {
        Ok(i) => i,
        Err(e) => {
            return Snapshot {
                gpus: prev
                    .gpus
                    .iter()
                    .map(|g| gone(g, &format!("inventory unreadable: {e}")))
                    .collect(),
            }
        }
    };
    // One placer and one usage for the whole refresh: both depend on the
    // node, not on the GPU, and the usage walks every reservation.
    let costs = gpuquota_core::placement::ContextCosts::default();
    let placer = gpuquota_core::placement::Placer {
        inventory: inv,
        policy: Default::default(),
        reserve: node.reserve,
        sliceable: node.sliceable,
        contexts: &costs,
    };
    // a dead container's share keeps nobody away
    let ledger = node.ledger.as_ref().map(|l| {
        (
            l,
            gpuquota_core::ledger::usage_unreclaimed(&l.reservations, node.stale),
        )
    });
    let mut gpus: Vec<GpuUnits> = Vec::new();
    for g in inv.gpus.iter().filter(|g| sliceable(node.sliceable, g)) {
        let capacity = gpuquota_core::placement::usable(g, node.reserve);
        let units = u32::try_from(capacity / UNIT_BYTES).unwrap_or(u32::MAX);
        let mut u = GpuUnits {
            uuid: g.uuid.clone(),
            index: g.index,
            units,
            usable: units,
            why: String::new(),
        };
        if !(node.present)(g) {
            u = gone(&u, "device node missing");
        } else {
            match &ledger {
                Err(e) => u = gone(&u, &format!("ledger unreadable: {e}")),
                Ok((l, usage)) => {
                    let refused = placer.compute_refusal(&pod_request(g), g, usage);
                    let (outside, holders) = l
                        .reservations
                        .iter()
                        // a container bound to a DRA claim counts nothing:
                        // the claim's own entry holds its bytes, once
                        .filter(|r| r.counts() && !(node.kubernetes)(r) && !(node.stale)(r))
                        .flat_map(|r| r.slices.iter().filter(|s| s.uuid == g.uuid))
                        .fold((0u64, 0usize), |(b, n), s| (b + s.vram_bytes, n + 1));
                    if let Some(e) = refused {
                        u = gone(&u, &e.to_string());
                    } else if outside > 0 {
                        let left = capacity.saturating_sub(outside) / UNIT_BYTES;
                        u.usable = units.min(u32::try_from(left).unwrap_or(u32::MAX));
                        u.why = format!(
                            "{} held by {holders} container(s) outside Kubernetes",
                            gpuquota_core::units::human(outside)
                        );
                    }
                }
            }
        }
        gpus.push(u);
    }
    for p in &prev.gpus {
        if !gpus.iter().any(|g| g.uuid == p.uuid) {
            gpus.push(gone(p, "GPU no longer in the inventory"));
        }
    }
    Snapshot { gpus }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuquota_core::ledger::ResState;
    use gpuquota_core::placement::Slice;
    const G: u64 = 1 << 30;

    fn inv(mems: &[u64]) -> Inventory {
        Inventory {
            gpus: mems
                .iter()
                .enumerate()
                .map(|(i, m)| Gpu {
                    index: i as u32,
                    uuid: format!("GPU-{i:04}"),
                    name: "t".into(),
                    total_bytes: *m,
                    minor: i as u32,
                    simulated: true,
                })
                .collect(),
            driver_version: "simulated".into(),
        }
    }

    fn res(id: &str, root: &str, gpu: u32, bytes: u64) -> Reservation {
        let slice = Slice::memory(format!("GPU-{gpu:04}"), gpu, bytes);
        Reservation {
            state: ResState::Running,
            ..Reservation::new(id, Some(root), format!("/b/{id}"), vec![slice], "")
        }
    }

    fn state<'a>(
        inv: Result<&'a Inventory, String>,
        ledger: Result<&'a LedgerData, String>,
        reserve: u64,
        present: &'a dyn Fn(&Gpu) -> bool,
    ) -> NodeState<'a> {
        NodeState {
            inventory: inv,
            ledger,
            reserve,
            sliceable: &[],
            present,
            kubernetes: &|r: &Reservation| r.runtime_root.as_deref() == Some("/k8s"),
            stale: &|r: &Reservation| r.container_id.starts_with("dead"),
        }
    }

    #[test]
    fn units_are_floor_of_memory_minus_reserve() {
        let i = inv(&[16 * G, 16 * G + G / 2]);
        let l = LedgerData::default();
        let s = compute(
            &Snapshot::default(),
            &state(Ok(&i), Ok(&l), G + 1, &|_| true),
        );
        // (16 GiB − 1 GiB − 1 B) / 1 GiB = 14; (16.5 GiB − 1 GiB − 1 B) = 15
        assert_eq!(
            s.gpus.iter().map(|g| g.units).collect::<Vec<_>>(),
            vec![14, 15]
        );
        assert_eq!(s.healthy(), 29);
        let d = s.devices();
        assert_eq!(d.len(), 29);
        assert_eq!(d[0].id, "GPU-0000_0");
        assert_eq!(d[14].id, "GPU-0001_0");
        assert!(d.iter().all(|d| d.health == api::HEALTHY));
    }

    #[test]
    fn outside_holders_make_top_units_unhealthy_kubernetes_and_stale_do_not() {
        let i = inv(&[16 * G, 16 * G]);
        let l = LedgerData {
            version: 1,
            reservations: vec![
                res("docker1", "/run/docker/runtime-runc/moby", 0, 3 * G + 1),
                res("pod1", "/k8s", 0, 8 * G),
                res("dead1", "/run/runc", 1, 4 * G),
            ],
        };
        let s = compute(&Snapshot::default(), &state(Ok(&i), Ok(&l), 0, &|_| true));
        // 16 GiB − (3 GiB + 1 B) leaves 12 whole GiB for Kubernetes
        assert_eq!(s.gpus[0].usable, 12, "{:?}", s.gpus[0]);
        assert!(s.gpus[0].why.contains("1 container(s) outside Kubernetes"));
        assert_eq!(s.gpus[1].usable, 16, "a dead container's bytes are free");
        let d = s.devices();
        assert_eq!(d[11].health, api::HEALTHY);
        assert!(d[12..16].iter().all(|d| d.health == api::UNHEALTHY));
        assert_eq!(d[12].id, "GPU-0000_12");
        // the outside container is gone: healthy again
        let l2 = LedgerData {
            version: 1,
            reservations: vec![res("pod1", "/k8s", 0, 8 * G)],
        };
        let s2 = compute(&s, &state(Ok(&i), Ok(&l2), 0, &|_| true));
        assert_eq!(s2.healthy(), 32);
    }

    /// A GPU with compute shares takes no pod (its container would run
    /// outside MPS beside them): every unit unhealthy until the shares end;
    /// the other GPU and a dead share's GPU are untouched.
    #[test]
    fn a_gpu_serving_compute_shares_has_no_healthy_unit() {
        let i = inv(&[16 * G, 16 * G]);
        let share = |id: &str, gpu: u32| {
            let mut r = res(id, "/run/docker/runtime-runc/moby", gpu, 2 * G);
            r.slices[0].sm_percent = 25;
            r.slices[0].sm_procs = 1;
            r
        };
        let l = LedgerData {
            version: 3,
            reservations: vec![share("docker1", 0), share("dead1", 1)],
        };
        let s = compute(&Snapshot::default(), &state(Ok(&i), Ok(&l), 0, &|_| true));
        assert_eq!(s.gpus[0].usable, 0, "{:?}", s.gpus[0]);
        // the placer's own refusal, as a container asking it would get
        assert!(
            s.gpus[0]
                .why
                .contains("25% of its compute is reserved by 1 container(s) with sm="),
            "{:?}",
            s.gpus[0]
        );
        assert_eq!(s.gpus[1].usable, 16, "a dead container's share is gone");
        let l2 = LedgerData {
            version: 1,
            reservations: vec![],
        };
        assert_eq!(
            compute(&s, &state(Ok(&i), Ok(&l2), 0, &|_| true)).healthy(),
            32
        );
    }

    /// A DRA claim's bytes are held by the claim's own
    /// entry (no runc root: outside Kubernetes' device plugin); a container
    /// bound to the claim counts nothing (`Reservation::counts`), whatever
    /// runc root it runs under (docker/podman can bind a claim through its
    /// CDI device too). Counting both took the claim's bytes twice.
    #[test]
    fn a_claims_bytes_are_taken_once_whatever_root_its_container_runs_under() {
        use gpuquota_core::ledger::ClaimEntry;
        let i = inv(&[16 * G, 16 * G]);
        let claim = |uid: &str, gpu: u32| Reservation {
            container_id: format!("claim:{uid}"),
            runtime_root: None,
            claim: Some(ClaimEntry {
                uid: uid.into(),
                namespace: "ns".into(),
                name: "c".into(),
                token: "t".repeat(64),
            }),
            ..res("x", "/", gpu, 4 * G)
        };
        let bound = |id: &str, root: &str, gpu: u32, uid: &str| Reservation {
            bound_claim: Some(uid.into()),
            ..res(id, root, gpu, 4 * G)
        };
        let l = LedgerData {
            version: 1,
            reservations: vec![
                claim("u0", 0),
                bound("docker1", "/run/docker/runtime-runc/moby", 0, "u0"),
                claim("u1", 1),
                bound("pod1", "/k8s", 1, "u1"),
            ],
        };
        let s = compute(&Snapshot::default(), &state(Ok(&i), Ok(&l), 0, &|_| true));
        // control: bound inside Kubernetes, the claim's 4 GiB once
        assert_eq!(s.gpus[1].usable, 12, "{:?}", s.gpus[1]);
        // bound outside Kubernetes: still 4 GiB once, not 8
        assert_eq!(s.gpus[0].usable, 12, "{:?}", s.gpus[0]);
        assert!(
            s.gpus[0].why.contains("4.00 GiB held by 1 container(s)"),
            "{:?}",
            s.gpus[0]
        );
    }

    #[test]
    fn vanished_gpu_stays_listed_unhealthy() {
        let i = inv(&[4 * G, 4 * G]);
        let l = LedgerData::default();
        let s = compute(&Snapshot::default(), &state(Ok(&i), Ok(&l), 0, &|_| true));
        assert_eq!(s.healthy(), 8);
        // device node of GPU 1 missing
        let s1 = compute(&s, &state(Ok(&i), Ok(&l), 0, &|g: &Gpu| g.index != 1));
        assert_eq!((s1.gpus[1].units, s1.gpus[1].usable), (4, 0));
        assert!(
            s1.describe().contains("device node missing"),
            "{}",
            s1.describe()
        );
        // GPU 1 dropped out of the inventory entirely
        let only0 = inv(&[4 * G]);
        let s2 = compute(&s, &state(Ok(&only0), Ok(&l), 0, &|_| true));
        assert_eq!(s2.gpus.len(), 2);
        assert_eq!(
            (s2.gpus[1].uuid.as_str(), s2.gpus[1].usable),
            ("GPU-0001", 0)
        );
        assert_eq!(
            s2.devices()
                .iter()
                .filter(|d| d.health == api::UNHEALTHY)
                .count(),
            4
        );
        // unreadable inventory or ledger: nothing can be promised
        let s3 = compute(&s, &state(Err("nvml".into()), Ok(&l), 0, &|_| true));
        assert_eq!((s3.total(), s3.healthy()), (8, 0));
        let s4 = compute(&s, &state(Ok(&i), Err("corrupt".into()), 0, &|_| true));
        assert_eq!((s4.total(), s4.healthy()), (8, 0));
    }

    #[test]
    fn excluded_gpus_are_not_advertised() {
        let i = inv(&[4 * G, 4 * G]);
        let l = LedgerData::default();
        let only1 = vec!["GPU-0001".to_string()];
        let mut st = state(Ok(&i), Ok(&l), 0, &|_| true);
        st.sliceable = &only1;
        let s = compute(&Snapshot::default(), &st);
        assert_eq!(s.gpus.len(), 1);
        assert_eq!(s.gpus[0].index, 1);
    }

    #[test]
    fn device_ids_round_trip_and_junk_is_refused() {
        let id = device_id("GPU-8f6c2a1e-0000-1111-2222-333344445555", 138);
        assert!(id.len() <= 63, "kubelet's limit: {id}");
        assert_eq!(
            parse_device_id(&id),
            Some(("GPU-8f6c2a1e-0000-1111-2222-333344445555", 138))
        );
        for bad in [
            "",
            "GPU-1",
            "GPU-1_",
            "_3",
            "GPU-1_-3",
            "GPU-1_3x",
            "GPU-1_99999999",
            // only the spelling device_id produces: no leading zeros or signs
            "GPU-1_01",
            "GPU-1_00",
            "GPU-1_+1",
            "GPU-1_ 1",
            "GPU-1_１",
        ] {
            assert_eq!(parse_device_id(bad), None, "{bad}");
        }
        for n in [0, 1, 9, 10, 100, 999_999] {
            let id = device_id("GPU-1", n);
            assert_eq!(parse_device_id(&id), Some(("GPU-1", n)), "{id}");
        }
    }
}
