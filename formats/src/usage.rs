//! The binary layout of the `usage` file (version 1): written by
//! libgpuquota.so in the container, read by `gpu-quota ls` / `metrics` on
//! the host, published for C readers as
//! interceptor/include/gpuquota_usage.h (`tests/usage_header.rs` compiles
//! the header and compares every define, field offset and size with these
//! definitions). All integers little-endian; see docs/interceptor.md.
//!
//! [`Header`] and [`Slot`] describe the layout (`#[repr(C)]`, no padding:
//! checked below at compile time); the interceptor accesses the mapped file
//! through atomics at the `H_*` / `S_*` offsets derived from them.
use core::mem::{offset_of, size_of};

pub const FILE_NAME: &str = "usage";
/// The bytes "GPUQUOTA" as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GPUQUOTA");
pub const VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 4096;
pub const SLOT_COUNT: usize = 1024;
pub const DEV_COUNT: usize = 16;
pub const SLOT_SIZE: usize = 256;
pub const TOTAL_SIZE: usize = HEADER_SIZE + SLOT_COUNT * SLOT_SIZE;

/// `flags`: the limits came from a state directory (the hook's `limits`).
pub const FLAG_CONTAINER: u32 = 1;
/// `flags`: the limit is a percentage; `limit[d]` is filled per device
/// when its total is known.
pub const FLAG_PERCENT: u32 = 2;

/// `owner` of a free slot.
pub const OWNER_FREE: u64 = 0;
/// `owner` of a slot being reclaimed.
pub const OWNER_RECLAIMING: u64 = u64::MAX;

/// `uuid_state[d]`: empty, being written, valid.
pub const UUID_EMPTY: u32 = 0;
pub const UUID_WRITING: u32 = 1;
pub const UUID_VALID: u32 = 2;

/// The header, at offset 0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Header {
    /// [`MAGIC`], stored last by the initialiser.
    pub magic: u64,
    pub version: u32,
    pub header_size: u32,
    pub slot_count: u32,
    pub dev_count: u32,
    pub slot_size: u32,
    /// Offset of `used` in a slot.
    pub slot_used_offset: u32,
    /// Offset of slot 0.
    pub slots_offset: u64,
    /// Atomic: slots `[0, high_water)` may be in use.
    pub high_water: u32,
    pub flags: u32,
    /// Per-device slice in bytes (0 = not known yet).
    pub limit: [u64; DEV_COUNT],
    /// Device identity of index d (raw cuDeviceGetUuid bytes).
    pub uuid: [[u8; 16]; DEV_COUNT],
    /// Atomic: `UUID_*`.
    pub uuid_state: [u32; DEV_COUNT],
    /// Charged once per process and device.
    pub context_overhead_bytes: u64,
    /// Atomic: allocations refused so far.
    pub refusals: u64,
    /// NUL-padded.
    pub container_id: [u8; 64],
    /// Atomic, per device: the bytes an allocation within the guarantee
    /// is waiting for after the driver refused it, while bursters share
    /// the GPU (the grant's reclaim word); 0: none waits. The host's burst
    /// supervisor ends bursters while it is set.
    pub reclaim_want: [u64; DEV_COUNT],
    /// Atomic, per device: when that wait began (CLOCK_MONOTONIC, ms).
    pub reclaim_since_ms: [u64; DEV_COUNT],
    /// Atomic: allocations that waited for a reclaim, and got their memory.
    pub reclaim_waits: u64,
    /// Atomic: how long the last of them waited (ms).
    pub reclaim_last_ms: u64,
    pub reserved: [u8; HEADER_SIZE - 848],
}

/// One process's slot, at `HEADER_SIZE + i × SLOT_SIZE`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Slot {
    /// Atomic: `pid | (start_time & 0xffffffff) << 32`, or `OWNER_*`.
    pub owner: u64,
    /// Full start time (clock ticks since boot).
    pub start_time: u64,
    pub pid: u64,
    /// The consumer group of the process that owns the slot (the
    /// `consumer_group` of its limits file; 0: none). A usage file shared
    /// by the containers of one DRA claim holds processes of several pid
    /// namespaces: a process judges only the slots of its own group by pid
    /// (a pid of another namespace means nothing in its own); the host
    /// frees a group's slots when that container ends.
    pub group: u64,
    /// Atomic: in a container with a compute share, the owner word the
    /// slot's process had when its `cuInit` made it one of the share's MPS
    /// clients (`sm-procs=` counts the live slots whose word equals their
    /// owner's); anything else (0): not a client. Cleared when the slot is
    /// claimed; a slot reused by another process never matches.
    pub mps_client: u64,
    pub reserved0: [u8; 24],
    /// Atomic: bytes charged by this process per device.
    pub used: [u64; DEV_COUNT],
    pub reserved1: [u8; 64],
}

// header offsets
pub const H_MAGIC: usize = offset_of!(Header, magic);
pub const H_VERSION: usize = offset_of!(Header, version);
pub const H_HEADER_SIZE: usize = offset_of!(Header, header_size);
pub const H_SLOT_COUNT: usize = offset_of!(Header, slot_count);
pub const H_DEV_COUNT: usize = offset_of!(Header, dev_count);
pub const H_SLOT_SIZE: usize = offset_of!(Header, slot_size);
pub const H_SLOT_USED_OFFSET: usize = offset_of!(Header, slot_used_offset);
pub const H_SLOTS_OFFSET: usize = offset_of!(Header, slots_offset);
pub const H_HIGH_WATER: usize = offset_of!(Header, high_water);
pub const H_FLAGS: usize = offset_of!(Header, flags);
pub const H_LIMIT: usize = offset_of!(Header, limit);
pub const H_UUID: usize = offset_of!(Header, uuid);
pub const H_UUID_STATE: usize = offset_of!(Header, uuid_state);
pub const H_CTX_OVERHEAD: usize = offset_of!(Header, context_overhead_bytes);
pub const H_REFUSALS: usize = offset_of!(Header, refusals);
pub const H_CONTAINER_ID: usize = offset_of!(Header, container_id);
pub const H_RECLAIM_WANT: usize = offset_of!(Header, reclaim_want);
pub const H_RECLAIM_SINCE: usize = offset_of!(Header, reclaim_since_ms);
pub const H_RECLAIM_WAITS: usize = offset_of!(Header, reclaim_waits);
pub const H_RECLAIM_LAST: usize = offset_of!(Header, reclaim_last_ms);

// slot offsets
pub const S_OWNER: usize = offset_of!(Slot, owner);
pub const S_START_TIME: usize = offset_of!(Slot, start_time);
pub const S_PID: usize = offset_of!(Slot, pid);
pub const S_GROUP: usize = offset_of!(Slot, group);
pub const S_MPS_CLIENT: usize = offset_of!(Slot, mps_client);
pub const SLOT_USED_OFFSET: usize = offset_of!(Slot, used);

const _: () = {
    assert!(size_of::<Header>() == HEADER_SIZE);
    assert!(size_of::<Slot>() == SLOT_SIZE);
    // no padding anywhere: the fields' sizes add up to the struct's
    assert!(
        8 + 4 * 6
            + 8
            + 4
            + 4
            + 8 * DEV_COUNT
            + 16 * DEV_COUNT
            + 4 * DEV_COUNT
            + 8
            + 8
            + 64
            + 8 * DEV_COUNT
            + 8 * DEV_COUNT
            + 8
            + 8
            + (HEADER_SIZE - 848)
            == HEADER_SIZE
    );
    assert!(8 + 8 + 8 + 8 + 8 + 24 + 8 * DEV_COUNT + 64 == SLOT_SIZE);
    assert!(S_GROUP % 8 == 0 && S_MPS_CLIENT % 8 == 0);
    // the 8-byte atomics are naturally aligned
    assert!(H_MAGIC % 8 == 0 && H_SLOTS_OFFSET % 8 == 0 && H_LIMIT % 8 == 0);
    assert!(H_CTX_OVERHEAD % 8 == 0 && H_REFUSALS % 8 == 0);
    assert!(H_RECLAIM_WANT % 8 == 0 && H_RECLAIM_SINCE % 8 == 0 && H_RECLAIM_LAST % 8 == 0);
    assert!(S_OWNER % 8 == 0 && SLOT_USED_OFFSET % 8 == 0);
    assert!(H_HIGH_WATER % 4 == 0 && H_UUID_STATE % 4 == 0);
    assert!(HEADER_SIZE % 8 == 0 && SLOT_SIZE % 8 == 0);
};

/// Offset of slot `i`.
pub const fn slot_offset(i: usize) -> usize {
    HEADER_SIZE + i * SLOT_SIZE
}

/// Offset of `used[dev]` of slot `i`.
pub const fn used_offset(i: usize, dev: usize) -> usize {
    slot_offset(i) + SLOT_USED_OFFSET + 8 * dev
}

/// The owner word of a process.
pub const fn owner_word(pid: i32, start_time: u64) -> u64 {
    ((start_time & 0xffff_ffff) << 32) | (pid as u32 as u64)
}

/// The header values every valid version-1 file carries: (offset, width
/// in bytes, value). A reader checks all of them; none is taken from the
/// file.
pub const FIXED: [(usize, usize, u64); 8] = [
    (H_MAGIC, 8, MAGIC),
    (H_VERSION, 4, VERSION as u64),
    (H_HEADER_SIZE, 4, HEADER_SIZE as u64),
    (H_SLOT_COUNT, 4, SLOT_COUNT as u64),
    (H_DEV_COUNT, 4, DEV_COUNT as u64),
    (H_SLOT_SIZE, 4, SLOT_SIZE as u64),
    (H_SLOT_USED_OFFSET, 4, SLOT_USED_OFFSET as u64),
    (H_SLOTS_OFFSET, 8, HEADER_SIZE as u64),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_offsets() {
        // the figures the header's comments and docs/interceptor.md give
        assert_eq!(
            [
                H_MAGIC,
                H_VERSION,
                H_HEADER_SIZE,
                H_SLOT_COUNT,
                H_DEV_COUNT,
                H_SLOT_SIZE
            ],
            [0, 8, 12, 16, 20, 24]
        );
        assert_eq!(
            [H_SLOT_USED_OFFSET, H_SLOTS_OFFSET, H_HIGH_WATER, H_FLAGS],
            [28, 32, 40, 44]
        );
        assert_eq!(
            [H_LIMIT, H_UUID, H_UUID_STATE, H_CTX_OVERHEAD],
            [48, 176, 432, 496]
        );
        assert_eq!([H_REFUSALS, H_CONTAINER_ID], [504, 512]);
        assert_eq!(
            [
                H_RECLAIM_WANT,
                H_RECLAIM_SINCE,
                H_RECLAIM_WAITS,
                H_RECLAIM_LAST
            ],
            [576, 704, 832, 840]
        );
        assert_eq!(
            [
                S_OWNER,
                S_START_TIME,
                S_PID,
                S_GROUP,
                S_MPS_CLIENT,
                SLOT_USED_OFFSET
            ],
            [0, 8, 16, 24, 32, 64]
        );
        assert_eq!(TOTAL_SIZE, 266_240);
        assert_eq!(MAGIC, 0x4154_4F55_5155_5047);
        assert_eq!(used_offset(2, 3), 4096 + 512 + 64 + 24);
        assert_eq!(owner_word(7, 0x1_0000_0002), (2 << 32) | 7);
    }
}
