//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
//!
//! This file: the command line: usage errors, warnings, reinstall, engines side by side.
mod common;
use common::*;
use std::process::Command;

// ---------------------------------------------------------------- CLI

#[test]
fn usage_errors() {
    let t = Tree::new();
    let o = t.run(&[
        "install",
        "docker",
        "--runtime-path",
        "bin/gpu-quota-runtime",
    ]);
    assert!(!o.ok && o.stderr.contains("absolute path"), "{}", o.stderr);
    let o = t.run(&["install", "lxc"]);
    assert!(!o.ok && o.stderr.contains("invalid value"), "{}", o.stderr);
    let o = Command::new(BIN)
        .args(["install", "docker", "--root", "/nonexistent/gpu-quota-root"])
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o.stderr).contains("/nonexistent/gpu-quota-root"));
}

#[test]
fn missing_runtime_in_root_is_a_warning() {
    let t = Tree::new();
    let o = t.run(&[
        "install",
        "podman",
        "--runtime-path",
        "/opt/gq/gpu-quota-runtime",
    ]);
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stderr.contains("warning") && o.stderr.contains("/opt/gq/gpu-quota-runtime"),
        "{}",
        o.stderr
    );
    assert!(t
        .get("/etc/containers/containers.conf.d/gpu-quota.conf")
        .unwrap()
        .contains("/opt/gq/gpu-quota-runtime"));
}

#[test]
fn reinstall_with_another_runtime_path_updates_and_uninstall_still_restores() {
    let t = Tree::new();
    t.put(
        "/etc/docker/daemon.json",
        &fixture("docker/daemon-other-runtimes.json"),
    );
    let start = t.snapshot();
    t.install("docker");
    let o = t.run(&[
        "install",
        "docker",
        "--runtime-path",
        "/opt/gq/gpu-quota-runtime",
    ]);
    assert!(o.ok && o.stdout.contains("updated"), "{}", o.stdout);
    assert!(t
        .get("/etc/docker/daemon.json")
        .unwrap()
        .contains("/opt/gq/gpu-quota-runtime"));
    t.uninstall("docker");
    assert_eq!(t.snapshot(), start);
}

#[test]
fn engines_side_by_side() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v2-debian.toml"),
    );
    let start = t.snapshot();
    for e in ["docker", "containerd", "podman", "crio"] {
        t.install(e);
    }
    for e in ["crio", "podman", "containerd", "docker"] {
        t.uninstall(e);
    }
    assert_eq!(t.snapshot(), start);
}
