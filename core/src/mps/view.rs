//! What a container with a share sees of its GPU's MPS pipe directory.
//!
//! The pipe directory holds the daemon's client socket (`control`), its
//! privileged socket (`control_privileged`), `control_lock`, the `log` FIFO
//! and the pid file. A container that got all of it could reach the
//! privileged interface and the files a read-only mount does not protect
//! (a FIFO can be written, a file opened for reading can be locked). So a
//! container gets `<state_dir>/mps/<uuid>/view/` instead: a directory of
//! hard links to [`CLIENT_ENTRIES`] only, bound read-only at
//! `/run/gpu-quota/mps`.
//!
//! Hard links, not bind mounts of the files: the daemon makes a new socket
//! each time it starts (a new inode at the same path), so a bind mount of
//! the old file would point at a socket nobody listens on after a restart,
//! and a new mount on the host would not reach the containers' mount
//! namespaces. A link in a directory the containers hold bound is replaced
//! in place ([`refresh`], after every start), and every container sees the
//! new socket at once.
use super::Dirs;
use crate::fsutil;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The pipe directory's entries a client container gets, and nothing else.
/// A CUDA client connects to `control` (measured on the H200: the pipe
/// directory of a daemon serving a client holds no other socket). Not
/// `control_privileged` (the daemon's settings), not `control_lock` or the
/// pid file (a client could lock them), not the `log` FIFO (a client could
/// write into it).
pub const CLIENT_ENTRIES: &[&str] = &[crate::formats::mps::CLIENT_SOCKET];

/// The name of the view directory beside `pipe` and `log`.
pub const SUBDIR: &str = "view";

/// GPU `d`'s view directory.
pub fn dir(d: &Dirs) -> PathBuf {
    d.root.join(SUBDIR)
}

/// Make the view hold a link to each of [`CLIENT_ENTRIES`] that the pipe
/// directory has now, and nothing else (under the daemons' lock, after a
/// start or at an admission). An entry the pipe directory lacks is removed
/// from the view: a client then gets "no such file" instead of a socket of
/// a daemon that is gone.
pub fn refresh(d: &Dirs) -> std::io::Result<()> {
    let v = dir(d);
    // 0755: a container's processes of any uid connect through it
    fsutil::secure_dir(&v, 0o755)?;
    for e in std::fs::read_dir(&v)? {
        let e = e?;
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| CLIENT_ENTRIES.contains(&n)) {
            remove(&e.path())?;
        }
    }
    for name in CLIENT_ENTRIES {
        let src = d.pipe.join(name);
        let dst = v.join(name);
        let Ok(now) = src.symlink_metadata() else {
            remove(&dst)?;
            continue;
        };
        // already this file (rename would leave both names: rename(2) does
        // nothing for two links of one inode)
        let same = |m: std::fs::Metadata| m.dev() == now.dev() && m.ino() == now.ino();
        if dst.symlink_metadata().is_ok_and(same) {
            continue;
        }
        // a new name, then renamed over the old: a client never finds the
        // entry missing while it is replaced
        let tmp = v.join(format!(".{name}.new"));
        remove(&tmp)?;
        std::fs::hard_link(&src, &tmp)?;
        std::fs::rename(&tmp, &dst)?;
    }
    Ok(())
}

/// Remove whatever `p` is (nothing when it is not there).
fn remove(p: &Path) -> std::io::Result<()> {
    match p.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixListener, UnixStream};

    fn dirs(t: &Path) -> Dirs {
        let root = t.join("GPU-a");
        let d = Dirs {
            pipe: root.join("pipe"),
            log: root.join("log"),
            root,
        };
        std::fs::create_dir_all(&d.pipe).unwrap();
        d
    }

    /// The view holds the client socket only, follows the daemon to its new
    /// socket after a restart, and drops what it should not hold.
    #[test]
    fn the_view_holds_the_client_socket_only_and_follows_a_restart() {
        let t = tempfile::tempdir().unwrap();
        let d = dirs(t.path());
        let l1 = UnixListener::bind(d.pipe.join("control")).unwrap();
        UnixListener::bind(d.pipe.join("control_privileged")).unwrap();
        for f in ["control_lock", "nvidia-cuda-mps-control.pid"] {
            std::fs::write(d.pipe.join(f), "1").unwrap();
        }
        std::fs::create_dir_all(dir(&d)).unwrap();
        std::fs::write(dir(&d).join("control_privileged"), "stale").unwrap();
        refresh(&d).unwrap();
        // again, with the daemon unchanged (an admission): nothing more
        refresh(&d).unwrap();
        let names = |p: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&dir(&d)), ["control"]);
        let ino = |p: &Path| std::fs::symlink_metadata(p).unwrap().ino();
        assert_eq!(ino(&dir(&d).join("control")), ino(&d.pipe.join("control")));
        UnixStream::connect(dir(&d).join("control")).expect("a client connects through the view");
        // the daemon restarts: a new socket at the same path
        drop(l1);
        std::fs::remove_file(d.pipe.join("control")).unwrap();
        assert!(
            UnixStream::connect(dir(&d).join("control")).is_err(),
            "nobody listens on the old socket"
        );
        let _l2 = UnixListener::bind(d.pipe.join("control")).unwrap();
        refresh(&d).unwrap();
        UnixStream::connect(dir(&d).join("control")).expect("the view follows the new socket");
        // a daemon that quit (its files gone): the view has no socket
        std::fs::remove_file(d.pipe.join("control")).unwrap();
        refresh(&d).unwrap();
        assert!(names(&dir(&d)).is_empty());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir(&d)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
    }
}
