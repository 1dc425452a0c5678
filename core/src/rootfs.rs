//! Safe operations on an untrusted container rootfs.
//!
//! Every container path is resolved with `openat2(RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS)` from a handle on the rootfs: symlinks in the image
//! (absolute or `..`-laden) resolve inside the rootfs, never out of it.
//! Mounts target the resolved handle through `/proc/self/fd/N`, so no path
//! is looked up twice (no window for a swapped symlink).
use crate::mountplan::{EffectError, Effects, Kind};
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Rootfs {
    root: OwnedFd,
    path: PathBuf,
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

/// `fd` if it names a regular file, else a refusal naming `rel`.
fn regular_file(fd: OwnedFd, rel: &str) -> Result<OwnedFd, EffectError> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| io("stat", rel)(errno(e)))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(EffectError::Refused {
            path: rel.into(),
            what: "exists in the image and is not a regular file".into(),
        });
    }
    Ok(fd)
}

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
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Resolve `rel` inside the rootfs.
    pub fn resolve(&self, rel: &str, flags: OFlag) -> Result<OwnedFd, nix::errno::Errno> {
        let rel = rel.trim_start_matches('/');
        let rel = if rel.is_empty() { "." } else { rel };
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = openat2(self.root.as_raw_fd(), rel, how)?;
        // SAFETY: fresh fd from openat2.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Open (creating missing components) the directory `rel`.
    pub fn mkdir_all(&self, rel: &str) -> Result<OwnedFd, EffectError> {
        let comps = components(rel);
        let mut dir = self
            .resolve("/", OFlag::O_PATH | OFlag::O_DIRECTORY)
            .map_err(|e| io("open", "/")(errno(e)))?;
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
                    let name = CString::new(c).map_err(|_| EffectError::Refused {
                        path: rel.into(),
                        what: "NUL in path".into(),
                    })?;
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
                        Err(e) => return Err(io("open", &sofar)(errno(e))),
                    };
                }
                Err(nix::errno::Errno::ENOTDIR) => {
                    return Err(EffectError::Refused {
                        path: sofar,
                        what: "exists in the image and is not a directory".into(),
                    })
                }
                Err(e) => return Err(io("open", &sofar)(errno(e))),
            }
        }
        Ok(dir)
    }

    /// Open `rel` as a mount target of the given kind, creating an empty
    /// file or directory when it does not exist.
    pub fn ensure(&self, rel: &str, kind: Kind) -> Result<OwnedFd, EffectError> {
        if kind == Kind::Dir {
            return self.mkdir_all(rel);
        }
        let comps = components(rel);
        let (name, parent) = comps.split_last().ok_or_else(|| EffectError::Refused {
            path: rel.into(),
            what: "empty path".into(),
        })?;
        let pdir = self.mkdir_all(&parent.join("/"))?;
        match self.resolve(rel, OFlag::O_PATH) {
            Ok(fd) => regular_file(fd, rel),
            Err(nix::errno::Errno::ENOENT) => {
                let cname = CString::new(*name).map_err(|_| EffectError::Refused {
                    path: rel.into(),
                    what: "NUL in path".into(),
                })?;
                // SAFETY: valid dirfd and C string; O_NOFOLLOW|O_EXCL never follows a planted link.
                let fd = unsafe {
                    libc::openat(
                        pdir.as_raw_fd(),
                        cname.as_ptr(),
                        libc::O_CREAT
                            | libc::O_EXCL
                            | libc::O_WRONLY
                            | libc::O_NOFOLLOW
                            | libc::O_CLOEXEC,
                        0o644,
                    )
                };
                if fd < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(io("create", rel)(e));
                    }
                } else {
                    // SAFETY: fresh fd.
                    drop(unsafe { OwnedFd::from_raw_fd(fd) });
                }
                match self.resolve(rel, OFlag::O_PATH) {
                    Ok(fd) => regular_file(fd, rel),
                    Err(nix::errno::Errno::ENOENT) => Err(EffectError::Refused {
                        path: rel.into(),
                        what: "is a symlink in the image pointing to a missing file; refusing to follow it".into(),
                    }),
                    Err(e) => Err(io("open", rel)(errno(e))),
                }
            }
            Err(e) => Err(io("open", rel)(errno(e))),
        }
    }

    /// Read a regular file of the image, at most `max` bytes.
    pub fn read_file(&self, rel: &str, max: usize) -> Result<Option<Vec<u8>>, EffectError> {
        match self.resolve(rel, OFlag::O_RDONLY | OFlag::O_NOCTTY | OFlag::O_NONBLOCK) {
            Ok(fd) => {
                let fd = regular_file(fd, rel)?;
                let mut buf = Vec::new();
                std::fs::File::from(fd)
                    .take(max as u64 + 1)
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
            Err(e) => Err(io("open", rel)(errno(e))),
        }
    }
}

fn proc_fd(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Real effects: mounts in the current mount namespace (the hook enters the
/// container's first), targets resolved inside `rootfs`.
pub struct MountEffects {
    pub rootfs: Rootfs,
    pub ldconfig: PathBuf,
}

impl Effects for MountEffects {
    fn bind(
        &mut self,
        src: &Path,
        dst: &str,
        kind: Kind,
        readonly: bool,
    ) -> Result<(), EffectError> {
        use nix::mount::{mount, MsFlags};
        let s = src.display().to_string();
        let sfd = nix::fcntl::open(src, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| io("open", &s)(errno(e)))?;
        // SAFETY: fresh fd.
        let sfd = unsafe { OwnedFd::from_raw_fd(sfd) };
        let tfd = self.rootfs.ensure(dst, kind)?;
        mount(
            Some(proc_fd(&sfd).as_str()),
            proc_fd(&tfd).as_str(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| io("bind-mount onto", dst)(errno(e)))?;
        if readonly {
            self.remount_ro(dst)?;
        }
        Ok(())
    }

    fn remount_ro(&mut self, dst: &str) -> Result<(), EffectError> {
        use nix::mount::{mount, MsFlags};
        // re-resolve: the handle must name the new mount, not what it covers
        let fd = self
            .rootfs
            .resolve(dst, OFlag::O_PATH)
            .map_err(|e| io("open", dst)(errno(e)))?;
        mount(
            None::<&str>,
            proc_fd(&fd).as_str(),
            None::<&str>,
            MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV,
            None::<&str>,
        )
        .map_err(|e| io("remount read-only", dst)(errno(e)))
    }

    fn read_rootfs_file(&mut self, dst: &str, max: usize) -> Result<Option<Vec<u8>>, EffectError> {
        self.rootfs.read_file(dst, max)
    }

    fn write_host_file(&mut self, path: &Path, bytes: &[u8]) -> Result<(), EffectError> {
        std::fs::write(path, bytes).map_err(io("write", &path.display().to_string()))
    }

    fn ldconfig(&mut self, dirs: &[String]) -> Result<(), EffectError> {
        // Only images with a glibc loader need (or can use) a loader cache.
        let has_loader = [
            "/lib64/ld-linux-x86-64.so.2",
            "/lib/ld-linux-aarch64.so.1",
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        ]
        .iter()
        .any(|p| self.rootfs.resolve(p, OFlag::O_PATH).is_ok());
        if !has_loader {
            return Ok(());
        }
        // The host's ldconfig chroots into the rootfs itself (-r), with a
        // clean environment; -X: links were made by us already.
        let out = Command::new(&self.ldconfig)
            .arg("-X")
            .arg("-r")
            .arg(self.rootfs.path())
            .args(dirs)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .map_err(io("run", &self.ldconfig.display().to_string()))?;
        if !out.status.success() {
            return Err(EffectError::Refused {
                path: self.ldconfig.display().to_string(),
                what: format!(
                    "failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let host = tempfile::tempdir().unwrap();
        let secret = host.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("ld.so.preload"), b"HOST").unwrap();
        let root = host.path().join("rootfs");
        std::fs::create_dir(&root).unwrap();
        // /etc -> absolute host dir; /lib -> ../../.. escape attempt
        symlink(&secret, root.join("etc")).unwrap();
        symlink("../../../../../..", root.join("lib")).unwrap();
        let r = Rootfs::open(&root).unwrap();
        // reading through /etc never reaches the host file
        let e = r.read_file("/etc/ld.so.preload", 100).unwrap();
        assert_eq!(e, None, "host file must be invisible");
        // creating under /etc is refused, not done on the host
        let err = r
            .ensure("/etc/ld.so.preload", Kind::File)
            .unwrap_err()
            .to_string();
        assert!(err.contains("symlink"), "{err}");
        assert_eq!(
            std::fs::read(secret.join("ld.so.preload")).unwrap(),
            b"HOST"
        );
        assert_eq!(std::fs::read_dir(&secret).unwrap().count(), 1);
        // /lib/x resolves to <root>/x
        r.ensure("/lib/x", Kind::File).unwrap();
        assert!(root.join("x").exists());
    }

    #[test]
    fn dangling_file_symlink_refused_and_dirs_created() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir(root.join("etc")).unwrap();
        symlink("/nonexistent/host/file", root.join("etc/ld.so.preload")).unwrap();
        let r = Rootfs::open(root).unwrap();
        assert!(r.ensure("/etc/ld.so.preload", Kind::File).is_err());
        r.ensure("/run/gpu-quota/driver", Kind::Dir).unwrap();
        assert!(root.join("run/gpu-quota/driver").is_dir());
        std::fs::write(root.join("file"), b"x").unwrap();
        assert!(r.ensure("/file/sub", Kind::Dir).is_err());
        assert!(
            r.ensure("/run", Kind::File).is_err(),
            "a directory is not a file target"
        );
    }
}
