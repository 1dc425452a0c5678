//! What one container engine is to the installer: pure planning over a
//! read-only view of the target tree, and what to say or signal after.
use super::fsutil::FsView;
use super::model::{Ctx, EngineError, EngineKind, EnginePlan, EnvRequests};

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
