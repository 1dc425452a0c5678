//! The driver's life: serve the DRA socket, then the registration socket
//! (the kubelet's plugin watcher finds it and registers us), keep this
//! node's ResourceSlice in step with the ledger and the API server
//! (`publish::run`), and on request stop: sockets removed, the slice left
//! to the kubelet. One poll reads the node's offers; the slice publisher and
//! the health streams both take that read.
use crate::api::dra::dra_plugin_server::DraPluginServer;
use crate::api::health::dra_resource_health_server::DraResourceHealthServer;
use crate::api::registration::registration_server::RegistrationServer;
use crate::api::{registration_socket, DRA_SOCKET};
use crate::conns::{self, Gate};
use crate::h2authority::Adapted;
use crate::health::{HealthService, Polled, Tracker};
use crate::node::Node;
use crate::publish::{self, SliceStore};
use crate::service::{DraService, RegistrationService};
use crate::source::ClaimSource;
use std::future::Future;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_stream::StreamExt;

#[derive(Debug, Clone)]
pub struct Options {
    /// This driver's directory (the DRA socket is in it).
    pub plugin_dir: PathBuf,
    /// The kubelet's plugin registry (the registration socket is in it).
    pub registry_dir: PathBuf,
    /// This node's name (also its pool's).
    pub node_name: String,
    /// How often the offers are re-read.
    pub poll: Duration,
    /// How often the API server's copy of the slice is re-read
    /// (`publish::Timing`).
    pub resync: Duration,
    /// The health stream's `health_check_timeout_seconds` (whole seconds,
    /// at least 1); the devices are re-sent every third of it
    /// (`health::DEFAULT_TIMEOUT` in the binary).
    pub health_timeout: Duration,
    /// The bounds on each socket's connections (`conns::LIMITS` in the
    /// binary).
    pub limits: conns::Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot serve on {path}: {err}")]
    Listen { path: PathBuf, err: std::io::Error },
    #[error("{0}; see --plugin-dir and --registry-dir")]
    SocketPath(#[from] gpuquota_core::config::SocketPathError),
}

impl Options {
    /// The DRA socket and the registration socket, each short enough for
    /// a Unix socket's path (said before anything starts, with the limit,
    /// rather than by bind's "shorter than SUN_LEN").
    pub fn sockets(&self) -> Result<(PathBuf, PathBuf), DaemonError> {
        use gpuquota_core::config::check_socket_path;
        let dra = self.plugin_dir.join(DRA_SOCKET);
        let reg = self.registry_dir.join(registration_socket());
        check_socket_path("the DRA socket", &dra)?;
        check_socket_path("the registration socket", &reg)?;
        Ok((dra, reg))
    }
}

/// Bind a unix socket at `path`, replacing a stale socket (never another
/// kind of file), mode 0600: whoever connects can prepare claims.
fn bind(path: &Path) -> Result<tokio::net::UnixListener, DaemonError> {
    let fail = |err| DaemonError::Listen {
        path: path.into(),
        err,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path).map_err(fail)?,
        Ok(_) => {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket; remove it",
            )))
        }
        Err(_) => {}
    }
    let l = tokio::net::UnixListener::bind(path).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(l)
}

fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

async fn offers(node: &Arc<dyn Node>) -> Result<Vec<crate::node::Offer>, String> {
    let n = node.clone();
    tokio::task::spawn_blocking(move || n.offers().map_err(|e| e.to_string()))
        .await
        .map_err(|e| e.to_string())?
}

/// Read the offers every `poll` until `stop`, and hand each read (with the
/// devices' health) to the publisher and the health streams. A `watch`
/// holds only the latest read: a slow reader skips reads, nothing queues.
async fn poll_loop(
    poll: Duration,
    node: Arc<dyn Node>,
    tx: watch::Sender<Option<Arc<Polled>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tracker = Tracker::default();
    loop {
        let offers = offers(&node).await;
        let health = tracker.observe(&offers);
        tx.send_replace(Some(Arc::new(Polled { offers, health })));
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Run until `shutdown` resolves. `slices`: where the ResourceSlice is
/// published (None: not published, for tests of the kubelet side alone).
pub async fn run(
    opts: Options,
    node: Arc<dyn Node>,
    claims: Arc<dyn ClaimSource>,
    slices: Option<Arc<dyn SliceStore>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (dra_sock, reg_sock) = opts.sockets()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (polled_tx, polled_rx) = watch::channel(None);
    // each registration with the kubelet (one at its every start) makes
    // the publisher read the API's copy again
    let registered = Arc::new(Notify::new());
    let publisher = slices.map(|s| {
        tokio::spawn(publish::run(
            opts.node_name.clone(),
            publish::Timing {
                resync: opts.resync,
                after_registration: publish::AFTER_REGISTRATION,
                retry: opts.poll,
            },
            polled_rx.clone(),
            s,
            registered.clone(),
            stop_rx.clone(),
        ))
    });
    let poller = tokio::spawn(poll_loop(
        opts.poll,
        node.clone(),
        polled_tx,
        stop_rx.clone(),
    ));

    let dra_listener = bind(&dra_sock)?;
    let mut server_stop = stop_rx.clone();
    let dra_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(DraPluginServer::new(DraService {
                node,
                claims,
                pool: opts.node_name.clone(),
            }))
            // the kubelet's optional health stream (health.rs): each ends
            // at stop, so the graceful shutdown below does not wait on it
            .add_service(DraResourceHealthServer::new(HealthService::new(
                polled_rx,
                stop_rx.clone(),
                opts.node_name.clone(),
                opts.health_timeout,
            )))
            .serve_with_incoming_shutdown(
                conns::incoming(dra_listener, Gate::new("DRA", opts.limits)),
                async move {
                    let _ = server_stop.wait_for(|s| *s).await;
                },
            ),
    );
    // the registration socket last: the kubelet may call us as soon as it exists
    let reg_listener = match bind(&reg_sock) {
        Ok(l) => l,
        Err(e) => {
            let _ = stop_tx.send(true);
            remove_socket(&dra_sock);
            return Err(e);
        }
    };
    let mut server_stop = stop_rx.clone();
    let reg_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(RegistrationService {
                endpoint: dra_sock.display().to_string(),
                registered,
            }))
            // through the :authority adapter: the kubelet dials this socket
            // with its path as :authority, which h2 refuses (h2authority.rs);
            // the DRA socket above is dialed as unix:<path> (authority
            // localhost) and is served as is
            .serve_with_incoming_shutdown(
                conns::incoming(reg_listener, Gate::new("registration", opts.limits))
                    .map(|c| c.map(Adapted::new)),
                async move {
                    let _ = server_stop.wait_for(|s| *s).await;
                },
            ),
    );
    tracing::info!(
        "serving {} on {} (registration {})",
        crate::api::DRIVER,
        dra_sock.display(),
        reg_sock.display()
    );
    shutdown.await;
    // unregister first: the kubelet notices the registration socket is gone
    remove_socket(&reg_sock);
    let _ = stop_tx.send(true);
    for (what, server) in [("registration", reg_server), ("DRA", dra_server)] {
        match tokio::time::timeout(Duration::from_secs(5), server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("{what} server: {e}"),
            Ok(Err(e)) => tracing::warn!("{what} server task: {e}"),
            Err(_) => tracing::warn!("{what} server did not stop within 5 s"),
        }
    }
    remove_socket(&dra_sock);
    if tokio::time::timeout(Duration::from_secs(5), poller)
        .await
        .is_err()
    {
        tracing::warn!("reading the node's GPUs did not stop within 5 s");
    }
    if let Some(p) = publisher {
        if tokio::time::timeout(Duration::from_secs(10), p)
            .await
            .is_err()
        {
            tracing::warn!("publishing the slice did not stop within 10 s");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(plugin_dir: &str, registry_dir: &str) -> Options {
        Options {
            plugin_dir: plugin_dir.into(),
            registry_dir: registry_dir.into(),
            node_name: "n".into(),
            poll: Duration::from_secs(1),
            resync: Duration::from_secs(1),
            health_timeout: Duration::from_secs(1),
            limits: conns::LIMITS,
        }
    }

    #[test]
    fn socket_paths_past_sun_path_are_refused_naming_the_limit() {
        let (dra, reg) = opts(crate::api::PLUGIN_DIR, crate::api::REGISTRY_DIR)
            .sockets()
            .unwrap();
        assert!(dra.ends_with(DRA_SOCKET) && reg.starts_with(crate::api::REGISTRY_DIR));
        let long = format!("/var/lib/kubelet/{}", "p".repeat(90));
        let e = opts(&long, crate::api::REGISTRY_DIR)
            .sockets()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the DRA socket") && e.contains("at most 107 bytes") && e.contains(&long),
            "{e}"
        );
        let e = opts(crate::api::PLUGIN_DIR, &long)
            .sockets()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the registration socket") && e.contains("--registry-dir"),
            "{e}"
        );
    }
}
