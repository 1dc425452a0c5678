//! Per-process table pointer/handle -> (size, device): lock-free open
//! addressing with linear probing in an anonymous mapping (no malloc, no
//! lock). Deleted entries become tombstones that later inserts reuse.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering::*};

pub const KIND_DPTR: u32 = 1;
pub const KIND_VMM: u32 = 2;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_MIPMAP: u32 = 4;

const BITS: u32 = 20;
pub const CAPACITY: usize = 1 << BITS;
const PROBE_LIMIT: usize = 2048;
const EMPTY: u64 = 0;
const TOMB: u64 = u64::MAX;

#[repr(C)]
struct Entry {
    key: AtomicU64,
    size: AtomicU64,
    meta: AtomicU64, // dev | kind << 32
    _pad: u64,
}

const MAP_BYTES: usize = CAPACITY * core::mem::size_of::<Entry>();

pub struct Table {
    ents: AtomicPtr<Entry>,
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
fn home(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BITS)) as usize
}

impl Table {
    pub const fn new() -> Self {
        Table { ents: AtomicPtr::new(core::ptr::null_mut()) }
    }

    fn ents(&self) -> Option<&[Entry]> {
        let mut p = self.ents.load(Acquire);
        if p.is_null() {
            let m = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    MAP_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return None;
            }
            match self.ents.compare_exchange(core::ptr::null_mut(), m as *mut Entry, AcqRel, Acquire) {
                Ok(_) => p = m as *mut Entry,
                Err(other) => {
                    unsafe { libc::munmap(m, MAP_BYTES) };
                    p = other;
                }
            }
        }
        Some(unsafe { core::slice::from_raw_parts(p, CAPACITY) })
    }

    /// Forget everything (fork child). Not thread-safe by design: called
    /// from the atfork child handler, where only one thread exists.
    pub fn reset(&self) {
        let p = self.ents.swap(core::ptr::null_mut(), AcqRel);
        if !p.is_null() {
            unsafe { libc::munmap(p as *mut _, MAP_BYTES) };
        }
    }

    /// Insert; false when the key cannot be stored (table full / bad key).
    pub fn insert(&self, k: u64, kind: u32, size: u64, dev: u32) -> bool {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB {
            return false;
        }
        let ents = match self.ents() {
            Some(e) => e,
            None => return false,
        };
        let h = home(key);
        for i in 0..PROBE_LIMIT {
            let e = &ents[(h + i) & (CAPACITY - 1)];
            let cur = e.key.load(Acquire);
            if cur == EMPTY || cur == TOMB {
                // write the value first for a fresh slot's readers, then key
                if e.key.compare_exchange(cur, key, AcqRel, Acquire).is_ok() {
                    e.size.store(size, Release);
                    e.meta.store(dev as u64 | (kind as u64) << 32, Release);
                    return true;
                }
            }
        }
        false
    }

    /// Remove and return the record for k (None when unknown).
    pub fn remove(&self, k: u64, kind: u32) -> Option<Rec> {
        let key = mix(k, kind);
        if key == EMPTY || key == TOMB {
            return None;
        }
        let p = self.ents.load(Acquire);
        if p.is_null() {
            return None;
        }
        let ents = unsafe { core::slice::from_raw_parts(p, CAPACITY) };
        let h = home(key);
        for i in 0..PROBE_LIMIT {
            let e = &ents[(h + i) & (CAPACITY - 1)];
            let cur = e.key.load(Acquire);
            if cur == EMPTY {
                return None;
            }
            if cur == key {
                let size = e.size.load(Acquire);
                let meta = e.meta.load(Acquire);
                if e.key.compare_exchange(key, TOMB, AcqRel, Acquire).is_ok() {
                    return Some(Rec { size, dev: meta as u32, kind: (meta >> 32) as u32 });
                }
                return None; // a concurrent free of the same pointer won
            }
        }
        None
    }

    pub fn get(&self, k: u64, kind: u32) -> Option<Rec> {
        let key = mix(k, kind);
        let p = self.ents.load(Acquire);
        if p.is_null() || key == EMPTY || key == TOMB {
            return None;
        }
        let ents = unsafe { core::slice::from_raw_parts(p, CAPACITY) };
        let h = home(key);
        for i in 0..PROBE_LIMIT {
            let e = &ents[(h + i) & (CAPACITY - 1)];
            let cur = e.key.load(Acquire);
            if cur == EMPTY {
                return None;
            }
            if cur == key {
                let meta = e.meta.load(Acquire);
                return Some(Rec { size: e.size.load(Acquire), dev: meta as u32, kind: (meta >> 32) as u32 });
            }
        }
        None
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
        assert_eq!(t.remove(0x7000_0000_1000, KIND_DPTR), Some(Rec { size: 100, dev: 1, kind: KIND_DPTR }));
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
                assert_eq!(t.remove(0x1000 + i * 512 + round, KIND_DPTR).unwrap().size, i);
            }
        }
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
