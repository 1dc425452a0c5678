//! A compute share's MPS client settings, for both sides: the host puts
//! them into the container's environment (core::spec) and libgpuquota.so
//! sets them again at every `cuInit`, where the CUDA driver reads them.
//!
//! The driver reads these variables when a process initialises CUDA, and a
//! process may change its own environment before that (measured on the
//! H200, docs/gpu-runs/2026-12-02-h200-mps-facts: launched at 25 % and
//! setting 100 % before init ran at 100 %; unsetting the pipe directory ran
//! outside MPS on the whole GPU). The container's environment is therefore
//! only a default: the interceptor's `cuInit` writes these values over
//! whatever the process set, just before the driver reads them.
use core::ffi::CStr;

/// The host's MPS daemons (core::mps): `<state_dir>/`[`DAEMONS_SUBDIR`]`/<GPU
/// uuid>/`[`DAEMON_PIPE`]`/` holds each daemon's sockets, the longest named
/// [`LONGEST_SOCKET`] (`control` and `control_privileged`, measured on the
/// H200: docs/gpu-runs/2026-12-02-h200-mps-facts).
pub const DAEMONS_SUBDIR: &str = "mps";
pub const DAEMON_PIPE: &str = "pipe";
pub const LONGEST_SOCKET: &str = "control_privileged";
/// An NVML GPU UUID's length: `GPU-` and 36 characters (a MIG device's
/// `MIG-…` is as long).
pub const GPU_UUID_LEN: usize = 40;

/// The state directory's mount point for the GPU's MPS pipe directory
/// (inside [`crate::layout::CONTAINER_DIR`], read-only).
pub const PIPE_SUBDIR: &str = "mps";
/// The same, as the container sees it.
pub const CONTAINER_PIPE_DIR: &str = "/run/gpu-quota/mps";
pub const CONTAINER_PIPE_DIR_C: &CStr = c"/run/gpu-quota/mps";
/// The daemon's client socket, the one entry of a pipe directory a
/// container sees (core::mps::view), by its name and by its path there.
pub const CLIENT_SOCKET: &str = "control";
pub const CONTAINER_CONTROL_SOCKET_C: &CStr = c"/run/gpu-quota/mps/control";

pub const ENV_PIPE_DIRECTORY_C: &CStr = c"CUDA_MPS_PIPE_DIRECTORY";
pub const ENV_ACTIVE_THREAD_PERCENTAGE_C: &CStr = c"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
pub const ENV_PINNED_DEVICE_MEM_LIMIT_C: &CStr = c"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
pub const ENV_LOG_DIRECTORY_C: &CStr = c"CUDA_MPS_LOG_DIRECTORY";

use crate::keys::str_of;

pub const ENV_PIPE_DIRECTORY: &str = str_of(ENV_PIPE_DIRECTORY_C);
pub const ENV_ACTIVE_THREAD_PERCENTAGE: &str = str_of(ENV_ACTIVE_THREAD_PERCENTAGE_C);
pub const ENV_PINNED_DEVICE_MEM_LIMIT: &str = str_of(ENV_PINNED_DEVICE_MEM_LIMIT_C);
pub const ENV_LOG_DIRECTORY: &str = str_of(ENV_LOG_DIRECTORY_C);

/// The client variables a share sets, in the order they are set.
pub const CLIENT_ENV: [&str; 3] = [
    ENV_PIPE_DIRECTORY,
    ENV_ACTIVE_THREAD_PERCENTAGE,
    ENV_PINNED_DEVICE_MEM_LIMIT,
];

/// Room for one value with its NUL.
pub const VALUE_MAX: usize = 32;

/// A value in a fixed buffer, NUL-terminated for setenv(3).
#[derive(Clone, Copy)]
pub struct Value {
    buf: [u8; VALUE_MAX],
    len: usize,
}

impl Value {
    fn new() -> Value {
        Value {
            buf: [0; VALUE_MAX],
            len: 0,
        }
    }
    fn push(&mut self, s: &[u8]) {
        for &b in s {
            if self.len + 1 < VALUE_MAX {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }
    fn push_u64(&mut self, mut x: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (x % 10) as u8;
            x /= 10;
            if x == 0 {
                break;
            }
        }
        self.push(&d[i..]);
    }
    /// The value without its NUL.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
    /// The value with its NUL.
    pub fn as_bytes_with_nul(&self) -> &[u8] {
        &self.buf[..self.len + 1]
    }
}

/// The most CUDA processes one share may be split over (`sm-procs=`).
pub const PROCS_MAX: u32 = 64;

/// One MPS client's part of a compute share, in hundredths of a percent of
/// the GPU's SMs.
///
/// MPS's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` bounds each client process,
/// not a group of them: a share of `sm` percent split over `procs`
/// processes (`sm-procs=`) gives each `sm / procs` percent, so that the
/// container's processes together hold at most the share. Rounded down to
/// a hundredth, never up: the parts never add up to more than the share.
/// A share is at least 1 % and admission keeps `procs` at most `sm`, so a
/// part is at least 1 %.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientShare(u32);

/// One client's part of a share of `sm_percent` split over `procs`
/// processes (0 reads as 1: a grant without a count is one process). The
/// one place the split is computed: the container's environment, the
/// interceptor's `cuInit` and the daemon's limit all take it from here.
pub fn client_share(sm_percent: u32, procs: u32) -> ClientShare {
    ClientShare(sm_percent.min(100) * 100 / procs.max(1))
}

impl ClientShare {
    /// In hundredths of a percent (625: 6.25 %).
    pub fn hundredths(self) -> u32 {
        self.0
    }
    /// As MPS takes it: a decimal percentage without trailing zeros
    /// (`25`, `12.5`, `6.25`, `33.33`).
    pub fn value(self) -> Value {
        let mut v = Value::new();
        v.push_u64((self.0 / 100) as u64);
        let frac = self.0 % 100;
        if frac != 0 {
            v.push(b".");
            v.push(&[b'0' + (frac / 10) as u8]);
            if frac % 10 != 0 {
                v.push(&[b'0' + (frac % 10) as u8]);
            }
        }
        v
    }
}

/// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` of one process of a share of
/// `sm_percent` split over `procs` processes ([`client_share`]).
pub fn thread_percentage(sm_percent: u32, procs: u32) -> Value {
    client_share(sm_percent, procs).value()
}

/// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` of a one-GPU slice: the client's
/// device 0 (a share is for one GPU, the only one the container sees)
/// limited to the slice in whole MiB, rounded down (`0=4096M`, the form
/// measured on the H200). A per-process limit: the slice is for all of the
/// container's processes together, which the interceptor enforces; this is
/// MPS's own second line.
pub fn pinned_limit(vram_bytes: u64) -> Value {
    let mut v = Value::new();
    v.push(b"0=");
    v.push_u64((vram_bytes >> 20).max(1));
    v.push(b"M");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A share split over its processes: each gets its part, rounded down
    /// to a hundredth, and the parts never add up to more than the share.
    #[test]
    fn a_share_split_over_its_processes() {
        for (sm, procs, want) in [
            (25, 4, "6.25"),
            (25, 1, "25"),
            (50, 4, "12.5"),
            (100, 3, "33.33"),
            (25, 3, "8.33"),
            (10, 10, "1"),
            (1, 1, "1"),
            (100, 64, "1.56"),
            (75, 2, "37.5"),
            (25, 0, "25"),
        ] {
            assert_eq!(thread_percentage(sm, procs).as_str(), want, "{sm}/{procs}");
        }
        for sm in 1..=100 {
            for procs in 1..=sm.min(PROCS_MAX) {
                let part = client_share(sm, procs);
                assert!(part.hundredths() * procs <= sm * 100, "{sm}/{procs}");
                assert!(part.hundredths() >= 100, "{sm}/{procs}: at least 1 %");
                // what is written is what was computed
                let text = part.value();
                let parsed: f64 = text.as_str().parse().unwrap();
                assert_eq!((parsed * 100.0).round() as u32, part.hundredths());
            }
        }
        assert!(client_share(25, 4) < client_share(50, 4));
        assert_eq!(
            client_share(200, 1),
            client_share(100, 1),
            "at most the GPU"
        );
    }

    #[test]
    fn values() {
        assert_eq!(thread_percentage(25, 1).as_str(), "25");
        assert_eq!(thread_percentage(100, 1).as_bytes_with_nul(), b"100\0");
        assert_eq!(pinned_limit(4 << 30).as_str(), "0=4096M");
        assert_eq!(pinned_limit((616 << 20) + 5).as_str(), "0=616M");
        assert_eq!(pinned_limit(u64::MAX).as_str(), "0=17592186044415M");
        assert_eq!(pinned_limit(1).as_str(), "0=1M");
        assert_eq!(
            CONTAINER_PIPE_DIR,
            [crate::layout::CONTAINER_DIR, PIPE_SUBDIR].join("/")
        );
        assert_eq!(CONTAINER_PIPE_DIR_C.to_str(), Ok(CONTAINER_PIPE_DIR));
        assert_eq!(
            CONTAINER_CONTROL_SOCKET_C.to_str(),
            Ok([CONTAINER_PIPE_DIR, CLIENT_SOCKET].join("/").as_str())
        );
    }
}
