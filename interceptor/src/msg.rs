//! The one-line stderr refusal message, rate-limited (first, then at most
//! once per second per process).

use crate::fmt::Buf;
use crate::sys;
use core::sync::atomic::{AtomicU64, Ordering::*};

static LAST: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

pub fn refused(api: &[u8], n: u64, slice: u64, ordinal: i32, used: u64) {
    let now = sys::monotonic_ns().max(1);
    let last = LAST.load(Relaxed);
    if last != 0 && now.saturating_sub(last) < 1_000_000_000 {
        SUPPRESSED.fetch_add(1, Relaxed);
        return;
    }
    if LAST.compare_exchange(last, now, Relaxed, Relaxed).is_err() {
        SUPPRESSED.fetch_add(1, Relaxed);
        return;
    }
    let mut b = Buf::<256>::new();
    b.push(b"gpu-quota: ");
    b.push(api);
    b.push(b" of ");
    b.push_size(n);
    b.push(b" refused: slice ");
    b.push_size(slice);
    b.push(b" on GPU ");
    b.push_i64(ordinal as i64);
    b.push(b", ");
    b.push_size(used);
    b.push(b" in use by this container");
    let sup = SUPPRESSED.swap(0, Relaxed);
    if sup > 0 {
        b.push(b" (");
        b.push_u64(sup);
        b.push(b" more refusals not shown)");
    }
    b.push(b"\n");
    sys::write_stderr(b.bytes());
}
