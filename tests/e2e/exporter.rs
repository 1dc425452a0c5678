//! `gpu-quota metrics --listen` keeps answering
//! `/healthz` within 100 ms p99 and stays under 64 MiB RSS while one client
//! pipelines `GET /metrics` without ever reading and another streams a
//! 1 GiB header line.
//!
//! The same abusive clients are first run against two deliberately naive
//! servers inside the harness (the negative controls): a serial one, which
//! client A starves (healthz p99 over the limit), and a thread-per-connection
//! one without a header cap, which holds client B's bytes (its buffer passes
//! 64 MiB). So the clients are shown to bite before the exporter is judged.
//!
//! `GQ_E2E_EXPORTER_B_BYTES` lowers client B's 1 GiB (used only to run this
//! test against an exporter that buffers without bound, keeping that run's
//! memory bounded).
use gpu_quota_e2e::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// The acceptance limits.
const P99_LIMIT: Duration = Duration::from_millis(100);
const RSS_LIMIT_KIB: u64 = 64 * 1024;
/// `/healthz` samples: at least this many, and more while B streams.
const HEALTHZ_MIN: usize = 300;
const HEALTHZ_MAX: usize = 2000;
/// A `/healthz` not answered within this counts as failed (and slow).
const HEALTHZ_TIMEOUT: Duration = Duration::from_millis(500);
/// Every loop of the test ends by this deadline, whatever the server does.
const PHASE_LIMIT: Duration = Duration::from_secs(90);

/// What one abuse run saw (all of it is printed when an assertion fails).
#[derive(Debug, Default)]
#[allow(dead_code)]
struct Report {
    healthz_n: usize,
    healthz_failed: usize,
    p99: Duration,
    max_latency: Duration,
    /// Highest VmRSS sampled and the final VmHWM of the server (KiB).
    max_rss_kib: u64,
    hwm_kib: u64,
    /// A: requests written, whether its writes ever stalled (the server
    /// stopped reading it because it did not read), and the response bytes
    /// waiting unread on its socket at the end.
    a_requests: u64,
    a_stalled: bool,
    a_unread: usize,
    /// B: header bytes written, connections used, most bytes one
    /// connection took before the server closed it, and how many were
    /// closed by the server.
    b_bytes: u64,
    b_conns: u64,
    b_max_per_conn: u64,
    b_closed_by_server: u64,
}

fn vm_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// One `GET /healthz` on a fresh connection; its latency, or None when it
/// was not answered `200 ok` within HEALTHZ_TIMEOUT.
fn healthz(addr: &str) -> Option<Duration> {
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), HEALTHZ_TIMEOUT).ok()?;
    s.set_read_timeout(Some(HEALTHZ_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(HEALTHZ_TIMEOUT)).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: gq\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut r = Vec::new();
    let mut buf = [0u8; 512];
    while r.len() < 4096 && t.elapsed() < HEALTHZ_TIMEOUT {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => r.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
        if r.starts_with(b"HTTP/1.1 200") && r.ends_with(b"\r\n\r\nok\n") {
            return Some(t.elapsed());
        }
    }
    (r.starts_with(b"HTTP/1.1 200") && r.ends_with(b"ok\n") && t.elapsed() < HEALTHZ_TIMEOUT)
        .then(|| t.elapsed())
}

/// Client A: pipelines `GET /metrics` and never reads. Reconnects if the
/// server drops it (at most 100 times). Returns (requests, stalled, unread).
fn client_a(addr: String, stalled: Arc<AtomicBool>, stop: Arc<AtomicBool>) -> (u64, bool, usize) {
    let batch = b"GET /metrics HTTP/1.1\r\nHost: gq\r\n\r\n".repeat(64);
    let mut requests = 0u64;
    let mut last = None;
    let t = Instant::now();
    'conns: for _ in 0..100 {
        let Ok(mut s) = TcpStream::connect(&addr) else {
            break;
        };
        s.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        while !stop.load(SeqCst) && t.elapsed() < PHASE_LIMIT {
            match s.write(&batch) {
                Ok(n) => requests += (n / 36) as u64,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    stalled.store(true, SeqCst);
                }
                Err(_) => continue 'conns,
            }
        }
        last = Some(s);
        break;
    }
    let mut unread = 0;
    if let Some(s) = last {
        // what the server answered and A never read
        s.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        if let Ok(n) = s.peek(&mut buf) {
            unread = n;
        }
        let _ = s.shutdown(Shutdown::Both);
    }
    (requests, stalled.load(SeqCst), unread)
}

/// Client B: one endless header line, `total` bytes in all; when the server
/// closes a connection, a new one carries on (at most 100000).
/// Returns (bytes, connections, most on one, closed by the server).
fn client_b(
    addr: String,
    total: u64,
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> (u64, u64, u64, u64) {
    let chunk = vec![b'a'; 64 << 10];
    let (mut conns, mut max_one, mut closed) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    while sent.load(SeqCst) < total
        && conns < 100_000
        && t.elapsed() < PHASE_LIMIT
        && !stop.load(SeqCst)
    {
        let Ok(mut s) = TcpStream::connect(&addr) else {
            break;
        };
        conns += 1;
        s.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut one = 0u64;
        if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: gq\r\nX-Endless: ")
            .is_ok()
        {
            while sent.load(SeqCst) < total && t.elapsed() < PHASE_LIMIT && !stop.load(SeqCst) {
                match s.write(&chunk) {
                    Ok(n) => {
                        one += n as u64;
                        sent.fetch_add(n as u64, SeqCst);
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => {
                        closed += 1;
                        break;
                    }
                }
            }
        } else {
            closed += 1;
        }
        max_one = max_one.max(one);
    }
    (sent.load(SeqCst), conns, max_one, closed)
}

/// Run A and B against `addr`, measure `/healthz` meanwhile, and sample
/// `pid`'s memory when given.
fn abuse(addr: &str, pid: Option<u32>, b_total: u64) -> Report {
    let stop = Arc::new(AtomicBool::new(false));
    let stalled = Arc::new(AtomicBool::new(false));
    let b_sent = Arc::new(AtomicU64::new(0));
    let b_done = Arc::new(AtomicBool::new(false));

    let sampler = pid.map(|pid| {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut max = 0;
            let t = Instant::now();
            while !stop.load(SeqCst) && t.elapsed() < 2 * PHASE_LIMIT {
                max = max.max(vm_kib(pid, "VmRSS:").unwrap_or(0));
                thread::sleep(Duration::from_millis(5));
            }
            max = max.max(vm_kib(pid, "VmRSS:").unwrap_or(0));
            (max, vm_kib(pid, "VmHWM:").unwrap_or(0))
        })
    });

    let a = {
        let (addr, stalled, stop) = (addr.to_string(), stalled.clone(), stop.clone());
        thread::spawn(move || client_a(addr, stalled, stop))
    };
    // A has filled what the server and the kernel hold for it
    let t = Instant::now();
    while !stalled.load(SeqCst) && t.elapsed() < Duration::from_secs(30) {
        thread::sleep(Duration::from_millis(10));
    }
    let b = {
        let (addr, sent, stop, done) = (
            addr.to_string(),
            b_sent.clone(),
            stop.clone(),
            b_done.clone(),
        );
        thread::spawn(move || {
            let r = client_b(addr, b_total, sent, stop);
            done.store(true, SeqCst);
            r
        })
    };
    let t = Instant::now();
    while b_sent.load(SeqCst) < MIB.min(b_total)
        && !b_done.load(SeqCst)
        && t.elapsed() < Duration::from_secs(10)
    {
        thread::sleep(Duration::from_millis(1));
    }

    // /healthz while both misbehave: at least HEALTHZ_MIN samples, and on
    // while B still streams; more than 1% of HEALTHZ_MAX slow already
    // decides the p99, so a starved server is judged in seconds.
    let mut lat = Vec::new();
    let (mut failed, mut slow) = (0, 0);
    let t = Instant::now();
    while (lat.len() < HEALTHZ_MIN || !b_done.load(SeqCst))
        && lat.len() < HEALTHZ_MAX
        && slow <= HEALTHZ_MAX / 100
        && t.elapsed() < PHASE_LIMIT
    {
        let d = healthz(addr).unwrap_or_else(|| {
            failed += 1;
            HEALTHZ_TIMEOUT
        });
        if d >= P99_LIMIT {
            slow += 1;
        }
        lat.push(d);
    }
    // B's whole stream is sent (or cut) while memory is sampled, unless the
    // server has stopped taking it (2 s without progress)
    let t = Instant::now();
    let (mut last, mut since) = (b_sent.load(SeqCst), Instant::now());
    while !b_done.load(SeqCst)
        && t.elapsed() < PHASE_LIMIT
        && since.elapsed() < Duration::from_secs(2)
    {
        thread::sleep(Duration::from_millis(10));
        let now = b_sent.load(SeqCst);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    stop.store(true, SeqCst);
    let (a_requests, a_stalled, a_unread) = a.join().unwrap();
    let (b_bytes, b_conns, b_max_per_conn, b_closed_by_server) = b.join().unwrap();
    let (max_rss_kib, hwm_kib) = sampler.map(|s| s.join().unwrap()).unwrap_or_default();

    lat.sort();
    let n = lat.len();
    let p99 = if slow > HEALTHZ_MAX / 100 {
        HEALTHZ_TIMEOUT
    } else {
        lat[(n * 99).div_ceil(100) - 1]
    };
    Report {
        healthz_n: n,
        healthz_failed: failed,
        p99,
        max_latency: lat.last().copied().unwrap_or_default(),
        max_rss_kib,
        hwm_kib,
        a_requests,
        a_stalled,
        a_unread,
        b_bytes,
        b_conns,
        b_max_per_conn,
        b_closed_by_server,
    }
}

/// The negative controls: a server with none of the exporter's limits.
/// `threaded`: a thread per connection (else one connection at a time).
/// Requests are read into a buffer that grows until the blank line; each
/// pipelined request is answered in turn. `held` is the largest buffer.
struct Naive {
    addr: String,
    stop: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
    accept: Option<thread::JoinHandle<()>>,
}

fn naive_conn(mut s: TcpStream, held: &AtomicU64, stop: &AtomicBool) {
    let mut buf = Vec::new();
    // where the search for the blank line resumes (only new bytes are
    // scanned, so a long header costs the control linear time)
    let mut scanned = 0;
    let mut chunk = vec![0u8; 64 << 10];
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while !stop.load(SeqCst) {
        while let Some(i) = buf[scanned..].windows(4).position(|w| w == b"\r\n\r\n") {
            let req: Vec<u8> = buf.drain(..scanned + i + 4).collect();
            scanned = 0;
            let body: &[u8] = if req.starts_with(b"GET /healthz") {
                b"ok\n"
            } else {
                &[b'#'; 4096]
            };
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            // blocks while the client does not read, as a naive server does
            if s.write_all(head.as_bytes())
                .and_then(|_| s.write_all(body))
                .is_err()
            {
                return;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                scanned = buf.len().saturating_sub(3);
                buf.extend_from_slice(&chunk[..n]);
                held.fetch_max(buf.len() as u64, SeqCst);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

impl Naive {
    fn start(threaded: bool) -> Naive {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicU64::new(0));
        let accept = {
            let (stop, held) = (stop.clone(), held.clone());
            thread::spawn(move || {
                let mut conns = Vec::new();
                for s in l.incoming() {
                    if stop.load(SeqCst) {
                        break;
                    }
                    let Ok(s) = s else { continue };
                    if threaded {
                        let (stop, held) = (stop.clone(), held.clone());
                        conns.push(thread::spawn(move || naive_conn(s, &held, &stop)));
                    } else {
                        naive_conn(s, &held, &stop);
                    }
                }
                for c in conns {
                    let _ = c.join();
                }
            })
        };
        Naive {
            addr,
            stop,
            held,
            accept: Some(accept),
        }
    }
}

impl Drop for Naive {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        // wake the accept loop; the connections see `stop` within 200 ms
        let _ = TcpStream::connect(&self.addr);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
    }
}

fn b_total() -> u64 {
    std::env::var("GQ_E2E_EXPORTER_B_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 30)
}

#[test]
fn exporter_answers_healthz_within_bounds_while_two_clients_misbehave() {
    require_e2e!();

    // Negative control 1: a serial server is starved by A alone.
    let serial = Naive::start(false);
    let r = abuse(&serial.addr, None, 16 * MIB);
    eprintln!("serial naive server: {r:?}");
    assert!(
        r.a_stalled && r.a_unread > 0,
        "A did not pipeline unread: {r:?}"
    );
    assert!(
        r.p99 >= P99_LIMIT,
        "A did not starve a serial server: {r:?}"
    );
    drop(serial);

    // Negative control 2: a thread per connection keeps /healthz answered
    // but holds B's header: 96 MiB sent, more than 64 MiB held.
    let threaded = Naive::start(true);
    let r = abuse(&threaded.addr, None, 96 * MIB);
    eprintln!(
        "threaded naive server: {r:?}, held {} MiB",
        threaded.held.load(SeqCst) / MIB
    );
    assert!(
        threaded.held.load(SeqCst) > RSS_LIMIT_KIB * 1024,
        "B's bytes were not held by a server without a header cap: {r:?}"
    );
    assert_eq!(r.b_closed_by_server, 0, "{r:?}");
    drop(threaded);

    // The exporter, under the same two clients and B's full 1 GiB.
    let h = Host::new(HostOpts::default());
    let ex = Exporter::start(&h);
    let total = b_total();
    let r = abuse(&ex.addr, Some(ex.child.id()), total);
    eprintln!("exporter: {r:?}");
    // the clients did misbehave: A's answers wait unread, B sent everything
    assert!(r.a_stalled && r.a_requests > 0, "A never stalled: {r:?}");
    assert!(
        r.b_bytes >= total,
        "B did not send its {total} bytes: {r:?}"
    );
    assert!(
        r.p99 < P99_LIMIT && r.healthz_failed == 0 && r.healthz_n >= HEALTHZ_MIN,
        "gpu-quota: /healthz p99 {:?} (limit {P99_LIMIT:?}), {} of {} unanswered: {r:?}",
        r.p99,
        r.healthz_failed,
        r.healthz_n
    );
    assert!(
        r.max_rss_kib > 0 && r.max_rss_kib < RSS_LIMIT_KIB && r.hwm_kib < RSS_LIMIT_KIB,
        "exporter RSS {} KiB, high water {} KiB (limit {RSS_LIMIT_KIB} KiB): {r:?}",
        r.max_rss_kib,
        r.hwm_kib
    );
    // the header cap: every B connection was closed by the exporter long
    // before its share of the stream (what one took is mostly kernel buffers)
    assert!(
        r.b_closed_by_server > 0 && r.b_max_per_conn < 64 * MIB,
        "{r:?}"
    );
    // and the exporter still serves a scrape
    let mut s = TcpStream::connect(&ex.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: gq\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(
        body.starts_with("HTTP/1.1 200") && body.contains("gpu_quota_ledger_ok 1"),
        "{body}"
    );
}
