//! A GPU's MPS daemon gone, hung or given control commands by a container
//! with a share, on real runc with the fake daemon and the fake driver's
//! MPS client (tests/fake): a process of the share never runs outside MPS
//! (its cuInit is refused instead), `gpu-quota mps-supervise` starts a new
//! daemon within seconds, the metrics and events say so, and a container
//! reaches the daemon's client socket only.
//!
//! Container ids are unique across this file (runc names cgroups after
//! them, and the tests run in parallel).
use gpu_quota_e2e::cuda::fake_uuid;
use gpu_quota_e2e::mps::*;
use gpu_quota_e2e::*;
use std::time::{Duration, Instant};

const SHARE: [(&str, &str); 3] = [("vram", "4g"), ("sm", "25%"), ("gpu", "0")];

/// `/bin/mps_client_probe libcuda.so.1 ARGS` in container `id`.
fn probe(h: &Host, id: &str, args: &[&str]) -> std::process::Output {
    let mut a = vec!["exec", id, "/bin/mps_client_probe", "libcuda.so.1"];
    a.extend(args);
    h.runtime(&a)
}

/// The probe in container `id` in the background, its output and exit
/// status in `/out/<name>` (the status as a last line `rc=N`).
fn probe_bg(h: &Host, id: &str, name: &str, args: &str) -> std::process::Child {
    let script = format!(
        "/bin/mps_client_probe libcuda.so.1 {args} > /out/{name} 2>&1; echo rc=$? >> /out/{name}"
    );
    h.runtime_cmd(&["exec", id, "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// A line of `gpu-quota metrics` for host `h`.
fn metric(h: &Host, line: &str) -> bool {
    let m = String::from_utf8_lossy(&gq(h, &["metrics"]).stdout).into_owned();
    m.lines().any(|l| l == line)
}

#[test]
fn a_dead_daemon_refuses_cuinit_until_the_supervisor_starts_a_new_one() {
    require_e2e!();
    let (h, b) = probe_host("dd");
    let _d = Daemons(&h);
    let gpu = fake_uuid(0);
    let dir = mps_dir(&h, &gpu);
    run_share(&h, &b, "dd", &SHARE, "sleep 600");
    let o = probe(&h, "dd", &[]);
    assert_ok(&o, "a client while the daemon runs");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("mps=1 pct=25"));
    // the daemon dies (a crash, an operator's kill, a container's quit on
    // the code before the view)
    let pid = daemon_pid(&dir).unwrap();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_for(5, || !answers(&dir)));
    // a new process: refused at cuInit, not run outside MPS
    let o = probe(&h, "dd", &[]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        !o.status.success()
            && err.contains("cuInit: 805")
            && err.contains("does not answer at /run/gpu-quota/mps/control")
            && err.contains("the daemon is gone")
            && !out.contains("mps=0"),
        "a process with a share and no daemon:\nstdout: {out}\nstderr: {err}"
    );
    // the same kind of process, retrying, is served once the supervisor
    // started a new daemon
    let mut bg = probe_bg(&h, "dd", "retry", "--retry 30");
    assert!(
        wait_for(10, || std::fs::read_to_string(b.out.join("retry"))
            .is_ok_and(|s| s.contains("cuInit: 805"))),
        "the retrying process was refused first"
    );
    let t0 = Instant::now();
    let sup = Supervisor::start(&h);
    assert!(
        wait_for(30, || std::fs::read_to_string(b.out.join("retry"))
            .is_ok_and(|s| s.contains("rc="))),
        "the retrying process ended"
    );
    let took = t0.elapsed();
    let _ = bg.wait();
    let retry = std::fs::read_to_string(b.out.join("retry")).unwrap();
    assert!(
        retry.contains("served after") && retry.contains("mps=1 pct=25") && retry.contains("rc=0"),
        "{retry}\nsupervisor: {}",
        sup.stderr()
    );
    eprintln!(
        "served {} ms after the supervisor started",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let new = daemon_pid(&dir).unwrap();
    assert_ne!(new, pid);
    assert!(
        sup.stderr()
            .contains(&format!("restarted the MPS daemon of {gpu}")),
        "{}",
        sup.stderr()
    );
    // the exporter's view: up, one restart, the supervisor alive
    assert!(wait_for(5, || metric(
        &h,
        &format!("gpu_quota_mps_daemon_state{{gpu=\"0\",uuid=\"{gpu}\",state=\"up\"}} 1")
    )));
    assert!(metric(
        &h,
        &format!("gpu_quota_mps_daemon_restarts_total{{gpu=\"0\",uuid=\"{gpu}\"}} 1")
    ));
    assert!(metric(&h, "gpu_quota_mps_supervisor_up 1"));
    let events = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert!(
        events.contains("\"event\":\"mps_restart\"") && events.contains("\"cause\":\"supervisor\""),
        "{events}"
    );
    // a supervisor that stopped: its last status goes stale, the state unknown
    drop(sup);
    delete(&h, "dd");
    assert!(!dir.exists(), "the last share's release stops the daemon");
}

#[test]
fn a_hung_daemon_is_killed_and_replaced() {
    require_e2e!();
    let (h, b) = probe_host("hg");
    let _d = Daemons(&h);
    let gpu = fake_uuid(0);
    let dir = mps_dir(&h, &gpu);
    let sup = Supervisor::start(&h);
    run_share(&h, &b, "hg", &SHARE, "sleep 600");
    assert!(wait_for(5, || metric(
        &h,
        &format!("gpu_quota_mps_daemon_state{{gpu=\"0\",uuid=\"{gpu}\",state=\"up\"}} 1")
    )));
    let pid = daemon_pid(&dir).unwrap();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t0 = Instant::now();
    // a process that starts while the daemon hangs: its socket takes the
    // connection (the backlog), but the daemon never takes the client, and
    // the driver runs it outside MPS: refused, and for good in that process
    let mut bg = probe_bg(&h, "hg", "hung", "--retry 16");
    assert!(
        wait_for(20, || daemon_pid(&dir).is_some_and(|p| p != pid)
            && answers(&dir)),
        "a new daemon: {}",
        sup.stderr()
    );
    let took = t0.elapsed();
    eprintln!("the hung daemon was replaced in {} ms", took.as_millis());
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(
        wait_for(5, || !std::path::Path::new(&format!("/proc/{pid}"))
            .exists()),
        "the hung daemon was killed"
    );
    assert!(wait_for(30, || std::fs::read_to_string(b.out.join("hung"))
        .is_ok_and(|s| s.contains("rc="))));
    let _ = bg.wait();
    let hung = std::fs::read_to_string(b.out.join("hung")).unwrap();
    assert!(
        hung.contains("cuInit: 805")
            && hung.contains("reports MPS off")
            && !hung.contains("served after")
            && !hung.contains("rc=0"),
        "the process that met the hung daemon:\n{hung}"
    );
    // a new process after the restart is a client
    let o = probe(&h, "hg", &[]);
    assert_ok(&o, "a client of the new daemon");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("mps=1 pct=25"));
    assert!(metric(
        &h,
        &format!("gpu_quota_mps_daemon_restarts_total{{gpu=\"0\",uuid=\"{gpu}\"}} 1")
    ));
    let events = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert!(
        events.contains("\"event\":\"mps_restart\"") && events.contains("did not answer"),
        "{events}"
    );
    drop(sup);
    delete(&h, "hg");
}

/// A share container's processes run as its non-root user (a share is
/// never served to host root unless the operator allows it), and give the
/// control UI every command against the pipe directory mounted in: it sees
/// the client socket only, and the daemon refuses them all to a non-root
/// uid (measured on the H200 for uid 100000; the fake does the same). Root
/// on the client socket would have had the server's percentage and
/// `terminate_client` (measured). The host's UI, on the privileged socket,
/// can do all (positive control).
#[test]
fn control_commands_from_a_container_change_nothing() {
    require_e2e!();
    let (h, b) = probe_host("nb");
    let _d = Daemons(&h);
    let gpu = fake_uuid(0);
    let dir = mps_dir(&h, &gpu);
    // the attacker: the same image plus the control UI, as an image brings it
    let atk = copy_bundle(&h, &b, "atk");
    std::fs::copy(control(), atk.rootfs().join("bin/nvidia-cuda-mps-control")).unwrap();
    // the neighbour: a client that lives on at its share
    run_share(
        &h,
        &b,
        "nb",
        &SHARE,
        "/bin/mps_client_probe libcuda.so.1 --hold 600 > /out/info 2>&1",
    );
    assert!(wait_for(10, || std::fs::read_to_string(b.out.join("info"))
        .is_ok_and(|s| s.starts_with("mps=1 pct=25"))));
    run_share(&h, &atk, "atk", &SHARE, "sleep 600");
    let srv = ui(&dir, "get_server_list").unwrap();
    assert!(!srv.is_empty(), "a server runs");
    let clients = ui(&dir, &format!("get_client_list {srv}")).unwrap();
    let nb_pid = clients
        .lines()
        .next()
        .expect("the neighbour is a client")
        .to_string();
    // the host may (the privileged socket): the server's percentage to 50
    assert_eq!(
        ui(&dir, &format!("set_active_thread_percentage {srv} 50")).as_deref(),
        Some("50.0")
    );
    let state = || {
        (
            daemon_pid(&dir),
            ui(&dir, "get_default_active_thread_percentage"),
            ui(&dir, "get_default_device_pinned_mem_limit 0"),
        )
    };
    let before = state();
    let mut replies = Vec::new();
    for cmd in [
        "set_default_active_thread_percentage 10".to_string(),
        "set_default_active_thread_percentage 100".to_string(),
        "set_default_device_pinned_mem_limit 0 100G".to_string(),
        format!("set_active_thread_percentage {srv} 100"),
        format!("terminate_client {srv} {nb_pid}"),
        "quit".to_string(),
    ] {
        let o = h.runtime(&[
            "exec",
            "atk",
            "sh",
            "-c",
            &format!("echo '{cmd}' | nvidia-cuda-mps-control"),
        ]);
        replies.push(format!(
            "{cmd} -> {}",
            String::from_utf8_lossy(&o.stdout).trim()
        ));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        state(),
        before,
        "the daemon after the container's commands:\n{}",
        replies.join("\n")
    );
    assert!(answers(&dir), "the daemon did not quit");
    // what the container sees of the pipe directory
    let o = h.runtime(&["exec", "atk", "ls", "-a", "/run/gpu-quota/mps"]);
    assert_ok(&o, "ls");
    let seen: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter(|n| *n != "." && *n != "..")
        .map(String::from)
        .collect();
    assert_eq!(seen, ["control"], "the client socket only");

    assert!(
        ui(&dir, &format!("get_client_list {srv}"))
            .unwrap()
            .lines()
            .any(|l| l == nb_pid),
        "the neighbour is still a client:\n{}",
        replies.join("\n")
    );
    assert_eq!(
        ui(&dir, &format!("get_active_thread_percentage {srv}")).as_deref(),
        Some("50.0"),
        "the server's percentage is the host's:\n{}",
        replies.join("\n")
    );
    // a new client in the attacker's container is still served
    let o = probe(&h, "atk", &[]);
    assert_ok(&o, "a client next to the neighbour");
    delete(&h, "atk");
    delete(&h, "nb");
}
