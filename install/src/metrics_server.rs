//! `gpu-quota metrics --listen ADDR`: the exposition over HTTP for
//! Prometheus. `GET /metrics` renders a fresh snapshot per scrape,
//! `GET /healthz` answers `ok`; anything else is 404 (405 for other
//! methods). Binds exactly the address given.
//!
//! A scrape target must answer every client within bounds, whatever the
//! others do (issue 16): hyper's HTTP/1 server on a single-threaded tokio
//! runtime, every connection its own task, with the limits of [`LIMITS`]
//! (docs/security.md, "The metrics exporter"). A client that pipelines and
//! never reads blocks only its own connection until the write timeout; a
//! header over the cap is answered 431 and the connection closed; scrapes
//! render off the runtime thread, one at a time, so a slow render never
//! delays `/healthz`.
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
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Sleep;

/// What bounds the exporter's work per client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; one more is closed at once (after a
    /// best-effort 503).
    pub max_connections: usize,
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
        let conns = Arc::new(Semaphore::new(limits.max_connections));
        let renders = Arc::new(Semaphore::new(1));
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                // out of descriptors or memory, or an aborted handshake:
                // nothing to answer; do not spin
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = conns.clone().try_acquire_owned() else {
                let _ = stream.try_write(BUSY);
                continue;
            };
            let (scrape, renders) = (scrape.clone(), renders.clone());
            tokio::spawn(async move {
                let _permit = permit;
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
                // past the lifetime the connection is dropped, which closes it
                let _ = tokio::time::timeout(limits.connection_lifetime, conn).await;
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
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n", PLAIN));
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
    r.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ctype));
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
    fn check<T>(&mut self, cx: &mut TaskContext<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
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
