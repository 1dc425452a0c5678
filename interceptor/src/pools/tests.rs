//! The pool bookkeeping against a private region and given reserves.
use super::*;
use crate::policy::testing::*;
use crate::policy::Budget;
use std::cell::Cell;

const M: u64 = 1 << 20;
const H: u64 = 0x900000;

/// A pool's charge is max(live, reserved): an allocation the reserve
/// covers costs nothing, a growth is admitted and then raised to the
/// driver's reserve (granularity), a free keeps the charge until a
/// refresh sees the reserve shrink. (Mutation: refresh targeting
/// `res` alone drops the charge below what is live.)
#[test]
fn the_charge_follows_what_the_pool_reserves() {
    let (r, s) = region();
    let h = TestHost::new(&[Some(64 * M)]);
    let b = Budget {
        region: r,
        slot: s,
        host: &h,
    };
    let p = Pools::new();
    let res = Cell::new(0u64);
    let reserved = |_| Some(res.get());
    let ok = || CUDA_SUCCESS;
    // 3 MiB; the driver reserves 4 (its granularity)
    res.set(4 * M);
    let (rc, pi) = p
        .alloc(&b, b"a", dev(0), Some(H), 3 * M, ok, &reserved)
        .ok()
        .unwrap();
    assert_eq!((rc, r.used(0)), (CUDA_SUCCESS, 4 * M));
    // 1 MiB more fits in the reserve: nothing admitted
    p.alloc(&b, b"a", dev(0), Some(H), M, ok, &reserved)
        .ok()
        .unwrap();
    assert_eq!(r.used(0), 4 * M);
    // frees keep the charge (the pool keeps the memory) ...
    let rec = |size| Rec {
        size,
        dev: pi as u32,
        kind: KIND_POOLPTR,
    };
    p.freed(&b, rec(3 * M));
    assert_eq!(r.used(0), 4 * M);
    assert!(p.any_dirty());
    // ... until a synchronisation sees the reserve go to 2 MiB; the
    // 1 MiB still live stays charged whatever the reserve
    res.set(2 * M);
    p.sync(&b, true, &reserved);
    assert_eq!(r.used(0), 2 * M);
    res.set(0);
    assert!(p.refresh_all(&b, None, true, &reserved));
    assert_eq!(r.used(0), M, "what is live stays charged");
}

/// Beyond the slice the growth is refused and nothing stays reserved;
/// a capture defers the refresh (dirty, driver not asked).
/// (Mutation: not undoing `pending` on refusal makes the next
/// allocation need more than it asks.)
#[test]
fn refusal_and_capture_deferral() {
    let (r, s) = region();
    let h = TestHost::new(&[Some(8 * M)]);
    let b = Budget {
        region: r,
        slot: s,
        host: &h,
    };
    let p = Pools::new();
    let asked = Cell::new(0);
    let reserved = |_| {
        asked.set(asked.get() + 1);
        Some(0)
    };
    let (rc, _) = p
        .alloc(&b, b"a", dev(0), Some(H), 9 * M, || CUDA_SUCCESS, &reserved)
        .ok()
        .unwrap();
    assert_eq!(rc, CUDA_ERROR_OUT_OF_MEMORY);
    let (rc, pi) = p
        .alloc(&b, b"a", dev(0), Some(H), 8 * M, || CUDA_SUCCESS, &reserved)
        .ok()
        .unwrap();
    assert_eq!((rc, r.used(0)), (CUDA_SUCCESS, 8 * M));
    p.freed(
        &b,
        Rec {
            size: 8 * M,
            dev: pi as u32,
            kind: KIND_POOLPTR,
        },
    );
    let before = asked.get();
    p.sync(&b, false, &reserved);
    assert_eq!(asked.get(), before, "asked the driver during a capture");
    assert_eq!(r.used(0), 8 * M);
    p.sync(&b, true, &reserved);
    assert_eq!(r.used(0), 0);
}

/// A destroyed pool gives back what no allocation holds at once and
/// the rest with each free; an unknown pool is not followed.
/// (Mutation: destroyed() not releasing `c - live` leaves 6 MiB.)
#[test]
fn destroy_gives_back() {
    let (r, s) = region();
    let h = TestHost::new(&[Some(64 * M)]);
    let b = Budget {
        region: r,
        slot: s,
        host: &h,
    };
    let p = Pools::new();
    let reserved = |_| Some(8 * M);
    let (_, pi) = p
        .alloc(&b, b"a", dev(0), Some(H), 2 * M, || CUDA_SUCCESS, &reserved)
        .ok()
        .unwrap();
    assert_eq!(r.used(0), 8 * M);
    p.destroyed(&b, H);
    assert_eq!(r.used(0), 2 * M);
    p.freed(
        &b,
        Rec {
            size: 2 * M,
            dev: pi as u32,
            kind: KIND_POOLPTR,
        },
    );
    assert_eq!(r.used(0), 0);
    assert!(p
        .alloc(&b, b"a", dev(0), None, M, || CUDA_SUCCESS, &reserved)
        .is_err());
}
