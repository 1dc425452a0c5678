//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
//!
//! This file: env_requests in gpu-quota's own config.toml, per engine.
mod common;
use common::*;

// ---------------------------------------------------------------- env_requests in config.toml

const GQ_CONFIG: &str = "/etc/gpu-quota/config.toml";
const USER_CONFIG: &str = "# site settings\nreserve = \"1g\"   # keep 1 GiB free\n\n[driver]\n# where the libraries are\nlib_dirs = [\"/usr/lib64\"]\n";

fn env_requests_line(t: &Tree) -> Vec<String> {
    t.get(GQ_CONFIG)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("env_requests"))
        .map(String::from)
        .collect()
}

#[test]
fn docker_before_24_turns_env_requests_on_and_uninstall_restores() {
    let t = Tree::new();
    t.put(GQ_CONFIG, USER_CONFIG.as_bytes());
    let start = t.snapshot();
    let args = [
        "install",
        "docker",
        "--runtime-path",
        RT,
        "--docker-version",
        "20.10.24+dfsg1",
    ];
    let dry = t.run(&[&args[..], &["--dry-run"]].concat());
    assert!(
        dry.ok && dry.stdout.contains("+env_requests = true"),
        "{}{}",
        dry.stdout,
        dry.stderr
    );
    assert_eq!(t.snapshot(), start, "--dry-run wrote nothing");
    let o = t.run(&args);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    assert_eq!(env_requests_line(&t), ["env_requests = true"]);
    let c = t.get(GQ_CONFIG).unwrap();
    assert!(
        c.starts_with("# site settings\nreserve = \"1g\"   # keep 1 GiB free\n"),
        "{c}"
    );
    assert!(c.contains("[driver]\n# where the libraries are\n"), "{c}");
    assert!(
        c.contains("Docker 20.10.24+dfsg1 (--docker-version) cannot pass --annotation"),
        "{c}"
    );
    let o = t.uninstall("docker");
    assert!(
        o.stdout.contains(GQ_CONFIG.trim_start_matches('/')) || o.stdout.contains("config.toml"),
        "{}",
        o.stdout
    );
    assert_eq!(
        t.snapshot(),
        start,
        "uninstall restored config.toml byte for byte"
    );
}

#[test]
fn docker_24_and_later_keep_env_requests_off() {
    let t = Tree::new();
    let start = t.snapshot();
    let o = t.run(&[
        "install",
        "docker",
        "--runtime-path",
        RT,
        "--docker-version",
        "26.1.5",
    ]);
    assert!(o.ok, "{}{}", o.stdout, o.stderr);
    assert_eq!(env_requests_line(&t), ["env_requests = false"]);
    t.uninstall("docker");
    assert_eq!(
        t.snapshot(),
        start,
        "config.toml and /etc/gpu-quota created by install are gone"
    );
}

#[test]
fn containerd_and_crio_keep_env_requests_off() {
    for engine in ["containerd", "crio"] {
        let t = Tree::new();
        t.put(GQ_CONFIG, b"env_requests = true\n");
        let start = t.snapshot();
        t.install(engine);
        assert_eq!(env_requests_line(&t), ["env_requests = false"], "{engine}");
        t.uninstall(engine);
        assert_eq!(
            t.snapshot(),
            start,
            "{engine}: the user's env_requests = true is back"
        );
    }
}

#[test]
fn a_broken_config_toml_stops_install_and_writes_nothing() {
    let t = Tree::new();
    t.put(GQ_CONFIG, b"[driver\n");
    let start = t.snapshot();
    let o = t.run(&["install", "containerd", "--runtime-path", RT]);
    assert!(!o.ok);
    assert!(
        o.stderr.contains("config.toml") && o.stderr.contains("not valid TOML"),
        "{}",
        o.stderr
    );
    assert_eq!(t.snapshot(), start);
}
