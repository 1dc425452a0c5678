//! `gpu-quota-runtime`: a runc-compatible wrapper.
//!
//! Every command goes to the real runc with its arguments unchanged. On
//! `create` (and foreground `run`) of a container that asks for GPU memory,
//! the runtime first admits the request into the host ledger, then edits the
//! bundle's config.json (device nodes, cgroup device rules, hooks); if runc
//! then fails, the slice is released. `delete` releases the slice once the
//! container is gone. Containers without a request are never touched.
mod args;
mod report;

use anyhow::{anyhow, Context, Result};
use gpuquota_core::{
    config::Config,
    events,
    ledger::Key,
    lifecycle::{self, Bundle, LifecycleError},
    paths,
    request::{self, EnvRequests},
    state, toolkit, Inventory, Request,
};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// runc's default state root for root.
const DEFAULT_RUNC_ROOT: &str = "/run/runc";

fn main() {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let a = args::parse(&argv);
    let code = match run(&argv, &a) {
        Ok(code) => code,
        Err(e) => {
            report::error(&a, &format!("{e:#}"));
            1
        }
    };
    std::process::exit(code);
}

fn runc_path(cfg_runc: &Path) -> Result<PathBuf> {
    let p = paths::which(cfg_runc).ok_or_else(|| {
        anyhow!(
            "cannot find runc ({}); install runc or set `runc = \"/path/to/runc\"` in {}",
            cfg_runc.display(),
            Config::path_from_env().display()
        )
    })?;
    // the same file (device and inode; a link or a copy by hard link too)
    use std::os::unix::fs::MetadataExt;
    let id = |m: std::fs::Metadata| (m.dev(), m.ino());
    let me = std::fs::metadata("/proc/self/exe").ok().map(id);
    if me.is_some() && std::fs::metadata(&p).ok().map(id) == me {
        return Err(anyhow!("`runc` resolves to gpu-quota-runtime itself ({}); set `runc` in the config to the real runc", p.display()));
    }
    Ok(p)
}

/// runc for pass-through commands: the configured one if the config loads,
/// else `runc` from PATH (a broken config must not break other containers).
fn passthrough(argv: &[OsString]) -> Result<i32> {
    let runc = Config::load_default()
        .map(|c| c.runc)
        .unwrap_or_else(|_| "runc".into());
    let runc = runc_path(&runc)?;
    let e = Command::new(&runc).args(argv).exec();
    Err(anyhow!("cannot run {}: {e}", runc.display()))
}

fn run(argv: &[OsString], a: &args::RuncArgs) -> Result<i32> {
    match a.command.as_deref() {
        Some("create") => create(argv, a),
        Some("run") => create(argv, a),
        Some("delete") => delete(argv, a),
        _ => {
            report::preamble(a);
            passthrough(argv)
        }
    }
}

fn effective_root(a: &args::RuncArgs) -> String {
    a.root.clone().unwrap_or_else(|| DEFAULT_RUNC_ROOT.into())
}

fn create(argv: &[OsString], a: &args::RuncArgs) -> Result<i32> {
    let dir = match &a.bundle {
        Some(b) => PathBuf::from(b),
        None => std::env::current_dir().context("current directory")?,
    };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let mut bundle = match Bundle::load(&dir) {
        Ok(b) => b,
        // never fail open: a config we cannot read that mentions a request
        Err(e @ LifecycleError::RequestInInvalidJson { .. }) => return Err(e.into()),
        Err(_) => return passthrough(argv), // runc reports a bad bundle itself
    };
    // The host config decides whether the environment may carry a request.
    // A config that does not load counts as allowing it, so that an env
    // request on a broken host is refused below rather than run unsliced.
    // A container the CRI runs (its runc root is a Kubernetes root) never
    // takes a request from its environment: the scheduler alone grants.
    let cfg = Config::load_default();
    // A prepared DRA claim's variable (its CDI device sets it) binds the
    // container to that claim, in every mode: requests are not read then.
    match lifecycle::presented_claim(&bundle) {
        Ok(Some(p)) => return create_claimed(argv, a, cfg, bundle, &p),
        Ok(None) => {}
        Err(e) => {
            if let Ok(cfg) = &cfg {
                let id = a.id.as_deref().unwrap_or("");
                let reason = gpuquota_core::claims::reason_of(&e);
                events::refused(
                    cfg,
                    source(a, "create"),
                    id,
                    "claim",
                    reason,
                    &e.to_string(),
                );
            }
            return Err(e.into());
        }
    }
    let policy = cfg
        .as_ref()
        .map(|c| c.env_policy_for(a.root.as_deref()))
        .unwrap_or(EnvRequests::Allowed);
    let req = Request::from_config(&bundle.config, policy);
    if let (Err(e), Ok(cfg)) = (&req, &cfg) {
        let request = format!("{}={}", e.origin, e.value);
        let id = a.id.as_deref().unwrap_or("");
        events::refused(
            cfg,
            source(a, "create"),
            id,
            &request,
            "invalid_request",
            &e.to_string(),
        );
    }
    let Some(req) = req? else {
        warn_ignored_env(a, &cfg, &bundle, policy);
        return passthrough(argv);
    };
    let id = a.id.clone().ok_or_else(|| {
        anyhow!(
            "runc {} without a container id",
            a.command.as_deref().unwrap_or("")
        )
    })?;
    let cfg = cfg?;
    let runc = runc_path(&cfg.runc)?;
    let inv = Inventory::load(&cfg)?;
    let root = effective_root(a);
    // --gpus, a Compose device reservation, ctr's nvidia-container-cli hook
    // or CDI devices: the engine's GPU request reconciled with ours, refused
    // before anything is reserved when they contradict
    let from = toolkit::VisibleFrom::for_root(&cfg, Some(&root));
    let (req, engine) = match toolkit::request_for_create(&bundle.config, &req, &inv, from) {
        Ok(x) => x,
        Err(e) => {
            let request = gpuquota_core::ledger::describe_request(&req);
            events::refused(
                &cfg,
                source(a, "create"),
                &id,
                &request,
                "engine_request",
                &e.to_string(),
            );
            return Err(e.into());
        }
    };
    let r = lifecycle::admit(&cfg, &inv, &bundle, &req, &id, &root, source(a, "create"))?;
    if engine.is_some() {
        // gpu-quota owns this container's GPU devices: hooks that hand out
        // GPUs go, other GPUs' nodes (DRM ones too), rules and mounts go
        toolkit::narrow_to_slices(&mut bundle.config, &inv, &r.slices);
    }
    lifecycle::setup(&cfg, &inv, &mut bundle, &r, source(a, "create-failed"))?;
    run_admitted(&cfg, &runc, argv, a, &id, &root)
}

/// `create` of a container bound to a prepared DRA claim: a config that
/// does not load refuses it (never run unsliced).
fn create_claimed(
    argv: &[OsString],
    a: &args::RuncArgs,
    cfg: Result<Config, gpuquota_core::config::ConfigError>,
    mut bundle: Bundle,
    p: &gpuquota_core::claims::Presented,
) -> Result<i32> {
    let id = a.id.clone().ok_or_else(|| {
        anyhow!(
            "runc {} without a container id",
            a.command.as_deref().unwrap_or("")
        )
    })?;
    let cfg = cfg?;
    let runc = runc_path(&cfg.runc)?;
    let inv = Inventory::load(&cfg)?;
    let root = effective_root(a);
    let r = lifecycle::admit_claim(&cfg, &mut bundle, p, &id, &root, source(a, "create"))?;
    lifecycle::engine_request_for_claim(&cfg, &inv, &mut bundle, &r, source(a, "create"))?;
    lifecycle::setup(&cfg, &inv, &mut bundle, &r, source(a, "create-failed"))?;
    run_admitted(&cfg, &runc, argv, a, &id, &root)
}

/// runc for an admitted container; its reservation ends here when runc
/// fails or a foreground `run` is over.
fn run_admitted(
    cfg: &Config,
    runc: &Path,
    argv: &[OsString],
    a: &args::RuncArgs,
    id: &str,
    root: &str,
) -> Result<i32> {
    // r615+ driver limits: a foreground `run` gets `--keep`, so that the
    // limit is cleared while the cgroup exists, then it is deleted here
    let keep_for_limits = a.command.as_deref() == Some("run")
        && !a.detach
        && !a.keep
        && a.command_index.is_some()
        && gpuquota_core::drvlimit::active_marker(cfg).exists();
    let run_argv = match a.command_index {
        Some(i) if keep_for_limits => args::with_keep(argv, i),
        _ => argv.to_vec(),
    };
    let code = spawn_forwarding(runc, &run_argv)?;
    if keep_for_limits {
        finish_kept_run(cfg, runc, argv, a, id, root);
    }
    let foreground_run = a.command.as_deref() == Some("run") && !a.detach;
    if code != 0 || foreground_run {
        // the container never started, or `runc run` already deleted it
        let cause = if code != 0 {
            "runc-failed"
        } else {
            "run-exited"
        };
        lifecycle::end(
            cfg,
            Key::Root {
                id,
                root: Some(root),
            },
            source(a, cause),
        );
    }
    Ok(code)
}

/// A container that asks through its environment on a host that takes no
/// requests from there runs without a slice: say so, once.
fn warn_ignored_env(
    a: &args::RuncArgs,
    cfg: &Result<Config, gpuquota_core::config::ConfigError>,
    bundle: &Bundle,
    policy: EnvRequests,
) {
    let ignored = request::env_request_vars(&request::config_env(&bundle.config));
    if ignored.is_empty() || policy != EnvRequests::Ignored {
        return;
    }
    let kubernetes = cfg
        .as_ref()
        .is_ok_and(|c| c.is_kubernetes_root(a.root.as_deref()));
    let msg = if kubernetes {
        format!(
            "ignoring {} in the container's environment: runc root {} is a Kubernetes root (`kubernetes_runc_roots` in {}), where only the scheduler grants slices; request the gpu-quota.io/vram resource",
            ignored.join(", "),
            a.root.as_deref().unwrap_or(""),
            Config::path_from_env().display()
        )
    } else {
        format!(
            "ignoring {} in the container's environment: this host takes requests only from annotations (`env_requests` is off in {}); pass --annotation vram=SIZE",
            ignored.join(", "),
            Config::path_from_env().display()
        )
    };
    report::warning(a, &msg);
}

/// After `runc run --keep`: clear the driver limit, then delete the stopped
/// container as `runc run` would have (its poststop hook runs then).
fn finish_kept_run(
    cfg: &Config,
    runc: &Path,
    argv: &[OsString],
    a: &args::RuncArgs,
    id: &str,
    root: &str,
) {
    if let Err(e) = gpuquota_core::drvlimit::clear_for_container(cfg, id, Some(root), true) {
        eprintln!("gpu-quota-runtime: warning: driver memory limit not cleared: {e}");
    }
    let mut del: Vec<OsString> = argv[..a.command_index.unwrap_or(0)].to_vec();
    del.extend(["delete".into(), "--force".into(), id.into()]);
    let _ = Command::new(runc)
        .args(&del)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

fn delete(argv: &[OsString], a: &args::RuncArgs) -> Result<i32> {
    let Ok(cfg) = Config::load_default() else {
        return passthrough(argv);
    };
    let runc = runc_path(&cfg.runc)?;
    if let Some(id) = &a.id {
        // runc removes the cgroup before it runs poststop hooks: clear the
        // driver limit (r615+) now, while the cgroup still exists
        let force = argv
            .iter()
            .any(|x| x == "--force" || x == "-f" || x == "--force=true");
        if let Err(e) =
            gpuquota_core::drvlimit::clear_for_container(&cfg, id, Some(&effective_root(a)), force)
        {
            eprintln!("gpu-quota-runtime: warning: driver memory limit not cleared: {e}");
        }
    }
    // The bundle, while runc still knows the container: a state directory
    // whose reservation is already gone (`gpu-quota release --force` of a
    // running container) is found by it after the delete.
    let bundle =
        a.id.as_deref()
            .and_then(|id| runc_bundle(&effective_root(a), id));
    let code = spawn_forwarding(&runc, argv)?;
    if let Some(id) = &a.id {
        let root = effective_root(a);
        // release only once runc no longer knows the container
        if !Path::new(&root).join(id).exists() {
            let key = Key::Root {
                id,
                root: Some(&root),
            };
            let gone = lifecycle::end(&cfg, key, source(a, "delete"));
            if gone.is_empty() {
                if let Some(bundle) = &bundle {
                    lifecycle::release_orphan(&cfg, id, &root, bundle);
                }
            }
        }
    }
    Ok(code)
}

/// The bundle runc recorded for container `id` under `root` (the `bundle=`
/// label in its `state.json`), read capped and without following links;
/// None when runc does not know the container or the file says nothing.
fn runc_bundle(root: &str, id: &str) -> Option<String> {
    if !state::valid_container_id(id) {
        return None;
    }
    let p = Path::new(root).join(id).join("state.json");
    let bytes = gpuquota_core::fsutil::read_regular_capped(&p, 4 << 20).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.pointer("/config/labels")?
        .as_array()?
        .iter()
        .filter_map(|l| l.as_str()?.strip_prefix("bundle="))
        .next()
        .map(|b| {
            std::fs::canonicalize(b)
                .map_or_else(|_| b.to_string(), |c| c.to_string_lossy().into_owned())
        })
}

/// Who records an event: this runtime, for the engine behind its runc root.
fn source<'a>(a: &'a args::RuncArgs, cause: &'a str) -> events::Source<'a> {
    events::Source {
        program: "gpu-quota-runtime",
        engine: events::engine_of(Some(a.root.as_deref().unwrap_or(DEFAULT_RUNC_ROOT))),
        cause,
    }
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Run runc as a child, forwarding the usual signals, and return its exit
/// code (128+signal when it was killed).
fn spawn_forwarding(runc: &Path, argv: &[OsString]) -> Result<i32> {
    let mut child = Command::new(runc)
        .args(argv)
        .spawn()
        .with_context(|| format!("cannot run {}", runc.display()))?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGWINCH,
    ] {
        // SAFETY: installing a handler that only calls kill.
        unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
    }
    let status = child.wait().context("waiting for runc")?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
