//! The kubelet device-plugin API v1beta1 (generated from
//! proto/deviceplugin_v1beta1.proto) and its fixed names.
#![allow(clippy::all, missing_docs)]
tonic::include_proto!("v1beta1");

/// The API version sent in `RegisterRequest.version`.
pub const VERSION: &str = "v1beta1";
/// Where the kubelet expects device-plugin sockets.
pub const DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The kubelet's `Registration` socket inside that directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";
