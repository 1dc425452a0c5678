//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
//!
//! This file: docker (daemon.json).
mod common;
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

// ---------------------------------------------------------------- docker

#[test]
fn docker_fresh_tree() {
    let t = Tree::new();
    full_cycle(&t, "docker");
    t.install("docker");
    assert_eq!(
        t.get("/etc/docker/daemon.json").unwrap(),
        text(&fixture("docker/fresh.installed.json"))
    );
    assert!(
        !t.exists("/etc/docker/daemon.json.gpu-quota.bak"),
        "nothing to back up"
    );
    let o = t.uninstall("docker");
    assert!(o.stdout.contains("removed directory"), "{}", o.stdout);
    assert!(
        !t.exists("/etc"),
        "the directories install created are gone"
    );
}

#[test]
fn docker_keeps_other_runtimes_keys_order_and_mode() {
    let t = Tree::new();
    t.put(
        "/etc/docker/daemon.json",
        &fixture("docker/daemon-other-runtimes.json"),
    );
    fs::set_permissions(
        t.host("/etc/docker/daemon.json"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    full_cycle(&t, "docker");

    let o = t.install("docker");
    assert!(
        o.stdout.contains("--root given: no daemon signalled"),
        "{}",
        o.stdout
    );
    assert_eq!(
        t.get("/etc/docker/daemon.json").unwrap(),
        text(&fixture("docker/daemon-other-runtimes.installed.json"))
    );
    let mode = fs::metadata(t.host("/etc/docker/daemon.json"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "file mode kept");
    assert_eq!(
        t.get("/etc/docker/daemon.json.gpu-quota.bak").unwrap(),
        text(&fixture("docker/daemon-other-runtimes.json")),
        "backup of the original"
    );
}

#[test]
fn docker_adds_runtimes_object() {
    let t = Tree::new();
    t.put(
        "/etc/docker/daemon.json",
        &fixture("docker/daemon-no-runtimes.json"),
    );
    let installed = full_cycle(&t, "docker");
    let after = &installed[Path::new("etc/docker/daemon.json")]
        .as_ref()
        .unwrap()
        .0;
    let v: serde_json::Value = serde_json::from_slice(after).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["registry-mirrors", "live-restore", "debug", "runtimes"]
    );
    assert_eq!(v["runtimes"]["gpu-quota"]["path"], RT);
}

#[test]
fn docker_refuses_bad_json_and_writes_nothing() {
    let t = Tree::new();
    t.put(
        "/etc/docker/daemon.json",
        &fixture("docker/daemon-bad.json"),
    );
    let start = t.snapshot();
    let o = t.run(&["install", "docker", "--runtime-path", RT]);
    assert!(!o.ok);
    let path = t.host("/etc/docker/daemon.json").display().to_string();
    assert!(
        o.stderr.contains(&format!("{path}: not valid JSON")),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("line 5 column 3"),
        "parse error position: {}",
        o.stderr
    );
    assert!(o.stderr.contains("nothing was changed"), "{}", o.stderr);
    assert_eq!(t.snapshot(), start);
    let o = t.run(&["uninstall", "docker"]);
    assert!(!o.ok && o.stderr.contains("not valid JSON"));
    assert_eq!(t.snapshot(), start);
}

#[test]
fn docker_uninstall_after_admin_edit_removes_only_our_entry() {
    let t = Tree::new();
    t.put(
        "/etc/docker/daemon.json",
        &fixture("docker/daemon-other-runtimes.json"),
    );
    t.install("docker");
    let edited = t
        .get("/etc/docker/daemon.json")
        .unwrap()
        .replace("\"10m\"", "\"50m\"");
    t.put("/etc/docker/daemon.json", edited.as_bytes());
    let o = t.uninstall("docker");
    assert!(o.stdout.contains("changed after install"), "{}", o.stdout);
    let want = text(&fixture("docker/daemon-other-runtimes.json")).replace("\"10m\"", "\"50m\"");
    assert_eq!(t.get("/etc/docker/daemon.json").unwrap(), want);
    assert!(
        t.exists("/etc/docker/daemon.json.gpu-quota.bak"),
        "backup kept when not restored"
    );
}

#[test]
fn docker_follows_a_symlinked_config_inside_the_root() {
    let t = Tree::new();
    t.put(
        "/srv/docker.json",
        &fixture("docker/daemon-no-runtimes.json"),
    );
    fs::create_dir_all(t.host("/etc/docker")).unwrap();
    std::os::unix::fs::symlink("/srv/docker.json", t.host("/etc/docker/daemon.json")).unwrap();
    let start = t.snapshot();
    t.install("docker");
    assert!(fs::symlink_metadata(t.host("/etc/docker/daemon.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        t.get("/srv/docker.json").unwrap().contains(RT),
        "the link's target (in the tree) was edited"
    );
    t.uninstall("docker");
    assert_eq!(t.snapshot(), start);
}
