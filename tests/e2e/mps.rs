//! Compute shares (`sm=`) on real runc with the fake MPS control daemon
//! (tests/fake/fake_mps_control.c, modelled on the H200's): admission of
//! shares (fit, refusal over 100 %, no mix with slices outside MPS,
//! release), the daemon's life from the first share on a GPU to the last,
//! its clean environment, and a client that runs at its share whatever
//! the image and the process set before cuInit. Share containers run as
//! a non-root user (mps_users.rs: who a share is served to).
//!
//! Container ids are unique across this file: its tests run in parallel,
//! and runc names a container's cgroup after its id (two tests' "a" once
//! met in /sys/fs/cgroup/cpu/a).
use gpu_quota_e2e::cuda::*;
use gpu_quota_e2e::mps::{
    control, delete, extra, gq, mps_dir, probe_host, start_as, Daemons, SHARE_USER,
};
use gpu_quota_e2e::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// One command to the control UI of the daemon on `dir`'s pipe directory,
/// as an operator would give it: whether the UI succeeded.
fn ui(dir: &Path, cmd: &str) -> bool {
    gpu_quota_e2e::mps::ui(dir, cmd).is_some()
}

/// Whether a daemon answers on `dir`'s pipe directory.
fn answers(dir: &Path) -> bool {
    ui(dir, "get_server_list")
}

/// Container `id` with `ann`, its process running as [`SHARE_USER`].
fn start(h: &Host, id: &str, ann: &[(&str, &str)]) -> Output {
    start_as(h, id, ann, SHARE_USER)
}

#[test]
fn shares_fit_within_a_gpu_and_its_daemon_lives_from_the_first_share_to_the_last() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: extra(),
        ..HostOpts::default()
    });
    let _d = Daemons(&h);
    let gpu0 = uuid(0);
    let dir = mps_dir(&h, &gpu0);
    assert_ok(
        &start(&h, "a", &[("vram", "2g"), ("sm", "60%"), ("gpu", "0")]),
        "a 60% share",
    );
    assert!(answers(&dir), "the first share started GPU 0's daemon");
    let log = std::fs::read_to_string(dir.join("log/control.log")).unwrap();
    // for GPU 0 only, with nothing of the runtime's environment (the test's
    // own variables, the engine's) in it
    assert!(
        log.contains(&format!("CUDA_VISIBLE_DEVICES={gpu0}")),
        "{log}"
    );
    let names = log
        .lines()
        .find_map(|l| l.split_once("] Environment: ").map(|x| x.1.to_string()))
        .expect("environment line");
    assert_eq!(
        names, "CUDA_MPS_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES PATH",
        "a clean environment"
    );
    // 60 + 50 > 100: refused with what is free; nothing started or changed
    let o = start(&h, "b", &[("vram", "2g"), ("sm", "50%"), ("gpu", "0")]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("sm=50%") && e.contains("only 40%"), "{e}");
    // a slice without a share beside shares: refused, says what to do
    let o = start(&h, "c", &[("vram", "2g"), ("gpu", "0")]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("Ask for a share too"), "{}", stderr(&o));
    // without a GPU named, placement takes GPU 1 for it instead
    assert_ok(
        &start(&h, "c1", &[("vram", "2g")]),
        "a slice without a share",
    );
    let on = |id: &str| {
        h.reservations()
            .into_iter()
            .find(|r| r["container_id"] == id)
            .map(|r| {
                (
                    r["slices"][0]["index"].as_u64().unwrap(),
                    r["slices"][0]["sm"].as_u64(),
                )
            })
    };
    assert_eq!(on("c1"), Some((1, None)));
    // and a share may not join GPU 1 beside it
    let o = start(&h, "e", &[("vram", "2g"), ("sm", "10%"), ("gpu", "1")]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("without a compute share"),
        "{}",
        stderr(&o)
    );
    // 60 + 40 = 100 fits
    assert_ok(
        &start(
            &h,
            "d",
            &[("vram", "2g"), ("gpu-quota.io/sm", "40"), ("gpu", "0")],
        ),
        "a 40% share",
    );
    assert_eq!(on("d"), Some((0, Some(40))));
    let ls = String::from_utf8_lossy(&gq(&h, &["ls"]).stdout).into_owned();
    assert!(ls.contains("2.00 GiB 60%") && ls.contains("sm=40%"), "{ls}");
    let gpu_line = ls
        .lines()
        .find(|l| l.contains(&gpu0) && l.starts_with('0'))
        .unwrap();
    assert!(gpu_line.contains("100%"), "{gpu_line}");
    let m = String::from_utf8_lossy(&gq(&h, &["metrics"]).stdout).into_owned();
    assert!(
        m.lines().any(
            |l| l.starts_with("gpu_quota_gpu_sm_reserved_percent{gpu=\"0\"") && l.ends_with(" 100")
        ),
        "{m}"
    );
    let events = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert!(events.contains("\"sm_percent\":60"), "{events}");
    // the first share leaves: the daemon stays for the other
    delete(&h, "a");
    assert!(answers(&dir), "GPU 0 still has a share");
    // the last share leaves: the daemon quits and its directory goes
    delete(&h, "d");
    assert!(!dir.exists(), "GPU 0's daemon directory removed");
    let quit = std::fs::read_dir(h.path().join("state/mps"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .count();
    assert_eq!(quit, 0, "no daemon directory left");
    // GPU 0 is outside MPS again: a slice without a share is admitted there
    assert_ok(
        &start(&h, "c0", &[("vram", "2g"), ("gpu", "0")]),
        "no share",
    );
    delete(&h, "c0");
    delete(&h, "c1");
}

#[test]
fn gc_starts_a_dead_daemon_again_where_shares_are() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: extra(),
        ..HostOpts::default()
    });
    let _d = Daemons(&h);
    let dir = mps_dir(&h, &uuid(0));
    // the runtime is run the way an engine's shim runs it, with a pipe of
    // the engine's open beyond stdio: the daemon it starts, which lives on,
    // must not hold it (the engine would wait for its end)
    let mut fds = [0i32; 2];
    // close-on-exec here (other tests of this process spawn children);
    // the runtime gets its copy by dup2, which clears it
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let b = h.bundle("ga");
    b.set(
        &[("vram", "2g"), ("sm", "25%")],
        "touch /out/up; sleep 600",
        &[],
    )
    .run_as(SHARE_USER);
    let mut c = h.runtime_cmd(&["run", "-d", "--bundle", &b.bundle_arg(), "ga"]);
    let w = fds[1];
    unsafe {
        use std::os::unix::process::CommandExt;
        c.pre_exec(move || {
            // the write end as fd 7, inherited (no close-on-exec)
            if libc::dup2(w, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    assert_ok(&capture(c), "run with an inherited pipe");
    b.wait_out("up", 10).expect("container up");
    unsafe { libc::close(fds[1]) };
    unsafe { libc::fcntl(fds[0], libc::F_SETFL, libc::O_NONBLOCK) };
    let mut buf = [0u8; 1];
    let n = unsafe { libc::read(fds[0], buf.as_mut_ptr() as *mut _, 1) };
    assert_eq!(
        n, 0,
        "the engine's pipe is closed once the runtime exited (read {n}: the MPS daemon holds it)"
    );
    unsafe { libc::close(fds[0]) };
    let pid: i32 = std::fs::read_to_string(dir.join("pipe/nvidia-cuda-mps-control.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // the daemon dies (a crash, an operator's kill)
    unsafe { libc::kill(pid, libc::SIGKILL) };
    for _ in 0..100 {
        if !answers(&dir) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!answers(&dir));
    let o = gq(&h, &["gc"]);
    assert_ok(&o, "gc");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("started the MPS daemon"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(answers(&dir), "gc started it again");
    delete(&h, "ga");
    assert!(!dir.exists());
    // a daemon that stops answering (stuck, or still starting) is ended,
    // not left running without its directory when the last share goes
    assert_ok(&start(&h, "gb", &[("vram", "2g"), ("sm", "25%")]), "b");
    let pid: i32 = std::fs::read_to_string(dir.join("pipe/nvidia-cuda-mps-control.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    delete(&h, "gb");
    assert!(!dir.exists());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the daemon that did not answer is gone too"
    );
}

#[test]
fn a_client_runs_at_its_share_whatever_the_image_and_the_process_set() {
    require_e2e!();
    let (h, b) = probe_host("share");
    let _d = Daemons(&h);
    // the image asks for the whole GPU and its own pipe directory; the
    // process then raises its share and leaves MPS before cuInit, as a
    // program can (measured on the H200: both work without gpu-quota)
    let script = "/bin/mps_client_probe libcuda.so.1 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 \
                  -CUDA_MPS_PIPE_DIRECTORY -CUDA_MPS_PINNED_DEVICE_MEM_LIMIT > /out/info 2>&1; \
                  env | grep CUDA_MPS | sort > /out/env; touch /out/done";
    let mut c = b.config();
    c["annotations"] = serde_json::json!({"vram": "4g", "sm": "25%"});
    c["process"]["args"] = serde_json::json!(["/bin/sh", "-c", script]);
    for e in [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100",
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/mine",
    ] {
        c["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!(e));
    }
    b.write_config(&c);
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "share"]),
        "run",
    );
    let info = std::fs::read_to_string(b.out.join("info")).unwrap();
    assert!(
        info.starts_with("mps=1 pct=25 mem=0=4096M pipe=/run/gpu-quota/mps"),
        "the client's settings at cuInit: {info}"
    );
    // the container started with gpu-quota's values, not the image's
    let env = std::fs::read_to_string(b.out.join("env")).unwrap();
    assert!(
        env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25")
            && env.contains("CUDA_MPS_PIPE_DIRECTORY=/run/gpu-quota/mps"),
        "{env}"
    );
    // the daemon saw that client at 25 (the run is over: its log is what
    // is left of it until the share is released, which already happened)
    assert!(
        !mps_dir(&h, &fake_uuid(0)).exists(),
        "the foreground run's release stopped the daemon"
    );
}

/// One command to the control UI of the daemon on `dir`'s pipe directory:
/// its reply.
fn ui_out(dir: &Path, cmd: &str) -> String {
    let mut c = Command::new(control());
    c.env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut ch = c.spawn().unwrap();
    use std::io::Write;
    writeln!(ch.stdin.take().unwrap(), "{cmd}").unwrap();
    String::from_utf8_lossy(&ch.wait_with_output().unwrap().stdout).into_owned()
}

/// The percentages the GPU's daemon serves container `id`'s live clients
/// at (the fake daemon's client list, by the container's host pids).
fn clients_of(h: &Host, dir: &Path, id: &str) -> Vec<f64> {
    let ps = h.runc(&["ps", "--format", "json", id]);
    let pids: Vec<u64> = serde_json::from_slice(&ps.stdout).unwrap_or_default();
    ui_out(dir, "fake_clients")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(pid, _)| pid.parse().is_ok_and(|p: u64| pids.contains(&p)))
        .map(|(_, pct)| pct.parse().unwrap())
        .collect()
}

/// Wait until `/out/<name>` says a probe is a client (its pid line); the
/// file's text.
fn client_up(b: &Bundle, name: &str) -> String {
    for _ in 0..200 {
        if let Ok(t) = std::fs::read_to_string(b.out.join(name)) {
            if t.contains("\npid=") || t.contains("cuInit") {
                return t;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no client in /out/{name}")
}

/// Until `f` holds (10 s), else fail with `what`.
fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{what}")
}

/// A container with a share, of `name`'s probe host, whose script runs
/// `script` in the background, then touches /out/up and sleeps.
fn run_share(h: &Host, b: &Bundle, id: &str, ann: serde_json::Value, script: &str) {
    let mut c = b.config();
    c["annotations"] = ann;
    let all = format!("{script} touch /out/up; sleep 600");
    c["process"]["args"] = serde_json::json!(["/bin/sh", "-c", all]);
    b.write_config(&c);
    assert_ok(
        &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id]),
        "run with a share",
    );
    b.wait_out("up", 10).expect("container up");
}

/// MPS bounds each client process, not a container: before sm-procs, an
/// sm=25% container running 4 CUDA processes took 0.65 of an H200. The
/// share split over the 4 processes it declares gives each 6.25 %, 25 %
/// together; a fifth is refused at cuInit with the line naming the
/// quota, and once one ends a new one is served.
#[test]
fn several_processes_in_one_share_together_hold_the_share() {
    require_e2e!();
    let (h, b) = probe_host("procs4");
    let _d = Daemons(&h);
    let dir = mps_dir(&h, &fake_uuid(0));
    // the four start at once (they race for the places)
    let four = (1..=4)
        .map(|i| format!("/bin/mps_client_probe libcuda.so.1 --hold > /out/p{i} 2>&1 &"))
        .collect::<String>();
    run_share(
        &h,
        &b,
        "procs4",
        serde_json::json!({"vram": "4g", "sm": "25%", "sm-procs": "4"}),
        &four,
    );
    for i in 1..=4 {
        let t = client_up(&b, &format!("p{i}"));
        assert!(t.starts_with("mps=1 pct=6.25 "), "process {i}: {t}");
    }
    until("the daemon serves the four", || {
        clients_of(&h, &dir, "procs4").len() == 4
    });
    let got = clients_of(&h, &dir, "procs4");
    assert_eq!(got, [6.25; 4], "each at a quarter of the share");
    assert!(got.iter().sum::<f64>() <= 25.0, "{got:?}");
    // a fifth is refused, with the line
    let fifth = || h.runtime(&["exec", "procs4", "/bin/mps_client_probe", "libcuda.so.1"]);
    let o = fifth();
    assert!(!o.status.success(), "a fifth CUDA process");
    let e = stderr(&o);
    assert!(
        e.contains("gpu-quota: this container's compute share (sm=25%) is split over 4 CUDA processes (sm-procs=4), and 4 already run; end one, or start the container with a larger sm-procs")
            && e.contains("cuInit: 808"),
        "{e}"
    );
    assert_eq!(clients_of(&h, &dir, "procs4").len(), 4, "it never joined");
    // one ends (kill -9): its place is free, and a new process is served
    let p1: i32 = std::fs::read_to_string(b.out.join("p1"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .unwrap()
        .parse()
        .unwrap();
    assert_ok(
        &h.runtime(&[
            "exec",
            "procs4",
            "/bin/busybox",
            "kill",
            "-9",
            &p1.to_string(),
        ]),
        "kill -9 one",
    );
    until("the killed client is gone", || {
        clients_of(&h, &dir, "procs4").len() == 3
    });
    let o = fifth();
    assert_ok(&o, "a new process once one ended");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.starts_with("mps=1 pct=6.25 "), "{out}");
    delete(&h, "procs4");
}

/// Without sm-procs a share is of one CUDA process: a second is refused,
/// however it was started — `exec`, `env -i` (a fresh process image: the
/// preload comes from /etc/ld.so.preload, the grant from the state
/// directory, neither from the environment), or a fork child of a client
/// (sm-procs=2 there: the parent is the second client, its child the third).
#[test]
fn a_share_counts_every_cuda_process_however_it_was_started() {
    require_e2e!();
    let (h, b) = probe_host("procs1");
    let _d = Daemons(&h);
    run_share(
        &h,
        &b,
        "procs1",
        serde_json::json!({"vram": "4g", "sm": "25%"}),
        "/bin/mps_client_probe libcuda.so.1 --hold > /out/p1 2>&1 &",
    );
    let t = client_up(&b, "p1");
    assert!(t.starts_with("mps=1 pct=25 "), "{t}");
    for (how, args) in [
        ("exec", &["/bin/mps_client_probe", "libcuda.so.1"][..]),
        (
            "env -i",
            &["/bin/env", "-i", "/bin/mps_client_probe", "libcuda.so.1"][..],
        ),
    ] {
        let mut a = vec!["exec", "procs1"];
        a.extend_from_slice(args);
        let o = h.runtime(&a);
        assert!(!o.status.success(), "{how}: a second CUDA process");
        let e = stderr(&o);
        assert!(
            e.contains("is split over 1 CUDA process (sm-procs=1), and 1 already runs")
                && e.contains("cuInit: 808"),
            "{how}: {e}"
        );
    }
    delete(&h, "procs1");
    // a fork child is a process of its own
    let (h, b) = probe_host("procs2");
    let _d = Daemons(&h);
    run_share(
        &h,
        &b,
        "procs2",
        serde_json::json!({"vram": "4g", "sm": "50%", "sm-procs": "2"}),
        "/bin/mps_client_probe libcuda.so.1 --hold > /out/p1 2>&1 &",
    );
    let t = client_up(&b, "p1");
    assert!(t.starts_with("mps=1 pct=25 "), "{t}");
    let o = h.runtime(&[
        "exec",
        "procs2",
        "/bin/mps_client_probe",
        "libcuda.so.1",
        "--fork",
    ]);
    let (out, e) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(
        out.starts_with("mps=1 pct=25 "),
        "the parent, second: {out}"
    );
    assert!(
        !o.status.success() && e.contains("child cuInit: 808") && e.contains("and 2 already run"),
        "the child, third: {out} {e}"
    );
    delete(&h, "procs2");
}

/// A process that bypasses libgpuquota.so (a static binary: no preload)
/// sets its own percentage; MPS lets it only lower its daemon's limit,
/// which gpu-quota sets to the largest part of a share on the GPU: here
/// 6.25 (sm=25% over 4), then 50 while an sm=50% share of one process is
/// on the GPU (the bound is the GPU's, not the container's), then 6.25
/// again for the clients that start after that share ended.
#[test]
fn a_process_that_bypasses_the_interceptor_gets_at_most_the_daemons_limit() {
    require_e2e!();
    let (h, b) = probe_host("bypass");
    let _d = Daemons(&h);
    let dir = mps_dir(&h, &fake_uuid(0));
    let probe = |n: u32| {
        format!(
            "/bin/mps_client_probe_static - CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 --hold > /out/s{n} 2>&1 &"
        )
    };
    // the second and third start when the test says
    let script = format!(
        "{} (while [ ! -e /out/go2 ]; do sleep 0.05; done; {}) & \
         (while [ ! -e /out/go3 ]; do sleep 0.05; done; {}) &",
        probe(1),
        probe(2).trim_end_matches('&'),
        probe(3).trim_end_matches('&'),
    );
    run_share(
        &h,
        &b,
        "bypass",
        serde_json::json!({"vram": "4g", "sm": "25%", "sm-procs": "4", "gpu": "0"}),
        &script,
    );
    let t = client_up(&b, "s1");
    assert!(t.starts_with("mps=1 pct=100 "), "it asked for the GPU: {t}");
    until("the daemon serves it", || {
        clients_of(&h, &dir, "bypass").len() == 1
    });
    assert_eq!(clients_of(&h, &dir, "bypass"), [6.25], "the daemon's limit");
    // an sm=50% share of one process on the same GPU: the limit is 50
    assert_ok(
        &start(&h, "half", &[("vram", "2g"), ("sm", "50%"), ("gpu", "0")]),
        "a 50% share beside it",
    );
    std::fs::write(b.out.join("go2"), "").unwrap();
    client_up(&b, "s2");
    until("the daemon serves the second", || {
        clients_of(&h, &dir, "bypass").len() == 2
    });
    let mut got = clients_of(&h, &dir, "bypass");
    got.sort_by(f64::total_cmp);
    assert_eq!(got, [6.25, 50.0], "the first keeps its limit");
    // that share ends: new clients are bound to 6.25 again
    delete(&h, "half");
    std::fs::write(b.out.join("go3"), "").unwrap();
    client_up(&b, "s3");
    until("the daemon serves the third", || {
        clients_of(&h, &dir, "bypass").len() == 3
    });
    let mut got = clients_of(&h, &dir, "bypass");
    got.sort_by(f64::total_cmp);
    assert_eq!(got, [6.25, 6.25, 50.0]);
    delete(&h, "bypass");
}
