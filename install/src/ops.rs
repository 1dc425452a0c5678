//! Operator commands over the host ledger (filled in with the core library).
use anyhow::Result;
#[derive(clap::Args)]
pub struct LsArgs {}
#[derive(clap::Args)]
pub struct GcArgs {}
#[derive(clap::Args)]
pub struct DoctorArgs {}
#[derive(clap::Args)]
pub struct MetricsArgs {}
pub fn ls(_: &LsArgs) -> Result<()> { anyhow::bail!("not yet") }
pub fn gc(_: &GcArgs) -> Result<()> { anyhow::bail!("not yet") }
pub fn doctor(_: &DoctorArgs) -> Result<()> { anyhow::bail!("not yet") }
pub fn metrics(_: &MetricsArgs) -> Result<()> { anyhow::bail!("not yet") }
