//! gpuquota_core::usage::parse of arbitrary bytes (a container-writable
//! file read by `gpu-quota ls` / `metrics`).
#![no_main]
use gpuquota_core::usage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|b: &[u8]| {
    let r = usage::parse(b);
    if let Some(u) = &r {
        assert_eq!(u.used.len(), u.limit.len());
        assert!(u.used.len() <= 64, "{} devices", u.used.len());
        // one slot per process, each slot at least 8 bytes of the file
        assert!(
            u.processes as usize <= b.len() / 8,
            "{} processes in {} bytes",
            u.processes,
            b.len()
        );
    }
    // deterministic
    assert_eq!(r, usage::parse(b));
    // a file without the magic is never a usage file
    if !b.starts_with(&usage::MAGIC.to_le_bytes()) {
        assert!(r.is_none());
    }
});
