//! Every constant that more than one crate spells is owned by this crate,
//! and nothing else spells it: this test reads the non-test Rust source of
//! every other crate and fails, naming `file:line`, on a literal copy of an
//! owned value.
//!
//! The rule, per kind of value (only string and number literals are read;
//! comments and prose are not copies):
//!
//! * a path (`/run/gpu-quota`, `/etc/gpu-quota/config.toml`, …): a string
//!   literal that is the path or starts with it and a `/`;
//! * a file name (`libgpuquota.so`, `context-cost.json`, …): a string
//!   literal that is the name or ends with `/` and the name;
//! * a key (an annotation, an environment variable, a helper stage or
//!   flag): a string literal that is the key or starts with the key and `=`
//!   (`"GPU_QUOTA_GPU=1"`, `c"GPU_QUOTA_DEBUG"` alike);
//! * FNV-1a's offset basis and prime: a number literal of that value in any
//!   spelling (hex or decimal, any case, `_` separators, a suffix).
//!
//! Test code keeps its literals: `#[cfg(test)]` items, files named
//! `tests.rs` (a `#[cfg(test)] mod tests;` of their parent) and `tests/`
//! directories are not read. A test that spells a value checks the
//! spelling other programs and users depend on (an e2e script that runs
//! `cat /run/gpu-quota/limits` in a container), which is a second owner on
//! purpose. Words too common to scan for (`limits`, `usage`, `driver`,
//! `vram`, `gpu`, `set`, …) are owned here all the same but not scanned.
use gpuquota_formats::{ctxcost, helper, keys, layout, names};
use std::path::{Path, PathBuf};

/// The crates whose source is read (their `src/`).
const CRATES: [&str; 7] = [
    "core",
    "hook",
    "shim",
    "install",
    "deviceplugin",
    "dra",
    "interceptor",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Path,
    FileName,
    Key,
}

/// The owned values the scanner looks for, with their owner's name.
fn owned() -> Vec<(String, Kind, &'static str)> {
    let mut v: Vec<(String, Kind, &'static str)> = vec![
        (
            layout::CONTAINER_DIR.into(),
            Kind::Path,
            "layout::CONTAINER_DIR",
        ),
        (layout::PRELOAD.into(), Kind::Path, "layout::PRELOAD"),
        (
            layout::CONFIG_FILE.into(),
            Kind::Path,
            "layout::CONFIG_FILE",
        ),
        (
            layout::DEFAULT_LEDGER_DIR.into(),
            Kind::Path,
            "layout::DEFAULT_LEDGER_DIR",
        ),
        (
            layout::DEFAULT_STATE_DIR.into(),
            Kind::Path,
            "layout::DEFAULT_STATE_DIR",
        ),
        (
            layout::INTERCEPTOR_NAME.into(),
            Kind::FileName,
            "layout::INTERCEPTOR_NAME",
        ),
        (
            layout::PRELOAD_NAME.into(),
            Kind::FileName,
            "layout::PRELOAD_NAME",
        ),
        (
            ctxcost::CACHE_FILE.into(),
            Kind::FileName,
            "ctxcost::CACHE_FILE",
        ),
        (helper::PROGRAM.into(), Kind::FileName, "helper::PROGRAM"),
        (keys::ANN_ASSIGNED.into(), Kind::Key, "keys::ANN_ASSIGNED"),
        (keys::ANN_RECORD.into(), Kind::Key, "keys::ANN_RECORD"),
        (keys::ANN_NS_VRAM.into(), Kind::Key, "keys::ANN_NS_VRAM"),
        (keys::ANN_NS_GPU.into(), Kind::Key, "keys::ANN_NS_GPU"),
        (keys::ANN_NS_GPUS.into(), Kind::Key, "keys::ANN_NS_GPUS"),
        (keys::DRA_CDI_KIND.into(), Kind::Key, "keys::DRA_CDI_KIND"),
        (
            keys::ENV_CLAIM_PREFIX.into(),
            Kind::Key,
            "keys::ENV_CLAIM_PREFIX",
        ),
    ];
    for k in keys::INTERCEPTOR_ENV {
        v.push((k.into(), Kind::Key, "keys::INTERCEPTOR_ENV"));
    }
    for s in helper::Stage::ALL {
        v.push((s.name().into(), Kind::Key, "helper::Stage"));
    }
    for f in helper::Flag::ALL {
        v.push((f.name().into(), Kind::Key, "helper::Flag"));
    }
    v
}

/// FNV-1a 64's offset basis and prime, the numbers no other crate spells.
fn owned_numbers() -> [(u128, &'static str); 2] {
    [
        (names::FNV_OFFSET as u128, "names::FNV_OFFSET"),
        (names::fnv1a(0, &[1]) as u128, "names::fnv1a (FNV prime)"),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Str(String),
    Num(String),
    Ident(String),
    Punct(char),
}

/// A small Rust lexer: enough to tell string and number literals from
/// comments, char literals and lifetimes, with each token's line.
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let count = |s: &[u8]| s.iter().filter(|c| **c == b'\n').count();
    while i < b.len() {
        let c = b[i];
        let start_line = line;
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += (b[i] == b'\n') as usize;
                    i += 1;
                }
            }
        } else if let Some((len, content)) = string_at(&b[i..]) {
            line += count(&b[i..i + len]);
            out.push((Tok::Str(content), start_line));
            i += len;
        } else if c == b'\'' {
            // a char literal ('x', '\n', '\u{..}') or a lifetime ('a)
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 3..]
                    .iter()
                    .position(|c| *c == b'\'')
                    .map(|p| i + 4 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(e) => i = e,
                None => {
                    out.push((Tok::Punct('\''), line));
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Num(src[s..i].into()), line));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(src[s..i].into()), line));
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            out.push((Tok::Punct(ch), line));
            i += ch.len_utf8();
        }
    }
    out
}

/// A string literal at the start of `b` (`"…"`, `b"…"`, `c"…"`, `r#"…"#`,
/// `br"…"`, `cr"…"`): its length and its content as written.
fn string_at(b: &[u8]) -> Option<(usize, String)> {
    let mut p = 0;
    if matches!(b.first(), Some(b'b' | b'c')) {
        p += 1;
    }
    let raw = b.get(p) == Some(&b'r');
    if raw {
        p += 1;
    }
    let mut hashes = 0;
    while raw && b.get(p + hashes) == Some(&b'#') {
        hashes += 1;
    }
    p += hashes;
    if b.get(p) != Some(&b'"') {
        return None;
    }
    let body = p + 1;
    let mut i = body;
    while i < b.len() {
        if !raw && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == b'"'
            && b[i + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == b'#')
                .count()
                == hashes
        {
            let content = String::from_utf8_lossy(&b[body..i]).into_owned();
            return Some((i + 1 + hashes, content));
        }
        i += 1;
    }
    None
}

/// The tokens that are not test code: `#[cfg(test)]` and the item after it
/// (to its `;` or the end of its `{…}`) are dropped.
fn without_test_items(toks: Vec<(Tok, usize)>) -> Vec<(Tok, usize)> {
    let is = |t: &Tok, p: char| *t == Tok::Punct(p);
    let id = |t: &Tok, s: &str| matches!(t, Tok::Ident(x) if x == s);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let w = &toks[i..];
        let cfg_test = w.len() >= 7
            && is(&w[0].0, '#')
            && is(&w[1].0, '[')
            && id(&w[2].0, "cfg")
            && is(&w[3].0, '(')
            && id(&w[4].0, "test")
            && is(&w[5].0, ')')
            && is(&w[6].0, ']');
        if !cfg_test {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        let mut depth = 0i32;
        while i < toks.len() {
            let t = &toks[i].0;
            i += 1;
            if is(t, '{') {
                depth += 1;
            } else if is(t, '}') {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            } else if is(t, ';') && depth == 0 {
                break;
            }
        }
    }
    out
}

fn number_value(n: &str) -> Option<u128> {
    let n: String = n
        .chars()
        .filter(|c| *c != '_')
        .collect::<String>()
        .to_ascii_lowercase();
    let strip = |s: &str| {
        let mut s = s.to_string();
        for suf in ["u128", "u64", "usize", "i128", "i64"] {
            if let Some(x) = s.strip_suffix(suf) {
                s = x.into();
                break;
            }
        }
        s
    };
    match n.strip_prefix("0x") {
        Some(h) => u128::from_str_radix(&strip(h), 16).ok(),
        None => strip(&n).parse().ok(),
    }
}

fn copies(lit: &str, value: &str, kind: Kind) -> bool {
    match kind {
        Kind::Path => lit == value || lit.strip_prefix(value).is_some_and(|r| r.starts_with('/')),
        Kind::FileName => lit == value || lit.ends_with(&format!("/{value}")),
        Kind::Key => lit == value || lit.strip_prefix(value).is_some_and(|r| r.starts_with('=')),
    }
}

/// Every literal copy in the Rust source under `dir`: `file:line: what`.
fn scan(dir: &Path) -> Vec<String> {
    let owned = owned();
    let numbers = owned_numbers();
    let mut found = Vec::new();
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap_or_default();
        for (tok, line) in without_test_items(lex(&src)) {
            let hit = match &tok {
                Tok::Str(s) => owned
                    .iter()
                    .find(|(v, k, _)| copies(s, v, *k))
                    .map(|(_, _, o)| format!("{s:?} (owned by formats::{o})")),
                Tok::Num(n) => number_value(n).and_then(|v| {
                    numbers
                        .iter()
                        .find(|(x, _)| *x == v)
                        .map(|(_, o)| format!("{n} (owned by formats::{o})"))
                }),
                _ => None,
            };
            if let Some(h) = hit {
                found.push(format!("{}:{line}: {h}", f.display()));
            }
        }
    }
    found
}

/// The `.rs` files under `dir` that are not test code.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "tests" && name != "target" {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn no_crate_spells_an_owned_constant() {
    let mut found = Vec::new();
    for c in CRATES {
        let src = workspace().join(c).join("src");
        assert!(src.is_dir(), "{} is missing", src.display());
        found.extend(scan(&src));
    }
    assert!(
        found.is_empty(),
        "literal copies of constants owned by gpu-quota-formats (use the constant):\n{}",
        found.join("\n")
    );
}

/// The negative control: the scanner finds each kind of copy planted in a
/// tree, and only those.
#[test]
fn the_scanner_finds_planted_copies() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub/tests")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        r###"//! prose: /run/gpu-quota/limits, GPU_QUOTA_DEBUG
/* a comment "/run/gpu-quota" with /* a nested one */ "gpu-quota.io/record" */
pub const DIR: &str = "/run/gpu-quota";
const DEBUG: &CStr = c"GPU_QUOTA_DEBUG";
fn f<'a>(x: &'a str) -> char { let _ = ('"', '\'', "x\"y"); 'q' }
pub const NOTE: &str = "limits are under /run/gpu-quota (prose)";
const H: u64 = 14_695_981_039_346_656_037u64;
fn g() { let _ = format!("{}", "GPU_QUOTA_GPUS=2"); let _ = r#"gpu-quota.io/record"#; }
#[cfg(not(test))]
const P: u64 = 0x100_0000_01B3;
#[cfg(test)]
mod tests {
    const DIR: &str = "/run/gpu-quota"; // a test checks the spelling
    fn nested() { if true { let _ = "--nvml"; } }
}
const A: [&str; 2] = ["measure-context", "/lib/gpu-quota/gpu-quota-driver"];
"###,
    )
    .unwrap();
    std::fs::write(
        src.join("sub/tests.rs"),
        "const X: &str = \"/run/gpu-quota\";\n",
    )
    .unwrap();
    std::fs::write(
        src.join("sub/tests/x.rs"),
        "const X: &str = \"/run/gpu-quota\";\n",
    )
    .unwrap();
    std::fs::write(
        src.join("sub/m.rs"),
        "const X: &[u8] = b\"/run/gpu-quota/driver/libcuda.so.1\";\nconst Y: &str = \"/srv/context-cost.json\";\nconst OK: &str = \"GPU_QUOTA_DEBUGGER\";\n",
    )
    .unwrap();
    let found: Vec<String> = scan(&src)
        .iter()
        .map(|f| {
            let (path, rest) = f.split_once(": ").unwrap();
            let rel = Path::new(path)
                .strip_prefix(&src)
                .unwrap()
                .display()
                .to_string();
            let line = rel.rsplit_once(':').map_or(rel.clone(), |(p, l)| {
                let name = Path::new(p)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                format!("{name}:{l}")
            });
            format!("{line} {}", rest.split(" (owned").next().unwrap())
        })
        .collect();
    assert_eq!(
        found,
        [
            "lib.rs:3 \"/run/gpu-quota\"",
            "lib.rs:4 \"GPU_QUOTA_DEBUG\"",
            "lib.rs:7 14_695_981_039_346_656_037u64",
            "lib.rs:8 \"GPU_QUOTA_GPUS=2\"",
            "lib.rs:8 \"gpu-quota.io/record\"",
            "lib.rs:10 0x100_0000_01B3",
            "lib.rs:16 \"measure-context\"",
            "lib.rs:16 \"/lib/gpu-quota/gpu-quota-driver\"",
            "m.rs:1 \"/run/gpu-quota/driver/libcuda.so.1\"",
            "m.rs:2 \"/srv/context-cost.json\"",
        ],
        "{found:#?}"
    );
}
