//! LdCache::parse of arbitrary bytes; what parses must write and read back
//! to the same cache, and the written bytes must be a fixed point. The
//! hook's whole step (`rewrite`) is never refused for work on a cache the
//! parser accepts (the size limits imply the work budget), and gives the
//! bytes insert + to_bytes give. scripts/fuzz.sh runs this with a 1 s
//! per-input limit (-timeout=1), so a slow input is a finding too.
#![no_main]
use gpuquota_core::ldcache::{elf_cache_flags, libcmp, rewrite, LdCache, Lib, Work};
use libfuzzer_sys::fuzz_target;
use std::cmp::Ordering;

fuzz_target!(|b: &[u8]| {
    let _ = elf_cache_flags(b);
    let Ok(c) = LdCache::parse(b) else { return };
    let lib = Lib {
        key: b"libcuda.so.1".to_vec(),
        path: b"/run/gpu-quota/driver/libcuda.so.1".to_vec(),
        flags: 0x0303,
    };
    let mut work = Work::budget();
    let step = rewrite(Some(b), std::slice::from_ref(&lib), &mut work)
        .expect("a cache that parses is rewritten within the work budget");
    let mut by_hand = c.clone();
    by_hand.insert(&lib.key, &lib.path, lib.flags);
    assert_eq!(step, by_hand.to_bytes(), "rewrite differs from insert + to_bytes");

    let bytes = c.to_bytes();
    let back = LdCache::parse(&bytes).expect("our own output must parse");
    let mut sorted = c.clone();
    sorted.sort_entries();
    assert_eq!(back, sorted);
    assert_eq!(back.to_bytes(), bytes, "to_bytes is not a fixed point");

    // inserting a driver library: present exactly once, found by the
    // loader's comparison, still round-trips
    let mut ins = back.clone();
    ins.insert(
        b"libcuda.so.1",
        b"/run/gpu-quota/driver/libcuda.so.1",
        0x0303,
    );
    let again = LdCache::parse(&ins.to_bytes()).expect("parse after insert");
    assert_eq!(again, ins);
    let hits: Vec<_> = again
        .entries
        .iter()
        .filter(|e| libcmp(&e.key, b"libcuda.so.1") == Ordering::Equal)
        .collect();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].value, b"/run/gpu-quota/driver/libcuda.so.1");
    // everything else is kept
    assert_eq!(
        again.entries.len(),
        1 + back
            .entries
            .iter()
            .filter(|e| libcmp(&e.key, b"libcuda.so.1") != Ordering::Equal)
            .count()
    );
});
