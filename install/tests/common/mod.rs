//! Shared by the `gpu-quota install|uninstall ENGINE` tests (install/tests/engines_*.rs):
//! a fake tree under a tempdir, the binary run with `--root`, whole-tree snapshots and the
//! install → reinstall → uninstall cycle.
#![allow(dead_code)]
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_gpu-quota");
pub const RT: &str = "/usr/local/bin/gpu-quota-runtime";

pub fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Everything under the root: `dir/` entries, and files with their bytes and mode.
pub type Snapshot = BTreeMap<PathBuf, Option<(Vec<u8>, u32)>>;

pub struct Tree {
    pub dir: tempfile::TempDir,
}

pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Tree {
    pub fn new() -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().unwrap(),
        };
        // The runtime exists in the tree, as after `make install`.
        t.put(RT, b"#!/bin/sh\nexec runc \"$@\"\n");
        fs::set_permissions(t.host(RT), fs::Permissions::from_mode(0o755)).unwrap();
        t
    }
    pub fn host(&self, target: &str) -> PathBuf {
        self.dir.path().join(target.trim_start_matches('/'))
    }
    pub fn put(&self, target: &str, bytes: &[u8]) {
        let h = self.host(target);
        fs::create_dir_all(h.parent().unwrap()).unwrap();
        fs::write(h, bytes).unwrap();
    }
    pub fn get(&self, target: &str) -> Option<String> {
        fs::read(self.host(target)).ok().map(|b| text(&b))
    }
    pub fn exists(&self, target: &str) -> bool {
        fs::symlink_metadata(self.host(target)).is_ok()
    }
    pub fn snapshot(&self) -> Snapshot {
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
    pub fn run(&self, args: &[&str]) -> Out {
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
    pub fn install(&self, engine: &str) -> Out {
        let o = self.run(&["install", engine, "--runtime-path", RT]);
        assert!(o.ok, "install {engine} failed:\n{}{}", o.stdout, o.stderr);
        o
    }
    pub fn uninstall(&self, engine: &str) -> Out {
        let o = self.run(&["uninstall", engine]);
        assert!(o.ok, "uninstall {engine} failed:\n{}{}", o.stdout, o.stderr);
        o
    }
}

/// install → install again (no-op) → uninstall gives the starting tree back, byte for byte;
/// dry runs of both change nothing. Returns the tree's state after install.
pub fn full_cycle(t: &Tree, engine: &str) -> Snapshot {
    full_cycle_with(t, engine, &[])
}

/// `full_cycle` with `extra` arguments on every install and uninstall.
pub fn full_cycle_with(t: &Tree, engine: &str, extra: &[&str]) -> Snapshot {
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
