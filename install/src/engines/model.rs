//! The engines' shared vocabulary: which engine, what a plan changes, the
//! errors a user acts on, and the names every engine writes. Every engine
//! module, the planner, the applier and the doctor import it; it imports
//! none of them, so the engines' imports run one way.
use std::io;
use std::path::{Path, PathBuf};

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
    pub(super) fn is_noop(&self) -> bool {
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

/// A TOML basic string (`"..."`, escaped).
pub fn toml_str(s: &str) -> String {
    toml_edit::Value::from(s).to_string().trim().to_string()
}
