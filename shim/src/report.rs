//! Errors reach the user on stderr and, when the engine gave runc a `--log`
//! file, as a runc-format log entry there (Docker and containerd show the
//! last error of that file).
use crate::args::RuncArgs;
use std::io::Write;

fn rfc3339_now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = t.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil-from-days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        t.subsec_nanos()
    )
}

/// The runtime's name in front of a message on stderr, unless the engine reading our stderr
/// puts one there itself: podman (and its conmon) show a runtime error as
/// `Error: OCI runtime error: RUNTIME: <stderr>`, so `gpu-quota: ` of ours would make it
/// `gpu-quota: gpu-quota: …`.
pub fn stderr_line(msg: &str, parent_comm: Option<&str>) -> String {
    match parent_comm {
        Some("conmon" | "podman") => msg.to_string(),
        _ => format!("gpu-quota: {msg}"),
    }
}

fn parent_comm() -> Option<String> {
    let ppid = std::os::unix::process::parent_id();
    std::fs::read_to_string(format!("/proc/{ppid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

const USAGE: &str = "\
gpu-quota-runtime: runc with GPU-memory quotas. Engines call it exactly like runc:
  gpu-quota-runtime [runc global options] COMMAND [options] CONTAINER_ID
On create/run of a container whose annotations ask for GPU memory (vram=8g, gpu=0, gpus=2,
or gpu-quota.io/vram=...), the slice is admitted into the host ledger and config.json gets
the devices and gpu-quota-hook; delete releases it. Everything else is passed to the real
runc unchanged; containers without a request are not touched.
Configuration: $GPU_QUOTA_CONFIG, else /etc/gpu-quota/config.toml. Operator tool: gpu-quota
(install ENGINE, ls, gc, doctor, metrics).";

/// `--version` / `--help`: gpu-quota's own lines first (on stdout), then runc answers too.
pub fn preamble(a: &RuncArgs) {
    if a.help {
        gpuquota_core::outln!("{USAGE}\n\nrunc's own help follows:\n");
    } else if a.version {
        gpuquota_core::outln!("gpu-quota-runtime {}", env!("CARGO_PKG_VERSION"));
    } else {
        return;
    }
    let _ = std::io::stdout().flush();
}

pub fn error(a: &RuncArgs, msg: &str) {
    log(a, "error", msg)
}

/// A notice that does not stop the container (stderr and runc's log).
pub fn warning(a: &RuncArgs, msg: &str) {
    log(a, "warning", msg)
}

fn log(a: &RuncArgs, level: &str, msg: &str) {
    eprintln!("{}", stderr_line(msg, parent_comm().as_deref()));
    let msg = format!("gpu-quota: {msg}");
    let Some(path) = &a.log else { return };
    let line = if a.log_format.as_deref() == Some("json") {
        serde_json::json!({"level": level, "msg": msg, "time": rfc3339_now()}).to_string()
    } else {
        format!("time=\"{}\" level={level} msg={:?}", rfc3339_now(), msg)
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_prefix_under_podman() {
        assert_eq!(super::stderr_line("cannot x", None), "gpu-quota: cannot x");
        assert_eq!(
            super::stderr_line("cannot x", Some("containerd-shim")),
            "gpu-quota: cannot x"
        );
        assert_eq!(super::stderr_line("cannot x", Some("conmon")), "cannot x");
        assert_eq!(super::stderr_line("cannot x", Some("podman")), "cannot x");
    }

    #[test]
    fn time_format() {
        let t = super::rfc3339_now();
        assert_eq!(t.len(), 30, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'));
    }
}
