//! Test helper: resizes one container through the real update phase
//! (`lifecycle::update::resize_traced`) and, when asked, stops after a
//! given step (printing `at-step`) so the test can kill -9 it there.
//! usage: resize-stepper CONFIG ID SIZE [STEP_INDEX | wN]
//! (`wN`: at the Nth step, from 0, of the resize's ledger writes)
use gpuquota_core::ledger::Key;
use gpuquota_core::lifecycle::update::{resize_traced, Trace, STEPS};
use gpuquota_core::{events, Config, Inventory, Ledger};
use std::io::Write;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let cfg = Config::load(std::path::Path::new(&a[1])).expect("config");
    let id = &a[2];
    let to = gpuquota_core::units::parse_size(&a[3]).expect("size");
    let stop_at = a.get(4).filter(|s| !s.starts_with('w'));
    let stop_at = stop_at.map(|s| STEPS[s.parse::<usize>().unwrap()]);
    let stop_at_write = a
        .get(4)
        .and_then(|s| s.strip_prefix('w'))
        .map(|n| n.parse::<usize>().unwrap());
    let mut writes = 0;
    let held = Ledger::new(&cfg).read().expect("ledger").reservations;
    let r = held
        .iter()
        .find(|r| &r.container_id == id)
        .expect("the container's reservation");
    let inv = Inventory::load(&cfg).expect("inventory");
    let src = events::Source {
        program: "resize-stepper",
        engine: "runc",
        cause: "test",
    };
    let out = resize_traced(
        &cfg,
        &inv,
        &Default::default(),
        Key::Root {
            id,
            root: r.runtime_root.as_deref(),
        },
        None,
        to,
        "the test",
        src,
        &gpuquota_core::lifecycle::held::OnHost,
        &mut |t| {
            let stop = match t {
                Trace::Step(step) => Some(step) == stop_at,
                Trace::Write(_) => {
                    writes += 1;
                    Some(writes - 1) == stop_at_write
                }
            };
            if stop {
                println!("at-step {t:?}");
                std::io::stdout().flush().unwrap();
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(60));
                }
            }
        },
    );
    match out {
        Ok(r) => println!("done {:?}", r.map(|r| (r.from, r.to))),
        Err(e) => {
            println!("refused {e}");
            std::process::exit(2);
        }
    }
}
