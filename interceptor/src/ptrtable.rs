//! Per-process table pointer/handle -> (size, device): lock-free open
//! addressing with linear probing in an anonymous mapping (no malloc, no
//! lock). Deleted entries become tombstones that later inserts reuse.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::*};

pub const KIND_DPTR: u32 = 1;
pub const KIND_VMM: u32 = 2;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_MIPMAP: u32 = 4;
/// raw: references to a VMM handle (handle refs + mappings), see vmm.rs
pub const KIND_VMMREF: u32 = 5;
/// packed: a VMM mapping at a virtual address (size, device)
pub const KIND_MAP: u32 = 6;
/// raw: the handle mapped at a virtual address
pub const KIND_MAPH: u32 = 7;
/// packed: a stream-ordered allocation (size, pool index in `dev`)
pub const KIND_POOLPTR: u32 = 8;
/// Raw values carry 56 bits of payload (the top byte is the kind).
pub const RAW_MASK: u64 = (1 << 56) - 1;

/// Two levels: a small primary (1 MiB, stays cache-resident for the usual
/// few thousand live allocations) and a large overflow level that is only
/// mapped and searched once the primary could not take a key.
const L1_BITS: u32 = 16;
const L1_PROBES: usize = 64;
const L2_BITS: u32 = 20;
const L2_PROBES: usize = 2048;
pub const CAPACITY: usize = (1 << L1_BITS) + (1 << L2_BITS);
const EMPTY: u64 = 0;
const TOMB: u64 = u64::MAX;

/// 16 bytes: key, and value = size (low 48 bits) | dev << 48 | kind << 56.
#[repr(C)]
struct Entry {
    key: AtomicU64,
    val: AtomicU64,
}

const SIZE_MASK: u64 = (1 << 48) - 1;

#[inline]
fn pack(size: u64, dev: u32, kind: u32) -> u64 {
    (size & SIZE_MASK) | ((dev as u64 & 0xff) << 48) | ((kind as u64 & 0xff) << 56)
}

#[inline]
fn unpack(v: u64) -> Rec {
    Rec {
        size: v & SIZE_MASK,
        dev: ((v >> 48) & 0xff) as u32,
        kind: (v >> 56) as u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    pub size: u64,
    pub dev: u32,
    pub kind: u32,
}

#[inline]
fn mix(k: u64, kind: u32) -> u64 {
    k ^ ((kind as u64) << 58)
}

#[inline]
fn home(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

struct Level {
    ents: AtomicPtr<Entry>,
    bits: u32,
    probes: usize,
}

impl Level {
    const fn new(bits: u32, probes: usize) -> Self {
        Level {
            ents: AtomicPtr::new(core::ptr::null_mut()),
            bits,
            probes,
        }
    }
    fn bytes(&self) -> usize {
        (1usize << self.bits) * core::mem::size_of::<Entry>()
    }
    fn get_or_map(&self) -> Option<&[Entry]> {
        let mut p = self.ents.load(Acquire);
        if p.is_null() {
            let m = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    self.bytes(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return None;
            }
            match self.ents.compare_exchange(
                core::ptr::null_mut(),
                m as *mut Entry,
                AcqRel,
                Acquire,
            ) {
                Ok(_) => p = m as *mut Entry,
                Err(other) => {
                    unsafe { libc::munmap(m, self.bytes()) };
                    p = other;
                }
            }
        }
        Some(unsafe { core::slice::from_raw_parts(p, 1 << self.bits) })
    }
    /// Every live (key, value) pair.
    fn scan(&self, f: &mut dyn FnMut(u64, u64)) {
        if let Some(ents) = self.mapped() {
            for e in ents {
                let k = e.key.load(Acquire);
                if k != EMPTY && k != TOMB {
                    f(k, e.val.load(Acquire));
                }
            }
        }
    }
    /// The value cell of a key (for read-modify-write of raw entries).
    fn cell(&self, key: u64) -> Option<&AtomicU64> {
        let ents = self.mapped()?;
        let mask = (1usize << self.bits) - 1;
        let h = home(key, self.bits);
        for i in 0..self.probes {
            let e = &ents[(h + i) & mask];
            let cur = e.key.load(Acquire);
            if cur == EMPTY {
                return None;
            }
            if cur == key {
                return Some(&e.val);
            }
        }
        None
    }
    fn mapped(&self) -> Option<&[Entry]> {
        let p = self.ents.load(Acquire);
        if p.is_null() {
            None
        } else {
            Some(unsafe { core::slice::from_raw_parts(p, 1 << self.bits) })
        }
    }
    fn reset(&self) {
        let p = self.ents.swap(core::ptr::null_mut(), AcqRel);
        if !p.is_null() {
            unsafe { libc::munmap(p as *mut _, self.bytes()) };
        }
    }
    fn insert(&self, key: u64, val: u64) -> bool {
        let ents = match self.get_or_map() {
            Some(e) => e,
            None => return false,
        };
        let mask = (1usize << self.bits) - 1;
        let h = home(key, self.bits);
        for i in 0..self.probes {
            let e = &ents[(h + i) & mask];
            let cur = e.key.load(Acquire);
            if cur == EMPTY || cur == TOMB {
                // claim the key, then store the value: nobody looks the key up
                // before the allocation call that inserts it has returned
                if e.key.compare_exchange(cur, key, AcqRel, Acquire).is_ok() {
                    e.val.store(val, Release);
                    return true;
                }
            }
        }
        false
    }
    /// Find key; `take` turns it into a tombstone. Some(None) = found but a
    /// concurrent remover won.
    fn find(&self, key: u64, take: bool) -> Option<Option<Rec>> {
        let ents = self.mapped()?;
        let mask = (1usize << self.bits) - 1;
        let h = home(key, self.bits);
        for i in 0..self.probes {
            let e = &ents[(h + i) & mask];
            let cur = e.key.load(Acquire);
            if cur == EMPTY {
                return None;
            }
            if cur == key {
                let v = e.val.load(Acquire);
                if !take {
                    return Some(Some(unpack(v)));
                }
                if e.key.compare_exchange(key, TOMB, AcqRel, Acquire).is_ok() {
                    return Some(Some(unpack(v)));
                }
                return Some(None);
            }
        }
        None
    }
}

pub struct Table {
    l1: Level,
    l2: Level,
}

impl Table {
    pub const fn new() -> Self {
        Table {
            l1: Level::new(L1_BITS, L1_PROBES),
            l2: Level::new(L2_BITS, L2_PROBES),
        }
    }

    /// Forget everything (fork child). Called from the atfork child handler,
    /// where only one thread exists.
    pub fn reset(&self) {
        self.l1.reset();
        self.l2.reset();
    }

    /// Insert; false when the key cannot be stored (table full / bad key).
    pub fn insert(&self, k: u64, kind: u32, size: u64, dev: u32) -> bool {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB || size > SIZE_MASK {
            return false;
        }
        let v = pack(size, dev, kind);
        self.l1.insert(key, v) || self.l2.insert(key, v)
    }

    /// Remove and return the record for k (None when unknown).
    pub fn remove(&self, k: u64, kind: u32) -> Option<Rec> {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB {
            return None;
        }
        match self.l1.find(key, true) {
            Some(r) => r,
            None => self.l2.find(key, true).flatten(),
        }
    }

    /// Insert a raw 56-bit payload (false when it does not fit or the
    /// table is full).
    pub fn insert_raw(&self, k: u64, kind: u32, payload: u64) -> bool {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB || payload > RAW_MASK {
            return false;
        }
        let v = payload | ((kind as u64 & 0xff) << 56);
        self.l1.insert(key, v) || self.l2.insert(key, v)
    }

    /// Remove a raw entry, returning its payload.
    pub fn remove_raw(&self, k: u64, kind: u32) -> Option<u64> {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB {
            return None;
        }
        let r = match self.l1.find(key, true) {
            Some(r) => r,
            None => self.l2.find(key, true).flatten(),
        }?;
        Some(r.size | ((r.dev as u64) << 48))
    }

    /// The value cell of a raw entry: payload = value & RAW_MASK; callers
    /// only add/subtract small numbers, never touching the top byte.
    pub fn raw_cell(&self, k: u64, kind: u32) -> Option<&AtomicU64> {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB {
            return None;
        }
        self.l1.cell(key).or_else(|| self.l2.cell(key))
    }

    /// Call f(key, record) for every packed entry of `kind` (a snapshot;
    /// concurrent changes may or may not be seen).
    pub fn scan_kind(&self, kind: u32, f: &mut dyn FnMut(u64, Rec)) {
        let mut g = |key: u64, v: u64| {
            let r = unpack(v);
            if r.kind == kind {
                f(key ^ ((kind as u64) << 58), r);
            }
        };
        self.l1.scan(&mut g);
        self.l2.scan(&mut g);
    }

    pub fn get(&self, k: u64, kind: u32) -> Option<Rec> {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB {
            return None;
        }
        match self.l1.find(key, false) {
            Some(r) => r,
            None => self.l2.find(key, false).flatten(),
        }
    }
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn basic() {
        let t = Table::new();
        assert!(t.insert(0x7000_0000_1000, KIND_DPTR, 100, 1));
        assert!(t.insert(0x7000_0000_1000, KIND_VMM, 5, 0));
        assert_eq!(t.get(0x7000_0000_1000, KIND_DPTR).unwrap().size, 100);
        assert_eq!(
            t.remove(0x7000_0000_1000, KIND_DPTR),
            Some(Rec {
                size: 100,
                dev: 1,
                kind: KIND_DPTR
            })
        );
        assert_eq!(t.remove(0x7000_0000_1000, KIND_DPTR), None);
        assert_eq!(t.remove(0x7000_0000_1000, KIND_VMM).unwrap().size, 5);
        assert!(!t.insert(0, KIND_DPTR, 1, 0) || mix(0, KIND_DPTR) != 0);
        t.reset();
        assert_eq!(t.get(1, KIND_DPTR), None);
    }
    #[test]
    fn raw_and_scan() {
        let t = Table::new();
        assert!(t.insert_raw(0x5000, KIND_VMMREF, 1));
        assert!(!t.insert_raw(0x5001, KIND_VMMREF, 1 << 56));
        let c = t.raw_cell(0x5000, KIND_VMMREF).unwrap();
        c.fetch_add(2, SeqCst);
        assert_eq!(c.load(SeqCst) & RAW_MASK, 3);
        assert!(t.insert(0x7000, KIND_DPTR, 10, 2));
        assert!(t.insert(0x8000, KIND_DPTR, 20, 3));
        assert!(t.insert(0x8000, KIND_MAP, 30, 3));
        let mut seen = Vec::new();
        t.scan_kind(KIND_DPTR, &mut |k, r| seen.push((k, r.size)));
        seen.sort();
        assert_eq!(seen, vec![(0x7000, 10), (0x8000, 20)]);
        assert_eq!(t.remove_raw(0x5000, KIND_VMMREF), Some(3));
        assert!(t.raw_cell(0x5000, KIND_VMMREF).is_none());
    }
    #[test]
    fn churn() {
        let t = Table::new();
        for round in 0..50u64 {
            for i in 0..2000u64 {
                assert!(t.insert(0x1000 + i * 512 + round, KIND_DPTR, i, 0));
            }
            for i in 0..2000u64 {
                assert_eq!(
                    t.remove(0x1000 + i * 512 + round, KIND_DPTR).unwrap().size,
                    i
                );
            }
        }
    }
    #[test]
    fn overflow_level() {
        let t = Table::new();
        let n = 150_000u64; // more than the primary level holds
        for i in 0..n {
            assert!(
                t.insert(0x10_0000 + i * 4096, KIND_DPTR, i + 1, 0),
                "insert {i}"
            );
        }
        assert!(t.l2.mapped().is_some());
        for i in (0..n).rev() {
            assert_eq!(
                t.remove(0x10_0000 + i * 4096, KIND_DPTR).map(|r| r.size),
                Some(i + 1)
            );
        }
        assert_eq!(t.remove(0x10_0000, KIND_DPTR), None);
    }
    #[test]
    fn threads() {
        static T: Table = Table::new();
        let hs: Vec<_> = (0..4u64)
            .map(|th| {
                std::thread::spawn(move || {
                    for r in 0..200u64 {
                        for i in 0..100u64 {
                            let k = (th << 40) | (r << 20) | (i << 8);
                            assert!(T.insert(k, KIND_DPTR, i + 1, th as u32));
                        }
                        for i in 0..100u64 {
                            let k = (th << 40) | (r << 20) | (i << 8);
                            let rec = T.remove(k, KIND_DPTR).unwrap();
                            assert_eq!(rec.size, i + 1);
                            assert_eq!(rec.dev, th as u32);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
}
