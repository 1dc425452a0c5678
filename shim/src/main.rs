//! `gpu-quota-runtime`: a runc-compatible wrapper, an argument adapter
//! over `core::lifecycle`.
//!
//! Every command goes to the real runc with its arguments unchanged. On
//! `create` (and `run`) the container is prepared (`lifecycle::prepare`:
//! admitted into the host ledger and its bundle edited, passed through
//! untouched, or refused); if runc then fails, or a foreground `run` is
//! over, its reservation ends (`lifecycle::end`). `delete` ends it once
//! runc no longer knows the container. Containers without a request are
//! never touched.
mod args;
mod report;

use anyhow::{anyhow, Context, Result};
use gpuquota_core::{
    config::Config,
    lifecycle::{self, Container, Create, Exit, Prepared},
    paths, state,
};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// Who records this binary's events.
const PROGRAM: &str = "gpu-quota-runtime";

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

/// The runc to run: the configured one if the config loads, else `runc`
/// from PATH (a broken config must not break other containers).
fn runc_for(cfg: Option<&Config>) -> Result<PathBuf> {
    runc_path(cfg.map_or(Path::new("runc"), |c| c.runc.as_path()))
}

/// Hand the command line to runc, untouched.
fn passthrough(runc: &Path, argv: &[OsString]) -> Result<i32> {
    let e = Command::new(runc).args(argv).exec();
    Err(anyhow!("cannot run {}: {e}", runc.display()))
}

fn run(argv: &[OsString], a: &args::RuncArgs) -> Result<i32> {
    match a.command.as_deref() {
        Some("create") => create(argv, a),
        Some("run") => create(argv, a),
        Some("delete") => delete(argv, a),
        _ => {
            report::preamble(a);
            passthrough(&runc_for(Config::load_default().ok().as_ref())?, argv)
        }
    }
}

/// The container of this command line (`id`: the one it names).
fn container<'a>(a: &'a args::RuncArgs, id: &'a str) -> Container<'a> {
    Container {
        id,
        root: a.root.as_deref(),
        program: PROGRAM,
    }
}

fn create(argv: &[OsString], a: &args::RuncArgs) -> Result<i32> {
    let dir = match &a.bundle {
        Some(b) => PathBuf::from(b),
        None => std::env::current_dir().context("current directory")?,
    };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let cfg = Config::load_default();
    let runc = runc_for(cfg.as_ref().ok())?;
    let call = Create {
        id: a.id.as_deref(),
        root: a.root.as_deref(),
        bundle: &dir,
        program: PROGRAM,
    };
    match lifecycle::prepare(cfg, &call)? {
        Prepared::PassThrough { notice } => {
            if let Some(n) = notice {
                report::warning(a, &n);
            }
            passthrough(&runc, argv)
        }
        Prepared::Admitted { cfg, reservation } => {
            run_admitted(&cfg, &runc, argv, a, &reservation.container_id)
        }
    }
}

/// runc for an admitted container; its reservation ends here when runc
/// fails or a foreground `run` is over.
fn run_admitted(
    cfg: &Config,
    runc: &Path,
    argv: &[OsString],
    a: &args::RuncArgs,
    id: &str,
) -> Result<i32> {
    let c = container(a, id);
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
        finish_kept_run(cfg, runc, argv, a, &c);
    }
    let foreground_run = a.command.as_deref() == Some("run") && !a.detach;
    // the container never started, or `runc run` already deleted it
    let exit = if code != 0 {
        Some(Exit::RuncFailed)
    } else if foreground_run {
        Some(Exit::RunExited)
    } else {
        None
    };
    if let Some(exit) = exit {
        let _ = lifecycle::end(cfg, &c, exit);
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
    c: &Container<'_>,
) {
    lifecycle::before_runc_delete(cfg, c, true);
    let mut del: Vec<OsString> = argv[..a.command_index.unwrap_or(0)].to_vec();
    del.extend(["delete".into(), "--force".into(), c.id.into()]);
    let _ = Command::new(runc)
        .args(&del)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

fn delete(argv: &[OsString], a: &args::RuncArgs) -> Result<i32> {
    let Ok(cfg) = Config::load_default() else {
        return passthrough(&runc_for(None)?, argv);
    };
    let runc = runc_for(Some(&cfg))?;
    let Some(id) = a.id.as_deref() else {
        return spawn_forwarding(&runc, argv);
    };
    let c = container(a, id);
    // runc removes the cgroup before it runs poststop hooks: clear the
    // driver limit (r615+) now, while the cgroup still exists
    let force = argv
        .iter()
        .any(|x| x == "--force" || x == "-f" || x == "--force=true");
    lifecycle::before_runc_delete(&cfg, &c, force);
    // The bundle, while runc still knows the container: a state directory
    // whose reservation is already gone (`gpu-quota release --force` of a
    // running container) is found by it after the delete.
    let bundle = runc_bundle(c.runc_root(), id);
    let code = spawn_forwarding(&runc, argv)?;
    // release only once runc no longer knows the container
    if !Path::new(c.runc_root()).join(id).exists() {
        let exit = Exit::Deleted {
            bundle: bundle.as_deref(),
        };
        let _ = lifecycle::end(&cfg, &c, exit);
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
