//! The per-process CUDA context charge: the figures and the cache file the
//! host measures and writes (core::ctxcost, `<ledger_dir>/context-cost.json`)
//! and libgpuquota.so reads when it runs standalone (no `limits` file).
//!
//! The cache is JSON (`{"version":1,"entries":[{…,"charge_bytes":N,…}]}`),
//! written by serde on the host; the interceptor has no JSON parser and
//! takes the largest plausible `"charge_bytes": N` it finds
//! ([`max_charge_from_cache`]). core's tests write a cache and read it back
//! through this function.

/// Added to a measured context for lazily loaded modules.
pub const MARGIN_BYTES: u64 = 96 << 20;
/// No measurement and no cache: the H200 figure, 520 MiB of context + the
/// margin.
pub const BUILTIN_DEFAULT_BYTES: u64 = 616 << 20;
/// A measured context above this is not believed.
pub const MAX_PLAUSIBLE_BYTES: u64 = 8 << 30;
/// The cache's file name in the ledger directory.
pub const CACHE_FILE: &str = "context-cost.json";
/// The JSON key of an entry's charge.
pub const CHARGE_KEY: &str = "charge_bytes";

/// The largest `charge_bytes` in the cache text that is above 0 and at most
/// [`MAX_PLAUSIBLE_BYTES`], if any. One pass over the text (the caller caps
/// its length); no allocation.
pub fn max_charge_from_cache(text: &[u8]) -> Option<u64> {
    let key = CHARGE_KEY.as_bytes();
    let ws = |b: u8| b == b' ' || b == b'\t' || b == b'\n' || b == b'\r';
    let mut best: Option<u64> = None;
    let mut i = 0;
    while i + key.len() + 2 <= text.len() {
        if text[i] != b'"'
            || &text[i + 1..i + 1 + key.len()] != key
            || text[i + 1 + key.len()] != b'"'
        {
            i += 1;
            continue;
        }
        i += key.len() + 2;
        while i < text.len() && ws(text[i]) {
            i += 1;
        }
        if i >= text.len() || text[i] != b':' {
            continue;
        }
        i += 1;
        while i < text.len() && ws(text[i]) {
            i += 1;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        if let Some(v) = crate::limits::parse_u64(&text[start..i]) {
            if v > 0 && v <= MAX_PLAUSIBLE_BYTES && best.map_or(true, |b| v > b) {
                best = Some(v);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_text() {
        let t = br#"{"version":1,"entries":[{"key":{"driver_version":"580.159.04","gpu_name":"NVIDIA H200"},"charge_bytes":645922816,"measured":null,"error":null,"at_unix":1}]}"#;
        assert_eq!(max_charge_from_cache(t), Some(645922816));
        let t =
            b"{\"charge_bytes\" : 100,\n \"charge_bytes\":\t300, \"charge_bytes\": 99999999999999}";
        assert_eq!(max_charge_from_cache(t), Some(300));
        assert_eq!(max_charge_from_cache(b"{}"), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\": 0"), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\""), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\": x"), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\":"), None);
        let at_bound = std::format!("\"charge_bytes\": {MAX_PLAUSIBLE_BYTES}");
        assert_eq!(
            max_charge_from_cache(at_bound.as_bytes()),
            Some(MAX_PLAUSIBLE_BYTES)
        );
        assert_eq!(BUILTIN_DEFAULT_BYTES, (520 << 20) + MARGIN_BYTES);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(t in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Some(v) = max_charge_from_cache(&t) {
                proptest::prop_assert!(v > 0 && v <= MAX_PLAUSIBLE_BYTES);
            }
        }
    }
}
