//! Inputs the fuzzers (fuzz/, docs/fuzzing.md) found that break modules
//! outside core::ldcache. Each test fails on the code it was found against
//! and states what the code must do instead.
use gpuquota_core::{request::EnvRequests, usage, Request};
use serde_json::{json, Map, Value};

fn ann(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// fuzz target `request`: `gpu` (annotation or GPU_QUOTA_GPU) whose 4th
/// byte is inside a multi-byte character. request.rs slices `p[..4]` to
/// look for "GPU-"/"MIG-", which panics ("byte index 4 is not a char
/// boundary") in the runtime shim on `create`. Must be a RequestError.
#[test]
fn regression_gpu_value_with_multibyte_char_at_byte_4() {
    for value in ["abcé", "abcé0", "GPUé-1", "0,abc€"] {
        let from_ann = std::panic::catch_unwind(|| {
            Request::from_parts(
                Some(&ann(json!({"vram": "1g", "gpu": value}))),
                &[],
                EnvRequests::Ignored,
            )
        });
        let env = [
            "GPU_QUOTA_VRAM=1g".to_string(),
            format!("GPU_QUOTA_GPU={value}"),
        ];
        let from_env =
            std::panic::catch_unwind(|| Request::from_parts(None, &env, EnvRequests::Allowed));
        for (how, r) in [("annotation", from_ann), ("env", from_env)] {
            match r {
                Ok(Err(e)) => assert!(e.origin.contains("gpu") || e.origin.contains("GPU"), "{e}"),
                Ok(Ok(r)) => panic!("gpu={value:?} ({how}) accepted: {r:?}"),
                Err(_) => panic!("gpu={value:?} ({how}) panicked instead of being refused"),
            }
        }
    }
}

/// A usage file header (docs/interceptor.md): magic, version, slot_count,
/// dev_count, slot_size, used_off, slots offset, high-water mark.
fn usage_header(
    slot_count: u32,
    dev_count: u32,
    slot_size: u32,
    used_off: u32,
    slots: u64,
    high: u32,
) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[0..8].copy_from_slice(&usage::MAGIC.to_le_bytes());
    b[8..12].copy_from_slice(&usage::VERSION.to_le_bytes());
    b[16..20].copy_from_slice(&slot_count.to_le_bytes());
    b[20..24].copy_from_slice(&dev_count.to_le_bytes());
    b[24..28].copy_from_slice(&slot_size.to_le_bytes());
    b[28..32].copy_from_slice(&used_off.to_le_bytes());
    b[32..40].copy_from_slice(&slots.to_le_bytes());
    b[40..44].copy_from_slice(&high.to_le_bytes());
    b
}

/// fuzz target `usage`: slot_size 0 (or any slot table overlapping
/// itself) makes every slot index read the same bytes, so a 64-byte file
/// reports `high` processes (here 16384; with high = slot_count = u32::MAX
/// `gpu-quota ls`/`metrics` spin for ~4 billion iterations on one
/// container-written file). A slot table that does not fit the file, or
/// whose slots alias, must be refused (None).
#[test]
fn regression_usage_zero_slot_size_counts_one_slot_many_times() {
    // slots at offset 0: the "owner" read is the magic, never 0
    let b = usage_header(1 << 20, 0, 0, 0, 0, 16384);
    let u = usage::parse(&b);
    let processes = u.as_ref().map_or(0, |u| u.processes);
    assert!(
        processes <= 1,
        "a 64-byte usage file reported {processes} processes: {u:?}"
    );
}

/// fuzz target `usage` (debug builds, as `cargo test` and the fuzzers
/// build): a slots offset or used_off near u64::MAX overflows
/// `slots + i * slot_size` / `o + 8` ("attempt to add with overflow").
/// Offsets outside the file must give None, never a panic.
#[test]
fn regression_usage_offsets_overflow() {
    for (slots, used_off, dev_count) in [(u64::MAX, 0, 1), (u64::MAX - 3, 0, 0)] {
        let b = usage_header(4, dev_count, 16, used_off, slots, 4);
        let r = std::panic::catch_unwind(|| usage::parse(&b));
        assert!(
            r.is_ok(),
            "usage::parse panicked on slots={slots:#x} used_off={used_off:#x}"
        );
    }
}

/// fuzz target `usage` (26 `timeout-*` artifacts in 10 minutes): the same
/// aliasing with a high-water mark of ~4 billion keeps `usage::parse` busy
/// for minutes on a 64-byte file. Must answer at once.
#[test]
fn regression_usage_huge_high_water_mark_is_bounded() {
    let b = usage_header(u32::MAX, 0, 0, 0, 0, u32::MAX);
    let (tx, rx) = std::sync::mpsc::channel();
    // A thread, so that a failure is reported instead of hanging the run.
    std::thread::spawn(move || {
        let _ = tx.send(usage::parse(&b).map(|u| u.processes));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(5)) {
        Ok(processes) => assert!(processes.unwrap_or(0) <= 1, "{processes:?} processes"),
        Err(_) => panic!("usage::parse of a 64-byte file still running after 5 s"),
    }
}
