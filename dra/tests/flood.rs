//! Misbehaving clients on the driver's sockets (src/conns.rs): thousands of
//! idle connections, connections that never finish the handshake, endless
//! empty CONTINUATION frames. The kubelet's calls must still be answered
//! within a second, and the daemon's descriptors stay bounded.
use gpuquota_dra::api::registration::{self, registration_client::RegistrationClient};
use gpuquota_dra::conns::{Limits, LIMITS};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;
use common::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The client preface and an empty SETTINGS frame: a completed handshake.
fn handshake() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    b.extend(h2_frame(0x4, 0, 0, &[]));
    b
}

/// Room for the test's own 4000 client descriptors (the daemon runs in
/// this process too).
fn raise_nofile() {
    let want = 16384;
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    if r.rlim_cur < want {
        r.rlim_cur = want;
        r.rlim_max = r.rlim_max.max(want);
        assert_eq!(
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) },
            0,
            "raising RLIMIT_NOFILE (run as root)"
        );
    }
}

/// `n` connections to `sock`, each sent `first` and then silent (blocking
/// connects, off the runtime thread, so the daemon can accept meanwhile).
async fn hold(sock: PathBuf, n: usize, first: Vec<u8>) -> Vec<UnixStream> {
    tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|_| {
                let mut s = UnixStream::connect(&sock).unwrap();
                // a connection the daemon already closed may refuse it
                let _ = s.write_all(&first);
                s
            })
            .collect()
    })
    .await
    .unwrap()
}

/// The accepted connections of the listening socket at `sock` that this
/// process holds open: the daemon's side (an accepted unix socket carries
/// its listener's path in /proc/net/unix; the clients' ends have none).
fn server_side(sock: &Path) -> usize {
    let ours: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let want = sock.to_string_lossy();
    std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // St 03: connected (the listener itself is 01)
            f.len() >= 8 && f[5] == "03" && f[7] == want && ours.contains(f[6])
        })
        .count()
}

/// NodePrepareResources for the 8 GiB claim on a new connection, as the
/// kubelet would dial it; how long it took.
async fn timed_prepare(h: &Host) -> Duration {
    let t = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        prepare(h, vec![claim("ml", "train-0-vram-x7k2p", TRAIN)]),
    )
    .await
    .expect("NodePrepareResources answered");
    assert_eq!(r[TRAIN].error, "");
    t.elapsed()
}

async fn timed_get_info(h: &Host) -> Duration {
    let t = Instant::now();
    let info = tokio::time::timeout(Duration::from_secs(5), async {
        RegistrationClient::new(channel(&h.reg_sock()).await)
            .get_info(registration::InfoRequest {})
            .await
    })
    .await
    .expect("GetInfo answered")
    .unwrap()
    .into_inner();
    assert_eq!(info.name, "vram.gpu-quota.io");
    t.elapsed()
}

/// Whether the daemon closes `s` within `within` (reads what it sends).
fn closed_within(s: &mut UnixStream, within: Duration) -> bool {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut b = [0u8; 4096];
    while t.elapsed() < within {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[tokio::test]
async fn two_thousand_idle_connections_on_each_socket_leave_the_kubelet_served() {
    raise_nofile();
    let h = Host::start().await;
    // the control: answered before the flood
    let before = timed_prepare(&h).await;
    assert!(before < Duration::from_secs(1), "prepare took {before:?}");
    let reg = hold(h.reg_sock(), 2000, handshake()).await;
    let dra = hold(h.dra_sock(), 2000, handshake()).await;
    // a second of quiet: the daemon has seen all of them
    tokio::time::sleep(Duration::from_secs(1)).await;
    let took = timed_prepare(&h).await;
    let info = timed_get_info(&h).await;
    eprintln!(
        "prepare {before:?} before; with 2000 idle clients per socket: prepare {took:?}, GetInfo {info:?}"
    );
    assert!(took < Duration::from_secs(1), "prepare took {took:?}");
    assert!(info < Duration::from_secs(1), "GetInfo took {info:?}");
    let bound = 2 * LIMITS.max_connections;
    let (r, d) = (server_side(&h.reg_sock()), server_side(&h.dra_sock()));
    eprintln!("daemon's connections with 2000 idle clients per socket: registration {r}, DRA {d}");
    assert!(
        r <= bound && d <= bound,
        "registration {r}, DRA {d}: over {bound}"
    );
    drop((reg, dra));
    h.stop().await;
}

#[tokio::test]
async fn no_handshake_in_time_or_idle_past_the_deadline_is_closed() {
    let limits = Limits {
        handshake: Duration::from_secs(1),
        idle: Duration::from_secs(3),
        ..LIMITS
    };
    let h = Host::start_limited(limits).await;
    for sock in [h.reg_sock(), h.dra_sock()] {
        let t = Instant::now();
        let mut silent = hold(sock.clone(), 1, vec![]).await.remove(0);
        let mut preface = hold(sock.clone(), 1, PREFACE.to_vec()).await.remove(0);
        let mut shook = hold(sock.clone(), 1, handshake()).await.remove(0);
        let (s, p, k) = tokio::task::spawn_blocking(move || {
            let s = closed_within(&mut silent, Duration::from_secs(3));
            let p = closed_within(&mut preface, Duration::from_millis(500));
            // the handshaken one outlives the handshake deadline ...
            let early = closed_within(&mut shook, Duration::from_millis(1500));
            // ... and is closed once idle
            let k = !early && closed_within(&mut shook, Duration::from_secs(3));
            (s, p, k)
        })
        .await
        .unwrap();
        assert!(
            s && p,
            "{}: silent closed {s}, preface-only closed {p}",
            sock.display()
        );
        assert!(
            k,
            "{}: the handshaken connection not closed at idle",
            sock.display()
        );
        assert!(t.elapsed() >= Duration::from_secs(3));
    }
    h.stop().await;
}

#[tokio::test]
async fn endless_empty_continuation_frames_close_the_connection() {
    let h = Host::start().await;
    for sock in [h.reg_sock(), h.dra_sock()] {
        let mut s = hold(sock.clone(), 1, handshake()).await.remove(0);
        let took = tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            // a request whose header block never ends: a HEADERS frame
            // without END_HEADERS, then empty CONTINUATIONs
            let mut b = h2_frame(0x1, 0, 1, &[0x83, 0x86]);
            b.extend(h2_frame(0x9, 0, 1, &[]).repeat(100));
            let mut sent = 0;
            while sent < 10_000 && t.elapsed() < Duration::from_secs(5) {
                if s.write_all(&b).is_err() {
                    return Some(t.elapsed());
                }
                b = h2_frame(0x9, 0, 1, &[]).repeat(100);
                sent += 1;
            }
            closed_within(&mut s, Duration::from_secs(2)).then(|| t.elapsed())
        })
        .await
        .unwrap();
        let took = took.unwrap_or_else(|| {
            panic!(
                "{}: a million empty CONTINUATIONs and still open",
                sock.display()
            )
        });
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
    // and the kubelet is served
    assert!(timed_prepare(&h).await < Duration::from_secs(1));
    h.stop().await;
}

/// The negative control of the idle deadline: the kubelet's health stream
/// sends nothing after its request, but the daemon writes to it every third
/// of the health timeout (1 s here), so it outlives an idle deadline of 2 s.
#[tokio::test]
async fn the_health_stream_is_never_idle() {
    use gpuquota_dra::api::health::{self, dra_resource_health_client::DraResourceHealthClient};
    let limits = Limits {
        idle: Duration::from_secs(2),
        ..LIMITS
    };
    let h = Host::start_limited(limits).await;
    let mut s = DraResourceHealthClient::new(channel(&h.dra_sock()).await)
        .node_watch_resources(health::NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let t = Instant::now();
    let mut got = 0;
    while t.elapsed() < Duration::from_secs(6) {
        tokio::time::timeout(HEALTH_TIMEOUT, s.message())
            .await
            .expect("a message within the health timeout")
            .expect("the stream is not failed")
            .expect("the stream goes on");
        got += 1;
    }
    assert!(got >= 5, "{got} messages in 6 s");
    h.stop().await;
}
