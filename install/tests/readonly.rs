//! Read-only commands (`ls`, `ls --json`, `doctor`, `gc --dry-run`, `metrics`) create
//! nothing: not the ledger directory, not `ledger.lock`, not the state directory.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-quota");

fn tree(root: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            out.insert(p);
        }
    }
    out
}

struct Host {
    dir: tempfile::TempDir,
    config: PathBuf,
}

/// A config whose ledger_dir and state_dir do not exist; `inventory`: a TOML tail.
fn host(inventory: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "ledger_dir = \"{0}/var/lib/gpu-quota\"\nstate_dir = \"{0}/run/gpu-quota\"\n[driver]\ndev_root = \"{0}/dev\"\n{inventory}",
            d.display()
        ),
    )
    .unwrap();
    Host { dir, config }
}

const STATIC: &str = "[inventory]\nsource = \"static\"\n[[inventory.gpu]]\nindex = 0\nuuid = \"GPU-00000000-0000-4000-8000-000000000000\"\nmemory = \"16g\"\n";

fn run(h: &Host, args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(BIN)
        .args(args)
        .env("GPU_QUOTA_CONFIG", &h.config)
        .env_remove("DOCKER_HOST")
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const READ_ONLY: [&[&str]; 5] = [
    &["ls"],
    &["ls", "--json"],
    &["doctor"],
    &["gc", "--dry-run"],
    &["metrics"],
];

#[test]
fn read_only_commands_create_nothing() {
    for inv in [STATIC, "[inventory]\nsource = \"nvml\"\n"] {
        let h = host(inv);
        let before = tree(h.dir.path());
        for args in READ_ONLY {
            let (code, out, err) = run(&h, args);
            assert!(code.is_some(), "{args:?} was killed");
            assert_eq!(
                tree(h.dir.path()),
                before,
                "`gpu-quota {}` created files (stdout: {out}, stderr: {err})",
                args.join(" ")
            );
            assert!(!h.dir.path().join("var").exists() && !h.dir.path().join("run").exists());
        }
    }
}

#[test]
fn doctor_says_no_ledger_yet() {
    let h = host(STATIC);
    let (_, out, _) = run(&h, &["doctor"]);
    let line = out
        .lines()
        .find(|l| l.contains(" ledger:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("no ledger yet"), "{line}");
    assert!(!line.contains("0 reservations"), "{line}");
    // and with a ledger, it counts
    let l = h.dir.path().join("var/lib/gpu-quota");
    std::fs::create_dir_all(&l).unwrap();
    std::fs::write(l.join("ledger.json"), "{\"version\":1,\"reservations\":[]}").unwrap();
    let (_, out, _) = run(&h, &["doctor"]);
    assert!(out.contains("ledger.json (0 reservations)"), "{out}");
}

#[test]
fn doctor_checks_engines() {
    let h = host(STATIC);
    let (_, out, _) = run(&h, &["doctor"]);
    for e in ["docker", "containerd", "podman", "crio"] {
        assert!(
            out.lines().any(|l| l.contains(&format!(" engine {e}: "))),
            "no check for {e}:\n{out}"
        );
    }
    assert!(out.contains("env_requests: false"), "{out}");
}

#[test]
fn metrics_without_nvml_exports_the_ledger_and_the_error() {
    let h = host("[inventory]\nsource = \"nvml\"\n");
    let l = h.dir.path().join("var/lib/gpu-quota");
    std::fs::create_dir_all(&l).unwrap();
    std::fs::write(
        l.join("ledger.json"),
        r#"{"version":1,"reservations":[{"container_id":"c1","runtime_root":"/run/runc","bundle":"/b","slices":[{"uuid":"GPU-00000000-0000-4000-8000-000000000000","index":0,"bytes":2147483648}],"request":"vram=2.00 GiB","created_unix":1,"started_unix":1,"pid":null,"pid_start":null,"state":"running"}]}"#,
    )
    .unwrap();
    let (code, out, err) = run(&h, &["metrics"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("gpu_quota_inventory_up 0"), "{out}");
    assert!(out.contains("gpu_quota_inventory_error{error=\""), "{out}");
    assert!(
        out.contains("gpu_quota_container_slice_bytes{container=\"c1\",namespace=\"\",pod=\"\",pod_uid=\"\",container_name=\"\",gpu=\"0\"} 2147483648"),
        "{out}"
    );
    assert!(err.contains("exporting the ledger only"), "{err}");
    let h = host(STATIC);
    let (code, out, _) = run(&h, &["metrics"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("gpu_quota_inventory_up 1") && !out.contains("gpu_quota_inventory_error"),
        "{out}"
    );
}
