//! The `limits` file of a container's state directory (host:
//! `<state_dir>/containers/<dir>/limits`; container:
//! `/run/gpu-quota/limits`, read-only). One writer, [`write`] (the hook,
//! through core's state module), one reader, [`parse`] (libgpuquota.so).
//!
//! `key=value` lines; `#` starts a comment; white space around keys and
//! values is ignored; unknown keys and lines without `=` are ignored; a key
//! given twice: the last one counts.
//!
//! Version 2 carries no size: what the container may hold on each GPU is
//! its grant, in the `grant` file beside this one (the `grant` module), where
//! the host can change it while the container runs. (Version 1 wrote the
//! smallest slice as `vram_bytes` and one `gpu.<uuid>.vram_bytes` line per
//! GPU; the interceptor enforced the smallest on every GPU.)
//!
//! | key | value |
//! |---|---|
//! | `version` | [`VERSION`] |
//! | `container_id` | the runtime's container id (at most [`MAX_CONTAINER_ID`] bytes are kept) |
//! | `gpus` | comma-separated UUIDs of the reserved GPUs (at most [`MAX_GPUS`] are kept) |
//! | `context_overhead_bytes` | charge per process and GPU (absent = 0) |
//! | `consumer_group` | the container's tag in a usage file shared by the consumers of one DRA claim (absent = 0); see the usage slot's `group` |
use core::fmt;

pub const FILE_NAME: &str = "limits";
pub const VERSION: u32 = 2;
/// GPUs a limits file names (the usage header's device table).
pub const MAX_GPUS: usize = crate::usage::DEV_COUNT;
/// Bytes of `container_id` kept by the reader.
pub const MAX_CONTAINER_ID: usize = 64;

pub const KEY_VERSION: &str = "version";
pub const KEY_CONTAINER_ID: &str = "container_id";
pub const KEY_GPUS: &str = "gpus";
pub const KEY_CONTEXT_OVERHEAD_BYTES: &str = "context_overhead_bytes";
pub const KEY_CONSUMER_GROUP: &str = "consumer_group";

/// A value the reader could not take back as written: a line break or a
/// comment character (and, in a UUID, the list separator).
fn plain(v: &str, list: bool) -> fmt::Result {
    if v.bytes()
        .any(|b| b == b'\n' || b == b'\r' || b == b'#' || (list && b == b','))
        || v.trim() != v
    {
        return Err(fmt::Error);
    }
    Ok(())
}

/// Write the limits file of a reservation: its container id, its GPUs (by
/// UUID, in the grant's order) and the context charge. Fails
/// (`fmt::Error`, nothing meaningful written) when a value would not read
/// back as itself: a line break, `#`, white space at either end, or a `,`
/// in a UUID.
pub fn write<'a, W: fmt::Write, I>(
    w: &mut W,
    container_id: &str,
    gpus: I,
    context_overhead_bytes: u64,
) -> fmt::Result
where
    I: IntoIterator<Item = &'a str>,
{
    plain(container_id, false)?;
    w.write_str("# gpu-quota limits, written by gpu-quota-hook; read-only in the container\n")?;
    writeln!(w, "{KEY_VERSION}={VERSION}")?;
    writeln!(w, "{KEY_CONTAINER_ID}={container_id}")?;
    write!(w, "{KEY_GPUS}=")?;
    for (i, g) in gpus.into_iter().enumerate() {
        plain(g, true)?;
        if i > 0 {
            w.write_char(',')?;
        }
        w.write_str(g)?;
    }
    w.write_char('\n')?;
    if context_overhead_bytes > 0 {
        writeln!(w, "{KEY_CONTEXT_OVERHEAD_BYTES}={context_overhead_bytes}")?;
    }
    Ok(())
}

/// The `consumer_group` line (after [`write`]; 0 writes nothing).
pub fn write_group<W: fmt::Write>(w: &mut W, group: u64) -> fmt::Result {
    if group != 0 {
        writeln!(w, "{KEY_CONSUMER_GROUP}={group}")?;
    }
    Ok(())
}

/// What the interceptor takes from a limits file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub version: u64,
    pub context_overhead_bytes: Option<u64>,
    /// `consumer_group` (0 when absent).
    pub consumer_group: u64,
    pub container_id: [u8; MAX_CONTAINER_ID],
    pub container_id_len: usize,
    pub gpus: [[u8; 16]; MAX_GPUS],
    pub ngpus: usize,
    /// Some entry of `gpus` did not parse (kept out of the list).
    pub bad_gpus: bool,
}

impl Limits {
    pub const fn empty() -> Self {
        Limits {
            version: 0,
            context_overhead_bytes: None,
            consumer_group: 0,
            container_id: [0; MAX_CONTAINER_ID],
            container_id_len: 0,
            gpus: [[0; 16]; MAX_GPUS],
            ngpus: 0,
            bad_gpus: false,
        }
    }
    pub fn container_id(&self) -> &[u8] {
        &self.container_id[..self.container_id_len]
    }
    pub fn gpus(&self) -> &[[u8; 16]] {
        &self.gpus[..self.ngpus]
    }
}

/// Trim ASCII white space at both ends.
pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !first.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !last.is_ascii_whitespace() {
            break;
        }
        s = rest;
    }
    s
}

/// A decimal u64 (ASCII digits, white space around allowed).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    let s = trim(s);
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(v)
}

fn hexval(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Parse "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (prefix optional, also
/// "MIG-") into 16 raw bytes as cuDeviceGetUuid returns them.
pub fn parse_uuid(s: &[u8]) -> Option<[u8; 16]> {
    let mut s = trim(s);
    if s.len() > 4 && (s[..4].eq_ignore_ascii_case(b"GPU-") || s[..4].eq_ignore_ascii_case(b"MIG-"))
    {
        s = &s[4..];
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    for &c in s {
        if c == b'-' {
            continue;
        }
        let v = hexval(c)?;
        if n >= 32 {
            return None;
        }
        if n % 2 == 0 {
            out[n / 2] = v << 4;
        } else {
            out[n / 2] |= v;
        }
        n += 1;
    }
    if n == 32 {
        Some(out)
    } else {
        None
    }
}

/// Read a limits file (one pass, no allocation; the caller caps the text).
pub fn parse(text: &[u8]) -> Limits {
    let mut l = Limits::empty();
    for raw in text.split(|&c| c == b'\n') {
        let line = match raw.iter().position(|&c| c == b'#') {
            Some(p) => &raw[..p],
            None => raw,
        };
        let line = trim(line);
        let Some(eq) = line.iter().position(|&c| c == b'=') else {
            continue;
        };
        let key = trim(&line[..eq]);
        let val = trim(&line[eq + 1..]);
        if key == KEY_VERSION.as_bytes() {
            l.version = parse_u64(val).unwrap_or(0);
        } else if key == KEY_CONTEXT_OVERHEAD_BYTES.as_bytes() {
            l.context_overhead_bytes = parse_u64(val);
        } else if key == KEY_CONSUMER_GROUP.as_bytes() {
            l.consumer_group = parse_u64(val).unwrap_or(0);
        } else if key == KEY_CONTAINER_ID.as_bytes() {
            let n = core::cmp::min(val.len(), MAX_CONTAINER_ID);
            l.container_id = [0; MAX_CONTAINER_ID];
            l.container_id[..n].copy_from_slice(&val[..n]);
            l.container_id_len = n;
        } else if key == KEY_GPUS.as_bytes() {
            l.ngpus = 0;
            for g in val.split(|&c| c == b',') {
                let g = trim(g);
                if g.is_empty() {
                    continue;
                }
                match parse_uuid(g) {
                    Some(u) if l.ngpus < MAX_GPUS => {
                        l.gpus[l.ngpus] = u;
                        l.ngpus += 1;
                    }
                    _ => l.bad_gpus = true,
                }
            }
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;
    const U0: &str = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
    const U1: &str = "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff";

    #[test]
    fn uuids() {
        let u = parse_uuid(U0.as_bytes()).unwrap();
        assert_eq!(u[0], 0x0a);
        assert_eq!(u[15], 0xf9);
        assert!(parse_uuid(b"GPU-0a1b").is_none());
        assert!(parse_uuid(b"GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9aa").is_none());
        assert_eq!(parse_uuid(b"0a1b2c3d4e5f60718293a4b5c6d7e8f9"), Some(u));
        assert_eq!(parse_uuid(b"mig-0a1b2c3d4e5f60718293a4b5c6d7e8f9"), Some(u));
    }

    #[test]
    fn reader() {
        let t = b"# gpu-quota limits\nversion=2\ncontainer_id = abc\nvram_bytes=4294967296 # v1, ignored\n\
                  gpus=GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9,GPU-ffffffff-ffff-ffff-ffff-ffffffffffff\n\
                  context_overhead_bytes=1024\nfuture_key=zzz\nnonsense line\n";
        let l = parse(t);
        assert_eq!(l.version, 2);
        assert_eq!(l.context_overhead_bytes, Some(1024));
        assert_eq!(l.container_id(), b"abc");
        assert_eq!(l.ngpus, 2);
        assert_eq!(l.gpus[1], [0xff; 16]);
        assert!(!l.bad_gpus);
        let l = parse(b"gpus=GPU-a\n");
        assert!(l.bad_gpus && l.ngpus == 0);
        // the last container_id counts, whole
        let l = parse(b"container_id=abcdef\ncontainer_id=xy\n");
        assert_eq!(l.container_id(), b"xy");
        assert_eq!(l, {
            let mut m = Limits::empty();
            m.container_id[..2].copy_from_slice(b"xy");
            m.container_id_len = 2;
            m
        });
    }

    /// What the writer writes, the reader reads back: the one format.
    #[test]
    fn round_trip() {
        let mut s = String::new();
        write(&mut s, "ctr-1", [U0, U1], 616 << 20).unwrap();
        assert_eq!(
            s,
            "# gpu-quota limits, written by gpu-quota-hook; read-only in the container\n\
             version=2\ncontainer_id=ctr-1\n\
             gpus=GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9,GPU-ffffffff-ffff-ffff-ffff-ffffffffffff\n\
             context_overhead_bytes=645922816\n"
        );
        let l = parse(s.as_bytes());
        assert_eq!(l.version, VERSION as u64);
        assert_eq!(l.container_id(), b"ctr-1");
        assert_eq!(l.context_overhead_bytes, Some(616 << 20));
        let u0 = parse_uuid(U0.as_bytes()).unwrap();
        assert_eq!(l.gpus(), &[u0, [0xff; 16]]);
        assert!(!l.bad_gpus);
        // no GPUs, no overhead: the overhead key left out
        let mut s = String::new();
        write(&mut s, "c", [], 0).unwrap();
        assert!(s.ends_with("container_id=c\ngpus=\n"), "{s}");
        let l = parse(s.as_bytes());
        assert_eq!((l.context_overhead_bytes, l.ngpus), (None, 0));
    }

    /// A value that would not read back as itself is refused: a line break
    /// in an id would otherwise let it write a line of its own.
    #[test]
    fn writer_refuses_values_that_do_not_read_back() {
        for (id, gpu) in [
            ("c\ncontext_overhead_bytes=0", U0),
            ("c\rx", U0),
            ("c#x", U0),
            (" c", U0),
            ("c", "GPU-a,GPU-b"),
            ("c", "GPU-a\ncontainer_id=x"),
        ] {
            let mut s = String::new();
            assert_eq!(
                write(&mut s, id, [gpu], 0),
                Err(fmt::Error),
                "{id:?} {gpu:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(t in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let l = parse(&t);
            proptest::prop_assert!(l.ngpus <= MAX_GPUS && l.container_id_len <= MAX_CONTAINER_ID);
        }

        #[test]
        fn round_trip_any(
            id in "[A-Za-z0-9_.+-]{1,80}",
            n in 0..=MAX_GPUS,
            ovh in proptest::prelude::any::<u64>(),
        ) {
            let gpus: std::vec::Vec<String> =
                (0..n).map(|i| std::format!("GPU-{:032x}", i + 1)).collect();
            let mut s = String::new();
            write(&mut s, &id, gpus.iter().map(|g| g.as_str()), ovh).unwrap();
            let l = parse(s.as_bytes());
            let keep = id.len().min(MAX_CONTAINER_ID);
            proptest::prop_assert_eq!(l.container_id(), &id.as_bytes()[..keep]);
            proptest::prop_assert_eq!(l.context_overhead_bytes, if ovh > 0 { Some(ovh) } else { None });
            proptest::prop_assert_eq!(l.ngpus, n);
            proptest::prop_assert!(!l.bad_gpus);
        }
    }
}
