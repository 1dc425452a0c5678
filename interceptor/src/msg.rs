//! The one-line stderr refusal message, rate-limited (first, then at most
//! once per second per process).

use crate::fmt::Buf;
use crate::sys;
use core::sync::atomic::{AtomicU64, Ordering::*};

static LAST: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// The rate limit: a buffer to write the line into when one may be printed
/// now (else the refusal is counted as suppressed).
pub fn gate<const N: usize>() -> Option<Buf<N>> {
    let now = sys::monotonic_ns().max(1);
    let last = LAST.load(Relaxed);
    if last != 0 && now.saturating_sub(last) < 1_000_000_000 {
        SUPPRESSED.fetch_add(1, Relaxed);
        return None;
    }
    if LAST.compare_exchange(last, now, Relaxed, Relaxed).is_err() {
        SUPPRESSED.fetch_add(1, Relaxed);
        return None;
    }
    Some(Buf::new())
}

/// End a line from `gate`: the suppressed count, the newline, stderr.
pub fn finish<const N: usize>(mut b: Buf<N>) {
    let sup = SUPPRESSED.swap(0, Relaxed);
    if sup > 0 {
        b.push(b" (");
        b.push_u64(sup);
        b.push(b" more refusals not shown)");
    }
    b.push(b"\n");
    sys::write_stderr(b.bytes());
}

/// The slice line: `n` bytes refused on a device with `used` in use.
pub fn refused(api: &[u8], n: u64, slice: u64, ordinal: i32, used: u64) {
    refused_past(api, n, b"slice ", slice, ordinal, used);
}

/// The limit line of a burstable slice: `n` bytes refused past its limit.
pub fn refused_limit(api: &[u8], n: u64, limit: u64, ordinal: i32, used: u64) {
    refused_past(api, n, b"burst limit ", limit, ordinal, used);
}

fn refused_past(api: &[u8], n: u64, what: &[u8], bound: u64, ordinal: i32, used: u64) {
    let Some(mut b) = gate::<256>() else { return };
    b.push(b"gpu-quota: ");
    b.push(api);
    b.push(b" of ");
    b.push_size(n);
    b.push(b" refused: ");
    b.push(what);
    b.push_size(bound);
    b.push(b" on GPU ");
    b.push_i64(ordinal as i64);
    b.push(b", ");
    b.push_size(used);
    b.push(b" in use by this container");
    finish(b);
}

/// A burst refused because the GPU lacks the free memory to lend.
pub fn burst_no_room(n: u64, free: u64, ordinal: i32) {
    let Some(mut b) = gate::<320>() else { return };
    b.push(b"gpu-quota: cuMemAlloc of ");
    b.push_size(n);
    b.push(b" refused: it is above this container's guarantee on GPU ");
    b.push_i64(ordinal as i64);
    b.push(b", and memory above a guarantee is lent only from what the GPU has free, ");
    b.push_size(free);
    b.push(b" now");
    finish(b);
}

/// An allocation within the guarantee that the driver still refused after
/// waiting for bursters to give memory back.
pub fn reclaim_failed(api: &[u8], n: u64, ordinal: i32, waited_ms: u64) {
    let Some(mut b) = gate::<400>() else { return };
    b.push(b"gpu-quota: ");
    b.push(api);
    b.push(b" of ");
    b.push_size(n);
    b.push(b" failed in the driver within this container's guarantee on GPU ");
    b.push_i64(ordinal as i64);
    b.push(b": memory lent to other containers could not be taken back in ");
    b.push_u64(waited_ms);
    b.push(b" ms; the host's event log (gpu-quota events) names the holders");
    finish(b);
}

/// A process of host root in a container whose compute share was admitted
/// for another host user, at cuInit.
pub fn share_as_host_root(theirs: u32) {
    let Some(mut b) = gate::<320>() else { return };
    b.push(b"gpu-quota: cuInit refused: this process runs as host root, and its container's compute share is served to host uid ");
    b.push_u64(theirs as u64);
    b.push(b" only (MPS lets host root steer the GPU's server); run it as the container's user");
    finish(b);
}

/// A process beyond the CUDA processes its container's compute share is
/// split over (`sm-procs=`), at cuInit.
pub fn share_processes_full(sm: u32, procs: u32, running: u32) {
    let Some(mut b) = gate::<384>() else { return };
    b.push(b"gpu-quota: this container's compute share (sm=");
    b.push_u64(sm as u64);
    b.push(b"%) is split over ");
    b.push_u64(procs as u64);
    b.push(if procs == 1 {
        b" CUDA process (sm-procs=" as &[u8]
    } else {
        b" CUDA processes (sm-procs="
    });
    b.push_u64(procs as u64);
    b.push(b"), and ");
    b.push_u64(running as u64);
    b.push(if running == 1 {
        b" already runs" as &[u8]
    } else {
        b" already run"
    });
    b.push(b"; end one, or start the container with a larger sm-procs (each process then gets less of the share)");
    finish(b);
}

/// A process of a container with a compute share whose CUDA processes
/// cannot be counted (no usable usage file, or no slot), at cuInit.
pub fn share_uncounted() {
    let Some(mut b) = gate::<256>() else { return };
    b.push(b"gpu-quota: this container's CUDA processes cannot be counted (its usage file is unusable or full), and its compute share is split over a count of them: refusing cuInit");
    finish(b);
}

/// A slice that cannot hold the context being created: the one line says
/// so, with the smallest slice that could (the context and one 2 MiB
/// allocation), as admission says it where the charge was known there.
pub fn context_too_big(charge: u64, slice: u64, ordinal: i32) {
    let Some(mut b) = gate::<256>() else { return };
    b.push(b"gpu-quota: this container's slice (");
    b.push_size(slice);
    b.push(b" on GPU ");
    b.push_i64(ordinal as i64);
    b.push(b") cannot hold a CUDA context, which is charged ");
    b.push_size(charge);
    b.push(b" per process here; ask for at least ");
    b.push_size(charge + (2 << 20));
    finish(b);
}
