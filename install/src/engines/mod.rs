//! Engine registration: docker, containerd, podman, crio (owned by the installer work).
use anyhow::Result;
#[derive(clap::Args)]
pub struct EngineArgs {
    /// docker | containerd | podman | crio
    pub engine: String,
}
pub fn install(_: &EngineArgs) -> Result<()> { anyhow::bail!("not yet") }
pub fn uninstall(_: &EngineArgs) -> Result<()> { anyhow::bail!("not yet") }
