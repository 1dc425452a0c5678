//! The node's side of a claim, behind a small trait: what the ledger can
//! offer per GPU, and preparing/unpreparing a claim (a claim reservation in
//! the ledger and its CDI spec). The node is `core::claims` (the protocol
//! tests use it too); the trait keeps the service testable without one.
use std::path::PathBuf;

pub use gpuquota_core::claims::{ClaimAlloc, ClaimError, Offer, Prepared};

/// What the driver asks of the node. Calls may block on the ledger lock:
/// the service runs them on a blocking thread.
pub trait Node: Send + Sync {
    fn offers(&self) -> Result<Vec<Offer>, NodeError>;
    fn prepare(&self, a: &ClaimAlloc) -> Result<Prepared, NodeError>;
    fn unprepare(&self, uid: &str) -> Result<(), NodeError>;
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Config(#[from] gpuquota_core::config::ConfigError),
    #[error("{0}")]
    Claim(#[from] ClaimError),
}

/// The host: gpu-quota's config read afresh at every call (as the runtime
/// reads it), then `core::claims` on its ledger and CDI directory.
pub struct HostNode {
    pub config_path: PathBuf,
}

impl HostNode {
    fn config(&self) -> Result<gpuquota_core::Config, NodeError> {
        Ok(gpuquota_core::Config::load(&self.config_path)?)
    }
}

impl Node for HostNode {
    fn offers(&self) -> Result<Vec<Offer>, NodeError> {
        let cfg = self.config()?;
        let costs = gpuquota_core::ctxcost::known_costs(&cfg, true);
        Ok(gpuquota_core::claims::offers(&cfg, &costs)?)
    }

    fn prepare(&self, a: &ClaimAlloc) -> Result<Prepared, NodeError> {
        // what a context costs here: a claim that cannot hold one is refused
        let cfg = self.config()?;
        let costs = gpuquota_core::ctxcost::known_costs(&cfg, true);
        Ok(gpuquota_core::claims::prepare_waiting(
            &cfg,
            a,
            &costs,
            gpuquota_core::claims::RELEASE_WAIT,
        )?)
    }

    fn unprepare(&self, uid: &str) -> Result<(), NodeError> {
        Ok(gpuquota_core::claims::unprepare(&self.config()?, uid)?)
    }
}
