//! gq-test-kubelet: the test kubelet of tests/kubelet as a command, for the
//! CRI end-to-end cases (tests/engines/kubernetes.sh) — protocol test: no
//! kubelet is packaged for these machines. Each run serves the kubelet's
//! Registration socket in DIR, waits for gpu-quota-device-plugin to
//! register, does what the kubelet's device manager does for one container,
//! and stops like a restarting kubelet (its socket and the plugin's removed;
//! the plugin registers again with the next run).
//!
//! ```text
//! gq-test-kubelet --dir DIR allocate --units N      # prints the annotations, KEY=VALUE
//! gq-test-kubelet --dir DIR list [--until-healthy H] # prints "healthy H of T" and per GPU
//! ```
#[path = "../kubelet/mod.rs"]
mod kubelet;

use gpuquota_deviceplugin::api;
use gpuquota_deviceplugin::units::parse_device_id;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn usage() -> ExitCode {
    eprintln!("usage: gq-test-kubelet --dir DIR [--timeout SECS] allocate --units N | list [--until-healthy H]");
    ExitCode::from(2)
}

fn summary(r: &api::ListAndWatchResponse) -> (usize, usize, String) {
    let mut per: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for d in &r.devices {
        let uuid = parse_device_id(&d.id)
            .map(|(u, _)| u.to_string())
            .unwrap_or_default();
        let e = per.entry(uuid).or_default();
        e.1 += 1;
        if d.health == api::HEALTHY {
            e.0 += 1;
        }
    }
    let healthy = per.values().map(|v| v.0).sum();
    let lines = per
        .iter()
        .map(|(u, (h, t))| format!("{u} {h}/{t}"))
        .collect::<Vec<_>>()
        .join("\n");
    (healthy, r.devices.len(), lines)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let get = |k: &str| {
        a.iter()
            .position(|x| x == k)
            .and_then(|i| a.get(i + 1))
            .cloned()
    };
    let Some(dir) = get("--dir").map(PathBuf::from) else {
        return usage();
    };
    let secs: u64 = get("--timeout").and_then(|s| s.parse().ok()).unwrap_or(30);
    let within = Duration::from_secs(secs);
    let mut k = kubelet::TestKubelet::start(&dir);
    let reg = match tokio::time::timeout(within, k.registration(within)).await {
        Ok(r) => r,
        Err(_) => {
            eprintln!("gq-test-kubelet: no plugin registered within {secs} s");
            k.stop().await;
            return ExitCode::FAILURE;
        }
    };
    let code = run(&a, &get, &dir, &reg, within).await;
    k.stop().await;
    code
}

async fn run(
    a: &[String],
    get: &dyn Fn(&str) -> Option<String>,
    dir: &std::path::Path,
    reg: &kubelet::Registered,
    within: Duration,
) -> ExitCode {
    let fail = |m: String| {
        eprintln!("gq-test-kubelet: {m}");
        ExitCode::FAILURE
    };
    let mut c = match kubelet::plugin_client(&dir.join(&reg.request.endpoint)).await {
        Ok(c) => c,
        Err(e) => return fail(format!("dial plugin: {e}")),
    };
    let mut watch = match c.list_and_watch(api::Empty {}).await {
        Ok(s) => s.into_inner(),
        Err(e) => return fail(format!("ListAndWatch: {e}")),
    };
    let deadline = Instant::now() + within;
    let mut last = match watch.message().await {
        Ok(Some(r)) => r,
        other => return fail(format!("ListAndWatch: {other:?}")),
    };
    if a.iter().any(|x| x == "list") {
        let want: Option<usize> = get("--until-healthy").and_then(|s| s.parse().ok());
        while let Some(w) = want {
            if summary(&last).0 == w {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, watch.message()).await {
                Ok(Ok(Some(r))) => last = r,
                _ => {
                    let (h, t, l) = summary(&last);
                    return fail(format!("healthy {h} of {t} (wanted {w}):\n{l}"));
                }
            }
        }
        let (h, t, l) = summary(&last);
        println!("healthy {h} of {t}\n{l}");
        return ExitCode::SUCCESS;
    }
    if a.iter().any(|x| x == "allocate") {
        let Some(n) = get("--units").and_then(|s| s.parse::<i32>().ok()) else {
            return usage();
        };
        // the device manager: healthy ids, the plugin's preference, then Allocate
        let available: Vec<String> = last
            .devices
            .iter()
            .filter(|d| d.health == api::HEALTHY)
            .map(|d| d.id.clone())
            .collect();
        let pref = match c
            .get_preferred_allocation(api::PreferredAllocationRequest {
                container_requests: vec![api::ContainerPreferredAllocationRequest {
                    available_device_i_ds: available,
                    must_include_device_i_ds: vec![],
                    allocation_size: n,
                }],
            })
            .await
        {
            Ok(r) => r.into_inner().container_responses.remove(0).device_i_ds,
            Err(e) => return fail(format!("GetPreferredAllocation: {e}")),
        };
        let resp = match c
            .allocate(api::AllocateRequest {
                container_requests: vec![api::ContainerAllocateRequest { devices_ids: pref }],
            })
            .await
        {
            Ok(r) => r.into_inner(),
            Err(e) => return fail(format!("Allocate: {}", e.message())),
        };
        let ann: BTreeMap<_, _> = resp.container_responses[0].annotations.iter().collect();
        for (k, v) in ann {
            println!("{k}={v}");
        }
        return ExitCode::SUCCESS;
    }
    usage()
}
