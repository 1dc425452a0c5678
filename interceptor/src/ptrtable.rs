//! Per-process table pointer/handle -> (size, device): lock-free open
//! addressing with linear probing in an anonymous mapping (no malloc, no
//! lock). Deleted entries become tombstones that later inserts reuse.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::*};

pub const KIND_DPTR: u32 = 1;
pub const KIND_VMM: u32 = 2;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_MIPMAP: u32 = 4;

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
