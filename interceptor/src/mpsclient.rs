//! A compute share's MPS client settings, imposed where the driver reads
//! them. The CUDA driver reads `CUDA_MPS_*` from the environment when a
//! process initialises CUDA, and a process may change its own environment
//! before that (measured on the H200: raising its share, or leaving MPS by
//! unsetting the pipe directory). So every `cuInit` first writes the
//! grant's values over whatever the process set (gpuquota_formats::mps
//! spells them, as the host's spec does). Not a fast path: cuInit runs once
//! or a few times per process, so setenv's allocation and lock are fine.

use crate::state::config;
use gpuquota_formats::{grant, mps};

/// The share of this container's shared GPU, and that GPU's slice as it
/// is now: `None` outside a container with a share.
fn share() -> Option<(u32, u64)> {
    let g = config()?.grant.as_ref()?;
    let s = grant::share(g.table.gpus())?;
    // the grant's only GPU (grant::share)
    Some((s.sm_percent, g.vram(0)))
}

/// Set the client variables of the grant's share (nothing without one).
pub fn impose() {
    let Some((sm, vram)) = share() else { return };
    let pct = mps::thread_percentage(sm);
    let mem = mps::pinned_limit(vram);
    // Only where the process changed it: the container starts with these
    // values (core::spec), so the usual cuInit writes nothing, and a
    // process that leaves its environment alone never has it rewritten
    // under a thread reading it.
    let set = |k: &core::ffi::CStr, v: &[u8]| {
        let want = &v[..v.len() - 1];
        if crate::sys::getenv(k) == Some(want) {
            return;
        }
        // SAFETY: both NUL-terminated; setenv copies them
        unsafe { libc::setenv(k.as_ptr(), v.as_ptr() as *const libc::c_char, 1) };
    };
    set(
        mps::ENV_PIPE_DIRECTORY_C,
        mps::CONTAINER_PIPE_DIR_C.to_bytes_with_nul(),
    );
    set(mps::ENV_ACTIVE_THREAD_PERCENTAGE_C, pct.as_bytes_with_nul());
    set(mps::ENV_PINNED_DEVICE_MEM_LIMIT_C, mem.as_bytes_with_nul());
}
