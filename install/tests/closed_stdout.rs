//! `gpu-quota ls | head -3` panicked ("failed printing to stdout:
//! Broken pipe", exit 101). Every command that prints ends quietly when its
//! stdout is closed, as coreutils do.
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_gpu-quota");

const STATIC: &str = "[inventory]\nsource = \"static\"\n[[inventory.gpu]]\nindex = 0\nuuid = \"GPU-00000000-0000-4000-8000-000000000000\"\nmemory = \"16g\"\n";

const PRINTING: [&[&str]; 8] = [
    &["ls"],
    &["ls", "--json"],
    &["doctor"],
    &["gc", "--dry-run"],
    &["metrics"],
    &["top", "--once"],
    &["--help"],
    &["--version"],
];

fn host() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "ledger_dir = \"{0}/var/lib/gpu-quota\"\nstate_dir = \"{0}/run/gpu-quota\"\n[driver]\ndev_root = \"{0}/dev\"\n{STATIC}",
            d.display()
        ),
    )
    .unwrap();
    (dir, config)
}

fn cmd(config: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("GPU_QUOTA_CONFIG", config)
        .env_remove("DOCKER_HOST")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let (_dir, config) = host();
    for args in PRINTING {
        // control: the command does print, so a closed pipe is an EPIPE for it
        let o = cmd(&config, args).stdout(Stdio::piped()).output().unwrap();
        assert!(!o.stdout.is_empty(), "{args:?} printed nothing");
        // the reader is gone before the command writes its first byte
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        let o = cmd(&config, args).stdout(w).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "`gpu-quota {}` with stdout closed: {err}",
            args.join(" ")
        );
        assert_eq!(
            o.status.code(),
            Some(0),
            "`gpu-quota {}` with stdout closed: {err}",
            args.join(" ")
        );
    }
}
