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
pub mod gqconfig;
mod podman;
pub mod reload;

use fsutil::{backup_path, FsView, RootFs};

/// Name of the runtime in every engine's configuration.
pub const RUNTIME_NAME: &str = "gpu-quota";
/// Request keys that must reach config.json `annotations` (containerd `pod_annotations` are
/// glob patterns).
pub use gpuquota_core::formats::keys::ANNOTATION_PATTERNS;
/// Cluster mode (`--kubernetes`): the container annotations gpu-quota-device-plugin's Allocate
/// returns, and nothing else.
pub use gpuquota_core::formats::keys::CLUSTER_ANNOTATIONS;
/// Where install records the directories it created (on the target system).
pub const STATE_DIR: &str = "/var/lib/gpu-quota/install";

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

/// The engine's own edits plus the `env_requests` edit of config.toml.
fn engine_plan_install(
    engine: &dyn Engine,
    fs: &dyn FsView,
    runtime: &str,
) -> Result<EnginePlan, EngineError> {
    let mut ep = engine.plan_install(fs, runtime)?;
    match engine.env_requests() {
        EnvRequests::NotMine => {}
        EnvRequests::Set(on, why) => {
            ep.changes.push(gqconfig::install_change(
                fs,
                on,
                engine.kind().name(),
                &why,
            )?);
        }
        EnvRequests::Unknown(note) => ep.notes.push(note),
    }
    Ok(ep)
}

fn engine_plan_uninstall(engine: &dyn Engine, fs: &dyn FsView) -> Result<EnginePlan, EngineError> {
    let mut ep = engine.plan_uninstall(fs)?;
    if let Some(c) = gqconfig::uninstall_change(fs, engine.kind().name())? {
        ep.changes.push(c);
    }
    Ok(ep)
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

/// The file system seen through overrides (`None` = absent), for replaying an install.
struct Overlay<'a> {
    base: &'a dyn FsView,
    files: BTreeMap<PathBuf, Option<Vec<u8>>>,
}

impl FsView for Overlay<'_> {
    fn read(&self, path: &Path) -> Result<Option<Vec<u8>>, EngineError> {
        match self.files.get(path) {
            Some(v) => Ok(v.clone()),
            None => self.base.read(path),
        }
    }
    fn exists(&self, path: &Path) -> bool {
        match self.files.get(path) {
            Some(v) => v.is_some(),
            None => self.base.exists(path),
        }
    }
    fn list_dir(&self, path: &Path) -> Vec<String> {
        let mut v = self.base.list_dir(path);
        for (p, c) in &self.files {
            if p.parent() == Some(path) {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                v.retain(|x| *x != n);
                if c.is_some() {
                    v.push(n);
                }
            }
        }
        v.sort();
        v
    }
}

#[derive(serde::Serialize, serde::Deserialize, Default, Debug, PartialEq)]
struct State {
    /// Directories install created, parents first.
    created_dirs: Vec<PathBuf>,
}

fn state_path(kind: EngineKind) -> PathBuf {
    PathBuf::from(format!("{STATE_DIR}/{}.json", kind.name()))
}

fn read_state(fs: &dyn FsView, kind: EngineKind) -> Result<Option<(Vec<u8>, State)>, EngineError> {
    let p = state_path(kind);
    match fs.read(&p)? {
        None => Ok(None),
        Some(b) => {
            let s = serde_json::from_slice(&b).map_err(|err| EngineError::BadJson {
                path: p.clone(),
                err,
            })?;
            Ok(Some((b, s)))
        }
    }
}

/// Directories above `path` that do not exist, parents first.
fn missing_dirs(fs: &dyn FsView, path: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = path
        .ancestors()
        .skip(1)
        .filter(|d| *d != Path::new("/") && !fs.exists(d))
        .map(Path::to_path_buf)
        .collect();
    v.reverse();
    v
}

/// Install plan: the engine's edits plus backups, created directories and their record.
pub fn plan_install(
    engine: &dyn Engine,
    fs: &dyn FsView,
    runtime: &str,
) -> Result<Plan, EngineError> {
    let ep = engine_plan_install(engine, fs, runtime)?;
    let edits: Vec<FileChange> = ep.changes.into_iter().filter(|c| !c.is_noop()).collect();
    let mut plan = Plan {
        notes: ep.notes,
        ..Default::default()
    };
    if edits.is_empty() {
        return Ok(plan);
    }
    for c in &edits {
        if let (Some(old), Some(_)) = (&c.before, &c.after) {
            let b = backup_path(&c.path);
            if !fs.exists(&b) {
                plan.changes.push(FileChange {
                    path: b,
                    before: None,
                    after: Some(old.clone()),
                    kind: ChangeKind::Backup,
                });
            }
        }
    }
    for c in &edits {
        if c.before.is_none() && c.after.is_some() {
            for d in missing_dirs(fs, &c.path) {
                if !plan.mkdirs.contains(&d) {
                    plan.mkdirs.push(d);
                }
            }
        }
    }
    plan.changes.extend(edits);
    if !plan.mkdirs.is_empty() {
        let kind = engine.kind();
        let sp = state_path(kind);
        let old = read_state(fs, kind)?;
        let mut state = old
            .as_ref()
            .map(|(_, s)| State {
                created_dirs: s.created_dirs.clone(),
            })
            .unwrap_or_default();
        for d in missing_dirs(fs, &sp) {
            if !plan.mkdirs.contains(&d) {
                plan.mkdirs.push(d);
            }
        }
        for d in &plan.mkdirs {
            if !state.created_dirs.contains(d) {
                state.created_dirs.push(d.clone());
            }
        }
        let mut bytes = serde_json::to_vec_pretty(&state).expect("state serializes");
        bytes.push(b'\n');
        let before = old.map(|(b, _)| b);
        if before.as_deref() != Some(&bytes[..]) {
            plan.changes.push(FileChange {
                path: sp,
                before,
                after: Some(bytes),
                kind: ChangeKind::State,
            });
        }
    }
    Ok(plan)
}

/// Uninstall plan: restore backups where the file is exactly what install made of them,
/// otherwise remove only our entries; delete what install created.
pub fn plan_uninstall(engine: &dyn Engine, fs: &dyn FsView) -> Result<Plan, EngineError> {
    let ep = engine_plan_uninstall(engine, fs)?;
    let edits: Vec<FileChange> = ep.changes.into_iter().filter(|c| !c.is_noop()).collect();
    let mut plan = Plan {
        notes: ep.notes,
        ..Default::default()
    };
    let installed = engine.installed_runtime(fs)?;

    // The tree as it was before install, as far as we can tell: backups in place of the files
    // they were taken from, and the files uninstall deletes (our drop-ins) absent.
    let mut pre = BTreeMap::new();
    for c in &edits {
        let b = backup_path(&c.path);
        if let Some(bk) = fs.read(&b)? {
            pre.insert(c.path.clone(), Some(bk));
        } else if c.after.is_none() {
            pre.insert(c.path.clone(), None);
        }
    }

    let mut backup_deletes = Vec::new();
    for mut c in edits {
        let bpath = backup_path(&c.path);
        let backup = fs.read(&bpath)?;
        if let (Some(current), Some(rt)) = (&c.before, &installed) {
            // Replay install on the pre-install tree with this file as it was before.
            let mut ov = Overlay {
                base: fs,
                files: pre.clone(),
            };
            ov.files.insert(c.path.clone(), backup.clone());
            let replay = engine_plan_install(engine, &ov, rt)?;
            let expected = match replay.changes.iter().find(|x| x.path == c.path) {
                Some(x) => x.after.clone(),
                None => backup.clone(),
            };
            if expected.as_deref() == Some(&current[..]) {
                // Untouched since install: put back exactly what was there.
                c.after = backup.clone();
            } else if backup.is_some() {
                plan.notes.push(format!(
                    "{} was changed after install: removed only gpu-quota's entries and kept the backup {}",
                    c.path.display(),
                    bpath.display()
                ));
            }
        }
        if c.after == backup && backup.is_some() {
            backup_deletes.push(FileChange {
                path: bpath,
                before: backup,
                after: None,
                kind: ChangeKind::Backup,
            });
        }
        if !c.is_noop() {
            plan.changes.push(c);
        }
    }
    plan.changes.extend(backup_deletes);
    if let Some((bytes, state)) = read_state(fs, engine.kind())? {
        plan.changes.push(FileChange {
            path: state_path(engine.kind()),
            before: Some(bytes),
            after: None,
            kind: ChangeKind::State,
        });
        plan.rmdirs = state.created_dirs.into_iter().rev().collect();
    }
    Ok(plan)
}

fn label(fs: &RootFs, p: &Path) -> String {
    fs.host_path(p).display().to_string()
}

/// Print what the plan would do, as diffs.
fn print_dry_run(plan: &Plan, fs: &RootFs) {
    for d in &plan.mkdirs {
        say!("would create directory {}", label(fs, d));
    }
    for c in &plan.changes {
        let l = label(fs, &c.path);
        match c.kind {
            ChangeKind::Config => {
                let old = if c.before.is_some() {
                    l.clone()
                } else {
                    "/dev/null".to_string()
                };
                let new = if c.after.is_some() {
                    l.clone()
                } else {
                    "/dev/null".to_string()
                };
                let _ = write!(
                    io::stdout(),
                    "{}",
                    fsutil::unified_diff(
                        c.before.as_deref().unwrap_or_default(),
                        c.after.as_deref().unwrap_or_default(),
                        &old,
                        &new
                    )
                );
            }
            ChangeKind::Backup | ChangeKind::State => {
                let what = if c.kind == ChangeKind::Backup {
                    "backup"
                } else {
                    "installer record"
                };
                match (&c.before, &c.after) {
                    (None, Some(_)) => say!("would write {what} {l}"),
                    (Some(_), Some(_)) => say!("would update {what} {l}"),
                    _ => say!("would remove {what} {l}"),
                }
            }
        }
    }
    for d in &plan.rmdirs {
        say!("would remove directory {} (if empty)", label(fs, d));
    }
}

/// Apply a plan: directories, then files in order (each atomically), then empty directories.
fn apply(plan: &Plan, fs: &RootFs) -> Result<(), EngineError> {
    // Nothing is written if any file changed since it was planned.
    for c in &plan.changes {
        if fs.read(&c.path)? != c.before {
            return Err(EngineError::Raced {
                path: c.path.clone(),
            });
        }
    }
    for d in &plan.mkdirs {
        let h = fs.host_path(d);
        match fs::create_dir(&h) {
            Ok(()) => {
                fs::set_permissions(&h, fs::Permissions::from_mode(0o755))
                    .map_err(|e| EngineError::io(d, e))?;
                say!("  created directory {}", h.display());
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(EngineError::io(d, e)),
        }
    }
    for c in &plan.changes {
        let target = fs.resolve(&c.path);
        let h = fs.host_path(&target);
        match &c.after {
            Some(bytes) => {
                fsutil::atomic_write(&h, bytes, 0o644).map_err(|e| EngineError::io(&target, e))?;
                let verb = match (c.kind, c.before.is_some()) {
                    (ChangeKind::Backup, _) => "backed up to",
                    (_, true) => "updated",
                    (_, false) => "created",
                };
                say!("  {verb} {}", h.display());
            }
            None => {
                fsutil::remove_file(&h).map_err(|e| EngineError::io(&target, e))?;
                say!("  removed {}", h.display());
            }
        }
    }
    for d in &plan.rmdirs {
        let h = fs.host_path(d);
        match fs::remove_dir(&h) {
            Ok(()) => say!("  removed directory {}", h.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => say!("  kept directory {} (not empty)", h.display()),
        }
    }
    Ok(())
}

fn root_fs(args: &EngineArgs) -> Result<RootFs> {
    match &args.root {
        None => Ok(RootFs::new(PathBuf::from("/"))),
        Some(r) => {
            let abs = std::path::absolute(r).with_context(|| format!("--root {}", r.display()))?;
            let m = fs::metadata(&abs)
                .with_context(|| format!("--root {}: cannot use it", abs.display()))?;
            if !m.is_dir() {
                anyhow::bail!("--root {}: not a directory", abs.display());
            }
            Ok(RootFs::new(abs))
        }
    }
}

/// The runtime path to register, as a path on the target system.
fn runtime_path(args: &EngineArgs, fs: &RootFs) -> Result<String> {
    let p = match &args.runtime_path {
        Some(p) if p.is_absolute() => p.clone(),
        Some(p) if args.root.is_some() => {
            return Err(EngineError::Usage(format!(
                "--runtime-path {}: give an absolute path on the target system when --root is used",
                p.display()
            ))
            .into())
        }
        Some(p) => std::path::absolute(p)?,
        None => {
            let exe = std::env::current_exe()
                .context("cannot find the running gpu-quota binary; pass --runtime-path")?;
            let dir = exe.parent().unwrap_or(Path::new("/"));
            let cand = dir.join("gpu-quota-runtime");
            // A packager running DIR/usr/bin/gpu-quota --root DIR means /usr/bin/gpu-quota-runtime.
            match cand.strip_prefix(fs.root()) {
                Ok(rel) if args.root.is_some() => Path::new("/").join(rel),
                _ => cand,
            }
        }
    };
    let p = fsutil::normalize(&p);
    let s = p
        .to_str()
        .filter(|s| !s.chars().any(char::is_control))
        .ok_or_else(|| EngineError::Usage(format!("runtime path {:?} is not printable UTF-8", p)))?
        .to_string();
    let host = fs.host_path(&p);
    let usable = fs::metadata(&host)
        .map(|m| m.is_file() && m.mode() & 0o111 != 0)
        .unwrap_or(false);
    if !usable {
        if args.root.is_some() || args.dry_run {
            let _ = writeln!(
                io::stderr(),
                "gpu-quota: warning: {} is not an executable file (yet); registering it anyway",
                host.display()
            );
        } else {
            return Err(EngineError::invalid(
                &host,
                "gpu-quota-runtime is not there (or not executable)",
                "install it first (make install PREFIX=/usr/local), or pass --runtime-path /abs/path/gpu-quota-runtime",
            )
            .into());
        }
    }
    Ok(s)
}

fn run(args: &EngineArgs, installing: bool) -> Result<()> {
    let fs = root_fs(args)?;
    let engine: Box<dyn Engine> = match args.engine {
        _ if args.kubernetes => args.engine.cluster_engine()?,
        EngineKind::Docker => Box::new(docker::Docker::new(dockerver::detect(
            args.docker_version.as_deref(),
        ))),
        k => k.engine(),
    };
    let name = args.engine.name();
    let runtime = if installing {
        runtime_path(args, &fs)?
    } else {
        String::new()
    };
    let plan = if installing {
        plan_install(engine.as_ref(), &fs, &runtime)
    } else {
        plan_uninstall(engine.as_ref(), &fs)
    }
    .map_err(|e| e.rooted(&fs))?;

    let ctx = Ctx {
        root_given: args.root.is_some(),
        dry_run: args.dry_run,
        no_reload: args.no_reload,
        runtime,
    };
    let verb = if installing { "install" } else { "uninstall" };
    for n in &plan.notes {
        say!("note: {n}");
    }
    if plan.changes.is_empty() {
        if installing {
            say!(
                "{name}: runtime {RUNTIME_NAME:?} already installed ({}); nothing changed",
                ctx.runtime
            );
        } else {
            say!("{name}: runtime {RUNTIME_NAME:?} is not installed; nothing changed");
        }
        return Ok(());
    }
    if args.dry_run {
        say!("{name}: dry run of `gpu-quota {verb} {name}`; nothing was changed");
        print_dry_run(&plan, &fs);
        return Ok(());
    }
    if installing {
        say!(
            "{name}: registering runtime {RUNTIME_NAME:?} -> {}",
            ctx.runtime
        );
    } else {
        say!("{name}: removing runtime {RUNTIME_NAME:?}");
    }
    apply(&plan, &fs).map_err(|e| e.rooted(&fs))?;
    for line in engine.finish(&ctx, installing) {
        say!("{line}");
    }
    Ok(())
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

fn core_which(p: &str) -> bool {
    gpuquota_core::paths::which(Path::new(p)).is_some()
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
