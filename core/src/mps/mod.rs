//! The MPS control daemon of each GPU that has compute shares (`sm=`).
//!
//! gpu-quota owns one `nvidia-cuda-mps-control -d -M` per GPU with shares:
//! started when the first container with a share on that GPU is admitted,
//! asked to quit when the last one is released (a daemon left running
//! would keep its server's memory on the GPU and keep the GPU in MPS mode
//! for nobody). Its pipe and log directories are
//! `<state_dir>/mps/<uuid>/{pipe,log}`, never a user's; a container with a
//! share gets its GPU's view of the pipe directory (the client socket only,
//! [`view`]) read-only at `formats::mps::CONTAINER_PIPE_DIR` and runs as a
//! client there. [`supervise`] starts a new daemon where one died or hangs.
//!
//! Multi-user (`-M`): shares run as their containers' host users, never
//! host root unless the operator allows it (`mps_root_shares`), because
//! MPS serves root on the client socket the commands that steer a server
//! and end other clients; a non-root uid is refused them. One server
//! serves every uid at once.
//!
//! No shared `/dev/shm`: on the H200 a client with a private `/dev/shm`
//! ran at its share (docs/gpu-runs/2026-12-02-h200-mps-facts), so each
//! container keeps its own.
//!
//! The daemon is a process of its own (it daemonizes): a runtime or hook
//! that exits, restarts or is upgraded leaves it and its clients alone,
//! and the paths are the same for the next release. Whether one answers is
//! asked at every admission with a share and by `gpu-quota gc`, which
//! start one where shares exist and none answers (a daemon that died, a
//! reboot) and stop those whose GPU has no share left.
//!
//! Every start and stop decision is taken under `<state_dir>/mps/lock`,
//! reading the ledger inside it; an admission takes it only after its
//! reservation is written. So a release that reads no share left and
//! stops the daemon either runs before the admission's `ensure` (which then
//! starts a new one) or sees the admission's share and leaves the daemon.
mod orphans;
pub mod supervise;
pub mod view;

use crate::config::Config;
use crate::formats::mps as names;
use crate::formats::mps::ClientShare;
use crate::fsutil;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The state directory's subdirectory of daemons.
pub const SUBDIR: &str = names::DAEMONS_SUBDIR;
/// The control program's name in the driver's bin directories.
pub const CONTROL_NAME: &str = "nvidia-cuda-mps-control";
/// How long a control command or a start may take.
const DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum MpsError {
    #[error("a compute share (sm=) needs NVIDIA's MPS control daemon, but no trusted {CONTROL_NAME} was found ({looked}); install the driver's MPS utilities, set mps_control in the config, or leave sm out")]
    NoControl { looked: String },
    #[error("GPU {uuid}: {what}")]
    Daemon { uuid: String, what: String },
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

/// One GPU's daemon directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    pub root: PathBuf,
    pub pipe: PathBuf,
    pub log: PathBuf,
}

/// Whether `uuid` may name a directory (NVML's `GPU-…`: hex and dashes).
fn valid_uuid(uuid: &str) -> bool {
    !uuid.is_empty()
        && uuid.len() <= 80
        && uuid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `<state_dir>/mps`.
pub fn base(cfg: &Config) -> PathBuf {
    cfg.state_dir.join(SUBDIR)
}

/// The directories of GPU `uuid`'s daemon.
pub fn dirs(cfg: &Config, uuid: &str) -> Option<Dirs> {
    valid_uuid(uuid).then(|| {
        let root = base(cfg).join(uuid);
        Dirs {
            pipe: root.join(names::DAEMON_PIPE),
            log: root.join("log"),
            root,
        }
    })
}

/// What talking to a daemon does; the host's is [`HostControl`], tests
/// record.
pub trait Control {
    /// A daemon answers on `d.pipe`.
    fn answers(&self, d: &Dirs) -> bool;
    /// Start one for GPU `uuid` (returns once it answers or failed).
    fn start(&self, uuid: &str, d: &Dirs) -> Result<(), String>;
    /// Ask it to quit (returns once it is gone or the deadline passed).
    fn quit(&self, d: &Dirs) -> Result<(), String>;
    /// End a daemon of `d` that does not answer (still starting, stuck),
    /// so that its directory never goes while it lives on.
    fn kill(&self, d: &Dirs);
    /// Bound every client the daemon serves from now on to `pct` percent
    /// of the GPU's SMs, whatever the client's environment asks
    /// ([`limit_clients`]).
    fn limit(&self, d: &Dirs, pct: ClientShare) -> Result<(), String>;
}

/// The GPUs that hold shares, in the reservations that count.
pub fn shared_gpus(data: &crate::ledger::LedgerData) -> BTreeSet<String> {
    data.usage()
        .into_iter()
        .filter(|(_, u)| u.sm > 0)
        .map(|(uuid, _)| uuid)
        .collect()
}

/// Under the daemons' lock.
fn locked<T>(cfg: &Config, f: impl FnOnce() -> Result<T, MpsError>) -> Result<T, MpsError> {
    let b = base(cfg);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |err| MpsError::Io { path, err }
    };
    // 0700: no other host user reaches a daemon's sockets or logs (the
    // pipe and view directories below are 0755; the containers get the view)
    fsutil::secure_dir(&b, 0o700).map_err(io(&b))?;
    let lp = b.join("lock");
    let _g = fsutil::lock_exclusive(&lp).map_err(io(&lp))?;
    f()
}

/// Make sure GPU `uuid`'s daemon answers (an admission with a share on it,
/// after its reservation was written); returns its directories.
pub fn ensure(cfg: &Config, uuid: &str, ctl: &dyn Control) -> Result<Dirs, MpsError> {
    let d = dirs(cfg, uuid).ok_or_else(|| MpsError::Daemon {
        uuid: uuid.into(),
        what: "not a GPU UUID that can name a directory".into(),
    })?;
    // a UUID longer than NVML's, or a config not made by Config::parse:
    // said here rather than by a daemon that never answers
    crate::config::check_socket_path(
        "the MPS control daemon's socket",
        &d.pipe.join(names::LONGEST_SOCKET),
    )
    .map_err(|e| MpsError::Daemon {
        uuid: uuid.into(),
        what: e.to_string(),
    })?;
    locked(cfg, || {
        if !ctl.answers(&d) {
            start(cfg, uuid, &d, ctl)?;
        } else {
            // a daemon started by a gpu-quota before the view existed
            refresh_view(uuid, &d)?;
        }
        Ok(d)
    })
}

/// Make `d`'s directories and start GPU `uuid`'s daemon there (under the
/// lock), its clients bounded by the largest part of a share the ledger
/// holds on that GPU before the containers' view links its socket: a
/// daemon started again (by the supervisor, `gc`) would otherwise serve
/// the first clients to reach it at its default, the whole GPU.
fn start(cfg: &Config, uuid: &str, d: &Dirs, ctl: &dyn Control) -> Result<(), MpsError> {
    for (p, mode) in [(&d.root, 0o700), (&d.pipe, 0o755), (&d.log, 0o700)] {
        fsutil::secure_dir(p, mode).map_err(|err| MpsError::Io {
            path: p.clone(),
            err,
        })?;
    }
    clear_stale(d);
    ctl.start(uuid, d).map_err(|what| MpsError::Daemon {
        uuid: uuid.into(),
        what,
    })?;
    let limit = crate::Ledger::new(cfg)
        .read()
        .map(|data| client_limits(&data).remove(uuid));
    let bounded = match limit {
        Ok(Some(pct)) => ctl.limit(d, pct).map_err(|what| {
            format!(
                "cannot bound its clients to {}% of the SMs: {what}",
                pct.value().as_str()
            )
        }),
        Ok(None) => Ok(()),
        Err(e) => Err(format!(
            "the ledger, which says how far to bound its clients, cannot be read: {e}"
        )),
    };
    if let Err(what) = bounded {
        // no container reaches a daemon whose clients are not bounded
        ctl.kill(d);
        return Err(MpsError::Daemon {
            uuid: uuid.into(),
            what,
        });
    }
    // the containers' links to the new daemon's socket
    refresh_view(uuid, d)
}

/// What a daemon that died (kill -9, a crash) left in its pipe directory:
/// its sockets, lock, pid file and log FIFO. Called under the daemons'
/// lock before a start, when no daemon answers there (a hung one was
/// killed first): NVIDIA's control program may refuse to start over them.
fn clear_stale(d: &Dirs) {
    // a daemon whose process still lives (slow to answer) keeps its files
    if daemon_alive(d) {
        return;
    }
    let Ok(rd) = std::fs::read_dir(&d.pipe) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| !t.is_dir()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The process of `d`'s pid file lives.
fn daemon_alive(d: &Dirs) -> bool {
    std::fs::read_to_string(d.pipe.join(PID_FILE))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
}

fn refresh_view(uuid: &str, d: &Dirs) -> Result<(), MpsError> {
    view::refresh(d).map_err(|err| MpsError::Daemon {
        uuid: uuid.into(),
        what: format!(
            "cannot link the daemon's client socket into {}: {err}",
            view::dir(d).display()
        ),
    })
}

/// What [`settle`] did; one GPU's failure does not stop the others.
#[derive(Debug, Default)]
pub struct Settled {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub failed: Vec<MpsError>,
}

/// After shares were released (a container's end, a claim's unprepare):
/// stop the daemons of GPUs with no share left, and bound the clients of
/// the daemons left by the largest part of a share still there. What could
/// not be done, as lines for the caller's log (a release never fails on
/// it: the supervisor and `gc` settle again).
pub fn settle_released(cfg: &Config) -> Vec<String> {
    let mut out = vec![];
    let settled = HostControl::find(cfg).and_then(|ctl| {
        settle(
            cfg,
            || {
                crate::ledger::Ledger::new(cfg)
                    .read()
                    .ok()
                    .map(|d| shared_gpus(&d))
            },
            false,
            &ctl,
        )
    });
    match settled {
        Ok(s) => out.extend(
            s.failed
                .iter()
                .map(|e| format!("MPS daemon not stopped: {e}")),
        ),
        Err(e) => out.push(format!("MPS daemon not stopped: {e}")),
    }
    let limited = HostControl::find(cfg).and_then(|ctl| {
        limit_clients(
            cfg,
            || {
                crate::ledger::Ledger::new(cfg)
                    .read()
                    .ok()
                    .map(|d| client_limits(&d))
            },
            &ctl,
        )
    });
    out.extend(
        limited
            .into_iter()
            .flatten()
            .map(|e| format!("MPS daemon: {e}")),
    );
    out
}

/// Bring the daemons in line with the ledger: stop (and remove the
/// directories of) every daemon whose GPU has no share left; with
/// `restart`, start one for every GPU with shares where none answers.
/// The shares are read inside the lock (`read` is called there).
pub fn settle(
    cfg: &Config,
    read: impl Fn() -> Option<BTreeSet<String>>,
    restart: bool,
    ctl: &dyn Control,
) -> Result<Settled, MpsError> {
    // no daemon was ever started here (ensure makes the directory under
    // the lock first) and, where asked to restart, none is wanted: a host
    // without shares gets no directory
    if !base(cfg).exists() && (!restart || read().is_none_or(|s| s.is_empty())) {
        return Ok(Settled::default());
    }
    locked(cfg, || {
        let mut out = Settled::default();
        // a ledger that does not read: leave every daemon as it is
        let Some(shares) = read() else {
            return Ok(out);
        };
        let present: Vec<String> = std::fs::read_dir(base(cfg))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| e.file_name().to_str().map(String::from))
                    .filter(|n| valid_uuid(n))
                    .collect()
            })
            .unwrap_or_default();
        for uuid in &present {
            if shares.contains(uuid) {
                continue;
            }
            let d = dirs(cfg, uuid).expect("validated above");
            if !ctl.answers(&d) {
                ctl.kill(&d);
            } else {
                if let Err(what) = ctl.quit(&d) {
                    // its directory stays (the daemon may still be there);
                    // the other GPUs are still seen to
                    out.failed.push(MpsError::Daemon {
                        uuid: uuid.clone(),
                        what,
                    });
                    continue;
                }
            }
            let _ = std::fs::remove_dir_all(&d.root);
            out.stopped.push(uuid.clone());
        }
        if restart {
            for uuid in &shares {
                let Some(d) = dirs(cfg, uuid) else { continue };
                if !ctl.answers(&d) {
                    match start(cfg, uuid, &d, ctl) {
                        Ok(()) => out.started.push(uuid.clone()),
                        Err(e) => out.failed.push(e),
                    }
                }
            }
        }
        Ok(out)
    })
}

/// The largest part of a share one client may run at, per GPU with shares:
/// each share split over its processes ([`crate::formats::mps::client_share`],
/// as its grant has it), the largest of a GPU's shares.
pub fn client_limits(data: &crate::ledger::LedgerData) -> BTreeMap<String, ClientShare> {
    let mut out: BTreeMap<String, ClientShare> = BTreeMap::new();
    for s in data
        .reservations
        .iter()
        .filter(|r| r.counts())
        .filter_map(|r| r.share())
    {
        let part = names::client_share(s.sm_percent, s.sm_procs);
        let e = out.entry(s.uuid.clone()).or_insert(part);
        *e = (*e).max(part);
    }
    out
}

/// Bound the clients of each GPU's daemon by the largest part of a share
/// on that GPU (`read`, called inside the daemons' lock: what the ledger
/// holds then). MPS lets a client's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`
/// only lower the limit its daemon sets, so a process that bypasses
/// libgpuquota.so (a static binary, one without the preload) runs at most
/// at this limit instead of the whole GPU. The default of the next server
/// and the limit of each running one are set: a running server's clients
/// keep the limit they started with (NVIDIA: the setting applies to the
/// server's new clients). A GPU whose daemon does not answer is skipped
/// (its start sets it). Returns the GPUs that failed, each with why.
pub fn limit_clients(
    cfg: &Config,
    read: impl Fn() -> Option<BTreeMap<String, ClientShare>>,
    ctl: &dyn Control,
) -> Result<Vec<MpsError>, MpsError> {
    if !base(cfg).exists() {
        return Ok(Vec::new());
    }
    locked(cfg, || {
        let Some(limits) = read() else {
            return Ok(Vec::new());
        };
        let mut failed = Vec::new();
        for (uuid, pct) in &limits {
            let Some(d) = dirs(cfg, uuid) else { continue };
            if !ctl.answers(&d) {
                continue;
            }
            if let Err(what) = ctl.limit(&d, *pct) {
                failed.push(MpsError::Daemon {
                    uuid: uuid.clone(),
                    what: format!(
                        "cannot bound its clients to {}% of the SMs: {what}",
                        pct.value().as_str()
                    ),
                });
            }
        }
        Ok(failed)
    })
}

/// The host's daemons, driven through NVIDIA's control program.
pub struct HostControl {
    pub program: PathBuf,
}

impl HostControl {
    /// The control program `cfg` names or the driver's bin directories
    /// hold, if it is one root trusts.
    pub fn find(cfg: &Config) -> Result<HostControl, MpsError> {
        let candidates: Vec<PathBuf> = match &cfg.mps_control {
            Some(p) => vec![p.clone()],
            None => cfg
                .driver
                .bin_dirs
                .iter()
                .map(|d| d.join(CONTROL_NAME))
                .collect(),
        };
        candidates
            .iter()
            .find_map(|p| crate::paths::trusted_program(p))
            .map(|program| HostControl { program })
            .ok_or_else(|| MpsError::NoControl {
                looked: candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The program with a clean environment: only what the daemon needs,
    /// nothing of the caller's (a runtime's environment is the engine's).
    /// Nor any descriptor of the caller's beyond stdio: the runtime runs
    /// under an engine's shim, whose pipes a daemon that lives on must not
    /// hold open (an engine waiting for their end would wait for the
    /// daemon).
    fn command(&self, d: &Dirs) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = Command::new(&self.program);
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(names::ENV_PIPE_DIRECTORY, &d.pipe)
            .env(names::ENV_LOG_DIRECTORY, &d.log)
            .current_dir("/");
        // every descriptor from 3 up closes at exec (CLOSE_RANGE_CLOEXEC,
        // Linux 5.11: std's own error pipe keeps working until then; an
        // older kernel refuses the flag and nothing changes)
        const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
        // SAFETY: one syscall, async-signal-safe
        unsafe {
            c.pre_exec(|| {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
                Ok(())
            });
        }
        c
    }

    /// Run the UI with `input`; its output, or why it failed.
    fn ui(&self, d: &Dirs, input: &str) -> Result<String, String> {
        self.ui_within(d, input, DEADLINE)
    }

    /// [`Self::ui`] within `limit`.
    fn ui_within(&self, d: &Dirs, input: &str, limit: Duration) -> Result<String, String> {
        let mut child = self
            .command(d)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        if let Some(mut i) = child.stdin.take() {
            let _ = i.write_all(input.as_bytes());
        }
        let status = wait_until(&mut child, limit)?;
        let mut out = String::new();
        if let Some(mut o) = child.stdout.take() {
            use std::io::Read;
            let _ = o.by_ref().take(64 << 10).read_to_string(&mut out);
        }
        if status.success() {
            Ok(out)
        } else {
            Err(format!(
                "{} exited with {status}: {}",
                self.program.display(),
                out.trim()
            ))
        }
    }
}

/// Wait for `child` at most `limit`; killed after it.
fn wait_until(
    child: &mut std::process::Child,
    limit: Duration,
) -> Result<std::process::ExitStatus, String> {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Ok(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", limit.as_secs()));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The daemon's pid file in its pipe directory.
const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

impl Control for HostControl {
    fn answers(&self, d: &Dirs) -> bool {
        d.pipe.join("control").exists() && self.ui(d, "get_server_list\n").is_ok()
    }

    fn start(&self, uuid: &str, d: &Dirs) -> Result<(), String> {
        // a dead daemon's servers keep a new one from starting
        if !daemon_alive(d) {
            orphans::end(&self.program, &d.pipe, DEADLINE);
        }
        let r = self.start_once(uuid, d);
        if r.is_err() {
            // a daemon that came up too late must not outlive the refusal
            self.kill(d);
        }
        r
    }

    fn quit(&self, d: &Dirs) -> Result<(), String> {
        self.ui(d, "quit\n")?;
        let until = Instant::now() + DEADLINE;
        while d.pipe.join(PID_FILE).exists() {
            if Instant::now() >= until {
                return Err("asked to quit, the daemon is still there".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn kill(&self, d: &Dirs) {
        let Ok(text) = std::fs::read_to_string(d.pipe.join(PID_FILE)) else {
            return;
        };
        let Ok(pid) = text.trim().parse::<i32>() else {
            return;
        };
        // only the control program itself: the pid file could be stale and
        // its number another process's by now
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
        if pid > 1 && exe.is_ok_and(|e| e == self.program) {
            // SAFETY: kill(2) on a pid just checked
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let until = Instant::now() + DEADLINE;
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn limit(&self, d: &Dirs, pct: ClientShare) -> Result<(), String> {
        self.limit_servers(d, pct.value().as_str())
    }
}

impl HostControl {
    /// One command to the UI whose reply must be a percentage (the real
    /// daemon echoes a setting it took, measured for
    /// `set_default_active_thread_percentage`; its refusals are text:
    /// "Invalid active thread percentage", "Insufficient privileges…").
    /// An empty reply is taken too: the reply of
    /// `set_active_thread_percentage` on the real daemon was not measured.
    fn set(&self, d: &Dirs, cmd: &str) -> Result<(), String> {
        let out = self.ui(d, &format!("{cmd}\n"))?;
        let out = out.trim();
        if out.is_empty() || out.parse::<f64>().is_ok() {
            Ok(())
        } else {
            Err(format!("{cmd}: {out}"))
        }
    }

    /// The default of the daemon's next server, then the limit of each
    /// server running.
    fn limit_servers(&self, d: &Dirs, pct: &str) -> Result<(), String> {
        self.set(d, &format!("set_default_active_thread_percentage {pct}"))?;
        let servers = self.ui(d, "get_server_list\n")?;
        for pid in servers.split_whitespace() {
            let pid: u32 = pid
                .parse()
                .map_err(|_| format!("get_server_list: {}", servers.trim()))?;
            self.set(d, &format!("set_active_thread_percentage {pid} {pct}"))?;
        }
        Ok(())
    }
}

impl HostControl {
    fn start_once(&self, uuid: &str, d: &Dirs) -> Result<(), String> {
        let mut child = self
            .command(d)
            // the daemon serves this GPU only
            .env("CUDA_VISIBLE_DEVICES", uuid)
            .arg("-d")
            // multi-user: one server for every host uid at once (without
            // it a client of another uid waits until every client of the
            // running server has ended; shares run as their containers'
            // non-root users, measured on the H200)
            .arg("-M")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        let status = wait_until(&mut child, DEADLINE)?;
        if !status.success() {
            return Err(format!(
                "{} -d exited with {status}; see {}",
                self.program.display(),
                d.log.join("control.log").display()
            ));
        }
        let until = Instant::now() + DEADLINE;
        while Instant::now() < until {
            if self.answers(d) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "the daemon started but does not answer; see {}",
            d.log.join("control.log").display()
        ))
    }
}

#[cfg(test)]
mod tests;
