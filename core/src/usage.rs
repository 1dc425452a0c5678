//! Host-side reader of a container's `usage` file (format owned by
//! libgpuquota.so, documented in docs/interceptor.md and
//! interceptor/include/gpuquota_usage.h). For monitoring only: a snapshot
//! read without the container's atomics may be a few bytes stale.
use std::path::Path;

pub const MAGIC: u64 = 0x4154_4F55_5155_5047; // "GPUQUOTA"
pub const VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    /// Bytes in use per CUDA device index (inside the container).
    pub used: Vec<u64>,
    /// Slice per device as the interceptor saw it (0 = not known yet).
    pub limit: Vec<u64>,
    /// Processes holding a slot.
    pub processes: u32,
    /// Allocations refused so far.
    pub refusals: u64,
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Parse a usage file's bytes; None when it is empty (no CUDA process ran
/// yet) or not a usage file of a version we know.
pub fn parse(b: &[u8]) -> Option<Usage> {
    if u64_at(b, 0)? != MAGIC || u32_at(b, 8)? != VERSION {
        return None;
    }
    let slot_count = u32_at(b, 16)? as usize;
    let dev_count = (u32_at(b, 20)? as usize).min(64);
    let slot_size = u32_at(b, 24)? as usize;
    let used_off = u32_at(b, 28)? as usize;
    let slots = u64_at(b, 32)? as usize;
    let high = (u32_at(b, 40)? as usize).min(slot_count);
    let mut u = Usage {
        used: vec![0; dev_count],
        limit: (0..dev_count)
            .map(|d| u64_at(b, 48 + 8 * d).unwrap_or(0))
            .collect(),
        processes: 0,
        refusals: u64_at(b, 504).unwrap_or(0),
    };
    for i in 0..high {
        let s = slots + i * slot_size;
        let owner = u64_at(b, s)?;
        if owner == 0 || owner == u64::MAX {
            continue;
        }
        u.processes += 1;
        for d in 0..dev_count {
            u.used[d] = u.used[d].saturating_add(u64_at(b, s + used_off + 8 * d)?);
        }
    }
    Some(u)
}

pub fn read(path: &Path) -> Option<Usage> {
    parse(&std::fs::read(path).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_layout() {
        let mut b = vec![0u8; 4096 + 4 * 256];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[16..20].copy_from_slice(&4u32.to_le_bytes());
        b[20..24].copy_from_slice(&16u32.to_le_bytes());
        b[24..28].copy_from_slice(&256u32.to_le_bytes());
        b[28..32].copy_from_slice(&64u32.to_le_bytes());
        b[32..40].copy_from_slice(&4096u64.to_le_bytes());
        b[40..44].copy_from_slice(&3u32.to_le_bytes());
        b[48..56].copy_from_slice(&(4u64 << 30).to_le_bytes());
        for (slot, owner, used) in [(0usize, 7u64, 100u64), (1, 0, 999), (2, 9, 50)] {
            let s = 4096 + slot * 256;
            b[s..s + 8].copy_from_slice(&owner.to_le_bytes());
            b[s + 64..s + 72].copy_from_slice(&used.to_le_bytes());
        }
        let u = parse(&b).unwrap();
        assert_eq!(u.used[0], 150, "free slots do not count");
        assert_eq!(u.limit[0], 4 << 30);
        assert_eq!(u.processes, 2);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(&b[..10]), None);
    }
}
