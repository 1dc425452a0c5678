//! Configuration parsing (pure logic, unit-tested): sizes, the hook's
//! `limits` file, GPU UUIDs.

pub const MAX_GPUS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    /// Percentage of the real device total, in millionths of a percent
    /// (25% = 25_000_000).
    MicroPercent(u64),
}

impl Size {
    /// Resolve against the real total of a device.
    pub fn bytes_of(self, real_total: u64) -> u64 {
        match self {
            Size::Bytes(b) => b,
            Size::MicroPercent(m) => ((real_total as u128 * m as u128) / 100_000_000u128) as u64,
        }
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest
        } else {
            break;
        }
    }
    s
}

fn eq_ic(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y))
}

/// Parse a size: `8g` = `8G` = `8GiB` = `8gi` = 8·2^30, `512m`, `8192MiB`,
/// decimal `8GB` = 8·10^9, `1.5g`, plain bytes `1048576`, `25%` of the device.
pub fn parse_size(s: &[u8]) -> Option<Size> {
    let s = trim(s);
    if s.is_empty() {
        return None;
    }
    // number: digits [. digits]
    let mut i = 0;
    let mut int: u128 = 0;
    let mut any = false;
    while i < s.len() && s[i].is_ascii_digit() {
        int = int.checked_mul(10)?.checked_add((s[i] - b'0') as u128)?;
        if int > u64::MAX as u128 {
            return None;
        }
        i += 1;
        any = true;
    }
    let mut frac: u128 = 0;
    let mut frac_den: u128 = 1;
    if i < s.len() && s[i] == b'.' {
        i += 1;
        while i < s.len() && s[i].is_ascii_digit() {
            if frac_den < 1_000_000_000_000 {
                frac = frac * 10 + (s[i] - b'0') as u128;
                frac_den *= 10;
            }
            i += 1;
            any = true;
        }
    }
    if !any {
        return None;
    }
    let unit = trim(&s[i..]);
    if unit == b"%" {
        // micro-percent
        let v = int * 1_000_000 + frac * 1_000_000 / frac_den;
        if v == 0 || v > 100 * 1_000_000 {
            return None;
        }
        return Some(Size::MicroPercent(v as u64));
    }
    let mult: u128 = if unit.is_empty() || eq_ic(unit, b"b") {
        1
    } else {
        let table: [(&[u8], u128); 16] = [
            (b"k", 1 << 10),
            (b"ki", 1 << 10),
            (b"kib", 1 << 10),
            (b"kb", 1_000),
            (b"m", 1 << 20),
            (b"mi", 1 << 20),
            (b"mib", 1 << 20),
            (b"mb", 1_000_000),
            (b"g", 1 << 30),
            (b"gi", 1 << 30),
            (b"gib", 1 << 30),
            (b"gb", 1_000_000_000),
            (b"t", 1 << 40),
            (b"ti", 1 << 40),
            (b"tib", 1 << 40),
            (b"tb", 1_000_000_000_000),
        ];
        let mut m = 0;
        for (name, v) in table {
            if eq_ic(unit, name) {
                m = v;
                break;
            }
        }
        if m == 0 {
            return None;
        }
        m
    };
    let total = int.checked_mul(mult)?.checked_add(frac * mult / frac_den)?;
    if total > u64::MAX as u128 {
        return None;
    }
    Some(Size::Bytes(total as u64))
}

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
    if s.len() > 4 && (eq_ic(&s[..4], b"GPU-") || eq_ic(&s[..4], b"MIG-")) {
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

/// The context charge when nothing says otherwise (core::ctxcost's
/// BUILTIN_DEFAULT_BYTES: the H200's 520 MiB context + 96 MiB margin).
pub const BUILTIN_CTX_OVERHEAD: u64 = 616 << 20;
/// A cached charge above this is not believed (core::ctxcost).
pub const MAX_PLAUSIBLE_CTX: u64 = 8 << 30;

/// The host's context-cost cache (`<ledger_dir>/context-cost.json`, written
/// by the hook): the largest `charge_bytes` of its entries, if any is
/// plausible. One pass over at most the buffer given (the caller caps it).
pub fn ctxcost_from_cache(text: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"charge_bytes\"";
    let mut best: Option<u64> = None;
    let mut i = 0;
    while i + KEY.len() <= text.len() {
        if &text[i..i + KEY.len()] != KEY {
            i += 1;
            continue;
        }
        i += KEY.len();
        while i < text.len() && (text[i] == b' ' || text[i] == b'\t' || text[i] == b'\n' || text[i] == b'\r') {
            i += 1;
        }
        if i >= text.len() || text[i] != b':' {
            continue;
        }
        i += 1;
        while i < text.len() && (text[i] == b' ' || text[i] == b'\t' || text[i] == b'\n' || text[i] == b'\r') {
            i += 1;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        if let Some(v) = parse_u64(&text[start..i]) {
            if v > 0 && v <= MAX_PLAUSIBLE_CTX && best.map_or(true, |b| v > b) {
                best = Some(v);
            }
        }
    }
    best
}

/// Contents of the hook's `limits` file.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub version: u64,
    pub vram_bytes: Option<u64>,
    pub context_overhead_bytes: Option<u64>,
    pub container_id: [u8; 64],
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
            vram_bytes: None,
            context_overhead_bytes: None,
            container_id: [0; 64],
            container_id_len: 0,
            gpus: [[0; 16]; MAX_GPUS],
            ngpus: 0,
            bad_gpus: false,
        }
    }
}

/// Parse `key=value` lines; `#` starts a comment; unknown keys are ignored.
pub fn parse_limits(text: &[u8]) -> Limits {
    let mut l = Limits::empty();
    for raw in text.split(|&c| c == b'\n') {
        let line = match raw.iter().position(|&c| c == b'#') {
            Some(p) => &raw[..p],
            None => raw,
        };
        let line = trim(line);
        if line.is_empty() {
            continue;
        }
        let eq = match line.iter().position(|&c| c == b'=') {
            Some(p) => p,
            None => continue,
        };
        let key = trim(&line[..eq]);
        let val = trim(&line[eq + 1..]);
        match key {
            b"version" => l.version = parse_u64(val).unwrap_or(0),
            b"vram_bytes" => l.vram_bytes = parse_u64(val),
            b"context_overhead_bytes" => l.context_overhead_bytes = parse_u64(val),
            b"container_id" => {
                let n = core::cmp::min(val.len(), l.container_id.len());
                l.container_id[..n].copy_from_slice(&val[..n]);
                l.container_id_len = n;
            }
            b"gpus" => {
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
            _ => {}
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;
    #[test]
    fn sizes() {
        assert_eq!(parse_size(b"8g"), Some(Size::Bytes(8 * G)));
        assert_eq!(parse_size(b"8G"), Some(Size::Bytes(8 * G)));
        assert_eq!(parse_size(b"8GiB"), Some(Size::Bytes(8 * G)));
        assert_eq!(parse_size(b"8gi"), Some(Size::Bytes(8 * G)));
        assert_eq!(parse_size(b"512m"), Some(Size::Bytes(512 << 20)));
        assert_eq!(parse_size(b"8192MiB"), Some(Size::Bytes(8 * G)));
        assert_eq!(parse_size(b"8GB"), Some(Size::Bytes(8_000_000_000)));
        assert_eq!(parse_size(b"1.5g"), Some(Size::Bytes(3 * G / 2)));
        assert_eq!(parse_size(b" 12g \n"), Some(Size::Bytes(12 * G)));
        assert_eq!(parse_size(b"1048576"), Some(Size::Bytes(1 << 20)));
        assert_eq!(parse_size(b"4 GiB"), Some(Size::Bytes(4 * G)));
        assert_eq!(parse_size(b"25%"), Some(Size::MicroPercent(25_000_000)));
        assert_eq!(parse_size(b"12.5%"), Some(Size::MicroPercent(12_500_000)));
        assert_eq!(parse_size(b"0%"), None);
        assert_eq!(parse_size(b"101%"), None);
        assert_eq!(parse_size(b"g"), None);
        assert_eq!(parse_size(b""), None);
        assert_eq!(parse_size(b"8x"), None);
        assert_eq!(parse_size(b"-1g"), None);
        assert_eq!(parse_size(b"99999999999999999999"), None);
        assert_eq!(parse_size(b"20000000000t"), None);
        assert_eq!(Size::MicroPercent(25_000_000).bytes_of(100 * G), 25 * G);
        assert_eq!(Size::Bytes(5).bytes_of(100), 5);
    }
    #[test]
    fn ctxcost_cache() {
        let t = br#"{"version":1,"entries":[{"key":{"driver_version":"580.159.04","gpu_name":"NVIDIA H200"},"charge_bytes":645922816,"measured":null,"error":null,"at_unix":1}]}"#;
        assert_eq!(ctxcost_from_cache(t), Some(645922816));
        let t = b"{\"charge_bytes\" : 100,\n \"charge_bytes\":\t300, \"charge_bytes\": 99999999999999}";
        assert_eq!(ctxcost_from_cache(t), Some(300));
        assert_eq!(ctxcost_from_cache(b"{}"), None);
        assert_eq!(ctxcost_from_cache(b"\"charge_bytes\": 0"), None);
        assert_eq!(ctxcost_from_cache(b"\"charge_bytes\""), None);
        assert_eq!(ctxcost_from_cache(b"\"charge_bytes\": x"), None);
    }
    #[test]
    fn uuids() {
        let u = parse_uuid(b"GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9").unwrap();
        assert_eq!(u[0], 0x0a);
        assert_eq!(u[15], 0xf9);
        assert!(parse_uuid(b"GPU-0a1b").is_none());
        assert!(parse_uuid(b"GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9aa").is_none());
        assert_eq!(parse_uuid(b"0a1b2c3d4e5f60718293a4b5c6d7e8f9"), Some(u));
    }
    #[test]
    fn limits() {
        let t = b"# gpu-quota limits\nversion=1\ncontainer_id = abc\nvram_bytes=4294967296 # 4g\n\
                  gpus=GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9,GPU-ffffffff-ffff-ffff-ffff-ffffffffffff\n\
                  context_overhead_bytes=1024\nfuture_key=zzz\nnonsense line\n";
        let l = parse_limits(t);
        assert_eq!(l.version, 1);
        assert_eq!(l.vram_bytes, Some(4 * G));
        assert_eq!(l.context_overhead_bytes, Some(1024));
        assert_eq!(&l.container_id[..l.container_id_len], b"abc");
        assert_eq!(l.ngpus, 2);
        assert_eq!(l.gpus[1], [0xff; 16]);
        assert!(!l.bad_gpus);
        let l = parse_limits(b"vram_bytes=12x\n");
        assert_eq!(l.vram_bytes, None);
    }
}
