//! Engine registration: `gpu-quota install ENGINE` / `gpu-quota uninstall ENGINE` for docker,
//! containerd, podman and CRI-O.
//!
//! Each engine module plans *pure* edits from a read-only view of the target tree
//! ([`fsutil::FsView`]); this module adds what is common to all of them and applies the plan:
//!
//! * install: a backup `<file>.gpu-quota.bak` before the first change of a pre-existing file
//!   (only when none exists), directories created for new files (recorded in a small state file
//!   so that uninstall removes exactly those), `--dry-run` diffs, atomic writes;
//! * uninstall: a modified file whose content is exactly what install made of its backup gets the
//!   backup back (byte-identical); otherwise only our entries are removed. Files install created
//!   and never changed since are deleted, and so are the directories it created (when empty).
//!
//! `--root DIR` makes every path relative to `DIR` and never signals a daemon.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Print a line, ignoring a closed stdout: `gpu-quota install ... | head` must never stop a
/// half-applied change.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod containerd;
mod crio;
mod docker;
pub mod dockerver;
pub mod doctor;
mod dropin;
pub mod fsutil;
mod glob;
pub mod gqconfig;
mod podman;
pub mod reload;
mod toolkit_doctor;
// after `say!`: macros are in scope for the modules declared below them
mod apply;
mod plan;
use apply::*;
use plan::*;

use fsutil::{backup_path, FsView, RootFs};

/// Name of the runtime in every engine's configuration.
pub const RUNTIME_NAME: &str = "gpu-quota";
/// Request keys that must reach config.json `annotations` (containerd `pod_annotations` are
/// glob patterns).
pub use gpuquota_core::formats::keys::ANNOTATION_PATTERNS;
/// Cluster mode (`--kubernetes`): the container annotations gpu-quota-device-plugin's Allocate
/// returns, and nothing else.
pub use gpuquota_core::formats::keys::CLUSTER_ANNOTATIONS;
/// Where install records the directories it created (on the target system):
/// `install/` in the default ledger directory (fixed: the configuration may
/// not exist yet when install runs).
pub const STATE_SUBDIR: &str = "install";

#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// Container engine to configure.
    #[arg(value_enum)]
    pub engine: EngineKind,

    /// Print a diff of every file that would change, and change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Act on the tree under DIR instead of `/` (edits DIR/etc/docker/daemon.json, ...).
    /// Daemons are never signalled with --root.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Absolute path of gpu-quota-runtime on the target system
    /// [default: gpu-quota-runtime next to this gpu-quota binary].
    #[arg(long, value_name = "PATH")]
    pub runtime_path: Option<PathBuf>,

    /// Do not signal the engine's daemon to reload (print how to do it instead).
    #[arg(long)]
    pub no_reload: bool,

    /// (containerd, crio) Cluster mode for Kubernetes with gpu-quota-device-plugin: requests
    /// come only from the container annotations the plugin returns; pod annotations grant
    /// nothing (docs/kubernetes.md). Give it to uninstall too.
    #[arg(long)]
    pub kubernetes: bool,

    /// (docker) The Docker Engine version on the target system, e.g. 20.10 [default: asked
    /// from the daemon ($DOCKER_HOST or /var/run/docker.sock), else `dockerd --version`].
    /// Docker < 24 cannot pass annotations: install then sets env_requests = true.
    #[arg(long, value_name = "VERSION")]
    pub docker_version: Option<String>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Docker,
    Containerd,
    Podman,
    #[value(alias = "cri-o")]
    Crio,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker",
            EngineKind::Containerd => "containerd",
            EngineKind::Podman => "podman",
            EngineKind::Crio => "crio",
        }
    }
    fn engine(self) -> Box<dyn Engine> {
        match self {
            EngineKind::Docker => Box::new(docker::Docker::default()),
            EngineKind::Containerd => Box::new(containerd::Containerd::default()),
            EngineKind::Podman => Box::new(podman::Podman),
            EngineKind::Crio => Box::new(crio::Crio::default()),
        }
    }
    /// The engine in cluster mode (`--kubernetes`); only the CRI engines have one.
    fn cluster_engine(self) -> Result<Box<dyn Engine>, EngineError> {
        match self {
            EngineKind::Containerd => Ok(Box::new(containerd::Containerd { kubernetes: true })),
            EngineKind::Crio => Ok(Box::new(crio::Crio { kubernetes: true })),
            k => Err(EngineError::Usage(format!(
                "--kubernetes is for the Kubernetes node engines (containerd, crio), not {}",
                k.name()
            ))),
        }
    }
}

/// Errors a user can act on: which file, what is wrong, what to do.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{}: {err}{}", path.display(), io_hint(err))]
    Io { path: PathBuf, err: io::Error },
    #[error("{}: not valid JSON: {err}\n  fix the file (or move it away), then run the command again; nothing was changed", path.display())]
    BadJson {
        path: PathBuf,
        err: serde_json::Error,
    },
    #[error("{}: not valid TOML: {msg}\n  fix the file (or move it away), then run the command again; nothing was changed", path.display())]
    BadToml { path: PathBuf, msg: String },
    #[error("{}: {what}\n  {hint}", path.display())]
    Invalid {
        path: PathBuf,
        what: String,
        hint: String,
    },
    #[error("{}: changed while gpu-quota was writing its changes; run the command again", path.display())]
    Raced { path: PathBuf },
    #[error("{0}")]
    Usage(String),
}

fn io_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => " (run as root, e.g. with sudo, or use --root DIR)",
        _ => "",
    }
}

impl EngineError {
    pub fn io(path: impl Into<PathBuf>, err: io::Error) -> Self {
        EngineError::Io {
            path: path.into(),
            err,
        }
    }
    pub fn bad_toml(path: &Path, e: impl std::fmt::Display) -> Self {
        EngineError::BadToml {
            path: path.to_path_buf(),
            msg: e.to_string().trim_end().to_string(),
        }
    }
    pub fn invalid(path: &Path, what: impl Into<String>, hint: impl Into<String>) -> Self {
        EngineError::Invalid {
            path: path.to_path_buf(),
            what: what.into(),
            hint: hint.into(),
        }
    }
    /// Errors are built with target-system paths; show the file as it is on this machine.
    fn rooted(self, fs: &RootFs) -> Self {
        let map = |p: PathBuf| fs.host_path(&p);
        match self {
            EngineError::Io { path, err } => EngineError::Io {
                path: map(path),
                err,
            },
            EngineError::BadJson { path, err } => EngineError::BadJson {
                path: map(path),
                err,
            },
            EngineError::BadToml { path, msg } => EngineError::BadToml {
                path: map(path),
                msg,
            },
            EngineError::Invalid { path, what, hint } => EngineError::Invalid {
                path: map(path),
                what,
                hint,
            },
            EngineError::Raced { path } => EngineError::Raced { path: map(path) },
            e @ EngineError::Usage(_) => e,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// An engine configuration file (shown as a diff with --dry-run).
    Config,
    /// A `.gpu-quota.bak` backup.
    Backup,
    /// The installer's record of directories it created.
    State,
}

/// One file to create (`before == None`), replace, or delete (`after == None`).
/// `path` is on the target system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: PathBuf,
    pub before: Option<Vec<u8>>,
    pub after: Option<Vec<u8>>,
    pub kind: ChangeKind,
}

impl FileChange {
    pub fn config(path: &str, before: Option<Vec<u8>>, after: Option<Vec<u8>>) -> Self {
        FileChange {
            path: PathBuf::from(path),
            before,
            after,
            kind: ChangeKind::Config,
        }
    }
    fn is_noop(&self) -> bool {
        self.before == self.after
    }
}

/// What an engine wants changed, plus remarks for the user.
#[derive(Debug, Default)]
pub struct EnginePlan {
    pub changes: Vec<FileChange>,
    pub notes: Vec<String>,
}

/// A complete plan: files (in the order to apply), directories to create first and to remove
/// last (when empty).
#[derive(Debug, Default)]
pub struct Plan {
    pub changes: Vec<FileChange>,
    pub mkdirs: Vec<PathBuf>,
    pub rmdirs: Vec<PathBuf>,
    pub notes: Vec<String>,
}

/// One container engine. Planning functions are pure: they only read through `fs`.
pub trait Engine {
    fn kind(&self) -> EngineKind;
    /// Configuration edits that register `runtime` (an absolute path on the target system).
    /// Unchanged files may be left out or returned with `before == after`.
    fn plan_install(&self, fs: &dyn FsView, runtime: &str) -> Result<EnginePlan, EngineError>;
    /// Edits that remove exactly our entries from the current configuration.
    fn plan_uninstall(&self, fs: &dyn FsView) -> Result<EnginePlan, EngineError>;
    /// The runtime path currently registered, if any.
    fn installed_runtime(&self, fs: &dyn FsView) -> Result<Option<String>, EngineError>;
    /// Lines to print after a change (may signal the daemon when `ctx.may_signal()`).
    fn finish(&self, ctx: &Ctx, installed: bool) -> Vec<String>;
    /// The `env_requests` this engine needs in gpu-quota's config.toml (module `gqconfig`).
    fn env_requests(&self) -> EnvRequests {
        EnvRequests::NotMine
    }
}

/// What an engine's install decides about `env_requests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvRequests {
    /// Leave the key alone.
    NotMine,
    /// Set it, for this reason (a comment next to the key).
    Set(bool, String),
    /// It depends on something we could not find out (a note for the user).
    Unknown(String),
}

/// What `finish` needs to know about the invocation.
pub struct Ctx {
    pub root_given: bool,
    pub dry_run: bool,
    pub no_reload: bool,
    pub runtime: String,
}

impl Ctx {
    pub fn may_signal(&self) -> bool {
        !self.root_given && !self.dry_run && !self.no_reload
    }
}

/// `gpu-quota install ENGINE`
pub fn install(args: &EngineArgs) -> Result<()> {
    run(args, true)
}

/// `gpu-quota uninstall ENGINE`
pub fn uninstall(args: &EngineArgs) -> Result<()> {
    run(args, false)
}

/// `gpu-quota doctor`'s engine checks on this host.
pub fn doctor_checks(env_requests: bool) -> Vec<doctor::Check> {
    let fs = RootFs::new(PathBuf::from("/"));
    let program = |p: &str| core_which(p);
    doctor::checks(&doctor::Host {
        fs: &fs,
        program: &program,
        docker_version: dockerver::detect(None),
        env_requests,
    })
}

/// A TOML basic string (`"..."`, escaped).
pub fn toml_str(s: &str) -> String {
    toml_edit::Value::from(s).to_string().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::fsutil::MemFs;
    use super::*;

    /// Install then uninstall through the generic planners; returns the tree after each step.
    pub(crate) fn round_trip(kind: EngineKind, start: MemFs, rt: &str) -> (MemFs, MemFs) {
        let e = kind.engine();
        let mut fs = start.clone();
        let p = plan_install(e.as_ref(), &fs, rt).unwrap();
        fs.apply(&p.changes);
        let installed = fs.clone();
        let again = plan_install(e.as_ref(), &fs, rt).unwrap();
        assert!(
            again.changes.is_empty(),
            "second install changes nothing: {:?}",
            again.changes
        );
        let u = plan_uninstall(e.as_ref(), &fs).unwrap();
        fs.apply(&u.changes);
        for d in &u.rmdirs {
            fs.dirs.remove(d);
        }
        for d in &p.mkdirs {
            assert!(
                u.rmdirs.contains(d),
                "created dir {} removed again",
                d.display()
            );
        }
        assert_eq!(
            fs.files, start.files,
            "uninstall restores every file byte for byte"
        );
        (installed, fs)
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("/usr/bin/x"), "\"/usr/bin/x\"");
        assert_eq!(toml_str("a\"b\\c"), "'a\"b\\c'");
    }

    #[test]
    fn overlay_hides_and_adds() {
        let base = MemFs::new().with("/a/x", "1").with("/a/y", "2");
        let mut files = BTreeMap::new();
        files.insert(PathBuf::from("/a/x"), None);
        files.insert(PathBuf::from("/a/z"), Some(b"3".to_vec()));
        let ov = Overlay { base: &base, files };
        assert_eq!(ov.list_dir(Path::new("/a")), vec!["y", "z"]);
        assert!(!ov.exists(Path::new("/a/x")));
        assert_eq!(ov.read(Path::new("/a/z")).unwrap(), Some(b"3".to_vec()));
    }

    #[test]
    fn install_records_created_dirs_and_backs_up() {
        let fs = MemFs::new().with("/etc/docker/daemon.json", "{\"debug\": true}\n");
        let p = plan_install(
            &docker::Docker::default(),
            &fs,
            "/usr/bin/gpu-quota-runtime",
        )
        .unwrap();
        assert!(p.mkdirs.is_empty());
        assert_eq!(p.changes[0].kind, ChangeKind::Backup);
        assert_eq!(
            p.changes[0].path,
            PathBuf::from("/etc/docker/daemon.json.gpu-quota.bak")
        );
        let fresh = MemFs::new();
        let p = plan_install(
            &docker::Docker::default(),
            &fresh,
            "/usr/bin/gpu-quota-runtime",
        )
        .unwrap();
        assert_eq!(p.mkdirs[0], PathBuf::from("/etc"));
        assert!(p.changes.iter().any(|c| c.kind == ChangeKind::State));
        assert!(!p.changes.iter().any(|c| c.kind == ChangeKind::Backup));
    }
}
