//! A compute share's MPS client settings, imposed where the driver reads
//! them. The CUDA driver reads `CUDA_MPS_*` from the environment when a
//! process initialises CUDA, and a process may change its own environment
//! before that (measured on the H200: raising its share, or leaving MPS by
//! unsetting the pipe directory). So every `cuInit` first writes the
//! grant's values over whatever the process set (gpuquota_formats::mps
//! spells them, as the host's spec does). The percentage is the process's
//! part of the share: MPS bounds each client process, so a share split over
//! N processes (`sm-procs=N`) gives each 1/N of it, and crate::mpsslots
//! refuses `cuInit` to a process beyond N. Not a fast path: cuInit runs once
//! or a few times per process, so setenv's allocation and lock are fine.

use crate::cu::{CUresult, CUDA_ERROR_MPS_CONNECTION_FAILED, CUDA_SUCCESS};
use crate::state::config;
use gpuquota_formats::{grant, mps};

/// The share of this container's shared GPU, the processes it is split
/// over, that GPU's slice as it is now, and the host uid the share runs
/// as: `None` outside a container with a share.
fn share() -> Option<(u32, u32, u64, Option<u32>)> {
    let g = config()?.grant.as_ref()?;
    let s = grant::share(g.table.gpus())?;
    // the grant's only GPU (grant::share)
    Some((s.sm_percent, s.sm_procs, g.vram(0), s.sm_user))
}

/// This process's effective uid as the host sees it (what the daemon reads
/// from the socket): `geteuid()` through `/proc/self/uid_map` (identity
/// outside a user namespace). `None` where the map cannot be read.
fn host_euid() -> Option<u32> {
    // SAFETY: no arguments, cannot fail
    let uid = unsafe { libc::geteuid() } as u64;
    // the kernel takes at most 340 lines of at most 33 bytes
    let mut buf = [0u8; 12 * 1024];
    let n = crate::sys::read_file(c"/proc/self/uid_map".as_ptr(), &mut buf)?;
    buf[..n].split(|&c| c == b'\n').find_map(|line| {
        let mut f = line
            .split(|&c| c == b' ')
            .filter(|w| !w.is_empty())
            .map(|w| core::str::from_utf8(w).ok()?.parse::<u64>().ok());
        let (inside, outside, count) = (f.next()??, f.next()??, f.next()??);
        let off = uid.checked_sub(inside).filter(|&o| o < count)?;
        u32::try_from(outside.checked_add(off)?).ok()
    })
}

/// Set the client variables of the grant's share (nothing without one).
/// A process of host root in a container whose share was admitted for
/// another user (an operator's `exec --user 0`) is refused instead (`Err`,
/// the line printed): MPS would take its commands that steer the GPU's
/// server. A hostile process need not come here; the daemon refuses those
/// commands to the container's own user. So is a process beyond the
/// processes the share is split over (crate::mpsslots).
pub fn impose() -> Result<(), CUresult> {
    let Some((sm, procs, vram, user)) = share() else {
        return Ok(());
    };
    if let (Some(theirs), Some(0)) = (user, host_euid()) {
        if theirs != 0 {
            crate::msg::share_as_host_root(theirs);
            return Err(CUDA_ERROR_MPS_CONNECTION_FAILED);
        }
    }
    crate::mpsslots::join(sm, procs)?;
    let pct = mps::thread_percentage(sm, procs);
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
    Ok(())
}

/// After the driver's `cuInit` of a process [`impose`] let through: it is
/// one of its share's clients if that succeeded (crate::mpsslots::settle).
pub fn initialised(r: CUresult) {
    if share().is_some() {
        crate::mpsslots::settle(r == CUDA_SUCCESS);
    }
}
