//! `gpu-quota mps-supervise`: the supervisor of the MPS daemons
//! (`core::mps::supervise`), run as a service of its own
//! (deploy/gpu-quota-mps-supervise.service). Each round it looks at the
//! daemon of every GPU with compute shares, starts a new one where the old
//! one died or hangs, records an event per restart and writes what it saw
//! to `<state_dir>/mps-supervisor.json` for the exporter.
use anyhow::Result;
use gpuquota_core::events::{self, Source};
use gpuquota_core::mps::supervise::{self, Action, Status, Supervisor};
use gpuquota_core::{fsutil, mps};
use std::collections::BTreeSet;
use std::time::Duration;

#[derive(clap::Args)]
pub struct SuperviseArgs {
    /// Seconds between two looks at the daemons.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub interval: u64,
}

const SOURCE: Source<'static> = Source {
    program: "gpu-quota",
    engine: "operator",
    cause: "supervisor",
};

pub fn run(a: &SuperviseArgs) -> Result<()> {
    let (cfg, ledger) = crate::ops::load()?;
    eprintln!(
        "gpu-quota mps-supervise: looking at the MPS daemons of the GPUs with compute shares every {} s; status in {}",
        a.interval,
        supervise::status_path(&cfg).display()
    );
    // no ledger yet: no shares (nothing is created to read it)
    let read = || {
        if !ledger.exists() {
            return Some(BTreeSet::new());
        }
        ledger.read().ok().map(|d| mps::shared_gpus(&d))
    };
    let mut sup = Supervisor::default();
    let mut said = String::new();
    let mut publish = |gpus: &std::collections::BTreeMap<String, supervise::GpuStatus>| {
        let st = Status {
            pid: std::process::id(),
            updated_unix: fsutil::now_unix(),
            interval_secs: a.interval,
            gpus: gpus.clone(),
        };
        let r = fsutil::secure_dir(&cfg.state_dir, 0o755)
            .and_then(|_| supervise::write_status(&cfg, &st));
        if let Err(e) = r {
            let line = format!(
                "cannot write {}: {e}",
                supervise::status_path(&cfg).display()
            );
            // once per new error, not every second
            if line != said {
                eprintln!("gpu-quota mps-supervise: {line}");
                said = line;
            }
        }
    };
    let mut missing = String::new();
    loop {
        let now = fsutil::now_unix();
        match mps::HostControl::find(&cfg) {
            Ok(ctl) => {
                missing.clear();
                for act in sup.round(&cfg, &read, &ctl, now, &mut publish) {
                    report(&cfg, &act);
                }
            }
            Err(e) => {
                // only a problem where shares exist
                if let Some(shares) = read() {
                    let line = e.to_string();
                    if !shares.is_empty() && line != missing {
                        eprintln!("gpu-quota mps-supervise: {line}");
                        missing = line.clone();
                    }
                    sup.unable(&shares, &line, now);
                }
            }
        }
        publish(&sup.gpus);
        std::thread::sleep(Duration::from_secs(a.interval));
    }
}

/// One line on stderr (the journal, under systemd) and one event.
fn report(cfg: &gpuquota_core::config::Config, act: &Action) {
    match act {
        Action::Restarted { uuid, why } => {
            eprintln!("gpu-quota mps-supervise: restarted the MPS daemon of {uuid} ({why})");
            events::mps_restarted(cfg, SOURCE, uuid, why, None);
        }
        Action::Failed { uuid, why, error } => {
            eprintln!(
                "gpu-quota mps-supervise: could not restart the MPS daemon of {uuid} ({why}): {error}; trying again later"
            );
            events::mps_restarted(cfg, SOURCE, uuid, why, Some(error));
        }
    }
}
