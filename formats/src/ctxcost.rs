//! The per-process CUDA context charge: the figures and the cache file the
//! host measures and writes (core::ctxcost, `<ledger_dir>/context-cost.json`)
//! and libgpuquota.so reads when it runs standalone (no `limits` file).
//!
//! The cache is JSON (`{"version":1,"entries":[{…,"charge_bytes":N,…}]}`),
//! written by serde on the host; the interceptor has no JSON parser and
//! takes the largest plausible `"charge_bytes": N` it finds
//! ([`max_charge_from_cache`]). core's tests write a cache and read it back
//! through this function.
//!
//! Where the standalone interceptor finds the cache: the host writes it into
//! its configured `ledger_dir`, which need not be [`DEFAULT_LEDGER_DIR`]. The
//! interceptor learns that directory from the same root-owned file the host
//! reads it from, [`CONFIG_FILE`](crate::layout::CONFIG_FILE) ([`standalone_cache_path`]), rather than
//! from the environment of the process it runs in (which may name another
//! file on purpose: `GPU_QUOTA_CONTEXT_COST_FILE`) or from a second copy the
//! host would have to keep outside the directory it was told to use.
use crate::layout::{CONFIG_FILE_C, DEFAULT_LEDGER_DIR};
use core::ffi::CStr;

/// Added to a measured context for lazily loaded modules.
pub const MARGIN_BYTES: u64 = 96 << 20;
/// No measurement and no cache: the H200 figure, 520 MiB of context + the
/// margin.
pub const BUILTIN_DEFAULT_BYTES: u64 = 616 << 20;
/// A measured context above this is not believed.
pub const MAX_PLAUSIBLE_BYTES: u64 = 8 << 30;
/// The cache's file name in the ledger directory.
pub const CACHE_FILE: &str = "context-cost.json";
/// The JSON key of an entry's charge.
pub const CHARGE_KEY: &str = "charge_bytes";

/// The longest cache path [`standalone_cache_path`] builds (PATH_MAX).
pub const MAX_PATH: usize = 4096;

/// The `ledger_dir` that the host configuration `text` (TOML) sets, in the
/// one spelling this scanner reads: a top-level line (before the first
/// table header) `ledger_dir = "ABSOLUTE"` or `ledger_dir = 'ABSOLUTE'`,
/// a string without escapes, then only a comment. Any other spelling, a
/// multi-line string before it, or no such line: `None` (the caller uses
/// [`DEFAULT_LEDGER_DIR`]). It never returns a value the host's TOML parser
/// reads differently (core's `standalone_cache_path_agrees_with_the_host`
/// checks it against the host's parser).
pub fn ledger_dir_from_config(text: &[u8]) -> Option<&[u8]> {
    let key = b"ledger_dir";
    let ws = |b: u8| b == b' ' || b == b'\t';
    for raw in text.split(|b| *b == b'\n') {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        let start = line.iter().position(|b| !ws(*b)).unwrap_or(line.len());
        let line = &line[start..];
        if line.windows(3).any(|w| w == b"\"\"\"" || w == b"'''") {
            // a multi-line string: what follows could be inside it
            return None;
        }
        match line.first() {
            None | Some(b'#') => continue,
            // a table header: top-level keys are all above it
            Some(b'[') => return None,
            _ => {}
        }
        let Some(rest) = line.strip_prefix(key) else {
            continue;
        };
        let eq = rest.iter().position(|b| !ws(*b)).unwrap_or(rest.len());
        if rest.get(eq) != Some(&b'=') {
            // `ledger_directory = …`, a dotted key, …: not this key
            if eq == 0 {
                continue;
            }
            return None;
        }
        let rest = &rest[eq + 1..];
        let v = rest.iter().position(|b| !ws(*b)).unwrap_or(rest.len());
        let rest = &rest[v..];
        let quote = *rest.first()?;
        if quote != b'"' && quote != b'\'' {
            return None;
        }
        let end = rest[1..].iter().position(|b| *b == quote)? + 1;
        let value = &rest[1..end];
        let tail = &rest[end + 1..];
        let t = tail.iter().position(|b| !ws(*b)).unwrap_or(tail.len());
        let clean = |b: &u8| *b >= 0x20 && *b != 0x7f && !(quote == b'"' && *b == b'\\');
        return (value.first() == Some(&b'/')
            && value.iter().all(clean)
            && matches!(tail.get(t), None | Some(b'#')))
        .then_some(value);
    }
    None
}

/// Where a standalone interceptor reads the host's cache:
/// `<ledger_dir>/`[`CACHE_FILE`], the `ledger_dir` of the host
/// configuration `config` (the text of [`CONFIG_FILE`](crate::layout::CONFIG_FILE), if readable) when
/// [`ledger_dir_from_config`] finds one, else of [`DEFAULT_LEDGER_DIR`].
/// Written NUL-terminated into `out`.
pub fn standalone_cache_path<'a>(config: Option<&[u8]>, out: &'a mut [u8; MAX_PATH]) -> &'a CStr {
    let fits = |d: &[u8]| d.len() + 1 + CACHE_FILE.len() < MAX_PATH;
    let dir = config
        .and_then(ledger_dir_from_config)
        .filter(|d| fits(d))
        .unwrap_or(DEFAULT_LEDGER_DIR.as_bytes());
    let dir = dir.strip_suffix(b"/").unwrap_or(dir);
    let mut n = 0;
    for part in [dir, b"/", CACHE_FILE.as_bytes(), b"\0"] {
        out[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    match CStr::from_bytes_with_nul(&out[..n]) {
        Ok(c) => c,
        // unreachable: the parts hold no NUL (clean() refuses control bytes)
        Err(_) => c"",
    }
}

/// The standalone interceptor's read of the host's cache: [`CONFIG_FILE`](crate::layout::CONFIG_FILE)
/// through `read` into `buf`, then the cache at [`standalone_cache_path`]
/// into `buf`. `read(path, buf)` is the caller's capped, `O_NOFOLLOW` read
/// (no I/O here: this crate links nothing). The bytes read, if any.
pub fn read_standalone_cache(
    mut read: impl FnMut(&CStr, &mut [u8]) -> Option<usize>,
    buf: &mut [u8],
) -> Option<usize> {
    let mut path = [0u8; MAX_PATH];
    let config = read(CONFIG_FILE_C, buf).map(|n| &buf[..n.min(buf.len())]);
    let p = standalone_cache_path(config, &mut path);
    read(p, buf)
}

/// The largest `charge_bytes` in the cache text that is above 0 and at most
/// [`MAX_PLAUSIBLE_BYTES`], if any. One pass over the text (the caller caps
/// its length); no allocation.
pub fn max_charge_from_cache(text: &[u8]) -> Option<u64> {
    let key = CHARGE_KEY.as_bytes();
    let ws = |b: u8| b == b' ' || b == b'\t' || b == b'\n' || b == b'\r';
    let mut best: Option<u64> = None;
    let mut i = 0;
    while i + key.len() + 2 <= text.len() {
        if text[i] != b'"'
            || &text[i + 1..i + 1 + key.len()] != key
            || text[i + 1 + key.len()] != b'"'
        {
            i += 1;
            continue;
        }
        i += key.len() + 2;
        while i < text.len() && ws(text[i]) {
            i += 1;
        }
        if i >= text.len() || text[i] != b':' {
            continue;
        }
        i += 1;
        while i < text.len() && ws(text[i]) {
            i += 1;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        if let Some(v) = crate::limits::parse_u64(&text[start..i]) {
            if v > 0 && v <= MAX_PLAUSIBLE_BYTES && best.map_or(true, |b| v > b) {
                best = Some(v);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_text() {
        let t = br#"{"version":1,"entries":[{"key":{"driver_version":"580.159.04","gpu_name":"NVIDIA H200"},"charge_bytes":645922816,"measured":null,"error":null,"at_unix":1}]}"#;
        assert_eq!(max_charge_from_cache(t), Some(645922816));
        let t =
            b"{\"charge_bytes\" : 100,\n \"charge_bytes\":\t300, \"charge_bytes\": 99999999999999}";
        assert_eq!(max_charge_from_cache(t), Some(300));
        assert_eq!(max_charge_from_cache(b"{}"), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\": 0"), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\""), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\": x"), None);
        assert_eq!(max_charge_from_cache(b"\"charge_bytes\":"), None);
        let at_bound = std::format!("\"charge_bytes\": {MAX_PLAUSIBLE_BYTES}");
        assert_eq!(
            max_charge_from_cache(at_bound.as_bytes()),
            Some(MAX_PLAUSIBLE_BYTES)
        );
        assert_eq!(BUILTIN_DEFAULT_BYTES, (520 << 20) + MARGIN_BYTES);
    }

    #[test]
    fn ledger_dir_spellings() {
        let ok: &[(&str, &str)] = &[
            ("ledger_dir = \"/srv/gq\"\n", "/srv/gq"),
            (
                "# host\n\nledger_dir='/srv/a b' # where\r\n[driver]\n",
                "/srv/a b",
            ),
            ("state_dir = \"/run/x\"\n  ledger_dir\t=\t\"/l\"", "/l"),
            (
                "ledger_directory = \"/no\"\nledger_dir = \"/yes\"\n",
                "/yes",
            ),
        ];
        for (t, want) in ok {
            assert_eq!(
                ledger_dir_from_config(t.as_bytes()),
                Some(want.as_bytes()),
                "{t:?}"
            );
        }
        for t in [
            "",
            "[driver]\nledger_dir = \"/in/a/table\"\n",
            "note = \"\"\"\nledger_dir = \"/in/a/string\"\n\"\"\"\n",
            "ledger_dir = \"relative\"\n",
            "ledger_dir = \"/esc\\u0041\"\n",
            "ledger_dir = \"/unterminated\n",
            "ledger_dir = \"/a\" \"/b\"\n",
            "ledger_dir.x = \"/dotted\"\n",
            "ledger_dir = [\"/array\"]\n",
            "ledger_dir = \"/tab\there\"\n",
        ] {
            assert_eq!(ledger_dir_from_config(t.as_bytes()), None, "{t:?}");
        }
    }

    #[test]
    fn cache_path_follows_the_config() {
        let mut out = [0u8; MAX_PATH];
        let c = standalone_cache_path(None, &mut out);
        assert_eq!(c.to_bytes(), b"/var/lib/gpu-quota/context-cost.json");
        let c = standalone_cache_path(Some(b"ledger_dir = \"/srv/gq/\"\n"), &mut out);
        assert_eq!(c.to_bytes(), b"/srv/gq/context-cost.json");
        let c = standalone_cache_path(Some(b"[x]\n"), &mut out);
        assert_eq!(c.to_bytes(), b"/var/lib/gpu-quota/context-cost.json");
        let long = std::format!("ledger_dir = \"/{}\"", "d".repeat(MAX_PATH));
        let c = standalone_cache_path(Some(long.as_bytes()), &mut out);
        assert_eq!(c.to_bytes(), b"/var/lib/gpu-quota/context-cost.json");
    }

    #[test]
    fn standalone_read_goes_through_the_config() {
        use std::collections::BTreeMap;
        use std::string::{String, ToString};
        let files = |config: Option<&str>| {
            let mut m: BTreeMap<String, String> = BTreeMap::new();
            if let Some(c) = config {
                m.insert(crate::layout::CONFIG_FILE.to_string(), c.to_string());
            }
            m.insert(
                "/srv/gq/context-cost.json".into(),
                "{\"charge_bytes\": 7}".into(),
            );
            m.insert(
                "/var/lib/gpu-quota/context-cost.json".into(),
                "{\"charge_bytes\": 9}".into(),
            );
            m
        };
        let charge = |m: BTreeMap<String, String>| {
            let mut buf = [0u8; 256];
            let n = read_standalone_cache(
                |p, b| {
                    let t = m.get(p.to_str().ok()?)?.as_bytes();
                    b[..t.len()].copy_from_slice(t);
                    Some(t.len())
                },
                &mut buf,
            )?;
            max_charge_from_cache(&buf[..n])
        };
        assert_eq!(charge(files(Some("ledger_dir = \"/srv/gq\"\n"))), Some(7));
        assert_eq!(charge(files(Some("reserve = \"1g\"\n"))), Some(9));
        assert_eq!(charge(files(None)), Some(9));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(t in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Some(v) = max_charge_from_cache(&t) {
                proptest::prop_assert!(v > 0 && v <= MAX_PLAUSIBLE_BYTES);
            }
        }
    }
}
