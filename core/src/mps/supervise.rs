//! Supervision of the MPS daemons: `gpu-quota mps-supervise` looks at the
//! daemon of every GPU with shares about once a second and starts a new one
//! where the old one is gone or hung, without waiting for the next
//! admission or `gpu-quota gc`.
//!
//! Why: real CUDA runs a process outside MPS, on the whole GPU, when it
//! cannot reach the control daemon (measured on the H200: 791 TFLOPS for a
//! process with a share's variables after the daemon had exited). The
//! interceptor refuses such a process's `cuInit` (interceptor/src/mpsguard.rs),
//! so a dead daemon means refused processes until it is back; this makes
//! "back" a matter of seconds.
//!
//! A daemon is healthy when its pid file names a live process whose
//! executable is the trusted control program and its control socket answers
//! `get_server_list` within [`PROBE_BOUND`]. No process: it is started again
//! at once. A process that does not answer [`HUNG_AFTER`] times in a row
//! (it is stopped, or stuck) is killed and started again. Both under the
//! daemons' lock, through the start path admissions use
//! ([`super::start`]: directories, the daemon, the containers' view), with
//! the shares read again inside the lock (a release that just stopped the
//! daemon of a GPU whose last share went is not undone).
//!
//! What it sees is written to `<state_dir>/mps-supervisor.json` after every
//! round (and before each restart, as `restarting`), for the exporter.
use super::{dirs, locked, start, Control, Dirs, HostControl, MpsError, PID_FILE};
use crate::config::Config;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// How long a daemon has to answer `get_server_list`.
pub const PROBE_BOUND: Duration = Duration::from_secs(3);
/// Rounds in a row without an answer from a live daemon before it is
/// judged hung (one slow answer, e.g. while it starts a server, is not).
pub const HUNG_AFTER: u32 = 2;
/// The longest wait before trying again to start a daemon that failed to
/// start (doubling from one round).
pub const MAX_BACKOFF_SECS: u64 = 60;
/// The status file, in the state directory.
pub const STATUS_FILE: &str = "mps-supervisor.json";
/// A daemon log past this size is moved aside (`<name>.1`, replacing the
/// one before) and emptied: the real daemon writes five lines (about 250
/// bytes) per UI session (mps-facts2.txt), so a probe a second is about
/// 21 MB a day per GPU, in the state directory's tmpfs (RAM).
pub const LOG_MAX_BYTES: u64 = 16 << 20;
/// The daemon's logs that grow.
const LOGS: [&str; 2] = ["control.log", "server.log"];

/// What a look at one daemon found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Up,
    /// No daemon process (why).
    Gone(String),
    /// A daemon process `pid` that did not answer (why).
    Unresponsive {
        pid: i32,
        why: String,
    },
}

/// What the supervisor needs of the daemons beyond [`Control`]; the host's
/// is [`HostControl`].
pub trait Watch: Control {
    fn health(&self, d: &Dirs) -> Health;
    /// The live daemon process of `d` (its pid file's, when it is the
    /// control program).
    fn daemon_pid(&self, d: &Dirs) -> Option<i32>;
}

/// A daemon's state as the exporter shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Up,
    Down,
    Restarting,
}

impl State {
    pub const ALL: [State; 3] = [State::Up, State::Down, State::Restarting];
    pub fn as_str(self) -> &'static str {
        match self {
            State::Up => "up",
            State::Down => "down",
            State::Restarting => "restarting",
        }
    }
}

/// One GPU's daemon in the status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuStatus {
    pub state: State,
    /// When it entered this state.
    pub since_unix: u64,
    /// What was last wrong with it (empty once it answers again).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The status file: the supervisor's view of every GPU with shares.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub updated_unix: u64,
    /// Seconds between rounds (the exporter calls a status older than a
    /// few rounds stale).
    pub interval_secs: u64,
    pub gpus: BTreeMap<String, GpuStatus>,
}

pub fn status_path(cfg: &Config) -> PathBuf {
    cfg.state_dir.join(STATUS_FILE)
}

/// The status file, if there is one that reads (at most 1 MiB).
pub fn read_status(cfg: &Config) -> Option<Status> {
    let b = crate::fsutil::read_regular_capped(&status_path(cfg), 1 << 20).ok()?;
    serde_json::from_slice(&b).ok()
}

pub fn write_status(cfg: &Config, s: &Status) -> std::io::Result<()> {
    let mut b = serde_json::to_vec_pretty(s).expect("status serializes");
    b.push(b'\n');
    crate::fsutil::write_atomic(&status_path(cfg), &b, 0o644)
}

/// What a round did to a daemon: each is an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A new daemon answers; `why` the old one was replaced.
    Restarted { uuid: String, why: String },
    /// Starting one failed; tried again after a backoff.
    Failed {
        uuid: String,
        why: String,
        error: String,
    },
}

/// What [`restart`] found inside the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    Started,
    /// Someone else (an admission) started one meanwhile.
    NotNeeded,
    /// The GPU has no share any more: nothing to start.
    NoShare,
}

/// Start GPU `uuid`'s daemon again under the daemons' lock, if it still
/// has shares (`read`, inside the lock) and its daemon is still not
/// healthy: `hung` is the pid judged hung, killed without asking again
/// when the pid file still names it.
pub fn restart(
    cfg: &Config,
    uuid: &str,
    read: &dyn Fn() -> Option<BTreeSet<String>>,
    hung: Option<i32>,
    ctl: &dyn Watch,
) -> Result<Restart, MpsError> {
    let d = dirs(cfg, uuid).ok_or_else(|| MpsError::Daemon {
        uuid: uuid.into(),
        what: "not a GPU UUID that can name a directory".into(),
    })?;
    locked(cfg, || {
        if !read().is_some_and(|s| s.contains(uuid)) {
            return Ok(Restart::NoShare);
        }
        let same = hung.is_some() && ctl.daemon_pid(&d) == hung;
        if !same && ctl.health(&d) == Health::Up {
            return Ok(Restart::NotNeeded);
        }
        // a hung daemon holds the pipe directory's lock: it goes first
        // (only a process whose executable is the control program)
        ctl.kill(&d);
        start(cfg, uuid, &d, ctl)?;
        Ok(Restart::Started)
    })
}

/// The supervisor's memory between rounds.
#[derive(Debug, Default)]
pub struct Supervisor {
    pub gpus: BTreeMap<String, GpuStatus>,
    strikes: BTreeMap<String, u32>,
    /// GPU -> (failed starts in a row, not before this time)
    backoff: BTreeMap<String, (u32, u64)>,
}

impl Supervisor {
    fn set(&mut self, uuid: &str, state: State, error: String, now: u64) {
        let e = self.gpus.entry(uuid.to_string()).or_insert(GpuStatus {
            state,
            since_unix: now,
            error: String::new(),
        });
        if e.state != state {
            e.state = state;
            e.since_unix = now;
        }
        e.error = error;
    }

    /// A round that cannot look at the daemons (no trusted control
    /// program): every GPU with shares is down, with `error`.
    pub fn unable(&mut self, shares: &BTreeSet<String>, error: &str, now: u64) {
        self.gpus.retain(|u, _| shares.contains(u));
        for uuid in shares {
            self.set(uuid, State::Down, error.to_string(), now);
        }
    }

    /// One round over the GPUs with shares (`read`, the ledger's; `None`:
    /// unreadable, nothing is done). `publish` is called with the states
    /// before a restart starts (it can take seconds).
    pub fn round(
        &mut self,
        cfg: &Config,
        read: &dyn Fn() -> Option<BTreeSet<String>>,
        ctl: &dyn Watch,
        now: u64,
        publish: &mut dyn FnMut(&BTreeMap<String, GpuStatus>),
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let Some(shares) = read() else {
            return out;
        };
        self.gpus.retain(|u, _| shares.contains(u));
        self.strikes.retain(|u, _| shares.contains(u));
        self.backoff.retain(|u, _| shares.contains(u));
        for uuid in &shares {
            let Some(d) = dirs(cfg, uuid) else { continue };
            let (why, hung) = match ctl.health(&d) {
                Health::Up => {
                    self.strikes.remove(uuid);
                    self.backoff.remove(uuid);
                    self.set(uuid, State::Up, String::new(), now);
                    trim_logs(&d, LOG_MAX_BYTES);
                    continue;
                }
                Health::Gone(why) => {
                    self.strikes.remove(uuid);
                    (why, None)
                }
                Health::Unresponsive { pid, why } => {
                    let n = self.strikes.entry(uuid.clone()).or_default();
                    *n += 1;
                    if *n < HUNG_AFTER {
                        let state = self.gpus.get(uuid).map_or(State::Up, |g| g.state);
                        self.set(uuid, state, why, now);
                        continue;
                    }
                    (why, Some(pid))
                }
            };
            if self.backoff.get(uuid).is_some_and(|&(_, at)| now < at) {
                self.set(uuid, State::Down, why, now);
                continue;
            }
            self.set(uuid, State::Restarting, why.clone(), now);
            publish(&self.gpus);
            match restart(cfg, uuid, read, hung, ctl) {
                Ok(r) => {
                    self.strikes.remove(uuid);
                    self.backoff.remove(uuid);
                    if r == Restart::NoShare {
                        self.gpus.remove(uuid);
                        continue;
                    }
                    self.set(uuid, State::Up, String::new(), now);
                    if r == Restart::Started {
                        out.push(Action::Restarted {
                            uuid: uuid.clone(),
                            why,
                        });
                    }
                }
                Err(e) => {
                    let n = self.backoff.get(uuid).map_or(0, |b| b.0) + 1;
                    let wait = (1u64 << n.min(6)).min(MAX_BACKOFF_SECS);
                    self.backoff.insert(uuid.clone(), (n, now + wait));
                    self.set(uuid, State::Down, e.to_string(), now);
                    out.push(Action::Failed {
                        uuid: uuid.clone(),
                        why,
                        error: e.to_string(),
                    });
                }
            }
        }
        out
    }
}

/// Keep each of the daemon's logs under `max` bytes: one past it is copied
/// to `<name>.1` and emptied in place (the daemon keeps it open: a rename
/// would leave it writing to the old file). Lines written between the copy
/// and the truncation are lost; a daemon that does not append writes at
/// its old offset, leaving a hole, which takes no memory on tmpfs.
pub fn trim_logs(d: &Dirs, max: u64) {
    for name in LOGS {
        let p = d.log.join(name);
        let Ok(m) = p.symlink_metadata() else {
            continue;
        };
        if !m.is_file() || m.len() <= max {
            continue;
        }
        let old = d.log.join(format!("{name}.1"));
        if std::fs::copy(&p, &old).is_ok() {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|f| f.set_len(0));
        }
    }
}

impl HostControl {
    /// The pid file's process, when it lives and is the control program
    /// (a stale pid file's number may be another process's by now).
    fn live_daemon(&self, d: &Dirs) -> Option<i32> {
        let b = crate::fsutil::read_regular_capped(&d.pipe.join(PID_FILE), 64).ok()?;
        let pid: i32 = std::str::from_utf8(&b).ok()?.trim().parse().ok()?;
        // a zombie has no exe link
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        (pid > 1 && exe == self.program).then_some(pid)
    }
}

impl Watch for HostControl {
    fn health(&self, d: &Dirs) -> Health {
        let Some(pid) = self.live_daemon(d) else {
            return Health::Gone(format!(
                "no {} process for {}",
                super::CONTROL_NAME,
                d.pipe.join(PID_FILE).display()
            ));
        };
        match self.ui_within(d, "get_server_list\n", PROBE_BOUND) {
            Ok(_) => Health::Up,
            Err(e) => Health::Unresponsive {
                pid,
                why: format!("pid {pid} did not answer get_server_list: {e}"),
            },
        }
    }

    fn daemon_pid(&self, d: &Dirs) -> Option<i32> {
        self.live_daemon(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::path::Path;

    /// Daemons by GPU: their health, and what was done to them.
    #[derive(Default)]
    struct Fake {
        health: RefCell<BTreeMap<String, Health>>,
        log: RefCell<Vec<String>>,
        fail_start: bool,
    }
    fn gpu_of(d: &Dirs) -> String {
        d.root.file_name().unwrap().to_str().unwrap().to_string()
    }
    impl Control for Fake {
        fn answers(&self, d: &Dirs) -> bool {
            self.health(d) == Health::Up
        }
        fn start(&self, uuid: &str, _: &Dirs) -> Result<(), String> {
            self.log.borrow_mut().push(format!("start {uuid}"));
            if self.fail_start {
                return Err("An instance of this daemon is already running".into());
            }
            self.health.borrow_mut().insert(uuid.into(), Health::Up);
            Ok(())
        }
        fn quit(&self, _: &Dirs) -> Result<(), String> {
            unreachable!("the supervisor never asks a daemon to quit")
        }
        fn kill(&self, d: &Dirs) {
            self.log.borrow_mut().push(format!("kill {}", gpu_of(d)));
        }
        fn limit(&self, d: &Dirs, pct: super::super::ClientShare) -> Result<(), String> {
            self.log
                .borrow_mut()
                .push(format!("limit {} {}", gpu_of(d), pct.value().as_str()));
            Ok(())
        }
    }
    impl Watch for Fake {
        fn health(&self, d: &Dirs) -> Health {
            self.health
                .borrow()
                .get(&gpu_of(d))
                .cloned()
                .unwrap_or(Health::Gone("none".into()))
        }
        fn daemon_pid(&self, d: &Dirs) -> Option<i32> {
            match self.health(d) {
                Health::Unresponsive { pid, .. } => Some(pid),
                _ => None,
            }
        }
    }

    fn cfg(t: &Path) -> Config {
        Config {
            state_dir: t.join("state"),
            ..Config::default()
        }
    }

    fn shares(g: &[&str]) -> impl Fn() -> Option<BTreeSet<String>> {
        let s: BTreeSet<String> = g.iter().map(|s| s.to_string()).collect();
        move || Some(s.clone())
    }

    #[test]
    fn a_dead_daemon_is_started_again_in_the_same_round() {
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        let f = Fake::default();
        f.health.borrow_mut().insert("GPU-a".into(), Health::Up);
        let mut s = Supervisor::default();
        let read = shares(&["GPU-a", "GPU-b"]);
        let mut published = Vec::new();
        let acts = s.round(&c, &read, &f, 100, &mut |g| {
            published.push(g.get("GPU-b").map(|x| x.state))
        });
        assert_eq!(*f.log.borrow(), ["kill GPU-b", "start GPU-b"]);
        assert_eq!(
            acts,
            [Action::Restarted {
                uuid: "GPU-b".into(),
                why: "none".into()
            }]
        );
        assert_eq!(
            published,
            [Some(State::Restarting)],
            "seen before it starts"
        );
        assert_eq!(s.gpus["GPU-a"].state, State::Up);
        assert_eq!(s.gpus["GPU-b"].state, State::Up);
        assert!(
            c.state_dir.join("mps/GPU-b/view").is_dir(),
            "the start path of admissions: the containers' view too"
        );
        // a GPU whose shares went is forgotten
        s.round(&c, &shares(&["GPU-a"]), &f, 101, &mut |_| {});
        assert!(!s.gpus.contains_key("GPU-b"));
    }

    #[test]
    fn a_hung_daemon_is_killed_after_two_rounds_without_an_answer() {
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        let f = Fake::default();
        let hung = Health::Unresponsive {
            pid: 42,
            why: "no answer".into(),
        };
        f.health.borrow_mut().insert("GPU-a".into(), hung);
        let mut s = Supervisor::default();
        let read = shares(&["GPU-a"]);
        assert!(s.round(&c, &read, &f, 1, &mut |_| {}).is_empty());
        assert!(f.log.borrow().is_empty(), "one slow answer is not a hang");
        assert_eq!(s.gpus["GPU-a"].error, "no answer");
        let acts = s.round(&c, &read, &f, 2, &mut |_| {});
        assert_eq!(*f.log.borrow(), ["kill GPU-a", "start GPU-a"]);
        assert_eq!(acts.len(), 1);
        assert_eq!(s.gpus["GPU-a"].state, State::Up);
        assert_eq!(s.gpus["GPU-a"].error, "");
    }

    #[test]
    fn nothing_is_started_for_a_gpu_whose_share_went_meanwhile() {
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        let f = Fake::default();
        // read before the lock: a share; inside it: none (a release ran)
        let n = std::cell::Cell::new(0);
        let read = || {
            n.set(n.get() + 1);
            Some(if n.get() == 1 {
                BTreeSet::from(["GPU-a".to_string()])
            } else {
                BTreeSet::new()
            })
        };
        let acts = Supervisor::default().round(&c, &read, &f, 1, &mut |_| {});
        assert!(acts.is_empty());
        assert!(f.log.borrow().is_empty());
        // an unreadable ledger: nothing at all
        assert!(Supervisor::default()
            .round(&c, &|| None, &f, 1, &mut |_| {})
            .is_empty());
    }

    #[test]
    fn a_start_that_fails_is_tried_again_after_a_growing_wait() {
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        let f = Fake {
            fail_start: true,
            ..Fake::default()
        };
        let mut s = Supervisor::default();
        let read = shares(&["GPU-a"]);
        let starts = |f: &Fake| {
            f.log
                .borrow()
                .iter()
                .filter(|l| l.starts_with("start"))
                .count()
        };
        let acts = s.round(&c, &read, &f, 10, &mut |_| {});
        assert!(
            matches!(&acts[..], [Action::Failed { error, .. }] if error.contains("already running"))
        );
        assert_eq!(s.gpus["GPU-a"].state, State::Down);
        assert!(
            s.round(&c, &read, &f, 11, &mut |_| {}).is_empty(),
            "waits 2 s"
        );
        assert_eq!(starts(&f), 1);
        s.round(&c, &read, &f, 12, &mut |_| {});
        assert_eq!(starts(&f), 2);
        s.round(&c, &read, &f, 15, &mut |_| {});
        assert_eq!(starts(&f), 2, "then 4 s");
        s.round(&c, &read, &f, 16, &mut |_| {});
        assert_eq!(starts(&f), 3);
    }

    #[test]
    fn a_daemon_log_past_its_bound_is_moved_aside_and_emptied() {
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        let d = dirs(&c, "GPU-a").unwrap();
        std::fs::create_dir_all(&d.log).unwrap();
        std::fs::write(d.log.join("control.log"), "x".repeat(100)).unwrap();
        std::fs::write(d.log.join("server.log"), "y".repeat(10)).unwrap();
        trim_logs(&d, 50);
        let len = |n: &str| std::fs::metadata(d.log.join(n)).map(|m| m.len()).ok();
        assert_eq!(len("control.log"), Some(0));
        assert_eq!(len("control.log.1"), Some(100));
        assert_eq!(len("server.log"), Some(10), "under the bound: left alone");
        assert_eq!(len("server.log.1"), None);
    }

    #[test]
    fn the_status_file_round_trips() {
        let t = tempfile::tempdir().unwrap();
        let c = cfg(t.path());
        std::fs::create_dir_all(&c.state_dir).unwrap();
        assert_eq!(read_status(&c), None);
        let mut st = Status {
            pid: 7,
            updated_unix: 9,
            interval_secs: 1,
            ..Status::default()
        };
        st.gpus.insert(
            "GPU-a".into(),
            GpuStatus {
                state: State::Restarting,
                since_unix: 8,
                error: "gone".into(),
            },
        );
        write_status(&c, &st).unwrap();
        let text = std::fs::read_to_string(status_path(&c)).unwrap();
        assert!(text.contains("\"restarting\""), "{text}");
        assert_eq!(read_status(&c), Some(st));
    }
}
