//! `gpu-quota-hook`: the OCI hook injected by gpu-quota-runtime, an
//! argument adapter over `core::lifecycle`.
//!
//! * `create-runtime` (or `prestart`): `lifecycle::enter` — runs after runc
//!   made the container's namespaces and mounts, before pivot_root.
//!   Confirms the ledger reservation with the container's pid, fills the
//!   per-container state directory on the host, enters the container's
//!   mount namespace and carries out the mount plan (driver libraries,
//!   nvidia-smi, the interceptor, /etc/ld.so.preload, the loader cache).
//! * `poststop`: `lifecycle::end` — releases the reservation and removes
//!   the state directory.
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
use anyhow::{bail, Context, Result};
use gpuquota_core::{
    config::Config,
    lifecycle::{self, Bundle, Container, Entered, Entry, Exit, HostEnter},
    spec,
};
use std::io::Read;

/// Who records this binary's events.
const PROGRAM: &str = "gpu-quota-hook";

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
    let entry = Entry {
        id: &ctx.id,
        root: root.as_deref(),
        pid: ctx.pid,
        bundle: &ctx.bundle,
    };
    match lifecycle::enter(&cfg, &entry, PROGRAM, &mut HostEnter { cfg: &cfg })? {
        Entered::NoReservation(why) => eprintln!("{PROGRAM}: {why}"),
        Entered::NotOurs | Entered::Mounted(_) => {}
    }
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
                "{PROGRAM}: poststop of container {}: this hook's entry has no `{} RUNC_ROOT` (written by an older gpu-quota-runtime); nothing released here, `delete` through gpu-quota-runtime releases it",
                ctx.id,
                spec::HOOK_ROOT_ARG
            );
        }
        return Ok(());
    };
    let c = Container {
        id: &ctx.id,
        root: Some(&root),
        program: PROGRAM,
    };
    let bundle = ctx.bundle.dir.to_string_lossy();
    lifecycle::end(&cfg, &c, Exit::Poststop { bundle: &bundle })?;
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
