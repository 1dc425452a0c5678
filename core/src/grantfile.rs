//! The host's side of a container's `grant` file (gpuquota_formats::grant):
//! written once when its state directory is filled, and changed in place
//! while the container runs.
//!
//! The file sits in the state directory, which the container sees through
//! a read-only bind: only the host writes it. A change is one aligned
//! 8-byte atomic store through a shared mapping of the file, the same page
//! the interceptor has mapped, so every process of the container sees the
//! new slice at its next admission without a syscall, and never a torn
//! value. A `pwrite` would give no such guarantee to a reader that loads
//! the word from its mapping.
use crate::placement::Slice;
use gpuquota_formats::grant;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

fn bad(m: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, m)
}

/// The `grant` file of a reservation's slices, as they are, the GPUs
/// named by raw UUID. Fails when a UUID is not one or the grant cannot be
/// written (too many GPUs, one twice).
pub fn bytes(slices: &[Slice]) -> std::io::Result<[u8; grant::SIZE]> {
    let raw = slices
        .iter()
        .map(|s| {
            s.raw().ok_or_else(|| {
                bad(format!(
                    "GPU {:?} is not a UUID; it cannot be written to the grant file",
                    s.uuid
                ))
            })
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    grant::encode(&raw).map_err(|e| bad(e.to_string()))
}

/// A shared, writable mapping of one `grant` file.
struct Mapped {
    ptr: *mut libc::c_void,
}

impl Mapped {
    fn open(path: &Path) -> std::io::Result<Mapped> {
        use std::os::fd::AsRawFd;
        let f =
            crate::fsutil::open_regular(path, std::fs::OpenOptions::new().read(true).write(true))?;
        if f.metadata()?.len() != grant::SIZE as u64 {
            return Err(bad(format!(
                "{} is not a grant file ({} bytes, not {})",
                path.display(),
                f.metadata()?.len(),
                grant::SIZE
            )));
        }
        // SAFETY: a fresh shared mapping of a regular file of exactly SIZE
        // bytes; it outlives `f` (a mapping keeps its own reference).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                grant::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { ptr })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: SIZE mapped bytes, read as a snapshot (decode reads them
        // once; the live words are read again atomically below)
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, grant::SIZE) }
    }

    fn reclaim(&self, i: usize) -> &AtomicU64 {
        // SAFETY: as for `vram`
        unsafe { &*(self.ptr.cast::<u8>().add(grant::reclaim_offset(i)) as *const AtomicU64) }
    }

    /// The entry of GPU `uuid` (text).
    fn entry(&self, path: &Path, uuid: &str) -> std::io::Result<usize> {
        let raw = gpuquota_formats::limits::parse_uuid(uuid.as_bytes())
            .ok_or_else(|| bad(format!("GPU {uuid:?} is not a UUID")))?;
        let t = grant::decode(self.bytes())
            .ok_or_else(|| bad(format!("{} is not a valid grant file", path.display())))?;
        t.position(&raw).ok_or_else(|| {
            bad(format!(
                "{uuid} is not one of the GPUs {} grants",
                path.display()
            ))
        })
    }

    fn vram(&self, i: usize) -> &AtomicU64 {
        // SAFETY: vram_offset is 8-aligned and within SIZE; the page is
        // shared with readers that only ever load it atomically
        unsafe { &*(self.ptr.cast::<u8>().add(grant::vram_offset(i)) as *const AtomicU64) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`
        unsafe { libc::munmap(self.ptr, grant::SIZE) };
    }
}

/// Set the live slice of one GPU of a running container (by the GPU's
/// text UUID) and return the one it replaces. The GPU must be one of the
/// grant's; nothing else in the file changes.
pub fn set_vram(path: &Path, uuid: &str, vram_bytes: u64) -> std::io::Result<u64> {
    let raw = gpuquota_formats::limits::parse_uuid(uuid.as_bytes())
        .ok_or_else(|| bad(format!("GPU {uuid:?} is not a UUID")))?;
    let m = Mapped::open(path)?;
    let t = grant::decode(m.bytes())
        .ok_or_else(|| bad(format!("{} is not a valid grant file", path.display())))?;
    let i = t.position(&raw).ok_or_else(|| {
        bad(format!(
            "{uuid} is not one of the GPUs {} grants",
            path.display()
        ))
    })?;
    Ok(m.vram(i).swap(vram_bytes, Ordering::SeqCst))
}

/// The reclaim word of one GPU of a container's grant
/// (gpuquota_formats::grant::reclaim_offset), as it is now.
pub fn reclaim_word(path: &Path, uuid: &str) -> std::io::Result<u64> {
    let m = Mapped::open(path)?;
    let i = m.entry(path, uuid)?;
    Ok(m.reclaim(i).load(Ordering::SeqCst))
}

/// Store the reclaim word of one GPU of a running container's grant: one
/// atomic store, as for its slice.
pub fn set_reclaim_word(path: &Path, uuid: &str, word: u64) -> std::io::Result<()> {
    let m = Mapped::open(path)?;
    let i = m.entry(path, uuid)?;
    m.reclaim(i).store(word, Ordering::SeqCst);
    Ok(())
}

/// What a `grant` file holds now (the live slices included).
pub fn read(path: &Path) -> std::io::Result<grant::Table> {
    let b = crate::fsutil::read_regular_capped(path, grant::SIZE as u64 + 1)?;
    grant::decode(&b).ok_or_else(|| bad(format!("{} is not a valid grant file", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Reservation;

    const U0: &str = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
    const U1: &str = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff";

    fn res() -> Reservation {
        let s = |u: &str, index, vram_bytes| Slice::memory(u.into(), index, vram_bytes);
        Reservation::new(
            "c1",
            None,
            "/b",
            vec![s(U0, 0, 4 << 30), s(U1, 1, 6 << 30)],
            "vram",
        )
    }

    /// A change reaches a mapping made before it (the interceptor's) and
    /// touches only that GPU's word.
    #[test]
    fn a_live_change_reaches_an_existing_mapping() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(grant::FILE_NAME);
        std::fs::write(&p, bytes(&res().slices).unwrap()).unwrap();
        let reader = Mapped::open(&p).unwrap();
        assert_eq!(reader.vram(1).load(Ordering::SeqCst), 6 << 30);
        assert_eq!(set_vram(&p, U1, 8 << 30).unwrap(), 6 << 30);
        assert_eq!(reader.vram(1).load(Ordering::SeqCst), 8 << 30);
        assert_eq!(reader.vram(0).load(Ordering::SeqCst), 4 << 30);
        let t = read(&p).unwrap();
        assert_eq!(
            t.gpus()
                .iter()
                .map(|g| (g.index, g.vram_bytes))
                .collect::<Vec<_>>(),
            [(0, 4 << 30), (1, 8 << 30)]
        );
    }

    #[test]
    fn refuses_a_gpu_it_does_not_grant_and_what_is_not_a_grant() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(grant::FILE_NAME);
        std::fs::write(&p, bytes(&res().slices).unwrap()).unwrap();
        let other = "GPU-11111111-1111-1111-1111-111111111111";
        let e = set_vram(&p, other, 1).unwrap_err();
        assert!(e.to_string().contains("is not one of the GPUs"), "{e}");
        assert!(set_vram(&p, "GPU-a", 1).is_err());
        let before = std::fs::read(&p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), before, "nothing changed");
        // a link is not followed, a short file is not mapped
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(set_vram(&l, U0, 1).is_err());
        let s = d.path().join("short");
        std::fs::write(&s, &before[..100]).unwrap();
        assert!(set_vram(&s, U0, 1)
            .unwrap_err()
            .to_string()
            .contains("not a grant file"));
        assert_eq!(read(&p).unwrap().gpus()[0].vram_bytes, 4 << 30);
    }
}
