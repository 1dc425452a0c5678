//! The interceptor is layered: every module sits on a floor, and a module
//! imports only modules on floors below its own. That keeps the import
//! graph free of circles (`python3 tools/modgraph.py interceptor`) and
//! keeps the policy and the bookkeeping below the driver's entry points:
//! a bookkeeping module that needs work of a higher one done (a fork
//! child's reset, a reserve given back before a refusal, work deferred
//! during a stream capture) registers it in `hooks` instead of being called
//! upward. The floors are the table below and docs/interceptor.md
//! ("Layers"); a new module must be given one.
//!
//! An import is what `tools/modgraph.py` counts (`crate::NAME`,
//! `crate::{NAME, ..}`, comments included, the file's `#[cfg(test)] mod
//! tests` excluded). The reader is core/tests/layers.rs's.
// the one layer check, shared with core's layer test
#[path = "../../core/tests/layercheck/mod.rs"]
mod layercheck;
use layercheck::*;
use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first. A module may import modules of lower floors only.
const FLOORS: &[&[&str]] = &[
    // 0: the driver's types and codes, formatting, parsing, data structures,
    //    the registries of hooks
    &["cu", "fmt", "config", "ptrtable", "slotgroup", "hooks"],
    // 1: libc (dl*, files, clocks)
    &["sys"],
    // 2: the real entry points (resolved once), the usage region, the live
    //    grant, the line
    &["symbols", "region", "livegrant", "msg"],
    // 3: the policy: admission and charging over the region (pure)
    &["policy"],
    // 4: the process's configuration, region and slot
    &["state"],
    // 4b: a compute share's count of its container's MPS clients
    &["mpsslots"],
    // 5: GPUs outside the slice; a share's MPS client settings, and the
    //    check that its process is an MPS client
    &["foreign", "mpsclient", "mpsguard"],
    // 6: which device a call is about
    &["devices"],
    // 7: the process's books (the policy over the process's state)
    &["account"],
    // 8-11: bookkeeping of what the driver holds
    &["capture"],
    &["graphs"],
    &["pools", "vmm"],
    &["contexts"],
    // 12: the CUDA and NVML entry points
    &["cuda", "nvml"],
    // 13: the exported table, cuGetProcAddress, dlsym
    &["exports"],
];

/// Floors whose modules export driver symbols (and dlsym): left out of the
/// std test harness, everything below is unit-tested there.
const ENTRY_FLOORS: usize = 2;

/// Module name -> source text of each of its files (src/NAME.rs, src/NAME/**).

#[test]
fn interceptor_imports_only_go_down_the_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let reexp = reexports(&lib);
    assert!(
        mods.len() >= 20 && mods.contains_key("policy") && mods.contains_key("cuda"),
        "read interceptor/src: {:?}",
        mods.keys()
    );
    let bad = violations(&mods, &reexp, FLOORS);
    assert!(
        bad.is_empty(),
        "imports against the layers of the interceptor (see docs/interceptor.md):\n{}",
        bad.join("\n")
    );
    for f in FLOORS.iter().flat_map(|f| f.iter()) {
        assert!(
            mods.contains_key(*f),
            "FLOORS names {f}, which interceptor/src lacks"
        );
    }
}

/// The modules lib.rs leaves out of the unit-test harness
/// (`#[cfg(not(test))]` before their `mod` line).
fn untested(lib: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut gated = false;
    for line in lib.lines().map(str::trim) {
        if line == "#[cfg(not(test))]" {
            gated = true;
            continue;
        }
        let m = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .map(|m| m.trim_end_matches(';'));
        if let (true, Some(m)) = (gated, m) {
            out.insert(m.to_string());
        }
        gated = false;
    }
    out
}

/// Only the entry points (the top floors) are compiled out of the std test
/// harness: the policy and the bookkeeping below them are unit-tested.
#[test]
fn only_the_entry_points_are_left_out_of_unit_tests() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let entry: BTreeSet<String> = FLOORS[FLOORS.len() - ENTRY_FLOORS..]
        .iter()
        .flat_map(|f| f.iter().map(|m| m.to_string()))
        .collect();
    assert_eq!(untested(&lib), entry);
    // negative control: a bookkeeping module gated out is seen
    let gated = lib.replace("pub mod pools;", "#[cfg(not(test))]\npub mod pools;");
    assert!(untested(&gated).contains("pools"));
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
    // the hub of the circle this layering removed: the process state's
    // fork handler calling the bookkeeping it resets
    let v = with("state", "extern \"C\" fn f() { crate::pools::reset(); }");
    assert_eq!(v, ["state (floor 4) imports pools (floor 11)"]);
    // the symbol table naming the wrappers
    let v = with("symbols", "use crate::{sys, cuda::{cuMemAlloc}};");
    assert_eq!(v, ["symbols (floor 2) imports cuda (floor 13)"]);
    // the policy reaching for process state
    let v = with("policy", "fn f() { crate::state::config(); }");
    assert_eq!(v, ["policy (floor 3) imports state (floor 4)"]);
    // an import on the same floor (two such would be a circle)
    let v = with("pools", "use crate::vmm::created;");
    assert_eq!(v, ["pools (floor 11) imports vmm (floor 11)"]);
    // tests and macros' `$crate::` do not count
    assert!(with("fmt", "#[cfg(test)]\nmod tests {\n use crate::cuda::X;\n}").is_empty());
    assert!(with("sys", "macro_rules! m { () => { $crate::cuda::X } }").is_empty());
    // a module nobody placed
    let mut m = real.clone();
    m.insert("newcomer".into(), vec![String::new()]);
    assert_eq!(
        violations(&m, &reexp, FLOORS),
        ["module newcomer has no floor in FLOORS"]
    );
}
