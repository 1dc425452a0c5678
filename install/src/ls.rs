//! `gpu-quota ls`: the reservations in the host ledger, one line each, and
//! each GPU's capacity, reserved and free bytes; `--json` for scripts. A
//! burstable slice reads `GUARANTEE..LIMIT`, and ABOVE is what it holds
//! above its guarantee (lent memory, from its usage file: shown only).
use crate::ops::{load, read_only};
use crate::snapshot::above_guarantee;
use anyhow::Result;
use gpuquota_core::{
    config::Config,
    fsutil,
    ledger::{LedgerData, Reservation},
    units::human,
    usage::{self, Usage},
    Inventory,
};

#[derive(clap::Args)]
pub struct LsArgs {
    /// Print the ledger and per-GPU totals as JSON.
    #[arg(long)]
    pub json: bool,
}

struct GpuRow {
    index: u32,
    uuid: String,
    name: String,
    simulated: bool,
    total: u64,
    capacity: u64,
    reserved: u64,
    holders: usize,
    /// Compute shares on the GPU (percent of its SMs).
    sm: u32,
}

fn gpu_rows(cfg: &Config, inv: &Inventory, data: &LedgerData) -> Vec<GpuRow> {
    let usage = data.usage();
    let reserve = cfg.reserve_bytes().unwrap_or(0);
    inv.gpus
        .iter()
        .map(|g| {
            let u = usage.get(&g.uuid).copied().unwrap_or_default();
            let (reserved, holders, sm) = (u.bytes, u.holders, u.sm);
            GpuRow {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                simulated: g.simulated,
                total: g.total_bytes,
                capacity: gpuquota_core::placement::usable(g, reserve),
                reserved,
                holders,
                sm,
            }
        })
        .collect()
}

/// A container's usage file (what its processes hold, per device index).
fn container_used(cfg: &Config, r: &Reservation) -> Option<Usage> {
    usage::read(&gpuquota_core::state::usage_path(
        &gpuquota_core::state::existing_dir(cfg, r),
    ))
}

/// What device index `i` of the container holds, where its usage file was
/// read (the slices are its devices in order).
fn used_on(u: Option<&Usage>, i: usize) -> Option<u64> {
    u.map(|u| u.used.get(i).copied().unwrap_or(0))
}

/// SLICE: per GPU where the slices differ (a percentage of GPUs of two
/// sizes, or one resized); `2.00 GiB 60%` with a compute share,
/// `4.00 GiB..16.00 GiB` (guarantee..limit) for a burstable slice.
fn slice_text(r: &Reservation) -> String {
    let mut sizes: Vec<String> = r
        .slices
        .iter()
        .map(|s| match (s.burst, s.sm_percent) {
            (Some(b), _) => format!("{}..{}", human(s.vram_bytes), human(b.limit_bytes)),
            (None, 0) => human(s.vram_bytes),
            (None, p) => format!("{} {p}%", human(s.vram_bytes)),
        })
        .collect();
    sizes.dedup();
    sizes.join(",")
}

/// What a reservation holds above its guarantees, over its GPUs: None
/// without a burstable slice, or before any CUDA process ran in it.
fn above(r: &Reservation, u: Option<&Usage>) -> Option<u64> {
    r.slices
        .iter()
        .enumerate()
        .filter_map(|(i, s)| above_guarantee(s.vram_bytes, s.burst, used_on(u, i)))
        .reduce(|a, b| a + b)
}

/// One reservation for `--json`: the ledger's own record, plus what the
/// host sees (kind, stale, use). Burstable slices gain `limit_bytes`,
/// `priority` and, once a CUDA process ran, `above_bytes`; guaranteed ones
/// are left as they were, so that existing consumers see no change.
fn reservation_json(r: &Reservation, stale: bool, u: Option<&Usage>) -> serde_json::Value {
    use serde_json::json;
    let mut v = serde_json::to_value(r).unwrap_or_default();
    // a claim's token is never printed
    if let Some(c) = v.get_mut("claim").and_then(|c| c.as_object_mut()) {
        c.remove("token");
    }
    v["kind"] = json!(if r.is_claim() { "claim" } else { "container" });
    v["stale"] = json!(stale);
    if let Some(u) = u {
        v["used_bytes"] = json!(u.used.iter().sum::<u64>());
        if u.reclaim_waits > 0 {
            v["reclaim_waits"] = json!(u.reclaim_waits);
            v["reclaim_last_ms"] = json!(u.reclaim_last_ms);
        }
    }
    if let Some(js) = v.get_mut("slices").and_then(|s| s.as_array_mut()) {
        for (i, (j, s)) in js.iter_mut().zip(&r.slices).enumerate() {
            let Some(b) = s.burst else {
                continue;
            };
            j["limit_bytes"] = json!(b.limit_bytes);
            j["priority"] = json!(b.priority);
            if let Some(a) = above_guarantee(s.vram_bytes, s.burst, used_on(u, i)) {
                j["above_bytes"] = json!(a);
            }
        }
    }
    v
}

/// One line of the reservations table, before alignment.
struct Row {
    id: String,
    state: String,
    gpus: String,
    slice: String,
    used: String,
    above: String,
    pid: String,
    age: u64,
    request: String,
    workload: String,
}

fn row(r: &Reservation, stale: bool, u: Option<&Usage>, now: u64) -> Row {
    Row {
        id: r.container_id.chars().take(20).collect(),
        state: if stale {
            "stale".to_string()
        } else if r.resizing.is_some() {
            "resizing".to_string()
        } else {
            format!("{:?}", r.state).to_lowercase()
        },
        gpus: r
            .slices
            .iter()
            .map(|s| s.index.to_string())
            .collect::<Vec<_>>()
            .join(","),
        slice: slice_text(r),
        used: u
            .map(|u| human(u.used.iter().sum()))
            .unwrap_or_else(|| "-".into()),
        above: above(r, u).map(human).unwrap_or_else(|| "-".into()),
        pid: r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
        age: now.saturating_sub(r.created_unix),
        request: r.request.clone(),
        workload: r.workload.as_ref().map(|w| w.label()).unwrap_or_default(),
    }
}

/// The reservations table, header first. SLICE widens to its longest
/// entry (a burster's `guarantee..limit`), so the columns stay aligned.
fn table(rows: &[Row]) -> Vec<String> {
    let w = rows
        .iter()
        .map(|r| r.slice.len())
        .max()
        .unwrap_or(0)
        .max(12);
    let mut out = vec![format!(
        "{:<20} {:<8} {:<6} {:>w$} {:>12} {:>12} {:>8} {:>8}  {:<16} WORKLOAD",
        "CONTAINER", "STATE", "GPU", "SLICE", "USED", "ABOVE", "PID", "AGE", "REQUEST"
    )];
    out.extend(rows.iter().map(|r| {
        format!(
            "{:<20} {:<8} {:<6} {:>w$} {:>12} {:>12} {:>8} {:>7}s  {:<16} {}",
            r.id, r.state, r.gpus, r.slice, r.used, r.above, r.pid, r.age, r.request, r.workload
        )
    }));
    out
}

pub fn ls(a: &LsArgs) -> Result<()> {
    let (cfg, ledger) = load()?;
    let (data, _) = read_only(&ledger)?;
    let inv = Inventory::load(&cfg).ok();
    let now = fsutil::now_unix();
    if a.json {
        let gpus: Vec<_> = inv
            .as_ref()
            .map(|i| gpu_rows(&cfg, i, &data))
            .unwrap_or_default()
            .into_iter()
            .map(|g| serde_json::json!({"index": g.index, "uuid": g.uuid, "name": g.name, "simulated": g.simulated,
                "total_bytes": g.total, "capacity_bytes": g.capacity, "reserved_bytes": g.reserved,
                "free_bytes": g.capacity.saturating_sub(g.reserved), "containers": g.holders,
                "sm_reserved_percent": g.sm}))
            .collect();
        let res: Vec<_> = data
            .reservations
            .iter()
            .map(|r| reservation_json(r, ledger.is_stale(r, now), container_used(&cfg, r).as_ref()))
            .collect();
        gpuquota_core::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"gpus": gpus, "reservations": res}))?
        );
        return Ok(());
    }
    let rows: Vec<Row> = data
        .reservations
        .iter()
        .filter(|r| !r.is_claim())
        .map(|r| {
            row(
                r,
                ledger.is_stale(r, now),
                container_used(&cfg, r).as_ref(),
                now,
            )
        })
        .collect();
    for line in table(&rows) {
        gpuquota_core::outln!("{line}");
    }
    for line in claim_lines(&data) {
        gpuquota_core::outln!("{line}");
    }
    match inv {
        Some(inv) => {
            gpuquota_core::outln!();
            gpuquota_core::outln!(
                "{:<4} {:<42} {:>12} {:>12} {:>12} {:>4}  CONTAINERS",
                "GPU",
                "UUID",
                "CAPACITY",
                "RESERVED",
                "FREE",
                "SM"
            );
            for g in gpu_rows(&cfg, &inv, &data) {
                gpuquota_core::outln!(
                    "{:<4} {:<42} {:>12} {:>12} {:>12} {:>4}  {}{}",
                    g.index,
                    g.uuid,
                    human(g.capacity),
                    human(g.reserved),
                    human(g.capacity.saturating_sub(g.reserved)),
                    if g.sm > 0 {
                        format!("{}%", g.sm)
                    } else {
                        "-".into()
                    },
                    g.holders,
                    if g.simulated { "  (simulated)" } else { "" }
                );
            }
        }
        None => eprintln!("(no GPU inventory: run `gpu-quota doctor`)"),
    }
    Ok(())
}

/// One line per prepared DRA claim: its bytes on its GPU and
/// the container bound to it, if any (that container's own row says
/// `claim NS/NAME` and holds nothing of its own).
fn claim_lines(data: &LedgerData) -> Vec<String> {
    data.reservations
        .iter()
        .filter_map(|r| {
            let c = r.claim.as_ref()?;
            let bound: Vec<&str> = data
                .reservations
                .iter()
                .filter(|b| b.bound_claim.as_deref() == Some(c.uid.as_str()))
                .map(|b| b.container_id.as_str())
                .collect();
            let slices: Vec<String> = r
                .slices
                .iter()
                .map(|s| format!("{} on {} (GPU {})", human(s.vram_bytes), s.uuid, s.index))
                .collect();
            Some(format!(
                "claim {}/{} (uid {}) {}: {}",
                c.namespace,
                c.name,
                c.uid,
                slices.join(", "),
                if bound.is_empty() {
                    "no container bound".to_string()
                } else {
                    format!("bound to container {}", bound.join(", "))
                }
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests;
