//! What the hook does inside a container, as a plan of operations, and the
//! small `Effects` trait that carries them out. Planning is pure (unit
//! tested without root); the hook supplies effects that resolve every
//! container path inside the rootfs without leaving it.
use crate::driver::DriverFiles;
use std::path::{Path, PathBuf};

/// Where the per-container state directory appears in the container.
pub const CONTAINER_DIR: &str = "/run/gpu-quota";
pub const DRIVER_SUBDIR: &str = "driver";
pub const INTERCEPTOR_NAME: &str = "libgpuquota.so";
pub const PRELOAD: &str = "/etc/ld.so.preload";
/// Longest /etc/ld.so.preload of an image we are willing to merge.
pub const MAX_PRELOAD: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
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
    /// Make the mount at `dst` read-only (sub-mounts keep their own flags).
    RemountReadOnly { dst: String },
    /// Write `host_file` = our preload line + the image's own entries at `dst`.
    MergePreload {
        host_file: PathBuf,
        dst: String,
        ours: String,
    },
    /// Rebuild the container's loader cache including `dirs`.
    Ldconfig { dirs: Vec<String> },
}

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

/// The side effects a plan needs.
pub trait Effects {
    fn bind(
        &mut self,
        src: &Path,
        dst: &str,
        kind: Kind,
        readonly: bool,
    ) -> Result<(), EffectError>;
    fn remount_ro(&mut self, dst: &str) -> Result<(), EffectError>;
    /// Read a file of the image (None when absent), at most `max` bytes.
    fn read_rootfs_file(&mut self, dst: &str, max: usize) -> Result<Option<Vec<u8>>, EffectError>;
    fn write_host_file(&mut self, path: &Path, bytes: &[u8]) -> Result<(), EffectError>;
    fn ldconfig(&mut self, dirs: &[String]) -> Result<(), EffectError>;
}

/// The plan for one container whose host state directory is `host_state`
/// (already prepared by `state::prepare`).
pub fn plan(host_state: &Path, files: &DriverFiles, interceptor: &Path) -> Vec<Op> {
    let cdir = CONTAINER_DIR.to_string();
    let mut ops = vec![
        Op::Bind {
            src: host_state.into(),
            dst: cdir.clone(),
            kind: Kind::Dir,
            readonly: false,
        },
        // the usage file stays writable: its own mount survives the remount below
        Op::Bind {
            src: host_state.join("usage"),
            dst: format!("{cdir}/usage"),
            kind: Kind::File,
            readonly: false,
        },
    ];
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
    ops.push(Op::RemountReadOnly { dst: cdir.clone() });
    for (name, path) in &files.bins {
        ops.push(Op::Bind {
            src: path.clone(),
            dst: format!("/usr/bin/{name}"),
            kind: Kind::File,
            readonly: true,
        });
    }
    ops.push(Op::MergePreload {
        host_file: host_state.join("ld.so.preload"),
        dst: PRELOAD.into(),
        ours: format!("{cdir}/{INTERCEPTOR_NAME}"),
    });
    ops.push(Op::Bind {
        src: host_state.join("ld.so.preload"),
        dst: PRELOAD.into(),
        kind: Kind::File,
        readonly: true,
    });
    ops.push(Op::Ldconfig {
        dirs: vec![format!("{cdir}/{DRIVER_SUBDIR}")],
    });
    ops
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
            Op::RemountReadOnly { dst } => fx.remount_ro(dst)?,
            Op::MergePreload {
                host_file,
                dst,
                ours,
            } => {
                let existing = fx.read_rootfs_file(dst, MAX_PRELOAD)?.unwrap_or_default();
                fx.write_host_file(host_file, &merge_preload(&existing, ours))?;
            }
            Op::Ldconfig { dirs } => fx.ldconfig(dirs)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DriverLib;

    #[derive(Default)]
    struct Record {
        log: Vec<String>,
        image_preload: Option<Vec<u8>>,
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
        fn remount_ro(&mut self, dst: &str) -> Result<(), EffectError> {
            self.log.push(format!("ro {dst}"));
            Ok(())
        }
        fn read_rootfs_file(&mut self, _: &str, _: usize) -> Result<Option<Vec<u8>>, EffectError> {
            Ok(self.image_preload.clone())
        }
        fn write_host_file(&mut self, p: &Path, b: &[u8]) -> Result<(), EffectError> {
            self.written.push((p.into(), b.into()));
            Ok(())
        }
        fn ldconfig(&mut self, dirs: &[String]) -> Result<(), EffectError> {
            self.log.push(format!("ldconfig {}", dirs.join(",")));
            Ok(())
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
        );
        let mut fx = Record {
            image_preload: Some(b"/usr/lib/libfoo.so\n".to_vec()),
            ..Default::default()
        };
        execute(&ops, &mut fx).unwrap();
        assert_eq!(
            fx.log,
            vec![
                "bind /run/gpu-quota/containers/c1 /run/gpu-quota Dir rw",
                "bind /run/gpu-quota/containers/c1/usage /run/gpu-quota/usage File rw",
                "bind /h/libcuda.so.580 /run/gpu-quota/driver/libcuda.so.580 File ro",
                "bind /lib/gpu-quota/libgpuquota.so /run/gpu-quota/libgpuquota.so File ro",
                "ro /run/gpu-quota",
                "bind /h/nvidia-smi /usr/bin/nvidia-smi File ro",
                "bind /run/gpu-quota/containers/c1/ld.so.preload /etc/ld.so.preload File ro",
                "ldconfig /run/gpu-quota/driver",
            ]
        );
        assert_eq!(
            fx.written[0].1,
            b"/run/gpu-quota/libgpuquota.so\n/usr/lib/libfoo.so\n"
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
