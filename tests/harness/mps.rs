//! Hosts with the fake MPS control daemon (tests/fake/fake_mps_control.c)
//! and the fake driver's MPS client: the daemon's files, its control UI as
//! an operator runs it, the supervisor, and bundles with the client probe
//! (tests/fake/mps_client_probe.c).
use crate::cuda::{copy_lib, cuda_host, ldd_libs};
use crate::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The host uid share containers run as: a share is served to a user that
/// cannot become host root (root's shares are an operator's opt-in).
pub const SHARE_USER: u32 = 1000;

/// The fake control program (daemon and UI, static).
pub fn control() -> PathBuf {
    let p = repo_dir().join("tests/fake/build/nvidia-cuda-mps-control");
    assert!(p.is_file(), "{} not built: make -C tests/fake", p.display());
    p
}

/// Config lines: events to `<host>/gq.log`, the fake control program.
pub fn extra() -> String {
    format!(
        "log = \"file\"\nmps_control = \"{}\"\n",
        control().display()
    )
}

/// `gpu-quota ARGS` for host `h`.
pub fn gq(h: &Host, args: &[&str]) -> Output {
    let mut c = Command::new(bin("gpu-quota"));
    c.env("GPU_QUOTA_CONFIG", h.config()).args(args);
    capture(c)
}

/// GPU `uuid`'s daemon directory on host `h`.
pub fn mps_dir(h: &Host, uuid: &str) -> PathBuf {
    h.path().join("state/mps").join(uuid)
}

/// Commands to the control UI of the daemon of `dir` (a GPU's daemon
/// directory), as root on the host: its output, or `None` when it failed.
pub fn ui(dir: &Path, cmds: &str) -> Option<String> {
    let mut c = Command::new(control());
    c.env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut ch = c.spawn().ok()?;
    use std::io::Write;
    let _ = writeln!(ch.stdin.take().unwrap(), "{cmds}");
    let o = ch.wait_with_output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Whether a daemon answers on `dir`.
pub fn answers(dir: &Path) -> bool {
    ui(dir, "get_server_list").is_some()
}

/// The pid in `dir`'s pid file.
pub fn daemon_pid(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("pipe/nvidia-cuda-mps-control.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Wait up to `secs` for `f`.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Quits every daemon a test left, and ends the processes it started
/// (a failed assertion must not leave a process on the host).
pub struct Daemons<'a>(pub &'a Host);
impl Drop for Daemons<'_> {
    fn drop(&mut self) {
        for e in std::fs::read_dir(self.0.path().join("state/mps"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let pid = daemon_pid(&e.path());
            if answers(&e.path()) {
                ui(&e.path(), "quit");
            } else if let Some(p) = pid {
                // stopped or hung: only the fake daemon of this host
                let exe = std::fs::read_link(format!("/proc/{p}/exe"));
                if exe.is_ok_and(|x| x == control()) {
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
        }
    }
}

/// `gpu-quota mps-supervise` for host `h`, ended when dropped; its stderr
/// is `<host>/supervisor.err`.
pub struct Supervisor {
    pub child: std::process::Child,
    pub err: PathBuf,
}

impl Supervisor {
    pub fn start(h: &Host) -> Supervisor {
        let err = h.path().join("supervisor.err");
        let child = Command::new(bin("gpu-quota"))
            .env("GPU_QUOTA_CONFIG", h.config())
            .args(["mps-supervise", "--interval", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Supervisor { child, err }
    }
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A host with the fake driver and bundle `name` running as
/// [`SHARE_USER`], whose rootfs holds mps_client_probe (it runs the fake
/// libcuda's cuInit and prints the MPS client that joined) and
/// mps_client_probe_static (the same with the fake libcuda linked in: no
/// preload reaches it).
pub fn probe_host(name: &str) -> (Host, Bundle) {
    let (h, b, _) = cuda_host(name, &extra());
    let rootfs = b.rootfs();
    let probe = repo_dir().join("tests/fake/build/mps_client_probe");
    std::fs::copy(&probe, rootfs.join("bin/mps_client_probe")).unwrap();
    for l in ldd_libs(&probe) {
        copy_lib(&rootfs, &l);
    }
    let st = repo_dir().join("tests/fake/build/mps_client_probe_static");
    std::fs::copy(&st, rootfs.join("bin/mps_client_probe_static")).unwrap();
    b.run_as(SHARE_USER);
    (h, b)
}

/// Another bundle `name` on `h` with a copy of `b`'s rootfs and user.
pub fn copy_bundle(h: &Host, b: &Bundle, name: &str) -> Bundle {
    let n = h.bundle(name);
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", b.rootfs().display()))
        .arg(n.rootfs())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a rootfs");
    // and its user
    if let Some(uid) = b.config()["process"]["user"]["uid"].as_u64() {
        n.run_as(uid as u32);
    }
    n
}

/// Run bundle `b` as container `id` with `ann`, its process `script`;
/// returns once it touched /out/up.
pub fn run_share(h: &Host, b: &Bundle, id: &str, ann: &[(&str, &str)], script: &str) {
    b.set(ann, &format!("touch /out/up; {script}"), &[]);
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id]),
        &format!("run {id}"),
    );
    b.wait_out("up", 10).expect("container up");
}

/// Container `id` on `h` with `ann`, its process `touch /out/up; sleep
/// 600` running as host uid `uid` (no user namespace); returns once it is
/// up, or the runtime's refusal.
pub fn start_as(h: &Host, id: &str, ann: &[(&str, &str)], uid: u32) -> Output {
    let b = h.bundle(id);
    b.set(ann, "touch /out/up; sleep 600", &[]);
    b.run_as(uid);
    let o = h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id]);
    if o.status.success() {
        b.wait_out("up", 10).expect("container up");
    }
    o
}

/// Kill and delete container `id`.
pub fn delete(h: &Host, id: &str) {
    let _ = h.runtime(&["kill", id, "KILL"]);
    for _ in 0..100 {
        if h.runtime(&["delete", id]).status.success() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ok(&h.runtime(&["delete", "--force", id]), "delete");
}
