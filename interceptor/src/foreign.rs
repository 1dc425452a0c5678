//! GPUs outside the container's slice: fail closed.
//!
//! The hook's `limits` file names the slice's GPUs by UUID (`gpus=`). A
//! container may still see other GPUs — `--gpus all` next to a one-GPU slice,
//! a CDI device the runtime could not narrow, a node made by hand. Such a GPU
//! gets a limit of 0: every allocation on it is refused with one line naming
//! it, and cuMemGetInfo, cuDeviceTotalMem and NVML report 0 total and 0 free
//! for it. It stays visible (same ordinals, same NVML indices): hiding it
//! would mean renumbering devices in every call that takes or returns an
//! ordinal, handle or UUID, and frameworks (PyTorch, JAX, CuPy,
//! nvidia-smi) handle a visible GPU that reports no memory: they enumerate
//! it, and fail with an out-of-memory error only when asked to use it.
//!
//! Only a container's limits file with a `gpus=` list has a slice to compare
//! against; standalone use (`GPU_QUOTA_VRAM`) and an old hook's file without
//! the list keep applying the slice to every GPU.

use crate::config;
use crate::fmt::Buf;
use crate::state::{config, Source};
use crate::symbols::{real_fn, S};
use core::sync::atomic::{AtomicU8, Ordering::*};
use libc::c_int;

const UNKNOWN: u8 = 0;
const OWN: u8 = 1;
const FOREIGN: u8 = 2;

/// Per region device index: whether its UUID is part of the slice.
static KIND: [AtomicU8; config::MAX_GPUS] = [const { AtomicU8::new(UNKNOWN) }; config::MAX_GPUS];

/// The slice's GPU UUIDs, when this container has a list to compare with.
fn slice_list() -> Option<&'static [[u8; 16]]> {
    let c = config()?;
    if !c.enforce || !matches!(c.source, Source::Container | Source::StateDirEnv) {
        return None;
    }
    let l = &c.limits;
    if l.ngpus == 0 && !l.bad_gpus {
        return None; // an old hook's file: no list
    }
    Some(&l.gpus[..l.ngpus])
}

/// Does this container have a slice list to compare GPUs with?
pub fn has_slice_list() -> bool {
    slice_list().is_some()
}

/// Is this UUID outside the container's slice? (false without a list)
pub fn uuid_is_foreign(uuid: &[u8; 16]) -> bool {
    match slice_list() {
        Some(list) => !list.contains(uuid),
        None => false,
    }
}

/// Record what the UUID of region device `idx` is (called where the
/// ordinal's UUID was read and mapped to `idx`).
pub fn note(idx: usize, uuid: &[u8; 16]) {
    if idx < config::MAX_GPUS {
        let k = if uuid_is_foreign(uuid) { FOREIGN } else { OWN };
        KIND[idx].store(k, Relaxed);
    }
}

/// Is region device `idx` outside the slice? A device whose UUID could not
/// be read (its index fell back to the ordinal) counts as outside when
/// there is a list: it cannot be shown to be part of the slice.
#[inline]
pub fn is_foreign(idx: usize) -> bool {
    if idx >= config::MAX_GPUS {
        return false;
    }
    match KIND[idx].load(Relaxed) {
        OWN => false,
        FOREIGN => true,
        _ => slice_list().is_some(),
    }
}

fn push_uuid<const N: usize>(b: &mut Buf<N>, u: &[u8; 16]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    b.push(b"GPU-");
    for (i, x) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            b.push(b"-");
        }
        b.push(&[HEX[(x >> 4) as usize], HEX[(x & 15) as usize]]);
    }
}

/// The refusal line for a GPU outside the slice:
/// `gpu-quota: API of N refused: GPU-… (GPU 0) is not part of this
/// container's slice (GPU 1: 8.00 GiB)`; the slice's GPUs by ordinal where
/// this process sees them, else by UUID.
#[cold]
pub fn refused(api: &[u8], n: u64, ordinal: c_int) {
    let Some(c) = config() else { return };
    let Some(list) = slice_list() else { return };
    let Some(mut b) = crate::msg::gate::<512>() else {
        return;
    };
    b.push(b"gpu-quota: ");
    b.push(api);
    b.push(b" of ");
    b.push_size(n);
    b.push(b" refused: ");
    match crate::symbols::device_uuid(ordinal) {
        Some(u) => {
            push_uuid(&mut b, &u);
            b.push(b" (GPU ");
            b.push_i64(ordinal as i64);
            b.push(b")");
        }
        None => {
            b.push(b"GPU ");
            b.push_i64(ordinal as i64);
        }
    }
    b.push(b" is not part of this container's slice (");
    let count = {
        type F = unsafe extern "C" fn(*mut c_int) -> c_int;
        let mut k: c_int = 0;
        match real_fn!(S::cuDeviceGetCount, F) {
            Some(f) if unsafe { f(&mut k) } == 0 => k.clamp(0, 64),
            _ => 0,
        }
    };
    let slice = |u: &[u8; 16]| c.slice_of_uuid(u);
    for (i, u) in list.iter().enumerate() {
        if i > 0 {
            b.push(b", ");
        }
        match (0..count).find(|&o| crate::symbols::device_uuid(o).as_ref() == Some(u)) {
            Some(o) => {
                b.push(b"GPU ");
                b.push_i64(o as i64);
            }
            None => push_uuid(&mut b, u),
        }
        if let Some(v) = slice(u) {
            b.push(b": ");
            b.push_size(v);
        }
    }
    if list.is_empty() {
        b.push(b"no GPU");
    }
    b.push(b")");
    crate::msg::finish(b);
}
