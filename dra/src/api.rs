//! The kubelet's APIs (generated from proto/, the Kubernetes 1.36 files)
//! and the names this driver registers and serves under.
#![allow(clippy::all, missing_docs)]

/// `k8s.io.kubelet.pkg.apis.dra.v1`: NodePrepareResources / NodeUnprepareResources.
pub mod dra {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// `v1alpha1`: the optional DRAResourceHealth service (NodeWatchResources).
pub mod health {
    tonic::include_proto!("v1alpha1");
}

/// `pluginregistration`: the plugin watcher's Registration service.
pub mod registration {
    tonic::include_proto!("pluginregistration");
}

/// The DRA driver name (ResourceSlice.spec.driver, DeviceClass selector,
/// the kubelet's plugin name): the node side's, one definition.
pub use gpuquota_core::formats::keys::DRA_DRIVER as DRIVER;
/// `PluginInfo.type` of a DRA kubelet plugin.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The gRPC services we serve, as `<package>.<service>` (the kubelet picks
/// the first it knows; 1.34+ kubelets know `v1.DRAPlugin`).
pub const SUPPORTED_SERVICES: &[&str] = &["v1.DRAPlugin"];
/// Where the kubelet's plugin watcher looks for registration sockets.
pub const REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// Where this driver's DRA service socket lives.
pub const PLUGIN_DIR: &str = "/var/lib/kubelet/plugins/vram.gpu-quota.io";
/// The DRA service socket's file name in the plugin directory.
pub const DRA_SOCKET: &str = "dra.sock";

/// The registration socket's file name in the registry directory.
pub fn registration_socket() -> String {
    format!("{DRIVER}-reg.sock")
}
