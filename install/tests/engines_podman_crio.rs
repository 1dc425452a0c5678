//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
//!
//! This file: podman (containers.conf.d) and CRI-O (crio.conf.d).
mod common;
use common::*;

// ---------------------------------------------------------------- podman

#[test]
fn podman_existing_containers_conf_d() {
    let t = Tree::new();
    t.put(
        "/etc/containers/containers.conf",
        &fixture("podman/containers.conf"),
    );
    t.put(
        "/etc/containers/containers.conf.d/10-local.conf",
        &fixture("podman/10-local.conf"),
    );
    full_cycle(&t, "podman");
    t.install("podman");
    assert_eq!(
        t.get("/etc/containers/containers.conf").unwrap(),
        text(&fixture("podman/containers.conf"))
    );
    assert_eq!(
        t.get("/etc/containers/containers.conf.d/10-local.conf")
            .unwrap(),
        text(&fixture("podman/10-local.conf"))
    );
    let d: toml_edit::DocumentMut = t
        .get("/etc/containers/containers.conf.d/gpu-quota.conf")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(d["engine"]["runtimes"]["gpu-quota"][0].as_str(), Some(RT));
}

#[test]
fn podman_fresh_tree() {
    let t = Tree::new();
    full_cycle(&t, "podman");
}

// ---------------------------------------------------------------- crio

#[test]
fn crio_drop_in() {
    let t = Tree::new();
    t.put(
        "/etc/crio/crio.conf.d/10-crio.conf",
        &fixture("crio/10-crio.conf"),
    );
    full_cycle(&t, "crio");
    t.install("crio");
    let d: toml_edit::DocumentMut = t
        .get("/etc/crio/crio.conf.d/99-gpu-quota.conf")
        .unwrap()
        .parse()
        .unwrap();
    let h = &d["crio"]["runtime"]["runtimes"]["gpu-quota"];
    assert_eq!(h["runtime_path"].as_str(), Some(RT));
    assert_eq!(h["runtime_type"].as_str(), Some("oci"));
    assert_eq!(h["runtime_root"].as_str(), Some("/run/gpu-quota-runc"));
    assert_eq!(
        t.get("/etc/crio/crio.conf.d/10-crio.conf").unwrap(),
        text(&fixture("crio/10-crio.conf"))
    );
}

#[test]
fn crio_fresh_tree_and_alias() {
    let t = Tree::new();
    full_cycle(&t, "crio");
    let o = t.run(&["install", "cri-o", "--runtime-path", RT, "--dry-run"]);
    assert!(
        o.ok && o.stdout.contains("99-gpu-quota.conf"),
        "{}{}",
        o.stdout,
        o.stderr
    );
}
