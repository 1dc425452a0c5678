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

/// The mode (and owner) of the file an atomic write leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMode {
    /// Exactly this mode, whatever the replaced file had (gpu-quota's own
    /// state: a private mode is never widened by an old file).
    Set(u32),
    /// The replaced file's mode and owner (an operator's config file that
    /// gpu-quota edits); this mode for a new file.
    KeepOr(u32),
}

/// Replace `path` with `bytes`: temp file in the same directory, fsync,
/// rename over, fsync the directory. Readers see the old or the new file,
/// never a mix, even across a crash. The one atomic writer of the host
/// crates (core, and install for engine configs).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_atomic_as(path, bytes, FileMode::Set(mode), &mut |_| {})
}

pub fn write_atomic_observed(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    observe: &mut dyn FnMut(WriteStep),
) -> std::io::Result<()> {
    write_atomic_as(path, bytes, FileMode::Set(mode), observe)
}

pub fn write_atomic_as(
    path: &Path,
    bytes: &[u8],
    mode: FileMode,
    observe: &mut dyn FnMut(WriteStep),
) -> std::io::Result<()> {
    write_atomic_impl(path, bytes, mode, Durability::FileAndDir, observe)
}

/// What an atomic write makes durable before it returns. Readers see the
/// old or the new file, never a mix, whichever is chosen; this is only
/// about what a power failure may undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The file fsync'd before the rename, the directory after it.
    FileAndDir,
    /// The file fsync'd before the rename (a rename that survives a crash
    /// names a whole file; a crash may only undo the rename): for writes
    /// whose loss at a power failure loses nothing (see `Ledger::confirm`).
    File,
    /// No fsync: for files whose meaning ends with the boot (a container's
    /// ledger record, the bundle's config.json).
    None,
}

/// As [`write_atomic_observed`], as durable as `durability` says (the
/// steps it leaves out are not observed).
pub fn write_atomic_steps(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
    observe: &mut dyn FnMut(WriteStep),
) -> std::io::Result<()> {
    write_atomic_impl(path, bytes, FileMode::Set(mode), durability, observe)
}

fn write_atomic_impl(
    path: &Path,
    bytes: &[u8],
    mode: FileMode,
    durability: Durability,
    observe: &mut dyn FnMut(WriteStep),
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let old = match mode {
        FileMode::KeepOr(_) => std::fs::metadata(path).ok(),
        FileMode::Set(_) => None,
    };
    let new_mode = match mode {
        FileMode::Set(m) | FileMode::KeepOr(m) => m,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let r = match &old {
        Some(m) => {
            // Owner first: chown may clear set-id bits, the chmod after it restores the mode.
            let _ = std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()));
            f.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))
        }
        None => f.set_permissions(std::fs::Permissions::from_mode(new_mode)),
    };
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    observe(WriteStep::TempCreated);
    let half = bytes.len() / 2;
    let r = (|| {
        f.write_all(&bytes[..half])?;
        observe(WriteStep::HalfWritten);
        f.write_all(&bytes[half..])?;
        observe(WriteStep::Written);
        if durability != Durability::None {
            f.sync_all()?;
            observe(WriteStep::Synced);
            return std::fs::rename(&tmp, path);
        }
        replace_unsynced(&tmp, path)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    observe(WriteStep::Renamed);
    if durability == Durability::FileAndDir {
        File::open(dir)?.sync_all()?;
        observe(WriteStep::DirSynced);
    }
    Ok(())
}

/// Put the unsynced file `tmp` in the place of `path`, atomically for
/// readers. Where `path` exists, by exchanging the two names
/// (`renameat2(RENAME_EXCHANGE)`) and unlinking the old file under the temp
/// name: a rename *over* an existing file makes ext4 (`auto_da_alloc`) start
/// writing the new file's data back at once, a flush per container start
/// that nobody needs for a file whose meaning ends with the boot. A plain
/// rename where there is nothing to exchange with or the file system cannot
/// exchange. A crash between the exchange and the unlink leaves the old
/// contents under the temp name (`.NAME.tmp.PID`), which no reader takes for
/// the file. Only a file or a link at `path` is exchanged; anything else (a
/// directory) meets the plain rename, which fails as before.
fn replace_unsynced(tmp: &Path, path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(t), Ok(p)) = (
        std::ffi::CString::new(tmp.as_os_str().as_bytes()),
        std::ffi::CString::new(path.as_os_str().as_bytes()),
    ) else {
        return std::fs::rename(tmp, path);
    };
    let exchange = || {
        // SAFETY: two NUL-terminated paths; renameat2 has no other preconditions.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                t.as_ptr(),
                libc::AT_FDCWD,
                p.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // only a file or a link is ever exchanged: anything else at `path` (a
    // directory) meets the plain rename, which refuses it without moving it
    let replaceable = std::fs::symlink_metadata(path)
        .map(|m| m.is_file() || m.file_type().is_symlink())
        .unwrap_or(false);
    if !replaceable {
        return std::fs::rename(tmp, path);
    }
    match exchange() {
        Ok(()) => {
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
        // the file system cannot exchange (EINVAL), an old kernel (ENOSYS),
        // `path` gone meanwhile (ENOENT): the plain rename
        Err(_) => std::fs::rename(tmp, path),
    }
}

/// Replace `path` with `bytes` atomically for readers (temp file in the same
/// directory, names exchanged: `replace_unsynced`) but without fsync: for files that need no
/// durability across a power loss, only never to be seen half-written by
/// another process (the bundle's config.json, which every engine writes
/// anew at each create; see docs/benchmarks.md).
pub fn replace_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_atomic_impl(
        path,
        bytes,
        FileMode::Set(mode),
        Durability::None,
        &mut |_| {},
    )
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

/// Make sure `path` is a real directory that only we can change: created
/// with `mode` when missing (parents 0755), never a symlink, owned by our
/// euid, not writable by group or others; every ancestor owned by root (or
/// us) and not group/other-writable unless sticky (`/tmp`). Nothing is
/// followed through a symlink we did not check. (Modes of existing
/// directories are not changed here; see `state::containers_root`.)
pub fn secure_dir(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let bad = |what: String| Error::new(ErrorKind::PermissionDenied, what);
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                if std::fs::symlink_metadata(parent).is_err() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(parent)?;
                }
            }
            match std::fs::DirBuilder::new().mode(mode).create(path) {
                Ok(()) => std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            std::fs::symlink_metadata(path)?
        }
        Err(e) => return Err(e),
    };
    if m.file_type().is_symlink() {
        return Err(bad(format!(
            "{} is a symlink; gpu-quota keeps host state only in real directories (make it a directory owned by root)",
            path.display()
        )));
    }
    if !m.is_dir() {
        return Err(bad(format!("{} is not a directory", path.display())));
    }
    if m.uid() != me {
        return Err(bad(format!(
            "{} is owned by uid {}, not by uid {me}; refusing to keep host state there (chown root {0})",
            path.display(),
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(bad(format!(
            "{} is writable by group or others (mode {:o}); chmod go-w it",
            path.display(),
            m.mode() & 0o7777
        )));
    }
    // The same directory (path, device, inode) passed in this process
    // already: only root (or we) can have changed its ancestors since, so
    // the walk below is not repeated (a start checks the ledger directory
    // three times, the state directories twice).
    let id = (path.to_path_buf(), m.dev(), m.ino());
    if path.is_absolute() && checked_dirs(|seen| seen.contains(&id)) {
        return Ok(());
    }
    // symlinks on the configured path itself: only root's (a user's symlink
    // in a sticky directory could be swapped between this check and a use)
    let mut sofar = PathBuf::new();
    let mut prefixes = vec![];
    let mut any_link = false;
    for c in path.components() {
        sofar.push(c);
        if let Ok(m) = std::fs::symlink_metadata(&sofar) {
            if m.file_type().is_symlink() {
                any_link = true;
                if m.uid() != 0 && m.uid() != me {
                    return Err(bad(format!(
                        "{} (on the way to {}) is a symlink owned by uid {}; keep gpu-quota's state under root-owned paths",
                        sofar.display(),
                        path.display(),
                        m.uid()
                    )));
                }
                // and the directory that holds it: a root-owned link in a
                // directory another user may write can be swapped by them
                if let Some(dir) = sofar.parent().filter(|d| !d.as_os_str().is_empty()) {
                    let dm = std::fs::metadata(dir)?;
                    if others_can_change(&dm) {
                        return Err(bad(format!(
                            "{} (on the way to {}) is a symlink in {}, which other users can change (owner uid {}, mode {:o}); keep gpu-quota's state under root-owned directories",
                            sofar.display(),
                            path.display(),
                            dir.display(),
                            dm.uid(),
                            dm.mode() & 0o7777
                        )));
                    }
                }
            }
            prefixes.push((sofar.clone(), m));
        }
    }
    // ancestors: only root (or we) may change what the path resolves to.
    // Without a symlink or `..` on an absolute path, the prefixes just
    // looked at are the ancestors; else the canonical path's are read.
    let plain = !any_link
        && path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir))
        && prefixes.len() == path.components().count();
    let ancestors: Vec<(PathBuf, std::fs::Metadata)> = if plain {
        prefixes.pop();
        prefixes
    } else {
        let canon = std::fs::canonicalize(path)?;
        canon
            .ancestors()
            .skip(1)
            .map(|a| Ok((a.to_path_buf(), std::fs::metadata(a)?)))
            .collect::<std::io::Result<_>>()?
    };
    for (a, m) in &ancestors {
        if others_can_change(m) {
            return Err(bad(format!(
                "{} (a parent of {}) can be changed by other users (owner uid {}, mode {:o}); keep gpu-quota's state under root-owned directories",
                a.display(),
                path.display(),
                m.uid(),
                m.mode() & 0o7777
            )));
        }
    }
    if path.is_absolute() {
        checked_dirs(|seen| seen.push(id));
    }
    Ok(())
}

/// Whether a user other than root or this process's can change what `m`
/// describes: its owner is someone else, or group or others may write it
/// (a sticky directory excepted: there only an entry's owner may replace
/// it). The one test of "others can change it" for host paths.
pub fn others_can_change(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
    (m.uid() != 0 && m.uid() != me) || (m.mode() & 0o022 != 0 && !sticky_dir)
}

/// The directories `secure_dir` found safe in this process: an absolute
/// path and the device and inode it named then (a directory replaced since
/// is walked again).
fn checked_dirs<T>(f: impl FnOnce(&mut Vec<(PathBuf, u64, u64)>) -> T) -> T {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, u64, u64)>> = std::sync::Mutex::new(Vec::new());
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut g)
}

/// Open a host file that must be regular, with `opts` (read, append,
/// create … as the caller needs) plus `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
/// O_CLOEXEC`: a final symlink is not followed, a FIFO does not block the
/// open, and anything but a regular file is refused (`InvalidData`) before
/// a byte is read or written. The one implementation of that open in core.
pub fn open_regular(path: &Path, opts: &mut OpenOptions) -> std::io::Result<File> {
    let f = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(f)
}

/// At most the first `max` bytes of `r` (the rest is never read).
pub fn read_prefix(r: impl std::io::Read, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut b = Vec::new();
    r.take(max).read_to_end(&mut b)?;
    Ok(b)
}

/// The first `max` bytes of a regular file (opened as [`open_regular`]);
/// a longer file is read as its prefix.
pub fn read_regular_prefix(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_prefix(open_regular(path, OpenOptions::new().read(true))?, max)
}

/// Read a trusted host file that must be regular: not followed through a
/// final symlink, never opened for reading if it is a FIFO or device, at
/// most `max` bytes (a longer file is an error, `InvalidData`).
pub fn read_regular_capped(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let b = read_prefix(
        open_regular(path, OpenOptions::new().read(true))?,
        max.saturating_add(1),
    )?;
    if b.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(b)
}

/// Identity of a namespace of this process (`/proc/self/ns/KIND` inode).
pub fn namespace_id(kind: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// This boot of the host (`/proc/sys/kernel/random/boot_id`), read once
/// per process (it cannot change while the process lives; a start asks
/// for it several times, and a reclaim once per reservation).
pub fn boot_id() -> Option<String> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let s = s.trim();
        (!s.is_empty() && s.len() <= 64).then(|| s.to_string())
    })
    .clone()
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
    fn secure_dir_refuses_symlinks_foreign_owners_and_open_modes() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b/state");
        secure_dir(&p, 0o700).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o700);
        secure_dir(&p, 0o700).unwrap(); // idempotent

        // checked once per process, but the directory itself every time
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            secure_dir(&p, 0o700).is_err(),
            "a directory opened up later"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        secure_dir(&p, 0o700).unwrap();
        // a directory replaced under an opened-up parent is walked again
        let a = d.path().join("a");
        std::fs::rename(&a, d.path().join("a.old")).unwrap();
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = secure_dir(&p, 0o700).unwrap_err().to_string();
        assert!(e.contains("can be changed by other users"), "{e}");
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o755)).unwrap();
        // a root-owned link in a directory another user owns: they can swap
        // it, though every ancestor of where it points is safe
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let home = d.path().join("home");
            let target = d.path().join("target");
            std::fs::create_dir(&home).unwrap();
            std::fs::create_dir(&target).unwrap();
            std::os::unix::fs::symlink(&target, home.join("link")).unwrap();
            let via = home.join("link/state");
            secure_dir(&via, 0o700).unwrap(); // control: home is root's
            let via2 = home.join("link/state2");
            std::os::unix::fs::chown(&home, Some(1000), None).unwrap();
            let e = secure_dir(&via2, 0o700).unwrap_err().to_string();
            assert!(e.contains("which other users can change"), "{e}");
        }
        // a directory others can write is refused
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = secure_dir(&p, 0o755).unwrap_err().to_string();
        assert!(e.contains("writable by group or others"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        // a symlink (to a directory anyone could have made) is refused
        let target = d.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = secure_dir(&link, 0o700).unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        // a directory owned by another user is refused
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let foreign = d.path().join("foreign");
            std::fs::create_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(1000), Some(1000)).unwrap();
            let e = secure_dir(&foreign, 0o700).unwrap_err().to_string();
            assert!(e.contains("owned by uid 1000"), "{e}");
            // a user's symlink on the way (in a sticky directory) is refused
            let sticky = d.path().join("sticky");
            std::fs::create_dir(&sticky).unwrap();
            std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
            let ulink = sticky.join("ulink");
            symlink_as(1000, &p, &ulink);
            let e = secure_dir(&ulink.join("x"), 0o700).unwrap_err().to_string();
            assert!(e.contains("symlink owned by uid 1000"), "{e}");
            // and so is anything under a directory another user can write
            let open = d.path().join("open");
            std::fs::create_dir(&open).unwrap();
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
            let e = secure_dir(&open.join("x"), 0o700).unwrap_err().to_string();
            assert!(e.contains("can be changed by other users"), "{e}");
            assert_eq!(std::fs::metadata(&foreign).unwrap().uid(), 1000);
        }
    }

    fn symlink_as(uid: u32, target: &Path, link: &Path) {
        std::os::unix::fs::symlink(target, link).unwrap();
        let c = std::ffi::CString::new(link.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C string; lchown of a link we made.
        assert_eq!(unsafe { libc::lchown(c.as_ptr(), uid, uid) }, 0);
    }

    #[test]
    fn namespaces_and_boot() {
        assert!(namespace_id("pid").is_some());
        assert_eq!(namespace_id("pid"), namespace_id("pid"));
        assert_eq!(boot_id().map(|b| b.len()), Some(36));
    }

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
    fn replace_atomic_replaces_and_never_follows_a_planted_temp_link() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        replace_atomic(&p, b"one", 0o644).unwrap();
        replace_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temp file left"
        );
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let tmp = d
            .path()
            .join(format!(".config.json.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        assert!(replace_atomic(&p, b"three", 0o644).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
    }

    #[test]
    fn unsynced_replace_exchanges_names_but_never_moves_a_directory_or_follows_a_link() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        // over a link: the link is replaced, its target is not written
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        replace_atomic(&p, b"one", 0o644).unwrap();
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // over a directory: refused as a rename would be, the directory stays
        let dir = d.path().join("record");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("inside"), b"x").unwrap();
        let e = replace_atomic(&dir, b"two", 0o644).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EISDIR), "{e}");
        assert_eq!(std::fs::read(dir.join("inside")).unwrap(), b"x");
        // nothing left behind under a temp name either way
        let mut names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["config.json", "record", "victim"]);
    }

    #[test]
    fn atomic_write_keeping_the_mode_of_an_operators_file() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::chown(&p, Some(4242), Some(4343)).unwrap();
        write_atomic_as(&p, b"new", FileMode::KeepOr(0o644), &mut |_| {}).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o640, 4242, 4343));
        let q = d.path().join("g");
        write_atomic_as(&q, b"x", FileMode::KeepOr(0o644), &mut |_| {}).unwrap();
        assert_eq!(std::fs::metadata(&q).unwrap().mode() & 0o7777, 0o644);
        // control: Set never keeps an old file's wider mode
        std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o666)).unwrap();
        write_atomic(&q, b"y", 0o600).unwrap();
        assert_eq!(std::fs::metadata(&q).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            2,
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
