//! One consistent look at the host for `metrics` and `top`: GPUs (capacity,
//! reserve, slices handed out, physical use where NVML has it), the
//! containers holding slices (with their usage files) and the persistent
//! event counters. Taking a snapshot never fails: what cannot be read is
//! recorded as an error beside what could.
use gpuquota_core::formats::grant::Burst;
use gpuquota_core::{
    config::Config, counters, counters::Counters, events, fsutil, ledger::ResState, state, usage,
    Inventory, Ledger,
};
use std::collections::BTreeMap;

/// Physical memory use per GPU, by lower-case UUID (NVML on a real host).
pub trait Physical {
    fn used(&self) -> BTreeMap<String, u64>;
}

/// NVML, initialised once and kept for the life of the process.
pub struct Nvml(Option<nvml_wrapper::Nvml>);

impl Nvml {
    pub fn init() -> Nvml {
        Nvml(nvml_wrapper::Nvml::init().ok())
    }
}

impl Physical for Nvml {
    fn used(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        let Some(n) = &self.0 else {
            return m;
        };
        let count = n.device_count().unwrap_or(0);
        for i in 0..count {
            let Ok(d) = n.device_by_index(i) else {
                continue;
            };
            if let (Ok(u), Ok(mem)) = (d.uuid(), d.memory_info()) {
                m.insert(u.to_lowercase(), mem.used);
            }
        }
        m
    }
}

#[derive(Debug, Clone)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub simulated: bool,
    pub total: u64,
    pub reserve: u64,
    pub capacity: u64,
    pub reserved: u64,
    pub holders: usize,
    /// Compute shares reserved on the GPU, percent of its SMs.
    pub sm: u32,
    /// Physically used (NVML); None where unknown.
    pub used: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct SliceView {
    pub index: u32,
    pub uuid: String,
    pub bytes: u64,
    /// Its compute share on this GPU, percent of the SMs (0: none).
    pub sm: u32,
    /// In use by the container on this GPU (its usage file); None before
    /// any CUDA process ran.
    pub used: Option<u64>,
    /// A burstable slice's limit and priority (`bytes` is then the
    /// guarantee); None: a guaranteed slice.
    pub burst: Option<Burst>,
}

impl SliceView {
    /// What a burster holds above its guarantee on this GPU (lent memory);
    /// None for a guaranteed slice or before any CUDA process ran.
    pub fn above(&self) -> Option<u64> {
        above_guarantee(self.bytes, self.burst, self.used)
    }
}

/// `max(used − guarantee, 0)` for a burstable slice; None for a guaranteed
/// one (it holds nothing lent) or where the use is unknown. Shown only:
/// the figure comes from the container's own usage file.
pub fn above_guarantee(guarantee: u64, burst: Option<Burst>, used: Option<u64>) -> Option<u64> {
    burst?;
    Some(used?.saturating_sub(guarantee))
}

/// Memory lent on GPU `uuid`: the sum of what its bursters hold above
/// their guarantees. None where no burster holds a slice of it.
pub fn lent_on(cs: &[ContainerView], uuid: &str) -> Option<u64> {
    let mut bursters = cs
        .iter()
        .flat_map(|c| &c.slices)
        .filter(|s| s.uuid == uuid && s.burst.is_some())
        .peekable();
    bursters.peek()?;
    Some(bursters.filter_map(|s| s.above()).sum())
}

#[derive(Debug, Clone)]
pub struct ContainerView {
    pub id: String,
    /// running, reserved or stale
    pub state: &'static str,
    pub engine: &'static str,
    pub request: String,
    pub age_secs: u64,
    pub slices: Vec<SliceView>,
    /// Allocations the interceptor refused in this container.
    pub refusals: Option<u64>,
    /// Allocations within a guarantee that waited for bursters to give
    /// memory back (None: no usage file yet), and the last one's wait.
    pub reclaim_waits: Option<u64>,
    pub reclaim_last_ms: u64,
    /// Who it is to its engine (pod, namespace, name), where known.
    pub workload: Option<gpuquota_core::workload::Workload>,
}

impl ContainerView {
    /// The name an operator knows it by: `namespace/pod/container` where
    /// the engine said, else the container id.
    pub fn display_name(&self) -> String {
        match &self.workload {
            Some(w) => w.label(),
            None => self.id.clone(),
        }
    }
}

/// A prepared DRA claim: its bytes on its GPU, held for the pod
/// from prepare to unprepare, and the container bound to it, if any. Not a
/// container: the bound container's row carries the same slice, so a claim
/// listed as a container would count its bytes twice.
#[derive(Debug, Clone)]
pub struct ClaimView {
    /// `namespace/name`
    pub name: String,
    pub index: u32,
    pub bytes: u64,
    /// The live container bound to it.
    pub bound: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub gpus: Vec<GpuView>,
    /// Containers only (a claim's entry is in `claims`).
    pub containers: Vec<ContainerView>,
    pub claims: Vec<ClaimView>,
    pub counters: Counters,
    /// Why part of the picture is missing.
    pub ledger_error: Option<String>,
    pub inventory_error: Option<String>,
    pub counters_error: Option<String>,
    /// What `gpu-quota mps-supervise` last wrote, and whether that is
    /// recent (a supervisor that stopped leaves an old file).
    pub mps: Option<gpuquota_core::mps::supervise::Status>,
    pub mps_fresh: bool,
}

pub fn take(cfg: &Config, physical: &dyn Physical) -> Snapshot {
    let ledger = Ledger::new(cfg);
    let mut s = Snapshot::default();
    let data = match ledger.read() {
        Ok(d) => d,
        Err(e) => {
            s.ledger_error = Some(e.to_string());
            Default::default()
        }
    };
    match counters::read(&cfg.ledger_dir) {
        Ok(c) => s.counters = c,
        Err(e) => s.counters_error = Some(e.to_string()),
    }
    let reserve = cfg.reserve_bytes().unwrap_or(0);
    let usage = data.usage();
    let phys = physical.used();
    match Inventory::load(cfg) {
        Ok(inv) => {
            s.gpus = inv
                .gpus
                .iter()
                .map(|g| {
                    let u = usage.get(&g.uuid).copied().unwrap_or_default();
                    let (reserved, holders, sm) = (u.bytes, u.holders, u.sm);
                    GpuView {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        name: g.name.clone(),
                        simulated: g.simulated,
                        total: g.total_bytes,
                        reserve,
                        capacity: gpuquota_core::placement::usable(g, reserve),
                        reserved,
                        holders,
                        sm,
                        used: phys.get(&g.uuid.to_lowercase()).copied(),
                    }
                })
                .collect()
        }
        Err(e) => s.inventory_error = Some(e.to_string()),
    }
    let now = fsutil::now_unix();
    s.mps = gpuquota_core::mps::supervise::read_status(cfg);
    s.mps_fresh = s.mps.as_ref().is_some_and(|m| {
        // three rounds, and never under 10 s (a round may wait for a start)
        now.saturating_sub(m.updated_unix) <= (3 * m.interval_secs).max(10)
    });
    s.claims = data
        .reservations
        .iter()
        .filter_map(|r| {
            let c = r.claim.as_ref()?;
            let sl = r.slices.first()?;
            Some(ClaimView {
                name: format!("{}/{}", c.namespace, c.name),
                index: sl.index,
                bytes: sl.vram_bytes,
                bound: data
                    .reservations
                    .iter()
                    .find(|b| {
                        b.bound_claim.as_deref() == Some(c.uid.as_str()) && !ledger.is_stale(b, now)
                    })
                    .map(|b| b.container_id.clone()),
            })
        })
        .collect();
    s.containers = data
        .reservations
        .iter()
        .filter(|r| r.claim.is_none())
        .map(|r| {
            let u = usage::read(&state::usage_path(&state::existing_dir(cfg, r)));
            ContainerView {
                id: r.container_id.clone(),
                state: if ledger.is_stale(r, now) {
                    "stale"
                } else if r.state == ResState::Running {
                    "running"
                } else {
                    "reserved"
                },
                engine: events::engine_of(r.runtime_root.as_deref()),
                request: r.request.clone(),
                age_secs: now.saturating_sub(r.created_unix),
                slices: r
                    .slices
                    .iter()
                    .enumerate()
                    .map(|(i, sl)| SliceView {
                        index: sl.index,
                        uuid: sl.uuid.clone(),
                        bytes: sl.vram_bytes,
                        sm: sl.sm_percent,
                        used: u.as_ref().map(|u| u.used.get(i).copied().unwrap_or(0)),
                        burst: sl.burst,
                    })
                    .collect(),
                refusals: u.as_ref().map(|u| u.refusals),
                reclaim_waits: u.as_ref().map(|u| u.reclaim_waits),
                reclaim_last_ms: u.as_ref().map_or(0, |u| u.reclaim_last_ms),
                workload: r.workload.clone(),
            }
        })
        .collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuquota_core::config::{InventorySource, StaticGpu};
    use gpuquota_core::ledger::{ClaimEntry, LedgerData, Reservation};
    use gpuquota_core::placement::Slice;

    struct NoPhysical;
    impl Physical for NoPhysical {
        fn used(&self) -> BTreeMap<String, u64> {
            BTreeMap::new()
        }
    }

    fn entry(id: &str, bytes: u64) -> Reservation {
        let slice = Slice::memory("GPU-0".into(), 0, bytes);
        Reservation {
            pid: Some(std::process::id()),
            pid_start: fsutil::process_start_time(std::process::id()),
            state: ResState::Running,
            ..Reservation::new(
                id,
                Some("/run/runc"),
                format!("/b/{id}"),
                vec![slice],
                "vram",
            )
            .admitted_now()
        }
    }

    // A claim and the container bound to it are one slice: the exporter's
    // container rows must add up to what the GPU has reserved (the claim's
    // entry used to be a container row too, doubling the sum).
    #[test]
    fn a_claim_and_its_bound_container_are_counted_once() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            ledger_dir: d.path().join("ledger"),
            state_dir: d.path().join("state"),
            ..Config::default()
        };
        cfg.inventory.source = InventorySource::Static;
        cfg.inventory.gpu = vec![StaticGpu {
            index: 0,
            uuid: "GPU-0".into(),
            name: "T".into(),
            memory: "16g".into(),
            minor: None,
        }];
        let g = 1u64 << 30;
        let mut claim = entry("claim:u-1", 8 * g);
        claim.runtime_root = None;
        claim.claim = Some(ClaimEntry {
            uid: "u-1".into(),
            namespace: "ml".into(),
            name: "train-vram".into(),
            token: "0".repeat(64),
        });
        let mut bound = entry("pod-c", 8 * g);
        bound.bound_claim = Some("u-1".into());
        let other = entry("docker-c", 2 * g);
        let data = LedgerData {
            reservations: vec![claim, bound, other],
            ..Default::default()
        };
        std::fs::create_dir_all(&cfg.ledger_dir).unwrap();
        std::fs::write(
            cfg.ledger_dir.join("ledger.json"),
            serde_json::to_vec(&data).unwrap(),
        )
        .unwrap();
        let s = take(&cfg, &NoPhysical);
        assert_eq!(s.ledger_error, None);
        let rows: u64 = s
            .containers
            .iter()
            .flat_map(|c| &c.slices)
            .map(|sl| sl.bytes)
            .sum();
        assert_eq!(
            s.gpus[0].reserved,
            10 * g,
            "the GPU: the claim once + docker-c"
        );
        assert_eq!(
            rows, s.gpus[0].reserved,
            "container rows add up to the GPU's reserved bytes"
        );
        let ids: Vec<&str> = s.containers.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["pod-c", "docker-c"]);
        assert_eq!(s.claims.len(), 1);
        let c = &s.claims[0];
        assert_eq!(
            (c.name.as_str(), c.bytes, c.index),
            ("ml/train-vram", 8 * g, 0)
        );
        assert_eq!(c.bound.as_deref(), Some("pod-c"));
    }
}
