//! The container's grant, live (gpuquota_formats::grant): the host's
//! `grant` file, mapped read-only once at init. The host changes a GPU's
//! `vram_bytes` while the container runs with one atomic store through its
//! own mapping; every admission loads it again (one atomic load, no
//! syscall). Nothing in the container can write it: the state directory is
//! a read-only bind, and this mapping is read-only.

use core::sync::atomic::{AtomicU64, Ordering::Acquire};
use gpuquota_formats::grant;

pub use grant::{Table, MAX_GPUS};

/// A mapped, validated grant.
#[derive(Clone, Copy)]
pub struct LiveGrant {
    base: *const u8,
    pub table: Table,
    /// Some entry has a burst limit (decided once: cuMemAlloc asks it).
    bursts: bool,
}

unsafe impl Sync for LiveGrant {}
unsafe impl Send for LiveGrant {}

impl LiveGrant {
    /// Map `path` read-only and check it (gpuquota_formats::grant::decode):
    /// None when it cannot be opened, is not [`grant::SIZE`] bytes or does
    /// not decode.
    pub fn open(path: &core::ffi::CStr) -> Option<LiveGrant> {
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let size = libc::lseek(fd, 0, libc::SEEK_END);
            let p = if size == grant::SIZE as i64 {
                libc::mmap(
                    core::ptr::null_mut(),
                    grant::SIZE,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            } else {
                libc::MAP_FAILED
            };
            libc::close(fd);
            if p == libc::MAP_FAILED {
                return None;
            }
            let bytes = core::slice::from_raw_parts(p as *const u8, grant::SIZE);
            match grant::decode(bytes) {
                Some(table) => Some(LiveGrant {
                    base: p as *const u8,
                    table,
                    bursts: table.gpus().iter().any(|g| g.burst.is_some()),
                }),
                None => {
                    libc::munmap(p, grant::SIZE);
                    None
                }
            }
        }
    }

    /// The live slice of entry `e` (one atomic load).
    #[inline]
    pub fn vram(&self, e: usize) -> u64 {
        if e >= self.table.n {
            return 0;
        }
        // SAFETY: mapped for the process's life, SIZE bytes, 8-aligned offset
        unsafe { (*(self.base.add(grant::vram_offset(e)) as *const AtomicU64)).load(Acquire) }
    }

    /// The burst limit of entry `e` (`None`: a guaranteed slice). Fixed
    /// for the container's life.
    #[inline]
    pub fn burst_limit(&self, e: usize) -> Option<u64> {
        self.table.gpus().get(e)?.burst.map(|b| b.limit_bytes)
    }

    /// Whether any entry has a burst limit.
    #[inline]
    pub fn bursts(&self) -> bool {
        self.bursts
    }

    /// How long an allocation within the guarantee of entry `e` that the
    /// driver refused may wait for a reclaim (ms; 0: not at all). The host's
    /// burst supervisor stores it while bursters share the GPU.
    #[inline]
    pub fn reclaim_wait_ms(&self, e: usize) -> u64 {
        if e >= self.table.n {
            return 0;
        }
        // SAFETY: as for `vram`
        let w = unsafe {
            (*(self.base.add(grant::reclaim_offset(e)) as *const AtomicU64)).load(Acquire)
        };
        grant::reclaim_wait_ms(w)
    }

    /// The entry of a GPU.
    pub fn entry_of(&self, uuid: &[u8; 16]) -> Option<usize> {
        self.table.position(uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grant::GpuGrant;

    /// The mapping sees the host's store through another mapping of the
    /// file (as the host changes a running container's slice), a file of
    /// the wrong size or magic is refused, and a missing one too.
    /// (Mutation: `vram` returning the decoded snapshot
    /// `self.table.gpus[e].vram_bytes` fails the live assertion.)
    #[test]
    fn a_store_through_another_mapping_is_seen() {
        let dir = std::env::temp_dir().join(format!("gq-grant-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("grant");
        let g = [
            GpuGrant::memory([1; 16], 0, 64 << 20),
            GpuGrant::memory([2; 16], 3, 32 << 20),
        ];
        std::fs::write(&p, grant::encode(&g).unwrap()).unwrap();
        let cp = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let live = LiveGrant::open(&cp).unwrap();
        assert_eq!(
            (live.entry_of(&[2; 16]), live.entry_of(&[9; 16])),
            (Some(1), None)
        );
        assert_eq!(
            (live.vram(0), live.vram(1), live.vram(2)),
            (64 << 20, 32 << 20, 0)
        );
        // the host's store through its own read-write mapping
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        use std::os::fd::AsRawFd;
        unsafe {
            let m = libc::mmap(
                core::ptr::null_mut(),
                grant::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            (*((m as *mut u8).add(grant::vram_offset(1)) as *const AtomicU64))
                .store(128 << 20, core::sync::atomic::Ordering::Release);
            libc::munmap(m, grant::SIZE);
        }
        assert_eq!(live.vram(1), 128 << 20, "the live value, not the snapshot");
        let mut bad = grant::encode(&g).unwrap().to_vec();
        bad[0] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        assert!(LiveGrant::open(&cp).is_none());
        std::fs::write(&p, &bad[..100]).unwrap();
        assert!(LiveGrant::open(&cp).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(LiveGrant::open(&cp).is_none());
    }
}
