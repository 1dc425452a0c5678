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
use std::collections::{BTreeMap, BTreeSet};
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
    // 7: per-container state, event records, the spec patch
    &["state", "events", "spec"],
    // 8: the mount plan, the context charge, the driver limits; DRA claims
    //    (their ledger entries, tokens and CDI specs)
    &["mountplan", "ctxcost", "drvlimit", "claims"],
    // 9: effects of the mount plan on an untrusted rootfs
    &["rootfs"],
    // 10: a container's life: admit, setup, the one release
    &["lifecycle"],
];

/// Module name -> source text of each of its files (src/NAME.rs, src/NAME/**).
fn modules(src: &Path) -> BTreeMap<String, Vec<String>> {
    fn walk(dir: &Path, top: Option<&str>, out: &mut BTreeMap<String, Vec<String>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                walk(&p, Some(top.unwrap_or(&name)), out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let module = match top {
                    Some(t) => t.to_string(),
                    None if stem == "lib" || stem == "main" => continue,
                    None => stem.to_string(),
                };
                out.entry(module)
                    .or_default()
                    .push(std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, None, &mut out);
    out
}

/// lib.rs's `pub use module::{Name, ..};` lines: re-exported name -> module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        let names = names
            .trim_end_matches(';')
            .trim_matches(|c| c == '{' || c == '}');
        for n in names.split(',') {
            let n = n.trim().rsplit("::").next().unwrap_or("");
            if !n.is_empty() {
                out.insert(n.to_string(), module.trim().to_string());
            }
        }
    }
    out
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The crate-level names one source text refers to through `crate::`.
fn referenced(text: &str) -> BTreeSet<String> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` (a macro naming its own crate) or `foocrate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // top-level items of `crate::{a, b::{c, d}, E}`
            let (mut depth, mut start) = (0, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        out.insert(ident(&group[j..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest).to_string());
        }
    }
    out
}

/// Every import that does not go to a strictly lower floor, and every
/// module that has no floor.
fn violations(
    mods: &BTreeMap<String, Vec<String>>,
    reexp: &BTreeMap<String, String>,
    floors: &[&[&str]],
) -> Vec<String> {
    let floor_of = |m: &str| floors.iter().position(|f| f.contains(&m));
    let mut bad = Vec::new();
    for (m, texts) in mods {
        let Some(fm) = floor_of(m) else {
            bad.push(format!("module {m} has no floor in FLOORS"));
            continue;
        };
        let mut targets = BTreeSet::new();
        for t in texts {
            for name in referenced(t) {
                let target = if mods.contains_key(&name) {
                    name
                } else if let Some(owner) = reexp.get(&name) {
                    owner.clone()
                } else {
                    continue;
                };
                if &target != m {
                    targets.insert(target);
                }
            }
        }
        for t in targets {
            let ft = floor_of(&t);
            if ft.is_none_or(|ft| ft >= fm) {
                bad.push(format!(
                    "{m} (floor {fm}) imports {t} (floor {})",
                    ft.map_or("none".into(), |f| f.to_string())
                ));
            }
        }
    }
    bad
}

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
    // the import that made the circle of issue 18: config -> ctxcost
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
