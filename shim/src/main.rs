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
    devices, events,
    formats::keys,
    fsutil,
    ledger::Key,
    mountplan, paths,
    request::{self, EnvRequests},
    rootfs, spec, state, Inventory, Ledger, Request,
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
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::canonicalize(p).ok());
    if std::fs::canonicalize(&p).ok() == me {
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
    let bundle = match &a.bundle {
        Some(b) => PathBuf::from(b),
        None => std::env::current_dir().context("current directory")?,
    };
    let bundle = std::fs::canonicalize(&bundle).unwrap_or(bundle);
    let cfg_path = spec::config_path(&bundle);
    let bytes = match std::fs::read(&cfg_path) {
        Ok(b) => b,
        Err(_) => return passthrough(argv), // runc reports a missing bundle itself
    };
    let mut config: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            // Never fail open: a config we cannot read that mentions a request is refused.
            if contains_request_key(&bytes) {
                return Err(anyhow!(
                    "{} is not valid JSON ({e}) and seems to request GPU memory; refusing",
                    cfg_path.display()
                ));
            }
            return passthrough(argv);
        }
    };
    // The host config decides whether the environment may carry a request.
    // A config that does not load counts as allowing it, so that an env
    // request on a broken host is refused below rather than run unsliced.
    // A container the CRI runs (its runc root is a Kubernetes root) never
    // takes a request from its environment: the scheduler alone grants.
    let cfg = Config::load_default();
    let policy = cfg
        .as_ref()
        .map(|c| c.env_policy_for(a.root.as_deref()))
        .unwrap_or(EnvRequests::Allowed);
    let req = Request::from_config(&config, policy);
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
        let ignored = request::env_request_vars(&request::config_env(&config));
        if !ignored.is_empty() && policy == EnvRequests::Ignored {
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
        return passthrough(argv);
    };
    let id = a.id.clone().ok_or_else(|| {
        anyhow!(
            "runc {} without a container id",
            a.command.as_deref().unwrap_or("")
        )
    })?;
    if !state::valid_container_id(&id) {
        return Err(anyhow!(
            "container id {id:?} has characters gpu-quota does not accept"
        ));
    }
    let cfg = cfg?;
    // a volume, host directory or tmpfs over a path the hook writes: refused
    // before anything is reserved (symlink-steered ones: the hook, EXDEV)
    if let Some(c) = mountplan::declared_conflict(
        &rootfs::Declared::from_config(&config),
        &cfg.driver.binaries,
    ) {
        let request = gpuquota_core::ledger::describe_request(&req);
        events::refused(
            &cfg,
            source(a, "create"),
            &id,
            &request,
            "mount_conflict",
            &c.to_string(),
        );
        return Err(c.into());
    }
    let runc = runc_path(&cfg.runc)?;
    let inv = Inventory::load(&cfg)?;
    let ledger = Ledger::new(&cfg);
    let root = effective_root(a);
    let mut reclaimed = vec![];
    let admitted = ledger.admit(
        &cfg,
        &inv,
        &req,
        &id,
        Some(&root),
        &bundle.to_string_lossy(),
        &mut reclaimed,
    );
    if !reclaimed.is_empty() {
        let held = held_now(&ledger);
        for gone in &reclaimed {
            let _ = state::remove_released(&cfg, gone, held.as_deref());
        }
    }
    events::reclaimed(&cfg, source(a, "admission"), &reclaimed);
    match &admitted {
        Ok(r) => events::admitted(&cfg, source(a, "create"), r),
        Err(e) => {
            let request = gpuquota_core::ledger::describe_request(&req);
            events::refused(
                &cfg,
                source(a, "create"),
                &id,
                &request,
                events::reason_of(e),
                &e.to_string(),
            );
        }
    }
    let r = admitted?;
    let key = Key::Root {
        id: &id,
        root: Some(&root),
    };
    let patched = (|| -> Result<()> {
        let nodes = devices::nodes_for(&cfg.driver.dev_root, &inv, &r.slices)?;
        let hook = paths::hook(&cfg).filter(|p| p.is_file()).ok_or_else(|| {
            anyhow!(
                "gpu-quota-hook not found next to gpu-quota-runtime; set `hook` in {}",
                Config::path_from_env().display()
            )
        })?;
        let hook = std::fs::canonicalize(&hook).unwrap_or(hook);
        let mut env =
            vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()];
        let cp = Config::path_from_env();
        let cp = std::fs::canonicalize(&cp).unwrap_or(cp);
        env.push(format!(
            "{}={}",
            gpuquota_core::config::ENV_PATH,
            cp.display()
        ));
        // the hook's key: runc root (not in the OCI state) + id + bundle
        let hs = spec::HookSpec {
            path: hook,
            env,
            args: vec![spec::HOOK_ROOT_ARG.into(), root.clone()],
            timeout_secs: 60,
        };
        let assigned: Vec<&str> = r.slices.iter().map(|s| s.uuid.as_str()).collect();
        spec::patch(&mut config, &nodes, &hs, &assigned.join(","))
            .map_err(|w| anyhow!("{}: {w}", cfg_path.display()))?;
        // before runc clones the container's mount namespace (see state::create)
        state::create(&cfg, &r, state::UsageBacking::Tmpfs)
            .with_context(|| format!("preparing {}", state::container_dir(&cfg, &r).display()))?;
        let mode = std::fs::metadata(&cfg_path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
            .unwrap_or(0o644);
        let mut out = serde_json::to_vec(&config)?;
        out.push(b'\n');
        fsutil::write_atomic(&cfg_path, &out, mode)
            .with_context(|| format!("writing {}", cfg_path.display()))?;
        Ok(())
    })();
    if let Err(e) = patched {
        let gone = ledger.release(key.clone()).unwrap_or_default();
        events::released(&cfg, source(a, "create-failed"), &gone);
        let _ = state::remove_released(&cfg, &r, held_now(&ledger).as_deref());
        return Err(e);
    }
    // r615+ driver limits: a foreground `run` gets `--keep`, so that the
    // limit is cleared while the cgroup exists, then it is deleted here
    let keep_for_limits = a.command.as_deref() == Some("run")
        && !a.detach
        && !a.keep
        && a.command_index.is_some()
        && gpuquota_core::drvlimit::active_marker(&cfg).exists();
    let run_argv = match a.command_index {
        Some(i) if keep_for_limits => args::with_keep(argv, i),
        _ => argv.to_vec(),
    };
    let code = spawn_forwarding(&runc, &run_argv)?;
    if keep_for_limits {
        finish_kept_run(&cfg, &runc, argv, a, &id, &root);
    }
    let foreground_run = a.command.as_deref() == Some("run") && !a.detach;
    if code != 0 || foreground_run {
        // the container never started, or `runc run` already deleted it
        let gone = ledger.release(key).unwrap_or_default();
        let cause = if code != 0 {
            "runc-failed"
        } else {
            "run-exited"
        };
        events::released(&cfg, source(a, cause), &gone);
        let held = held_now(&ledger);
        for r in gone {
            let _ = state::remove_released(&cfg, &r, held.as_deref());
        }
    }
    Ok(code)
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

fn contains_request_key(b: &[u8]) -> bool {
    let s = String::from_utf8_lossy(b);
    s.contains(&format!("\"{}\"", keys::ANN_VRAM))
        || s.contains(keys::ANNOTATION_PREFIX)
        || s.contains(keys::ENV_VRAM)
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
            let ledger = Ledger::new(&cfg);
            let gone = ledger
                .release(Key::Root {
                    id,
                    root: Some(&root),
                })
                .unwrap_or_default();
            events::released(&cfg, source(a, "delete"), &gone);
            let held = held_now(&ledger);
            if gone.is_empty() && state::valid_container_id(id) {
                if let (Some(bundle), Some(held)) = (&bundle, &held) {
                    let dir = cfg.state_dir.join("containers").join(state::dir_name(
                        id,
                        Some(&root),
                        bundle,
                    ));
                    // nothing held under this id and root any more: the
                    // directory is this container's, and it is gone
                    if !held.iter().any(|r| state::container_dir(&cfg, r) == dir) {
                        let _ = state::remove(&dir);
                    }
                }
            }
            for r in gone {
                let _ = state::remove_released(&cfg, &r, held.as_deref());
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

/// The reservations still held, for `state::remove_released` (None: the
/// ledger cannot be read; an old-named state directory is left to `gc`).
fn held_now(ledger: &Ledger) -> Option<Vec<gpuquota_core::Reservation>> {
    ledger.read().ok().map(|d| d.reservations)
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
