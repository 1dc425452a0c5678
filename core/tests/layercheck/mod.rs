//! The layer check both layer tests share (core/tests/layers.rs and, by
//! `#[path]`, interceptor/tests/layers.rs): a crate's modules, what each
//! imports (`crate::name`, `super::name` at the top, and the names the
//! crate root re-exports), and the imports that go up or sideways across
//! the floors a test gives.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub fn modules(src: &Path) -> BTreeMap<String, Vec<String>> {
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
pub fn reexports(lib: &str) -> BTreeMap<String, String> {
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

pub fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The crate-level names one source text refers to through `crate::`.
pub fn referenced(text: &str) -> BTreeSet<String> {
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
pub fn violations(
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
