//! Tests of the loader-cache codec (core/src/ldcache.rs).
use super::*;

fn entry(flags: i32, key: &str, value: &str, hwcap: u64) -> Entry {
    Entry {
        flags,
        key: key.into(),
        value: value.into(),
        osversion: 0,
        hwcap,
    }
}

/// A small cache with every feature: glibc-hwcaps entries, a legacy
/// hwcap, two architectures, digit runs, shared suffixes, a generator.
fn sample() -> LdCache {
    let ext = |i: u64| DL_CACHE_HWCAP_EXTENSION | (2 << 32) | i;
    LdCache {
        entries: vec![
            entry(0x0303, "libfoo.so.1", "/usr/lib/libfoo.so.1", 0),
            entry(0x0303, "libfoo.so.10", "/usr/lib/libfoo.so.10", 0),
            entry(0x0003, "libfoo.so.1", "/usr/lib32/libfoo.so.1", 0),
            entry(
                0x0303,
                "libfoo.so.1",
                "/usr/lib/glibc-hwcaps/x86-64-v3/libfoo.so.1",
                ext(1),
            ),
            entry(
                0x0303,
                "libfoo.so.1",
                "/usr/lib/glibc-hwcaps/x86-64-v2/libfoo.so.1",
                ext(0),
            ),
            entry(
                0x0303,
                "libfoo.so.1",
                "/usr/lib/tls/libfoo.so.1",
                0x8000_0000_0000_0001,
            ),
            entry(0x0303, "libfoo.so.2", "/usr/lib/libfoo.so.2", 0),
            entry(0x0303, "libbar.so", "/usr/lib/libbar.so", 0),
        ],
        hwcaps: vec![b"x86-64-v2".to_vec(), b"x86-64-v3".to_vec()],
        generator: Some(b"ldconfig (test) stable release version 2.36".to_vec()),
    }
}

fn keys_and_values(c: &LdCache) -> Vec<(i32, String, String)> {
    c.entries
        .iter()
        .map(|e| {
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (e.flags, s(&e.key), s(&e.value))
        })
        .collect()
}

#[test]
fn to_bytes_orders_as_ldconfig() {
    let got = LdCache::parse(&sample().to_bytes()).unwrap();
    let v: Vec<_> = keys_and_values(&got)
        .into_iter()
        .map(|(f, k, v)| format!("{f:#x} {k} {v}"))
        .collect();
    assert_eq!(
        v,
        [
            // keys descending, digit runs by value: 10 > 2 > 1
            "0x303 libfoo.so.10 /usr/lib/libfoo.so.10",
            "0x303 libfoo.so.2 /usr/lib/libfoo.so.2",
            // same key: flags descending, glibc-hwcaps first by name,
            // then the most specific legacy hwcap, then hwcap 0
            "0x303 libfoo.so.1 /usr/lib/glibc-hwcaps/x86-64-v2/libfoo.so.1",
            "0x303 libfoo.so.1 /usr/lib/glibc-hwcaps/x86-64-v3/libfoo.so.1",
            "0x303 libfoo.so.1 /usr/lib/tls/libfoo.so.1",
            "0x303 libfoo.so.1 /usr/lib/libfoo.so.1",
            "0x3 libfoo.so.1 /usr/lib32/libfoo.so.1",
            "0x303 libbar.so /usr/lib/libbar.so",
        ]
    );
    assert_eq!(got.hwcaps, sample().hwcaps);
    assert_eq!(got.generator, sample().generator);
}

#[test]
fn libcmp_is_glibcs() {
    use Ordering::*;
    for (a, b, want) in [
        ("libfoo.so.10", "libfoo.so.9", Greater),
        ("libfoo.so.1", "libfoo.so.1", Equal),
        ("libfoo.so.01", "libfoo.so.1", Equal),
        ("libfoo.so.1.2", "libfoo.so.1", Greater),
        ("libfoo.so", "libfoo.so.1", Less),
        // a digit sorts after every other byte, even the end
        ("libc6", "libc.", Greater),
        ("lib1", "lib", Greater),
        ("libA", "liba", Less),
        ("", "", Equal),
        ("a", "", Greater),
        // wrapping like the C int arithmetic: 4294967297 wraps to 1
        ("x4294967297", "x1", Equal),
    ] {
        assert_eq!(libcmp(a.as_bytes(), b.as_bytes()), want, "{a} vs {b}");
        assert_eq!(
            libcmp(b.as_bytes(), a.as_bytes()),
            want.reverse(),
            "{b} vs {a}"
        );
    }
    // A byte >= 0x80 is a negative C char on x86 (signed char), so it
    // sorts before ASCII and before the end of the other string.
    let high = libcmp(b"a\xc3", b"a");
    if (0xc3u8 as c_char as i32) < 0 {
        assert_eq!(high, Ordering::Less);
    } else {
        assert_eq!(high, Ordering::Greater);
    }
}

#[test]
fn insert_replaces_every_equal_key_and_keeps_order() {
    let mut c = sample();
    c.sort_entries();
    c.insert(
        b"libfoo.so.01",
        b"/run/gpu-quota/driver/libfoo.so.1",
        0x0303,
    );
    let kv = keys_and_values(&c);
    // every libfoo.so.1 (any flags, any hwcaps) is gone, ours is in
    assert_eq!(
        kv.iter()
            .filter(|(_, k, _)| k.ends_with(".so.1") || k.ends_with(".so.01"))
            .count(),
        1
    );
    assert!(kv.contains(&(
        0x0303,
        "libfoo.so.01".into(),
        "/run/gpu-quota/driver/libfoo.so.1".into()
    )));
    // inserted where ldconfig would put it: parse(to_bytes) keeps order
    assert_eq!(LdCache::parse(&c.to_bytes()).unwrap(), c);
    let pos = kv.iter().position(|(_, k, _)| k == "libfoo.so.01").unwrap();
    assert_eq!(kv[pos - 1].1, "libfoo.so.2");
    assert_eq!(kv[pos + 1].1, "libbar.so");
    // into an empty cache
    let mut e = LdCache::default();
    e.insert(
        b"libcuda.so.1",
        b"/run/gpu-quota/driver/libcuda.so.1",
        0x0303,
    );
    let back = LdCache::parse(&e.to_bytes()).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.entries.len(), 1);
}

#[test]
fn strings_share_suffixes() {
    let mut c = LdCache::default();
    c.insert(b"libfoo.so.1", b"/usr/lib/libfoo.so.1", 0x0303);
    let b = c.to_bytes();
    // the key is the tail of the value: one copy of "libfoo.so.1"
    let text = &b[NEW_HEADER + NEW_ENTRY..];
    assert_eq!(text, b"/usr/lib/libfoo.so.1\0");
    let key = u32::from_ne_bytes(b[52..56].try_into().unwrap()) as usize;
    assert_eq!(&b[key..key + 11], b"libfoo.so.1");
}

#[test]
fn header_fields_are_glibcs() {
    let b = sample().to_bytes();
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    assert_eq!(&b[..20], NEW_MAGIC);
    assert_eq!(u32_at(20), 8);
    let len_strings = u32_at(24) as usize;
    assert_eq!(b[28], if cfg!(target_endian = "little") { 2 } else { 3 });
    let ext = u32_at(32) as usize;
    assert_eq!(ext, (48 + 8 * 24 + len_strings).next_multiple_of(4));
    assert_eq!(u32_at(ext), 0xeaa4_2174);
    assert_eq!(u32_at(ext + 4), 2);
    // generator section first, data after the hwcaps array
    assert_eq!(
        (u32_at(ext + 8), u32_at(ext + 16), u32_at(ext + 20)),
        (0, (ext + 40 + 8) as u32, 43)
    );
    assert_eq!(
        (u32_at(ext + 24), u32_at(ext + 32), u32_at(ext + 36)),
        (1, (ext + 40) as u32, 8)
    );
    assert_eq!(b.len(), ext + 40 + 8 + 43);
    // no extensions at all: extension_offset 0
    let mut plain = sample();
    plain.hwcaps.clear();
    plain.generator = None;
    plain.entries.retain(|e| !e.is_hwcaps_extension());
    let p = plain.to_bytes();
    assert_eq!(u32::from_ne_bytes(p[32..36].try_into().unwrap()), 0);
    assert_eq!(LdCache::parse(&p).unwrap().generator, None);
}

fn put32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
}
fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
}

/// An old-format cache: (flags, key, value) entries.
fn old_format(entries: &[(i32, &str, &str)]) -> Vec<u8> {
    let mut strings = Vec::new();
    let mut b = OLD_MAGIC.to_vec();
    b.push(0);
    b.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
    for (f, k, v) in entries {
        b.extend_from_slice(&f.to_ne_bytes());
        for s in [k, v] {
            b.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
        }
    }
    b.extend_from_slice(&strings);
    b
}

#[test]
fn old_and_compat_formats() {
    let old = old_format(&[
        (0x0303, "libold.so.1", "/lib/libold.so.1"),
        (1, "libx.so", "/lib/libx.so"),
    ]);
    let c = LdCache::parse(&old).unwrap();
    assert_eq!(
        keys_and_values(&c),
        [
            (0x0303, "libold.so.1".into(), "/lib/libold.so.1".into()),
            (1, "libx.so".into(), "/lib/libx.so".into())
        ]
    );
    assert!(c.hwcaps.is_empty() && c.generator.is_none());

    // compat: the old table, padded to 8, then a new cache whose
    // extension offsets are file offsets; only the new part is read
    let mut compat = old_format(&[(0x0303, "libold.so.1", "/lib/libold.so.1")]);
    let new_at = (16 + 12usize).next_multiple_of(NEW_ALIGN);
    compat.truncate(16 + 12);
    compat.resize(new_at, 0);
    let mut new = sample().to_bytes();
    let ext = get32(&new, 32) as usize;
    put32(&mut new, 32, (ext + new_at) as u32);
    for s in 0..2 {
        let o = ext + 8 + 16 * s + 8;
        let v = get32(&new, o);
        put32(&mut new, o, v + new_at as u32);
    }
    compat.extend_from_slice(&new);
    let want = LdCache::parse(&sample().to_bytes()).unwrap();
    assert_eq!(LdCache::parse(&compat).unwrap(), want);
}

/// Entry i's field at byte `field` in `sample().to_bytes()`.
fn field(i: usize, f: usize) -> usize {
    NEW_HEADER + NEW_ENTRY * i + f
}

#[test]
fn hostile_inputs_are_errors() {
    use LdCacheError as E;
    let good = sample().to_bytes();
    let n = 8usize;
    let str_start = NEW_HEADER + NEW_ENTRY * n;
    let len_strings = get32(&good, 24) as usize;
    let ext = get32(&good, 32) as usize;
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    type Case = (&'static str, Mutation, fn(&LdCacheError) -> bool);
    let cases: Vec<Case> = vec![
        ("empty", Box::new(|b| b.clear()), |e| {
            matches!(e, E::BadMagic)
        }),
        ("garbage", Box::new(|b| b[0] = b'x'), |e| {
            matches!(e, E::BadMagic)
        }),
        ("other version", Box::new(|b| b[19] = b'2'), |e| {
            matches!(e, E::BadMagic)
        }),
        ("magic only", Box::new(|b| b.truncate(20)), |e| {
            matches!(e, E::Truncated { .. })
        }),
        ("header cut", Box::new(|b| b.truncate(40)), |e| {
            matches!(e, E::Truncated { .. })
        }),
        ("huge count", Box::new(|b| put32(b, 20, u32::MAX)), |e| {
            matches!(e, E::TooMany { .. })
        }),
        (
            "count past end",
            Box::new(|b| {
                let n = (b.len() / 24) as u32;
                put32(b, 20, n)
            }),
            |e| matches!(e, E::TooMany { .. }),
        ),
        (
            "strings past end",
            Box::new(|b| put32(b, 24, u32::MAX)),
            |e| matches!(e, E::Truncated { .. }),
        ),
        (
            "key past end",
            Box::new(|b| put32(b, field(0, 4), u32::MAX)),
            |e| matches!(e, E::BadOffset { .. }),
        ),
        (
            "value past strings",
            Box::new(move |b| put32(b, field(3, 8), (str_start + len_strings) as u32)),
            |e| matches!(e, E::BadOffset { .. }),
        ),
        (
            "key in header",
            Box::new(|b| put32(b, field(1, 4), 0)),
            |e| matches!(e, E::BadOffset { .. }),
        ),
        (
            "key in entries",
            Box::new(|b| put32(b, field(1, 4), field(2, 0) as u32)),
            |e| matches!(e, E::BadOffset { .. }),
        ),
        (
            "no final NUL",
            Box::new(move |b| b[str_start + len_strings - 1] = b'x'),
            |e| matches!(e, E::Unterminated { .. }),
        ),
        (
            "strings shrunk under the last NUL",
            Box::new(|b| {
                let l = get32(b, 24);
                put32(b, 24, l - 1)
            }),
            |e| matches!(e, E::Unterminated { .. } | E::BadOffset { .. }),
        ),
        (
            "empty key",
            Box::new(move |b| put32(b, field(0, 4), (str_start + len_strings - 1) as u32)),
            |e| matches!(e, E::EmptyString { .. }),
        ),
        (
            "wrong endian",
            Box::new(|b| b[28] = if cfg!(target_endian = "little") { 3 } else { 2 }),
            |e| matches!(e, E::WrongEndian { .. }),
        ),
        ("endian invalid", Box::new(|b| b[28] = 1), |e| {
            matches!(e, E::WrongEndian { .. })
        }),
        (
            "ext misaligned",
            Box::new(move |b| put32(b, 32, ext as u32 + 1)),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "ext past end",
            Box::new(|b| put32(b, 32, 0xffff_fff0)),
            |e| matches!(e, E::Truncated { .. }),
        ),
        (
            "ext bad magic",
            Box::new(move |b| put32(b, ext, 0x1234_5678)),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "ext huge count",
            Box::new(move |b| put32(b, ext + 4, u32::MAX)),
            |e| matches!(e, E::TooMany { .. }),
        ),
        (
            "ext data past end",
            Box::new(move |b| put32(b, ext + 8 + 12, 1 << 20)),
            |e| matches!(e, E::Truncated { .. }),
        ),
        (
            "ext data offset wraps",
            Box::new(move |b| {
                put32(b, ext + 8 + 8, u32::MAX);
                put32(b, ext + 8 + 12, 2)
            }),
            |e| matches!(e, E::Truncated { .. }),
        ),
        (
            "hwcaps size not x4",
            Box::new(move |b| put32(b, ext + 24 + 12, 6)),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "hwcaps empty",
            Box::new(move |b| put32(b, ext + 24 + 12, 0)),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "hwcaps misaligned",
            Box::new(move |b| {
                let o = get32(b, ext + 24 + 8);
                put32(b, ext + 24 + 8, o + 2)
            }),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "hwcaps name past end",
            Box::new(move |b| {
                let o = get32(b, ext + 24 + 8) as usize;
                put32(b, o, u32::MAX)
            }),
            |e| matches!(e, E::BadOffset { .. }),
        ),
        (
            "hwcaps unsorted",
            Box::new(move |b| {
                let o = get32(b, ext + 24 + 8) as usize;
                let (x, y) = (get32(b, o), get32(b, o + 4));
                put32(b, o, y);
                put32(b, o + 4, x)
            }),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "hwcaps duplicate",
            Box::new(move |b| {
                let o = get32(b, ext + 24 + 8) as usize;
                let x = get32(b, o);
                put32(b, o + 4, x)
            }),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "two generators",
            Box::new(move |b| put32(b, ext + 24, 0)),
            |e| matches!(e, E::BadExtension { .. }),
        ),
        (
            "hwcaps index out of range",
            Box::new(|b| put32(b, field(2, 16), 7)),
            |e| matches!(e, E::BadHwcapsIndex { index: 7, .. }),
        ),
    ];
    for (name, mutate, want) in cases {
        let mut b = good.clone();
        mutate(&mut b);
        match LdCache::parse(&b) {
            Err(e) => assert!(want(&e), "{name}: unexpected error {e:?}"),
            Ok(c) => panic!("{name}: accepted {c:?}"),
        }
    }
    // the sample's third sorted entry is a glibc-hwcaps one (see above)
    assert!(LdCache::parse(&good).unwrap().entries[2].is_hwcaps_extension());

    // every strict prefix of a valid cache is refused
    for cut in 0..good.len() {
        assert!(
            LdCache::parse(&good[..cut]).is_err(),
            "prefix {cut} accepted"
        );
    }
    // too large, before looking at anything else
    let mut big = good.clone();
    big.resize(MAX_CACHE_BYTES + 1, 0);
    assert!(matches!(LdCache::parse(&big), Err(E::TooLarge { .. })));
    // old format: huge count, string past end, missing NUL
    let mut old = old_format(&[(3, "a", "b")]);
    put32(&mut old, 12, u32::MAX);
    assert!(matches!(LdCache::parse(&old), Err(E::TooMany { .. })));
    let mut old = old_format(&[(3, "a", "b")]);
    put32(&mut old, 20, 1000);
    assert!(matches!(LdCache::parse(&old), Err(E::BadOffset { .. })));
    let mut old = old_format(&[(3, "a", "b")]);
    *old.last_mut().unwrap() = b'c';
    assert!(matches!(LdCache::parse(&old), Err(E::Unterminated { .. })));
    assert!(matches!(
        LdCache::parse(b"ld.so-1.7.0\0\x01"),
        Err(E::Truncated { .. })
    ));
}

/// One long string, every entry pointing at it (or into it): a naive
/// reader copies count x length bytes. Must be refused quickly.
#[test]
fn shared_strings_cannot_blow_up() {
    use LdCacheError as E;
    let n = MAX_ENTRIES;
    let str_start = NEW_HEADER + NEW_ENTRY * n;
    let mut b = vec![0u8; str_start];
    b[..20].copy_from_slice(NEW_MAGIC);
    put32(&mut b, 20, n as u32);
    b.extend_from_slice(&[b'a'; MAX_STRING]);
    b.push(0);
    put32(&mut b, 24, (MAX_STRING + 1) as u32);
    for i in 0..n {
        // distinct offsets into the same run defeat a per-offset memo
        put32(&mut b, field(i, 0), 0x0303);
        put32(&mut b, field(i, 4), (str_start + i % 64) as u32);
        put32(&mut b, field(i, 8), str_start as u32);
    }
    let t = std::time::Instant::now();
    let r = LdCache::parse(&b);
    assert!(
        matches!(
            r,
            Err(E::TooMany {
                what: "bytes of decoded strings",
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );

    // a string longer than PATH_MAX
    let mut c = LdCache::default();
    c.insert(b"libx.so", &vec![b'/'; MAX_STRING + 1], 3);
    assert!(matches!(
        LdCache::parse(&c.to_bytes()),
        Err(E::StringTooLong { .. })
    ));
    let mut c = LdCache::default();
    c.insert(b"libx.so", &vec![b'/'; MAX_STRING], 3);
    assert!(LdCache::parse(&c.to_bytes()).is_ok());
}

#[test]
fn elf_flags() {
    fn hdr(class: u8, data: u8, machine: u16, flags: u32) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = class;
        h[5] = data;
        let be = data == 2;
        let m = if be {
            machine.to_be_bytes()
        } else {
            machine.to_le_bytes()
        };
        h[18..20].copy_from_slice(&m);
        let f = if be {
            flags.to_be_bytes()
        } else {
            flags.to_le_bytes()
        };
        let at = if class == 2 { 48 } else { 36 };
        h[at..at + 4].copy_from_slice(&f);
        h
    }
    for (h, want) in [
        (hdr(2, 1, 62, 0), Some(0x0303)),
        (hdr(1, 1, 62, 0), Some(0x0803)),
        (hdr(2, 1, 183, 0), Some(0x0a03)),
        (hdr(1, 1, 3, 0), Some(0x0003)),
        (hdr(2, 1, 3, 0), None),
        (hdr(1, 1, 40, 0x0500_0400), Some(0x0903)),
        (hdr(1, 1, 40, 0x0500_0200), Some(0x0b03)),
        (hdr(1, 1, 40, 0x0400_0400), Some(0x0003)),
        (hdr(2, 2, 21, 0), Some(0x0503)),
        (hdr(2, 1, 21, 2), Some(0x0503)),
        (hdr(2, 2, 22, 0), Some(0x0403)),
        (hdr(2, 2, 43, 0), Some(0x0103)),
        (hdr(2, 1, 50, 0), Some(0x0203)),
        (hdr(2, 1, 243, 0x5), Some(0x1003)),
        (hdr(2, 1, 243, 0x1), Some(0x0f03)),
        (hdr(2, 1, 243, 0x2), None),
        (hdr(2, 1, 243, 0x10), None),
        (hdr(1, 2, 8, 0x20), Some(0x0603)),
        (hdr(1, 2, 8, 0x420), Some(0x0d03)),
        (hdr(1, 2, 8, 0x400), Some(0x0c03)),
        (hdr(1, 2, 8, 0), Some(0x0003)),
        (hdr(2, 2, 8, 0), Some(0x0703)),
        (hdr(2, 2, 8, 0x400), Some(0x0e03)),
        (hdr(2, 1, 0x1234, 0), None),
        (hdr(3, 1, 62, 0), None),
        (hdr(2, 3, 62, 0), None),
        (hdr(2, 1, 62, 0)[..30].to_vec(), None),
        (b"\x7fELF".to_vec(), None),
        (b"#!/bin/sh\n".to_vec(), None),
        (Vec::new(), None),
    ] {
        assert_eq!(elf_cache_flags(&h), want, "{:?}", &h[..h.len().min(20)]);
    }
    // a real library of this machine
    let libc = std::fs::read("/proc/self/exe").unwrap();
    let want = if cfg!(target_arch = "x86_64") {
        Some(0x0303)
    } else if cfg!(target_arch = "aarch64") {
        Some(0x0a03)
    } else {
        elf_cache_flags(&libc)
    };
    assert_eq!(elf_cache_flags(&libc[..64]), want);
}

mod props {
    use super::*;
    use proptest::collection::{btree_set, vec};
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = Vec<u8>> {
        "lib[a-c]{1,3}(\\.so(\\.[0-9]{1,3}){0,3})?".prop_map(String::into_bytes)
    }

    fn cache() -> impl Strategy<Value = LdCache> {
        (
            btree_set("[a-z0-9-]{1,10}".prop_map(String::into_bytes), 0..4),
            vec(
                (
                    prop_oneof![Just(0x0303), Just(0x0003), Just(1), any::<i32>()],
                    name(),
                    "/[a-z0-9./]{0,30}".prop_map(String::into_bytes),
                    any::<u32>(),
                    (0u8..3, any::<u64>(), 0u64..1024, 0u64..8),
                ),
                0..40,
            ),
            proptest::option::of(vec(any::<u8>(), 0..60)),
        )
            .prop_map(|(hw, entries, generator)| {
                let hwcaps: Vec<Vec<u8>> = hw.into_iter().collect();
                let entries = entries
                    .into_iter()
                    .map(|(flags, key, value, osversion, (kind, h, isa, i))| {
                        let hwcap = match kind {
                            1 if is_extension(h) => h & !DL_CACHE_HWCAP_EXTENSION,
                            1 => h,
                            2 if !hwcaps.is_empty() => {
                                DL_CACHE_HWCAP_EXTENSION | isa << 32 | (i % hwcaps.len() as u64)
                            }
                            _ => 0,
                        };
                        let mut value = value;
                        value.extend_from_slice(&key);
                        Entry {
                            flags,
                            key,
                            value,
                            osversion,
                            hwcap,
                        }
                    })
                    .collect();
                let mut c = LdCache {
                    entries,
                    hwcaps,
                    generator,
                };
                c.sort_entries();
                c
            })
    }

    proptest! {
        #[test]
        fn round_trip(c in cache()) {
            let bytes = c.to_bytes();
            prop_assert_eq!(LdCache::parse(&bytes).unwrap(), c.clone());
            // sorting a sorted cache changes nothing; order of input
            // entries does not change the bytes up to ties
            let mut rev = c.clone();
            rev.entries.reverse();
            let back = LdCache::parse(&rev.to_bytes()).unwrap();
            for w in back.entries.windows(2) {
                prop_assert!(back.compare(&w[0], &w[1]) != Ordering::Greater);
            }
        }

        /// The precomputed sort keys order entries exactly as
        /// ldconfig's compare() (the reference), on hostile shapes:
        /// digit runs, leading zeros, high bytes, NULs inside, equal
        /// keys, out-of-range and duplicate glibc-hwcaps names.
        #[test]
        fn sort_keys_agree_with_compare(
            entries in vec((
                prop_oneof![Just(0x0303), Just(0x0003), any::<i32>()],
                vec(prop_oneof![Just(b'1'), Just(b'0'), Just(b'9'), Just(b'.'), Just(b'/'), Just(b':'), Just(b'a'), Just(0x7fu8), Just(0x80u8), Just(0xc3u8), Just(0xffu8), Just(0u8)], 0..8),
                prop_oneof![Just(0u64), any::<u64>(), (0u64..6, 0u64..1024).prop_map(|(i, isa)| DL_CACHE_HWCAP_EXTENSION | isa << 32 | i)],
            ), 0..24),
            hwcaps in vec(vec(prop_oneof![Just(b'x'), Just(b'y'), Just(0u8)], 0..4), 0..4),
        ) {
            let entries: Vec<Entry> = entries.into_iter().map(|(flags, key, hwcap)| Entry { flags, key, value: b"/v".to_vec(), osversion: 0, hwcap }).collect();
            let c = LdCache { entries, hwcaps, generator: None };
            let keys = c.sort_keys(&mut Work::unlimited()).unwrap();
            for i in 0..c.entries.len() {
                for j in 0..c.entries.len() {
                    prop_assert_eq!(
                        keys[i].cmp(&keys[j]),
                        c.compare(&c.entries[i], &c.entries[j]),
                        "{:?} vs {:?} with hwcaps {:?}", c.entries[i], c.entries[j], c.hwcaps
                    );
                }
            }
            // and libcmp_key is libcmp
            for a in &c.entries {
                for b in &c.entries {
                    let (ka, kb) = (c_str(&a.key), c_str(&b.key));
                    prop_assert_eq!(libcmp_key(ka).cmp(&libcmp_key(kb)), libcmp(ka, kb));
                }
            }
        }

        #[test]
        fn to_bytes_never_panics(
            entries in vec((any::<i32>(), vec(any::<u8>(), 0..12), vec(any::<u8>(), 0..12), any::<u32>(), any::<u64>()), 0..20),
            hwcaps in vec(vec(any::<u8>(), 0..6), 0..4),
            generator in proptest::option::of(vec(any::<u8>(), 0..20)),
        ) {
            let entries = entries.into_iter().map(|(flags, key, value, osversion, hwcap)| Entry { flags, key, value, osversion, hwcap }).collect();
            let c = LdCache { entries, hwcaps, generator };
            let b = c.to_bytes();
            let _ = LdCache::parse(&b);
        }

        #[test]
        fn parse_never_panics_on_mutations(
            edits in vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut b = sample().to_bytes();
            for (i, v) in edits {
                let i = i.index(b.len());
                b[i] = v;
            }
            let n = cut.index(b.len() + 1);
            if let Ok(c) = LdCache::parse(&b[..n]) {
                // what parses, writes and reads back to the same thing
                let mut s = c.clone();
                s.sort_entries();
                prop_assert_eq!(LdCache::parse(&c.to_bytes()).unwrap(), s);
            }
        }

        #[test]
        fn parse_never_panics(b in vec(any::<u8>(), 0..200)) {
            let _ = LdCache::parse(&b);
            let mut m = NEW_MAGIC.to_vec();
            m.extend_from_slice(&b);
            let _ = LdCache::parse(&m);
            let mut o = OLD_MAGIC.to_vec();
            o.extend_from_slice(&b);
            let _ = LdCache::parse(&o);
        }
    }
}
