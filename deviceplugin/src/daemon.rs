//! The plugin's life: poll the node, serve the DevicePlugin socket, register
//! with the kubelet, start over when the kubelet restarts, stop on request.
use crate::api::{self, device_plugin_server::DevicePluginServer};
use crate::kubelet;
use crate::node::Node;
use crate::service::PluginService;
use crate::units::Snapshot;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Options {
    /// The kubelet's device-plugin directory.
    pub plugin_dir: PathBuf,
    /// Our socket's file name in it.
    pub socket_name: String,
    pub resource: String,
    /// How often the node (inventory, ledger) and the kubelet socket are checked.
    pub poll: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot serve on {path}: {err}")]
    Listen { path: PathBuf, err: std::io::Error },
    #[error("{0}; see --plugin-dir and --socket-name")]
    SocketPath(#[from] gpuquota_core::config::SocketPathError),
}

impl Options {
    /// The kubelet's socket and ours, each short enough for a Unix
    /// socket's path (said before anything starts, with the limit, rather
    /// than by bind's "shorter than SUN_LEN").
    pub fn sockets(&self) -> Result<(PathBuf, PathBuf), DaemonError> {
        use gpuquota_core::config::check_socket_path;
        let kubelet = self.plugin_dir.join(api::KUBELET_SOCKET);
        let ours = self.plugin_dir.join(&self.socket_name);
        check_socket_path("the kubelet's socket", &kubelet)?;
        check_socket_path("the device plugin's socket", &ours)?;
        Ok((kubelet, ours))
    }
}

/// Poll `node` on a thread of its own (reads may block on files or NVML);
/// publish each changed snapshot.
fn start_poller(
    mut node: Box<dyn Node>,
    poll: Duration,
    stop: Arc<AtomicBool>,
) -> (
    watch::Receiver<Snapshot>,
    watch::Receiver<gpuquota_core::config::Policy>,
) {
    let first = node.snapshot(&Snapshot::default());
    tracing::info!(
        "advertising {}/{} healthy units: {}",
        first.healthy(),
        first.total(),
        first.describe()
    );
    let (tx, rx) = watch::channel(first);
    let (ptx, prx) = watch::channel(node.policy());
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(poll);
            let prev = tx.borrow().clone();
            let next = node.snapshot(&prev);
            ptx.send_if_modified(|p| {
                let changed = *p != node.policy();
                *p = node.policy();
                changed
            });
            if next != prev {
                tracing::info!(
                    "advertising {}/{} healthy units: {}",
                    next.healthy(),
                    next.total(),
                    next.describe()
                );
                let _ = tx.send(next);
            }
        }
    });
    (rx, prx)
}

enum Next {
    Restart(&'static str),
    Exit,
}

/// Run until `shutdown` resolves; then stop serving and remove our socket.
pub async fn run(
    opts: Options,
    node: Box<dyn Node>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (kubelet_sock, our_sock) = opts.sockets()?;
    let stop_poll = Arc::new(AtomicBool::new(false));
    let (snapshot, policy) = start_poller(node, opts.poll, stop_poll.clone());
    tokio::pin!(shutdown);
    let mut waiting_logged = false;
    let result = loop {
        // the kubelet first: its socket is where plugins register
        if kubelet::socket_identity(&kubelet_sock).is_none() {
            if !waiting_logged {
                tracing::info!("waiting for the kubelet socket {}", kubelet_sock.display());
                waiting_logged = true;
            }
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                _ = tokio::time::sleep(opts.poll) => continue,
            }
        }
        waiting_logged = false;
        let _ = std::fs::remove_file(&our_sock);
        let listener = match tokio::net::UnixListener::bind(&our_sock) {
            Ok(l) => l,
            Err(err) => {
                break Err(DaemonError::Listen {
                    path: our_sock.clone(),
                    err,
                })
            }
        };
        let our_id = kubelet::socket_identity(&our_sock);
        let (stop_tx, stop_rx) = watch::channel(false);
        let svc = PluginService {
            snapshot: snapshot.clone(),
            policy: policy.clone(),
            stop: stop_rx.clone(),
        };
        let mut server_stop = stop_rx.clone();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(svc))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async move {
                        let _ = server_stop.wait_for(|s| *s).await;
                    },
                ),
        );
        tracing::info!("serving {} on {}", opts.resource, our_sock.display());
        let mut registered_with: Option<Option<(u64, u64)>> = None;
        let next = loop {
            if registered_with.is_none() {
                let id = kubelet::socket_identity(&kubelet_sock);
                let registered = tokio::select! {
                    r = kubelet::register(&kubelet_sock, &opts.socket_name, &opts.resource) => r,
                    _ = &mut shutdown => break Next::Exit,
                };
                match registered {
                    Ok(()) => {
                        tracing::info!(
                            "registered {} with the kubelet ({}, API {})",
                            opts.resource,
                            kubelet_sock.display(),
                            api::VERSION
                        );
                        registered_with = Some(id);
                    }
                    Err(e) => tracing::warn!("{e}; retrying"),
                }
            }
            tokio::select! {
                _ = &mut shutdown => break Next::Exit,
                _ = tokio::time::sleep(opts.poll) => {}
            }
            if kubelet::socket_identity(&our_sock) != our_id {
                break Next::Restart("our socket was removed (the kubelet restarted)");
            }
            if let Some(id) = registered_with {
                if kubelet::socket_identity(&kubelet_sock) != id {
                    break Next::Restart("kubelet.sock was recreated (the kubelet restarted)");
                }
            }
        };
        let _ = stop_tx.send(true);
        match tokio::time::timeout(Duration::from_secs(5), server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("server on {}: {e}", our_sock.display()),
            Ok(Err(e)) => tracing::warn!("server task: {e}"),
            Err(_) => tracing::warn!("server on {} did not stop within 5 s", our_sock.display()),
        }
        match next {
            Next::Exit => break Ok(()),
            Next::Restart(why) => tracing::info!("{why}: serving and registering again"),
        }
    };
    stop_poll.store(true, Ordering::Relaxed);
    if kubelet::socket_identity(&our_sock).is_some() {
        let _ = std::fs::remove_file(&our_sock);
    }
    tracing::info!("stopped");
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(plugin_dir: &str, socket_name: &str) -> Options {
        Options {
            plugin_dir: plugin_dir.into(),
            socket_name: socket_name.into(),
            resource: "r".into(),
            poll: Duration::from_secs(1),
        }
    }

    #[test]
    fn socket_paths_past_sun_path_are_refused_naming_the_limit() {
        let (k, ours) = opts(api::DEVICE_PLUGIN_DIR, "gpu-quota-vram.sock")
            .sockets()
            .unwrap();
        assert!(k.ends_with(api::KUBELET_SOCKET) && ours.ends_with("gpu-quota-vram.sock"));
        let e = opts(api::DEVICE_PLUGIN_DIR, &"s".repeat(100))
            .sockets()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the device plugin's socket") && e.contains("at most 107 bytes"),
            "{e}"
        );
        let e = opts(&format!("/{}", "d".repeat(100)), "x.sock")
            .sockets()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the kubelet's socket") && e.contains("--plugin-dir"),
            "{e}"
        );
    }
}
