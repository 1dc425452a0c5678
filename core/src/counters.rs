//! Event counters that survive restarts: `<ledger_dir>/counters.json`.
//!
//! Incremented by the runtime, the hook and `gpu-quota` at each admission,
//! refusal (by reason), release and reclaim; read by `gpu-quota metrics`.
//! An update holds an exclusive `flock` on `counters.lock` (its own lock,
//! so counting never waits on an admission) and rewrites the file in place;
//! readers hold the same lock shared, so they never see a half-written
//! file. No fsync and no rename: on this path a durable atomic replace
//! (`fsutil::write_atomic`) costs 10–13 ms per event on a busy ext4 disk
//! (docs/benchmarks.md), in every container start. The page cache reaches
//! the disk by normal writeback; a power loss can lose the last seconds of
//! increments or leave a file that does not parse, which counts again from
//! zero (Prometheus treats that as a counter reset). The file is 0644,
//! never opened through a symlink, and only a regular file is used.
use crate::fsutil;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const SCHEMA_VERSION: u32 = 1;
const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    pub version: u32,
    pub admissions: u64,
    /// Refusals by reason (see `events::Reason`).
    pub refusals: BTreeMap<String, u64>,
    pub releases: u64,
    pub reclaims: u64,
    /// Slices changed while their container ran (`gpu-quota resize`).
    #[serde(default)]
    pub resizes: u64,
    /// MPS daemons started again after theirs died or hung, by GPU UUID
    /// (`gpu-quota mps-supervise`, `gc`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mps: BTreeMap<String, MpsRestarts>,
    /// Burstable containers ended to give lent memory back, by GPU UUID
    /// (`gpu-quota burst-supervise`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub burst_ends: BTreeMap<String, u64>,
}

/// One GPU's MPS daemon restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MpsRestarts {
    pub restarts: u64,
    /// Starts that failed (tried again later).
    pub failures: u64,
    /// When the last restart succeeded (0: never).
    pub last_restart_unix: u64,
}

/// One increment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bump<'a> {
    Admission,
    Refusal(&'a str),
    Release(u64),
    Reclaim(u64),
    Resize,
    /// GPU `uuid`'s MPS daemon was started again (`ok`) or failed to be,
    /// at `now` (unix seconds).
    MpsRestart {
        uuid: &'a str,
        ok: bool,
        now: u64,
    },
    /// A burster on GPU `uuid` was ended to give its lent memory back.
    BurstEnd {
        uuid: &'a str,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    #[error("counters {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("counters {path} are not valid: {message}")]
    Invalid { path: PathBuf, message: String },
}

pub fn path(ledger_dir: &Path) -> PathBuf {
    ledger_dir.join("counters.json")
}

/// The counters now (all zero when the file does not exist yet). Creates
/// nothing.
pub fn read(ledger_dir: &Path) -> Result<Counters, CountersError> {
    let p = path(ledger_dir);
    let io = |err| CountersError::Io {
        path: p.clone(),
        err,
    };
    let _shared = match open_nofollow(&ledger_dir.join("counters.lock"), false) {
        Ok(f) => Some(flock(f, libc::LOCK_SH).map_err(io)?),
        Err(_) => None, // never bumped yet (or not ours to lock): read as is
    };
    let mut f = match open_nofollow(&p, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Counters::default()),
        Err(e) => return Err(io(e)),
    };
    let bytes = read_all(&mut f).map_err(io)?;
    parse(&p, &bytes)
}

fn parse(p: &Path, bytes: &[u8]) -> Result<Counters, CountersError> {
    serde_json::from_slice(bytes).map_err(|e| CountersError::Invalid {
        path: p.to_path_buf(),
        message: e.to_string(),
    })
}

/// Apply `bump` under the counters lock.
pub fn bump(ledger_dir: &Path, bump: Bump<'_>) -> Result<Counters, CountersError> {
    use std::io::{Seek, Write};
    let lp = ledger_dir.join("counters.lock");
    let p = path(ledger_dir);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |err| CountersError::Io { path: p, err }
    };
    fsutil::secure_dir(ledger_dir, 0o755).map_err(io(ledger_dir))?;
    let _g = fsutil::lock_exclusive(&lp).map_err(io(&lp))?;
    let mut f = open_nofollow(&p, true).map_err(io(&p))?;
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(io(&p))?;
    }
    let bytes = read_all(&mut f).map_err(io(&p))?;
    let mut c = parse(&p, &bytes).unwrap_or_default();
    c.version = SCHEMA_VERSION;
    match bump {
        Bump::Admission => c.admissions += 1,
        Bump::Refusal(reason) => *c.refusals.entry(reason.to_string()).or_default() += 1,
        Bump::Release(n) => c.releases += n,
        Bump::Reclaim(n) => c.reclaims += n,
        Bump::Resize => c.resizes += 1,
        Bump::BurstEnd { uuid } => *c.burst_ends.entry(uuid.to_string()).or_default() += 1,
        Bump::MpsRestart { uuid, ok, now } => {
            let m = c.mps.entry(uuid.to_string()).or_default();
            if ok {
                m.restarts += 1;
                m.last_restart_unix = now;
            } else {
                m.failures += 1;
            }
        }
    }
    let mut out = serde_json::to_vec_pretty(&c).expect("counters serialize");
    out.push(b'\n');
    (|| {
        f.seek(std::io::SeekFrom::Start(0))?;
        f.write_all(&out)?;
        f.set_len(out.len() as u64)
    })()
    .map_err(io(&p))?;
    Ok(c)
}

/// Open without following a final symlink; only a regular file (with
/// `create`: read-write, made 0644 when missing).
fn open_nofollow(p: &Path, create: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fsutil::open_regular(
        p,
        std::fs::OpenOptions::new()
            .read(true)
            .write(create)
            .create(create)
            .mode(0o644),
    )
}

fn read_all(f: &mut std::fs::File) -> std::io::Result<Vec<u8>> {
    fsutil::read_prefix(f, MAX_BYTES)
}

fn flock(f: std::fs::File, how: libc::c_int) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a valid, owned fd.
        if unsafe { libc::flock(f.as_raw_fd(), how) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bumps_persist_and_count_by_reason() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), Counters::default());
        bump(d.path(), Bump::Admission).unwrap();
        bump(d.path(), Bump::Admission).unwrap();
        bump(d.path(), Bump::Refusal("does_not_fit")).unwrap();
        bump(d.path(), Bump::Refusal("does_not_fit")).unwrap();
        bump(d.path(), Bump::Refusal("invalid_request")).unwrap();
        bump(d.path(), Bump::Release(2)).unwrap();
        bump(d.path(), Bump::Reclaim(1)).unwrap();
        let c = read(d.path()).unwrap();
        assert_eq!(c.admissions, 2);
        assert_eq!(c.refusals["does_not_fit"], 2);
        assert_eq!(c.refusals["invalid_request"], 1);
        assert_eq!((c.releases, c.reclaims), (2, 1));
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(path(d.path())).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o644);
    }

    #[test]
    fn mps_restarts_count_by_gpu() {
        let d = tempfile::tempdir().unwrap();
        let b = |uuid, ok, now| Bump::MpsRestart { uuid, ok, now };
        bump(d.path(), b("GPU-a", true, 10)).unwrap();
        bump(d.path(), b("GPU-a", false, 11)).unwrap();
        bump(d.path(), b("GPU-a", true, 12)).unwrap();
        bump(d.path(), b("GPU-b", false, 13)).unwrap();
        let c = read(d.path()).unwrap();
        assert_eq!(
            c.mps["GPU-a"],
            MpsRestarts {
                restarts: 2,
                failures: 1,
                last_restart_unix: 12
            }
        );
        assert_eq!(c.mps["GPU-b"].last_restart_unix, 0);
        // a file without them (an older gpu-quota's) reads
        std::fs::write(path(d.path()), b"{\"admissions\": 3}").unwrap();
        assert!(read(d.path()).unwrap().mps.is_empty());
    }

    #[test]
    fn concurrent_bumps_are_not_lost() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        bump(&dir, Bump::Admission).unwrap();
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(read(&dir).unwrap().admissions, 40);
    }

    #[test]
    fn a_planted_symlink_is_neither_read_nor_written_through() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("victim");
        std::fs::write(&target, b"{\"admissions\": 99}").unwrap();
        std::os::unix::fs::symlink(&target, path(d.path())).unwrap();
        assert!(read(d.path()).is_err(), "not followed on read");
        assert!(bump(d.path(), Bump::Admission).is_err(), "nor on update");
        assert_eq!(std::fs::read(&target).unwrap(), b"{\"admissions\": 99}");
        // a directory in its place is not used either
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(path(d.path())).unwrap();
        assert!(bump(d.path(), Bump::Admission).is_err());
    }

    #[test]
    fn a_shrinking_rewrite_leaves_no_tail() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            path(d.path()),
            format!("{{\"admissions\": 5}}{}", " ".repeat(4000)),
        )
        .unwrap();
        assert_eq!(bump(d.path(), Bump::Admission).unwrap().admissions, 6);
        let len = std::fs::metadata(path(d.path())).unwrap().len();
        assert!(len < 400, "{len}");
        assert_eq!(read(d.path()).unwrap().admissions, 6);
    }

    #[test]
    fn a_corrupt_file_restarts_at_zero() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(path(d.path()), b"{not json").unwrap();
        assert!(matches!(read(d.path()), Err(CountersError::Invalid { .. })));
        assert_eq!(bump(d.path(), Bump::Release(1)).unwrap().releases, 1);
    }
}
