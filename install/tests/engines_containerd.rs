//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
//!
//! This file: containerd (config.toml v2 and v3, drop-ins, the real parser).
mod common;
use common::*;
use std::process::Command;

// ---------------------------------------------------------------- containerd

#[test]
fn containerd_fresh_tree() {
    let t = Tree::new();
    let dry = t.run(&["install", "containerd", "--runtime-path", RT, "--dry-run"]);
    assert!(
        dry.stdout
            .contains("does not exist: creating a minimal one"),
        "{}",
        dry.stdout
    );
    assert!(dry.stdout.contains("--- /dev/null"), "{}", dry.stdout);
    full_cycle(&t, "containerd");
    let o = t.install("containerd");
    assert!(
        o.stdout.contains("systemctl restart containerd"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(&format!("ctr run --runc-binary {RT}")),
        "{}",
        o.stdout
    );
    let main = t.get("/etc/containerd/config.toml").unwrap();
    let keys: Vec<&str> = main.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        keys,
        [
            "version = 2",
            "imports = [\"/etc/containerd/conf.d/gpu-quota.toml\"]"
        ]
    );
    let d: toml_edit::DocumentMut = t
        .get("/etc/containerd/conf.d/gpu-quota.toml")
        .unwrap()
        .parse()
        .unwrap();
    let g = &d["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpu-quota"];
    assert_eq!(g["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
    assert_eq!(g["options"]["BinaryName"].as_str(), Some(RT));
}

#[test]
fn containerd_v2_with_comments_is_edited_in_place() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v2-comments.toml"),
    );
    full_cycle(&t, "containerd");
    let o = t.install("containerd");
    assert!(
        o.stdout.contains("defines the CRI plugin section"),
        "{}",
        o.stdout
    );
    let out = t.get("/etc/containerd/config.toml").unwrap();
    assert_eq!(out, text(&fixture("containerd/v2-comments.installed.toml")));
    assert!(
        !t.exists("/etc/containerd/conf.d"),
        "no drop-in: containerd 1.x would drop the CRI section"
    );
}

#[test]
fn containerd_v2_debian_stock_config() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v2-debian.toml"),
    );
    full_cycle(&t, "containerd");
}

#[test]
fn containerd_v2_without_cri_section_uses_drop_in() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v2-no-cri.toml"),
    );
    full_cycle(&t, "containerd");
    t.install("containerd");
    let main = t.get("/etc/containerd/config.toml").unwrap();
    assert_eq!(
        main,
        text(&fixture("containerd/v2-no-cri.toml"))
            + "imports = [\"/etc/containerd/conf.d/gpu-quota.toml\"]\n"
    );
    let d: toml_edit::DocumentMut = t
        .get("/etc/containerd/conf.d/gpu-quota.toml")
        .unwrap()
        .parse()
        .unwrap();
    let rts = &d["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"];
    assert_eq!(
        rts["runc"]["runtime_type"].as_str(),
        Some("io.containerd.runc.v2"),
        "default runtime kept"
    );
}

#[test]
fn containerd_v3_drop_in_and_import() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v3.toml"),
    );
    t.put(
        "/etc/containerd/extra.toml",
        &fixture("containerd/v3-extra.toml"),
    );
    full_cycle(&t, "containerd");
    t.install("containerd");
    let main = t.get("/etc/containerd/config.toml").unwrap();
    assert_eq!(
        main,
        text(&fixture("containerd/v3.toml")).replace(
            "imports = ['/etc/containerd/extra.toml']",
            "imports = ['/etc/containerd/extra.toml', \"/etc/containerd/conf.d/gpu-quota.toml\"]"
        )
    );
    assert_eq!(
        t.get("/etc/containerd/extra.toml").unwrap(),
        text(&fixture("containerd/v3-extra.toml"))
    );
    let d: toml_edit::DocumentMut = t
        .get("/etc/containerd/conf.d/gpu-quota.toml")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(d["version"].as_integer(), Some(3));
    let g = &d["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["gpu-quota"];
    assert_eq!(g["options"]["BinaryName"].as_str(), Some(RT));
    assert_eq!(
        g["options"]["SystemdCgroup"].as_bool(),
        Some(true),
        "runc's cgroup driver copied"
    );
    let ann: Vec<&str> = g["pod_annotations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        ann,
        [
            "vram",
            "gpu",
            "gpus",
            "sm",
            "sm-procs",
            "vram-limit",
            "vram-priority",
            "gpu-quota.io/*"
        ]
    );
}

#[test]
fn containerd_refuses_bad_toml_and_writes_nothing() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/bad.toml"),
    );
    let start = t.snapshot();
    let o = t.run(&["install", "containerd", "--runtime-path", RT]);
    assert!(!o.ok);
    let path = t.host("/etc/containerd/config.toml").display().to_string();
    assert!(
        o.stderr.contains(&format!("{path}: not valid TOML")),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("line 2"), "{}", o.stderr);
    assert_eq!(t.snapshot(), start);
}

/// The configs we write, read by the real containerd (1.x here) when it is installed:
/// `containerd config dump` merges them the way the daemon does, without starting it.
#[test]
fn containerd_real_parser_accepts_our_configs() {
    if Command::new("containerd")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("containerd not installed: skipped");
        return;
    }
    for (fixture_name, dropin) in [
        ("containerd/v2-debian.toml", false),
        ("containerd/v2-no-cri.toml", true),
        ("containerd/v2-comments.toml", false),
    ] {
        let t = Tree::new();
        t.put("/etc/containerd/config.toml", &fixture(fixture_name));
        t.install("containerd");
        // Point the import at the drop-in in the tree (it names /etc/... on the target system).
        let main = t.get("/etc/containerd/config.toml").unwrap().replace(
            "\"/etc/containerd/conf.d/",
            &format!("\"{}/", t.host("/etc/containerd/conf.d").display()),
        );
        assert_eq!(main.contains("imports"), dropin, "{fixture_name}");
        t.put("/etc/containerd/config.toml", main.as_bytes());
        let o = Command::new("containerd")
            .arg("-c")
            .arg(t.host("/etc/containerd/config.toml"))
            .args(["config", "dump"])
            .output()
            .unwrap();
        let dump = text(&o.stdout);
        assert!(o.status.success(), "{fixture_name}: {}", text(&o.stderr));
        assert!(
            dump.contains("containerd.runtimes.gpu-quota]"),
            "{fixture_name}: {dump}"
        );
        assert!(
            dump.contains(&format!("BinaryName = \"{RT}\"")),
            "{fixture_name}"
        );
        assert!(
            dump.contains(
                "pod_annotations = [\"vram\", \"gpu\", \"gpus\", \"sm\", \"sm-procs\", \"vram-limit\", \"vram-priority\", \"gpu-quota.io/*\"]"
            ),
            "{fixture_name}"
        );
        assert!(
            dump.contains("containerd.runtimes.runc]"),
            "{fixture_name}: default runtime runc still there"
        );
        for line in text(&fixture(fixture_name)).lines() {
            // Settings of the original config survive the merge.
            for key in [
                "bin_dir",
                "sandbox_image",
                "SystemdCgroup",
                "config_path",
                "oom_score",
            ] {
                if line.trim_start().starts_with(key) {
                    let setting: String =
                        line.split('#').next().unwrap().split_whitespace().collect();
                    let found = dump
                        .lines()
                        .any(|l| l.split_whitespace().collect::<String>() == setting);
                    assert!(found, "{fixture_name}: {setting} survives");
                }
            }
        }
    }
}
