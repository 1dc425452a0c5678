use super::*;
use crate::config::{LogTarget, StaticGpu};
use crate::inventory::Inventory;
use crate::ledger::{Key, Ledger, LedgerError};
use crate::placement::{PlacementError, Slice};
use crate::request::Request;
use crate::state;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const G: u64 = 1 << 30;
const GPU0: &str = "GPU-00000000-0000-0000-0000-000000000000";
const GPU1: &str = "GPU-11111111-1111-1111-1111-111111111111";

fn setup() -> (tempfile::TempDir, Config) {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        ledger_dir: d.path().join("ledger"),
        state_dir: d.path().join("state"),
        cdi_dir: d.path().join("cdi"),
        log: LogTarget::File,
        log_file: d.path().join("events.log"),
        inventory: crate::config::InventoryConfig {
            gpu: [GPU0, GPU1]
                .iter()
                .enumerate()
                .map(|(i, u)| StaticGpu {
                    index: i as u32,
                    uuid: u.to_string(),
                    name: "Simulated H100".into(),
                    memory: "16g".into(),
                    minor: None,
                })
                .collect(),
            ..Default::default()
        },
        ..Config::default()
    };
    (d, cfg)
}

fn alloc(uid: &str, gpu: &str, bytes: u64) -> ClaimAlloc {
    ClaimAlloc {
        uid: uid.into(),
        namespace: "default".into(),
        name: format!("c-{uid}"),
        gpu_uuid: gpu.into(),
        bytes,
        sm: None,
        sm_procs: 0,
        burst: None,
    }
}

/// A docker-style container holding `bytes` on GPU `gpu` (not a claim).
fn container(cfg: &Config, id: &str, gpu: u32, bytes: u64) -> Reservation {
    let inv = Inventory::load(cfg).unwrap();
    let req = Request::slice_for_test(bytes, gpu);
    Ledger::new(cfg)
        .admit(cfg, &inv, &req, id, Some("/run/runc"), "/b", &mut vec![])
        .unwrap()
}

/// A container `id` holding a 25 % compute share (and 2 GiB) of GPU 0.
fn share(cfg: &Config, id: &str) -> Reservation {
    let inv = Inventory::load(cfg).unwrap();
    let req = Request::share_for_test(2 * G, 0, 25);
    Ledger::new(cfg)
        .admit(cfg, &inv, &req, id, Some("/run/runc"), "/b", &mut vec![])
        .unwrap()
}

/// The placer's refusal inside a claim's.
fn refusal(e: &ClaimError) -> &PlacementError {
    match e {
        ClaimError::Refused { err, .. } => err,
        other => panic!("not the placer's refusal: {other:?}"),
    }
}

fn entries(cfg: &Config) -> Vec<Reservation> {
    Ledger::new(cfg).read().unwrap().reservations
}

fn token_of(cfg: &Config, uid: &str) -> String {
    entries(cfg)
        .iter()
        .find_map(|r| {
            r.claim
                .as_ref()
                .filter(|c| c.uid == uid)
                .map(|c| c.token.clone())
        })
        .unwrap()
}

fn presenting(uid: &str, token: &str) -> Presented {
    presented(&serde_json::json!({"process": {"env": [
        "PATH=/bin",
        format!("{}={token}", env_var(uid)),
    ]}}))
    .unwrap()
    .unwrap()
}

mod bind;
mod burst;
mod cdi;
mod compute;
mod decision;
mod offers;
mod prepare;
mod race;
