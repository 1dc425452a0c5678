//! Configuration parsing (pure logic, unit-tested). The size grammar, the
//! hook's `limits` file and GPU UUIDs are gpuquota_formats' (one definition
//! shared with the host), and so are the context-cost figures.

pub use gpuquota_formats::limits::{
    parse as parse_limits, parse_u64, parse_uuid, Limits, MAX_GPUS,
};
pub use gpuquota_formats::size::Size;

/// Parse a size from the environment (gpuquota_formats::size: the host's
/// grammar; `0` is a size here, the caller decides what it means).
pub fn parse_size(s: &[u8]) -> Option<Size> {
    gpuquota_formats::size::parse_size(s).ok()
}

/// The context charge when nothing says otherwise, the bound on a cached
/// one, and the reader of the host's context-cost cache
/// (`<ledger_dir>/context-cost.json`, written by the hook): gpuquota_formats'.
pub use gpuquota_formats::ctxcost::{
    max_charge_from_cache as ctxcost_from_cache, BUILTIN_DEFAULT_BYTES as BUILTIN_CTX_OVERHEAD,
};

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
        // the limits file names the GPUs; their sizes are the grant's
        let limits = parse_limits(
            b"version=2\ncontext_overhead_bytes=1024\ngpus=GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9\n",
        );
        assert_eq!(
            (limits.version, limits.context_overhead_bytes, limits.ngpus),
            (2, Some(1024), 1)
        );
    }
}
