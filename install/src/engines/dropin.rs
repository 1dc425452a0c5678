//! Engines whose whole installation is one drop-in file that gpu-quota owns
//! (podman's containers.conf.d, CRI-O's crio.conf.d): install writes it,
//! uninstall removes it, and the registered runtime is read back from it.
use std::path::Path;

use super::fsutil::FsView;
use super::model::{EngineError, EnginePlan, FileChange};

pub fn plan_install(fs: &dyn FsView, path: &str, text: String) -> Result<EnginePlan, EngineError> {
    let before = fs.read(Path::new(path))?;
    Ok(EnginePlan {
        changes: vec![FileChange::config(path, before, Some(text.into_bytes()))],
        notes: vec![],
    })
}

pub fn plan_uninstall(fs: &dyn FsView, path: &str) -> Result<EnginePlan, EngineError> {
    let mut plan = EnginePlan::default();
    if let Some(b) = fs.read(Path::new(path))? {
        plan.changes.push(FileChange::config(path, Some(b), None));
    }
    Ok(plan)
}

/// The drop-in as TOML; None when it is absent or not TOML (then it is not ours to read).
pub fn read_toml(
    fs: &dyn FsView,
    path: &str,
) -> Result<Option<toml_edit::DocumentMut>, EngineError> {
    let Some(b) = fs.read(Path::new(path))? else {
        return Ok(None);
    };
    Ok(String::from_utf8_lossy(&b)
        .parse::<toml_edit::DocumentMut>()
        .ok())
}
