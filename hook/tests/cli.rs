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
