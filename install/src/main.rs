//! `gpu-quota`: engine installation and operator commands.
//!
//! * `install ENGINE` / `uninstall ENGINE` register or remove the runtime in
//!   docker, containerd, podman or CRI-O configuration (module `engines`).
//! * `ls`, `gc`, `doctor`, `metrics` read and maintain the host ledger
//!   (module `ops`).
use anyhow::Result;
use clap::{Parser, Subcommand};

mod engines;
mod ops;

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
    Ls(ops::LsArgs),
    /// Reclaim reservations whose container no longer exists.
    Gc(ops::GcArgs),
    /// Check the host: driver, NVML, device nodes, libraries, runc, ledger, engines.
    Doctor(ops::DoctorArgs),
    /// Print Prometheus text-format metrics for the ledger and per-container usage.
    Metrics(ops::MetricsArgs),
}

fn main() {
    let cli = Cli::parse();
    let r: Result<()> = match cli.cmd {
        Cmd::Install(a) => engines::install(&a),
        Cmd::Uninstall(a) => engines::uninstall(&a),
        Cmd::Ls(a) => ops::ls(&a),
        Cmd::Gc(a) => ops::gc(&a),
        Cmd::Doctor(a) => ops::doctor(&a),
        Cmd::Metrics(a) => ops::metrics(&a),
    };
    if let Err(e) = r {
        eprintln!("gpu-quota: error: {e:#}");
        std::process::exit(1);
    }
}
