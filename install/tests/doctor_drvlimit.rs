//! On cgroup v1 every container start printed "driver limits not set: not
//! cgroup v2 …" to runc's log. It is a host condition: `gpu-quota doctor` says it once.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-quota");

#[test]
fn doctor_says_whether_driver_limits_can_be_set() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "ledger_dir = \"{0}/l\"\nstate_dir = \"{0}/s\"\n[driver]\ndev_root = \"{0}/dev\"\n[inventory]\nsource = \"static\"\n[[inventory.gpu]]\nindex = 0\nuuid = \"GPU-00000000-0000-4000-8000-000000000000\"\nmemory = \"16g\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let o = Command::new(BIN)
        .arg("doctor")
        .env("GPU_QUOTA_CONFIG", &config)
        .env_remove("DOCKER_HOST")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains(" driver limits: "))
        .unwrap_or_else(|| panic!("no driver limits check:\n{out}"));
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").is_file();
    if v2 {
        assert!(!line.contains("cgroup v1"), "{line}");
    } else {
        // this host is cgroup v1: said here, once, with what it means
        assert!(
            line.starts_with("--") && line.contains("cgroup v1") && line.contains("interceptor"),
            "{line}"
        );
    }
}
