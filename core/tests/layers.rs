//! core/ is layered: every module sits on a floor, and a module imports
//! only modules on floors below its own. That keeps the import graph free of
//! circles and keeps low modules (formats, files, settings) from reaching up
//! into policy (ledger, state, helpers). The floors are the table below and
//! docs/architecture.md ("Layers of core"); a new module must be given one.
//!
//! An import is what `tools/modgraph.py` counts (`crate::NAME`,
//! `crate::{NAME, ..}`, comments included, the file's `#[cfg(test)] mod
//! tests` excluded), plus the crate-root re-exports of lib.rs
//! (`crate::Config` is an import of `config`).
mod layercheck;
use layercheck::*;
use std::path::Path;

/// Lowest first. A module may import modules of lower floors only.
const FLOORS: &[&[&str]] = &[
    // 0: formats, files, processes, libraries; no knowledge of gpu-quota's policy
    &["units", "fsutil", "ldcache", "out", "helper", "dl"],
    // 1: the request grammar, event counters, the usage file's reader, who a
    //    container is to its engine (pod, name)
    &["request", "counters", "usage", "workload"],
    // 2: the host configuration (settings parsing included)
    &["config"],
    // 3: where our binaries are (the driver helper included)
    &["paths"],
    // 4: what the host has: driver files, GPUs (NVML through the helper)
    &["driver", "inventory"],
    // 5: the placement decision
    &["placement"],
    // 6: the ledger of reservations; device nodes of a placement; the engine's
    //    own GPU requests (NVIDIA toolkit hook, CDI devices) reconciled with ours
    &["ledger", "devices", "toolkit", "grantfile"],
    // 7: per-container state, event records, the spec patch, the GPUs' MPS
    //    daemons (from the ledger's shares)
    &["state", "events", "spec", "mps"],
    // 8: the mount plan, the context charge, the driver limits; DRA claims
    //    (their ledger entries, tokens and CDI specs); what the driver sees each
    //    process hold (procmem)
    &["mountplan", "ctxcost", "drvlimit", "claims", "procmem"],
    // 9: effects of the mount plan on an untrusted rootfs
    &["rootfs"],
    // 10: a container's life: admit, setup, the one release
    &["lifecycle"],
    // 11: taking lent memory back from burstable slices (grant words, what
    //     the driver sees a waiter hold, ending a burster)
    &["burst"],
];

/// Module name -> source text of each of its files (src/NAME.rs, src/NAME/**).

#[test]
fn core_imports_only_go_down_the_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let reexp = reexports(&lib);
    assert!(
        mods.len() >= 20 && mods.contains_key("config") && mods.contains_key("ledger"),
        "read core/src: {:?}",
        mods.keys()
    );
    assert_eq!(reexp.get("Config").map(String::as_str), Some("config"));
    let bad = violations(&mods, &reexp, FLOORS);
    assert!(
        bad.is_empty(),
        "imports against the layers of core (see docs/architecture.md):\n{}",
        bad.join("\n")
    );
    for f in FLOORS.iter().flat_map(|f| f.iter()) {
        assert!(
            mods.contains_key(*f),
            "FLOORS names {f}, which core/src lacks"
        );
    }
}

/// Negative control: the reader finds back edges in each spelling, a
/// circle, and a module without a floor.
#[test]
fn the_check_sees_a_back_edge() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let real = modules(&src);
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let reexp = reexports(&lib);
    let with = |module: &str, extra: &str| {
        let mut m = real.clone();
        m.get_mut(module).unwrap().push(extra.to_string());
        violations(&m, &reexp, FLOORS)
    };
    assert!(violations(&real, &reexp, FLOORS).is_empty());
    // the import that once made a circle: config -> ctxcost
    let v = with("config", "fn f() -> crate::ctxcost::Setting { todo!() }");
    assert_eq!(v, ["config (floor 2) imports ctxcost (floor 8)"]);
    // a use group, nested
    let v = with("config", "use crate::{units, ledger::{Ledger, ResState}};");
    assert_eq!(v, ["config (floor 2) imports ledger (floor 6)"]);
    // a crate-root re-export
    let v = with("inventory", "fn f(_: &crate::Ledger) {}");
    assert_eq!(v, ["inventory (floor 4) imports ledger (floor 6)"]);
    // an import on the same floor (two such would be a circle)
    let v = with("driver", "use crate::inventory::Gpu;");
    assert_eq!(v, ["driver (floor 4) imports inventory (floor 4)"]);
    // tests and macros' `$crate::` do not count
    assert!(with(
        "units",
        "#[cfg(test)]\nmod tests {\n use crate::ledger::Ledger;\n}"
    )
    .is_empty());
    assert!(with("fsutil", "macro_rules! m { () => { $crate::ledger::X } }").is_empty());
    // a module nobody placed
    let mut m = real.clone();
    m.insert("newcomer".into(), vec![String::new()]);
    assert_eq!(
        violations(&m, &reexp, FLOORS),
        ["module newcomer has no floor in FLOORS"]
    );
}
