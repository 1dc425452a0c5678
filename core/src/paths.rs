//! Where the installed pieces are, relative to the running binary unless
//! the config names them.
use crate::config::Config;
use std::path::PathBuf;

pub const HOOK_NAME: &str = "gpu-quota-hook";
pub use crate::formats::helper::PROGRAM as DRIVER_HELPER_NAME;
pub use crate::formats::layout::INTERCEPTOR_NAME as INTERCEPTOR_FILE;

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
/// tree). Root runs it, so only a regular file that neither it nor its
/// directory lets another user change ([`trusted_program`]), by its
/// canonical path.
pub fn driver_helper(cfg: &Config) -> Option<PathBuf> {
    if let Some(p) = &cfg.driver_helper {
        return trusted_program(p);
    }
    let d = hook(cfg)?.parent()?.to_path_buf();
    [
        d.join("../lib/gpu-quota").join(DRIVER_HELPER_NAME),
        d.join(DRIVER_HELPER_NAME),
    ]
    .iter()
    .find_map(|p| trusted_program(p))
}

/// `p`'s canonical path when neither it (a regular file) nor any directory
/// above it can be changed by another user (`fsutil::others_can_change`:
/// owned by root or this process's user, not writable by group or others,
/// a sticky directory excepted): whoever can rename an ancestor can put
/// another program at that path, as `secure_dir` holds its ancestors too.
pub fn trusted_program(p: &std::path::Path) -> Option<PathBuf> {
    use crate::fsutil::others_can_change;
    let canon = std::fs::canonicalize(p).ok()?;
    let file = std::fs::metadata(&canon).ok()?;
    if !file.is_file() || others_can_change(&file) {
        return None;
    }
    for dir in canon.ancestors().skip(1) {
        let m = std::fs::metadata(dir).ok()?;
        if !m.is_dir() || others_can_change(&m) {
            return None;
        }
    }
    Some(canon)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_driver_helper_is_only_a_file_others_cannot_change() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let hook = d.path().join(HOOK_NAME);
        let helper = d.path().join(DRIVER_HELPER_NAME);
        std::fs::write(&hook, b"").unwrap();
        std::fs::write(&helper, b"").unwrap();
        let cfg = Config {
            hook: Some(hook.clone()),
            ..Config::default()
        };
        let mode = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&helper, 0o755);
        let canon = std::fs::canonicalize(&helper).unwrap();
        assert_eq!(driver_helper(&cfg), Some(canon.clone()), "beside the hook");
        mode(&helper, 0o775);
        assert_eq!(driver_helper(&cfg), None, "group-writable");
        mode(&helper, 0o755);
        mode(d.path(), 0o777);
        assert_eq!(driver_helper(&cfg), None, "in a directory others can write");
        mode(d.path(), 0o755);
        // the config's path is held to the same rule
        let named = Config {
            driver_helper: Some(helper.clone()),
            ..Config::default()
        };
        assert_eq!(driver_helper(&named), Some(canon));
        mode(&helper, 0o757);
        assert_eq!(driver_helper(&named), None, "other-writable");
        mode(&helper, 0o755);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&helper, Some(1000), None).unwrap();
            assert_eq!(driver_helper(&cfg), None, "owned by another user");
            std::os::unix::fs::chown(&helper, Some(0), None).unwrap();
        }
    }

    /// An ancestor another user can change (here: owns) lets them put
    /// another program at the path: refused, as `secure_dir` refuses it.
    #[test]
    fn the_driver_helpers_ancestors_are_checked() {
        let top = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(top.path(), 0o755);
        let mid = top.path().join("mid");
        let dir = mid.join("bin");
        std::fs::create_dir_all(&dir).unwrap();
        mode(&mid, 0o755);
        mode(&dir, 0o755);
        let helper = dir.join(DRIVER_HELPER_NAME);
        std::fs::write(&helper, b"").unwrap();
        mode(&helper, 0o755);
        let canon = std::fs::canonicalize(&helper).unwrap();
        assert_eq!(trusted_program(&helper), Some(canon.clone()));
        mode(&mid, 0o777);
        assert_eq!(trusted_program(&helper), None, "a writable grandparent");
        mode(&mid, 0o1777);
        assert_eq!(
            trusted_program(&helper),
            Some(canon),
            "a sticky one is fine"
        );
        mode(&mid, 0o755);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&mid, Some(1000), None).unwrap();
            assert_eq!(
                trusted_program(&helper),
                None,
                "a grandparent another user owns"
            );
        }
    }
}
