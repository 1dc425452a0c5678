//! One consistent look at the host for `metrics` and `top`: GPUs (capacity,
//! reserve, slices handed out, physical use where NVML has it), the
//! containers holding slices (with their usage files) and the persistent
//! event counters. Taking a snapshot never fails: what cannot be read is
//! recorded as an error beside what could.
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
    /// Physically used (NVML); None where unknown.
    pub used: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct SliceView {
    pub index: u32,
    pub uuid: String,
    pub bytes: u64,
    /// In use by the container on this GPU (its usage file); None before
    /// any CUDA process ran.
    pub used: Option<u64>,
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
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub gpus: Vec<GpuView>,
    pub containers: Vec<ContainerView>,
    pub counters: Counters,
    /// Why part of the picture is missing.
    pub ledger_error: Option<String>,
    pub inventory_error: Option<String>,
    pub counters_error: Option<String>,
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
                    let (reserved, holders) = usage.get(&g.uuid).copied().unwrap_or((0, 0));
                    GpuView {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        name: g.name.clone(),
                        simulated: g.simulated,
                        total: g.total_bytes,
                        reserve,
                        capacity: g.total_bytes.saturating_sub(reserve),
                        reserved,
                        holders,
                        used: phys.get(&g.uuid.to_lowercase()).copied(),
                    }
                })
                .collect()
        }
        Err(e) => s.inventory_error = Some(e.to_string()),
    }
    let now = fsutil::now_unix();
    s.containers = data
        .reservations
        .iter()
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
                        bytes: sl.bytes,
                        used: u.as_ref().map(|u| u.used.get(i).copied().unwrap_or(0)),
                    })
                    .collect(),
                refusals: u.as_ref().map(|u| u.refusals),
            }
        })
        .collect();
    s
}
