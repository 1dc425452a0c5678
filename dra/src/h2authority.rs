//! The registration socket's connection adapter: make the kubelet's
//! `:authority` acceptable to h2.
//!
//! The kubelet's plugin watcher dials the registration socket with
//! `grpc.DialContext(ctx, <socket path>, WithContextDialer(..))`, so
//! grpc-go sends the socket PATH as the HTTP/2 `:authority`. h2 (tonic's
//! server) refuses a request whose `:authority` does not parse as an
//! `http::uri::Authority` with RST_STREAM PROTOCOL_ERROR, and the kubelet
//! never registers the driver (kubernetes/kubernetes#108254,
//! hyperium/tonic#742). Rather than fork h2, the client→server bytes pass
//! through [`Rewriter`]: after the 24-byte preface it parses frames, and
//! for each header block (HEADERS + CONTINUATION) decodes the HPACK block
//! with the client's dynamic table (kept across blocks: grpc-go indexes
//! `:authority` on first use and refers to it by index afterwards),
//! replaces an `:authority` that h2 would refuse with `localhost`, and
//! re-encodes the block as literals without indexing (so h2's decoder
//! never needs a dynamic-table entry the client meant for the original
//! block) in one HEADERS frame (PADDED dropped, PRIORITY and END_STREAM
//! kept; CONTINUATION frames only if the block exceeds h2's 16 KiB frame
//! size). Every other frame passes through byte for byte, streamed, never
//! buffered; the server→client direction is not touched.
//!
//! Bounds (the registration socket is mode 0600, but the bytes are still
//! parsed by root): a header block over [`MAX_BLOCK`] bytes, a decoded
//! header list over [`MAX_DECODED`] bytes, a dynamic-table size update
//! above h2's advertised 4096, an HPACK error, or another frame inside a
//! header block closes the connection. Memory per connection: one read
//! buffer, one header block, the 4 KiB dynamic table and the rewritten
//! block.
//!
//! HPACK decoding is `loona-hpack` (maintained, the successor of
//! `fluke-hpack`; decodes Huffman strings and dynamic-table size updates,
//! bounds the table with `set_max_allowed_table_size`, and adds no
//! dependency the workspace does not already have); `hpack` 0.3 is
//! unmaintained since 2016. The encoder is the few lines below: literals
//! need no table.
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The HTTP/2 client connection preface.
pub const PREFACE_LEN: usize = 24;
/// The largest header block (all its HEADERS + CONTINUATION payloads,
/// padding included) accepted.
pub const MAX_BLOCK: usize = 64 << 10;
/// The largest decoded header list (RFC 7541 sizes: name + value + 32 per
/// field) accepted: bounds what indexed references can amplify a block to.
pub const MAX_DECODED: usize = 256 << 10;
/// h2's SETTINGS_HEADER_TABLE_SIZE (its default; tonic does not change
/// it): the client's encoder may not use a larger table.
const MAX_TABLE: usize = 4096;
/// h2's SETTINGS_MAX_FRAME_SIZE (its default; tonic does not change it).
const MAX_FRAME_OUT: usize = 16_384;

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

#[derive(Debug, thiserror::Error)]
pub enum AdaptError {
    #[error("header block over {MAX_BLOCK} bytes")]
    BlockTooLarge,
    #[error("decoded header list over {MAX_DECODED} bytes")]
    ListTooLarge,
    #[error("cannot decode the header block: {0}")]
    Hpack(String),
    #[error("malformed HEADERS frame: {0}")]
    Malformed(&'static str),
    #[error("frame of type {0} inside a header block")]
    Interleaved(u8),
}

enum State {
    /// Preface bytes still to pass through.
    Preface(usize),
    /// Collecting the 9-byte frame header.
    FrameHeader,
    /// Payload bytes of a frame we do not touch still to pass through.
    Pass(usize),
    /// Collecting a HEADERS / CONTINUATION payload of `len` bytes.
    Collect {
        len: usize,
        kind: u8,
        flags: u8,
        stream: u32,
    },
}

/// A header block waiting for its END_HEADERS.
struct Pending {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    block: Vec<u8>,
}

/// The client→server rewriter of one connection.
pub struct Rewriter {
    state: State,
    head: Vec<u8>,
    payload: Vec<u8>,
    pending: Option<Pending>,
    decoder: loona_hpack::Decoder<'static>,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(MAX_TABLE);
        Rewriter {
            state: State::Preface(PREFACE_LEN),
            head: Vec::with_capacity(9),
            payload: Vec::new(),
            pending: None,
            decoder,
        }
    }
}

/// Whether h2 accepts `v` as `:authority`.
fn valid_authority(v: &[u8]) -> bool {
    http::uri::Authority::try_from(v).is_ok()
}

fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u8, value: usize) {
    // writing to a Vec cannot fail
    let _ = loona_hpack::encoder::encode_integer_into(value, prefix, first, out);
}

fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

impl Rewriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Take the client's bytes `input`; append what goes to the server to
    /// `out`. An error: close the connection.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), AdaptError> {
        while !input.is_empty() {
            match self.state {
                State::Preface(left) | State::Pass(left) => {
                    let n = left.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = match self.state {
                        State::Preface(_) if left > n => State::Preface(left - n),
                        State::Pass(_) if left > n => State::Pass(left - n),
                        _ => State::FrameHeader,
                    };
                }
                State::FrameHeader => {
                    let n = (9 - self.head.len()).min(input.len());
                    self.head.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.head.len() == 9 {
                        self.frame_header(out)?;
                    }
                }
                State::Collect { len, .. } => {
                    let n = (len - self.payload.len()).min(input.len());
                    self.payload.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.payload.len() == len {
                        self.collected(out)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn frame_header(&mut self, out: &mut Vec<u8>) -> Result<(), AdaptError> {
        let h = &self.head;
        // 24 bits: never above the spec's 16 MiB maximum
        let len = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let ours = match &self.pending {
            Some(_) if kind != CONTINUATION => return Err(AdaptError::Interleaved(kind)),
            Some(p) if stream != p.stream => {
                return Err(AdaptError::Malformed("CONTINUATION on another stream"))
            }
            Some(p) => p.block.len() + len > MAX_BLOCK,
            None => kind == HEADERS && len > MAX_BLOCK,
        };
        if ours {
            return Err(AdaptError::BlockTooLarge);
        }
        if kind == HEADERS || self.pending.is_some() {
            self.head.clear();
            self.payload.clear();
            self.state = State::Collect {
                len,
                kind,
                flags,
                stream,
            };
            if len == 0 {
                self.collected(out)?;
            }
        } else {
            // not a header block (a stray CONTINUATION too: h2 refuses it)
            out.extend_from_slice(&self.head);
            self.head.clear();
            self.state = if len == 0 {
                State::FrameHeader
            } else {
                State::Pass(len)
            };
        }
        Ok(())
    }

    /// A HEADERS or CONTINUATION payload is complete.
    fn collected(&mut self, out: &mut Vec<u8>) -> Result<(), AdaptError> {
        let State::Collect {
            kind,
            flags,
            stream,
            ..
        } = self.state
        else {
            unreachable!("collected outside Collect")
        };
        self.state = State::FrameHeader;
        let p = std::mem::take(&mut self.payload);
        if kind == HEADERS {
            let mut rest = &p[..];
            if flags & PADDED != 0 {
                let (&pad, r) = rest
                    .split_first()
                    .ok_or(AdaptError::Malformed("PADDED without a pad length"))?;
                if pad as usize > r.len() {
                    return Err(AdaptError::Malformed("padding longer than the frame"));
                }
                rest = &r[..r.len() - pad as usize];
            }
            let priority = if flags & PRIORITY != 0 {
                if rest.len() < 5 {
                    return Err(AdaptError::Malformed("PRIORITY without its 5 bytes"));
                }
                let (pr, r) = rest.split_at(5);
                rest = r;
                Some(pr.try_into().expect("5 bytes"))
            } else {
                None
            };
            self.pending = Some(Pending {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                block: rest.to_vec(),
            });
        } else if let Some(pend) = &mut self.pending {
            pend.block.extend_from_slice(&p);
        }
        self.payload = p;
        self.payload.clear();
        if flags & END_HEADERS != 0 {
            let pend = self.pending.take().expect("a header block");
            self.emit(pend, out)?;
        }
        Ok(())
    }

    /// Decode, rewrite and re-encode one header block; append its frames.
    fn emit(&mut self, pend: Pending, out: &mut Vec<u8>) -> Result<(), AdaptError> {
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut size = 0usize;
        self.decoder
            .decode_with_cb(&pend.block, |n, v| {
                size = size.saturating_add(n.len() + v.len() + 32);
                // past the bound: keep decoding (the table must stay in
                // step, and the work is bounded by the block) but copy nothing
                if size <= MAX_DECODED {
                    fields.push((n.into_owned(), v.into_owned()));
                }
            })
            .map_err(|e| AdaptError::Hpack(e.to_string()))?;
        if size > MAX_DECODED {
            return Err(AdaptError::ListTooLarge);
        }
        let mut payload = Vec::with_capacity(size + 5);
        if let Some(pr) = pend.priority {
            payload.extend_from_slice(&pr);
        }
        for (n, v) in &fields {
            let v: &[u8] = if n == b":authority" && !valid_authority(v) {
                tracing::debug!(
                    "registration socket: :authority {:?} replaced by localhost",
                    String::from_utf8_lossy(v)
                );
                b"localhost"
            } else {
                v
            };
            // literal header field without indexing, new name (RFC 7541 6.2.2)
            payload.push(0x00);
            hpack_string(&mut payload, n);
            hpack_string(&mut payload, v);
        }
        let mut flags = if pend.end_stream { END_STREAM } else { 0 };
        if pend.priority.is_some() {
            flags |= PRIORITY;
        }
        let mut chunks = payload.chunks(MAX_FRAME_OUT).peekable();
        let mut kind = HEADERS;
        if chunks.peek().is_none() {
            frame_head(out, 0, HEADERS, flags | END_HEADERS, pend.stream);
        }
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            let f = flags | if last { END_HEADERS } else { 0 };
            frame_head(out, c.len(), kind, f, pend.stream);
            out.extend_from_slice(c);
            kind = CONTINUATION;
            flags = 0;
        }
        Ok(())
    }
}

/// A server connection whose client→server bytes pass through a
/// [`Rewriter`]; writes pass straight to the socket.
pub struct Adapted<S> {
    inner: S,
    rw: Rewriter,
    out: Vec<u8>,
    pos: usize,
    read_buf: Box<[u8]>,
}

impl<S> Adapted<S> {
    pub fn new(inner: S) -> Self {
        Adapted {
            inner,
            rw: Rewriter::new(),
            out: Vec::new(),
            pos: 0,
            read_buf: vec![0; 16 << 10].into_boxed_slice(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Adapted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.pos < me.out.len() {
                let n = buf.remaining().min(me.out.len() - me.pos);
                buf.put_slice(&me.out[me.pos..me.pos + n]);
                me.pos += n;
                if me.pos == me.out.len() {
                    me.out.clear();
                    me.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut me.read_buf);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Err(e) = me.rw.feed(rb.filled(), &mut me.out) {
                tracing::warn!("registration socket: {e}; connection closed");
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Adapted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Adapted<S> {
    type ConnectInfo = S::ConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
