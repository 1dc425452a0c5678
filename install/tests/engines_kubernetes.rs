//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
//!
//! This file: Kubernetes cluster mode (`--kubernetes`) for containerd and CRI-O.
mod common;
use common::*;
use std::process::Command;

// ---------------------------------------------------------------- Kubernetes cluster mode

const CLUSTER_KEYS: [&str; 2] = ["gpu-quota.io/vram", "gpu-quota.io/gpu"];

fn strings(a: &toml_edit::Item) -> Vec<String> {
    a.as_array()
        .unwrap_or_else(|| panic!("not an array: {a}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn containerd_kubernetes_fresh_tree_has_container_annotations_and_no_pod_annotations() {
    let t = Tree::new();
    full_cycle_with(&t, "containerd", &["--kubernetes"]);
    let o = t.run(&[
        "install",
        "containerd",
        "--kubernetes",
        "--runtime-path",
        RT,
    ]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains("cluster mode"), "{}", o.stdout);
    let d: toml_edit::DocumentMut = t
        .get("/etc/containerd/conf.d/gpu-quota.toml")
        .unwrap()
        .parse()
        .unwrap();
    let rts = &d["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"];
    let g = &rts["gpu-quota"];
    assert_eq!(strings(&g["container_annotations"]), CLUSTER_KEYS);
    assert!(g.get("pod_annotations").is_none(), "{g}");
    assert_eq!(g["options"]["BinaryName"].as_str(), Some(RT));
    assert_eq!(
        rts["runc"]["runtime_type"].as_str(),
        Some("io.containerd.runc.v2")
    );
}

#[test]
fn containerd_kubernetes_v2_in_place_and_mode_switches() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v2-comments.toml"),
    );
    full_cycle_with(&t, "containerd", &["--kubernetes"]);
    let k8s = [
        "install",
        "containerd",
        "--kubernetes",
        "--runtime-path",
        RT,
    ];
    assert!(t.run(&k8s).ok);
    let cluster = text(&fixture("containerd/v2-comments.kubernetes.toml"));
    assert_eq!(t.get("/etc/containerd/config.toml").unwrap(), cluster);
    // node mode again: pod_annotations back, container_annotations gone, laid out as before
    t.install("containerd");
    assert_eq!(
        t.get("/etc/containerd/config.toml").unwrap(),
        text(&fixture("containerd/v2-comments.installed.toml"))
    );
    // and cluster mode once more
    assert!(t.run(&k8s).ok);
    assert_eq!(t.get("/etc/containerd/config.toml").unwrap(), cluster);
    let o = t.run(&["uninstall", "containerd", "--kubernetes"]);
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(
        t.get("/etc/containerd/config.toml").unwrap(),
        text(&fixture("containerd/v2-comments.toml")),
        "uninstall restores the original"
    );
}

#[test]
fn containerd_kubernetes_v3_drop_in() {
    let t = Tree::new();
    t.put(
        "/etc/containerd/config.toml",
        &fixture("containerd/v3.toml"),
    );
    full_cycle_with(&t, "containerd", &["--kubernetes"]);
    assert!(
        t.run(&[
            "install",
            "containerd",
            "--kubernetes",
            "--runtime-path",
            RT
        ])
        .ok
    );
    let d: toml_edit::DocumentMut = t
        .get("/etc/containerd/conf.d/gpu-quota.toml")
        .unwrap()
        .parse()
        .unwrap();
    let g = &d["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["gpu-quota"];
    assert_eq!(strings(&g["container_annotations"]), CLUSTER_KEYS);
    assert!(g.get("pod_annotations").is_none(), "{g}");
}

#[test]
fn containerd_kubernetes_real_parser() {
    if Command::new("containerd")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("containerd not installed: skipped");
        return;
    }
    for fixture_name in ["containerd/v2-debian.toml", "containerd/v2-no-cri.toml"] {
        let t = Tree::new();
        t.put("/etc/containerd/config.toml", &fixture(fixture_name));
        assert!(
            t.run(&[
                "install",
                "containerd",
                "--kubernetes",
                "--runtime-path",
                RT
            ])
            .ok
        );
        let main = t.get("/etc/containerd/config.toml").unwrap().replace(
            "\"/etc/containerd/conf.d/",
            &format!("\"{}/", t.host("/etc/containerd/conf.d").display()),
        );
        t.put("/etc/containerd/config.toml", main.as_bytes());
        let o = Command::new("containerd")
            .arg("-c")
            .arg(t.host("/etc/containerd/config.toml"))
            .args(["config", "dump"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{fixture_name}: {}", text(&o.stderr));
        let dump = text(&o.stdout);
        // the gpu-quota runtime's own lines, up to its next table
        let start = dump
            .find("containerd.runtimes.gpu-quota]")
            .unwrap_or_else(|| panic!("{fixture_name}: {dump}"));
        let section: String = dump[start..]
            .lines()
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with('['))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            section
                .contains("container_annotations = [\"gpu-quota.io/vram\", \"gpu-quota.io/gpu\"]"),
            "{fixture_name}: {section}"
        );
        assert!(
            section.contains("pod_annotations = []"),
            "{fixture_name}: no pod annotation reaches a container: {section}"
        );
    }
}

#[test]
fn crio_kubernetes_drop_in() {
    let t = Tree::new();
    t.put(
        "/etc/crio/crio.conf.d/10-crio.conf",
        &fixture("crio/10-crio.conf"),
    );
    full_cycle_with(&t, "crio", &["--kubernetes"]);
    let o = t.run(&["install", "crio", "--kubernetes", "--runtime-path", RT]);
    assert!(
        o.ok && o.stdout.contains("cluster mode"),
        "{}{}",
        o.stdout,
        o.stderr
    );
    let text = t.get("/etc/crio/crio.conf.d/99-gpu-quota.conf").unwrap();
    assert!(text.contains("install crio --kubernetes"), "{text}");
    assert!(
        text.contains("pod annotations reach the\n# pod's infra container alone"),
        "{text}"
    );
    let d: toml_edit::DocumentMut = text.parse().unwrap();
    let h = &d["crio"]["runtime"]["runtimes"]["gpu-quota"];
    assert_eq!(h["runtime_path"].as_str(), Some(RT));
    assert_eq!(h["runtime_root"].as_str(), Some("/run/gpu-quota-runc"));
    // the device plugin counts this root as Kubernetes' own
    assert!(h.get("allowed_annotations").is_none());
}

#[test]
fn kubernetes_flag_is_only_for_cri_engines() {
    let t = Tree::new();
    for engine in ["docker", "podman"] {
        let start = t.snapshot();
        let o = t.run(&["install", engine, "--kubernetes", "--runtime-path", RT]);
        assert!(!o.ok, "{engine}");
        assert!(
            o.stderr
                .contains("--kubernetes is for the Kubernetes node engines"),
            "{}",
            o.stderr
        );
        assert_eq!(t.snapshot(), start, "nothing written");
    }
}
