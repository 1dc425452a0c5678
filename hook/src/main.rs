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
//! The reservation is found by the container id, the bundle and the runc
//! root that gpu-quota-runtime wrote into this hook's entry in config.json
//! (`--root DIR`; the OCI state does not carry it): the same id and bundle
//! may exist under two runc roots. Without that argument (a hook entry
//! written by an older runtime, or by hand) no reservation is confirmed or
//! released, and the hook says why.
//!
//! The hook reads only the OCI state on stdin, the bundle's config.json and
//! its own config; runc gives it a clean environment, and nothing of the
//! container's environment is ever used. No host program ever runs against
//! the rootfs: the container's loader cache is written by gpu-quota itself
//! (core::ldcache). The only children are gpu-quota-driver
//! (hook/src/driver/main.rs), run with an empty environment in its own
//! process group under a timeout (`measure-context` once per driver version
//! and GPU model, `driver-limits` on r615+ drivers), killed with their group
//! and when the hook dies. The hook is linked statically (`make build`) and
//! loads no library itself. It stops itself after `HOOK_TIMEOUT_SECS`,
//! before runc's 60 s timeout.
mod measure;

use anyhow::{anyhow, bail, Context, Result};
use gpuquota_core::{
    config::Config,
    driver, events,
    ledger::Key,
    lifecycle::{self, Bundle},
    mountplan, paths,
    rootfs::{Declared, MountEffects, Rootfs},
    spec, state, LedgerError,
};
use std::io::Read;
use std::os::fd::AsFd;

/// The hook's own deadline (runc kills hooks after the spec's 60 s).
const HOOK_TIMEOUT_SECS: u32 = 45;
const USAGE: &str = "\
Usage: gpu-quota-hook create-runtime|prestart|poststop --root RUNC_ROOT   (OCI state JSON on stdin)
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
    bundle: Bundle,
}

fn read_state() -> Result<Ctx> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(1 << 20)
        .read_to_end(&mut buf)
        .context("reading the OCI state from stdin")?;
    let st: oci_spec::runtime::State =
        serde_json::from_slice(&buf).context("the OCI state on stdin is not valid")?;
    let bundle = Bundle::load(st.bundle())?;
    Ok(Ctx {
        id: st.id().clone(),
        pid: st.pid().filter(|p| *p > 0).map(|p| p as u32),
        bundle,
    })
}

/// The runc root from the hook's arguments after the stage: exactly
/// `--root DIR` (what gpu-quota-runtime writes). Ok(None): no key at all
/// (an entry written before the key existed); anything else is refused.
fn root_arg(args: &[String]) -> Result<Option<String>> {
    match args {
        [] => Ok(None),
        [flag, dir] if flag == spec::HOOK_ROOT_ARG && !dir.is_empty() => Ok(Some(dir.clone())),
        _ => bail!(
            "unexpected arguments {args:?} after the stage; gpu-quota-runtime writes exactly `{} RUNC_ROOT`: no reservation is confirmed or released",
            spec::HOOK_ROOT_ARG
        ),
    }
}

fn run(stage: &str) -> Result<()> {
    let rest: Vec<String> = std::env::args().skip(2).collect();
    match stage {
        "create-runtime" | "prestart" => create_runtime(root_arg(&rest)?),
        "poststop" => poststop(root_arg(&rest)?),
        other => bail!("unknown stage {other:?}; expected create-runtime, prestart or poststop"),
    }
}

fn create_runtime(root: Option<String>) -> Result<()> {
    let ctx = read_state()?;
    let cfg = Config::load_default()?;
    let Some(root) = root else {
        if !ctx.bundle.prepared_by_runtime() {
            return Ok(()); // not a container gpu-quota-runtime prepared
        }
        bail!(
            "container {} was given GPU devices by gpu-quota-runtime, but this hook's entry in {} has no `{} RUNC_ROOT`, so its reservation cannot be told from another container's with the same id under another runc root: none was confirmed and nothing was mounted. Create the container through this version of gpu-quota-runtime",
            ctx.id,
            ctx.bundle.config_path().display(),
            spec::HOOK_ROOT_ARG
        );
    };
    if !state::valid_container_id(&ctx.id) {
        bail!(
            "container id {:?} has characters gpu-quota does not accept",
            ctx.id
        );
    }
    let declared = Declared::from_config(&ctx.bundle.config);
    if let Some(c) = mountplan::declared_conflict(&declared, &cfg.driver.binaries) {
        return Err(c.into());
    }
    let pid = ctx.pid.ok_or_else(|| {
        anyhow!(
            "the OCI state has no pid; gpu-quota-hook must run as a createRuntime or prestart hook"
        )
    })?;
    // The reservation made at `create` decides, never a second reading of
    // the request under the host policy of this moment.
    let r = match lifecycle::confirm_for_hook(&cfg, &ctx.id, &root, &ctx.bundle, pid) {
        Ok(r) => r,
        // prepared for a reservation that is not there: fail closed (the
        // container has its GPU devices but no slice)
        Err(e) if ctx.bundle.prepared_by_runtime() => return Err(e.into()),
        Err(LedgerError::NoReservation { .. }) => {
            eprintln!(
                "gpu-quota-hook: container {} has no reservation under runc root {root}: nothing added",
                ctx.id
            );
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let files = driver::discover(&cfg.driver)?;
    let interceptor = paths::interceptor(&cfg).ok_or_else(|| {
        anyhow!("libgpuquota.so not found (looked in ../lib/gpu-quota/ and next to gpu-quota-hook); set `interceptor` in {}", Config::path_from_env().display())
    })?;
    // made by gpu-quota-runtime before runc cloned the container's mount
    // namespace (so its tmpfs is visible there); filled in here
    let dir = state::container_dir(&cfg, &r);
    let ctx_charge = measure::context_charge(&cfg, &files, &r)?;
    state::fill(&dir, &r, &files, ctx_charge)
        .with_context(|| format!("preparing {}", dir.display()))?;
    measure::driver_limits(&cfg, &files, &dir, &r, pid);
    let rootfs = spec::rootfs_path(&ctx.bundle.dir, &ctx.bundle.config);
    let ops = mountplan::plan(&dir, &files, &interceptor);
    enter_mount_ns(pid)?;
    let mut fx = MountEffects {
        rootfs: Rootfs::open(&rootfs)?.with_declared(declared),
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

fn poststop(root: Option<String>) -> Result<()> {
    let ctx = read_state()?;
    let cfg = Config::load_default()?;
    let Some(root) = root else {
        if ctx.bundle.prepared_by_runtime() {
            // a container created before the upgrade: gpu-quota-runtime's
            // `delete` releases it by id and runc root
            eprintln!(
                "gpu-quota-hook: poststop of container {}: this hook's entry has no `{} RUNC_ROOT` (written by an older gpu-quota-runtime); nothing released here, `delete` through gpu-quota-runtime releases it",
                ctx.id,
                spec::HOOK_ROOT_ARG
            );
        }
        return Ok(());
    };
    let bundle = ctx.bundle.dir.to_string_lossy();
    let src = events::Source {
        program: "gpu-quota-hook",
        engine: events::engine_of(Some(&root)),
        cause: "poststop",
    };
    lifecycle::end_with(
        &cfg,
        Key::Hook {
            id: &ctx.id,
            root: Some(&root),
            bundle: &bundle,
        },
        src,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_runc_root_comes_only_from_an_exact_root_argument() {
        assert_eq!(
            root_arg(&v(&["--root", "/run/one"])).unwrap().as_deref(),
            Some("/run/one")
        );
        assert_eq!(root_arg(&[]).unwrap(), None, "an older runtime's entry");
        for bad in [
            &["--root"][..],
            &["--root", ""],
            &["--root", "/a", "--root", "/b"],
            &["--root=/a"],
            &["/a"],
            &["--bundle", "/a"],
        ] {
            assert!(root_arg(&v(bad)).is_err(), "{bad:?}");
        }
    }
}
