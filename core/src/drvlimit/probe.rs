//! Is the driver limit possible here: the r615 symbol in the host's
//! libnvidia-ml (loaded by `doctor`/`ls`; for the hook only its name looked
//! for in the file, the answer cached per file identity in the state
//! directory), and a cgroup v2 hierarchy.
use super::{DrvLimitError, CGROUP_ROOT, SYMBOL};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What `doctor` and `ls` show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detection {
    /// The host's libnvidia-ml that was looked at.
    pub library: Option<PathBuf>,
    /// `nvmlDeviceSetMemoryLimits_v1` resolves in it (dlsym).
    pub symbol: bool,
    /// /sys/fs/cgroup is a cgroup v2 hierarchy.
    pub cgroup_v2: bool,
    pub note: String,
}

impl Detection {
    pub fn usable(&self) -> bool {
        self.symbol && self.cgroup_v2
    }

    /// `doctor`'s line: (usable, text). Not usable is not a failure: the
    /// interceptor enforces either way.
    pub fn describe(&self) -> (bool, String) {
        let lib = self
            .library
            .as_deref()
            .map(|p| format!(" ({})", p.display()))
            .unwrap_or_default();
        if !self.cgroup_v2 {
            return (
                false,
                format!(
                    "unavailable: {CGROUP_ROOT} is not cgroup v2 (cgroup v1; driver limits need v2); the interceptor enforces slices alone. Said here only, not for each container; {}{lib}",
                    self.note
                ),
            );
        }
        if self.symbol {
            (
                true,
                format!("set per container on cgroup v2: {}{lib}", self.note),
            )
        } else {
            (
                false,
                format!(
                    "unavailable: {}{lib}; the interceptor enforces slices alone",
                    self.note
                ),
            )
        }
    }
}

pub fn is_cgroup_v2(cgroup_root: &Path) -> bool {
    cgroup_root.join("cgroup.controllers").is_file()
}

/// Detect by loading the host library (doctor, ls; not for the hook).
pub fn detect_at(libnvml: Option<&Path>, cgroup_root: &Path) -> Detection {
    let cgroup_v2 = is_cgroup_v2(cgroup_root);
    let (symbol, note) = match libnvml {
        None => (false, "no libnvidia-ml on this host".to_string()),
        Some(p) => match crate::dl::Lib::open(p) {
            Err(message) => (
                false,
                DrvLimitError::Load {
                    path: p.into(),
                    message,
                }
                .to_string(),
            ),
            Ok(l) => {
                let s = l.sym(SYMBOL).is_some();
                (
                    s,
                    if s {
                        format!("{SYMBOL} present")
                    } else {
                        format!("{SYMBOL} absent (driver older than r615)")
                    },
                )
            }
        },
    };
    Detection {
        library: libnvml.map(Path::to_path_buf),
        symbol,
        cgroup_v2,
        note,
    }
}

/// Detect for a config: the libnvidia-ml that [`crate::driver::discover`] finds.
pub fn detect(cfg: &crate::Config) -> Detection {
    let lib = crate::driver::discover(&cfg.driver)
        .ok()
        .and_then(|f| crate::driver::libnvml_of(&f));
    detect_at(lib.as_deref(), Path::new(CGROUP_ROOT))
}

/// Cheap pre-check for the hook (no loading): the symbol's name appears in
/// the library file. The helper child then resolves it for real.
pub fn maybe_supported(libnvml: &Path) -> bool {
    let Ok(b) = std::fs::read(libnvml) else {
        return false;
    };
    has_symbol_name(&b)
}

fn has_symbol_name(b: &[u8]) -> bool {
    let needle = format!("{SYMBOL}\0");
    // SAFETY: memmem reads within the two live buffers of the given lengths.
    let hit = unsafe {
        libc::memmem(
            b.as_ptr().cast(),
            b.len(),
            needle.as_ptr().cast(),
            needle.len(),
        )
    };
    !hit.is_null()
}

/// In the state directory: the last answer of [`maybe_supported`], keyed by
/// the library's path and identity (root-only, mode 0600).
pub const PROBE_CACHE_FILE: &str = "nvml-probe.json";
const PROBE_CACHE_VERSION: u32 = 1;

/// What identifies one version of a file without reading it: a new driver
/// (another inode, size or times) or a rewrite in place (mtime, ctime)
/// changes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ProbeCache {
    version: u32,
    path: PathBuf,
    id: FileId,
    supported: bool,
}

/// [`maybe_supported`] for the hook, which asks at every container start:
/// the answer is cached in `state_dir` keyed by the library's path and
/// identity (dev, inode, size, mtime, ctime of the open file), so the
/// library (tens of MB) is read once per driver install, not per start.
/// The cache is read without following a symlink and capped, written
/// atomically (never through a symlink) mode 0600, and used only when
/// `state_dir` passes [`crate::fsutil::secure_dir`]; the file is re-stat'd
/// after it was read and its answer cached only if it did not change.
pub fn maybe_supported_cached(state_dir: &Path, libnvml: &Path) -> bool {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(libnvml) else {
        return false;
    };
    let Some(id) = f
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| FileId::of(&m))
    else {
        return false;
    };
    let usable = crate::fsutil::secure_dir(state_dir, 0o755).is_ok();
    let cache = state_dir.join(PROBE_CACHE_FILE);
    if usable {
        if let Ok(bytes) = crate::fsutil::read_regular_capped(&cache, 4 << 10) {
            if let Ok(c) = serde_json::from_slice::<ProbeCache>(&bytes) {
                if c.version == PROBE_CACHE_VERSION && c.path == libnvml && c.id == id {
                    return c.supported;
                }
            }
        }
    }
    let mut b = Vec::with_capacity(id.size as usize);
    if (&f).read_to_end(&mut b).is_err() {
        return false;
    }
    let supported = has_symbol_name(&b);
    let unchanged = f.metadata().map(|m| FileId::of(&m)).ok() == Some(id.clone());
    if usable && unchanged {
        let c = ProbeCache {
            version: PROBE_CACHE_VERSION,
            path: libnvml.to_path_buf(),
            id,
            supported,
        };
        let bytes = serde_json::to_vec(&c).expect("serializable");
        let _ = crate::fsutil::write_atomic(&cache, &bytes, 0o600);
    }
    supported
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precheck_finds_the_symbol_name_only_when_present() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("libnvidia-ml.so.1");
        let mut b = vec![0u8; 1 << 20];
        std::fs::write(&p, &b).unwrap();
        assert!(!maybe_supported(&p));
        b.extend_from_slice(b"nvmlDeviceSetMemoryLimits_v1\0tail");
        std::fs::write(&p, &b).unwrap();
        assert!(maybe_supported(&p));
        std::fs::write(&p, b"nvmlDeviceSetMemoryLimits_v10").unwrap();
        assert!(!maybe_supported(&p), "a longer name is another symbol");
        assert!(!maybe_supported(&d.path().join("missing")));
    }

    fn lib_with(d: &Path, symbol: bool) -> PathBuf {
        let p = d.join("libnvidia-ml.so.615.1");
        let mut b = vec![0u8; 64 << 10];
        if symbol {
            b.extend_from_slice(b"nvmlDeviceSetMemoryLimits_v1\0");
        }
        std::fs::write(&p, &b).unwrap();
        p
    }

    /// The cached answer of `lib` with `supported` forced (what a stale or
    /// planted cache would say).
    fn forge(cache: &Path, lib: &Path, supported: bool) -> Vec<u8> {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(cache).unwrap()).unwrap();
        assert_eq!(v["path"], lib.to_str().unwrap());
        v["supported"] = supported.into();
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn probe_cache_answers_for_the_same_file_identity_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let lib = lib_with(d.path(), true);
        assert!(maybe_supported_cached(&state, &lib));
        let cache = state.join(PROBE_CACHE_FILE);
        let m = std::fs::symlink_metadata(&cache).unwrap();
        assert!(m.is_file());
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "root-only");
        // same identity: the cached answer is served, the library is not read
        // (a forged `false` for the same identity shows which was used)
        std::fs::write(&cache, forge(&cache, &lib, false)).unwrap();
        assert!(
            !maybe_supported_cached(&state, &lib),
            "served from the cache"
        );
        // identity changes (new driver installed, touched, same size): probed again
        let lib2 = lib_with(d.path(), false);
        assert_eq!(lib, lib2);
        std::fs::write(&cache, forge(&cache, &lib, true)).unwrap();
        let t = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&lib)
            .unwrap()
            .set_modified(t)
            .unwrap();
        assert!(
            !maybe_supported_cached(&state, &lib),
            "stale after an mtime change"
        );
        // replaced by another file (another inode) with the symbol: probed again
        let tmp = d.path().join("new");
        let mut b = vec![1u8; 64 << 10];
        b.extend_from_slice(b"nvmlDeviceSetMemoryLimits_v1\0");
        std::fs::write(&tmp, &b).unwrap();
        std::fs::write(&cache, forge(&cache, &lib, false)).unwrap();
        std::fs::rename(&tmp, &lib).unwrap();
        assert!(
            maybe_supported_cached(&state, &lib),
            "stale after the inode changed"
        );
        // another library path never takes this one's answer
        let other = d.path().join("libnvidia-ml.so.1");
        std::fs::write(&other, b"no symbol here").unwrap();
        assert!(!maybe_supported_cached(&state, &other));
        assert!(!maybe_supported_cached(&state, &d.path().join("missing")));
    }

    #[test]
    fn probe_cache_is_never_read_or_written_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let lib = lib_with(d.path(), true);
        assert!(maybe_supported_cached(&state, &lib));
        let cache = state.join(PROBE_CACHE_FILE);
        // a planted link to a file that says `false` for this very identity
        let planted = d.path().join("planted.json");
        std::fs::write(&planted, forge(&cache, &lib, false)).unwrap();
        std::fs::remove_file(&cache).unwrap();
        std::os::unix::fs::symlink(&planted, &cache).unwrap();
        assert!(
            maybe_supported_cached(&state, &lib),
            "the link is not followed"
        );
        assert!(
            std::fs::symlink_metadata(&cache).unwrap().is_file(),
            "replaced by a real file"
        );
        assert_eq!(
            std::fs::read(&planted).unwrap(),
            forge(&cache, &lib, false),
            "the link's target is not written"
        );
        // a cache in a directory others could write is not used at all
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        assert!(maybe_supported_cached(&open, &lib));
        assert!(
            !open.join(PROBE_CACHE_FILE).exists(),
            "not written into an insecure dir"
        );
    }

    #[test]
    fn detect_without_a_library() {
        let d = detect_at(None, Path::new("/nonexistent"));
        assert!(!d.usable() && !d.symbol && !d.cgroup_v2);
        let d = detect_at(
            Some(Path::new("/nonexistent/libnvidia-ml.so.1")),
            Path::new("/x"),
        );
        assert!(!d.symbol && d.note.contains("cannot load"), "{}", d.note);
    }
}
