//! `gpu-quota`: engine installation and operator commands.
//!
//! * `install ENGINE` / `uninstall ENGINE` register or remove the runtime in
//!   docker, containerd, podman or CRI-O configuration (module `engines`).
//! * `ls` lists the host ledger (module `ls`); `gc`, `doctor`, `metrics`
//!   read and maintain it (module `ops`); `metrics --listen` serves them
//!   (`metrics_server`).
//! * `release ID` gives back one reservation by hand (`release`); `top` is
//!   a live view (`top`); both read a `snapshot` of the host.
//! * `mps-supervise` keeps the MPS daemons of GPUs with compute shares
//!   running (`supervise`).
use anyhow::Result;
use clap::{Parser, Subcommand};

mod burst;
mod engines;
mod fair;
mod lookup;
mod ls;
mod metrics;
mod metrics_server;
mod ops;
mod peer;
mod release;
mod resize;
mod snapshot;
mod supervise;
mod top;

#[derive(Parser)]
#[command(
    name = "gpu-quota",
    version,
    about = "GPU-memory quota runtime for containers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Register the gpu-quota runtime with a container engine.
    Install(engines::EngineArgs),
    /// Remove exactly what `install` added (restores the engine configuration).
    Uninstall(engines::EngineArgs),
    /// List the reservations in the host ledger.
    Ls(ls::LsArgs),
    /// Reclaim reservations whose container no longer exists.
    Gc(ops::GcArgs),
    /// Check the host: driver, NVML, device nodes, libraries, runc, ledger, engines.
    Doctor(ops::DoctorArgs),
    /// Prometheus metrics for the GPUs, slices, containers and events (printed once, or served with --listen).
    Metrics(ops::MetricsArgs),
    /// Release one container's reservation by hand (asks first; refuses for a running container unless --force).
    Release(release::ReleaseArgs),
    /// Live view of each GPU's slices and physical use, and the containers holding them.
    Top(top::TopArgs),
    /// Change a running container's slice (grow: admitted like a new container; shrink: once it fits).
    Resize(resize::ResizeArgs),
    /// Keep the MPS daemons of the GPUs with compute shares running: start a new one within seconds where one died or hangs (a service: deploy/gpu-quota-mps-supervise.service).
    MpsSupervise(supervise::SuperviseArgs),
    /// Take lent memory back from burstable slices (vram-limit=) when the driver cannot: an allocation within a guarantee waits, and bursters on its GPU are ended in order (a service: deploy/gpu-quota-burst-supervise.service).
    BurstSupervise(burst::BurstArgs),
}

fn main() {
    let cli = Cli::parse();
    let r: Result<()> = match cli.cmd {
        Cmd::Install(a) => engines::install(&a),
        Cmd::Uninstall(a) => engines::uninstall(&a),
        Cmd::Ls(a) => ls::ls(&a),
        Cmd::Gc(a) => ops::gc(&a),
        Cmd::Doctor(a) => ops::doctor(&a),
        Cmd::Metrics(a) => ops::metrics(&a),
        Cmd::Release(a) => release::release(&a),
        Cmd::Top(a) => top::top(&a),
        Cmd::Resize(a) => resize::resize(&a),
        Cmd::MpsSupervise(a) => supervise::run(&a),
        Cmd::BurstSupervise(a) => burst::run(&a),
    };
    if let Err(e) = r {
        eprintln!("gpu-quota: error: {e:#}");
        std::process::exit(1);
    }
}
