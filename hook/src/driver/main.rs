//! `gpu-quota-driver`: the one gpu-quota binary that loads the host's
//! driver libraries, each time as a child of gpu-quota-runtime, the hook or
//! `gpu-quota` (core/src/helper.rs: empty environment, own process group,
//! killed at its deadline), so that a driver that hangs or crashes takes
//! nothing with it. gpu-quota-runtime and gpu-quota-hook are linked
//! statically for their start-up cost and load no library; this binary is
//! linked dynamically, as loading a driver needs.
//!
//! * `measure-context --cuda LIB --nvml LIB --uuid GPU-…` (core/src/ctxcost.rs)
//! * `driver-limits set|clear …` (core/src/drvlimit/)
//! * `nvml-inventory`: the host's GPUs as one JSON line (core/src/inventory.rs)
//! * `gpu-processes --nvml LIB --uuid GPU-…`: the processes NVML lists on
//!   one GPU with their memory (core/src/procmem.rs)
//!
//! It reads nothing of any container and takes no input but its arguments.
mod nvml_limits;
mod processes;
mod stages;

use anyhow::{bail, Result};
use gpuquota_core::formats::helper::Stage;

const USAGE: &str = "\
Usage: gpu-quota-driver measure-context|driver-limits|nvml-inventory|gpu-processes ARGS
Loads the host's NVIDIA driver libraries for gpu-quota, as a child of gpu-quota-runtime,
gpu-quota-hook and gpu-quota; they run it, not you.";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stage = args.first().cloned().unwrap_or_default();
    if matches!(
        stage.as_str(),
        "--help" | "-h" | "help" | "--version" | "-V" | ""
    ) {
        gpuquota_core::outln!("gpu-quota-driver {}\n{USAGE}", env!("CARGO_PKG_VERSION"));
        std::process::exit(if stage.is_empty() { 2 } else { 0 });
    }
    if let Err(e) = run(&stage, &args[1..]) {
        eprintln!("gpu-quota-driver: {e:#}");
        std::process::exit(1);
    }
}

fn run(stage: &str, rest: &[String]) -> Result<()> {
    match Stage::parse(stage) {
        Some(Stage::MeasureContext) => stages::measure_main(rest),
        Some(Stage::DriverLimits) => stages::driver_limits_main(rest),
        Some(Stage::NvmlInventory) => {
            let inv = gpuquota_core::Inventory::from_nvml()?;
            gpuquota_core::outln!("{}", serde_json::to_string(&inv)?);
            Ok(())
        }
        Some(Stage::GpuProcesses) => processes::main(rest),
        None => {
            let known: Vec<&str> = Stage::ALL.iter().map(|s| s.name()).collect();
            bail!("unknown stage {stage:?}; expected {}", known.join(", "))
        }
    }
}
