//! Planning an install or uninstall of one engine (pure, through an `FsView`): the
//! engine's own edits plus `env_requests`, backups of pre-existing files, the directories to
//! create and the state file that records them, and on uninstall the replayed install that
//! tells whether a file is still exactly what install made of its backup.
use super::engine::Engine;
use super::fsutil::{backup_path, FsView};
use super::gqconfig;
use super::model::*;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The engine's own edits plus the `env_requests` edit of config.toml.
pub(super) fn engine_plan_install(
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

pub(super) fn engine_plan_uninstall(
    engine: &dyn Engine,
    fs: &dyn FsView,
) -> Result<EnginePlan, EngineError> {
    let mut ep = engine.plan_uninstall(fs)?;
    if let Some(c) = gqconfig::uninstall_change(fs, engine.kind().name())? {
        ep.changes.push(c);
    }
    Ok(ep)
}

/// The file system seen through overrides (`None` = absent), for replaying an install.
pub(super) struct Overlay<'a> {
    pub(super) base: &'a dyn FsView,
    pub(super) files: BTreeMap<PathBuf, Option<Vec<u8>>>,
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
pub(super) struct State {
    /// Directories install created, parents first.
    created_dirs: Vec<PathBuf>,
}

pub(super) fn state_path(kind: EngineKind) -> PathBuf {
    PathBuf::from(format!(
        "{}/{STATE_SUBDIR}/{}.json",
        gpuquota_core::formats::layout::DEFAULT_LEDGER_DIR,
        kind.name()
    ))
}

pub(super) fn read_state(
    fs: &dyn FsView,
    kind: EngineKind,
) -> Result<Option<(Vec<u8>, State)>, EngineError> {
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
pub(super) fn missing_dirs(fs: &dyn FsView, path: &Path) -> Vec<PathBuf> {
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
