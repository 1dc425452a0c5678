//! Prometheus text exposition (format 0.0.4) of a `Snapshot`.
//!
//! Names follow the Prometheus conventions (`_bytes`, `_seconds`,
//! `_total`); per-GPU series carry `gpu` (the index, as DCGM exporter's
//! `gpu` label) and `uuid`, and `gpu_quota_gpu_info` carries DCGM's own
//! `UUID` and `modelName` labels so that one dashboard can join
//! `DCGM_FI_DEV_FB_USED` with these series. Every family is written with
//! its HELP and TYPE even when it has no sample yet.
use crate::snapshot::{ContainerView, Snapshot};
use std::fmt::Write as _;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Escape a label value.
pub fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
        let l: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect();
        if l.is_empty() {
            let _ = writeln!(self.0, "{name} {v}");
        } else {
            let _ = writeln!(self.0, "{name}{{{}}} {v}", l.join(","));
        }
    }
}

/// A container's identifying labels: its id, and under Kubernetes its
/// pod's (`namespace`, `pod`, `pod_uid`, `container_name`; empty where the
/// engine named none, so that every series of a family has the same label
/// set), so per-pod memory is one `sum by (namespace, pod)` away.
fn who(c: &ContainerView) -> Vec<(&'static str, &str)> {
    let w = c.workload.as_ref();
    let part = |f: fn(&gpuquota_core::workload::Workload) -> &Option<String>| {
        w.and_then(|w| f(w).as_deref()).unwrap_or("")
    };
    vec![
        ("container", c.id.as_str()),
        ("namespace", part(|w| &w.namespace)),
        ("pod", part(|w| &w.pod)),
        ("pod_uid", part(|w| &w.pod_uid)),
        ("container_name", part(|w| &w.container)),
    ]
}

pub fn render(s: &Snapshot) -> String {
    let mut o = Out(String::new());
    o.family(
        "gpu_quota_ledger_ok",
        "gauge",
        "1 when the ledger and the GPU inventory could be read for this scrape, else 0.",
    );
    let ok = s.ledger_error.is_none() && s.inventory_error.is_none();
    o.sample("gpu_quota_ledger_ok", &[], ok as u8);
    // Without the GPU inventory (no NVML, ...) the per-GPU series are
    // absent; what the ledger knows is still exported, with the error.
    o.family(
        "gpu_quota_inventory_up",
        "gauge",
        "1 if the GPU inventory (NVML or the static one) could be read, else 0.",
    );
    o.sample(
        "gpu_quota_inventory_up",
        &[],
        s.inventory_error.is_none() as u8,
    );
    if let Some(e) = &s.inventory_error {
        o.family(
            "gpu_quota_inventory_error",
            "gauge",
            "Why the GPU inventory could not be read (1, with the error as a label).",
        );
        o.sample("gpu_quota_inventory_error", &[("error", e)], 1);
    }

    o.family(
        "gpu_quota_gpu_info",
        "gauge",
        "One series per GPU carrying DCGM exporter's label names (gpu, UUID, modelName).",
    );
    for g in &s.gpus {
        let i = g.index.to_string();
        let sim = g.simulated.to_string();
        o.sample(
            "gpu_quota_gpu_info",
            &[
                ("gpu", &i),
                ("UUID", &g.uuid),
                ("modelName", &g.name),
                ("simulated", &sim),
            ],
            1,
        );
    }
    type PerGpu = fn(&crate::snapshot::GpuView) -> Option<u64>;
    let per_gpu: [(&str, &str, PerGpu); 7] = [
        ("gpu_quota_gpu_total_bytes", "Memory of the GPU.", |g| {
            Some(g.total)
        }),
        (
            "gpu_quota_gpu_reserve_bytes",
            "Memory kept free on the GPU (config `reserve`), never handed out.",
            |g| Some(g.reserve),
        ),
        (
            "gpu_quota_gpu_capacity_bytes",
            "Memory of the GPU that may be handed out (total minus reserve).",
            |g| Some(g.capacity),
        ),
        (
            "gpu_quota_gpu_reserved_bytes",
            "Sum of the slices handed out on the GPU.",
            |g| Some(g.reserved),
        ),
        (
            "gpu_quota_gpu_used_bytes",
            "Memory physically in use on the GPU, all processes (NVML; absent without NVML).",
            |g| g.used,
        ),
        (
            "gpu_quota_gpu_containers",
            "Containers holding a slice of the GPU.",
            |g| Some(g.holders as u64),
        ),
        (
            "gpu_quota_gpu_sm_reserved_percent",
            "Compute shares (sm=) reserved on the GPU, in percent of its SMs.",
            |g| Some(g.sm as u64),
        ),
    ];
    for (name, help, value) in per_gpu {
        o.family(name, "gauge", help);
        for g in &s.gpus {
            if let Some(v) = value(g) {
                let i = g.index.to_string();
                let sim = g.simulated.to_string();
                o.sample(
                    name,
                    &[("gpu", &i), ("uuid", &g.uuid), ("simulated", &sim)],
                    v,
                );
            }
        }
    }

    o.family(
        "gpu_quota_container_info",
        "gauge",
        "One series per container holding a slice: its state (running, reserved, stale), engine and request.",
    );
    for c in &s.containers {
        let mut l = who(c);
        l.extend([
            ("state", c.state),
            ("engine", c.engine),
            ("request", c.request.as_str()),
        ]);
        o.sample("gpu_quota_container_info", &l, 1);
    }
    o.family(
        "gpu_quota_container_slice_bytes",
        "gauge",
        "Slice of a container on a GPU.",
    );
    for c in &s.containers {
        for sl in &c.slices {
            let i = sl.index.to_string();
            let mut l = who(c);
            l.push(("gpu", &i));
            o.sample("gpu_quota_container_slice_bytes", &l, sl.bytes);
        }
    }
    o.family(
        "gpu_quota_container_sm_percent",
        "gauge",
        "Compute share (sm=) of a container on a GPU, in percent of its SMs; only containers with one.",
    );
    for c in &s.containers {
        for sl in c.slices.iter().filter(|sl| sl.sm > 0) {
            let i = sl.index.to_string();
            let mut l = who(c);
            l.push(("gpu", &i));
            o.sample("gpu_quota_container_sm_percent", &l, sl.sm as u64);
        }
    }
    o.family(
        "gpu_quota_claim_bytes",
        "gauge",
        "A prepared DRA claim's bytes on its GPU, held from prepare to unprepare (the container bound to it shows the same slice in gpu_quota_container_slice_bytes).",
    );
    for c in &s.claims {
        let i = c.index.to_string();
        let bound = if c.bound.is_some() { "true" } else { "false" };
        o.sample(
            "gpu_quota_claim_bytes",
            &[("claim", &c.name), ("gpu", &i), ("bound", bound)],
            c.bytes,
        );
    }
    o.family(
        "gpu_quota_container_used_bytes",
        "gauge",
        "Device memory in use by the container's processes on a GPU (from the interceptor; absent before the container used CUDA).",
    );
    for c in &s.containers {
        for sl in &c.slices {
            if let Some(u) = sl.used {
                let i = sl.index.to_string();
                let mut l = who(c);
                l.push(("gpu", &i));
                o.sample("gpu_quota_container_used_bytes", &l, u);
            }
        }
    }
    o.family(
        "gpu_quota_container_age_seconds",
        "gauge",
        "Seconds since the container's slice was admitted.",
    );
    for c in &s.containers {
        o.sample(
            "gpu_quota_container_age_seconds",
            &[("container", &c.id)],
            c.age_secs,
        );
    }
    o.family(
        "gpu_quota_container_refusals_total",
        "counter",
        "Allocations refused by the interceptor inside the container.",
    );
    for c in &s.containers {
        if let Some(n) = c.refusals {
            o.sample(
                "gpu_quota_container_refusals_total",
                &[("container", &c.id)],
                n,
            );
        }
    }
    lending(&mut o, s);

    let k = &s.counters;
    o.family(
        "gpu_quota_admissions_total",
        "counter",
        "Containers admitted with a slice (kept across restarts in <ledger_dir>/counters.json).",
    );
    o.sample("gpu_quota_admissions_total", &[], k.admissions);
    o.family(
        "gpu_quota_admission_refusals_total",
        "counter",
        "Requests refused before the container started, by reason.",
    );
    for (reason, n) in &k.refusals {
        o.sample(
            "gpu_quota_admission_refusals_total",
            &[("reason", reason)],
            n,
        );
    }
    o.family(
        "gpu_quota_releases_total",
        "counter",
        "Slices given back (container deleted, create failed, or `gpu-quota release`).",
    );
    o.sample("gpu_quota_releases_total", &[], k.releases);
    o.family(
        "gpu_quota_reclaims_total",
        "counter",
        "Slices of containers that were gone, taken back at admission or by `gpu-quota gc`.",
    );
    o.sample("gpu_quota_reclaims_total", &[], k.reclaims);
    o.family(
        "gpu_quota_resizes_total",
        "counter",
        "Slices changed while their container ran (`gpu-quota resize`).",
    );
    o.sample("gpu_quota_resizes_total", &[], k.resizes);
    mps_daemons(&mut o, s);
    o.0
}

/// Burstable slices: each burster's limit and what it holds above its
/// guarantee (lent memory), what each GPU lends, the bursters ended to give
/// memory back, and the allocations within a guarantee that waited for it.
fn lending(o: &mut Out, s: &Snapshot) {
    type PerSlice = fn(&crate::snapshot::SliceView) -> Option<u64>;
    let per_slice: [(&str, &str, PerSlice); 2] = [
        (
            "gpu_quota_container_limit_bytes",
            "Burst limit of a container on a GPU (vram-limit=; its slice is then the guarantee); only burstable slices.",
            |sl| sl.burst.map(|b| b.limit_bytes),
        ),
        (
            "gpu_quota_container_above_guarantee_bytes",
            "Memory a burstable container holds above its guarantee on a GPU, lent from memory nobody used (from the interceptor; absent before the container used CUDA).",
            |sl| sl.above(),
        ),
    ];
    for (name, help, value) in per_slice {
        o.family(name, "gauge", help);
        for c in &s.containers {
            for sl in &c.slices {
                if let Some(v) = value(sl) {
                    let i = sl.index.to_string();
                    let mut l = who(c);
                    l.push(("gpu", &i));
                    o.sample(name, &l, v);
                }
            }
        }
    }
    o.family(
        "gpu_quota_gpu_lent_bytes",
        "gauge",
        "Memory lent on the GPU: what its burstable containers hold above their guarantees.",
    );
    for g in &s.gpus {
        let i = g.index.to_string();
        let sim = g.simulated.to_string();
        o.sample(
            "gpu_quota_gpu_lent_bytes",
            &[("gpu", &i), ("uuid", &g.uuid), ("simulated", &sim)],
            crate::snapshot::lent_on(&s.containers, &g.uuid).unwrap_or(0),
        );
    }
    o.family(
        "gpu_quota_burst_ends_total",
        "counter",
        "Burstable containers ended to give lent memory back on the GPU (`gpu-quota burst-supervise`).",
    );
    for g in &s.gpus {
        let i = g.index.to_string();
        o.sample(
            "gpu_quota_burst_ends_total",
            &[("gpu", &i), ("uuid", &g.uuid)],
            s.counters.burst_ends.get(&g.uuid).copied().unwrap_or(0),
        );
    }
    o.family(
        "gpu_quota_container_reclaim_waits_total",
        "counter",
        "Allocations within the container's guarantee that waited for burstable containers to give memory back, and got it.",
    );
    for c in &s.containers {
        if let Some(n) = c.reclaim_waits {
            o.sample(
                "gpu_quota_container_reclaim_waits_total",
                &[("container", &c.id)],
                n,
            );
        }
    }
    o.family(
        "gpu_quota_container_reclaim_wait_last_seconds",
        "gauge",
        "How long the container's last allocation that waited for a reclaim waited (absent before the first).",
    );
    for c in s.containers.iter().filter(|c| c.reclaim_waits > Some(0)) {
        o.sample(
            "gpu_quota_container_reclaim_wait_last_seconds",
            &[("container", &c.id)],
            c.reclaim_last_ms as f64 / 1000.0,
        );
    }
}

/// The MPS daemons of the GPUs with compute shares, as the supervisor
/// (`gpu-quota mps-supervise`) last saw them, and their restarts.
fn mps_daemons(o: &mut Out, s: &Snapshot) {
    use gpuquota_core::mps::supervise::State;
    o.family(
        "gpu_quota_mps_supervisor_up",
        "gauge",
        "1 when `gpu-quota mps-supervise` wrote its status within the last three rounds (10 s at least), else 0.",
    );
    o.sample("gpu_quota_mps_supervisor_up", &[], s.mps_fresh as u8);
    o.family(
        "gpu_quota_mps_daemon_state",
        "gauge",
        "The MPS daemon of a GPU with compute shares: 1 for its state (up, down, restarting; unknown without a running supervisor), 0 for the others.",
    );
    let status = s.mps.as_ref().filter(|_| s.mps_fresh);
    for g in s.gpus.iter().filter(|g| g.sm > 0) {
        let now = status
            .and_then(|m| m.gpus.get(&g.uuid))
            .map_or("unknown", |x| x.state.as_str());
        let i = g.index.to_string();
        for st in State::ALL.iter().map(|s| s.as_str()).chain(["unknown"]) {
            o.sample(
                "gpu_quota_mps_daemon_state",
                &[("gpu", &i), ("uuid", &g.uuid), ("state", st)],
                (st == now) as u8,
            );
        }
    }
    type PerGpu = fn(&gpuquota_core::counters::MpsRestarts) -> u64;
    let per_gpu: [(&str, &str, &str, PerGpu); 3] = [
        (
            "gpu_quota_mps_daemon_restarts_total",
            "counter",
            "MPS daemons started again after the GPU's died or hung (supervisor and gc).",
            |m| m.restarts,
        ),
        (
            "gpu_quota_mps_daemon_restart_failures_total",
            "counter",
            "Starts of a GPU's MPS daemon that failed (the supervisor tries again later).",
            |m| m.failures,
        ),
        (
            "gpu_quota_mps_daemon_last_restart_timestamp_seconds",
            "gauge",
            "When the GPU's MPS daemon was last started again (unix seconds; absent before the first restart).",
            |m| m.last_restart_unix,
        ),
    ];
    for (name, kind, help, value) in per_gpu {
        o.family(name, kind, help);
        for g in &s.gpus {
            let Some(m) = s.counters.mps.get(&g.uuid) else {
                continue;
            };
            let v = value(m);
            if v == 0 && kind == "gauge" {
                continue;
            }
            let i = g.index.to_string();
            o.sample(name, &[("gpu", &i), ("uuid", &g.uuid)], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{ContainerView, GpuView, SliceView};

    #[test]
    fn families_samples_and_escaping() {
        let mut s = Snapshot::default();
        s.gpus.push(GpuView {
            index: 0,
            uuid: "GPU-0".into(),
            name: "NVIDIA \"H200\"".into(),
            simulated: false,
            total: 100,
            reserve: 10,
            capacity: 90,
            reserved: 40,
            holders: 1,
            sm: 25,
            used: Some(55),
        });
        s.containers.push(ContainerView {
            id: "c\\1".into(),
            state: "running",
            engine: "docker",
            request: "vram=40 B".into(),
            age_secs: 7,
            slices: vec![SliceView {
                index: 0,
                uuid: "GPU-0".into(),
                bytes: 40,
                sm: 25,
                used: None,
                burst: None,
            }],
            refusals: None,
            reclaim_waits: None,
            reclaim_last_ms: 0,
            workload: None,
        });
        s.claims.push(crate::snapshot::ClaimView {
            name: "ml/v".into(),
            index: 0,
            bytes: 8,
            bound: None,
        });
        s.containers.push(ContainerView {
            id: "k".into(),
            workload: Some(gpuquota_core::workload::Workload {
                namespace: Some("ml".into()),
                pod: Some("p-0".into()),
                pod_uid: Some("u".into()),
                container: Some("main".into()),
            }),
            slices: vec![SliceView {
                index: 0,
                uuid: "GPU-0".into(),
                bytes: 8,
                sm: 0,
                used: None,
                burst: None,
            }],
            ..s.containers[0].clone()
        });
        s.counters.admissions = 3;
        s.counters.refusals.insert("does_not_fit".into(), 2);
        s.counters.mps.insert(
            "GPU-0".into(),
            gpuquota_core::counters::MpsRestarts {
                restarts: 2,
                failures: 1,
                last_restart_unix: 1700000000,
            },
        );
        let t = render(&s);
        // without a supervisor's status: unknown
        assert!(t.lines().any(|l| l == "gpu_quota_mps_supervisor_up 0"));
        assert!(t.lines().any(
            |l| l == "gpu_quota_mps_daemon_state{gpu=\"0\",uuid=\"GPU-0\",state=\"unknown\"} 1"
        ));
        let mut st = gpuquota_core::mps::supervise::Status::default();
        st.gpus.insert(
            "GPU-0".into(),
            gpuquota_core::mps::supervise::GpuStatus {
                state: gpuquota_core::mps::supervise::State::Restarting,
                since_unix: 1,
                error: String::new(),
            },
        );
        s.mps = Some(st);
        s.mps_fresh = true;
        let t2 = render(&s);
        for line in [
            "gpu_quota_mps_supervisor_up 1",
            "gpu_quota_mps_daemon_state{gpu=\"0\",uuid=\"GPU-0\",state=\"restarting\"} 1",
            "gpu_quota_mps_daemon_state{gpu=\"0\",uuid=\"GPU-0\",state=\"up\"} 0",
            "gpu_quota_mps_daemon_state{gpu=\"0\",uuid=\"GPU-0\",state=\"unknown\"} 0",
            "gpu_quota_mps_daemon_restarts_total{gpu=\"0\",uuid=\"GPU-0\"} 2",
            "gpu_quota_mps_daemon_restart_failures_total{gpu=\"0\",uuid=\"GPU-0\"} 1",
            "gpu_quota_mps_daemon_last_restart_timestamp_seconds{gpu=\"0\",uuid=\"GPU-0\"} 1700000000",
        ] {
            assert!(t2.lines().any(|l| l == line), "{line} in\n{t2}");
        }
        for line in [
            "gpu_quota_ledger_ok 1",
            "gpu_quota_gpu_info{gpu=\"0\",UUID=\"GPU-0\",modelName=\"NVIDIA \\\"H200\\\"\",simulated=\"false\"} 1",
            "gpu_quota_gpu_used_bytes{gpu=\"0\",uuid=\"GPU-0\",simulated=\"false\"} 55",
            "gpu_quota_gpu_reserve_bytes{gpu=\"0\",uuid=\"GPU-0\",simulated=\"false\"} 10",
            "gpu_quota_container_slice_bytes{container=\"c\\\\1\",namespace=\"\",pod=\"\",pod_uid=\"\",container_name=\"\",gpu=\"0\"} 40",
            "gpu_quota_container_slice_bytes{container=\"k\",namespace=\"ml\",pod=\"p-0\",pod_uid=\"u\",container_name=\"main\",gpu=\"0\"} 8",
            "gpu_quota_container_age_seconds{container=\"c\\\\1\"} 7",
            "gpu_quota_gpu_sm_reserved_percent{gpu=\"0\",uuid=\"GPU-0\",simulated=\"false\"} 25",
            "gpu_quota_container_sm_percent{container=\"c\\\\1\",namespace=\"\",pod=\"\",pod_uid=\"\",container_name=\"\",gpu=\"0\"} 25",
            "gpu_quota_claim_bytes{claim=\"ml/v\",gpu=\"0\",bound=\"false\"} 8",
            "gpu_quota_admissions_total 3",
            "gpu_quota_admission_refusals_total{reason=\"does_not_fit\"} 2",
            "# TYPE gpu_quota_releases_total counter",
            "# TYPE gpu_quota_resizes_total counter",
        ] {
            assert!(t.lines().any(|l| l == line), "{line} in\n{t}");
        }
        assert!(
            !t.contains("gpu_quota_container_used_bytes{"),
            "no usage sample before CUDA ran"
        );
        assert!(
            !t.contains("gpu_quota_container_sm_percent{container=\"k\""),
            "no share sample for a container without one"
        );
        s.ledger_error = Some("corrupt".into());
        s.gpus[0].used = None;
        let t = render(&s);
        assert!(t.lines().any(|l| l == "gpu_quota_ledger_ok 0"));
        assert!(!t.contains("gpu_quota_gpu_used_bytes{"));
    }

    /// A burster beside a guaranteed container on GPU 0, nothing on GPU 1.
    #[test]
    fn burst_series() {
        const G: u64 = 1 << 30;
        let gpu = |index: u32, uuid: &str| GpuView {
            index,
            uuid: uuid.into(),
            name: "H".into(),
            simulated: false,
            total: 100 * G,
            reserve: 0,
            capacity: 100 * G,
            reserved: 12 * G,
            holders: 2,
            sm: 0,
            used: None,
        };
        let slice = |bytes: u64, used: Option<u64>, limit: Option<u64>| SliceView {
            index: 0,
            uuid: "GPU-0".into(),
            bytes,
            sm: 0,
            used,
            burst: limit.map(|limit_bytes| gpuquota_core::formats::grant::Burst {
                limit_bytes,
                priority: 9,
            }),
        };
        let container = |id: &str, sl: SliceView| ContainerView {
            id: id.into(),
            state: "running",
            engine: "docker",
            request: String::new(),
            age_secs: 1,
            slices: vec![sl],
            refusals: Some(0),
            reclaim_waits: Some(0),
            reclaim_last_ms: 0,
            workload: None,
        };
        let mut s = Snapshot {
            gpus: vec![gpu(0, "GPU-0"), gpu(1, "GPU-1")],
            containers: vec![
                container("b", slice(4 * G, Some(7 * G), Some(16 * G))),
                container("g", slice(8 * G, Some(G), None)),
                // a burster before any CUDA process: its limit, nothing above
                container("n", slice(G, None, Some(2 * G))),
            ],
            ..Default::default()
        };
        s.containers[1].reclaim_waits = Some(3);
        s.containers[1].reclaim_last_ms = 1520;
        s.counters.burst_ends.insert("GPU-0".into(), 2);
        let t = render(&s);
        let l = |c: &str| {
            format!("container=\"{c}\",namespace=\"\",pod=\"\",pod_uid=\"\",container_name=\"\",gpu=\"0\"")
        };
        for line in [
            "# TYPE gpu_quota_container_limit_bytes gauge".to_string(),
            format!("gpu_quota_container_limit_bytes{{{}}} {}", l("b"), 16 * G),
            format!("gpu_quota_container_limit_bytes{{{}}} {}", l("n"), 2 * G),
            "# TYPE gpu_quota_container_above_guarantee_bytes gauge".into(),
            format!(
                "gpu_quota_container_above_guarantee_bytes{{{}}} {}",
                l("b"),
                3 * G
            ),
            "# TYPE gpu_quota_gpu_lent_bytes gauge".into(),
            format!(
                "gpu_quota_gpu_lent_bytes{{gpu=\"0\",uuid=\"GPU-0\",simulated=\"false\"}} {}",
                3 * G
            ),
            "gpu_quota_gpu_lent_bytes{gpu=\"1\",uuid=\"GPU-1\",simulated=\"false\"} 0".into(),
            "# TYPE gpu_quota_burst_ends_total counter".into(),
            "gpu_quota_burst_ends_total{gpu=\"0\",uuid=\"GPU-0\"} 2".into(),
            "gpu_quota_burst_ends_total{gpu=\"1\",uuid=\"GPU-1\"} 0".into(),
            "# TYPE gpu_quota_container_reclaim_waits_total counter".into(),
            "gpu_quota_container_reclaim_waits_total{container=\"g\"} 3".into(),
            "gpu_quota_container_reclaim_waits_total{container=\"b\"} 0".into(),
            "# TYPE gpu_quota_container_reclaim_wait_last_seconds gauge".into(),
            "gpu_quota_container_reclaim_wait_last_seconds{container=\"g\"} 1.52".into(),
        ] {
            assert!(t.lines().any(|x| x == line), "{line} in\n{t}");
        }
        // a guaranteed slice has no limit and lends nothing; no wait, no
        // last wait; a burster without a usage file: nothing above known
        for absent in [
            format!("gpu_quota_container_limit_bytes{{{}}}", l("g")),
            format!("gpu_quota_container_above_guarantee_bytes{{{}}}", l("g")),
            format!("gpu_quota_container_above_guarantee_bytes{{{}}}", l("n")),
            "gpu_quota_container_reclaim_wait_last_seconds{container=\"b\"}".into(),
        ] {
            assert!(!t.contains(&absent), "{absent} in\n{t}");
        }
    }
}
