//! Test helper: commits one reservation through the real ledger code and,
//! when asked, stops at a given step of the atomic write (printing
//! `at-step`) so the test can kill -9 it there.
//! usage: ledger-stepper LEDGER_DIR ID [STEP_INDEX]
//!        ledger-stepper --record LEDGER_DIR ID [STEP_INDEX]: admits ID as a
//!        boot record (if it is not yet held), then confirms it with this
//!        process, stopping at that step of the record's rewrite
use gpuquota_core::fsutil::WRITE_STEPS;
use gpuquota_core::ledger::Reservation;
use gpuquota_core::placement::Slice;
use gpuquota_core::Ledger;
use std::io::Write;

fn main() {
    let mut a: Vec<String> = std::env::args().collect();
    if a.get(1).map(String::as_str) == Some("--record") {
        a.remove(1);
        return record(&a);
    }
    let ledger = Ledger {
        dir: a[1].clone().into(),
        grace_secs: 3600,
    };
    let id = a[2].clone();
    let stop_at = a.get(3).map(|s| WRITE_STEPS[s.parse::<usize>().unwrap()]);
    let slice = Slice::memory("GPU-0".into(), 0, 1 << 30);
    let r = Reservation {
        created_unix: 1,
        ..Reservation::new(
            &id,
            Some("/run/runc"),
            format!("/bundles/{id}"),
            vec![slice],
            "vram=1g",
        )
    };
    ledger
        .transact_observed(
            |d| {
                d.reservations.push(r);
                Ok(((), true))
            },
            &mut |step| {
                if Some(step) == stop_at {
                    println!("at-step {step:?}");
                    std::io::stdout().flush().unwrap();
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(60));
                    }
                }
            },
        )
        .unwrap();
}

fn stop_at(
    step: Option<gpuquota_core::fsutil::WriteStep>,
) -> impl FnMut(gpuquota_core::fsutil::WriteStep) {
    move |s| {
        if Some(s) == step {
            println!("at-step {s:?}");
            std::io::stdout().flush().unwrap();
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
    }
}

fn record(a: &[String]) {
    use gpuquota_core::config::Config;
    use gpuquota_core::inventory::{Gpu, Inventory};
    use gpuquota_core::request::{GpuSelector, Origin, Request};
    use gpuquota_core::units::Size;
    let cfg = Config {
        ledger_dir: a[1].clone().into(),
        ..Config::default()
    };
    let inv = Inventory {
        gpus: vec![Gpu {
            index: 0,
            uuid: "GPU-0".into(),
            name: "t".into(),
            total_bytes: 1 << 40,
            minor: 0,
            simulated: true,
        }],
        driver_version: "simulated".into(),
    };
    let id = &a[2];
    let bundle = format!("/bundles/{id}");
    let ledger = Ledger::new(&cfg);
    let held = ledger.read().unwrap().reservations;
    if !held.iter().any(|r| &r.container_id == id) {
        let req = Request {
            vram: Size::Bytes(1 << 30),
            gpus: GpuSelector::Count(1),
            origin: Origin::Annotation("vram".into()),
            named_gpus: false,
            sm: None,
            sm_procs: 0,
            user: Some(0),
            burst: None,
        };
        ledger
            .admit(
                &cfg,
                &inv,
                &req,
                id,
                Some("/run/runc"),
                &bundle,
                &mut vec![],
            )
            .unwrap();
    }
    let step = a.get(3).map(|s| WRITE_STEPS[s.parse::<usize>().unwrap()]);
    ledger
        .confirm_observed(
            id,
            Some("/run/runc"),
            &bundle,
            std::process::id(),
            &mut stop_at(step),
        )
        .unwrap();
}
