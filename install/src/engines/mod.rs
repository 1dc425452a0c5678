//! Engine registration: `gpu-quota install ENGINE` / `gpu-quota uninstall ENGINE` for docker,
//! containerd, podman and CRI-O.
//!
//! Each engine module plans *pure* edits from a read-only view of the target tree
//! ([`fsutil::FsView`]); this module adds what is common to all of them and applies the plan:
//!
//! * install: a backup `<file>.gpu-quota.bak` before the first change of a pre-existing file
//!   (only when none exists), directories created for new files (recorded in a small state file
//!   so that uninstall removes exactly those), `--dry-run` diffs, atomic writes;
//! * uninstall: a modified file whose content is exactly what install made of its backup gets the
//!   backup back (byte-identical); otherwise only our entries are removed. Files install created
//!   and never changed since are deleted, and so are the directories it created (when empty).
//!
//! `--root DIR` makes every path relative to `DIR` and never signals a daemon.

use std::path::PathBuf;

use anyhow::Result;

/// Print a line, ignoring a closed stdout: `gpu-quota install ... | head` must never stop a
/// half-applied change.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

mod containerd;
mod crio;
mod docker;
pub mod dockerver;
pub mod doctor;
mod dropin;
pub mod fsutil;
mod glob;
pub mod gqconfig;
mod podman;
pub mod reload;
mod toolkit_doctor;
// after `say!`: macros are in scope for the modules declared below them
mod apply;
mod plan;
use apply::*;
// the shared vocabulary, the trait and the registry: children import these
// modules, never this parent, so the engines' imports run one way
pub mod check;
mod engine;
mod model;
mod registry;
pub use model::*;

use fsutil::RootFs;

/// `gpu-quota install ENGINE`
pub fn install(args: &EngineArgs) -> Result<()> {
    run(args, true)
}

/// `gpu-quota uninstall ENGINE`
pub fn uninstall(args: &EngineArgs) -> Result<()> {
    run(args, false)
}

/// `gpu-quota doctor`'s engine checks on this host.
pub fn doctor_checks(env_requests: bool) -> Vec<check::Check> {
    let fs = RootFs::new(PathBuf::from("/"));
    let program = |p: &str| core_which(p);
    doctor::checks(&check::Host {
        fs: &fs,
        program: &program,
        docker_version: dockerver::detect(None),
        env_requests,
    })
}

#[cfg(test)]
mod tests {
    use super::fsutil::{FsView, MemFs};
    use super::plan::{plan_install, plan_uninstall, Overlay};
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    /// Install then uninstall through the generic planners; returns the tree after each step.
    pub(crate) fn round_trip(kind: EngineKind, start: MemFs, rt: &str) -> (MemFs, MemFs) {
        let e = registry::engine_of(kind);
        let mut fs = start.clone();
        let p = plan_install(e.as_ref(), &fs, rt).unwrap();
        fs.apply(&p.changes);
        let installed = fs.clone();
        let again = plan_install(e.as_ref(), &fs, rt).unwrap();
        assert!(
            again.changes.is_empty(),
            "second install changes nothing: {:?}",
            again.changes
        );
        let u = plan_uninstall(e.as_ref(), &fs).unwrap();
        fs.apply(&u.changes);
        for d in &u.rmdirs {
            fs.dirs.remove(d);
        }
        for d in &p.mkdirs {
            assert!(
                u.rmdirs.contains(d),
                "created dir {} removed again",
                d.display()
            );
        }
        assert_eq!(
            fs.files, start.files,
            "uninstall restores every file byte for byte"
        );
        (installed, fs)
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("/usr/bin/x"), "\"/usr/bin/x\"");
        assert_eq!(toml_str("a\"b\\c"), "'a\"b\\c'");
    }

    #[test]
    fn overlay_hides_and_adds() {
        let base = MemFs::new().with("/a/x", "1").with("/a/y", "2");
        let mut files = BTreeMap::new();
        files.insert(PathBuf::from("/a/x"), None);
        files.insert(PathBuf::from("/a/z"), Some(b"3".to_vec()));
        let ov = Overlay { base: &base, files };
        assert_eq!(ov.list_dir(Path::new("/a")), vec!["y", "z"]);
        assert!(!ov.exists(Path::new("/a/x")));
        assert_eq!(ov.read(Path::new("/a/z")).unwrap(), Some(b"3".to_vec()));
    }

    #[test]
    fn install_records_created_dirs_and_backs_up() {
        let fs = MemFs::new().with("/etc/docker/daemon.json", "{\"debug\": true}\n");
        let p = plan_install(
            &docker::Docker::default(),
            &fs,
            "/usr/bin/gpu-quota-runtime",
        )
        .unwrap();
        assert!(p.mkdirs.is_empty());
        assert_eq!(p.changes[0].kind, ChangeKind::Backup);
        assert_eq!(
            p.changes[0].path,
            PathBuf::from("/etc/docker/daemon.json.gpu-quota.bak")
        );
        let fresh = MemFs::new();
        let p = plan_install(
            &docker::Docker::default(),
            &fresh,
            "/usr/bin/gpu-quota-runtime",
        )
        .unwrap();
        assert_eq!(p.mkdirs[0], PathBuf::from("/etc"));
        assert!(p.changes.iter().any(|c| c.kind == ChangeKind::State));
        assert!(!p.changes.iter().any(|c| c.kind == ChangeKind::Backup));
    }
}
