//! gpu-quota's kubelet device plugin: GPU memory as the extended resource
//! `gpu-quota.io/vram`, 1 unit = 1 GiB, allocated as one slice on one GPU
//! and enforced on the node by gpu-quota-runtime.
//!
//! Pure decisions (which units exist and are healthy, which units a
//! container should get, which request the runtime must see) live in
//! `units`, `prefer` and `allocate`; `node` reads the host (config,
//! inventory, ledger) behind a small trait; `service` is the gRPC
//! `DevicePlugin`; `kubelet` registers with the kubelet and notices its
//! restarts; `daemon` ties them together.
pub mod allocate;
pub mod api;
pub mod daemon;
pub mod kubelet;
pub mod node;
pub mod prefer;
pub mod service;
pub mod units;

/// The extended resource this plugin advertises.
pub use gpuquota_core::formats::keys::RESOURCE_VRAM as RESOURCE_NAME;
/// Bytes per unit of the resource.
pub const UNIT_BYTES: u64 = 1 << 30;
