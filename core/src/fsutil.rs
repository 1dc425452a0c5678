//! Host-side file helpers: atomic replace, advisory locks, process identity.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Steps of an atomic write, observable by tests that inject crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    TempCreated,
    HalfWritten,
    Written,
    Synced,
    Renamed,
    DirSynced,
}

pub const WRITE_STEPS: [WriteStep; 6] = [
    WriteStep::TempCreated,
    WriteStep::HalfWritten,
    WriteStep::Written,
    WriteStep::Synced,
    WriteStep::Renamed,
    WriteStep::DirSynced,
];

/// Replace `path` with `bytes`: temp file in the same directory, fsync,
/// rename over, fsync the directory. Readers see the old or the new file,
/// never a mix, even across a crash.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_atomic_observed(path, bytes, mode, &mut |_| {})
}

pub fn write_atomic_observed(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    observe: &mut dyn FnMut(WriteStep),
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    observe(WriteStep::TempCreated);
    let half = bytes.len() / 2;
    let r = (|| {
        f.write_all(&bytes[..half])?;
        observe(WriteStep::HalfWritten);
        f.write_all(&bytes[half..])?;
        observe(WriteStep::Written);
        f.sync_all()?;
        observe(WriteStep::Synced);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    observe(WriteStep::Renamed);
    File::open(dir)?.sync_all()?;
    observe(WriteStep::DirSynced);
    Ok(())
}

/// An exclusive `flock` held until dropped.
pub struct LockGuard {
    _file: File,
}

pub fn lock_exclusive(path: &Path) -> std::io::Result<LockGuard> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    loop {
        // SAFETY: flock on a valid, owned fd.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if r == 0 {
            return Ok(LockGuard { _file: f });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Start time of a process (clock ticks since boot, field 22 of
/// /proc/PID/stat); with the pid it names a process uniquely across pid reuse.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: fields start after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `start` is still alive (a
/// zombie counts as gone: it holds no GPU memory).
pub fn process_alive(pid: u32, start: u64) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = s.rfind(')') else {
        return false;
    };
    let mut f = s[close + 1..].split_whitespace();
    let state = f.next().unwrap_or("");
    if state == "Z" || state == "X" {
        return false;
    }
    f.nth(18).and_then(|v| v.parse::<u64>().ok()) == Some(start)
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.json");
        write_atomic(&p, b"one", 0o644).unwrap();
        let mut steps = vec![];
        write_atomic_observed(&p, b"two", 0o600, &mut |s| steps.push(s)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(steps, WRITE_STEPS.to_vec());
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }

    #[test]
    fn own_process_is_alive() {
        let me = std::process::id();
        let st = process_start_time(me).unwrap();
        assert!(process_alive(me, st));
        assert!(
            !process_alive(me, st + 1),
            "start time mismatch = pid reuse"
        );
        assert!(!process_alive(u32::MAX - 1, 0));
    }
}
