//! Configuration parsing (pure logic, unit-tested). The size grammar, the
//! hook's `limits` file and GPU UUIDs are gpuquota_formats' (one definition
//! shared with the host); the host's context-cost cache is read here.

pub use gpuquota_formats::limits::{parse as parse_limits, parse_u64, parse_uuid, Limits, MAX_GPUS};
pub use gpuquota_formats::size::Size;

/// Parse a size from the environment (gpuquota_formats::size: the host's
/// grammar; `0` is a size here, the caller decides what it means).
pub fn parse_size(s: &[u8]) -> Option<Size> {
    gpuquota_formats::size::parse_size(s).ok()
}

/// The context charge when nothing says otherwise (core::ctxcost's
/// BUILTIN_DEFAULT_BYTES: the H200's 520 MiB context + 96 MiB margin).
pub const BUILTIN_CTX_OVERHEAD: u64 = 616 << 20;
/// A cached charge above this is not believed (core::ctxcost).
pub const MAX_PLAUSIBLE_CTX: u64 = 8 << 30;

/// The host's context-cost cache (`<ledger_dir>/context-cost.json`, written
/// by the hook): the largest `charge_bytes` of its entries, if any is
/// plausible. One pass over at most the buffer given (the caller caps it).
pub fn ctxcost_from_cache(text: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"charge_bytes\"";
    let mut best: Option<u64> = None;
    let mut i = 0;
    while i + KEY.len() <= text.len() {
        if &text[i..i + KEY.len()] != KEY {
            i += 1;
            continue;
        }
        i += KEY.len();
        while i < text.len() && (text[i] == b' ' || text[i] == b'\t' || text[i] == b'\n' || text[i] == b'\r') {
            i += 1;
        }
        if i >= text.len() || text[i] != b':' {
            continue;
        }
        i += 1;
        while i < text.len() && (text[i] == b' ' || text[i] == b'\t' || text[i] == b'\n' || text[i] == b'\r') {
            i += 1;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        if let Some(v) = parse_u64(&text[start..i]) {
            if v > 0 && v <= MAX_PLAUSIBLE_CTX && best.map_or(true, |b| v > b) {
                best = Some(v);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;
    /// The environment's sizes are the host's grammar; zero is a size
    /// (GPU_QUOTA_VRAM=0: no device memory; GPU_QUOTA_CONTEXT_OVERHEAD=0:
    /// no charge).
    #[test]
    fn env_sizes() {
        assert_eq!(parse_size(b" 8GiB\n"), Some(Size::Bytes(8 * G)));
        assert_eq!(parse_size(b"0.1GB"), Some(Size::Bytes(100_000_000)));
        assert_eq!(parse_size(b"12.5%"), Some(Size::Ppm(125_000)));
        assert_eq!(Size::Ppm(250_000).resolve(100 * G), 25 * G);
        assert_eq!(parse_size(b"0"), Some(Size::Bytes(0)));
        assert_eq!(parse_size(b"0%"), None);
        assert_eq!(parse_size(b"8x"), None);
        let limits = parse_limits(b"vram_bytes=4294967296\ngpus=GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9\n");
        assert_eq!((limits.vram_bytes, limits.ngpus), (Some(4 * G), 1));
    }
    #[test]
    fn ctxcost_cache() {
        let t = br#"{"version":1,"entries":[{"key":{"driver_version":"580.159.04","gpu_name":"NVIDIA H200"},"charge_bytes":645922816,"measured":null,"error":null,"at_unix":1}]}"#;
        assert_eq!(ctxcost_from_cache(t), Some(645922816));
        let t = b"{\"charge_bytes\" : 100,\n \"charge_bytes\":\t300, \"charge_bytes\": 99999999999999}";
        assert_eq!(ctxcost_from_cache(t), Some(300));
        assert_eq!(ctxcost_from_cache(b"{}"), None);
        assert_eq!(ctxcost_from_cache(b"\"charge_bytes\": 0"), None);
        assert_eq!(ctxcost_from_cache(b"\"charge_bytes\""), None);
        assert_eq!(ctxcost_from_cache(b"\"charge_bytes\": x"), None);
    }
}
