//! Carrying a plan out: `--dry-run` diffs, atomic writes, directories, and the
//! command-line flow of `gpu-quota install|uninstall ENGINE` (target root, runtime path).
use super::fsutil::{FsView, RootFs};
use super::model::*;
use super::plan::{plan_install, plan_uninstall};
use super::{fsutil, registry};
use anyhow::{Context, Result};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(super) fn label(fs: &RootFs, p: &Path) -> String {
    fs.host_path(p).display().to_string()
}

/// Print what the plan would do, as diffs.
pub(super) fn print_dry_run(plan: &Plan, fs: &RootFs) {
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
pub(super) fn apply(plan: &Plan, fs: &RootFs) -> Result<(), EngineError> {
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
                gpuquota_core::fsutil::write_atomic_as(
                    &h,
                    bytes,
                    gpuquota_core::fsutil::FileMode::KeepOr(0o644),
                    &mut |_| {},
                )
                .map_err(|e| EngineError::io(&target, e))?;
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

pub(super) fn root_fs(args: &EngineArgs) -> Result<RootFs> {
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
pub(super) fn runtime_path(args: &EngineArgs, fs: &RootFs) -> Result<String> {
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

pub(super) fn run(args: &EngineArgs, installing: bool) -> Result<()> {
    let fs = root_fs(args)?;
    let engine = registry::engine_for(args)?;
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
    .map_err(|e| rooted(e, &fs))?;

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
    apply(&plan, &fs).map_err(|e| rooted(e, &fs))?;
    for line in engine.finish(&ctx, installing) {
        say!("{line}");
    }
    Ok(())
}

pub(super) fn core_which(p: &str) -> bool {
    gpuquota_core::paths::which(Path::new(p)).is_some()
}

/// Errors are built with target-system paths; show the file as it is on this machine.
pub(super) fn rooted(e: EngineError, fs: &RootFs) -> EngineError {
    let map = |p: PathBuf| fs.host_path(&p);
    match e {
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
