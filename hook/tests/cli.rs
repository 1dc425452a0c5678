//! `gpu-quota-hook --help` gives a usage line (not "unknown stage").
use std::process::Command;

#[test]
fn help_is_a_usage() {
    for arg in ["--help", "-h", "help"] {
        let o = Command::new(env!("CARGO_BIN_EXE_gpu-quota-hook"))
            .arg(arg)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{arg}: {out}");
        assert!(
            out.contains("Usage: gpu-quota-hook create-runtime|prestart|poststop"),
            "{out}"
        );
        assert!(!String::from_utf8_lossy(&o.stderr).contains("unknown stage"));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-quota-hook"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "no stage: usage and exit 2");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage:"));
}

/// `gpu-quota-hook --help | true` panicked with exit 101.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    let o = Command::new(env!("CARGO_BIN_EXE_gpu-quota-hook"))
        .arg("--help")
        .stdout(w)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
}
