//! interceptor/include/gpuquota_usage.h against gpuquota_formats::usage.
//!
//! The header is compiled by the C compiler (`cc`, as the rest of the
//! build) in a program generated from the header's own text: every
//! `#define GQ_*` and every field of both structs it declares is printed
//! with its value, offset and size, and compared with the crate. A define
//! or field on one side only, or any value, offset or size that differs,
//! fails. A second test proves the comparison catches drift (mutated
//! copies of the header must fail).
use gpuquota_formats::usage::{self, Header, Slot};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interceptor/include/gpuquota_usage.h")
}

/// The crate's side: every define the header must carry.
fn rust_defines() -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("GQ_USAGE_MAGIC", usage::MAGIC),
        ("GQ_USAGE_VERSION", usage::VERSION as u64),
        ("GQ_USAGE_HEADER_SIZE", usage::HEADER_SIZE as u64),
        ("GQ_USAGE_SLOT_COUNT", usage::SLOT_COUNT as u64),
        ("GQ_USAGE_DEV_COUNT", usage::DEV_COUNT as u64),
        ("GQ_USAGE_SLOT_SIZE", usage::SLOT_SIZE as u64),
        ("GQ_USAGE_SLOT_USED_OFFSET", usage::SLOT_USED_OFFSET as u64),
        ("GQ_USAGE_TOTAL_SIZE", usage::TOTAL_SIZE as u64),
        ("GQ_USAGE_FLAG_CONTAINER", usage::FLAG_CONTAINER as u64),
        ("GQ_USAGE_FLAG_PERCENT", usage::FLAG_PERCENT as u64),
        ("GQ_OWNER_FREE", usage::OWNER_FREE),
        ("GQ_OWNER_RECLAIMING", usage::OWNER_RECLAIMING),
        ("GQ_UUID_EMPTY", usage::UUID_EMPTY as u64),
        ("GQ_UUID_WRITING", usage::UUID_WRITING as u64),
        ("GQ_UUID_VALID", usage::UUID_VALID as u64),
    ])
}

/// (field, offset, size) in declaration order, from the Rust structs.
macro_rules! fields {
    ($t:ty; $($f:ident),* $(,)?) => {{
        // SAFETY: plain integers and byte arrays; all-zero is a value.
        let v: $t = unsafe { std::mem::zeroed() };
        vec![$((stringify!($f), std::mem::offset_of!($t, $f), std::mem::size_of_val(&v.$f))),*]
    }};
}

/// (field, offset, size)
type Fields = Vec<(&'static str, usize, usize)>;

/// (C struct name, size, fields) of both structs.
fn rust_structs() -> Vec<(&'static str, usize, Fields)> {
    let h = fields!(Header; magic, version, header_size, slot_count, dev_count, slot_size,
        slot_used_offset, slots_offset, high_water, flags, limit, uuid, uuid_state,
        context_overhead_bytes, refusals, container_id, reclaim_want, reclaim_since_ms,
        reclaim_waits, reclaim_last_ms, reserved);
    let s = fields!(Slot; owner, start_time, pid, group, mps_client, reserved0, used, reserved1);
    let out = vec![
        ("gq_usage_header", std::mem::size_of::<Header>(), h),
        ("gq_usage_slot", std::mem::size_of::<Slot>(), s),
    ];
    // the lists above are the whole structs: contiguous, nothing left out
    for (name, size, fields) in &out {
        let mut at = 0;
        for (f, off, sz) in fields {
            assert_eq!(
                *off, at,
                "{name}.{f}: a Rust field is missing from this test's list"
            );
            at += sz;
        }
        assert_eq!(
            at, *size,
            "{name}: a Rust field is missing from this test's list"
        );
    }
    out
}

/// Names of the `#define GQ_*` in the header text.
fn header_defines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("GQ_") && !n.contains('('))
        .map(str::to_string)
        .collect()
}

/// Field names of `struct <name> { … };` in the header text.
fn header_fields(text: &str, name: &str) -> Vec<String> {
    let start = format!("struct {name} {{");
    let Some(body) = text.split(&start).nth(1).and_then(|b| b.split("};").next()) else {
        return Vec::new();
    };
    body.lines()
        .map(|l| l.split("/*").next().unwrap().trim())
        .filter(|l| l.ends_with(';'))
        .filter_map(|l| {
            let decl = l.trim_end_matches(';').split('[').next()?;
            decl.split_whitespace().last().map(str::to_string)
        })
        .collect()
}

/// Compile `text` as the header in a program that prints what the crate
/// checks; returns every difference found.
fn compare(text: &str) -> Vec<String> {
    let mut diff = Vec::new();
    let defines = header_defines(text);
    let want = rust_defines();
    for d in &defines {
        if !want.contains_key(d.as_str()) {
            diff.push(format!(
                "{d}: in the header, not in gpuquota_formats::usage"
            ));
        }
    }
    for d in want.keys() {
        if !defines.iter().any(|x| x == d) {
            diff.push(format!(
                "{d}: in gpuquota_formats::usage, not in the header"
            ));
        }
    }
    let structs = rust_structs();
    let mut prog = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"h.h\"\nint main(void) {\n",
    );
    for d in defines.iter().filter(|d| want.contains_key(d.as_str())) {
        writeln!(
            prog,
            "  printf(\"define {d} %llu\\n\", (unsigned long long)({d}));"
        )
        .unwrap();
    }
    for (s, _, rust) in &structs {
        let names = header_fields(text, s);
        writeln!(prog, "  printf(\"sizeof {s} %zu\\n\", sizeof(struct {s}));").unwrap();
        for f in &names {
            writeln!(
                prog,
                "  printf(\"field {s}.{f} %zu %zu\\n\", offsetof(struct {s}, {f}), sizeof(((struct {s} *)0)->{f}));"
            )
            .unwrap();
        }
        let rn: Vec<&str> = rust.iter().map(|f| f.0).collect();
        if names != rn {
            diff.push(format!(
                "struct {s}: header fields {names:?}, Rust fields {rn:?}"
            ));
        }
    }
    prog.push_str("  return 0;\n}\n");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("h.h"), text).unwrap();
    std::fs::write(dir.path().join("t.c"), &prog).unwrap();
    let exe = dir.path().join("t");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(dir.path().join("t.c"))
        .output()
        .unwrap_or_else(|e| panic!("gpu-quota: this test needs a C compiler ({cc}): {e}"));
    if !out.status.success() {
        diff.push(format!(
            "the header does not compile: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return diff;
    }
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let got = String::from_utf8(out.stdout).unwrap();
    for line in got.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        match w[..] {
            ["define", name, v] => {
                let v: u64 = v.parse().unwrap();
                if want[name] != v {
                    diff.push(format!(
                        "{name} = {v} in the header, {} in the crate",
                        want[name]
                    ));
                }
            }
            ["sizeof", s, v] => {
                let size = structs.iter().find(|x| x.0 == s).unwrap().1;
                if v.parse::<usize>().unwrap() != size {
                    diff.push(format!(
                        "sizeof(struct {s}) = {v} in the header, {size} in the crate"
                    ));
                }
            }
            ["field", f, off, sz] => {
                let (s, name) = f.split_once('.').unwrap();
                let rust = &structs.iter().find(|x| x.0 == s).unwrap().2;
                let (off, sz): (usize, usize) = (off.parse().unwrap(), sz.parse().unwrap());
                match rust.iter().find(|x| x.0 == name) {
                    Some(&(_, ro, rs)) if (ro, rs) == (off, sz) => {}
                    Some(&(_, ro, rs)) => diff.push(format!(
                        "{s}.{name}: offset {off} size {sz} in the header, offset {ro} size {rs} in the crate"
                    )),
                    None => {} // reported by the name comparison
                }
            }
            _ => panic!("unexpected line {line:?}"),
        }
    }
    diff
}

#[test]
fn header_matches_the_crate() {
    let text = std::fs::read_to_string(header_path()).unwrap();
    let diff = compare(&text);
    assert!(
        diff.is_empty(),
        "gpuquota_usage.h and gpuquota_formats::usage differ:\n{}",
        diff.join("\n")
    );
}

/// Negative control: the comparison fails on every kind of drift.
#[test]
fn drift_is_caught() {
    let text = std::fs::read_to_string(header_path()).unwrap();
    let edit = |from: &str, to: &str| {
        assert!(
            text.contains(from),
            "{from:?} not in the header: update this test"
        );
        text.replacen(from, to, 1)
    };
    let ctx = "  uint64_t context_overhead_bytes; /* 496 charged once per process and device */\n";
    let refusals =
        "  uint64_t refusals;               /* 504 atomic: allocations refused so far */\n";
    let mutations = [
        (
            "a define's value",
            edit(
                "#define GQ_USAGE_SLOT_COUNT 1024u",
                "#define GQ_USAGE_SLOT_COUNT 1023u",
            ),
        ),
        (
            "a define missing",
            edit("#define GQ_USAGE_FLAG_PERCENT 2u", ""),
        ),
        (
            "a define added",
            edit(
                "#define GQ_OWNER_FREE",
                "#define GQ_OWNER_NEW 5ull\n#define GQ_OWNER_FREE",
            ),
        ),
        (
            "two fields swapped",
            edit(&format!("{ctx}{refusals}"), &format!("{refusals}{ctx}")),
        ),
        (
            "a field widened",
            edit("uint32_t flags; ", "uint64_t flags; "),
        ),
        ("a field renamed", edit("uint64_t pid; ", "uint64_t tid; ")),
    ];
    for (what, mutated) in mutations {
        let diff = compare(&mutated);
        assert!(!diff.is_empty(), "{what}: not caught");
        eprintln!("{what}: caught: {}", diff[0].lines().next().unwrap());
    }
}
