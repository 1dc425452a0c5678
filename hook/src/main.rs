//! `gpu-quota-hook`: the OCI hook injected by gpu-quota-runtime.
//!
//! * `create-runtime` (or `prestart`): runs after runc made the container's
//!   namespaces and mounts, before pivot_root. Confirms the ledger
//!   reservation with the container's pid, prepares the per-container state
//!   directory on the host, enters the container's mount namespace and
//!   carries out the mount plan (driver libraries, nvidia-smi, the
//!   interceptor, /etc/ld.so.preload, the loader cache).
//! * `poststop`: releases the reservation and removes the state directory.
//!
//! The hook reads only the OCI state on stdin, the bundle's config.json and
//! its own config; runc gives it a clean environment, and nothing of the
//! container's environment is ever used. No host program ever runs against
//! the rootfs: the container's loader cache is written by gpu-quota itself
//! (core::ldcache). The only children are the hook's own binary, re-executed
//! with an empty environment in its own process group under a timeout
//! (`measure-context` once per driver version and GPU model, `driver-limits`
//! on r615+ drivers), killed with their group and when the hook dies. The
//! hook stops itself after `HOOK_TIMEOUT_SECS`, before runc's 60 s timeout.
mod measure;

use anyhow::{anyhow, bail, Context, Result};
use gpuquota_core::{
    config::Config,
    driver, events,
    ledger::Key,
    mountplan, paths,
    rootfs::{MountEffects, Rootfs},
    spec, state, Ledger, Request,
};
use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;

/// The hook's own deadline (runc kills hooks after the spec's 60 s).
const HOOK_TIMEOUT_SECS: u32 = 45;
const USAGE: &str = "\
Usage: gpu-quota-hook create-runtime|prestart|poststop   (OCI state JSON on stdin)
The OCI hook that gpu-quota-runtime puts into config.json; runc runs it, not you.
create-runtime/prestart: confirm the slice, mount the driver and the interceptor; poststop: release.
Configuration: $GPU_QUOTA_CONFIG, else /etc/gpu-quota/config.toml.";

fn main() {
    // SIGALRM's default action ends the process: nothing the image can do
    // (a FIFO, a slow FUSE mount) keeps a root process waiting past this.
    // SAFETY: alarm has no preconditions.
    unsafe { libc::alarm(HOOK_TIMEOUT_SECS) };
    let stage = std::env::args().nth(1).unwrap_or_default();
    if matches!(
        stage.as_str(),
        "--help" | "-h" | "help" | "--version" | "-V" | ""
    ) {
        gpuquota_core::outln!("gpu-quota-hook {}\n{USAGE}", env!("CARGO_PKG_VERSION"));
        std::process::exit(if stage.is_empty() { 2 } else { 0 });
    }
    if let Err(e) = run(&stage) {
        eprintln!("gpu-quota-hook: {e:#}");
        std::process::exit(1);
    }
}

struct Ctx {
    id: String,
    pid: Option<u32>,
    bundle: PathBuf,
    config: serde_json::Value,
}

fn read_state() -> Result<Ctx> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(1 << 20)
        .read_to_end(&mut buf)
        .context("reading the OCI state from stdin")?;
    let st: oci_spec::runtime::State =
        serde_json::from_slice(&buf).context("the OCI state on stdin is not valid")?;
    let bundle = st.bundle().clone();
    let config = spec::read_config(&bundle)?;
    Ok(Ctx {
        id: st.id().clone(),
        pid: st.pid().filter(|p| *p > 0).map(|p| p as u32),
        bundle,
        config,
    })
}

fn run(stage: &str) -> Result<()> {
    match stage {
        "create-runtime" | "prestart" => create_runtime(),
        "poststop" => poststop(),
        "measure-context" => measure::measure_main(&std::env::args().skip(2).collect::<Vec<_>>()),
        "driver-limits" => {
            measure::driver_limits_main(&std::env::args().skip(2).collect::<Vec<_>>())
        }
        other => bail!("unknown stage {other:?}; expected create-runtime, prestart or poststop"),
    }
}

fn create_runtime() -> Result<()> {
    let ctx = read_state()?;
    let cfg = Config::load_default()?;
    if Request::from_config(&ctx.config, cfg.env_policy())?.is_none() {
        return Ok(()); // nothing asked: nothing to do
    }
    if !state::valid_container_id(&ctx.id) {
        bail!(
            "container id {:?} has characters gpu-quota does not accept",
            ctx.id
        );
    }
    let pid = ctx.pid.ok_or_else(|| {
        anyhow!(
            "the OCI state has no pid; gpu-quota-hook must run as a createRuntime or prestart hook"
        )
    })?;
    let ledger = Ledger::new(&cfg);
    let r = ledger.confirm(&ctx.id, &ctx.bundle.to_string_lossy(), pid)?;
    let files = driver::discover(&cfg.driver)?;
    let interceptor = paths::interceptor(&cfg).ok_or_else(|| {
        anyhow!("libgpuquota.so not found (looked in ../lib/gpu-quota/ and next to gpu-quota-hook); set `interceptor` in {}", Config::path_from_env().display())
    })?;
    // made by gpu-quota-runtime before runc cloned the container's mount
    // namespace (so its usage tmpfs is visible there); filled in here
    let dir = state::container_dir(&cfg, &r);
    let ctx_charge = measure::context_charge(&cfg, &files, &r)?;
    state::fill(&dir, &r, &files, ctx_charge)
        .with_context(|| format!("preparing {}", dir.display()))?;
    measure::driver_limits(&cfg, &files, &dir, &r, pid);
    let rootfs = spec::rootfs_path(&ctx.bundle, &ctx.config);
    let ops = mountplan::plan(&dir, &files, &interceptor);
    enter_mount_ns(pid)?;
    let mut fx = MountEffects {
        rootfs: Rootfs::open(&rootfs)?,
    };
    mountplan::execute(&ops, &mut fx).with_context(|| {
        format!(
            "setting up container {} (rootfs {})",
            ctx.id,
            rootfs.display()
        )
    })?;
    Ok(())
}

/// Join the container's mount namespace (the hook is single-threaded).
fn enter_mount_ns(pid: u32) -> Result<()> {
    let p = format!("/proc/{pid}/ns/mnt");
    let f = std::fs::File::open(&p).with_context(|| format!("opening {p}"))?;
    nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNS)
        .with_context(|| format!("entering {p}"))?;
    Ok(())
}

fn poststop() -> Result<()> {
    let ctx = read_state()?;
    let cfg = Config::load_default()?;
    if Request::from_config(&ctx.config, cfg.env_policy())
        .ok()
        .flatten()
        .is_none()
    {
        return Ok(());
    }
    let gone = Ledger::new(&cfg).release(Key::Bundle {
        id: &ctx.id,
        bundle: &ctx.bundle.to_string_lossy(),
    })?;
    let engine = events::engine_of(gone.first().and_then(|r| r.runtime_root.as_deref()));
    let src = events::Source {
        program: "gpu-quota-hook",
        engine,
        cause: "poststop",
    };
    events::released(&cfg, src, &gone);
    for r in gone {
        state::remove(&state::container_dir(&cfg, &r))?;
    }
    Ok(())
}
