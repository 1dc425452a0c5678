//! Where the installed pieces are, relative to the running binary unless
//! the config names them.
use crate::config::Config;
use std::path::PathBuf;

pub const HOOK_NAME: &str = "gpu-quota-hook";
pub const DRIVER_HELPER_NAME: &str = "gpu-quota-driver";
pub const INTERCEPTOR_FILE: &str = "libgpuquota.so";

fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
}

/// gpu-quota-hook: config `hook`, else next to this binary.
pub fn hook(cfg: &Config) -> Option<PathBuf> {
    cfg.hook
        .clone()
        .or_else(|| exe_dir().map(|d| d.join(HOOK_NAME)))
}

/// gpu-quota-driver, the program that loads the host's driver libraries in
/// a helper child (the runtime and the hook are static and load none):
/// config `driver_helper`, else `../lib/gpu-quota/` from the hook's
/// directory (the `make install` layout), else beside the hook (a build
/// tree).
pub fn driver_helper(cfg: &Config) -> Option<PathBuf> {
    if let Some(p) = &cfg.driver_helper {
        return Some(p.clone());
    }
    let d = hook(cfg)?.parent()?.to_path_buf();
    [
        d.join("../lib/gpu-quota").join(DRIVER_HELPER_NAME),
        d.join(DRIVER_HELPER_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// libgpuquota.so: config `interceptor`, else `../lib/gpu-quota/` from this
/// binary (the `make install` layout), else next to it (a build tree).
pub fn interceptor(cfg: &Config) -> Option<PathBuf> {
    if let Some(p) = &cfg.interceptor {
        return Some(p.clone());
    }
    let d = exe_dir()?;
    [
        d.join("../lib/gpu-quota").join(INTERCEPTOR_FILE),
        d.join(INTERCEPTOR_FILE),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .and_then(|p| std::fs::canonicalize(p).ok())
}

/// Resolve a program name through PATH (absolute paths are kept).
pub fn which(p: &std::path::Path) -> Option<PathBuf> {
    if p.components().count() > 1 {
        return Some(p.into());
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}
