//! `gpu-quota-runtime --version` / `--help`: gpu-quota's own answer first, then runc's.
use std::process::Command;

fn run(arg: &str) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-quota-runtime"))
        .arg(arg)
        .env("GPU_QUOTA_CONFIG", "/nonexistent/gpu-quota.toml")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

fn have_runc() -> bool {
    Command::new("runc").arg("--version").output().is_ok()
}

#[test]
fn version_is_ours_then_runcs() {
    let (ok, out) = run("--version");
    let first = out.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("gpu-quota-runtime {}", env!("CARGO_PKG_VERSION")),
        "{out}"
    );
    if have_runc() {
        assert!(ok, "{out}");
        assert!(
            out.lines()
                .nth(1)
                .unwrap_or_default()
                .starts_with("runc version"),
            "{out}"
        );
    }
}

#[test]
fn help_is_a_usage_then_runcs() {
    for arg in ["--help", "-h"] {
        let (ok, out) = run(arg);
        assert!(
            out.starts_with("gpu-quota-runtime: runc with GPU-memory quotas"),
            "{out}"
        );
        assert!(
            out.contains("CONTAINER_ID") && out.contains("/etc/gpu-quota/config.toml"),
            "{out}"
        );
        if have_runc() {
            assert!(ok, "{out}");
            let ours = out.find("runc's own help follows").unwrap();
            assert!(
                out[ours..].contains("runc - Open Container Initiative runtime"),
                "{out}"
            );
        }
    }
}

/// `gpu-quota-runtime --version | true` panicked with exit 101.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    for arg in ["--version", "--help"] {
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        let o = Command::new(env!("CARGO_BIN_EXE_gpu-quota-runtime"))
            .arg(arg)
            .env("GPU_QUOTA_CONFIG", "/nonexistent/gpu-quota.toml")
            .stdout(w)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{arg}: {err}");
        assert_eq!(o.status.code(), Some(0), "{arg}: {err}");
    }
}
