//! Safe operations on an untrusted container rootfs.
//!
//! Every container path is resolved with `openat2(RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS)` from a handle on the rootfs: symlinks in the image
//! (absolute or `..`-laden) resolve inside the rootfs, never out of it, and
//! magic links (`/proc/1/root`, `/proc/self/fd/N`) are refused by the kernel.
//! The final component of every path we read, write or mount onto is opened
//! `O_PATH | O_NOFOLLOW` and its type checked with `fstat` before anything
//! else happens: a symlink, FIFO, device or socket there is refused with a
//! message naming the path, and nothing is ever opened for reading before
//! that check. Mounts and reads go through the checked handle
//! (`/proc/self/fd/N`), so no path is looked up twice (no window for a
//! swapped symlink).
//!
//! Every lookup also carries `RESOLVE_NO_XDEV`: the hook works in the
//! container's mount namespace, where volumes, binds of host directories and
//! tmpfs mounts already sit inside the rootfs, and nothing gpu-quota creates,
//! replaces, reads or mounts onto may be on one of them (it would be written
//! as root into the host's directory and outlive the container). A path that
//! crosses a mount, directly or steered by an image symlink, is refused with
//! the mount named (from config.json's `mounts` where it is declared there).
//! The only mounts a lookup may enter are the ones gpu-quota attached itself
//! (`/run/gpu-quota`): paths under them resolve from the handle on that mount.
/// Re-exported for the callers that name it here; owned by `mountplan`.
pub use crate::mountplan::Declared;
use crate::mountplan::{EffectError, Effects, Kind};
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub struct Rootfs {
    root: OwnedFd,
    path: PathBuf,
    /// Mounts gpu-quota attached itself: container path, handle on its root.
    own: Vec<(String, OwnedFd)>,
    /// The mounts config.json declares, to name the one a path crosses.
    declared: Vec<Declared>,
}

/// The mount id of the object `fd` names.
fn mnt_id(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: an all-zero statx is a valid value to be filled in.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, empty C string with AT_EMPTY_PATH, a statx buffer.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    (r == 0 && stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id)
}

fn io<'a>(op: &'static str, path: &'a str) -> impl Fn(std::io::Error) -> EffectError + 'a {
    move |err| EffectError::Io {
        op,
        path: path.to_string(),
        err,
    }
}

fn errno(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

fn components(rel: &str) -> Vec<&str> {
    rel.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

/// What an `fstat` mode is, for messages.
fn type_name(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symlink",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        _ => "of an unknown type",
    }
}

/// `fd` (opened `O_PATH | O_NOFOLLOW`) if it is of type `want`, else a
/// refusal naming `rel` and what it is.
fn check_type(fd: OwnedFd, rel: &str, want: u32) -> Result<OwnedFd, EffectError> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| io("stat", rel)(errno(e)))?;
    let got = st.st_mode & libc::S_IFMT;
    if got != want {
        let what = if got == libc::S_IFLNK {
            "is a symlink in the image; gpu-quota never follows or mounts over image symlinks here, refusing".to_string()
        } else {
            format!(
                "exists in the image as {}, not {}; refusing",
                type_name(got),
                type_name(want)
            )
        };
        return Err(EffectError::Refused {
            path: rel.into(),
            what,
        });
    }
    Ok(fd)
}

fn regular_file(fd: OwnedFd, rel: &str) -> Result<OwnedFd, EffectError> {
    check_type(fd, rel, libc::S_IFREG)
}

/// A path component as a C string (a NUL in it is refused, naming `rel`).
fn c_name(name: &str, rel: &str) -> Result<CString, EffectError> {
    CString::new(name).map_err(|_| EffectError::Refused {
        path: rel.into(),
        what: "NUL in path".into(),
    })
}

/// A fresh file `name` in `dir`: `O_CREAT | O_EXCL | O_NOFOLLOW`, so a
/// planted entry (a symlink included) is never reused or followed.
fn create_new_at(dir: &OwnedFd, name: &CString, mode: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: valid dirfd and C string.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2` of `rel` below `dir` with `RESOLVE_IN_ROOT |
/// RESOLVE_NO_MAGICLINKS`, plus `RESOLVE_NO_XDEV` when `same_mount`
/// (every lookup of an effect; without it only to name a crossed mount).
fn resolve_at(
    dir: &OwnedFd,
    rel: &str,
    flags: OFlag,
    same_mount: bool,
) -> Result<OwnedFd, nix::errno::Errno> {
    let mut resolve = ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS;
    if same_mount {
        resolve |= ResolveFlag::RESOLVE_NO_XDEV;
    }
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(resolve);
    let fd = openat2(dir.as_raw_fd(), rel, how)?;
    // SAFETY: fresh fd from openat2.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `O_PATH | O_NOFOLLOW` for final components: the handle names the entry
/// itself, never what a symlink there points to.
const FINAL: OFlag = OFlag::O_PATH.union(OFlag::O_NOFOLLOW);

impl Rootfs {
    pub fn open(path: &Path) -> Result<Rootfs, EffectError> {
        let p = path.display().to_string();
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("open rootfs", &p)(errno(e)))?;
        // SAFETY: fd was just returned by open and is owned by us.
        Ok(Rootfs {
            root: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.into(),
            own: Vec::new(),
            declared: Vec::new(),
        })
    }

    /// Name these mounts (config.json's) when a path crosses one of them,
    /// and enter the container's own fresh tmpfs mounts among them
    /// ([`Declared::private`]): a lookup below such a destination starts
    /// from a handle on that mount (never crossing out of it), after the
    /// handle is checked to be a tmpfs on a mount other than the rootfs's.
    /// A destination that does not resolve to such a mount (not mounted
    /// yet, or not a tmpfs) is not entered: lookups there stay refused.
    pub fn with_declared(mut self, declared: Vec<Declared>) -> Rootfs {
        let root_mnt = mnt_id(&self.root);
        for d in declared.iter().filter(|d| d.private) {
            let dest = components(&d.destination).join("/");
            if dest.is_empty() || components(&d.destination).contains(&"..") {
                continue;
            }
            let Ok(fd) = resolve_at(
                &self.root,
                &dest,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
                false,
            ) else {
                continue;
            };
            let tmpfs = nix::sys::statfs::fstatfs(&fd)
                .is_ok_and(|f| f.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
            if tmpfs && mnt_id(&fd).is_some() && mnt_id(&fd) != root_mnt {
                self.adopt(&dest, fd);
            }
        }
        self.declared = declared;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Resolve `rel` inside the rootfs, never leaving its mount: a path
    /// that crosses into another mount (a volume, a bind, a tmpfs, `/proc`)
    /// fails with `EXDEV`, except into the mounts gpu-quota attached itself,
    /// where the lookup starts from the handle on that mount.
    pub fn resolve(&self, rel: &str, flags: OFlag) -> Result<OwnedFd, nix::errno::Errno> {
        let comps = components(rel);
        let own = self
            .own
            .iter()
            .filter(|(p, _)| {
                let pc = components(p);
                !comps.contains(&"..") && comps.len() >= pc.len() && comps[..pc.len()] == pc[..]
            })
            .max_by_key(|(p, _)| components(p).len());
        let (start, rest) = match own {
            Some((p, fd)) => (fd, comps[components(p).len()..].join("/")),
            None => (&self.root, comps.join("/")),
        };
        let rest = if rest.is_empty() { "." } else { rest.as_str() };
        resolve_at(start, rest, flags, true)
    }

    /// Record a mount gpu-quota attached at `rel` (its root is `fd`):
    /// lookups below `rel` start there.
    fn adopt(&mut self, rel: &str, fd: OwnedFd) {
        self.own.push((components(rel).join("/"), fd));
    }

    /// The error for an operation on `rel` that failed with `e`: a refusal
    /// naming the mount when the lookup crossed one.
    fn fail(&self, op: &'static str, rel: &str, e: nix::errno::Errno) -> EffectError {
        if e == nix::errno::Errno::EXDEV {
            self.crossing(rel)
        } else {
            io(op, rel)(errno(e))
        }
    }

    /// Which mount `rel` crosses into, for the message: the shortest prefix
    /// that leaves the rootfs's mount, and the mount it lands on (matched by
    /// mount id against config.json's declared mounts, else shown by path).
    /// Lookups here only open `O_PATH` handles and read nothing.
    fn crossing(&self, rel: &str) -> EffectError {
        let mut sofar = String::new();
        let mut on = None;
        for c in components(rel) {
            sofar.push('/');
            sofar.push_str(c);
            match self.resolve(&sofar, OFlag::O_PATH) {
                Ok(_) => continue,
                Err(nix::errno::Errno::EXDEV) => {
                    on = resolve_at(
                        &self.root,
                        sofar.trim_start_matches('/'),
                        OFlag::O_PATH,
                        false,
                    )
                    .ok();
                }
                Err(_) => {}
            }
            break;
        }
        let id = on.as_ref().and_then(mnt_id);
        let named = self.declared.iter().find(|d| {
            let dest = components(&d.destination).join("/");
            let dest = if dest.is_empty() {
                ".".to_string()
            } else {
                dest
            };
            id.is_some()
                && resolve_at(&self.root, &dest, OFlag::O_PATH, false)
                    .ok()
                    .as_ref()
                    .and_then(mnt_id)
                    == id
        });
        let mount = match (named, &on) {
            (Some(d), _) => format!(
                "the mount at {} ({} of {}, declared in config.json)",
                d.destination,
                if d.kind.is_empty() { "mount" } else { &d.kind },
                d.source
            ),
            (None, Some(fd)) => {
                let at = std::fs::read_link(proc_fd(fd))
                    .map(|p| match p.strip_prefix(&self.path) {
                        Ok(r) => format!("/{}", r.display()),
                        Err(_) => p.display().to_string(),
                    })
                    .unwrap_or_else(|_| "?".into());
                format!("another mount (at {at})")
            }
            (None, None) => "another mount".into(),
        };
        let via = if sofar.is_empty() || sofar == rel {
            String::new()
        } else {
            format!(" ({sofar})")
        };
        EffectError::Refused {
            path: rel.into(),
            what: format!(
                "leads{via} onto {mount}, not the container's own root filesystem; gpu-quota never creates, replaces, reads or mounts onto anything on a volume, bind or tmpfs inside the rootfs (it would be written as root where the container may not write, and stay after the container is gone); mount it elsewhere, or run this image without a GPU-memory request"
            ),
        }
    }

    /// Open (creating missing components) the directory `rel`.
    pub fn mkdir_all(&self, rel: &str) -> Result<OwnedFd, EffectError> {
        self.mkdir_for(rel, rel)
    }

    /// `mkdir_all(rel)` on the way to `whole` (named when a mount is crossed).
    fn mkdir_for(&self, rel: &str, whole: &str) -> Result<OwnedFd, EffectError> {
        let fail = |op, sofar: &str, e| {
            if e == nix::errno::Errno::EXDEV {
                self.crossing(whole)
            } else {
                self.fail(op, sofar, e)
            }
        };
        let comps = components(rel);
        let mut dir = self
            .resolve("/", OFlag::O_PATH | OFlag::O_DIRECTORY)
            .map_err(|e| fail("open", "/", e))?;
        let mut sofar = String::new();
        for c in comps {
            if c == ".." {
                return Err(EffectError::Refused {
                    path: rel.into(),
                    what: "`..` in a container path".into(),
                });
            }
            sofar.push('/');
            sofar.push_str(c);
            match self.resolve(&sofar, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                Ok(fd) => dir = fd,
                Err(nix::errno::Errno::ENOENT) => {
                    let name = c_name(c, rel)?;
                    // SAFETY: valid dirfd and C string.
                    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
                    if r != 0 {
                        let e = std::io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(io("mkdir", &sofar)(e));
                        }
                        // EEXIST: made by a racing creator (fine), or a symlink to nowhere
                    }
                    dir = match self.resolve(&sofar, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                        Ok(fd) => fd,
                        Err(nix::errno::Errno::ENOENT) => {
                            return Err(EffectError::Refused {
                                path: sofar.clone(),
                                what: "exists in the image as a symlink to a missing directory; refusing to create it".into(),
                            })
                        }
                        Err(e) => return Err(fail("open", &sofar, e)),
                    };
                }
                Err(nix::errno::Errno::ENOTDIR) => {
                    return Err(EffectError::Refused {
                        path: sofar,
                        what: "exists in the image and is not a directory".into(),
                    })
                }
                Err(e) => return Err(fail("open", &sofar, e)),
            }
        }
        Ok(dir)
    }

    /// Open `rel` as a mount target of the given kind, creating an empty
    /// file or directory when it does not exist.
    pub fn ensure(&self, rel: &str, kind: Kind) -> Result<OwnedFd, EffectError> {
        if kind == Kind::Dir {
            // directories on the way may be image symlinks (resolved inside
            // the rootfs); the mount target itself never is
            self.mkdir_for(rel, rel)?;
            let fd = self
                .resolve(rel, FINAL)
                .map_err(|e| self.fail("open", rel, e))?;
            return check_type(fd, rel, libc::S_IFDIR);
        }
        let comps = components(rel);
        let (name, parent) = comps.split_last().ok_or_else(|| EffectError::Refused {
            path: rel.into(),
            what: "empty path".into(),
        })?;
        let pdir = self.mkdir_for(&parent.join("/"), rel)?;
        match self.resolve(rel, FINAL) {
            Ok(fd) => regular_file(fd, rel),
            Err(nix::errno::Errno::ENOENT) => {
                match create_new_at(&pdir, &c_name(name, rel)?, 0o644) {
                    Ok(fd) => drop(fd),
                    // made by a racing creator: checked below like any entry
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(io("create", rel)(e)),
                }
                match self.resolve(rel, FINAL) {
                    Ok(fd) => regular_file(fd, rel),
                    Err(e) => Err(self.fail("open", rel, e)),
                }
            }
            Err(e) => Err(self.fail("open", rel, e)),
        }
    }

    /// Whether `rel` exists in the image (symlinks on the way resolve inside
    /// the rootfs; the entry itself is not followed). An entry on another
    /// mount is not the image's: false.
    pub fn exists(&self, rel: &str) -> bool {
        self.resolve(rel, FINAL).is_ok()
    }

    /// Replace the image's regular file `rel` (or create it) with `bytes`:
    /// a fresh temp file (`O_CREAT | O_EXCL | O_NOFOLLOW`) in the resolved
    /// parent directory, renamed over the name. A symlink, directory or
    /// special file at `rel` is refused; nothing is ever written through a
    /// path the image controls.
    pub fn replace_file(&self, rel: &str, bytes: &[u8], mode: u32) -> Result<(), EffectError> {
        let comps = components(rel);
        let (name, parent) = comps.split_last().ok_or_else(|| EffectError::Refused {
            path: rel.into(),
            what: "empty path".into(),
        })?;
        let pdir = self.mkdir_for(&parent.join("/"), rel)?;
        match self.resolve(rel, FINAL) {
            Ok(fd) => drop(regular_file(fd, rel)?),
            Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(self.fail("open", rel, e)),
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = format!(".{name}.gpu-quota.{}.{nanos}", std::process::id());
        let ctmp = c_name(&tmp, rel)?;
        let cname = c_name(name, rel)?;
        let mut f =
            std::fs::File::from(create_new_at(&pdir, &ctmp, mode).map_err(io("create", rel))?);
        let written = (|| {
            f.write_all(bytes)?;
            // SAFETY: fchmod on an owned fd (the umask must not narrow the mode).
            if unsafe { libc::fchmod(f.as_raw_fd(), mode) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            f.sync_data()?;
            // SAFETY: valid dirfds and C strings.
            if unsafe {
                libc::renameat(
                    pdir.as_raw_fd(),
                    ctmp.as_ptr(),
                    pdir.as_raw_fd(),
                    cname.as_ptr(),
                )
            } != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })();
        if let Err(e) = written {
            // SAFETY: valid dirfd and C string.
            unsafe { libc::unlinkat(pdir.as_raw_fd(), ctmp.as_ptr(), 0) };
            return Err(io("write", rel)(e));
        }
        Ok(())
    }

    /// Read a regular file of the image, at most `max` bytes. The entry is
    /// opened `O_PATH | O_NOFOLLOW` and type-checked first; only a regular
    /// file is then opened for reading, through that same handle.
    pub fn read_file(&self, rel: &str, max: usize) -> Result<Option<Vec<u8>>, EffectError> {
        match self.resolve(rel, FINAL) {
            Ok(fd) => {
                let fd = regular_file(fd, rel)?;
                let f = reopen_read(&fd).map_err(io("open", rel))?;
                // sized once from the file (within the bound): a growing
                // buffer copies a large hostile file over and over
                let size = f.metadata().map_or(0, |m| m.len()).min(max as u64 + 1);
                let mut buf = Vec::with_capacity(size as usize);
                f.take(max as u64 + 1)
                    .read_to_end(&mut buf)
                    .map_err(io("read", rel))?;
                if buf.len() > max {
                    return Err(EffectError::Refused {
                        path: rel.into(),
                        what: format!("larger than {max} bytes"),
                    });
                }
                Ok(Some(buf))
            }
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.fail("open", rel, e)),
        }
    }
}

/// Open the checked `O_PATH` handle `fd` for reading (no second lookup).
fn reopen_read(fd: &OwnedFd) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(proc_fd(fd))
}

fn proc_fd(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Real effects: mounts in the current mount namespace (the hook enters the
/// container's first), targets resolved inside `rootfs`.
pub struct MountEffects {
    pub rootfs: Rootfs,
}

/// Linux's mount API (5.12+): a bind mount built detached, made read-only
/// while nobody can see it, and attached onto a handle — no path is looked
/// up after the target was checked.
mod newmount {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
    pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
    pub const MOUNT_ATTR_NODEV: u64 = 0x4;

    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }

    fn check(r: libc::c_long) -> std::io::Result<libc::c_long> {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    /// A detached copy of the mount at `src`: not recursive, like
    /// MS_BIND, where the kernel allows it. In a container with a user
    /// namespace of its own, the mounts copied into its mount namespace
    /// are locked to their parents, and a mount with locked mounts below
    /// `src` (the state directory's `rw/` tmpfs) may only be copied with
    /// them (EINVAL otherwise): then the copy is recursive, and
    /// [`set_attr`] applies to every mount of it.
    pub fn clone_tree(src: &OwnedFd) -> std::io::Result<OwnedFd> {
        let open = |extra: libc::c_uint| {
            // SAFETY: valid fd and an empty C string; returns a new fd or -1.
            check(unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    src.as_raw_fd(),
                    c"".as_ptr(),
                    OPEN_TREE_CLONE
                        | extra
                        | libc::O_CLOEXEC as libc::c_uint
                        | libc::AT_EMPTY_PATH as libc::c_uint,
                )
            })
        };
        let fd = match open(0) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                open(libc::AT_RECURSIVE as libc::c_uint)?
            }
            r => r?,
        };
        // SAFETY: fresh fd.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Set `attr_set` on every mount of `tree` (one, or a recursive copy's).
    pub fn set_attr(tree: &OwnedFd, attr_set: u64) -> std::io::Result<()> {
        let a = MountAttr {
            attr_set,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: valid fd, empty path, a mount_attr of the size passed.
        check(unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                tree.as_raw_fd(),
                c"".as_ptr(),
                (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
                &a as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        })
        .map(drop)
    }

    /// Attach `tree` onto the entry `target` names.
    pub fn attach(tree: &OwnedFd, target: &OwnedFd) -> std::io::Result<()> {
        // SAFETY: valid fds and empty paths.
        check(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree.as_raw_fd(),
                c"".as_ptr(),
                target.as_raw_fd(),
                c"".as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
            )
        })
        .map(drop)
    }
}

impl Effects for MountEffects {
    /// Bind `src` onto the checked handle of `dst`. A read-only bind is
    /// read-only (and nosuid, nodev) before it is attached: an earlier
    /// version remounted it afterwards by looking `dst` up again, and a
    /// rename racing in a shared volume could send that remount to another
    /// mount, leaving the host file writable in the container.
    fn bind(
        &mut self,
        src: &Path,
        dst: &str,
        kind: Kind,
        readonly: bool,
    ) -> Result<(), EffectError> {
        let s = src.display().to_string();
        let sfd = nix::fcntl::open(src, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| io("open", &s)(errno(e)))?;
        // SAFETY: fresh fd.
        let sfd = unsafe { OwnedFd::from_raw_fd(sfd) };
        let tfd = self.rootfs.ensure(dst, kind)?;
        let tree = newmount::clone_tree(&sfd).map_err(io("clone the mount of", dst))?;
        if readonly {
            newmount::set_attr(
                &tree,
                newmount::MOUNT_ATTR_RDONLY
                    | newmount::MOUNT_ATTR_NOSUID
                    | newmount::MOUNT_ATTR_NODEV,
            )
            .map_err(io("make read-only the mount for", dst))?;
        }
        newmount::attach(&tree, &tfd).map_err(io("bind-mount onto", dst))?;
        if kind == Kind::Dir {
            // our own mount: the targets below it resolve from its root
            self.rootfs.adopt(dst, tree);
        }
        Ok(())
    }

    fn read_rootfs_file(&mut self, dst: &str, max: usize) -> Result<Option<Vec<u8>>, EffectError> {
        self.rootfs.read_file(dst, max)
    }

    fn write_host_file(&mut self, path: &Path, bytes: &[u8]) -> Result<(), EffectError> {
        // a file of the root-owned state directory: never through a symlink
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(io("write", &path.display().to_string()))
    }

    fn rootfs_exists(&mut self, dst: &str) -> bool {
        self.rootfs.exists(dst)
    }

    fn replace_rootfs_file(
        &mut self,
        dst: &str,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), EffectError> {
        self.rootfs.replace_file(dst, bytes, mode)
    }

    fn read_host_file(&mut self, path: &Path, max: usize) -> Result<Vec<u8>, EffectError> {
        let p = path.display().to_string();
        let mut buf = Vec::new();
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .and_then(|f| f.take(max as u64).read_to_end(&mut buf))
            .map_err(io("read", &p))?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests;
