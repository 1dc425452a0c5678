//! Reader and writer of glibc's loader cache (`/etc/ld.so.cache`), for
//! adding the injected driver libraries to an image's own cache without
//! running the host's `ldconfig` against the untrusted rootfs.
//!
//! The bytes come from the container image and are hostile: every count,
//! offset and length is checked against the buffer, strings must be
//! NUL-terminated inside the string table, allocation is bounded by the
//! input, and anything malformed is an error rather than a guess. Bytes in,
//! bytes out: no I/O here.
//!
//! Format (glibc `sysdeps/generic/dl-cache.h`, writer `elf/cache.c`, reader
//! `elf/dl-cache.c`, all native byte order):
//! - old (`"ld.so-1.7.0"`): 16-byte header (`nlibs` at 12), `nlibs` 12-byte
//!   entries {flags i32, key u32, value u32}, then strings; string indices
//!   are relative to the end of the entry table.
//! - new (`"glibc-ld.so.cache1.1"`): 48-byte header {magic 20, nlibs u32,
//!   len_strings u32, flags u8 (endianness), 3 pad, extension_offset u32,
//!   3 unused u32}, `nlibs` 24-byte entries {flags i32, key u32, value u32,
//!   osversion u32, hwcap u64}, then the string table of `len_strings`
//!   bytes; string indices are relative to the new header. The extension
//!   directory (magic `0xeaa42174`, count, {tag, flags, offset, size}
//!   sections with offsets from the start of the file) follows, 4-aligned:
//!   tag 0 = generator string (not NUL-terminated), tag 1 = glibc-hwcaps
//!   subdirectory names (u32 string indices, sorted by strcmp). An entry
//!   whose hwcap has `DL_CACHE_HWCAP_EXTENSION` (bit 62) as its only upper
//!   bit besides the ISA level bits refers, in its low 32 bits, to one of
//!   those names.
//! - compat: an old cache whose string area starts (8-aligned) with a new
//!   one; like the loader, only the new part is read. Its glibc-hwcaps
//!   string indices are taken relative to the new header, as ldconfig
//!   writes them (glibc 2.36's loader and `ldconfig -p` resolve them from
//!   the start of the file, which in a compat file lands elsewhere:
//!   `ldconfig -p` prints `hwcap: ""`). Extension offsets are file offsets
//!   in both readers and the writer.
//!
//! The loader binary-searches the entries, so [`LdCache::to_bytes`] orders
//! them exactly as ldconfig's `compare()` does: keys descending by
//! `_dl_cache_libcmp` (digit runs compare numerically), then flags
//! descending, glibc-hwcaps entries first (by subdirectory name), then the
//! most specific legacy hwcap first.
//!
//! Work, not only size, is bounded: every string is looked
//! at a bounded number of times. The sort never compares strings: each
//! distinct key and glibc-hwcaps name is ranked once (keys through a byte
//! encoding of `_dl_cache_libcmp` whose memcmp order is libcmp's; the
//! names the parser proved sorted and unique are ranked in one linear
//! pass), and the entries are sorted by fixed-size integer keys computed
//! once. [`Work`] counts what is done, in bytes touched, and the hook's
//! whole step ([`rewrite`]) is refused past [`WORK_BUDGET`].
use std::cmp::{Ordering, Reverse};
use std::collections::{HashMap, HashSet};
use std::ffi::c_char;

mod order;
mod write;
pub use order::libcmp;
use order::{cmp_len, libcmp_key};

/// Inputs larger than this are refused.
pub const MAX_CACHE_BYTES: usize = 32 << 20;
/// Entries accepted in one cache (real caches have a few thousand at most:
/// 543 on the Debian 12 test host).
pub const MAX_ENTRIES: usize = 1 << 14;
/// Longest string accepted (PATH_MAX, NUL excluded).
pub const MAX_STRING: usize = 4096;
/// Total bytes of strings decoded from one cache (keys, values,
/// glibc-hwcaps names, generator). Strings may share bytes in the file
/// (suffix merging), so this bounds what a small file can make us copy; a
/// real cache decodes about 100 bytes per entry.
pub const MAX_DECODED_BYTES: usize = 4 << 20;
/// Units of [`Work`] the hook's loader-cache step ([`rewrite`]: parse the
/// image's cache, add the driver libraries, write it) may spend before it
/// refuses the cache. A unit is about one byte touched; the test host's
/// real cache (543 entries) costs 0.6 Mi units; the costliest shapes
/// within the other limits cost about half of this
/// (`core/tests/ldcache_work.rs`) and well under 100 ms of CPU in a release
/// build (docs/security.md, "8. Work budgets for hostile input"). The
/// budget is the backstop for a cost that accounting missed.
pub const WORK_BUDGET: u64 = 256 << 20;

pub const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
pub const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
pub const EXTENSION_MAGIC: u32 = 0xeaa4_2174;
pub const EXTENSION_TAG_GENERATOR: u32 = 0;
pub const EXTENSION_TAG_GLIBC_HWCAPS: u32 = 1;
/// hwcap bit marking an entry from a glibc-hwcaps subdirectory.
pub const DL_CACHE_HWCAP_EXTENSION: u64 = 1 << 62;
/// ISA-level bits (in the upper 32 bits) of a glibc-hwcaps entry's hwcap.
pub const DL_CACHE_HWCAP_ISA_LEVEL_MASK: u64 = (1 << 10) - 1;

pub const FLAG_ELF: i32 = 0x0001;
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
pub const FLAG_SPARC_LIB64: i32 = 0x0100;
pub const FLAG_IA64_LIB64: i32 = 0x0200;
pub const FLAG_X8664_LIB64: i32 = 0x0300;
pub const FLAG_S390_LIB64: i32 = 0x0400;
pub const FLAG_POWERPC_LIB64: i32 = 0x0500;
pub const FLAG_MIPS64_LIBN32: i32 = 0x0600;
pub const FLAG_MIPS64_LIBN64: i32 = 0x0700;
pub const FLAG_X8664_LIBX32: i32 = 0x0800;
pub const FLAG_ARM_LIBHF: i32 = 0x0900;
pub const FLAG_AARCH64_LIB64: i32 = 0x0a00;
pub const FLAG_ARM_LIBSF: i32 = 0x0b00;
pub const FLAG_MIPS_LIB32_NAN2008: i32 = 0x0c00;
pub const FLAG_MIPS64_LIBN32_NAN2008: i32 = 0x0d00;
pub const FLAG_MIPS64_LIBN64_NAN2008: i32 = 0x0e00;
pub const FLAG_RISCV_FLOAT_ABI_SOFT: i32 = 0x0f00;
pub const FLAG_RISCV_FLOAT_ABI_DOUBLE: i32 = 0x1000;

const OLD_HEADER: usize = 16;
const OLD_ENTRY: usize = 12;
const NEW_HEADER: usize = 48;
const NEW_ENTRY: usize = 24;
const EXT_HEADER: usize = 8;
const EXT_SECTION: usize = 16;
/// `__alignof__ (struct cache_file_new)`: it holds u64 fields.
const NEW_ALIGN: usize = std::mem::align_of::<u64>();
/// `cache_file_new_flags_endian_current`.
const ENDIAN_CURRENT: u8 = if cfg!(target_endian = "little") { 2 } else { 3 };

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LdCacheError {
    #[error("loader cache is {len} bytes, more than the {max} accepted")]
    TooLarge { len: usize, max: usize },
    #[error(
        "not a loader cache: it starts with neither \"ld.so-1.7.0\" nor \"glibc-ld.so.cache1.1\""
    )]
    BadMagic,
    #[error("loader cache truncated: {what} needs bytes {start}..{end} but the file has {len}")]
    Truncated {
        what: &'static str,
        start: u64,
        end: u64,
        len: usize,
    },
    #[error("loader cache {what}: offset {offset} is outside {region} {start}..{end}")]
    BadOffset {
        what: &'static str,
        offset: u64,
        region: &'static str,
        start: u64,
        end: u64,
    },
    #[error("loader cache {what}: {count} is more than the {max} accepted")]
    TooMany {
        what: &'static str,
        count: u64,
        max: u64,
    },
    #[error(
        "loader cache {what} at offset {offset} has no NUL before the end of the string table"
    )]
    Unterminated { what: &'static str, offset: u64 },
    #[error("loader cache {what} at offset {offset} is longer than {max} bytes")]
    StringTooLong {
        what: &'static str,
        offset: u64,
        max: usize,
    },
    #[error("loader cache {what} at offset {offset} is empty")]
    EmptyString { what: &'static str, offset: u64 },
    #[error(
        "loader cache byte-order flags {flags:#x} do not match this machine ({ENDIAN_CURRENT:#x})"
    )]
    WrongEndian { flags: u8 },
    #[error("loader cache extensions: {what}")]
    BadExtension { what: String },
    #[error("loader cache entry {entry}: glibc-hwcaps index {index}, but the cache names {count} subdirectories")]
    BadHwcapsIndex {
        entry: usize,
        index: u32,
        count: usize,
    },
    #[error("loader cache needs more than {budget} units of work to read and rewrite (a real cache needs under 1% of that)")]
    TooMuchWork { budget: u64 },
}

type Result<T> = std::result::Result<T, LdCacheError>;

/// Work done on one cache, in units of about one byte touched: a string
/// byte scanned, hashed, copied or compared, a record read or written
/// (its size), a comparison of two sort keys (16). Counting is
/// deterministic, so tests bound work without a clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    used: u64,
    limit: u64,
}

impl Work {
    /// Refuse past `limit` units.
    pub fn new(limit: u64) -> Work {
        Work { used: 0, limit }
    }
    /// The budget of the hook's step, [`WORK_BUDGET`].
    pub fn budget() -> Work {
        Work::new(WORK_BUDGET)
    }
    /// Count without refusing (trusted input: caches built in code).
    pub fn unlimited() -> Work {
        Work::new(u64::MAX)
    }
    /// Units spent so far.
    pub fn used(&self) -> u64 {
        self.used
    }
    fn spend(&mut self, units: u64) -> Result<()> {
        self.used = self.used.saturating_add(units);
        if self.used > self.limit {
            return Err(LdCacheError::TooMuchWork { budget: self.limit });
        }
        Ok(())
    }
}

/// Units for comparing two fixed-size sort keys.
const SORT_KEY_UNITS: u64 = 16;

/// A library to add: its soname, the path the loader opens, cache flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lib {
    pub key: Vec<u8>,
    pub path: Vec<u8>,
    pub flags: i32,
}

/// The hook's loader-cache step on an image's cache (`None`: the image has
/// none): parse it, add `libs` (replacing the image's entries of the same
/// names), write it in the new format. Refused, not slow, when the input
/// would cost more than `work` allows.
pub fn rewrite(image: Option<&[u8]>, libs: &[Lib], work: &mut Work) -> Result<Vec<u8>> {
    let mut cache = match image {
        Some(bytes) => LdCache::parse_within(bytes, work)?,
        None => LdCache::default(),
    };
    // to_bytes sorts: no need to sort here too
    cache.replace(libs, work)?;
    cache.to_bytes_within(work)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// FLAG_ELF_LIBC6 | FLAG_*_LIB64 etc.; the loader uses only entries
    /// with flags 1 or its own `_DL_CACHE_DEFAULT_ID`.
    pub flags: i32,
    /// The soname looked up (`libcuda.so.1`).
    pub key: Vec<u8>,
    /// The file the loader opens.
    pub value: Vec<u8>,
    /// `osversion_unused` in glibc ≥ 2.35; kept as read.
    pub osversion: u32,
    /// Legacy hwcap mask, or DL_CACHE_HWCAP_EXTENSION | ISA level << 32 |
    /// index into [`LdCache::hwcaps`].
    pub hwcap: u64,
}

impl Entry {
    /// True when `hwcap` refers to a glibc-hwcaps subdirectory
    /// (`dl_cache_hwcap_extension`).
    pub fn is_hwcaps_extension(&self) -> bool {
        is_extension(self.hwcap)
    }
}

fn is_extension(hwcap: u64) -> bool {
    ((hwcap >> 32) & !DL_CACHE_HWCAP_ISA_LEVEL_MASK) == (DL_CACHE_HWCAP_EXTENSION >> 32)
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LdCache {
    /// In file order after `parse`; `to_bytes` writes them in ldconfig's
    /// order whatever the order here.
    pub entries: Vec<Entry>,
    /// glibc-hwcaps subdirectory names (`x86-64-v3`), sorted by strcmp;
    /// hwcaps-extension entries index this list.
    pub hwcaps: Vec<Vec<u8>>,
    /// The generator extension (`ldconfig (GNU libc) stable release
    /// version 2.36`), None when the cache has none.
    pub generator: Option<Vec<u8>>,
}

/// Bounds-checked native-endian reads.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn range(&self, what: &'static str, start: u64, len: u64) -> Result<&'a [u8]> {
        let end = start.saturating_add(len);
        let truncated = || LdCacheError::Truncated {
            what,
            start,
            end,
            len: self.0.len(),
        };
        let s = usize::try_from(start).map_err(|_| truncated())?;
        let e = usize::try_from(end).map_err(|_| truncated())?;
        self.0.get(s..e).ok_or_else(truncated)
    }
    fn u32(&self, what: &'static str, off: u64) -> Result<u32> {
        let b = self.range(what, off, 4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&self, what: &'static str, off: u64) -> Result<u64> {
        let b = self.range(what, off, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_ne_bytes(a))
    }
}

/// Where strings may lie, and the budget of bytes decoded so far.
struct Strings<'a> {
    file: &'a [u8],
    /// String indices are relative to this file offset.
    base: u64,
    /// The string table, as file offsets.
    start: u64,
    end: u64,
    decoded: usize,
}

impl Strings<'_> {
    fn get(&mut self, what: &'static str, index: u32, work: &mut Work) -> Result<Vec<u8>> {
        let offset = self.base + u64::from(index);
        if offset < self.start || offset >= self.end {
            return Err(LdCacheError::BadOffset {
                what,
                offset,
                region: "the string table",
                start: self.start,
                end: self.end,
            });
        }
        // start..end was checked against the file when `self` was made.
        let (o, e) = (offset as usize, self.end as usize);
        let window = &self.file[o..e.min(o.saturating_add(MAX_STRING + 1))];
        let found = window.iter().position(|&c| c == 0);
        // scanned up to the NUL (or the whole window), then copied
        work.spend(found.map_or(window.len(), |n| 2 * n + 1) as u64)?;
        let Some(n) = found else {
            return Err(if window.len() > MAX_STRING {
                LdCacheError::StringTooLong {
                    what,
                    offset,
                    max: MAX_STRING,
                }
            } else {
                LdCacheError::Unterminated { what, offset }
            });
        };
        if n == 0 {
            return Err(LdCacheError::EmptyString { what, offset });
        }
        self.spend(n)?;
        Ok(window[..n].to_vec())
    }
    fn spend(&mut self, n: usize) -> Result<()> {
        self.decoded = self.decoded.saturating_add(n);
        if self.decoded > MAX_DECODED_BYTES {
            return Err(LdCacheError::TooMany {
                what: "bytes of decoded strings",
                count: self.decoded as u64,
                max: MAX_DECODED_BYTES as u64,
            });
        }
        Ok(())
    }
}

fn check_count(what: &'static str, count: u64, entry: usize, room: u64) -> Result<()> {
    if count > MAX_ENTRIES as u64 {
        return Err(LdCacheError::TooMany {
            what,
            count,
            max: MAX_ENTRIES as u64,
        });
    }
    let max = room / entry as u64;
    if count > max {
        return Err(LdCacheError::TooMany { what, count, max });
    }
    Ok(())
}

impl LdCache {
    /// Parse a cache in the old, compat or new format, within
    /// [`WORK_BUDGET`].
    pub fn parse(bytes: &[u8]) -> Result<LdCache> {
        Self::parse_within(bytes, &mut Work::budget())
    }

    /// [`LdCache::parse`], counting into (and refused past) `work`.
    pub fn parse_within(bytes: &[u8], work: &mut Work) -> Result<LdCache> {
        if bytes.len() > MAX_CACHE_BYTES {
            return Err(LdCacheError::TooLarge {
                len: bytes.len(),
                max: MAX_CACHE_BYTES,
            });
        }
        if bytes.starts_with(NEW_MAGIC) {
            return parse_new(bytes, 0, work);
        }
        if !bytes.starts_with(OLD_MAGIC) {
            return Err(LdCacheError::BadMagic);
        }
        let b = Bytes(bytes);
        let nlibs = b.u32("old header", 12)?;
        let len = bytes.len() as u64;
        check_count(
            "old entry count",
            u64::from(nlibs),
            OLD_ENTRY,
            len.saturating_sub(OLD_HEADER as u64),
        )?;
        let entries_end = OLD_HEADER as u64 + u64::from(nlibs) * OLD_ENTRY as u64;
        let new_at = entries_end.next_multiple_of(NEW_ALIGN as u64);
        if new_at.saturating_add(NEW_HEADER as u64) <= len
            && b.range("new header", new_at, NEW_MAGIC.len() as u64)? == NEW_MAGIC
        {
            return parse_new(bytes, new_at, work);
        }
        let mut strings = Strings {
            file: bytes,
            base: entries_end,
            start: entries_end,
            end: len,
            decoded: 0,
        };
        let mut entries = Vec::with_capacity((nlibs as usize).min(1 << 16));
        for i in 0..u64::from(nlibs) {
            let e = OLD_HEADER as u64 + i * OLD_ENTRY as u64;
            work.spend(OLD_ENTRY as u64)?;
            entries.push(Entry {
                flags: b.u32("old entry", e)? as i32,
                key: strings.get("entry key", b.u32("old entry", e + 4)?, work)?,
                value: strings.get("entry value", b.u32("old entry", e + 8)?, work)?,
                osversion: 0,
                hwcap: 0,
            });
        }
        Ok(LdCache {
            entries,
            hwcaps: Vec::new(),
            generator: None,
        })
    }

    /// Remove every entry whose key is `key` (or equal to it as the loader
    /// compares names, e.g. `libfoo.so.01`), then add key -> path with these
    /// flags (osversion 0, hwcap 0) where ldconfig would put it; the entries
    /// are left in ldconfig's order.
    pub fn insert(&mut self, key: &[u8], path: &[u8], flags: i32) {
        let lib = Lib {
            key: key.to_vec(),
            path: path.to_vec(),
            flags,
        };
        self.insert_all_within(std::slice::from_ref(&lib), &mut Work::unlimited())
            .expect("an unlimited budget is never exceeded");
    }

    /// [`LdCache::insert`] of several libraries in one pass over the
    /// entries (of two libraries with equal names the later one is kept),
    /// counting into (and refused past) `work`.
    pub fn insert_all_within(&mut self, libs: &[Lib], work: &mut Work) -> Result<()> {
        self.replace(libs, work)?;
        self.sort_entries_within(work)
    }

    /// Drop the entries named like one of `libs`, append `libs`.
    fn replace(&mut self, libs: &[Lib], work: &mut Work) -> Result<()> {
        let mut names = HashSet::new();
        let mut new = Vec::with_capacity(libs.len());
        for l in libs.iter().rev() {
            work.spend(4 * (l.key.len() + l.path.len()) as u64 + NEW_ENTRY as u64)?;
            if names.insert(libcmp_key(c_str(&l.key))) {
                new.push(Entry {
                    flags: l.flags,
                    key: l.key.clone(),
                    value: l.path.clone(),
                    osversion: 0,
                    hwcap: 0,
                });
            }
        }
        new.reverse();
        // One look at each distinct spelling of a key: is it one of ours?
        let mut replaced: HashMap<&[u8], bool> = HashMap::new();
        let mut drop = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            let k = c_str(&e.key);
            work.spend(2 * k.len() as u64 + 1)?;
            let d = match replaced.get(k) {
                Some(&d) => d,
                None => {
                    let key = libcmp_key(k);
                    work.spend(key.len() as u64)?;
                    let d = names.contains(&key);
                    replaced.insert(k, d);
                    d
                }
            };
            drop.push(d);
        }
        let mut drop = drop.into_iter();
        self.entries.retain(|_| !drop.next().unwrap_or(false));
        self.entries.extend(new);
        Ok(())
    }
}

fn sat32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// The part of `s` a C reader sees: up to its first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    match s.iter().position(|&c| c == 0) {
        Some(n) => &s[..n],
        None => s,
    }
}

fn parse_new(bytes: &[u8], base: u64, work: &mut Work) -> Result<LdCache> {
    let b = Bytes(bytes);
    work.spend(NEW_HEADER as u64)?;
    let len = bytes.len() as u64;
    b.range("new header", base, NEW_HEADER as u64)?;
    let nlibs = b.u32("new header", base + 20)?;
    let len_strings = b.u32("new header", base + 24)?;
    let flags = b.range("new header", base + 28, 1)?[0];
    let ext_off = b.u32("new header", base + 32)?;
    if flags != 0 && flags & 3 != ENDIAN_CURRENT {
        return Err(LdCacheError::WrongEndian { flags });
    }
    let entries_at = base + NEW_HEADER as u64;
    check_count(
        "entry count",
        u64::from(nlibs),
        NEW_ENTRY,
        len.saturating_sub(entries_at),
    )?;
    let str_start = entries_at + u64::from(nlibs) * NEW_ENTRY as u64;
    b.range("string table", str_start, u64::from(len_strings))?;
    let mut strings = Strings {
        file: bytes,
        base,
        start: str_start,
        end: str_start + u64::from(len_strings),
        decoded: 0,
    };

    let (hwcaps, generator) = if ext_off == 0 {
        (Vec::new(), None)
    } else {
        parse_extensions(&b, u64::from(ext_off), &mut strings, work)?
    };

    let mut entries = Vec::with_capacity((nlibs as usize).min(1 << 16));
    for i in 0..u64::from(nlibs) {
        let e = entries_at + i * NEW_ENTRY as u64;
        work.spend(NEW_ENTRY as u64)?;
        let entry = Entry {
            flags: b.u32("entry", e)? as i32,
            key: strings.get("entry key", b.u32("entry", e + 4)?, work)?,
            value: strings.get("entry value", b.u32("entry", e + 8)?, work)?,
            osversion: b.u32("entry", e + 12)?,
            hwcap: b.u64("entry", e + 16)?,
        };
        if entry.is_hwcaps_extension() && entry.hwcap as u32 as usize >= hwcaps.len() {
            return Err(LdCacheError::BadHwcapsIndex {
                entry: i as usize,
                index: entry.hwcap as u32,
                count: hwcaps.len(),
            });
        }
        entries.push(entry);
    }
    Ok(LdCache {
        entries,
        hwcaps,
        generator,
    })
}

type Extensions = (Vec<Vec<u8>>, Option<Vec<u8>>);

fn parse_extensions(
    b: &Bytes<'_>,
    ext_off: u64,
    strings: &mut Strings<'_>,
    work: &mut Work,
) -> Result<Extensions> {
    let bad = |what: String| LdCacheError::BadExtension { what };
    if ext_off & 3 != 0 {
        return Err(bad(format!(
            "directory offset {ext_off} is not a multiple of 4"
        )));
    }
    if b.u32("extension directory", ext_off)? != EXTENSION_MAGIC {
        return Err(bad(format!(
            "no magic {EXTENSION_MAGIC:#x} at offset {ext_off}"
        )));
    }
    let count = b.u32("extension directory", ext_off + 4)?;
    let dir = ext_off + EXT_HEADER as u64;
    check_count(
        "extension section count",
        u64::from(count),
        EXT_SECTION,
        (b.0.len() as u64).saturating_sub(dir),
    )?;
    let mut hwcaps = None;
    let mut generator = None;
    for i in 0..u64::from(count) {
        let s = dir + i * EXT_SECTION as u64;
        work.spend(EXT_SECTION as u64)?;
        let tag = b.u32("extension section", s)?;
        let off = u64::from(b.u32("extension section", s + 8)?);
        let size = u64::from(b.u32("extension section", s + 12)?);
        let data = b.range("extension data", off, size)?;
        match tag {
            EXTENSION_TAG_GENERATOR => {
                if generator.is_some() {
                    return Err(bad("two generator sections".into()));
                }
                strings.spend(data.len())?;
                work.spend(data.len() as u64)?;
                generator = Some(data.to_vec());
            }
            EXTENSION_TAG_GLIBC_HWCAPS => {
                if hwcaps.is_some() {
                    return Err(bad("two glibc-hwcaps sections".into()));
                }
                if off & 3 != 0 || size & 3 != 0 || size == 0 {
                    return Err(bad(format!(
                        "glibc-hwcaps section at {off} of {size} bytes (must be 4-aligned, a non-zero multiple of 4)"
                    )));
                }
                let mut names: Vec<Vec<u8>> = Vec::with_capacity(data.len() / 4);
                for w in data.chunks_exact(4) {
                    let idx = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
                    work.spend(4)?;
                    let name = strings.get("glibc-hwcaps name", idx, work)?;
                    if let Some(prev) = names.last() {
                        let (order, units) = cmp_len(prev, &name);
                        work.spend(units)?;
                        if order != Ordering::Less {
                            return Err(bad("glibc-hwcaps names are not sorted and unique".into()));
                        }
                    }
                    names.push(name);
                }
                hwcaps = Some(names);
            }
            // Unknown tags are ignored, as the loader does.
            _ => {}
        }
    }
    Ok((hwcaps.unwrap_or_default(), generator))
}

/// Cache flags for a library from its ELF header (the first 64 bytes), as
/// ldconfig's readelflib.c for each architecture computes them. None for
/// non-ELF input or a machine/ABI glibc's ldconfig would not cache.
pub fn elf_cache_flags(header: &[u8]) -> Option<i32> {
    if header.get(..4)? != b"\x7fELF" {
        return None;
    }
    let class64 = match *header.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let big = match *header.get(5)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let u16_at = |o: usize| -> Option<u16> {
        let b: [u8; 2] = header.get(o..o + 2)?.try_into().ok()?;
        Some(if big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    };
    let u32_at = |o: usize| -> Option<u32> {
        let b: [u8; 4] = header.get(o..o + 4)?.try_into().ok()?;
        Some(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let machine = u16_at(18)?;
    let e_flags = u32_at(if class64 { 48 } else { 36 })?;
    const EM_SPARC: u16 = 2;
    const EM_386: u16 = 3;
    const EM_MIPS: u16 = 8;
    const EM_SPARC32PLUS: u16 = 18;
    const EM_PPC: u16 = 20;
    const EM_PPC64: u16 = 21;
    const EM_S390: u16 = 22;
    const EM_ARM: u16 = 40;
    const EM_SPARCV9: u16 = 43;
    const EM_IA_64: u16 = 50;
    const EM_X86_64: u16 = 62;
    const EM_AARCH64: u16 = 183;
    const EM_RISCV: u16 = 243;
    let libc6 = FLAG_ELF_LIBC6;
    Some(match (machine, class64) {
        (EM_X86_64, true) => FLAG_X8664_LIB64 | libc6,
        (EM_X86_64, false) => FLAG_X8664_LIBX32 | libc6,
        (EM_386, false) => libc6,
        (EM_AARCH64, true) => FLAG_AARCH64_LIB64 | libc6,
        (EM_ARM, false) => {
            const EF_ARM_EABI_VER5: u32 = 0x0500_0000;
            const EF_ARM_ABI_FLOAT_SOFT: u32 = 0x200;
            const EF_ARM_ABI_FLOAT_HARD: u32 = 0x400;
            if e_flags & 0xff00_0000 == EF_ARM_EABI_VER5 && e_flags & EF_ARM_ABI_FLOAT_HARD != 0 {
                FLAG_ARM_LIBHF | libc6
            } else if e_flags & 0xff00_0000 == EF_ARM_EABI_VER5
                && e_flags & EF_ARM_ABI_FLOAT_SOFT != 0
            {
                FLAG_ARM_LIBSF | libc6
            } else {
                libc6
            }
        }
        (EM_PPC64, true) => FLAG_POWERPC_LIB64 | libc6,
        (EM_PPC, false) => libc6,
        (EM_S390, true) => FLAG_S390_LIB64 | libc6,
        (EM_S390, false) => libc6,
        (EM_SPARCV9, true) => FLAG_SPARC_LIB64 | libc6,
        (EM_SPARC | EM_SPARC32PLUS, false) => libc6,
        (EM_IA_64, true) => FLAG_IA64_LIB64 | libc6,
        (EM_MIPS, _) => {
            const EF_MIPS_ABI2: u32 = 0x20;
            const EF_MIPS_NAN2008: u32 = 0x400;
            let nan2008 = e_flags & EF_MIPS_NAN2008 != 0;
            match (class64, e_flags & EF_MIPS_ABI2 != 0, nan2008) {
                (true, _, false) => FLAG_MIPS64_LIBN64 | libc6,
                (true, _, true) => FLAG_MIPS64_LIBN64_NAN2008 | libc6,
                (false, true, false) => FLAG_MIPS64_LIBN32 | libc6,
                (false, true, true) => FLAG_MIPS64_LIBN32_NAN2008 | libc6,
                (false, false, true) => FLAG_MIPS_LIB32_NAN2008 | libc6,
                (false, false, false) => libc6,
            }
        }
        (EM_RISCV, _) => {
            const EF_RISCV_RVC: u32 = 0x1;
            const EF_RISCV_FLOAT_ABI: u32 = 0x6;
            if e_flags & !(EF_RISCV_FLOAT_ABI | EF_RISCV_RVC) != 0 {
                return None;
            }
            match e_flags & EF_RISCV_FLOAT_ABI {
                0x0 => FLAG_RISCV_FLOAT_ABI_SOFT | libc6,
                0x4 => FLAG_RISCV_FLOAT_ABI_DOUBLE | libc6,
                _ => return None,
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
