//! The host's side of a reclaim round: the container files a round looks
//! at ([`Files`]), the grant words it stores, and ending a burster.
use super::{Look, Reading};
use crate::config::Config;
use crate::ledger::Reservation;
use crate::{fsutil, grantfile, state, usage};
use gpuquota_formats::grant;
use std::path::PathBuf;

/// The containers' state files on this host.
pub struct Files<'a> {
    pub cfg: &'a Config,
}

impl Files<'_> {
    fn dir(&self, r: &Reservation) -> PathBuf {
        state::existing_dir(self.cfg, r)
    }
    /// Store the reclaim word of `r`'s grant for GPU `uuid`.
    pub fn set_word(&self, r: &Reservation, uuid: &str, word: u64) -> std::io::Result<()> {
        grantfile::set_reclaim_word(&self.dir(r).join(grant::FILE_NAME), uuid, word)
    }
}

impl Look for Files<'_> {
    fn reading(&self, r: &Reservation, uuid: &str) -> Option<Reading> {
        let u = usage::read(&state::usage_path(&self.dir(r)))?;
        let raw = gpuquota_formats::limits::parse_uuid(uuid.as_bytes())?;
        let d = u.device_of(&raw)?;
        Some(Reading {
            used: u.used[d],
            want: u.reclaim_want[d],
        })
    }
    fn word(&self, r: &Reservation, uuid: &str) -> Option<u64> {
        grantfile::reclaim_word(&self.dir(r).join(grant::FILE_NAME), uuid).ok()
    }
    fn driver_held(&self, r: &Reservation, uuid: &str) -> Option<u64> {
        crate::lifecycle::held::held_on(self.cfg, &self.dir(r), r, uuid)
            .driver
            .ok()
            .map(|d| d.bytes)
    }
}

/// Why a container could not be ended.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    #[error("container {id} has no process this host can name (not started, or recorded in another pid namespace or boot)")]
    NoProcess { id: String },
    #[error("container {id}'s process {pid} is gone")]
    Gone { id: String, pid: u32 },
    #[error("cannot end container {id} (process {pid}): {err}")]
    Kill {
        id: String,
        pid: u32,
        err: std::io::Error,
    },
}

/// How the container was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// The line went to its init's stderr.
    Stderr,
    /// Its stderr is not a pipe: the line is in the host's event only.
    EventOnly,
}

/// End container `r`: one line on its init's stderr where that is a pipe
/// or FIFO, then its cgroup killed (SIGKILL to every process: exit status
/// 137), or its init killed where the cgroup cannot be named (which ends
/// the pid namespace). The process is named by the pid and start time the
/// hook recorded, in this host's pid namespace and boot only.
pub fn end(r: &Reservation, line: &str) -> Result<Told, EndError> {
    let id = r.container_id.clone();
    let (Some(pid), Some(start)) = (r.pid, r.pid_start) else {
        return Err(EndError::NoProcess { id });
    };
    let here = fsutil::namespace_id("pid");
    if r.pid_ns.is_some() && r.pid_ns != here
        || r.boot_id
            .as_deref()
            .is_some_and(|b| Some(b) != fsutil::boot_id().as_deref())
    {
        return Err(EndError::NoProcess { id });
    }
    if !fsutil::process_alive(pid, start) {
        return Err(EndError::Gone { id, pid });
    }
    let told = tell(pid, line);
    let cg = crate::drvlimit::container_cgroup(
        std::path::Path::new("/proc"),
        std::path::Path::new("/sys/fs/cgroup"),
        pid,
    );
    let killed = match cg {
        Ok(dir) if dir.join("cgroup.kill").exists() => {
            std::fs::write(dir.join("cgroup.kill"), b"1")
        }
        _ => Err(std::io::Error::other("no cgroup.kill")),
    };
    if killed.is_err() {
        // SAFETY: kill(2) of a pid checked alive with its start time above
        if unsafe { libc::kill(pid as i32, libc::SIGKILL) } != 0 {
            return Err(EndError::Kill {
                id,
                pid,
                err: std::io::Error::last_os_error(),
            });
        }
    }
    Ok(told)
}

/// Write `line` to the stderr of `pid` when it is a pipe or FIFO: never a
/// regular file (the host would write into a file of the container's
/// choosing) nor a device (opening one can have effects), never blocking.
fn tell(pid: u32, line: &str) -> Told {
    use std::io::Write;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let p = format!("/proc/{pid}/fd/2");
    let Ok(before) = std::fs::metadata(&p) else {
        return Told::EventOnly;
    };
    if !before.file_type().is_fifo() {
        return Told::EventOnly;
    }
    let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&p)
    else {
        return Told::EventOnly;
    };
    match f.metadata() {
        Ok(m) if m.file_type().is_fifo() && m.dev() == before.dev() && m.ino() == before.ino() => {}
        _ => return Told::EventOnly,
    }
    let mut b = line.as_bytes().to_vec();
    b.push(b'\n');
    match f.write(&b) {
        Ok(n) if n == b.len() => Told::Stderr,
        _ => Told::EventOnly,
    }
}
