//! `gq-cri`: the CRI calls kubelet makes, one per command, over containerd's
//! CRI gRPC socket (crictl is not packaged by Debian). tests/engines/run.sh
//! drives it to prove the Kubernetes node path of gpu-quota.
//!
//! ```text
//! gq-cri --socket SOCK version
//! gq-cri --socket SOCK run-pod --name N --handler gpu-quota [--annotation K=V]... --out POD.json
//! gq-cri --socket SOCK create --pod POD.json --name N --image IMG [--annotation K=V]... [--cdi-device NAME]... -- CMD...
//! gq-cri --socket SOCK start ID
//! gq-cri --socket SOCK exec ID -- CMD...
//! gq-cri --socket SOCK stop-pod POD.json | remove-pod POD.json
//! ```
//!
//! Pods use the node's network, pid and ipc namespaces (no CNI needed).
//! `run-pod` writes the pod's id and its `PodSandboxConfig` (serde JSON) to
//! `--out`: `CreateContainer` needs the same config again, as kubelet passes it.
//! A failed call exits 1 with the gRPC status message on stderr
//! (`gq-cri: CreateContainer: …`), which is where the runtime's error lands.
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Parser)]
#[command(name = "gq-cri", about = "Minimal CRI client for the gpu-quota tests")]
struct Cli {
    /// containerd's gRPC socket (the CRI plugin listens on it).
    #[arg(long)]
    socket: PathBuf,
    /// Seconds before a call is abandoned.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// CRI Version: prints "runtime_name runtime_version cri_api_version".
    Version,
    /// RunPodSandbox with host network/pid/ipc and the given annotations.
    RunPod {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "gq-test")]
        namespace: String,
        /// Runtime handler (containerd's `runtimes.<name>`); empty: the default.
        #[arg(long, default_value = "")]
        handler: String,
        #[arg(long = "annotation", value_parser = kv)]
        annotations: Vec<(String, String)>,
        /// Where to write {"id": …, "config": PodSandboxConfig}.
        #[arg(long)]
        out: PathBuf,
    },
    /// CreateContainer in a pod (config from run-pod's file); prints the id.
    Create {
        #[arg(long)]
        pod: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long)]
        image: String,
        #[arg(long = "annotation", value_parser = kv)]
        annotations: Vec<(String, String)>,
        /// HOST_PATH:CONTAINER_PATH, a device as a device plugin's Allocate
        /// returns it (kubelet passes it in ContainerConfig.devices).
        #[arg(long = "device")]
        devices: Vec<String>,
        /// KEY=VALUE, an environment variable as a device plugin's Allocate
        /// returns it (e.g. NVIDIA_VISIBLE_DEVICES).
        #[arg(long = "env", value_parser = kv)]
        envs: Vec<(String, String)>,
        /// A fully qualified CDI device name (vendor/class=name), as the
        /// kubelet passes a prepared DRA claim's devices in
        /// ContainerConfig.CDI_devices (e.g. vram.gpu-quota.io/claim=UID).
        #[arg(long = "cdi-device")]
        cdi_devices: Vec<String>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// StartContainer.
    Start { id: String },
    /// ExecSync: prints the command's stdout; exits with its status.
    Exec {
        id: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// ContainerStatus: prints the container's state (CONTAINER_RUNNING, …).
    State { id: String },
    /// StopPodSandbox (stops its containers).
    StopPod { pod: PathBuf },
    /// RemovePodSandbox (removes its containers).
    RemovePod { pod: PathBuf },
}

fn kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

async fn channel(sock: &Path) -> Result<Channel> {
    let path = sock.to_path_buf();
    Endpoint::try_from("http://[::]:50051")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(sock).await?))
            }
        }))
        .await
        .with_context(|| format!("connecting to {}", sock.display()))
}

/// The pod file written by run-pod.
#[derive(serde::Serialize, serde::Deserialize)]
struct PodFile {
    id: String,
    config: cri::PodSandboxConfig,
}

fn read_pod(p: &Path) -> Result<PodFile> {
    let b = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_slice(&b).with_context(|| format!("parsing {}", p.display()))
}

fn pod_config(
    name: &str,
    namespace: &str,
    annotations: HashMap<String, String>,
) -> cri::PodSandboxConfig {
    let node = cri::NamespaceMode::Node as i32;
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("gq-uid-{name}"),
            namespace: namespace.into(),
            attempt: 0,
        }),
        hostname: String::new(),
        annotations,
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: node,
                    pid: node,
                    ipc: node,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A gRPC error as one line: the call and the server's message (which carries
/// the runtime's stderr for a failed create/start).
fn grpc(call: &'static str) -> impl FnOnce(tonic::Status) -> anyhow::Error {
    move |s| anyhow::anyhow!("{call}: {} ({:?})", s.message(), s.code())
}

async fn run(cli: Cli) -> Result<i32> {
    let ch = channel(&cli.socket).await?;
    let mut rt = cri::runtime_service_client::RuntimeServiceClient::new(ch);
    match cli.cmd {
        Cmd::Version => {
            let v = rt
                .version(cri::VersionRequest {
                    version: "v1".into(),
                })
                .await
                .map_err(grpc("Version"))?
                .into_inner();
            println!(
                "{} {} {}",
                v.runtime_name, v.runtime_version, v.runtime_api_version
            );
        }
        Cmd::RunPod {
            name,
            namespace,
            handler,
            annotations,
            out,
        } => {
            let config = pod_config(&name, &namespace, annotations.into_iter().collect());
            let id = rt
                .run_pod_sandbox(cri::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: handler,
                })
                .await
                .map_err(grpc("RunPodSandbox"))?
                .into_inner()
                .pod_sandbox_id;
            std::fs::write(
                &out,
                serde_json::to_vec(&PodFile {
                    id: id.clone(),
                    config,
                })?,
            )
            .with_context(|| format!("writing {}", out.display()))?;
            println!("{id}");
        }
        Cmd::Create {
            pod,
            name,
            image,
            annotations,
            devices,
            envs,
            cdi_devices,
            command,
        } => {
            let p = read_pod(&pod)?;
            let devices = devices
                .iter()
                .map(|d| {
                    let (h, c) = d.split_once(':').unwrap_or((d, d));
                    cri::Device {
                        host_path: h.into(),
                        container_path: c.into(),
                        permissions: "rw".into(),
                    }
                })
                .collect();
            let envs = envs
                .into_iter()
                .map(|(key, value)| cri::KeyValue { key, value })
                .collect();
            let cdi_devices = cdi_devices
                .into_iter()
                .map(|name| cri::CdiDevice { name })
                .collect();
            let config = cri::ContainerConfig {
                devices,
                envs,
                cdi_devices,
                metadata: Some(cri::ContainerMetadata { name, attempt: 0 }),
                image: Some(cri::ImageSpec {
                    image,
                    ..Default::default()
                }),
                command,
                annotations: annotations.into_iter().collect(),
                linux: Some(cri::LinuxContainerConfig {
                    security_context: Some(cri::LinuxContainerSecurityContext {
                        namespace_options: p
                            .config
                            .linux
                            .as_ref()
                            .and_then(|l| l.security_context.as_ref())
                            .and_then(|s| s.namespace_options.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let id = rt
                .create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: p.id,
                    config: Some(config),
                    sandbox_config: Some(p.config),
                })
                .await
                .map_err(grpc("CreateContainer"))?
                .into_inner()
                .container_id;
            println!("{id}");
        }
        Cmd::Start { id } => {
            rt.start_container(cri::StartContainerRequest { container_id: id })
                .await
                .map_err(grpc("StartContainer"))?;
        }
        Cmd::Exec { id, command } => {
            let r = rt
                .exec_sync(cri::ExecSyncRequest {
                    container_id: id,
                    cmd: command,
                    timeout: cli.timeout as i64,
                })
                .await
                .map_err(grpc("ExecSync"))?
                .into_inner();
            print!("{}", String::from_utf8_lossy(&r.stdout));
            eprint!("{}", String::from_utf8_lossy(&r.stderr));
            return Ok(r.exit_code);
        }
        Cmd::State { id } => {
            let s = rt
                .container_status(cri::ContainerStatusRequest {
                    container_id: id,
                    verbose: false,
                })
                .await
                .map_err(grpc("ContainerStatus"))?
                .into_inner()
                .status
                .context("ContainerStatus: no status")?;
            println!(
                "{}",
                cri::ContainerState::try_from(s.state)
                    .map(|s| s.as_str_name())
                    .unwrap_or("UNKNOWN")
            );
        }
        Cmd::StopPod { pod } => {
            let p = read_pod(&pod)?;
            rt.stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: p.id,
            })
            .await
            .map_err(grpc("StopPodSandbox"))?;
        }
        Cmd::RemovePod { pod } => {
            let p = read_pod(&pod)?;
            rt.remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: p.id,
            })
            .await
            .map_err(grpc("RemovePodSandbox"))?;
        }
    }
    Ok(0)
}

fn main() {
    let cli = Cli::parse();
    let timeout = Duration::from_secs(cli.timeout);
    let r = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")
        .and_then(|rt| {
            rt.block_on(async {
                match tokio::time::timeout(timeout, run(cli)).await {
                    Ok(r) => r,
                    Err(_) => bail!("timed out after {}s", timeout.as_secs()),
                }
            })
        });
    match r {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("gq-cri: {e:#}");
            std::process::exit(1);
        }
    }
}
