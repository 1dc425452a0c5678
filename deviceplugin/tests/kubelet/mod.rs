//! A test kubelet: the kubelet's side of the device-plugin API v1beta1,
//! built from the same published API as the plugin (protocol test: no
//! kubelet is packaged for these machines). It serves `Registration` on
//! `<dir>/kubelet.sock` the way the kubelet's device manager does
//! (checks the version and the resource name, then dials the plugin's
//! endpoint and asks for its options), and "restarts" like the kubelet:
//! its socket and every plugin socket in the directory are removed, then a
//! new `kubelet.sock` is made.
#![allow(dead_code)]
use gpuquota_deviceplugin::api::{
    self,
    device_plugin_client::DevicePluginClient,
    registration_server::{Registration, RegistrationServer},
};
use gpuquota_deviceplugin::kubelet::unix_channel;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// A registration the test kubelet accepted, with the options the plugin
/// reported when dialled back.
#[derive(Debug)]
pub struct Registered {
    pub request: api::RegisterRequest,
    pub options: api::DevicePluginOptions,
}

struct Reg {
    dir: PathBuf,
    tx: mpsc::UnboundedSender<Registered>,
}

#[tonic::async_trait]
impl Registration for Reg {
    async fn register(
        &self,
        req: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let r = req.into_inner();
        if r.version != api::VERSION {
            return Err(Status::invalid_argument(format!(
                "unsupported API version {:?}",
                r.version
            )));
        }
        // an extended resource name: <domain>/<name>, not kubernetes.io
        let valid = r.resource_name.split_once('/').is_some_and(|(d, n)| {
            d.contains('.') && !d.ends_with("kubernetes.io") && !n.is_empty()
        });
        if !valid {
            return Err(Status::invalid_argument(format!(
                "invalid extended resource name {:?}",
                r.resource_name
            )));
        }
        if r.endpoint.contains('/') {
            return Err(Status::invalid_argument("endpoint must be a file name"));
        }
        // the device manager dials the plugin back before answering
        let mut c = plugin_client(&self.dir.join(&r.endpoint))
            .await
            .map_err(|e| Status::unavailable(format!("cannot dial plugin: {e}")))?;
        let options = c
            .get_device_plugin_options(api::Empty {})
            .await?
            .into_inner();
        let _ = self.tx.send(Registered {
            request: r,
            options,
        });
        Ok(Response::new(api::Empty {}))
    }
}

pub async fn plugin_client(
    sock: &Path,
) -> Result<DevicePluginClient<Channel>, tonic::transport::Error> {
    Ok(DevicePluginClient::new(unix_channel(sock).await?))
}

pub struct TestKubelet {
    pub dir: PathBuf,
    rx: mpsc::UnboundedReceiver<Registered>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestKubelet {
    pub fn start(dir: &Path) -> TestKubelet {
        let sock = dir.join(api::KUBELET_SOCKET);
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind kubelet.sock");
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let svc = RegistrationServer::new(Reg {
            dir: dir.to_path_buf(),
            tx,
        });
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await;
        });
        TestKubelet {
            dir: dir.to_path_buf(),
            rx,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// The next accepted registration.
    pub async fn registration(&mut self, within: Duration) -> Registered {
        tokio::time::timeout(within, self.rx.recv())
            .await
            .expect("no registration in time")
            .expect("kubelet stopped")
    }

    /// Whether another registration arrives within `within`.
    pub async fn registers_again(&mut self, within: Duration) -> bool {
        matches!(
            tokio::time::timeout(within, self.rx.recv()).await,
            Ok(Some(_))
        )
    }

    /// Stop as a kubelet restart does: close the socket, remove it and the
    /// plugin sockets of the directory.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
        }
        for e in std::fs::read_dir(&self.dir).unwrap().flatten() {
            use std::os::unix::fs::FileTypeExt;
            if e.file_type().map(|t| t.is_socket()).unwrap_or(false) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
