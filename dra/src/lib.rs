//! gpu-quota's DRA driver `vram.gpu-quota.io`: each GPU's memory as
//! consumable capacity (KEP-5075) in one ResourceSlice per node, and claims
//! prepared as ledger reservations that gpu-quota-runtime enforces.
//!
//! Pure decisions live in `quantity` (Kubernetes quantities as bytes),
//! `slice` (the ResourceSlice from the node's offers), `claim` (a claim
//! object to one GPU and a byte count, or a refusal) and `publish` (when to
//! write the slice); `node` is the node behind a trait (`core::claims`),
//! `source` the API server's claims behind a trait, `service` the kubelet's
//! gRPC services, `health` the kubelet's device health stream, `h2authority` the registration socket's adapter for the
//! kubelet's `:authority`, `conns` the bounds on both sockets' connections, and `daemon` ties them together.
pub mod api;
pub mod claim;
pub mod conns;
pub mod daemon;
pub mod h2authority;
pub mod health;
pub mod node;
pub mod params;
pub mod publish;
pub mod quantity;
pub mod service;
pub mod slice;
pub mod source;
