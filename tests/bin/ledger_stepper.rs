//! Test helper: commits one reservation through the real ledger code and,
//! when asked, stops at a given step of the atomic write (printing
//! `at-step`) so the test can kill -9 it there.
//! usage: ledger-stepper LEDGER_DIR ID [STEP_INDEX]
use gpuquota_core::fsutil::WRITE_STEPS;
use gpuquota_core::ledger::Reservation;
use gpuquota_core::placement::Slice;
use gpuquota_core::Ledger;
use std::io::Write;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let ledger = Ledger {
        dir: a[1].clone().into(),
        grace_secs: 3600,
    };
    let id = a[2].clone();
    let stop_at = a.get(3).map(|s| WRITE_STEPS[s.parse::<usize>().unwrap()]);
    let slice = Slice {
        uuid: "GPU-0".into(),
        index: 0,
        bytes: 1 << 30,
    };
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
