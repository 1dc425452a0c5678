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
//! header block closes the connection. A block of endless empty CONTINUATION
//! frames never reaches a byte bound: the connection under the adapter
//! (`conns::Guarded`) counts them. Memory per connection: one read
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
    /// A bound was crossed: every later read fails too.
    failed: bool,
}

impl<S> Adapted<S> {
    pub fn new(inner: S) -> Self {
        Adapted {
            inner,
            rw: Rewriter::new(),
            out: Vec::new(),
            pos: 0,
            read_buf: vec![0; 16 << 10].into_boxed_slice(),
            failed: false,
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
            if me.failed {
                return Poll::Ready(Err(io::ErrorKind::InvalidData.into()));
            }
            let mut rb = ReadBuf::new(&mut me.read_buf);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Err(e) = me.rw.feed(rb.filled(), &mut me.out) {
                me.failed = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/var/lib/kubelet/plugins_registry/x-reg.sock";
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // GetInfo's header blocks exactly as golang.org/x/net/http2/hpack (the
    // kubelet's vendored copy) encodes them on one connection, :authority
    // = PATH: literals with incremental indexing, Huffman-coded ...
    const GO_FIRST: &str = "8386459c62ba2d98d558598c84d83498f52fb4b31909b06931ea63115392a94f41a063b8ec628346c75b632d054b15d16cc6a91158598c84d9e98f2b58599741c9d75f8b1d75d0620d263d4c4d65647a8a9acac8b4c7602bba25c340027465864d833505b11f";
    // ... then the same fields as dynamic-table references ...
    const GO_SECOND: &str = "8386c2c1c0bfbe";
    // ... then a request with :authority localhost (a new literal)
    const GO_LOCALHOST: &str = "8386c24186a0e41d139d09c1c0bf";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        frame_head(&mut f, payload.len(), kind, flags, stream);
        f.extend_from_slice(payload);
        f
    }

    /// Feed `input` after the preface in chunks of `step` bytes.
    fn run_in(input: &[u8], step: usize) -> Result<Vec<u8>, AdaptError> {
        let mut rw = Rewriter::new();
        let mut out = Vec::new();
        let mut all = PREFACE.to_vec();
        all.extend_from_slice(input);
        for c in all.chunks(step) {
            rw.feed(c, &mut out)?;
        }
        assert_eq!(&out[..24], PREFACE, "the preface passes through");
        Ok(out[24..].to_vec())
    }

    fn run(input: &[u8]) -> Result<Vec<u8>, AdaptError> {
        run_in(input, usize::MAX)
    }

    type Frame = (u8, u8, u32, Vec<u8>);

    fn frames(mut b: &[u8]) -> Vec<Frame> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let len = (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize;
            let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
            v.push((b[3], b[4], stream, b[9..9 + len].to_vec()));
            b = &b[9 + len..];
        }
        v
    }

    /// Decode a rewritten block with a FRESH decoder, as if it were the
    /// first block on the connection: proves it needs no dynamic table.
    fn fields(block: &[u8]) -> Vec<(String, String)> {
        let mut d = loona_hpack::Decoder::new();
        d.decode(block)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    fn authority(f: &[(String, String)]) -> &str {
        &f.iter().find(|(n, _)| n == ":authority").unwrap().1
    }

    fn grpc_go_fields(authority: &str) -> Vec<(String, String)> {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/pluginregistration.Registration/GetInfo"),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("user-agent", "grpc-go/1.72.1"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn grpc_go_blocks_huffman_and_dynamic_index_get_localhost() {
        let mut input = frame(HEADERS, END_HEADERS, 1, &unhex(GO_FIRST));
        input.extend(frame(HEADERS, END_HEADERS, 3, &unhex(GO_SECOND)));
        input.extend(frame(HEADERS, END_HEADERS, 5, &unhex(GO_LOCALHOST)));
        let out = frames(&run(&input).unwrap());
        assert_eq!(out.len(), 3);
        for (i, (kind, flags, stream, p)) in out.iter().enumerate() {
            assert_eq!(
                (*kind, *flags, *stream),
                (HEADERS, END_HEADERS, 2 * i as u32 + 1)
            );
            assert_eq!(fields(p), grpc_go_fields("localhost"), "block {i}");
        }
    }

    #[test]
    fn raw_literal_authority_is_rewritten_and_the_table_stays_in_step() {
        // 0x41: literal with incremental indexing, name :authority; raw value
        let mut b = vec![0x83, 0x86, 0x41, PATH.len() as u8];
        b.extend_from_slice(PATH.as_bytes());
        let mut input = frame(HEADERS, END_HEADERS | END_STREAM, 1, &b);
        // 0xbe: dynamic index 62, the entry just added
        input.extend(frame(HEADERS, END_HEADERS, 3, &[0x83, 0x86, 0xbe]));
        let out = frames(&run(&input).unwrap());
        assert_eq!(out[0].1, END_HEADERS | END_STREAM, "END_STREAM kept");
        assert_eq!(authority(&fields(&out[0].3)), "localhost");
        assert_eq!(authority(&fields(&out[1].3)), "localhost");
    }

    #[test]
    fn a_valid_authority_is_left_alone() {
        for a in ["localhost", "[::]:0", "vram.example:8443", "10.0.0.1"] {
            let mut b = vec![0x83, 0x86, 0x41, a.len() as u8];
            b.extend_from_slice(a.as_bytes());
            let out = frames(&run(&frame(HEADERS, END_HEADERS, 1, &b)).unwrap());
            assert_eq!(authority(&fields(&out[0].3)), a);
        }
        // and the other fields are kept, in order, as they were
        let out = frames(&run(&frame(HEADERS, END_HEADERS, 1, &unhex(GO_FIRST))).unwrap());
        let mut want = grpc_go_fields("localhost");
        let got = fields(&out[0].3);
        want[3].1 = "localhost".into();
        assert_eq!(got, want);
    }

    #[test]
    fn continuation_frames_become_one_headers_frame() {
        let b = unhex(GO_FIRST);
        let mut input = frame(HEADERS, END_STREAM, 1, &b[..10]);
        input.extend(frame(CONTINUATION, 0, 1, &b[10..40]));
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &b[40..]));
        let out = frames(&run(&input).unwrap());
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].0, out[0].1), (HEADERS, END_HEADERS | END_STREAM));
        assert_eq!(fields(&out[0].3), grpc_go_fields("localhost"));
        // another frame inside a header block: refused
        let mut bad = frame(HEADERS, 0, 1, &b[..10]);
        bad.extend(frame(0x8, 0, 0, &[0, 0, 0, 1]));
        assert!(matches!(run(&bad), Err(AdaptError::Interleaved(0x8))));
        let mut bad = frame(HEADERS, 0, 1, &b[..10]);
        bad.extend(frame(CONTINUATION, END_HEADERS, 3, &b[10..]));
        assert!(matches!(run(&bad), Err(AdaptError::Malformed(_))));
    }

    #[test]
    fn padding_is_dropped_and_priority_kept() {
        let b = unhex(GO_FIRST);
        let prio = [0x80, 0, 0, 0, 15];
        let mut p = vec![7];
        p.extend_from_slice(&prio);
        p.extend_from_slice(&b);
        p.extend_from_slice(&[0; 7]);
        let out = frames(&run(&frame(HEADERS, PADDED | PRIORITY | END_HEADERS, 1, &p)).unwrap());
        assert_eq!(out[0].1, PRIORITY | END_HEADERS, "PADDED dropped");
        assert_eq!(&out[0].3[..5], &prio);
        assert_eq!(fields(&out[0].3[5..]), grpc_go_fields("localhost"));
        // padding longer than the frame
        let bad = frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 0x83]);
        assert!(matches!(run(&bad), Err(AdaptError::Malformed(_))));
    }

    #[test]
    fn oversize_blocks_and_amplified_lists_are_refused() {
        // one HEADERS frame over the bound: refused on its frame header,
        // before its payload is read
        let mut head = Vec::new();
        frame_head(&mut head, MAX_BLOCK + 1, HEADERS, END_HEADERS, 1);
        assert!(matches!(run(&head), Err(AdaptError::BlockTooLarge)));
        // under the bound per frame, over it in CONTINUATIONs
        let mut input = frame(HEADERS, 0, 1, &vec![0x82; 40 << 10]);
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &vec![0x82; 30 << 10]));
        assert!(matches!(run(&input), Err(AdaptError::BlockTooLarge)));
        // a 4000-byte entry referenced 100 times: 400 kB decoded from 4 kB
        let mut b = vec![0x40];
        hpack_string(&mut b, b"x");
        hpack_string(&mut b, &vec![b'y'; 4000]);
        b.extend(std::iter::repeat_n(0xbe, 100));
        assert!(matches!(
            run(&frame(HEADERS, END_HEADERS, 1, &b)),
            Err(AdaptError::ListTooLarge)
        ));
        // a table size update above h2's 4096
        let mut b = Vec::new();
        hpack_int(&mut b, 0x20, 5, 1 << 20);
        b.push(0x82);
        assert!(matches!(
            run(&frame(HEADERS, END_HEADERS, 1, &b)),
            Err(AdaptError::Hpack(_))
        ));
    }

    #[test]
    fn a_frame_split_across_reads_gives_the_same_bytes() {
        let mut input = frame(0x4, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]);
        input.extend(frame(HEADERS, END_HEADERS, 1, &unhex(GO_FIRST)));
        input.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        input.extend(frame(HEADERS, END_HEADERS, 3, &unhex(GO_SECOND)));
        let whole = run(&input).unwrap();
        for step in [1, 2, 7, 9, 10, 100] {
            assert_eq!(run_in(&input, step).unwrap(), whole, "chunks of {step}");
        }
    }

    #[test]
    fn other_frames_pass_byte_for_byte() {
        let mut input = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        input.extend(frame(0x8, 0, 0, &[0, 1, 0, 0]));
        input.extend(frame(0x0, 0, 1, &vec![0xab; 100_000 - 1]));
        input.extend(frame(0x6, 0, 0, b"12345678"));
        input.extend(frame(0x0, END_STREAM, 1, &[]));
        assert_eq!(run_in(&input, 4096).unwrap(), input);
    }

    #[test]
    fn a_block_larger_than_h2s_frame_size_is_split_in_continuations() {
        // 80 fields of 500 bytes: 40 kB rewritten, over h2's 16 KiB frames
        let mut b = vec![0x83, 0x86];
        for i in 0..80 {
            b.push(0x00);
            hpack_string(&mut b, format!("x-{i}").as_bytes());
            hpack_string(&mut b, &[b'v'; 500]);
        }
        let out = frames(&run(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &b)).unwrap());
        let kinds: Vec<_> = out.iter().map(|f| (f.0, f.1)).collect();
        assert_eq!(
            kinds,
            [
                (HEADERS, END_STREAM),
                (CONTINUATION, 0),
                (CONTINUATION, END_HEADERS)
            ]
        );
        assert!(out.iter().all(|f| f.3.len() <= MAX_FRAME_OUT));
        let block: Vec<u8> = out.iter().flat_map(|f| f.3.clone()).collect();
        assert_eq!(fields(&block).len(), 82);
    }
}
