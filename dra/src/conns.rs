//! What bounds the connections of the driver's two sockets (registration
//! and DRA): a cap per socket, a handshake deadline, an idle deadline, and a
//! bound on the work one header block can ask for.
//!
//! tonic serves whatever its incoming stream yields and nothing else:
//! its own accept loop retries a failed accept at once (EMFILE makes it
//! spin), and it sets no deadline on a connection that never speaks. So the
//! daemon accepts here and hands tonic [`Guarded`] connections:
//!
//! - At most [`Limits::max_connections`] live connections per socket. The
//!   one over it is accepted and a victim closed instead: the oldest
//!   connection that has not sent a request, from the peer process holding
//!   the most; only when every connection has sent one, the busiest peer's
//!   oldest. Refusing the newcomer would let whoever filled the socket
//!   first keep it; evicting the idle ones means the kubelet, which dials
//!   and sends its request at once, is served however many idle
//!   connections another process opens (a flood that fills the socket
//!   between the kubelet's dial and its first HEADERS can still evict it:
//!   it retries).
//! - Descriptors: an evicted connection keeps its descriptor until its task
//!   runs; accepting stops while a socket holds twice the cap, so a socket
//!   never holds more than that many descriptors.
//! - The client preface and a complete SETTINGS frame within
//!   [`Limits::handshake`]; after that, a connection with no progress in
//!   either direction for [`Limits::idle`] is closed (the health stream
//!   writes every third of its timeout, so it never looks idle).
//! - More than [`Limits::max_continuations`] CONTINUATION frames in one
//!   header block closes the connection: empty ones add no bytes, so no
//!   byte bound would ever end them.
//! - The kernel's accept queue is as long as the cap, so a new dial waits
//!   behind at most that many connections.
//! - A failed accept (out of descriptors) waits before the next try.
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};
use tokio::time::{Instant, Sleep};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Live connections per socket.
    pub max_connections: usize,
    /// The client preface and its SETTINGS frame must arrive within this.
    pub handshake: Duration,
    /// A connection with no progress either way for this long is closed.
    pub idle: Duration,
    /// CONTINUATION frames allowed in one header block.
    pub max_continuations: usize,
}

pub const LIMITS: Limits = Limits {
    max_connections: 64,
    handshake: Duration::from_secs(5),
    idle: Duration::from_secs(300),
    max_continuations: 16,
};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: u8 = 0x4;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// One live connection as the socket's table sees it.
struct Slot {
    id: u64,
    /// The peer's pid (SO_PEERCRED; 0 when unknown).
    pid: i32,
    requested: AtomicBool,
    evicted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Slot {
    fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }
}

/// One socket's connections.
pub struct Gate {
    what: &'static str,
    limits: Limits,
    /// In accept order: the oldest first.
    slots: Mutex<Vec<Arc<Slot>>>,
    freed: Notify,
    next_id: AtomicU64,
}

impl Gate {
    pub fn new(what: &'static str, limits: Limits) -> Arc<Gate> {
        Arc::new(Gate {
            what,
            limits,
            slots: Mutex::new(Vec::new()),
            freed: Notify::new(),
            next_id: AtomicU64::new(0),
        })
    }

    /// Connections whose descriptor is still open (evicted ones included).
    pub fn open(&self) -> usize {
        self.slots.lock().unwrap().len()
    }

    fn admit(&self, pid: i32) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap();
        let live: Vec<&Arc<Slot>> = slots
            .iter()
            .filter(|s| !s.evicted.load(Ordering::SeqCst))
            .collect();
        if live.len() >= self.limits.max_connections {
            let held = |pid: i32| live.iter().filter(|s| s.pid == pid).count();
            // no request first, then the busiest peer, then the oldest
            if let Some(v) = live.iter().min_by_key(|s| {
                (
                    s.requested.load(Ordering::SeqCst),
                    std::cmp::Reverse(held(s.pid)),
                    s.id,
                )
            }) {
                tracing::debug!(
                    "{} socket: {} connections; closing one of pid {}",
                    self.what,
                    live.len(),
                    v.pid
                );
                v.evict();
            }
        }
        let slot = Arc::new(Slot {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            pid,
            requested: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        slots.push(slot.clone());
        slot
    }

    fn remove(&self, id: u64) {
        self.slots.lock().unwrap().retain(|s| s.id != id);
        self.freed.notify_one();
    }
}

/// Accept on `listener` for as long as the returned stream is held; every
/// connection comes guarded by `gate`.
pub fn incoming(
    listener: UnixListener,
    gate: Arc<Gate>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Guarded<UnixStream>>> {
    // The kernel's accept queue is served in order: a kubelet that dials
    // behind a thousand queued connections waits for all of them to be
    // accepted (and evicted). A queue as long as the cap bounds that wait;
    // a client beyond it waits in connect() instead. (listen() again on a
    // listening socket only changes its backlog.)
    // SAFETY: a plain syscall on a descriptor the listener owns.
    unsafe {
        libc::listen(
            std::os::fd::AsRawFd::as_raw_fd(&listener),
            gate.limits.max_connections.min(i32::MAX as usize) as i32,
        )
    };
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut warned = false;
        loop {
            // the descriptor bound: wait for evicted connections to close
            loop {
                let freed = gate.freed.notified();
                if gate.open() < 2 * gate.limits.max_connections {
                    break;
                }
                tokio::select! {
                    _ = freed => {}
                    _ = tx.closed() => return,
                }
            }
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        if !warned {
                            tracing::warn!("{} socket: cannot accept: {e}", gate.what);
                            warned = true;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = tx.closed() => return,
            };
            warned = false;
            let pid = stream.peer_cred().ok().and_then(|c| c.pid()).unwrap_or(0);
            let g = Guarded::new(stream, gate.clone(), pid);
            if tx.send(Ok(g)).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Where the client's byte stream is, as far as the bounds need to know.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// This many preface bytes matched.
    Preface(usize),
    /// Collecting a frame header (`have` bytes of 9).
    Head(usize),
    /// Payload bytes of the current frame still to come.
    Payload(usize),
}

/// The client's frames, followed without copying payloads.
struct Frames {
    phase: Phase,
    head: [u8; 9],
    /// The first frame after the preface (SETTINGS) has been read whole.
    handshaken: bool,
    /// The current frame is the first one.
    first: bool,
    /// CONTINUATION frames in the current header block.
    continuations: usize,
    in_block: bool,
    max_continuations: usize,
}

#[derive(Debug, thiserror::Error)]
enum FrameError {
    #[error("not an HTTP/2 client preface")]
    Preface,
    #[error("the first frame is not SETTINGS")]
    NotSettings,
    #[error("over {0} CONTINUATION frames in one header block")]
    Continuations(usize),
}

impl Frames {
    fn new(max_continuations: usize) -> Frames {
        Frames {
            phase: Phase::Preface(0),
            head: [0; 9],
            handshaken: false,
            first: true,
            continuations: 0,
            in_block: false,
            max_continuations,
        }
    }

    /// Follow `input`; Ok(true) when it holds a request (a HEADERS frame).
    fn feed(&mut self, mut input: &[u8]) -> Result<bool, FrameError> {
        let mut request = false;
        while !input.is_empty() {
            match self.phase {
                Phase::Preface(n) => {
                    let k = (PREFACE.len() - n).min(input.len());
                    if input[..k] != PREFACE[n..n + k] {
                        return Err(FrameError::Preface);
                    }
                    input = &input[k..];
                    self.phase = if n + k == PREFACE.len() {
                        Phase::Head(0)
                    } else {
                        Phase::Preface(n + k)
                    };
                }
                Phase::Head(have) => {
                    let k = (9 - have).min(input.len());
                    self.head[have..have + k].copy_from_slice(&input[..k]);
                    input = &input[k..];
                    if have + k < 9 {
                        self.phase = Phase::Head(have + k);
                        continue;
                    }
                    let h = self.head;
                    let len = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    let (kind, flags) = (h[3], h[4]);
                    if self.first && kind != SETTINGS {
                        return Err(FrameError::NotSettings);
                    }
                    match kind {
                        HEADERS => {
                            request = true;
                            self.continuations = 0;
                            self.in_block = flags & END_HEADERS == 0;
                        }
                        CONTINUATION if self.in_block => {
                            self.continuations += 1;
                            if self.continuations > self.max_continuations {
                                return Err(FrameError::Continuations(self.max_continuations));
                            }
                            self.in_block = flags & END_HEADERS == 0;
                        }
                        _ => {}
                    }
                    self.phase = Phase::Payload(len);
                    if len == 0 {
                        self.frame_done();
                    }
                }
                Phase::Payload(left) => {
                    let k = left.min(input.len());
                    input = &input[k..];
                    self.phase = Phase::Payload(left - k);
                    if left == k {
                        self.frame_done();
                    }
                }
            }
        }
        Ok(request)
    }

    fn frame_done(&mut self) {
        if self.first {
            self.first = false;
            self.handshaken = true;
        }
        self.phase = Phase::Head(0);
    }
}

/// A served connection under its socket's bounds: reads and writes fail
/// once it is evicted or past its deadline, which makes hyper close it.
pub struct Guarded<S> {
    io: S,
    gate: Arc<Gate>,
    slot: Arc<Slot>,
    frames: Frames,
    accepted: Instant,
    /// The last progress in either direction.
    last: Instant,
    timer: Pin<Box<Sleep>>,
    armed: Instant,
    /// A bound was crossed: every later call fails too.
    failed: bool,
}

impl<S> Guarded<S> {
    fn new(io: S, gate: Arc<Gate>, pid: i32) -> Guarded<S> {
        let slot = gate.admit(pid);
        let now = Instant::now();
        let armed = now + gate.limits.handshake;
        Guarded {
            io,
            frames: Frames::new(gate.limits.max_continuations),
            gate,
            slot,
            accepted: now,
            last: now,
            timer: Box::pin(tokio::time::sleep_until(armed)),
            armed,
            failed: false,
        }
    }

    fn deadline(&self) -> Instant {
        if self.frames.handshaken {
            self.last + self.gate.limits.idle
        } else {
            self.accepted + self.gate.limits.handshake
        }
    }

    fn fail(&mut self, kind: io::ErrorKind, why: String) -> io::Error {
        if !self.failed {
            tracing::debug!("{} socket: {why}; connection closed", self.gate.what);
        }
        self.failed = true;
        io::Error::new(kind, why)
    }

    /// Before any I/O: evicted or already failed.
    fn closed(&mut self, cx: &Context<'_>) -> Option<io::Error> {
        if self.failed {
            return Some(io::ErrorKind::ConnectionAborted.into());
        }
        if self.slot.evicted.load(Ordering::SeqCst) {
            return Some(self.fail(
                io::ErrorKind::ConnectionAborted,
                "over the connection cap".into(),
            ));
        }
        let mut w = self.slot.waker.lock().unwrap();
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
        None
    }

    /// The I/O is pending: fail past the deadline, else wake at it.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        loop {
            let d = self.deadline();
            if Instant::now() >= d {
                let why = if self.frames.handshaken {
                    format!("idle for {:?}", self.gate.limits.idle)
                } else {
                    format!("no handshake within {:?}", self.gate.limits.handshake)
                };
                return Poll::Ready(Err(self.fail(io::ErrorKind::TimedOut, why)));
            }
            if d != self.armed {
                self.armed = d;
                self.timer.as_mut().reset(d);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // the deadline passed since the check: check again
                Poll::Ready(()) => continue,
            }
        }
    }

    fn wrote<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.last = Instant::now();
                Poll::Ready(r)
            }
            Poll::Pending => self.pending(cx),
        }
    }
}

impl<S> Drop for Guarded<S> {
    fn drop(&mut self) {
        self.gate.remove(self.slot.id);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(e) = me.closed(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        match Pin::new(&mut me.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                if !new.is_empty() {
                    me.last = Instant::now();
                    match me.frames.feed(new) {
                        Ok(true) => me.slot.requested.store(true, Ordering::SeqCst),
                        Ok(false) => {}
                        Err(e) => {
                            return Poll::Ready(Err(
                                me.fail(io::ErrorKind::InvalidData, e.to_string())
                            ))
                        }
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => me.pending(cx),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if let Some(e) = me.closed(cx) {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut me.io).poll_write(cx, buf);
        me.wrote(cx, r)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if let Some(e) = me.closed(cx) {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        me.wrote(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(e) = me.closed(cx) {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut me.io).poll_flush(cx);
        me.wrote(cx, r)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Guarded<S> {
    type ConnectInfo = S::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let n = payload.len() as u32;
        let mut f = vec![
            (n >> 16) as u8,
            (n >> 8) as u8,
            n as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn the_handshake_is_the_preface_and_a_whole_settings_frame_byte_by_byte() {
        let mut f = Frames::new(4);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(SETTINGS, 0, &[0, 3, 0, 0, 0, 100]));
        let (last, rest) = bytes.split_last().unwrap();
        for b in rest {
            assert!(!f.feed(&[*b]).unwrap());
        }
        assert!(!f.handshaken);
        f.feed(&[*last]).unwrap();
        assert!(f.handshaken);
        assert!(f.feed(&frame(HEADERS, END_HEADERS, b"x")).unwrap());
    }

    #[test]
    fn a_wrong_preface_or_first_frame_fails() {
        assert!(matches!(
            Frames::new(4).feed(b"GET / HTTP/1.1\r\n"),
            Err(FrameError::Preface)
        ));
        let mut b = PREFACE.to_vec();
        b.extend(frame(HEADERS, END_HEADERS, b"x"));
        assert!(matches!(
            Frames::new(4).feed(&b),
            Err(FrameError::NotSettings)
        ));
    }

    #[test]
    fn continuations_are_counted_per_header_block() {
        let mut f = Frames::new(2);
        let mut b = PREFACE.to_vec();
        b.extend(frame(SETTINGS, 0, &[]));
        f.feed(&b).unwrap();
        // two blocks of two CONTINUATIONs each: within the bound
        for _ in 0..2 {
            f.feed(&frame(HEADERS, 0, b"a")).unwrap();
            f.feed(&frame(CONTINUATION, 0, &[])).unwrap();
            f.feed(&frame(CONTINUATION, END_HEADERS, b"b")).unwrap();
        }
        // a third in one block: over it, though all are empty
        f.feed(&frame(HEADERS, 0, b"a")).unwrap();
        f.feed(&frame(CONTINUATION, 0, &[])).unwrap();
        f.feed(&frame(CONTINUATION, 0, &[])).unwrap();
        assert!(matches!(
            f.feed(&frame(CONTINUATION, 0, &[])),
            Err(FrameError::Continuations(2))
        ));
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_idle_connection_of_the_busiest_peer_goes() {
        let g = Gate::new(
            "test",
            Limits {
                max_connections: 4,
                ..LIMITS
            },
        );
        let kubelet = g.admit(1);
        kubelet.requested.store(true, Ordering::SeqCst);
        let quiet = g.admit(2);
        let a1 = g.admit(3);
        let a2 = g.admit(3);
        // full: the new one evicts pid 3's oldest, not the older pid 2
        let _n = g.admit(4);
        assert!(a1.evicted.load(Ordering::SeqCst));
        assert!(!a2.evicted.load(Ordering::SeqCst) && !quiet.evicted.load(Ordering::SeqCst));
        // evicted ones still count as open until dropped
        assert_eq!(g.open(), 5);
        g.remove(a1.id);
        // ties (one each): the oldest without a request, never the kubelet's
        let _m = g.admit(5);
        assert!(quiet.evicted.load(Ordering::SeqCst) && !a2.evicted.load(Ordering::SeqCst));
        assert!(!kubelet.evicted.load(Ordering::SeqCst));
    }
}
