//! gpu-quota-device-plugin: see docs/kubernetes.md.
use anyhow::{Context, Result};
use clap::Parser;
use gpuquota_deviceplugin::{api, daemon, node, RESOURCE_NAME};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gpu-quota-device-plugin",
    version,
    about = "Kubelet device plugin: GPU memory slices as the extended resource gpu-quota.io/vram (1 unit = 1 GiB)"
)]
struct Cli {
    /// gpu-quota's config (the runtime's); default $GPU_QUOTA_CONFIG or /etc/gpu-quota/config.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The kubelet's device-plugin directory (kubelet.sock is in it).
    #[arg(long, default_value = api::DEVICE_PLUGIN_DIR)]
    plugin_dir: PathBuf,
    /// This plugin's socket file name in that directory.
    #[arg(long, default_value = "gpu-quota-vram.sock")]
    socket_name: String,
    /// How often the inventory, the ledger and the kubelet socket are checked (milliseconds).
    #[arg(long, default_value_t = 2000)]
    poll_ms: u64,
    /// runc roots of containers the CRI started (their ledger entries are
    /// Kubernetes' own); repeat for several. Default: containerd's k8s.io
    /// namespace and the CRI-O handler of `gpu-quota install crio`.
    #[arg(long = "kubernetes-runc-root")]
    kubernetes_runc_roots: Vec<String>,
}

fn main() -> Result<()> {
    gpuquota_core::out::init_service_log();
    let cli = Cli::parse();
    let config = cli
        .config
        .unwrap_or_else(gpuquota_core::Config::path_from_env);
    let roots = if cli.kubernetes_runc_roots.is_empty() {
        node::KUBERNETES_RUNC_ROOTS.map(String::from).to_vec()
    } else {
        cli.kubernetes_runc_roots
    };
    tracing::info!(
        "gpu-quota-device-plugin {}: config {}, kubelet dir {}, Kubernetes runc roots {}",
        env!("CARGO_PKG_VERSION"),
        config.display(),
        cli.plugin_dir.display(),
        roots.join(", ")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("SIGTERM handler")?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("SIGINT handler")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                _ = int.recv() => tracing::info!("SIGINT: stopping"),
            }
        };
        daemon::run(
            daemon::Options {
                plugin_dir: cli.plugin_dir,
                socket_name: cli.socket_name,
                resource: RESOURCE_NAME.into(),
                poll: Duration::from_millis(cli.poll_ms.max(10)),
            },
            Box::new(node::HostNode::new(config, roots)),
            shutdown,
        )
        .await
        .context("device plugin")
    })
}
