//! Telling this host's engine daemon to reload its configuration, and no other process.
//!
//! Only the daemon this host runs is signalled: through its systemd unit when systemd runs
//! it (`systemctl reload UNIT`), else the pid in its pid file when that process really is
//! the daemon (`/proc/PID/comm`). Never by a name match over /proc: a process called
//! `dockerd` inside a container (or any other pid namespace) or a stale pid file's
//! recycled pid is not this host's daemon.
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};

/// What was done.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// `systemctl reload UNIT`.
    Systemd(String),
    /// The signal went to this pid (from the pid file).
    Pid(i32),
    /// Nothing is running that is this daemon (why).
    NotRunning(String),
}

/// systemd, behind a trait so that tests can stand in for it.
pub trait Systemd {
    /// systemd is PID 1 and `unit` is active.
    fn active(&self, unit: &str) -> bool;
    fn reload(&self, unit: &str) -> io::Result<()>;
}

pub struct HostSystemd;

impl Systemd for HostSystemd {
    fn active(&self, unit: &str) -> bool {
        Path::new("/run/systemd/system").is_dir()
            && Command::new("systemctl")
                .args(["is-active", "--quiet", unit])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
    }
    fn reload(&self, unit: &str) -> io::Result<()> {
        let out = Command::new("systemctl")
            .args(["reload", unit])
            .stdin(Stdio::null())
            .output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "systemctl reload {unit}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }
}

fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// Reload the daemon `comm` (e.g. "dockerd") run by systemd unit `unit` or recorded in
/// `pid_file`, with `sig`.
pub fn reload(
    systemd: &dyn Systemd,
    unit: &str,
    comm_name: &str,
    pid_file: &Path,
    sig: libc::c_int,
) -> io::Result<Reloaded> {
    if systemd.active(unit) {
        systemd.reload(unit)?;
        return Ok(Reloaded::Systemd(unit.to_string()));
    }
    let text = match std::fs::read_to_string(pid_file) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Reloaded::NotRunning(format!(
                "no pid file {}",
                pid_file.display()
            )))
        }
        Err(e) => return Err(e),
    };
    let Some(pid) = text.trim().parse::<i32>().ok().filter(|p| *p > 1) else {
        return Ok(Reloaded::NotRunning(format!(
            "{} holds no pid",
            pid_file.display()
        )));
    };
    match comm(pid) {
        Some(c) if c == comm_name => {}
        Some(c) => {
            return Ok(Reloaded::NotRunning(format!(
                "pid {pid} from {} is {c:?}, not {comm_name} (stale pid file)",
                pid_file.display()
            )))
        }
        None => {
            return Ok(Reloaded::NotRunning(format!(
                "pid {pid} from {} is not running",
                pid_file.display()
            )))
        }
    }
    // SAFETY: kill(2) with a pid checked above and a valid signal number.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Reloaded::Pid(pid))
}

/// docker's pid file: `pidfile` of daemon.json (its text), else /var/run/docker.pid.
pub fn docker_pid_file(daemon_json: Option<&[u8]>) -> String {
    daemon_json
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .and_then(|v| v.get("pidfile").and_then(|p| p.as_str()).map(String::from))
        .filter(|p| p.starts_with('/'))
        .unwrap_or_else(|| "/var/run/docker.pid".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Child;

    struct NoSystemd;
    impl Systemd for NoSystemd {
        fn active(&self, _: &str) -> bool {
            false
        }
        fn reload(&self, _: &str) -> io::Result<()> {
            panic!("not systemd")
        }
    }
    struct FakeSystemd(std::cell::Cell<u32>);
    impl Systemd for FakeSystemd {
        fn active(&self, u: &str) -> bool {
            u == "docker.service"
        }
        fn reload(&self, _: &str) -> io::Result<()> {
            self.0.set(self.0.get() + 1);
            Ok(())
        }
    }

    /// A process whose comm is `dockerd` (a copy of sleep): SIGHUP kills it.
    fn decoy(dir: &Path) -> Child {
        let exe = dir.join("dockerd");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        // a parallel test's fork can still hold the copy's write fd for a
        // moment (ETXTBSY): retry
        let mut c = None;
        for _ in 0..100 {
            let mut cmd = Command::new(&exe);
            cmd.arg("60");
            // SIGHUP as a daemon would have it: not ignored even when the
            // test runs under nohup (an ignored signal stays ignored across exec)
            // SAFETY: signal() is async-signal-safe; nothing else runs here.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    libc::signal(libc::SIGHUP, libc::SIG_DFL);
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(ch) => {
                    c = Some(ch);
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(e) => panic!("spawn {}: {e}", exe.display()),
            }
        }
        let c = c.expect("spawn kept failing with ETXTBSY");
        for _ in 0..100 {
            if comm(c.id() as i32).as_deref() == Some("dockerd") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(comm(c.id() as i32).as_deref(), Some("dockerd"));
        c
    }
    fn alive_after(c: &mut Child) -> bool {
        std::thread::sleep(std::time::Duration::from_millis(200));
        c.try_wait().unwrap().is_none()
    }

    #[test]
    fn a_dockerd_that_is_not_the_pid_files_is_never_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = decoy(dir.path());
        let pf = dir.path().join("docker.pid");
        // no pid file; a pid file of a process that is not dockerd; an empty one
        let r = reload(&NoSystemd, "docker.service", "dockerd", &pf, libc::SIGHUP).unwrap();
        assert!(matches!(r, Reloaded::NotRunning(_)), "{r:?}");
        std::fs::write(&pf, format!("{}\n", std::process::id())).unwrap();
        let r = reload(&NoSystemd, "docker.service", "dockerd", &pf, libc::SIGHUP).unwrap();
        assert!(
            matches!(r, Reloaded::NotRunning(ref m) if m.contains("stale")),
            "{r:?}"
        );
        std::fs::write(&pf, "").unwrap();
        let r = reload(&NoSystemd, "docker.service", "dockerd", &pf, libc::SIGHUP).unwrap();
        assert!(matches!(r, Reloaded::NotRunning(_)), "{r:?}");
        assert!(alive_after(&mut d), "the decoy named dockerd got a signal");
        let _ = d.kill();
        let _ = d.wait();
    }

    #[test]
    fn the_pid_files_dockerd_is_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = decoy(dir.path());
        let pf = dir.path().join("docker.pid");
        std::fs::write(&pf, format!("{}\n", d.id())).unwrap();
        let r = reload(&NoSystemd, "docker.service", "dockerd", &pf, libc::SIGHUP).unwrap();
        assert_eq!(r, Reloaded::Pid(d.id() as i32));
        assert!(!alive_after(&mut d), "SIGHUP reached it (sleep dies of it)");
        let _ = d.wait();
    }

    #[test]
    fn systemd_unit_first_and_no_signal() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = decoy(dir.path());
        let pf = dir.path().join("docker.pid");
        std::fs::write(&pf, format!("{}\n", d.id())).unwrap();
        let s = FakeSystemd(std::cell::Cell::new(0));
        let r = reload(&s, "docker.service", "dockerd", &pf, libc::SIGHUP).unwrap();
        assert_eq!(r, Reloaded::Systemd("docker.service".into()));
        assert_eq!(s.0.get(), 1);
        assert!(alive_after(&mut d));
        let _ = d.kill();
        let _ = d.wait();
    }

    #[test]
    fn pid_file_from_daemon_json() {
        assert_eq!(docker_pid_file(None), "/var/run/docker.pid");
        assert_eq!(
            docker_pid_file(Some(br#"{"pidfile": "/run/d/docker.pid"}"#)),
            "/run/d/docker.pid"
        );
        assert_eq!(
            docker_pid_file(Some(br#"{"pidfile": "rel"}"#)),
            "/var/run/docker.pid"
        );
        assert_eq!(docker_pid_file(Some(b"not json")), "/var/run/docker.pid");
    }
}
