//! Helper-process plumbing shared by the context measurement (`ctxcost`)
//! and the driver limits (`drvlimit`): the parent side of a child that
//! loads the host's driver libraries (`gpu-quota-driver measure-context`,
//! `driver-limits`, `nvml-inventory`), so that a driver that hangs or crashes
//! cannot take the caller with it.
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("cannot start {path}: {err}")]
    Spawn { path: PathBuf, err: std::io::Error },
    #[error("{what} did not finish within {secs} s (killed with its process group)")]
    Timeout { what: String, secs: u64 },
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        what: String,
        status: String,
        stderr: String,
    },
}

/// Output of a helper child.
#[derive(Debug)]
pub struct HelperOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl HelperOutput {
    /// The helper's answer: its last stdout line that is a JSON object.
    pub fn json_line(&self) -> (String, String) {
        let text = String::from_utf8_lossy(&self.stdout).into_owned();
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .unwrap_or("")
            .to_string();
        (line, text)
    }
}

/// Run `program args` as a helper: empty environment (but `env`), stdin
/// from /dev/null, its own process group, cwd `/`; killed with its whole
/// group when it runs past `timeout`. Ok only for exit status 0.
pub fn run_helper(
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
    what: &str,
) -> Result<HelperOutput, HelperError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().copied())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; the child dies with its parent (a
    // hook killed by its own deadline or by runc leaves nothing running).
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // no descriptor of the caller's reaches the child but its three
            // pipes (an engine's console socket or preserved fds would
            // otherwise sit open in a process that loads driver code):
            // close-on-exec for everything from 3 up (Linux 5.11+; older
            // kernels keep what they would have kept)
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|err| HelperError::Spawn {
        path: program.into(),
        err,
    })?;
    let pgid = child.id() as i32;
    // Single-threaded on purpose: the hook enters a mount namespace after
    // this, which the kernel refuses to a process with other threads. The
    // pipes are read without blocking while the child runs.
    let mut out = Pipe::new(child.stdout.take());
    let mut err = Pipe::new(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        out.drain();
        err.drain();
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => break None,
        }
    };
    // The group goes either way: nothing the child started may outlive it.
    // SAFETY: killpg on the group this function created.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
    let status = match status {
        Some(s) => s,
        None => {
            let _ = child.wait();
            return Err(HelperError::Timeout {
                what: what.into(),
                secs: timeout.as_secs(),
            });
        }
    };
    out.drain();
    err.drain();
    let (stdout, stderr) = (out.buf, err.buf);
    if !status.success() {
        return Err(HelperError::Failed {
            what: what.into(),
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&stderr)
                .trim()
                .chars()
                .take(400)
                .collect(),
        });
    }
    Ok(HelperOutput { stdout, stderr })
}

/// A child's output pipe, read without blocking (at most 1 MiB kept).
struct Pipe<R> {
    r: Option<R>,
    buf: Vec<u8>,
}

impl<R: Read + std::os::fd::AsRawFd> Pipe<R> {
    fn new(r: Option<R>) -> Pipe<R> {
        if let Some(p) = &r {
            // SAFETY: fcntl on an fd this process owns.
            unsafe {
                let fl = libc::fcntl(p.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(p.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
        }
        Pipe { r, buf: Vec::new() }
    }
    fn drain(&mut self) {
        let Some(r) = self.r.as_mut() else { return };
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => {
                    self.r = None; // EOF
                    return;
                }
                Ok(n) => {
                    if self.buf.len() < 1 << 20 {
                        self.buf.extend_from_slice(&chunk[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return, // WouldBlock: nothing more for now
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_descriptor_of_the_caller_reaches_the_helper() {
        use std::os::fd::AsRawFd;
        // an inheritable descriptor (no close-on-exec), as an engine's
        // preserved fd or console socket would be
        let f = std::fs::File::open("/dev/null").unwrap();
        let fd = f.as_raw_fd();
        // SAFETY: fcntl on a descriptor this test owns.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        let o = run_helper(
            Path::new("/bin/sh"),
            &[
                "-c",
                &format!("[ -e /proc/self/fd/{fd} ] && echo open || echo closed"),
            ],
            &[],
            Duration::from_secs(10),
            "fd probe",
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "closed");
    }

    #[test]
    fn helper_is_killed_with_its_group_on_timeout() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("grandchild-alive");
        // the helper starts a grandchild that would write the marker after 1.5 s
        let script = format!("(sleep 1.5; touch {}) & sleep 30", marker.display());
        let t = Instant::now();
        let e = run_helper(
            Path::new("/bin/sh"),
            &["-c", &script],
            &[],
            Duration::from_millis(300),
            "sleeper",
        )
        .unwrap_err();
        assert!(matches!(e, HelperError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(1800));
        assert!(!marker.exists(), "the grandchild was killed with the group");
    }

    #[test]
    fn helper_returns_when_the_child_exits_even_if_an_escaped_process_holds_its_pipe() {
        // setsid leaves the process group (so killpg cannot reach it) and
        // keeps stdout open: reading must not wait for it (no reader threads)
        let t = Instant::now();
        let o = run_helper(
            Path::new("/bin/sh"),
            &["-c", "setsid sleep 4 & echo hi"],
            &[],
            Duration::from_secs(10),
            "escaper",
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\n");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }

    #[test]
    fn helper_environment_is_cleared() {
        std::env::set_var("GQ_CTXCOST_TEST_SECRET", "x");
        let o = run_helper(
            Path::new("/usr/bin/env"),
            &[],
            &[("ONLY", "this")],
            Duration::from_secs(5),
            "env",
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "ONLY=this\n");
        let e = run_helper(
            Path::new("/bin/false"),
            &[],
            &[],
            Duration::from_secs(5),
            "false",
        )
        .unwrap_err();
        assert!(matches!(e, HelperError::Failed { .. }));
    }
}
