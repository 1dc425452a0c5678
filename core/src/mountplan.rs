//! What the hook does inside a container, as a plan of operations, and the
//! small `Effects` trait that carries them out. Planning is pure (unit
//! tested without root); the hook supplies effects that resolve every
//! container path inside the rootfs without leaving it.
use crate::driver::DriverFiles;
use crate::formats::layout::PRELOAD_NAME;
use crate::ldcache;
use crate::state::{DRIVER_SUBDIR, INTERCEPTOR_NAME};
use std::path::{Path, PathBuf};

/// Where the per-container state directory appears in the container, and
/// the loader's preload list there.
pub use crate::formats::layout::{CONTAINER_DIR, PRELOAD};
/// Longest /etc/ld.so.preload of an image we are willing to merge.
pub const MAX_PRELOAD: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// A mount of config.json's `mounts` (to name the one a path crosses, and for
/// `declared_conflict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub destination: String,
    pub kind: String,
    pub source: String,
    /// A fresh tmpfs of the container's own (`type` tmpfs without a `bind`
    /// or `rbind` option: runc mounts a new, empty instance that dies with
    /// the container's mount namespace). containerd's default spec mounts
    /// one at `/run`. Writing there leaves nothing behind, so gpu-quota
    /// writes there like on the rootfs; every other mount is refused.
    pub private: bool,
}

impl Declared {
    /// The `mounts` of a bundle's config.json (entries without a
    /// destination are skipped).
    pub fn from_config(config: &serde_json::Value) -> Vec<Declared> {
        let s = |m: &serde_json::Value, k: &str| {
            m.get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        config
            .get("mounts")
            .and_then(serde_json::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|m| !s(m, "destination").is_empty())
                    .map(|m| {
                        let bind = m
                            .get("options")
                            .and_then(serde_json::Value::as_array)
                            .is_some_and(|o| {
                                o.iter()
                                    .any(|x| matches!(x.as_str(), Some("bind" | "rbind")))
                            });
                        Declared {
                            destination: s(m, "destination"),
                            kind: s(m, "type"),
                            source: s(m, "source"),
                            private: s(m, "type") == "tmpfs" && !bind,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Bind-mount host `src` onto container path `dst` (created if missing).
    Bind {
        src: PathBuf,
        dst: String,
        kind: Kind,
        readonly: bool,
    },
    /// Write `host_file` = our preload line + the image's own entries at `dst`.
    MergePreload {
        host_file: PathBuf,
        dst: String,
        ours: String,
    },
    /// Add the injected libraries to the image's own loader cache (glibc
    /// images only): the image's `dst` is read as hostile bytes, parsed,
    /// given one entry per library name, and written back in place. No host
    /// program ever runs against the rootfs.
    LoaderCache { dst: String, libs: Vec<CacheLib> },
}

/// One loader-cache entry to add: `key` (a SONAME, e.g. `libcuda.so.1`)
/// resolves to `path` in the container; `host` is the library on the host,
/// whose ELF header gives the entry's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLib {
    pub key: String,
    pub path: String,
    pub host: PathBuf,
}

pub const LOADER_CACHE: &str = "/etc/ld.so.cache";
/// A glibc dynamic loader at any of these paths means the image uses
/// /etc/ld.so.cache; images without one (static, musl) need none.
pub const GLIBC_LOADERS: [&str; 5] = [
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
    "/lib/ld-linux.so.2",
];

#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    #[error("{op} {path}: {err}")]
    Io {
        op: &'static str,
        path: String,
        err: std::io::Error,
    },
    #[error("{path}: {what}")]
    Refused { path: String, what: String },
}

/// A mount declared in config.json over a path the hook writes: refused
/// before anything is reserved (docs/security.md, "Mounts inside the
/// rootfs").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "config.json mounts {what} at {destination}, over {path}, where gpu-quota {does}; gpu-quota never writes into a volume, a bind of a host directory or a host tmpfs inside the rootfs (it would stay after the container is gone): mount it elsewhere, or run this container without a GPU-memory request"
)]
pub struct MountConflict {
    pub destination: String,
    /// "a bind of /host/dir", "a tmpfs"
    pub what: String,
    pub path: String,
    pub does: &'static str,
}

/// The container paths the hook creates, replaces or mounts onto (the
/// directories on the way to them included), with what it does there;
/// `bins` are the driver programs' names (`[driver] binaries`).
pub fn written_paths(bins: &[String]) -> Vec<(String, &'static str)> {
    let mut v = vec![
        (
            CONTAINER_DIR.to_string(),
            "creates and mounts its per-container directory",
        ),
        (
            PRELOAD.to_string(),
            "mounts the preload list of libgpuquota.so",
        ),
        (
            LOADER_CACHE.to_string(),
            "rewrites the image's loader cache",
        ),
    ];
    for b in bins {
        v.push((format!("/usr/bin/{b}"), "mounts the driver's program"));
    }
    v
}

/// `p` as absolute components, lexically cleaned (`//`, `.`, `..`, a
/// trailing `/`), as runc joins a destination to the rootfs.
fn clean(p: &str) -> Vec<&str> {
    let mut out: Vec<&str> = vec![];
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// The first declared mount whose destination is, lexically, one of
/// `written_paths(bins)` or a directory above one. Mounts that symlinks in
/// the image steer there are not seen here; the hook refuses those (every
/// lookup it makes is `RESOLVE_NO_XDEV`).
pub fn declared_conflict(declared: &[Declared], bins: &[String]) -> Option<MountConflict> {
    let written = written_paths(bins);
    for d in declared.iter().filter(|d| !d.private) {
        let dest = clean(&d.destination);
        for (path, does) in &written {
            let p = clean(path);
            if p.len() >= dest.len() && p[..dest.len()] == dest[..] {
                // a source that is a path is a host directory or file
                let what = if d.source.starts_with('/') {
                    format!("a bind of {}", d.source)
                } else if d.kind.is_empty() {
                    "a mount".to_string()
                } else {
                    format!("a {}", d.kind)
                };
                return Some(MountConflict {
                    destination: d.destination.clone(),
                    what,
                    path: path.clone(),
                    does,
                });
            }
        }
    }
    None
}

/// The side effects a plan needs.
pub trait Effects {
    fn bind(
        &mut self,
        src: &Path,
        dst: &str,
        kind: Kind,
        readonly: bool,
    ) -> Result<(), EffectError>;
    /// Read a file of the image (None when absent), at most `max` bytes.
    fn read_rootfs_file(&mut self, dst: &str, max: usize) -> Result<Option<Vec<u8>>, EffectError>;
    fn write_host_file(&mut self, path: &Path, bytes: &[u8]) -> Result<(), EffectError>;
    /// Whether the image has an entry at `dst` (not following it).
    fn rootfs_exists(&mut self, dst: &str) -> bool;
    /// Replace (or create) the image's regular file `dst` atomically.
    fn replace_rootfs_file(
        &mut self,
        dst: &str,
        bytes: &[u8],
        mode: u32,
    ) -> Result<(), EffectError>;
    /// The first `max` bytes of a trusted host file.
    fn read_host_file(&mut self, path: &Path, max: usize) -> Result<Vec<u8>, EffectError>;
}

/// The plan for one container whose host state directory is `host_state`
/// (made by `state::create` and filled by `state::fill`); `mps_pipe`: what
/// a container with a share gets as its MPS pipe directory (the view of its
/// GPU's daemon's, `mps::view`).
pub fn plan(
    host_state: &Path,
    files: &DriverFiles,
    interceptor: &Path,
    mps_pipe: Option<&Path>,
) -> Vec<Op> {
    let cdir = CONTAINER_DIR.to_string();
    let mut ops = vec![
        // read-only from the start; the mounts below go on top of its entries
        Op::Bind {
            src: host_state.into(),
            dst: cdir.clone(),
            kind: Kind::Dir,
            readonly: true,
        },
        // the usage file is the one writable entry: its own mount
        Op::Bind {
            src: crate::state::usage_path(host_state),
            dst: format!("{cdir}/usage"),
            kind: Kind::File,
            readonly: false,
        },
    ];
    if let Some(pipe) = mps_pipe {
        // read-only: a client connects to the daemon's sockets (which a
        // read-only mount allows) and may not replace or remove them
        ops.push(Op::Bind {
            src: pipe.into(),
            dst: crate::formats::mps::CONTAINER_PIPE_DIR.into(),
            kind: Kind::Dir,
            readonly: true,
        });
    }
    for l in &files.libs {
        ops.push(Op::Bind {
            src: l.host_path.clone(),
            dst: format!("{cdir}/{DRIVER_SUBDIR}/{}", l.name),
            kind: Kind::File,
            readonly: true,
        });
    }
    ops.push(Op::Bind {
        src: interceptor.into(),
        dst: format!("{cdir}/{INTERCEPTOR_NAME}"),
        kind: Kind::File,
        readonly: true,
    });
    for (name, path) in &files.bins {
        ops.push(Op::Bind {
            src: path.clone(),
            dst: format!("/usr/bin/{name}"),
            kind: Kind::File,
            readonly: true,
        });
    }
    ops.push(Op::MergePreload {
        host_file: host_state.join(PRELOAD_NAME),
        dst: PRELOAD.into(),
        ours: format!("{cdir}/{INTERCEPTOR_NAME}"),
    });
    ops.push(Op::Bind {
        src: host_state.join(PRELOAD_NAME),
        dst: PRELOAD.into(),
        kind: Kind::File,
        readonly: true,
    });
    let mut libs = Vec::new();
    for l in &files.libs {
        for key in l.aliases.iter().chain(std::iter::once(&l.name)) {
            if libs.iter().any(|c: &CacheLib| &c.key == key) {
                continue;
            }
            libs.push(CacheLib {
                key: key.clone(),
                path: format!("{cdir}/{DRIVER_SUBDIR}/{key}"),
                host: l.host_path.clone(),
            });
        }
    }
    ops.push(Op::LoaderCache {
        dst: LOADER_CACHE.into(),
        libs,
    });
    ops
}

/// The image's loader cache with `libs` added (replacing the image's own
/// entries of the same names, so the host driver wins over a stub in the
/// image). `None`: the image has no glibc loader and needs no cache.
pub fn loader_cache(
    fx: &mut dyn Effects,
    dst: &str,
    libs: &[CacheLib],
) -> Result<Option<Vec<u8>>, EffectError> {
    if !GLIBC_LOADERS.iter().any(|p| fx.rootfs_exists(p)) {
        return Ok(None);
    }
    let image = fx.read_rootfs_file(dst, ldcache::MAX_CACHE_BYTES)?;
    let mut add = Vec::with_capacity(libs.len());
    for l in libs {
        let head = fx.read_host_file(&l.host, 64)?;
        let flags = ldcache::elf_cache_flags(&head).ok_or_else(|| EffectError::Refused {
            path: l.host.display().to_string(),
            what: "is not an ELF shared library of a known architecture".into(),
        })?;
        add.push(ldcache::Lib {
            key: l.key.as_bytes().to_vec(),
            path: l.path.as_bytes().to_vec(),
            flags,
        });
    }
    // Parse, add, write: bounded work on any image's cache.
    let bytes = ldcache::rewrite(image.as_deref(), &add, &mut ldcache::Work::budget()).map_err(
        |e| EffectError::Refused {
            path: dst.into(),
            what: format!(
                "is not a loader cache gpu-quota can read ({e}); rebuild it in the image (RUN ldconfig) or remove it"
            ),
        },
    )?;
    Ok(Some(bytes))
}

/// Our entry first (so its symbols take precedence), then the image's own
/// entries in their order, without duplicates.
pub fn merge_preload(existing: &[u8], ours: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(existing);
    let mut out = vec![ours.to_string()];
    for e in text.split(|c: char| c.is_whitespace() || c == ':') {
        if !e.is_empty() && !out.iter().any(|o| o == e) {
            out.push(e.to_string());
        }
    }
    let mut s = out.join("\n");
    s.push('\n');
    s.into_bytes()
}

pub fn execute(ops: &[Op], fx: &mut dyn Effects) -> Result<(), EffectError> {
    for op in ops {
        match op {
            Op::Bind {
                src,
                dst,
                kind,
                readonly,
            } => fx.bind(src, dst, *kind, *readonly)?,
            Op::MergePreload {
                host_file,
                dst,
                ours,
            } => {
                let existing = fx.read_rootfs_file(dst, MAX_PRELOAD)?.unwrap_or_default();
                fx.write_host_file(host_file, &merge_preload(&existing, ours))?;
            }
            Op::LoaderCache { dst, libs } => {
                if let Some(bytes) = loader_cache(fx, dst, libs)? {
                    fx.replace_rootfs_file(dst, &bytes, 0o644)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DriverLib;

    /// A pretend rootfs: its files by container path, and a log of effects.
    #[derive(Default)]
    struct Record {
        log: Vec<String>,
        image: std::collections::BTreeMap<String, Vec<u8>>,
        written: Vec<(PathBuf, Vec<u8>)>,
    }
    impl Effects for Record {
        fn bind(&mut self, src: &Path, dst: &str, kind: Kind, ro: bool) -> Result<(), EffectError> {
            self.log.push(format!(
                "bind {} {dst} {kind:?} {}",
                src.display(),
                if ro { "ro" } else { "rw" }
            ));
            Ok(())
        }
        fn read_rootfs_file(&mut self, p: &str, _: usize) -> Result<Option<Vec<u8>>, EffectError> {
            Ok(self.image.get(p).cloned())
        }
        fn write_host_file(&mut self, p: &Path, b: &[u8]) -> Result<(), EffectError> {
            self.written.push((p.into(), b.into()));
            Ok(())
        }
        fn rootfs_exists(&mut self, p: &str) -> bool {
            self.image.contains_key(p)
        }
        fn replace_rootfs_file(&mut self, p: &str, b: &[u8], mode: u32) -> Result<(), EffectError> {
            self.log.push(format!("replace {p} {mode:o}"));
            self.image.insert(p.into(), b.into());
            Ok(())
        }
        fn read_host_file(&mut self, _: &Path, max: usize) -> Result<Vec<u8>, EffectError> {
            // an x86-64 ELF64 shared object header
            let mut h = vec![0u8; 64];
            h[..4].copy_from_slice(b"\x7fELF");
            h[4] = 2; // ELFCLASS64
            h[5] = 1; // little endian
            h[6] = 1;
            h[16] = 3; // ET_DYN
            h[18] = 62; // EM_X86_64
            h.truncate(max);
            Ok(h)
        }
    }

    #[test]
    fn plan_order_and_modes() {
        let files = DriverFiles {
            libs: vec![DriverLib {
                host_path: "/h/libcuda.so.580".into(),
                name: "libcuda.so.580".into(),
                aliases: vec!["libcuda.so.1".into()],
            }],
            bins: vec![("nvidia-smi".into(), "/h/nvidia-smi".into())],
        };
        let ops = plan(
            Path::new("/run/gpu-quota/containers/c1"),
            &files,
            Path::new("/lib/gpu-quota/libgpuquota.so"),
            None,
        );
        let mut fx = Record::default();
        fx.image
            .insert(PRELOAD.into(), b"/usr/lib/libfoo.so\n".to_vec());
        execute(&ops, &mut fx).unwrap();
        // with a compute share, the GPU's MPS pipe directory, read-only,
        // on the state directory's mount point and before anything else
        let shared = plan(
            Path::new("/run/gpu-quota/containers/c1"),
            &files,
            Path::new("/lib/gpu-quota/libgpuquota.so"),
            Some(Path::new("/run/gpu-quota/mps/GPU-1/pipe")),
        );
        let mut sfx = Record::default();
        execute(&shared, &mut sfx).unwrap();
        assert_eq!(
            sfx.log[2],
            "bind /run/gpu-quota/mps/GPU-1/pipe /run/gpu-quota/mps Dir ro"
        );
        assert_eq!(sfx.log.len(), fx.log.len() + 1);
        assert_eq!(
            fx.log,
            vec![
                "bind /run/gpu-quota/containers/c1 /run/gpu-quota Dir ro",
                "bind /run/gpu-quota/containers/c1/rw/usage /run/gpu-quota/usage File rw",
                "bind /h/libcuda.so.580 /run/gpu-quota/driver/libcuda.so.580 File ro",
                "bind /lib/gpu-quota/libgpuquota.so /run/gpu-quota/libgpuquota.so File ro",
                "bind /h/nvidia-smi /usr/bin/nvidia-smi File ro",
                "bind /run/gpu-quota/containers/c1/ld.so.preload /etc/ld.so.preload File ro",
            ],
            "an image without a glibc loader gets no loader cache"
        );
        assert_eq!(
            fx.written[0].1,
            b"/run/gpu-quota/libgpuquota.so\n/usr/lib/libfoo.so\n"
        );
    }

    fn driver() -> DriverFiles {
        DriverFiles {
            libs: vec![
                DriverLib {
                    host_path: "/h/libcuda.so.580.1".into(),
                    name: "libcuda.so.580.1".into(),
                    aliases: vec!["libcuda.so.1".into()],
                },
                DriverLib {
                    host_path: "/h/libnvidia-ml.so.580.1".into(),
                    name: "libnvidia-ml.so.580.1".into(),
                    aliases: vec!["libnvidia-ml.so.1".into()],
                },
            ],
            bins: vec![],
        }
    }

    /// The loader cache of a glibc image: the image's entries stay, ours
    /// are added (replacing an image stub of the same name), written in
    /// place; nothing but bytes crosses between image and host.
    #[test]
    fn glibc_image_gets_its_own_cache_plus_the_driver() {
        let ops = plan(
            Path::new("/s/c1"),
            &driver(),
            Path::new("/l/libgpuquota.so"),
            None,
        );
        let mut image = ldcache::LdCache::default();
        image.insert(b"libz.so.1", b"/usr/lib/x86_64-linux-gnu/libz.so.1", 0x0303);
        image.insert(
            b"libcuda.so.1",
            b"/usr/local/cuda/compat/libcuda.so.1",
            0x0303,
        );
        let mut fx = Record::default();
        fx.image.insert(GLIBC_LOADERS[0].into(), b"ELF".to_vec());
        fx.image.insert(LOADER_CACHE.into(), image.to_bytes());
        execute(&ops, &mut fx).unwrap();
        assert_eq!(fx.log.last().unwrap(), "replace /etc/ld.so.cache 644");
        let c = ldcache::LdCache::parse(&fx.image[LOADER_CACHE]).unwrap();
        let get = |k: &[u8]| -> Vec<Vec<u8>> {
            c.entries
                .iter()
                .filter(|e| e.key == k)
                .map(|e| e.value.clone())
                .collect()
        };
        assert_eq!(
            get(b"libz.so.1"),
            vec![b"/usr/lib/x86_64-linux-gnu/libz.so.1".to_vec()]
        );
        assert_eq!(
            get(b"libcuda.so.1"),
            vec![b"/run/gpu-quota/driver/libcuda.so.1".to_vec()],
            "the host driver replaces the image's stub"
        );
        assert_eq!(
            get(b"libnvidia-ml.so.1"),
            vec![b"/run/gpu-quota/driver/libnvidia-ml.so.1".to_vec()]
        );
        assert!(c.entries.iter().all(|e| e.flags == 0x0303));

        // no cache in the image: one with just the driver
        let mut fx = Record::default();
        fx.image.insert(GLIBC_LOADERS[0].into(), b"ELF".to_vec());
        execute(&ops, &mut fx).unwrap();
        let c = ldcache::LdCache::parse(&fx.image[LOADER_CACHE]).unwrap();
        assert_eq!(c.entries.len(), 4, "two SONAMEs and two file names");

        // a cache that is not one is refused, naming the path
        let mut fx = Record::default();
        fx.image.insert(GLIBC_LOADERS[0].into(), b"ELF".to_vec());
        fx.image.insert(
            LOADER_CACHE.into(),
            b"glibc-ld.so.cache1.1 garbage".to_vec(),
        );
        let e = execute(&ops, &mut fx).unwrap_err().to_string();
        assert!(
            e.contains("/etc/ld.so.cache") && e.contains("not a loader cache"),
            "{e}"
        );
        assert!(!fx.log.iter().any(|l| l.starts_with("replace")));
    }

    #[test]
    fn declared_mounts_over_written_paths_are_found() {
        let m = |dest: &str, kind: &str, source: &str| Declared {
            destination: dest.into(),
            kind: kind.into(),
            source: source.into(),
            private: false,
        };
        let bins = vec!["nvidia-smi".to_string()];
        let engine_defaults = [
            m("/proc", "proc", "proc"),
            m("/dev", "tmpfs", "tmpfs"),
            m("/etc/hosts", "bind", "/var/lib/docker/c/hosts"),
            m("/etc/resolv.conf", "bind", "/var/lib/docker/c/resolv.conf"),
            m("/etc/hostname", "bind", "/var/lib/docker/c/hostname"),
            m(
                "/run/.containerenv",
                "bind",
                "/run/containers/c/.containerenv",
            ),
            m(
                "/var/run/secrets/kubernetes.io/serviceaccount",
                "bind",
                "/var/lib/kubelet/x",
            ),
            m("/run/secrets", "bind", "/usr/share/rhel/secrets"),
            m("/data", "bind", "/srv/data"),
            m("/etc2", "bind", "/srv/etc2"),
            m("/usr/bin/other", "bind", "/srv/other"),
        ];
        assert_eq!(declared_conflict(&engine_defaults, &bins), None);
        for (dest, path) in [
            ("/etc", "/etc/ld.so.preload"),
            ("/etc/", "/etc/ld.so.preload"),
            ("//usr/./lib/../bin", "/usr/bin/nvidia-smi"),
            ("/usr", "/usr/bin/nvidia-smi"),
            ("/run", "/run/gpu-quota"),
            ("/run/gpu-quota", "/run/gpu-quota"),
            ("/etc/ld.so.cache", "/etc/ld.so.cache"),
            ("/", "/run/gpu-quota"),
        ] {
            let c = declared_conflict(&[m(dest, "bind", "/host/d")], &bins)
                .unwrap_or_else(|| panic!("{dest} not found"));
            assert_eq!((c.destination.as_str(), c.path.as_str()), (dest, path));
            let e = c.to_string();
            assert!(e.contains("a bind of /host/d") && e.contains(dest), "{e}");
        }
        // a tmpfs mounted as a bind (of a host tmpfs) is the host's
        let c = declared_conflict(&[m("/run", "tmpfs", "tmpfs")], &bins).unwrap();
        assert!(c.to_string().contains("mounts a tmpfs at /run"), "{c}");
        // the container's own fresh tmpfs (containerd's default /run) is not
        let fresh = crate::rootfs::Declared::from_config(&serde_json::json!({"mounts": [
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/etc", "type": "tmpfs", "source": "/srv/t", "options": ["rbind"]}]}));
        assert!(fresh[0].private && !fresh[1].private, "{fresh:?}");
        assert_eq!(declared_conflict(&fresh[..1], &bins), None);
        assert!(declared_conflict(&fresh, &bins).is_some());
        // a program not configured is not written
        assert_eq!(
            declared_conflict(&[m("/usr/bin/nvidia-smi", "bind", "/h")], &[]),
            None
        );
    }

    #[test]
    fn preload_merge() {
        assert_eq!(merge_preload(b"", "/a.so"), b"/a.so\n");
        assert_eq!(
            merge_preload(b"/b.so /a.so:/c.so\n\n", "/a.so"),
            b"/a.so\n/b.so\n/c.so\n"
        );
    }
}
