//! `gpu-quota install|uninstall ENGINE` end to end, through the real binary, always with
//! `--root <tempdir>`: fixtures are copied into a fake tree, and every test checks the whole
//! tree (files, bytes, modes, directories) before and after.
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-quota");
const RT: &str = "/usr/local/bin/gpu-quota-runtime";

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Everything under the root: `dir/` entries, and files with their bytes and mode.
type Snapshot = BTreeMap<PathBuf, Option<(Vec<u8>, u32)>>;

struct Tree {
    dir: tempfile::TempDir,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Tree {
    fn new() -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().unwrap(),
        };
        // The runtime exists in the tree, as after `make install`.
        t.put(RT, b"#!/bin/sh\nexec runc \"$@\"\n");
        fs::set_permissions(t.host(RT), fs::Permissions::from_mode(0o755)).unwrap();
        t
    }
    fn host(&self, target: &str) -> PathBuf {
        self.dir.path().join(target.trim_start_matches('/'))
    }
    fn put(&self, target: &str, bytes: &[u8]) {
        let h = self.host(target);
        fs::create_dir_all(h.parent().unwrap()).unwrap();
        fs::write(h, bytes).unwrap();
    }
    fn get(&self, target: &str) -> Option<String> {
        fs::read(self.host(target)).ok().map(|b| text(&b))
    }
    fn exists(&self, target: &str) -> bool {
        fs::symlink_metadata(self.host(target)).is_ok()
    }
    fn snapshot(&self) -> Snapshot {
        fn walk(root: &Path, d: &Path, out: &mut Snapshot) {
            for e in fs::read_dir(d).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                let m = fs::symlink_metadata(&p).unwrap();
                if m.is_dir() {
                    out.insert(rel, None);
                    walk(root, &p, out);
                } else if m.file_type().is_symlink() {
                    let l = fs::read_link(&p).unwrap();
                    out.insert(
                        rel,
                        Some((l.as_os_str().as_encoded_bytes().to_vec(), 0o120000)),
                    );
                } else {
                    out.insert(
                        rel,
                        Some((fs::read(&p).unwrap(), m.permissions().mode() & 0o7777)),
                    );
                }
            }
        }
        let mut s = Snapshot::new();
        walk(self.dir.path(), self.dir.path(), &mut s);
        s
    }
    fn run(&self, args: &[&str]) -> Out {
        let o = Command::new(BIN)
            .args(args)
            .arg("--root")
            .arg(self.dir.path())
            .output()
            .unwrap();
        Out {
            ok: o.status.success(),
            stdout: text(&o.stdout),
            stderr: text(&o.stderr),
        }
    }
    fn install(&self, engine: &str) -> Out {
        let o = self.run(&["install", engine, "--runtime-path", RT]);
        assert!(o.ok, "install {engine} failed:\n{}{}", o.stdout, o.stderr);
        o
    }
    fn uninstall(&self, engine: &str) -> Out {
        let o = self.run(&["uninstall", engine]);
        assert!(o.ok, "uninstall {engine} failed:\n{}{}", o.stdout, o.stderr);
        o
    }
}

/// install → install again (no-op) → uninstall gives the starting tree back, byte for byte;
/// dry runs of both change nothing. Returns the tree's state after install.
fn full_cycle(t: &Tree, engine: &str) -> Snapshot {
    full_cycle_with(t, engine, &[])
}

/// `full_cycle` with `extra` arguments on every install and uninstall.
fn full_cycle_with(t: &Tree, engine: &str, extra: &[&str]) -> Snapshot {
    let start = t.snapshot();
    let with =
        |a: &[&str]| -> Vec<String> { a.iter().chain(extra).map(|s| s.to_string()).collect() };
    let run = |a: &[&str]| {
        let v = with(a);
        t.run(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let install = || {
        let o = run(&["install", engine, "--runtime-path", RT]);
        assert!(o.ok, "install {engine} failed:\n{}{}", o.stdout, o.stderr);
        o
    };
    let uninstall = || {
        let o = run(&["uninstall", engine]);
        assert!(o.ok, "uninstall {engine} failed:\n{}{}", o.stdout, o.stderr);
        o
    };

    let dry = run(&["install", engine, "--runtime-path", RT, "--dry-run"]);
    assert!(dry.ok, "{}", dry.stderr);
    assert!(dry.stdout.contains("nothing was changed"), "{}", dry.stdout);
    assert!(
        dry.stdout.contains("\n+++ "),
        "dry run shows a diff:\n{}",
        dry.stdout
    );
    assert_eq!(t.snapshot(), start, "--dry-run wrote nothing");

    install();
    let installed = t.snapshot();
    assert_ne!(installed, start);

    let again = install();
    assert!(
        again.stdout.contains("already installed"),
        "{}",
        again.stdout
    );
    assert_eq!(t.snapshot(), installed, "second install changed nothing");

    let dry = run(&["uninstall", engine, "--dry-run"]);
    assert!(
        dry.ok && dry.stdout.contains("\n--- "),
        "{}{}",
        dry.stdout,
        dry.stderr
    );
    assert_eq!(t.snapshot(), installed, "uninstall --dry-run wrote nothing");

    uninstall();
    assert_eq!(
        t.snapshot(),
        start,
        "uninstall restored the tree byte for byte"
    );
    let again = uninstall();
    assert!(again.stdout.contains("not installed"), "{}", again.stdout);
    assert_eq!(t.snapshot(), start);
    installed
}

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
    assert_eq!(ann, ["vram", "gpu", "gpus", "gpu-quota.io/*"]);
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
            dump.contains("pod_annotations = [\"vram\", \"gpu\", \"gpus\", \"gpu-quota.io/*\"]"),
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
