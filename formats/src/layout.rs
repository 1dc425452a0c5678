//! Where things are, for both sides: the container's gpu-quota directory
//! (the hook fills and mounts it, the interceptor reads it) and the host's
//! default locations that libgpuquota.so reads when it runs standalone.
//!
//! The container directory is the host's per-container state directory
//! (core::state), bind-mounted read-only at [`CONTAINER_DIR`]:
//!
//! * `limits` ([`crate::limits::FILE_NAME`]) and `usage`
//!   ([`crate::usage::FILE_NAME`]);
//! * [`DRIVER_SUBDIR`]`/` — mount points of the host's driver libraries;
//! * [`INTERCEPTOR_NAME`] — mount point of libgpuquota.so, the one line the
//!   hook adds to the image's preload list;
//! * [`PRELOAD_NAME`] — that merged list, bind-mounted on [`PRELOAD`].
use core::ffi::CStr;

/// Where the per-container state directory appears in the container.
pub const CONTAINER_DIR: &str = "/run/gpu-quota";
/// The state directory's subdirectory of driver-library mount points.
pub const DRIVER_SUBDIR: &str = "driver";
/// The state directory's mount point for the interceptor (and the name the
/// build gives the interceptor).
pub const INTERCEPTOR_NAME: &str = "libgpuquota.so";
/// The state directory's merged preload list.
pub const PRELOAD_NAME: &str = "ld.so.preload";
/// The loader's preload list in the container, where [`PRELOAD_NAME`] is
/// mounted.
pub const PRELOAD: &str = "/etc/ld.so.preload";

/// The host's configuration file (the host's programs take another one
/// from `GPU_QUOTA_CONFIG`; the standalone interceptor reads only this one,
/// see `ctxcost::standalone_cache_path`).
pub const CONFIG_FILE: &str = "/etc/gpu-quota/config.toml";
/// The same, for the interceptor's open(2).
pub const CONFIG_FILE_C: &CStr = c"/etc/gpu-quota/config.toml";
/// The configuration's `ledger_dir` when it names none.
pub const DEFAULT_LEDGER_DIR: &str = "/var/lib/gpu-quota";
/// The configuration's `state_dir` when it names none (the host's root of
/// the per-container directories; the same spelling as [`CONTAINER_DIR`],
/// which is a path in the container).
pub const DEFAULT_STATE_DIR: &str = "/run/gpu-quota";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_spellings_match() {
        assert_eq!(CONFIG_FILE_C.to_str(), Ok(CONFIG_FILE));
        for p in [
            CONTAINER_DIR,
            PRELOAD,
            CONFIG_FILE,
            DEFAULT_LEDGER_DIR,
            DEFAULT_STATE_DIR,
        ] {
            assert!(p.starts_with('/') && !p.ends_with('/'), "{p}");
        }
        for n in [DRIVER_SUBDIR, INTERCEPTOR_NAME, PRELOAD_NAME] {
            assert!(!n.contains('/') && !n.is_empty(), "{n}");
        }
    }
}
