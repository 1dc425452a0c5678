//! Talking to the kubelet: registering on its socket, and noticing when it
//! restarts (the kubelet recreates `kubelet.sock` and removes the plugin
//! sockets it knew; a plugin must then serve and register again).
use crate::api::{self, registration_client::RegistrationClient};
use hyper_util::rt::TokioIo;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("cannot connect to the kubelet at {path}: {err}")]
    Connect {
        path: PathBuf,
        err: tonic::transport::Error,
    },
    #[error("the kubelet at {path} refused the registration of {resource}: {status}")]
    Refused {
        path: PathBuf,
        resource: String,
        status: tonic::Status,
    },
    #[error("the kubelet at {path} did not answer the registration within {secs} s")]
    Timeout { path: PathBuf, secs: u64 },
}

/// A gRPC channel over a unix socket.
pub async fn unix_channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // the URI is not used: every connection goes to `path`
    Endpoint::from_static("http://[::]:0")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
            }
        }))
        .await
}

/// Register `endpoint` (a socket file name in the kubelet's directory) for
/// `resource`.
pub async fn register(
    kubelet_sock: &Path,
    endpoint: &str,
    resource: &str,
) -> Result<(), KubeletError> {
    let ch = unix_channel(kubelet_sock)
        .await
        .map_err(|err| KubeletError::Connect {
            path: kubelet_sock.into(),
            err,
        })?;
    let mut c = RegistrationClient::new(ch);
    let req = api::RegisterRequest {
        version: api::VERSION.into(),
        endpoint: endpoint.into(),
        resource_name: resource.into(),
        options: Some(crate::service::options()),
    };
    let secs = 10;
    match tokio::time::timeout(Duration::from_secs(secs), c.register(req)).await {
        Err(_) => Err(KubeletError::Timeout {
            path: kubelet_sock.into(),
            secs,
        }),
        Ok(Err(status)) => Err(KubeletError::Refused {
            path: kubelet_sock.into(),
            resource: resource.into(),
            status,
        }),
        Ok(Ok(_)) => Ok(()),
    }
}

/// Identity of a socket file (device, inode); None when it is absent.
/// A restarted kubelet makes a new `kubelet.sock`, so the identity changes.
pub fn socket_identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}
