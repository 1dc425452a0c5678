//! The loader-cache step does bounded work on any input. The
//! hook's whole step (`ldcache::rewrite`: parse the image's cache, add the
//! driver libraries, write it) counts its work in units of about one byte
//! touched (`ldcache::Work`); these tests bound that count, not a clock, so
//! they are deterministic on a loaded machine. The inputs are the slow
//! shapes: the issue's caches (many entries of one key whose glibc-hwcaps
//! indices point into thousands of 4 KiB names), the same at today's
//! limits, and the other ways to make a sort or the string table compare
//! long strings (long keys or values that differ only at one end).
use gpuquota_core::ldcache::{
    rewrite, LdCache, LdCacheError, Lib, Work, DL_CACHE_HWCAP_EXTENSION, EXTENSION_MAGIC,
    MAX_DECODED_BYTES, MAX_ENTRIES, NEW_MAGIC, WORK_BUDGET,
};

/// A new-format cache: `keys[i % keys.len()]` -> `values[i % values.len()]`
/// for `entries` entries, flags 0x0303; with `names` glibc-hwcaps names,
/// entry i is a glibc-hwcaps entry of name i % names. Names are 4095 bytes
/// that differ only in their last six.
fn cache(entries: usize, keys: &[Vec<u8>], values: &[Vec<u8>], names: usize) -> Vec<u8> {
    let str_start = 48 + 24 * entries;
    let mut strings = Vec::new();
    let put = |strings: &mut Vec<u8>, s: &[u8]| {
        let at = (str_start + strings.len()) as u32;
        strings.extend_from_slice(s);
        strings.push(0);
        at
    };
    let key_at: Vec<u32> = keys.iter().map(|k| put(&mut strings, k)).collect();
    let value_at: Vec<u32> = values.iter().map(|v| put(&mut strings, v)).collect();
    let name_at: Vec<u32> = (0..names)
        .map(|i| {
            let mut n = vec![b'a'; 4095 - 6];
            n.extend_from_slice(format!("{i:06}").as_bytes());
            put(&mut strings, &n)
        })
        .collect();
    let ext = (str_start + strings.len()).next_multiple_of(4);
    let mut b = Vec::with_capacity(ext + 24 + 4 * names);
    b.extend_from_slice(NEW_MAGIC);
    b.extend_from_slice(&(entries as u32).to_ne_bytes());
    b.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
    b.extend_from_slice(&[if cfg!(target_endian = "little") { 2 } else { 3 }, 0, 0, 0]);
    b.extend_from_slice(&(if names > 0 { ext as u32 } else { 0 }).to_ne_bytes());
    b.extend_from_slice(&[0; 12]);
    for i in 0..entries {
        b.extend_from_slice(&0x0303i32.to_ne_bytes());
        b.extend_from_slice(&key_at[i % keys.len()].to_ne_bytes());
        b.extend_from_slice(&value_at[i % values.len()].to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        let hwcap = if names > 0 {
            DL_CACHE_HWCAP_EXTENSION | (i % names) as u64
        } else {
            0
        };
        b.extend_from_slice(&hwcap.to_ne_bytes());
    }
    b.extend_from_slice(&strings);
    if names > 0 {
        b.resize(ext, 0);
        b.extend_from_slice(&EXTENSION_MAGIC.to_ne_bytes());
        b.extend_from_slice(&1u32.to_ne_bytes());
        let data = ext + 8 + 16;
        for v in [1u32, 0, data as u32, 4 * names as u32] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for a in name_at {
            b.extend_from_slice(&a.to_ne_bytes());
        }
    }
    b
}

/// The issue's shape: one key, glibc-hwcaps entries into `names` names.
fn hwcaps_cache(entries: usize, names: usize) -> Vec<u8> {
    cache(
        entries,
        &[b"libslow.so.1".to_vec()],
        &[b"/lib/s".to_vec()],
        names,
    )
}

/// 4 KiB glibc-hwcaps names that fit the decoded-bytes limit beside
/// MAX_ENTRIES entries of `hwcaps_cache`'s key and value.
fn max_names() -> usize {
    (MAX_DECODED_BYTES - MAX_ENTRIES * (12 + 7)) / 4096
}

/// `count` strings of `len` bytes: `fill` with a distinct 6-digit number at
/// the start (`at_start`) or at the end.
fn long(count: usize, len: usize, prefix: &[u8], at_start: bool) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let num = format!("{i:06}").into_bytes();
            let fill = vec![b'x'; len - prefix.len() - num.len()];
            if at_start {
                [prefix, &num[..], &fill[..]].concat()
            } else {
                [prefix, &fill[..], &num[..]].concat()
            }
        })
        .collect()
}

fn driver_libs() -> Vec<Lib> {
    [
        "libcuda.so.1",
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
    ]
    .iter()
    .map(|k| Lib {
        key: k.as_bytes().to_vec(),
        path: format!("/run/gpu-quota/driver/{k}").into_bytes(),
        flags: 0x0303,
    })
    .collect()
}

/// The whole step under the real budget: (result, units used).
fn step(image: &[u8]) -> (Result<Vec<u8>, LdCacheError>, u64) {
    let mut w = Work::budget();
    let r = rewrite(Some(image), &driver_libs(), &mut w);
    (r, w.used())
}

/// What the old code took 45 s of CPU on (the hook's alarm killed it) is
/// refused from its header: more entries than a cache may have.
#[test]
fn the_issues_caches_are_refused_at_the_header() {
    for (entries, names) in [(1 << 20, 1900), (200_000, 420)] {
        let b = hwcaps_cache(entries, names);
        let (r, used) = step(&b);
        assert!(
            matches!(
                r,
                Err(LdCacheError::TooMany {
                    what: "entry count",
                    ..
                })
            ),
            "{entries} entries: {r:?}"
        );
        assert!(
            used <= 48,
            "{entries} entries: {used} units before refusing"
        );
    }
    // negative control: with one entry fewer than the limit allows, the
    // same shape is read (the refusal is the count, not the shape)
    let (r, _) = step(&hwcaps_cache(MAX_ENTRIES, 16));
    assert!(r.is_ok(), "{r:?}");
}

/// The slow shapes at today's limits are processed within the budget, and
/// what comes out is the cache with the driver libraries added.
#[test]
fn slow_shapes_at_the_limits_stay_within_the_budget() {
    let k4 = 4095;
    // room for the driver libraries, so that the result reads back
    const N: usize = MAX_ENTRIES - 3;
    // entries of one 4 KiB string each that fit the decoded-bytes limit
    const L: usize = MAX_DECODED_BYTES / (4096 + 16);
    let shapes: Vec<(&str, Vec<u8>)> = vec![
        // the issue's trick at the entry limit, with as many 4 KiB names
        // as the decoded-bytes limit leaves room for: every sort
        // comparison of the old code compared two 4 KiB names
        ("hwcaps names", hwcaps_cache(N, max_names())),
        // distinct 4 KiB keys differing only at the end, as many as the
        // decoded-bytes limit allows: ranking the keys compares whole keys
        (
            "long keys, same start",
            cache(L, &long(L, k4, b"lib", false), &[b"/v".to_vec()], 0),
        ),
        // distinct 4 KiB values differing only at the start: the string
        // table's suffix sort compares whole values
        (
            "long values, same end",
            cache(L, &[b"libk.so.1".to_vec()], &long(L, k4, b"/", true), 0),
        ),
        // as many distinct keys as entries, as long as the decoded-bytes
        // limit allows, same start: the most comparisons of the longest
        // keys when ranking them
        (
            "many medium keys, same start",
            cache(
                N,
                &long(N, MAX_DECODED_BYTES / N - 4, b"lib", false),
                &[b"/v".to_vec()],
                0,
            ),
        ),
        // keys that are one long digit run each (libcmp's number tokens)
        (
            "digit-run keys",
            cache(
                L,
                &(0..L)
                    .map(|i| format!("lib.so.{i:0>4080}").into_bytes())
                    .collect::<Vec<_>>(),
                &[b"/v".to_vec()],
                0,
            ),
        ),
        // many short distinct keys and values: per-entry costs
        (
            "many distinct entries",
            cache(
                N,
                &(0..N)
                    .map(|i| format!("libn{i}.so.{}", i % 7).into_bytes())
                    .collect::<Vec<_>>(),
                &(0..N)
                    .map(|i| format!("/usr/lib/x86_64-linux-gnu/libn{i}.so.{}", i % 7).into_bytes())
                    .collect::<Vec<_>>(),
                0,
            ),
        ),
    ];
    for (name, bytes) in shapes {
        let (r, used) = step(&bytes);
        eprintln!("{name}: {} KiB, {used} units", bytes.len() >> 10);
        let out = r.unwrap_or_else(|e| panic!("{name}: refused: {e}"));
        assert!(used <= WORK_BUDGET, "{name}: {used} units");
        // work is near-linear: at most 40 units per byte of input
        assert!(
            used <= 40 * bytes.len() as u64,
            "{name}: {used} units for {} bytes",
            bytes.len()
        );
        let back = LdCache::parse(&out).unwrap();
        let cuda: Vec<_> = back
            .entries
            .iter()
            .filter(|e| e.key == b"libcuda.so.1")
            .collect();
        assert_eq!(cuda.len(), 1, "{name}");
        assert_eq!(cuda[0].value, b"/run/gpu-quota/driver/libcuda.so.1");
    }
}

/// Past the budget the step is refused, whatever the cache; a real cache
/// costs a small part of the budget.
#[test]
fn the_budget_refuses_and_real_caches_are_cheap() {
    let host = std::fs::read("/etc/ld.so.cache").unwrap();
    let (r, used) = step(&host);
    assert!(r.is_ok(), "{r:?}");
    assert!(used < WORK_BUDGET / 100, "the host's cache: {used} units");
    // negative control: a budget smaller than what the host cache needs
    let mut small = Work::new(used / 2);
    let r = rewrite(Some(&host), &driver_libs(), &mut small);
    assert!(matches!(r, Err(LdCacheError::TooMuchWork { .. })), "{r:?}");
    assert!(small.used() <= used, "stopped at the budget");
}

/// This thread's CPU time (a loaded machine does not inflate it).
fn thread_cpu() -> std::time::Duration {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock id and out-pointer.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) },
        0
    );
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Timing of the slow shapes, for docs/security.md (not a test of time; CPU time of this thread, best of 5:
/// `cargo test --release -p gpu-quota-core --test ldcache_work -- --ignored
/// --nocapture timing`).
#[test]
#[ignore]
fn timing() {
    const L: usize = MAX_DECODED_BYTES / (4096 + 16);
    let shapes = [
        ("issue 32 MiB (refused)", hwcaps_cache(1 << 20, 1900)),
        (
            "hwcaps names at the limit",
            hwcaps_cache(MAX_ENTRIES, max_names()),
        ),
        (
            "long keys at the limit",
            cache(L, &long(L, 4095, b"lib", false), &[b"/v".to_vec()], 0),
        ),
        (
            "long values at the limit",
            cache(L, &[b"libk.so.1".to_vec()], &long(L, 4095, b"/", true), 0),
        ),
        (
            "many medium keys",
            cache(
                MAX_ENTRIES - 3,
                &long(
                    MAX_ENTRIES - 3,
                    MAX_DECODED_BYTES / MAX_ENTRIES - 4,
                    b"lib",
                    false,
                ),
                &[b"/v".to_vec()],
                0,
            ),
        ),
        (
            "many distinct entries",
            cache(
                MAX_ENTRIES - 3,
                &(0..MAX_ENTRIES)
                    .map(|i| format!("libn{i}.so.{}", i % 7).into_bytes())
                    .collect::<Vec<_>>(),
                &(0..MAX_ENTRIES)
                    .map(|i| format!("/usr/lib/x86_64-linux-gnu/libn{i}.so.{}", i % 7).into_bytes())
                    .collect::<Vec<_>>(),
                0,
            ),
        ),
        (
            "the host's cache",
            std::fs::read("/etc/ld.so.cache").unwrap(),
        ),
    ];
    for (name, b) in shapes {
        let mut best = std::time::Duration::MAX;
        let mut used = 0;
        let mut ok = false;
        for _ in 0..5 {
            let t = thread_cpu();
            let mut w = Work::unlimited();
            let r = rewrite(Some(&b), &driver_libs(), &mut w);
            best = best.min(thread_cpu() - t);
            used = w.used();
            ok = std::hint::black_box(r).is_ok();
        }
        let within = used <= WORK_BUDGET;
        eprintln!(
            "{name}: {} KiB, ok {ok}, {used} units (within budget: {within}), {best:?}",
            b.len() >> 10
        );
    }
}

/// docs/security.md once claimed that `parse_new` reads a compat-format cache's
/// extension offset without adding the embedded new header's base. Checked
/// against caches written by the real ldconfig (glibc 2.36, `-c compat` and
/// `-c new` over the same libraries, committed as fuzz seeds): the
/// extension directory offset and the section offsets are file offsets
/// (glibc's `cache_extension_load (cache_new, file_base, …)` adds them to
/// the start of the file), so the reader is right as it is; adding the
/// base, as the issue proposed, would break real compat caches. This test
/// pins that (it fails with the base added).
#[test]
fn compat_extension_offsets_are_file_offsets() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/ldcache");
    let compat = std::fs::read(seeds.join("ldconfig-compat")).unwrap();
    let new = std::fs::read(seeds.join("ldconfig-new-hwcaps")).unwrap();
    let u32_at = |b: &[u8], o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    // the embedded new header, 8-aligned after the old entries
    let base = (16 + 12 * u32_at(&compat, 12)).next_multiple_of(8);
    assert_eq!(&compat[base..base + 20], NEW_MAGIC);
    let ext = u32_at(&compat, base + 32);
    // the premise: the magic is at the file offset, not at base + offset
    assert_eq!(u32_at(&compat, ext) as u32, EXTENSION_MAGIC);
    assert_ne!(u32_at(&compat, base + ext) as u32, EXTENSION_MAGIC);
    // and the reader gets the same cache from both formats, glibc-hwcaps
    // name and generator included
    let c = LdCache::parse(&compat).unwrap();
    assert_eq!(c, LdCache::parse(&new).unwrap());
    assert_eq!(c.hwcaps, [b"x86-64-v3".to_vec()]);
    assert!(c
        .generator
        .as_deref()
        .unwrap()
        .starts_with(b"ldconfig (Debian GLIBC 2.36"));
}
