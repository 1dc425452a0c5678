//! ldconfig's order of the cache's entries (glibc `elf/cache.c`'s
//! `compare()` and `elf/dl-cache.c`'s `_dl_cache_libcmp`), computed within
//! the work budget: every key ranked once, then compared as integers.
use super::*;

impl LdCache {
    /// Put the entries in ldconfig's order (stable: entries that compare
    /// equal keep their relative order). `to_bytes` does this itself.
    pub fn sort_entries(&mut self) {
        self.sort_entries_within(&mut Work::unlimited())
            .expect("an unlimited budget is never exceeded");
    }

    pub(super) fn sort_entries_within(&mut self, work: &mut Work) -> Result<()> {
        let keys = self.sort_keys(work)?;
        let mut pairs: Vec<(SortKey, Entry)> = keys
            .into_iter()
            .zip(std::mem::take(&mut self.entries))
            .collect();
        let mut compared = 0u64;
        pairs.sort_by(|a, b| {
            compared += 1;
            a.0.cmp(&b.0)
        });
        self.entries = pairs.into_iter().map(|(_, e)| e).collect();
        work.spend(compared * SORT_KEY_UNITS)
    }

    /// Each entry's place in ldconfig's order as a fixed-size key, every
    /// string looked at a bounded number of times: the distinct keys are
    /// ranked once by [`libcmp`] (through [`libcmp_key`]), the glibc-hwcaps
    /// names once by strcmp (the parser proved them sorted and unique, so
    /// that sort is one linear pass).
    pub(super) fn sort_keys(&self, work: &mut Work) -> Result<Vec<SortKey>> {
        let mut ids: HashMap<&[u8], u32> = HashMap::new();
        let mut distinct: Vec<&[u8]> = Vec::new();
        let mut key_id = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            let k = c_str(&e.key);
            work.spend(2 * k.len() as u64 + 1)?;
            let id = *ids.entry(k).or_insert_with(|| {
                distinct.push(k);
                (distinct.len() - 1) as u32
            });
            key_id.push(id);
        }
        let mut encoded = Vec::with_capacity(distinct.len());
        for k in distinct {
            let key = libcmp_key(k);
            work.spend(key.len() as u64)?;
            encoded.push(key);
        }
        let key_rank = rank(&encoded, work)?;
        // index 0: "", what an out-of-range index compares as
        let mut names: Vec<&[u8]> = vec![b""];
        for h in &self.hwcaps {
            let n = c_str(h);
            work.spend(n.len() as u64 + 1)?;
            names.push(n);
        }
        let name_rank = rank(&names, work)?;
        work.spend(self.entries.len() as u64 * NEW_ENTRY as u64)?;
        Ok(self
            .entries
            .iter()
            .zip(key_id)
            .map(|(e, id)| {
                let (hwcaps, legacy) = if e.is_hwcaps_extension() {
                    let i = e.hwcap as u32 as usize;
                    let at = if i < self.hwcaps.len() { i + 1 } else { 0 };
                    // In ldconfig a glibc-hwcaps entry's in-memory hwcap is 0.
                    (name_rank[at], 0)
                } else {
                    (u32::MAX, e.hwcap)
                };
                SortKey {
                    key: Reverse(key_rank[id as usize]),
                    flags: Reverse(e.flags),
                    hwcaps,
                    bits: Reverse(legacy.count_ones()),
                    hwcap: Reverse(legacy),
                }
            })
            .collect())
    }

    /// The glibc-hwcaps subdirectory an entry belongs to (empty when its
    /// index is out of range; `parse` never yields such entries).
    #[cfg(test)]
    fn hwcaps_name(&self, e: &Entry) -> Option<&[u8]> {
        if !e.is_hwcaps_extension() {
            return None;
        }
        Some(
            self.hwcaps
                .get(e.hwcap as u32 as usize)
                .map(|n| c_str(n))
                .unwrap_or(b""),
        )
    }

    /// ldconfig's `compare()` (elf/cache.c), as a total order: the
    /// reference [`SortKey`] is tested against.
    #[cfg(test)]
    pub(super) fn compare(&self, e1: &Entry, e2: &Entry) -> Ordering {
        let res = libcmp(c_str(&e2.key), c_str(&e1.key));
        if res != Ordering::Equal {
            return res;
        }
        match e2.flags.cmp(&e1.flags) {
            Ordering::Equal => {}
            o => return o,
        }
        let (h1, h2) = (self.hwcaps_name(e1), self.hwcaps_name(e2));
        match (h1, h2) {
            (Some(_), None) => return Ordering::Less,
            (None, Some(_)) => return Ordering::Greater,
            (Some(a), Some(b)) if a != b => return a.cmp(b),
            _ => {}
        }
        // In ldconfig a glibc-hwcaps entry's in-memory hwcap is 0.
        let legacy = |e: &Entry, h: Option<&[u8]>| if h.is_some() { 0 } else { e.hwcap };
        let (w1, w2) = (legacy(e1, h1), legacy(e2, h2));
        w2.count_ones()
            .cmp(&w1.count_ones())
            .then_with(|| w2.cmp(&w1))
    }
}

/// An entry's place in ldconfig's `compare()` order; derived `Ord` compares
/// the fields in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SortKey {
    /// Rank of the key by [`libcmp`], descending.
    key: Reverse<u32>,
    flags: Reverse<i32>,
    /// Rank of the glibc-hwcaps name (ascending), `u32::MAX` for a legacy
    /// entry: glibc-hwcaps entries first.
    hwcaps: u32,
    /// The most specific legacy hwcap first.
    bits: Reverse<u32>,
    hwcap: Reverse<u64>,
}

/// Each item's rank in memcmp order (equal items share a rank), from one
/// sort whose comparisons are counted; an already sorted input costs one
/// linear pass.
fn rank<T: AsRef<[u8]>>(items: &[T], work: &mut Work) -> Result<Vec<u32>> {
    let mut idx: Vec<u32> = (0..items.len() as u32).collect();
    let mut units = 0u64;
    let at = |i: u32| items[i as usize].as_ref();
    idx.sort_by(|&a, &b| {
        let (o, u) = cmp_len(at(a), at(b));
        units += u;
        o
    });
    work.spend(units)?;
    let mut ranks = vec![0u32; items.len()];
    let mut r = 0u32;
    for w in 1..idx.len() {
        let (o, u) = cmp_len(at(idx[w - 1]), at(idx[w]));
        work.spend(u)?;
        if o != Ordering::Equal {
            r += 1;
        }
        ranks[idx[w] as usize] = r;
    }
    Ok(ranks)
}

/// A byte string whose memcmp order is [`libcmp`]'s order (equal exactly
/// when libcmp says Equal), about as long as `s`. Each token is
/// self-delimiting, so comparing encodings compares tokens: a byte (never
/// a digit) is one byte below [`NUMBER_TAG`], its C `char` value biased to
/// 0..=255 with the ten digit values taken out; a digit run is
/// `NUMBER_TAG` and its value biased to unsigned, big-endian.
pub(super) fn libcmp_key(s: &[u8]) -> Vec<u8> {
    let min = i32::from(c_char::MIN);
    let digits = i32::from(b'0' as c_char) - min;
    let code = |c: u8| {
        let v = i32::from(c as c_char) - min;
        (if v > digits + 9 { v - 10 } else { v }) as u8
    };
    let mut out = Vec::with_capacity(s.len() + 1);
    let mut i = 0;
    while let Some(&c) = s.get(i) {
        i += 1;
        if !c.is_ascii_digit() {
            out.push(code(c));
            continue;
        }
        // the C code's wrapping int arithmetic, as `tokens`
        let mut v = i32::from(c - b'0');
        while let Some(&d) = s.get(i).filter(|d| d.is_ascii_digit()) {
            v = v.wrapping_mul(10).wrapping_add(i32::from(d - b'0'));
            i += 1;
        }
        out.push(NUMBER_TAG);
        out.extend_from_slice(&((v as u32) ^ 0x8000_0000).to_be_bytes());
    }
    out.push(code(0));
    out
}

/// Above every byte's code in [`libcmp_key`] (at most 255 - 10).
const NUMBER_TAG: u8 = 246;

/// memcmp order of `a` and `b`, and the most bytes that can take to find
/// (the shorter one's length, and one more).
pub(super) fn cmp_len(a: &[u8], b: &[u8]) -> (Ordering, u64) {
    (a.cmp(b), a.len().min(b.len()) as u64 + 1)
}

/// One token of `_dl_cache_libcmp`: a run of digits (its value, computed
/// with the C code's wrapping int arithmetic) or one other byte as a C
/// `char` (signed on x86), the terminating NUL being 0.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Token {
    Char(i32),
    Number(i32),
}

fn tokens(s: &[u8]) -> impl Iterator<Item = Token> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let &c = s.get(i)?;
        i += 1;
        if !c.is_ascii_digit() {
            return Some(Token::Char(c as c_char as i32));
        }
        let mut v = i32::from(c - b'0');
        while let Some(&d) = s.get(i).filter(|d| d.is_ascii_digit()) {
            v = v.wrapping_mul(10).wrapping_add(i32::from(d - b'0'));
            i += 1;
        }
        Some(Token::Number(v))
    })
    .chain(std::iter::once(Token::Char(0)))
}

/// glibc's `_dl_cache_libcmp` (elf/dl-cache.c): byte-wise, but runs of
/// digits compare by value and a digit sorts after any other byte. The C
/// code returns `val1 - val2` for numbers; this compares the values, which
/// differs only when that subtraction overflows (digit runs over 2^31
/// apart, where the C order is not transitive); this one is a total order.
pub fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    tokens(a).cmp(tokens(b))
}
