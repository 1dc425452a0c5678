//! Who is resizing a container right now: a `flock` per container.
//!
//! A resize holds an exclusive lock on `<ledger_dir>/resize/<key>.lock`
//! (`key`: the container's record key, [`records::key_hash`]) from before
//! it writes its marker until after it has ended it, and a repair takes
//! the same lock before it touches a marker. The kernel lets the lock go
//! when its holder dies however it dies (kill -9 included), and the lock
//! is the same from every pid and mount namespace that sees the ledger
//! directory. So a repair that gets the lock knows that no resize of that
//! container is running, and that the marker it finds is a crashed one's;
//! a repair that does not get it leaves the marker to the resize that
//! holds it. (A pid and start time in the marker would say the same only
//! from the resizer's own pid namespace, and would keep saying "alive"
//! for a process that gave a resize up but went on running.)
//!
//! The holder removes the file before it lets the lock go, so none is
//! left behind; a process that locked a file that was removed meanwhile
//! sees that the path no longer names it and locks the new one. Two
//! containers whose keys collide share a lock: their resizes take turns.
use super::super::{records, Key, Ledger, LedgerError};
use crate::fsutil;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The directory of the locks, in the ledger directory.
pub const DIR: &str = "resize";

/// A held resize lock; dropping it removes the file and lets the lock go.
#[derive(Debug)]
pub struct ResizeLock {
    path: PathBuf,
    _file: File,
}

impl Drop for ResizeLock {
    fn drop(&mut self) {
        // removed while still held: no one locks a file about to go
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Ledger {
    /// The resize lock of container `key`, waiting at most `wait` for
    /// another holder; `None` when it is still held then.
    pub fn resize_lock(
        &self,
        key: &Key<'_>,
        wait: Duration,
    ) -> Result<Option<ResizeLock>, LedgerError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        fsutil::secure_dir(&self.dir, 0o755).map_err(self.io(&self.dir))?;
        let dir = self.dir.join(DIR);
        fsutil::secure_dir(&dir, 0o700).map_err(self.io(&dir))?;
        let (id, root) = key.id_root();
        let path = dir.join(format!("{:016x}.lock", records::key_hash(id, root)));
        let io = self.io(&path);
        let deadline = Instant::now() + wait;
        loop {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .map_err(&io)?;
            // SAFETY: flock on a valid, owned fd.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EWOULDBLOCK) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    Some(libc::EWOULDBLOCK) => return Ok(None),
                    _ => return Err(io(e)),
                }
            }
            let mine = f.metadata().map_err(&io)?;
            match std::fs::symlink_metadata(&path) {
                Ok(m) if (m.dev(), m.ino()) == (mine.dev(), mine.ino()) => {
                    return Ok(Some(ResizeLock { path, _file: f }))
                }
                // its holder removed it before letting go: lock the new one
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_none_left_behind() {
        let d = tempfile::tempdir().unwrap();
        let l = Ledger {
            dir: d.path().join("ledger"),
            grace_secs: 60,
        };
        let a = Key::Root {
            id: "a",
            root: None,
        };
        let held = l.resize_lock(&a, Duration::ZERO).unwrap().unwrap();
        // another open file description (another process, or a thread)
        assert!(l.resize_lock(&a, Duration::ZERO).unwrap().is_none());
        assert!(
            l.resize_lock(&a, Duration::from_millis(50))
                .unwrap()
                .is_none(),
            "still held after the wait"
        );
        let b = Key::Root {
            id: "a",
            root: Some("/other"),
        };
        let other = l.resize_lock(&b, Duration::ZERO).unwrap();
        assert!(other.is_some(), "another container's lock is its own");
        drop(other);
        // a waiter gets it once the holder lets go
        std::thread::scope(|s| {
            let t = s.spawn(|| l.resize_lock(&a, Duration::from_secs(10)).unwrap());
            std::thread::sleep(Duration::from_millis(60));
            drop(held);
            assert!(t.join().unwrap().is_some());
        });
        let left: Vec<_> = std::fs::read_dir(l.dir.join(DIR)).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
