//! gpu-quota-dra: see docs/kubernetes.md.
use anyhow::{Context, Result};
use clap::Parser;
use gpuquota_dra::{api, daemon, node, publish, source};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "gpu-quota-dra",
    version,
    about = "Kubernetes DRA driver vram.gpu-quota.io: GPU memory as consumable capacity, each claim an enforced slice"
)]
struct Cli {
    /// gpu-quota's config (the runtime's); default $GPU_QUOTA_CONFIG or /etc/gpu-quota/config.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// This node's name (default $NODE_NAME, from the downward API).
    #[arg(long)]
    node_name: Option<String>,
    /// A kubeconfig file; default: the in-cluster service account ($KUBERNETES_SERVICE_HOST).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// This driver's directory; the DRA socket dra.sock is made in it.
    #[arg(long, default_value = api::PLUGIN_DIR)]
    plugin_dir: PathBuf,
    /// The kubelet's plugin registry; the registration socket is made in it.
    #[arg(long, default_value = api::REGISTRY_DIR)]
    registry_dir: PathBuf,
    /// How often the GPUs' offers are re-read and the ResourceSlice updated (milliseconds).
    #[arg(long, default_value_t = 1000)]
    poll_ms: u64,
    /// How often the API server's copy of the ResourceSlice is read and, when it is
    /// missing or differs, written again (milliseconds).
    #[arg(long, default_value_t = publish::DEFAULT_RESYNC.as_millis() as u64)]
    resync_ms: u64,
}

async fn client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client> {
    let cfg = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .with_context(|| format!("gpu-quota: cannot read kubeconfig {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("gpu-quota: kubeconfig {}", p.display()))?
        }
        None => kube::Config::incluster().context(
            "gpu-quota: not in a cluster (no KUBERNETES_SERVICE_HOST or service account); pass --kubeconfig",
        )?,
    };
    kube::Client::try_from(cfg).context("gpu-quota: Kubernetes client")
}

fn main() -> Result<()> {
    gpuquota_core::out::init_service_log();
    let cli = Cli::parse();
    let config = cli
        .config
        .unwrap_or_else(gpuquota_core::Config::path_from_env);
    let node_name = match cli.node_name.or_else(|| std::env::var("NODE_NAME").ok()) {
        Some(n) if !n.is_empty() => n,
        _ => anyhow::bail!("gpu-quota: no node name: pass --node-name or set NODE_NAME (the DaemonSet sets it from spec.nodeName)"),
    };
    tracing::info!(
        "gpu-quota-dra {}: driver {}, node {node_name}, config {}, plugin dir {}, registry {}",
        env!("CARGO_PKG_VERSION"),
        api::DRIVER,
        config.display(),
        cli.plugin_dir.display(),
        cli.registry_dir.display()
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
        let kube = client(cli.kubeconfig.as_ref()).await?;
        daemon::run(
            daemon::Options {
                plugin_dir: cli.plugin_dir,
                registry_dir: cli.registry_dir,
                node_name,
                poll: Duration::from_millis(cli.poll_ms.max(10)),
                resync: Duration::from_millis(cli.resync_ms.max(100)),
                health_timeout: gpuquota_dra::health::DEFAULT_TIMEOUT,
                limits: gpuquota_dra::conns::LIMITS,
            },
            Arc::new(node::HostNode {
                config_path: config,
            }),
            Arc::new(source::KubeClaims(kube.clone())),
            Some(Arc::new(publish::KubeSlices(kube))),
            shutdown,
        )
        .await
        .context("gpu-quota-dra")
    })
}
