//! `gpu-quota metrics --listen ADDR`: the exposition over HTTP for
//! Prometheus. `GET /metrics` renders a fresh snapshot per scrape,
//! `GET /healthz` answers `ok`; anything else is 404 (405 for other
//! methods). Binds exactly the address given.
//!
//! A scrape target must answer every client within bounds, whatever the
//! others do: hyper's HTTP/1 server on a single-threaded tokio runtime,
//! every connection its own task, with the limits of [`LIMITS`]
//! (docs/security.md, "The metrics exporter"). A client that pipelines and
//! never reads blocks only its own connection until the write timeout; a
//! header over the cap is answered 431 and the connection closed; scrapes
//! render off the runtime thread, one at a time, so a slow render never
//! delays `/healthz`.
//!
//! Connections are shared out by peer ([`peer::Peer`]: a local client's
//! uid, a remote one's address): one peer holds at most
//! [`Limits::max_per_peer`], and when all [`Limits::max_connections`] are
//! taken a newcomer closes the oldest connection of the peer holding the
//! most, if that peer holds more than the newcomer's would. So whatever
//! one user opens or cycles, a probe from another gets a slot at once.
use crate::fair::Table;
use crate::peer::{self, Peer};
use crate::{metrics, snapshot};
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use gpuquota_core::config::Config;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Sleep;

/// What bounds the exporter's work per client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; one more either closes the oldest of
    /// the busiest peer's or is closed at once (after a best-effort 503).
    pub max_connections: usize,
    /// Connections one peer holds at once; one more is closed at once
    /// (after a best-effort 503).
    pub max_per_peer: usize,
    /// hyper's read buffer: a request head (request line and headers) that
    /// does not fit is answered 431 and the connection closed. hyper's
    /// minimum is 8 KiB.
    pub max_request_bytes: usize,
    /// The whole request head must arrive within this, counted from when
    /// the connection starts waiting for it (so it is also the keep-alive
    /// idle timeout).
    pub header_read_timeout: Duration,
    /// A write that makes no progress for this long closes the connection
    /// (a client that does not read its answers).
    pub write_timeout: Duration,
    /// No connection lives longer, however well it behaves.
    pub connection_lifetime: Duration,
}

pub const LIMITS: Limits = Limits {
    max_connections: 64,
    max_per_peer: 16,
    max_request_bytes: 8 << 10,
    header_read_timeout: Duration::from_secs(5),
    write_timeout: Duration::from_secs(10),
    connection_lifetime: Duration::from_secs(60),
};

/// Renders one scrape (blocking: it reads files and asks NVML).
pub trait Scrape: Send + Sync + 'static {
    fn render(&self) -> String;
}

struct Live {
    cfg: Config,
    nvml: snapshot::Nvml,
}

impl Scrape for Live {
    fn render(&self) -> String {
        metrics::render(&snapshot::take(&self.cfg, &self.nvml))
    }
}

pub fn serve(cfg: &Config, addr: SocketAddr) -> Result<()> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| anyhow!("cannot listen on {addr}: {e}"))?;
    let scrape = Arc::new(Live {
        cfg: cfg.clone(),
        nvml: snapshot::Nvml::init(),
    });
    eprintln!(
        "gpu-quota: serving metrics on http://{}/metrics",
        listener.local_addr().context("the listening address")?
    );
    run(listener, scrape, LIMITS)
}

/// Serve `listener` for as long as the process lives.
pub fn run(listener: std::net::TcpListener, scrape: Arc<dyn Scrape>, limits: Limits) -> Result<()> {
    listener
        .set_nonblocking(true)
        .context("cannot make the listening socket non-blocking")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        // scrapes run one at a time on this pool (see `renders`)
        .max_blocking_threads(2)
        .build()
        .context("cannot start the exporter's runtime")?;
    rt.block_on(async move {
        let listener =
            tokio::net::TcpListener::from_std(listener).context("cannot register the listener")?;
        let table = Arc::new(Mutex::new(Table::default()));
        let renders = Arc::new(Semaphore::new(1));
        loop {
            let (stream, remote) = match listener.accept().await {
                Ok(s) => s,
                // out of descriptors or memory, or an aborted handshake:
                // nothing to answer; do not spin
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let who = match stream.local_addr() {
                Ok(local) => peer::identify(local, remote),
                Err(_) => Peer::Addr(remote.ip()),
            };
            let Some(ticket) =
                Table::admit(&table, who, limits.max_connections, limits.max_per_peer)
            else {
                let _ = stream.try_write(BUSY);
                continue;
            };
            let renders = renders.clone();
            let scrape = scrape.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let io = TokioIo::new(WriteTimeout::new(stream, limits.write_timeout));
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .max_buf_size(limits.max_request_bytes)
                    .header_read_timeout(limits.header_read_timeout)
                    .serve_connection(
                        io,
                        service_fn(move |req| handle(req, scrape.clone(), renders.clone())),
                    );
                // past the lifetime, or evicted, the connection is dropped,
                // which closes it
                tokio::select! {
                    _ = tokio::time::timeout(limits.connection_lifetime, conn) => {}
                    _ = ticket.evicted.notified() => {}
                }
            });
        }
    })
}

const BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

async fn handle(
    req: Request<Incoming>,
    scrape: Arc<dyn Scrape>,
    renders: Arc<Semaphore>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return Ok(text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n",
            PLAIN,
        ));
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            // the permit travels with the render: a render whose client is
            // gone still holds it until it ends
            let Ok(permit) = renders.acquire_owned().await else {
                return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "busy\n", PLAIN));
            };
            match tokio::task::spawn_blocking(move || {
                let _permit = permit;
                scrape.render()
            })
            .await
            {
                Ok(body) => text(StatusCode::OK, body, metrics::CONTENT_TYPE),
                Err(_) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "gpu-quota: the scrape failed; see the exporter's stderr\n",
                    PLAIN,
                ),
            }
        }
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/" => text(
            StatusCode::OK,
            "gpu-quota exporter: see /metrics and /healthz\n",
            PLAIN,
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n", PLAIN),
    })
}

fn text(code: StatusCode, body: impl Into<Bytes>, ctype: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    r
}

/// A stream whose writes fail with `TimedOut` once one has made no
/// progress for `limit`.
struct WriteTimeout {
    io: TcpStream,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteTimeout {
    fn new(io: TcpStream, limit: Duration) -> WriteTimeout {
        WriteTimeout {
            io,
            limit,
            stalled: None,
        }
    }

    /// `r` from the socket: progress clears the deadline, a stall starts
    /// it (or fails once it has passed).
    fn check<T>(
        &mut self,
        cx: &mut TaskContext<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let s = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match s.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read its answer in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteTimeout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.check(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.check(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.check(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.check(cx, r)
    }
}

#[cfg(test)]
mod tests {
    //! Each limit, with short values, against the real server on loopback.
    //! (tests/e2e/exporter.rs is the acceptance test under abuse.)
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Instant;

    struct Fixed {
        body: String,
        delay: Duration,
    }

    impl Scrape for Fixed {
        fn render(&self) -> String {
            std::thread::sleep(self.delay);
            self.body.clone()
        }
    }

    const SHORT: Limits = Limits {
        max_connections: 64,
        max_per_peer: 64,
        max_request_bytes: 8 << 10,
        header_read_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
        connection_lifetime: Duration::from_secs(60),
    };

    /// A server on a thread (it ends with the test process).
    fn start(limits: Limits, body: &str, delay: Duration) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let scrape = Arc::new(Fixed {
            body: body.into(),
            delay,
        });
        std::thread::spawn(move || run(l, scrape, limits).unwrap());
        addr
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    /// One answer read off `s`: (status, body); None when the server
    /// closed (or reset) the connection instead.
    fn answer(s: &mut TcpStream) -> Option<(u16, Vec<u8>)> {
        let mut r = Vec::new();
        let mut b = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = r.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut b) {
                Ok(0) | Err(_) => return None,
                Ok(n) => r.extend_from_slice(&b[..n]),
            }
        };
        let head = String::from_utf8_lossy(&r[..head_end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1)?.parse().ok()?;
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        while r.len() < head_end + len {
            match s.read(&mut b) {
                Ok(0) | Err(_) => return None,
                Ok(n) => r.extend_from_slice(&b[..n]),
            }
        }
        Some((status, r[head_end..head_end + len].to_vec()))
    }

    fn get(addr: SocketAddr, path: &str) -> Option<(u16, Vec<u8>)> {
        let mut s = connect(addr);
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .ok()?;
        answer(&mut s)
    }

    /// Whether the server closes `s` within `within` (reads nothing else).
    fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        s.set_read_timeout(Some(within)).unwrap();
        let mut b = [0u8; 4096];
        loop {
            match s.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    #[test]
    fn routes_and_content_types() {
        let addr = start(SHORT, "m 1\n", Duration::ZERO);
        assert_eq!(get(addr, "/healthz"), Some((200, b"ok\n".to_vec())));
        assert_eq!(get(addr, "/metrics?x=1"), Some((200, b"m 1\n".to_vec())));
        assert_eq!(get(addr, "/nope").unwrap().0, 404);
        let mut s = connect(addr);
        s.write_all(b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        assert_eq!(answer(&mut s).unwrap().0, 405);
        // HEAD: the headers of GET, no body
        let mut s = connect(addr);
        s.write_all(b"HEAD /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(
            r.contains(metrics::CONTENT_TYPE) && r.ends_with("\r\n\r\n"),
            "{r}"
        );
    }

    #[test]
    fn a_request_head_over_the_cap_is_answered_431_and_closed() {
        let addr = start(SHORT, "m 1\n", Duration::ZERO);
        // under the cap: served
        let pad = "a".repeat(4 << 10);
        let mut s = connect(addr);
        s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: {pad}\r\n\r\n").as_bytes())
            .unwrap();
        assert_eq!(answer(&mut s), Some((200, b"ok\n".to_vec())));
        // over it: 431 after at most the cap, though the header never ends
        let mut s = connect(addr);
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: ")
            .unwrap();
        let _ = s.write_all(&[b'a'; 16 << 10]);
        assert_eq!(answer(&mut s).map(|a| a.0), Some(431));
        assert!(closed_within(&mut s, Duration::from_secs(2)));
    }

    #[test]
    fn connections_over_the_cap_are_refused_and_a_silent_one_ends_at_the_header_timeout() {
        let limits = Limits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(1),
            ..SHORT
        };
        let addr = start(limits, "m 1\n", Duration::ZERO);
        assert_eq!(get(addr, "/healthz").unwrap().0, 200);
        // (that connection's slot is free once the server sees it closed)
        std::thread::sleep(Duration::from_millis(100));
        // two clients hold both slots: one silent, one dripping a header
        let t = Instant::now();
        let mut silent = connect(addr);
        let mut drip = connect(addr);
        drip.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // a third is refused at once: a 503 or a closed connection
        let third = get(addr, "/healthz");
        assert!(
            third.is_none() || third.as_ref().unwrap().0 == 503,
            "{third:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        // the dripping one is cut at the header timeout although it sends
        let cut = std::thread::spawn(move || {
            for _ in 0..40 {
                if drip.write_all(b"X").is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            closed_within(&mut drip, Duration::from_millis(1))
        });
        assert!(closed_within(&mut silent, Duration::from_secs(2)));
        assert!(
            cut.join().unwrap(),
            "a dripping header outlived the header timeout"
        );
        let waited = t.elapsed();
        assert!(waited >= Duration::from_secs(1), "{waited:?}");
        assert_eq!(get(addr, "/healthz"), Some((200, b"ok\n".to_vec())));
    }

    #[test]
    fn a_client_that_does_not_read_loses_its_slot_at_the_write_timeout() {
        let limits = Limits {
            max_connections: 1,
            write_timeout: Duration::from_secs(1),
            ..SHORT
        };
        // answers large enough to fill the socket buffers at the first few
        let addr = start(limits, &"m 1\n".repeat(64 << 10), Duration::ZERO);
        let mut a = connect(addr);
        // 1800 pipelined scrapes in one write, then never a read
        a.write_all(&b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n".repeat(1800))
            .unwrap();
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(100));
        // A holds the only slot (the negative control: without the write
        // timeout it would hold it for its whole lifetime)
        let refused = get(addr, "/healthz");
        assert!(
            refused.is_none() || refused.as_ref().unwrap().0 == 503,
            "{refused:?}"
        );
        // after the write timeout the slot is free again
        let mut ok = None;
        while t.elapsed() < Duration::from_secs(6) {
            std::thread::sleep(Duration::from_millis(50));
            ok = get(addr, "/healthz");
            if ok.as_ref().is_some_and(|o| o.0 == 200) {
                break;
            }
        }
        assert_eq!(ok, Some((200, b"ok\n".to_vec())));
        let freed = t.elapsed();
        assert!(
            freed >= Duration::from_millis(900) && freed < Duration::from_secs(4),
            "{freed:?}"
        );
        // and A was closed with its answers unread
        assert!(closed_within(&mut a, Duration::from_secs(5)));
    }

    #[test]
    fn no_connection_outlives_its_lifetime() {
        let limits = Limits {
            connection_lifetime: Duration::from_millis(500),
            ..SHORT
        };
        let addr = start(limits, "m 1\n", Duration::ZERO);
        let mut s = connect(addr);
        let t = Instant::now();
        let mut answered = 0;
        while t.elapsed() < Duration::from_secs(5) {
            if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                .is_err()
                || answer(&mut s).is_none()
            {
                break;
            }
            answered += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        let lived = t.elapsed();
        assert!(answered >= 3, "{answered}");
        assert!(
            lived >= Duration::from_millis(450) && lived < Duration::from_secs(2),
            "{lived:?}"
        );
    }

    #[test]
    fn a_slow_scrape_never_delays_healthz() {
        let addr = start(SHORT, "m 1\n", Duration::from_secs(3));
        let scrape = std::thread::spawn(move || get(addr, "/metrics"));
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..10 {
            let t = Instant::now();
            assert_eq!(get(addr, "/healthz"), Some((200, b"ok\n".to_vec())));
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        }
        assert_eq!(scrape.join().unwrap(), Some((200, b"m 1\n".to_vec())));
    }

    /// Env of the load child: the exporter's address and how long to run.
    const LOAD_ADDR: &str = "GQ_EXPORTER_LOAD_ADDR";
    const LOAD_SECS: &str = "GQ_EXPORTER_LOAD_SECS";

    /// The abusive local user (run by the test below as uid 65534): 70
    /// connections, one `GET /healthz` on each every 3 s, and a connection
    /// that is refused or cut is opened again at once. Prints what it got.
    #[test]
    #[ignore = "the load child of one_local_user_cycling_70_connections_leaves_healthz_answered"]
    fn load_child() {
        let Ok(addr) = std::env::var(LOAD_ADDR) else {
            return;
        };
        let addr: SocketAddr = addr.parse().unwrap();
        let secs: u64 = std::env::var(LOAD_SECS).unwrap().parse().unwrap();
        let until = Instant::now() + Duration::from_secs(secs);
        let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let threads: Vec<_> = (0..70)
            .map(|_| {
                let (answered, refused) = (answered.clone(), refused.clone());
                std::thread::spawn(move || {
                    use std::sync::atomic::Ordering::Relaxed;
                    while Instant::now() < until {
                        let Ok(mut s) = TcpStream::connect(addr) else {
                            refused.fetch_add(1, Relaxed);
                            continue;
                        };
                        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        while Instant::now() < until {
                            let ok = s
                                .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                                .is_ok()
                                && answer(&mut s).is_some_and(|a| a.0 == 200);
                            if !ok {
                                refused.fetch_add(1, Relaxed);
                                break;
                            }
                            answered.fetch_add(1, Relaxed);
                            std::thread::sleep(Duration::from_secs(3));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        println!(
            "load: answered {} refused {}",
            answered.load(std::sync::atomic::Ordering::Relaxed),
            refused.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    /// The acceptance under abuse: while another local user (uid 65534)
    /// cycles 70 connections, fresh `/healthz` probes from this one (root)
    /// are answered 200 within 100 ms, at least 99 % of them. 12 s of load
    /// by default; GQ_EXPORTER_LOAD_SECS=60 is the full minute.
    /// Needs root (to start the load as another uid).
    #[test]
    fn one_local_user_cycling_70_connections_leaves_healthz_answered() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to run the load as uid 65534");
            return;
        }
        use std::os::unix::process::CommandExt;
        let secs: u64 = std::env::var(LOAD_SECS)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(12);
        let addr = start(LIMITS, "m 1\n", Duration::ZERO);
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "metrics_server::tests::load_child",
                "--ignored",
                "--nocapture",
            ])
            .env(LOAD_ADDR, addr.to_string())
            .env(LOAD_SECS, secs.to_string())
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // the load has taken what it can
        std::thread::sleep(Duration::from_secs(1));
        let t = Instant::now();
        let (mut n, mut good, mut worst) = (0, 0, Duration::ZERO);
        while t.elapsed() + Duration::from_secs(2) < Duration::from_secs(secs) {
            let p = Instant::now();
            let ok = get(addr, "/healthz").is_some_and(|a| a.0 == 200);
            let took = p.elapsed();
            n += 1;
            if ok && took < Duration::from_millis(100) {
                good += 1;
            }
            worst = worst.max(took);
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let load = String::from_utf8_lossy(&out.stdout);
        let load = load.lines().find(|l| l.starts_with("load:")).unwrap_or("");
        eprintln!("{secs} s: {good} of {n} /healthz within 100 ms (slowest {worst:?}); {load}");
        // the load bit: it was refused or cut, and served too
        let nums: Vec<u64> = load
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(nums.len() == 2 && nums[0] > 0 && nums[1] > 0, "{load:?}");
        assert!(n >= 50, "{n} probes");
        assert!(good * 100 >= n * 99, "{good} of {n} within 100 ms");
    }
}
