//! The finding as it was seen: the daemon at nofile 1024, another process
//! opening 1100 preface-only connections on the registration socket. The
//! daemon must keep its descriptors, not spin, and answer the kubelet.
//! (Its own test binary: the descriptor limit is the whole process's.)
use gpuquota_dra::api::dra::{self, dra_plugin_client::DraPluginClient};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

const HOLD_SOCK: &str = "GQ_DRA_HOLD_SOCK";
const HOLD_N: &str = "GQ_DRA_HOLD_N";

fn set_nofile(n: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    r.rlim_cur = n;
    r.rlim_max = r.rlim_max.max(n);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
}

/// This process's user + system CPU time.
fn cpu() -> Duration {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// A blocking connect that gives up after `timeout` (a daemon that stopped
/// accepting leaves its queue full).
fn connect(path: &str, timeout: Duration) -> std::io::Result<UnixStream> {
    use std::os::fd::FromRawFd;
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = UnixStream::from_raw_fd(fd);
        s.set_write_timeout(Some(timeout))?;
        let mut a: libc::sockaddr_un = std::mem::zeroed();
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, b) in a.sun_path.iter_mut().zip(path.as_bytes()) {
            *d = *b as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
        if libc::connect(fd, &a as *const _ as *const libc::sockaddr, len as u32) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(s)
    }
}

/// The other process: connect HOLD_N times to HOLD_SOCK, send the client
/// preface on each, print how many it holds, and hold them until stdin
/// closes. Connections the daemon closes are not replaced.
#[test]
#[ignore = "the flooding child of a_preface_flood_at_nofile_1024_leaves_the_daemon_serving"]
fn hold_child() {
    let Ok(sock) = std::env::var(HOLD_SOCK) else {
        return;
    };
    let n: usize = std::env::var(HOLD_N).unwrap().parse().unwrap();
    set_nofile(n as u64 + 64);
    let mut held = Vec::new();
    for _ in 0..n {
        // a blocking connect waits for the daemon's accept queue
        match connect(&sock, Duration::from_secs(2)) {
            Ok(mut s) => {
                let _ = s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
                held.push(s);
            }
            Err(e) => {
                println!("connect failed after {}: {e}", held.len());
                break;
            }
        }
    }
    println!("held {}", held.len());
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_line(&mut String::new());
}

#[tokio::test]
async fn a_preface_flood_at_nofile_1024_leaves_the_daemon_serving() {
    set_nofile(1024);
    let h = Host::start().await;
    // what the daemon spends idle (it re-reads the node every 50 ms here)
    let c0 = cpu();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = cpu() - c0;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hold_child", "--ignored", "--nocapture"])
        .env(HOLD_SOCK, h.reg_sock())
        .env(HOLD_N, "1100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    // the child's connects block on the daemon's accepts: read off the
    // runtime thread
    let line = tokio::task::spawn_blocking(move || {
        let mut r = BufReader::new(out);
        let mut l = String::new();
        while !l.starts_with("held") {
            l.clear();
            if r.read_line(&mut l).unwrap() == 0 {
                break;
            }
        }
        // keep reading, so the child's last words do not hit a closed pipe
        std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
        l
    })
    .await
    .unwrap();
    eprintln!("the flooding process: {}", line.trim());
    assert!(line.starts_with("held"), "{line:?}");
    // the child's connects return once queued: give the daemon half a
    // second to accept them all; then three seconds with the flood in
    // place, within the handshake deadline
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (c0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = cpu() - c0;
    let wall = t0.elapsed();
    // (the listing itself needs a descriptor)
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count());
    eprintln!(
        "1100 preface-only connections: {spent:?} CPU in {wall:?} ({idle:?} in 3 s idle), descriptors open: {fds:?}"
    );
    // as the kubelet: a fresh connection (a failure to get a descriptor
    // for it is a failure of the call)
    let sock = h.dra_sock();
    let took = tokio::time::timeout(
        Duration::from_secs(1),
        tokio::spawn(async move {
            DraPluginClient::new(channel(&sock).await)
                .node_prepare_resources(dra::NodePrepareResourcesRequest {
                    claims: vec![claim("ml", "train-0-vram-x7k2p", TRAIN)],
                })
                .await
        }),
    )
    .await;
    match &took {
        Ok(Ok(Ok(_))) => eprintln!("NodePrepareResources answered"),
        other => eprintln!("NodePrepareResources: {other:?}"),
    }
    drop(child.stdin.take());
    let _ = child.wait();
    assert!(
        spent < idle + Duration::from_millis(300),
        "the daemon spun: {spent:?} CPU in {wall:?}, {idle:?} idle"
    );
    assert!(
        fds.as_ref().is_ok_and(|n| *n < 512),
        "descriptors open: {fds:?}"
    );
    assert!(line.starts_with("held 1100"), "{line:?}");
    let r = took
        .expect("NodePrepareResources answered within 1 s")
        .expect("the call could be made")
        .expect("the call succeeded")
        .into_inner();
    assert_eq!(r.claims[TRAIN].error, "");
    h.stop().await;
}
