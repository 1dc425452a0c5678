//! Operator commands over the host ledger: `gc`, `doctor`, `metrics` (`ls`
//! is module `ls`).
use anyhow::{Context, Result};
use gpuquota_core::{
    config::Config, driver, fsutil, inventory::describe, ledger::LedgerData, ledger::Reservation,
    lifecycle, paths, units::human, Inventory, Ledger,
};

#[derive(clap::Args)]
pub struct GcArgs {
    /// Show what would be reclaimed, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Move a corrupt ledger aside and start a new one (check `gpu-quota ls` errors first).
    #[arg(long)]
    pub reset_corrupt: bool,
}
#[derive(clap::Args)]
pub struct DoctorArgs {}
#[derive(clap::Args)]
pub struct MetricsArgs {
    /// Serve /metrics and /healthz over HTTP on this address (e.g.
    /// 127.0.0.1:9400) instead of printing once.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
}

pub(crate) fn load() -> Result<(Config, Ledger)> {
    let path = Config::path_from_env();
    let cfg = Config::load(&path).with_context(|| format!("loading {}", path.display()))?;
    let l = Ledger::new(&cfg);
    Ok((cfg, l))
}

/// The ledger for a read-only command: nothing is created (no directory, no lock file)
/// when there is no ledger yet; then it is empty. `None` in the second place: no file.
pub(crate) fn read_only(ledger: &Ledger) -> Result<(LedgerData, bool)> {
    if !ledger.exists() {
        return Ok((LedgerData::default(), false));
    }
    Ok((ledger.read()?, true))
}

pub fn gc(a: &GcArgs) -> Result<()> {
    let (cfg, ledger) = load()?;
    if a.reset_corrupt {
        match ledger.reset_corrupt()? {
            Some(p) => gpuquota_core::outln!(
                "corrupt ledger moved to {}; a new, empty ledger starts now",
                p.display()
            ),
            None => gpuquota_core::outln!("the ledger is not corrupt; nothing done"),
        }
        return Ok(());
    }
    let gone = if a.dry_run {
        let now = fsutil::now_unix();
        read_only(&ledger)?
            .0
            .reservations
            .into_iter()
            .filter(|r| ledger.is_stale(r, now))
            .collect()
    } else {
        // a resize a crash interrupted: the container gets what its
        // reservation holds (lifecycle::update)
        let repaired = lifecycle::update::repair(&cfg)?;
        for r in &repaired.done {
            gpuquota_core::outln!(
                "finished the interrupted resize of {}: {}",
                r.container_id,
                gpuquota_core::ledger::describe_slices(&r.slices)
            );
        }
        for (id, e) in &repaired.failed {
            eprintln!("gpu-quota: the interrupted resize of container {id} could not be finished ({e}); gc tries again next time");
        }
        for id in &repaired.under_way {
            gpuquota_core::outln!("container {id} is being resized right now; left to that resize");
        }
        let gone = ledger.gc()?;
        lifecycle::release(
            &mut lifecycle::HostEffects::new(&cfg),
            &gone,
            lifecycle::Ending::Reclaimed,
            cli_source("gc"),
        );
        // the MPS daemons in line with the shares: one answers for every
        // GPU with shares (after a daemon died or a reboot), none is left
        // for a GPU without
        // (the shares are read inside the daemons' lock, as a release
        // reads them: read before it, an admission in between could have
        // its new daemon stopped)
        let shares = || {
            ledger
                .read()
                .ok()
                .map(|d| gpuquota_core::mps::shared_gpus(&d))
        };
        match gpuquota_core::mps::HostControl::find(&cfg)
            .and_then(|ctl| gpuquota_core::mps::settle(&cfg, shares, true, &ctl))
        {
            Ok(s) => {
                for u in &s.started {
                    gpuquota_core::outln!("started the MPS daemon of {u}, which has shares");
                    gpuquota_core::events::mps_restarted(
                        &cfg,
                        cli_source("gc"),
                        u,
                        "no daemon answered",
                        None,
                    );
                }
                for u in &s.stopped {
                    gpuquota_core::outln!("stopped the MPS daemon of {u}, which has no share left");
                }
                for e in &s.failed {
                    eprintln!("gpu-quota: MPS daemon: {e}; gc tries again next time");
                }
            }
            // no control program: only a problem where shares exist (or
            // where the ledger does not say)
            Err(e) if shares().is_none_or(|s| !s.is_empty()) => {
                eprintln!("gpu-quota: MPS daemons: {e}")
            }
            Err(_) => {}
        }
        // every daemon bounds its clients by its GPU's shares (one started
        // again above begins at MPS's default of the whole GPU)
        let limits = || {
            ledger
                .read()
                .ok()
                .map(|d| gpuquota_core::mps::client_limits(&d))
        };
        if let Ok(ctl) = gpuquota_core::mps::HostControl::find(&cfg) {
            match gpuquota_core::mps::limit_clients(&cfg, limits, &ctl) {
                Ok(failed) => {
                    for e in &failed {
                        eprintln!("gpu-quota: MPS daemon: {e}; gc tries again next time");
                    }
                }
                Err(e) => eprintln!("gpu-quota: MPS daemons: {e}"),
            }
        }
        gone
    };
    for r in &gone {
        gpuquota_core::outln!(
            "{}",
            describe_reclaim(
                if a.dry_run {
                    "would reclaim"
                } else {
                    "reclaimed"
                },
                r
            )
        );
    }
    if gone.is_empty() {
        gpuquota_core::outln!("nothing to reclaim");
    }
    // state directories that no reservation owns (crashes, older releases)
    let live = ledger.read()?.reservations;
    if a.dry_run {
        let c = cfg.state_dir.join("containers");
        let keep: Vec<_> = live
            .iter()
            .flat_map(|r| {
                [
                    gpuquota_core::state::container_dir(&cfg, r),
                    gpuquota_core::state::legacy_dir(&cfg, r),
                ]
            })
            .collect();
        for e in std::fs::read_dir(&c).into_iter().flatten().flatten() {
            if !keep.contains(&e.path())
                && !gone
                    .iter()
                    .any(|r| gpuquota_core::state::container_dir(&cfg, r) == e.path())
            {
                gpuquota_core::outln!("would remove orphaned state {}", e.path().display());
            }
        }
    } else {
        for p in gpuquota_core::state::sweep(&cfg, &live)? {
            gpuquota_core::outln!("removed orphaned state {}", p.display());
        }
        for p in gpuquota_core::claims::sweep_shared(&cfg)? {
            gpuquota_core::outln!("removed orphaned claim usage {}", p.display());
        }
    }
    Ok(())
}

/// `VERB ID (SLICES[, pid N gone])`: the line `gc` and `release` print.
pub(crate) fn describe_reclaim(verb: &str, r: &Reservation) -> String {
    format!(
        "{verb} {} ({}{})",
        r.container_id,
        gpuquota_core::ledger::describe_slices(&r.slices),
        r.pid.map(|p| format!(", pid {p} gone")).unwrap_or_default()
    )
}

/// Events recorded by this CLI (`gc`, `release`).
pub(crate) fn cli_source(cause: &str) -> gpuquota_core::events::Source<'_> {
    gpuquota_core::events::Source {
        program: "gpu-quota",
        engine: "operator",
        cause,
    }
}

pub fn doctor(_: &DoctorArgs) -> Result<()> {
    let mut bad = 0;
    let mut check = |name: &str, r: Result<String>| match r {
        Ok(s) => gpuquota_core::outln!("ok    {name}: {s}"),
        Err(e) => {
            bad += 1;
            gpuquota_core::outln!("FAIL  {name}: {e:#}");
        }
    };
    let path = Config::path_from_env();
    let cfg = Config::load(&path);
    check(
        "config",
        cfg.as_ref()
            .map(|_| {
                format!(
                    "{}{}",
                    path.display(),
                    if path.exists() {
                        ""
                    } else {
                        " (absent: defaults)"
                    }
                )
            })
            .map_err(|e| anyhow::anyhow!("{e}")),
    );
    let Ok(cfg) = cfg else {
        anyhow::bail!("{bad} check(s) failed");
    };
    let inv = Inventory::load(&cfg);
    check(
        "inventory",
        inv.as_ref()
            .map(|i| {
                let g: Vec<String> = i
                    .gpus
                    .iter()
                    .map(|g| format!("{} {}", describe(g), human(g.total_bytes)))
                    .collect();
                format!(
                    "driver {}; {}",
                    i.driver_version,
                    if g.is_empty() {
                        "no GPUs".into()
                    } else {
                        g.join("; ")
                    }
                )
            })
            .map_err(|e| anyhow::anyhow!("{e}")),
    );
    if let Ok(inv) = &inv {
        for g in &inv.gpus {
            let p = cfg.driver.dev_root.join(format!("nvidia{}", g.minor));
            check(
                &format!("device node GPU {}", g.index),
                if p.exists() {
                    Ok(p.display().to_string())
                } else {
                    Err(anyhow::anyhow!("{} missing", p.display()))
                },
            );
        }
    }
    for n in ["nvidiactl", "nvidia-uvm"] {
        let p = cfg.driver.dev_root.join(n);
        check(
            n,
            if p.exists() {
                Ok(p.display().to_string())
            } else {
                Err(anyhow::anyhow!(
                    "{} missing (load the driver: nvidia-modprobe -u -c=0)",
                    p.display()
                ))
            },
        );
    }
    check(
        "driver files",
        driver::discover(&cfg.driver)
            .map(|f| {
                format!(
                    "{} libraries ({}), programs: {}",
                    f.libs.len(),
                    f.libs
                        .iter()
                        .map(|l| l.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    f.bins
                        .iter()
                        .map(|b| b.0.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
            .map_err(|e| anyhow::anyhow!("{e}")),
    );
    let exists = |what: &str, p: Option<std::path::PathBuf>| -> Result<String> {
        match p {
            Some(p) if p.is_file() => Ok(p.display().to_string()),
            Some(p) => Err(anyhow::anyhow!("{what} not found at {}", p.display())),
            None => Err(anyhow::anyhow!("{what} not found")),
        }
    };
    check(
        paths::HOOK_NAME,
        exists(paths::HOOK_NAME, paths::hook(&cfg)),
    );
    check(
        paths::DRIVER_HELPER_NAME,
        exists(paths::DRIVER_HELPER_NAME, paths::driver_helper(&cfg)),
    );
    check(
        paths::INTERCEPTOR_FILE,
        exists(paths::INTERCEPTOR_FILE, paths::interceptor(&cfg)),
    );
    check("runc", exists("runc", paths::which(&cfg.runc)));
    check(
        "ldconfig",
        exists("ldconfig", Some(cfg.driver.ldconfig.clone())),
    );
    check(
        "ledger",
        read_only(&Ledger::new(&cfg)).map(|(d, exists)| {
            if exists {
                format!(
                    "{} ({} reservations)",
                    cfg.ledger_path().display(),
                    d.reservations.len()
                )
            } else {
                format!(
                    "no ledger yet ({} does not exist; the first container with a request creates it)",
                    cfg.ledger_path().display()
                )
            }
        }),
    );
    check(
        "env_requests",
        Ok(if cfg.env_requests {
            format!(
                "true: GPU_QUOTA_* in a container's environment is a request (engines without annotations, Docker < 24), never under the Kubernetes runc roots {}",
                cfg.kubernetes_runc_roots.join(", ")
            )
        } else {
            "false: requests come from annotations only".into()
        }),
    );
    match gpuquota_core::drvlimit::detect(&cfg).describe() {
        (true, s) => check("driver limits", Ok(s)),
        (false, s) => gpuquota_core::outln!("--    driver limits: {s}"),
    }
    for c in crate::engines::doctor_checks(cfg.env_requests) {
        use crate::engines::check::Verdict;
        match c.verdict {
            Verdict::Ok => check(&c.name, Ok(c.text)),
            Verdict::Fail => check(&c.name, Err(anyhow::anyhow!("{}", c.text))),
            Verdict::Info => gpuquota_core::outln!("--    {}: {}", c.name, c.text),
        }
    }
    if bad > 0 {
        anyhow::bail!("{bad} check(s) failed");
    }
    Ok(())
}

pub fn metrics(a: &MetricsArgs) -> Result<()> {
    let (cfg, _) = load()?;
    if let Some(addr) = a.listen {
        return crate::metrics_server::serve(&cfg, addr);
    }
    let snap = crate::snapshot::take(&cfg, &crate::snapshot::Nvml::init());
    gpuquota_core::out!("{}", crate::metrics::render(&snap));
    if let Some(e) = &snap.inventory_error {
        eprintln!("gpu-quota: warning: no GPU inventory ({e}); exporting the ledger only");
    }
    if let Some(e) = snap.ledger_error {
        anyhow::bail!("{e}");
    }
    Ok(())
}
