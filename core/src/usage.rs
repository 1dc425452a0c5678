//! Host-side reader of a container's `usage` file (written by
//! libgpuquota.so; the layout is gpuquota_formats::usage, documented in
//! docs/interceptor.md and interceptor/include/gpuquota_usage.h). For monitoring only: a snapshot
//! read without the container's atomics may be a few bytes stale.
//!
//! The file is written by the container and so is hostile: it is read with
//! `O_NOFOLLOW`, only when it is a regular file, at most `TOTAL_SIZE`
//! bytes; the header must match the version-1 layout exactly (every size
//! and offset is a constant of the format, never taken from the file), so
//! every loop is bounded by those constants.
use std::path::Path;

use gpuquota_formats::usage::{
    self as layout, FIXED, H_HIGH_WATER, H_LIMIT, H_REFUSALS, H_UUID, H_UUID_STATE, S_OWNER, S_PID,
    UUID_VALID,
};
pub use gpuquota_formats::usage::{
    DEV_COUNT, HEADER_SIZE, MAGIC, SLOT_COUNT, SLOT_SIZE, SLOT_USED_OFFSET, TOTAL_SIZE, VERSION,
};

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
    /// The GPU of each device index, where the interceptor has written it
    /// (raw UUID bytes).
    pub uuid: Vec<Option<[u8; 16]>>,
    /// Each process holding a slot: its pid (in the container's pid
    /// namespace) and bytes per device index.
    pub holders: Vec<Holder>,
    /// Per device index: bytes an allocation within the guarantee waits
    /// for while bursters are asked to give memory back (0: none), and
    /// since when (CLOCK_MONOTONIC ms).
    pub reclaim_want: Vec<u64>,
    pub reclaim_since_ms: Vec<u64>,
    /// Allocations that waited for a reclaim and got their memory, and the
    /// last one's wait (ms).
    pub reclaim_waits: u64,
    pub reclaim_last_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// Its slot in the file.
    pub slot: usize,
    pub pid: u64,
    /// Its start time (clock ticks since boot, as /proc/PID/stat's 22nd
    /// field in any pid namespace).
    pub start_time: u64,
    pub used: Vec<u64>,
}

impl Usage {
    /// The device index of GPU `uuid` (raw bytes), if the file names it.
    pub fn device_of(&self, uuid: &[u8; 16]) -> Option<usize> {
        self.uuid.iter().position(|u| u.as_ref() == Some(uuid))
    }
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Parse a usage file's bytes; None when it is empty (no CUDA process ran
/// yet), shorter than the format, or not exactly the version-1 layout.
pub fn parse(b: &[u8]) -> Option<Usage> {
    if b.len() < TOTAL_SIZE {
        return None;
    }
    // every layout field is the format's constant, never taken from the file
    let fixed = |&(o, width, v): &(usize, usize, u64)| match width {
        4 => u32_at(b, o).map(u64::from) == Some(v),
        _ => u64_at(b, o) == Some(v),
    };
    if !FIXED.iter().all(fixed) {
        return None;
    }
    let high = (u32_at(b, H_HIGH_WATER)? as usize).min(SLOT_COUNT);
    let mut u = Usage {
        used: vec![0; DEV_COUNT],
        limit: (0..DEV_COUNT)
            .map(|d| u64_at(b, H_LIMIT + 8 * d).unwrap_or(0))
            .collect(),
        processes: 0,
        refusals: u64_at(b, H_REFUSALS).unwrap_or(0),
        uuid: (0..DEV_COUNT)
            .map(|d| {
                (u32_at(b, H_UUID_STATE + 4 * d) == Some(UUID_VALID))
                    .then(|| {
                        b.get(H_UUID + 16 * d..H_UUID + 16 * (d + 1))?
                            .try_into()
                            .ok()
                    })
                    .flatten()
            })
            .collect(),
        holders: vec![],
        reclaim_want: (0..DEV_COUNT)
            .map(|d| u64_at(b, layout::H_RECLAIM_WANT + 8 * d).unwrap_or(0))
            .collect(),
        reclaim_since_ms: (0..DEV_COUNT)
            .map(|d| u64_at(b, layout::H_RECLAIM_SINCE + 8 * d).unwrap_or(0))
            .collect(),
        reclaim_waits: u64_at(b, layout::H_RECLAIM_WAITS).unwrap_or(0),
        reclaim_last_ms: u64_at(b, layout::H_RECLAIM_LAST).unwrap_or(0),
    };
    for i in 0..high {
        let owner = u64_at(b, layout::slot_offset(i) + S_OWNER)?;
        if owner == layout::OWNER_FREE || owner == layout::OWNER_RECLAIMING {
            continue;
        }
        u.processes += 1;
        let mut h = Holder {
            slot: i,
            pid: u64_at(b, layout::slot_offset(i) + S_PID)?,
            start_time: u64_at(b, layout::slot_offset(i) + layout::S_START_TIME)?,
            used: vec![0; DEV_COUNT],
        };
        for d in 0..DEV_COUNT {
            h.used[d] = u64_at(b, layout::used_offset(i, d))?;
            u.used[d] = u.used[d].saturating_add(h.used[d]);
        }
        u.holders.push(h);
    }
    Some(u)
}

/// Free every slot of consumer group `group` in the usage file at `path`
/// (a usage file shared by a DRA claim's consumers, when one of them
/// ended: its processes are gone, and no other consumer may judge them by
/// pid). Each slot's counters are zeroed, then its owner set free, so a
/// reader never sees a free slot with usage. By `pread`/`pwrite`, never a
/// mapping: the file is writable by the containers, and one truncated
/// under a mapping would kill the caller. Only a regular file of exactly
/// the format's size and header is written. A slot whose liveness lock is
/// held (docs/interceptor.md) is left alone, and each slot is read again
/// just before it is freed: an interceptor may have reclaimed and given it
/// to a new process meanwhile (a new owner locks the slot before it
/// publishes itself, so what is left is the few instructions between
/// that re-read and the write). Returns the slots freed.
pub fn free_group(path: &Path, group: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    if group == 0 {
        return Ok(0);
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || m.len() != TOTAL_SIZE as u64 {
        return Err(bad("not a usage file"));
    }
    let mut b = vec![0u8; TOTAL_SIZE];
    f.read_exact_at(&mut b, 0)?;
    if parse(&b).is_none() {
        return Err(bad("not a version-1 usage file"));
    }
    let high = (u32_at(&b, H_HIGH_WATER).unwrap_or(0) as usize).min(SLOT_COUNT);
    let mut n = 0;
    for i in 0..high {
        let s = layout::slot_offset(i);
        let owner = u64_at(&b, s + S_OWNER).unwrap_or(0);
        if owner == layout::OWNER_FREE
            || owner == layout::OWNER_RECLAIMING
            || u64_at(&b, s + layout::S_GROUP) != Some(group)
        {
            continue;
        }
        let mut now = [0u8; 32];
        f.read_exact_at(&mut now, s as u64)?;
        if u64_at(&now, S_OWNER) != Some(owner)
            || u64_at(&now, layout::S_GROUP) != Some(group)
            || slot_locked(&f, s)
        {
            continue;
        }
        f.write_all_at(&[0u8; 8 * DEV_COUNT], (s + SLOT_USED_OFFSET) as u64)?;
        f.write_all_at(&layout::OWNER_FREE.to_le_bytes(), (s + S_OWNER) as u64)?;
        n += 1;
    }
    Ok(n)
}

/// Whether a process holds the liveness lock of the slot at `off` (an open
/// file description lock on its first byte); true when it cannot be known.
fn slot_locked(f: &std::fs::File, off: usize) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain struct, zeroed is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as _;
    l.l_whence = libc::SEEK_SET as _;
    l.l_start = off as _;
    l.l_len = 1;
    // SAFETY: a valid descriptor and a pointer to a flock for the call.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_GETLK, &mut l) } != 0 {
        return true;
    }
    l.l_type as i32 != libc::F_UNLCK
}

/// As [`read`], counting only the processes `alive` says are (the host
/// knows them by the container's cgroup: a slot left by a process that
/// died still shows what it held until a process of the container takes
/// it back, while the driver has freed that memory). For decisions that
/// give back what a container holds (a shrink), where such a slot would
/// refuse wrongly.
pub fn read_alive(path: &Path, alive: &dyn Fn(&Holder) -> bool) -> Option<Usage> {
    let mut u = read(path)?;
    u.holders.retain(|h| alive(h));
    u.processes = u.holders.len() as u32;
    u.used = vec![0; DEV_COUNT];
    for h in &u.holders {
        for (t, b) in u.used.iter_mut().zip(&h.used) {
            *t = t.saturating_add(*b);
        }
    }
    Some(u)
}

/// Read a usage file: a regular file, not followed through a symlink,
/// never more than `TOTAL_SIZE` bytes (a FIFO or a huge sparse file there
/// cannot stall or exhaust the reader).
pub fn read(path: &Path) -> Option<Usage> {
    parse(&crate::fsutil::read_regular_prefix(path, TOTAL_SIZE as u64).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<u8> {
        let mut b = vec![0u8; TOTAL_SIZE];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&4096u32.to_le_bytes());
        b[16..20].copy_from_slice(&1024u32.to_le_bytes());
        b[20..24].copy_from_slice(&16u32.to_le_bytes());
        b[24..28].copy_from_slice(&256u32.to_le_bytes());
        b[28..32].copy_from_slice(&64u32.to_le_bytes());
        b[32..40].copy_from_slice(&4096u64.to_le_bytes());
        b
    }

    /// Class 4: a crafted header (slot_size 0, huge counts) made
    /// `gpu-quota ls` and `metrics` spin forever. Every layout field other
    /// than the constants is refused, and the reader never reads more than
    /// the format's size.
    #[test]
    fn hostile_headers_are_refused_quickly() {
        let good = header();
        assert!(parse(&good).is_some());
        for (off, val) in [
            (16usize, u32::MAX),
            (20, u32::MAX),
            (24, 0),
            (28, u32::MAX),
            (12, 0),
        ] {
            let mut b = good.clone();
            b[off..off + 4].copy_from_slice(&val.to_le_bytes());
            b[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
            let t = std::time::Instant::now();
            assert_eq!(parse(&b), None, "field at {off} = {val}");
            assert!(t.elapsed() < std::time::Duration::from_millis(50));
        }
        let mut b = good.clone();
        b[32..40].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(parse(&b), None, "slots offset");
        // a huge high_water is clamped to the slot count
        let mut b = good.clone();
        b[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse(&b).unwrap().processes, 0);
        // a truncated file is not a usage file
        assert_eq!(parse(&good[..TOTAL_SIZE - 1]), None);
        // the reader: FIFOs and symlinks are not opened for reading; big
        // files are read only up to the format's size
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read(&fifo), None);
        let big = d.path().join("big");
        let mut v = good.clone();
        v.resize(8 << 20, 0xff);
        std::fs::write(&big, &v).unwrap();
        assert!(read(&big).is_some());
        std::os::unix::fs::symlink(&big, d.path().join("link")).unwrap();
        assert_eq!(read(&d.path().join("link")), None);
    }

    #[test]
    fn free_group_frees_that_groups_slots_only() {
        let mut b = header();
        b[40..44].copy_from_slice(&3u32.to_le_bytes());
        for (slot, owner, group, used) in
            [(0usize, 7u64, 5u64, 100u64), (1, 8, 6, 40), (2, 9, 5, 50)]
        {
            let s = 4096 + slot * 256;
            b[s..s + 8].copy_from_slice(&owner.to_le_bytes());
            b[s + 24..s + 32].copy_from_slice(&group.to_le_bytes());
            b[s + 64..s + 72].copy_from_slice(&used.to_le_bytes());
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("usage");
        std::fs::write(&p, &b).unwrap();
        // slot 2's process is alive: it holds its slot's lock
        let holder = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        {
            use std::os::fd::AsRawFd;
            // SAFETY: zeroed flock, then a valid descriptor and pointer.
            let mut l: libc::flock = unsafe { std::mem::zeroed() };
            l.l_type = libc::F_WRLCK as _;
            l.l_start = (4096 + 2 * 256) as _;
            l.l_len = 1;
            assert_eq!(
                unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_OFD_SETLK, &l) },
                0
            );
        }
        let u = read(&p).unwrap();
        assert_eq!(
            u.holders.iter().map(|h| h.used[0]).collect::<Vec<_>>(),
            [100, 40, 50],
            "each process's holding"
        );
        assert_eq!(u.device_of(&[0; 16]), None, "no device named yet");
        let mut named = b.clone();
        let (id, st) = (layout::H_UUID + 16, layout::H_UUID_STATE + 4);
        named[id..id + 16].copy_from_slice(&[7; 16]);
        named[st..st + 4].copy_from_slice(&layout::UUID_WRITING.to_le_bytes());
        assert_eq!(
            parse(&named).unwrap().device_of(&[7; 16]),
            None,
            "half written"
        );
        named[st..st + 4].copy_from_slice(&UUID_VALID.to_le_bytes());
        assert_eq!(parse(&named).unwrap().device_of(&[7; 16]), Some(1));
        assert_eq!(free_group(&p, 5).unwrap(), 1, "the live slot is left alone");
        assert_eq!(read(&p).unwrap().used[0], 90);
        // what the living hold
        let live = read_alive(&p, &|h| h.slot == 2).unwrap();
        assert_eq!(
            (live.processes, live.used[0], live.holders[0].slot),
            (1, 50, 2)
        );
        drop(holder);
        assert_eq!(free_group(&p, 5).unwrap(), 1);
        let u = read(&p).unwrap();
        assert_eq!((u.used[0], u.processes), (40, 1));
        assert_eq!(free_group(&p, 0).unwrap(), 0, "group 0 is no group");
        // not a usage file: nothing written
        std::fs::write(&p, &b[..100]).unwrap();
        assert!(free_group(&p, 6).is_err());
        std::os::unix::fs::symlink(&p, d.path().join("link")).unwrap();
        assert!(free_group(&d.path().join("link"), 6).is_err());
    }

    #[test]
    fn parse_layout() {
        let mut b = header();
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
