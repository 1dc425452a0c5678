//! The node's side of a claim, behind a small trait: what the ledger can
//! offer per GPU, and preparing/unpreparing a claim (a claim reservation in
//! the ledger and its CDI spec). The real node is `core::claims`; tests
//! drive the service with scripted nodes too.

// The contract's types (core::claims, written by the node side): these
// mirror it field for field until that module lands, then are its re-exports.
/// Per GPU: what claims may take together on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub uuid: String,
    pub index: u32,
    pub product: String,
    pub total_bytes: u64,
    pub offer_bytes: u64,
}
/// A claim as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAlloc {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub gpu_uuid: String,
    pub bytes: u64,
}
/// What a prepared claim hands the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub cdi_device_ids: Vec<String>,
}

/// What the driver asks of the node. Calls may block on the ledger lock:
/// the service runs them on a blocking thread.
pub trait Node: Send + Sync {
    fn offers(&self) -> Result<Vec<Offer>, NodeError>;
    fn prepare(&self, a: &ClaimAlloc) -> Result<Prepared, NodeError>;
    fn unprepare(&self, uid: &str) -> Result<(), NodeError>;
}

/// Why the node refused (its message is shown to the user as is).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NodeError(pub String);
