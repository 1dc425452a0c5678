//! containerd: a CRI runtime handler `gpu-quota` (`runtime_type = "io.containerd.runc.v2"`,
//! `options.BinaryName` = gpu-quota-runtime, the request keys in `pod_annotations`).
//!
//! Cluster mode (`--kubernetes`): the handler lists the device plugin's keys in
//! `container_annotations` (the kubelet passes the plugin's Allocate answer as container
//! annotations) and has *no* `pod_annotations`, so a pod author cannot grant a slice by
//! annotating the pod; the scheduler's count of `gpu-quota.io/vram` is the only way in.
//!
//! * Config version 3 (containerd 2.x, plugin `io.containerd.cri.v1.runtime`): a drop-in
//!   `/etc/containerd/conf.d/gpu-quota.toml`, listed in `imports` of the main config.
//!   containerd 2.x merges imported plugin sections key by key.
//! * Config version 2 (containerd 1.x, plugin `io.containerd.grpc.v1.cri`): containerd 1.x
//!   does *not* merge imports: the last file that mentions the CRI plugin replaces its whole
//!   section (containerd issues #5837, #7982; fixed only in 2.0). And as soon as any runtime is
//!   listed, the built-in `runc` runtime (the default) is gone. So:
//!   - when no file defines the CRI section, the same drop-in (version 2) is used, and it
//!     lists `runc` too so the default runtime survives;
//!   - when one does (Debian's stock config does), the runtime is added to that file in place
//!     (the last one that defines it), again with `runc` when no runtime was listed.
//! * A missing main config is created with `version = 2` and the import only.
//!
//! Every edit goes through toml_edit, so comments and layout of existing files are kept.
//! Tables we add carry a comment naming us; uninstall removes them, the import entry and the
//! drop-in.

mod edit;
mod imports;
use edit::*;
use imports::*;

use std::path::{Path, PathBuf};

use toml_edit::{value, Array, DocumentMut, Item, Table};

use super::engine::Engine;
use super::fsutil::{backup_path, normalize, FsView};
use super::model::{
    Ctx, EngineError, EngineKind, EnginePlan, FileChange, ANNOTATION_PATTERNS, CLUSTER_ANNOTATIONS,
    RUNTIME_NAME,
};

pub const MAIN: &str = "/etc/containerd/config.toml";
pub const DROPIN: &str = "/etc/containerd/conf.d/gpu-quota.toml";
const CRI_V2: &str = "io.containerd.grpc.v1.cri";
const CRI_V3: &str = "io.containerd.cri.v1.runtime";
const RUNC_V2: &str = "io.containerd.runc.v2";
/// Marks tables we added to a file we do not own.
const MARK: &str = "gpu-quota install containerd";

#[derive(Debug, Clone, Copy, Default)]
pub struct Containerd {
    /// Cluster mode: `container_annotations` for the device plugin, no `pod_annotations`.
    pub kubernetes: bool,
}

fn plugin_for(version: i64) -> &'static str {
    if version >= 3 {
        CRI_V3
    } else {
        CRI_V2
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Result<DocumentMut, EngineError> {
    let text = std::str::from_utf8(bytes).map_err(|e| EngineError::bad_toml(path, e))?;
    text.parse::<DocumentMut>()
        .map_err(|e| EngineError::bad_toml(path, e))
}

/// The main config's `version`: `Ok(None)` for a file without any key (comments only).
fn version_of(doc: &DocumentMut, path: &Path) -> Result<Option<i64>, EngineError> {
    match doc.get("version") {
        Some(item) => match item.as_integer() {
            Some(v @ (2 | 3)) => Ok(Some(v)),
            Some(v) => Err(EngineError::invalid(
                path,
                format!("config version {v} is not supported"),
                "gpu-quota supports containerd config version 2 (containerd 1.x) and 3 (containerd 2.x)",
            )),
            None => Err(EngineError::invalid(path, "`version` is not an integer", "set `version = 2` or `version = 3`")),
        },
        None if doc.as_table().is_empty() => Ok(None),
        None => Err(EngineError::invalid(
            path,
            "no `version` key: this is a version 1 config (plugin \"cri\"), which gpu-quota does not edit",
            "convert it: `containerd config migrate` (containerd 2.x), or add `version = 2` and rename \
             [plugins.cri] to [plugins.\"io.containerd.grpc.v1.cri\"] (containerd 1.x); then run the command again",
        )),
    }
}

use super::glob::{has_meta, path_match as component_match};

struct Loaded {
    path: PathBuf,
    bytes: Vec<u8>,
    doc: DocumentMut,
}

fn load(fs: &dyn FsView, path: &Path) -> Result<Option<Loaded>, EngineError> {
    Ok(match fs.read(path)? {
        None => None,
        Some(bytes) => Some(Loaded {
            path: path.to_path_buf(),
            doc: parse(path, &bytes)?,
            bytes,
        }),
    })
}

fn change_if(l: &Loaded) -> Option<FileChange> {
    let after = l.doc.to_string().into_bytes();
    (after != l.bytes).then(|| FileChange {
        path: l.path.clone(),
        before: Some(l.bytes.clone()),
        after: Some(after),
        kind: super::model::ChangeKind::Config,
    })
}

/// The installed runtime entry's `options.BinaryName` (key "BinaryName") or its
/// `pod_annotations` joined by "," (key "pod_annotations"), from the files containerd reads.
pub fn installed_entry(fs: &dyn FsView, key: &str) -> Option<String> {
    let mut files = vec![PathBuf::from(DROPIN), PathBuf::from(MAIN)];
    if let Ok(Some(m)) = load(fs, Path::new(MAIN)) {
        files.extend(resolve_imports(
            fs,
            &imports_of(&m.doc, Path::new(MAIN)).unwrap_or_default(),
        ));
    }
    for p in files {
        let Ok(Some(l)) = load(fs, &p) else { continue };
        for plugin in [CRI_V2, CRI_V3] {
            let Some(entry) = runtimes_table(&l.doc, plugin)
                .and_then(|r| r.get(RUNTIME_NAME))
                .and_then(|r| r.as_table_like())
            else {
                continue;
            };
            let v = if key == "BinaryName" {
                entry
                    .get("options")
                    .and_then(|o| o.as_table_like())
                    .and_then(|o| o.get("BinaryName"))
                    .and_then(|b| b.as_str())
                    .map(String::from)
            } else {
                entry.get(key).and_then(|a| a.as_array()).map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                })
            };
            if v.is_some() {
                return v;
            }
        }
    }
    None
}

/// Whether containerd's CRI applies CDI devices (what a DRA driver's prepared
/// claims arrive as): `enable_cdi` in the CRI plugin table of the
/// main config or its imports, else containerd's default for the config
/// version (off in 1.x, `version = 2`; on in 2.x, `version = 3`). `None`
/// without a readable main config.
pub fn cdi_enabled(fs: &dyn FsView) -> Option<bool> {
    let m = load(fs, Path::new(MAIN)).ok()??;
    let version = version_of(&m.doc, Path::new(MAIN))
        .ok()
        .flatten()
        .unwrap_or(2);
    let mut files = vec![PathBuf::from(MAIN), PathBuf::from(DROPIN)];
    files.extend(resolve_imports(
        fs,
        &imports_of(&m.doc, Path::new(MAIN)).unwrap_or_default(),
    ));
    // containerd merges imports over the main file: the last file that sets it wins
    let mut set = None;
    for p in files {
        let Ok(Some(l)) = load(fs, &p) else { continue };
        for plugin in [CRI_V2, CRI_V3] {
            if let Some(v) = edit::cri_table(&l.doc, plugin)
                .and_then(|t| t.get("enable_cdi"))
                .and_then(|v| v.as_bool())
            {
                set = Some(v);
            }
        }
    }
    Some(set.unwrap_or(version >= 3))
}

impl Engine for Containerd {
    fn kind(&self) -> EngineKind {
        EngineKind::Containerd
    }

    fn env_requests(&self) -> super::model::EnvRequests {
        super::model::EnvRequests::Set(false, "containerd passes the request keys listed in pod_annotations: requests come from annotations only.".into())
    }

    fn plan_install(&self, fs: &dyn FsView, runtime: &str) -> Result<EnginePlan, EngineError> {
        let main_path = Path::new(MAIN);
        let dropin_path = Path::new(DROPIN);
        let mut plan = EnginePlan::default();
        let dropin_before = fs.read(dropin_path)?;

        let Some(mut main) = load(fs, main_path)? else {
            plan.notes.push(format!(
                "{MAIN} does not exist: creating a minimal one (version = 2, containerd's defaults) that imports {DROPIN}"
            ));
            plan.changes.push(FileChange::config(
                DROPIN,
                dropin_before,
                Some(dropin_text(2, runtime, None, true, self.kubernetes).into_bytes()),
            ));
            plan.changes.push(FileChange::config(
                MAIN,
                None,
                Some(fresh_main().into_bytes()),
            ));
            return Ok(plan);
        };
        let version = match version_of(&main.doc, main_path)? {
            Some(v) => v,
            None => {
                main.doc.insert("version", value(2i64));
                2
            }
        };
        let imports = imports_of(&main.doc, main_path)?;
        let covered = imports.iter().any(|i| import_matches(i, DROPIN));
        let plugin = plugin_for(version);
        let mut others = Vec::new();
        for p in resolve_imports(fs, &imports) {
            if p != dropin_path && p != main_path {
                if let Some(l) = load(fs, &p)? {
                    others.push(l);
                }
            }
        }

        // Where containerd's effective CRI section comes from (v2: the last file defining it).
        let definers: Vec<usize> = std::iter::once(&main)
            .chain(others.iter())
            .enumerate()
            .filter(|(_, l)| cri_table(&l.doc, plugin).is_some())
            .map(|(i, _)| i)
            .collect();

        if version == 3 || definers.is_empty() {
            // Drop-in. v3: copy the default runtime's options from the files that set them.
            let copied = if version == 3 {
                std::iter::once(&main)
                    .chain(others.iter())
                    .filter_map(|l| default_runtime_options(&l.doc, plugin))
                    .next_back()
            } else {
                None
            };
            let text = dropin_text(
                version,
                runtime,
                copied.as_ref(),
                version == 2,
                self.kubernetes,
            );
            plan.changes.push(FileChange::config(
                DROPIN,
                dropin_before,
                Some(text.into_bytes()),
            ));
            if !covered {
                add_import(&mut main.doc);
            }
            plan.changes.extend(change_if(&main));
            return Ok(plan);
        }

        // v2 with a CRI section somewhere: add the runtime to the file that defines it last.
        let target = *definers.last().unwrap();
        if target == 0 {
            add_in_place(&mut main.doc, plugin, runtime, main_path, self.kubernetes)?;
        } else {
            let l = &mut others[target - 1];
            add_in_place(&mut l.doc, plugin, runtime, &l.path, self.kubernetes)?;
        }
        let target_path = if target == 0 {
            main_path.to_path_buf()
        } else {
            others[target - 1].path.clone()
        };
        plan.notes.push(format!(
            "config version 2 (containerd 1.x): {} defines the CRI plugin section, and containerd 1.x would \
             replace that whole section with an imported drop-in; so the runtime goes into {} itself",
            target_path.display(),
            target_path.display()
        ));
        if dropin_before.is_some() {
            // An earlier install used the drop-in; it would now wipe the CRI section.
            let backup = fs.read(&backup_path(main_path))?;
            let keep = match backup {
                Some(b) => parse(main_path, &b)
                    .map(|d| d.get("imports").is_some())
                    .unwrap_or(true),
                None => false,
            };
            remove_import(&mut main.doc, keep);
        }
        if target != 0 {
            plan.changes.extend(change_if(&others[target - 1]));
        }
        plan.changes.extend(change_if(&main));
        if let Some(b) = dropin_before {
            plan.changes.push(FileChange::config(DROPIN, Some(b), None));
        }
        Ok(plan)
    }

    fn plan_uninstall(&self, fs: &dyn FsView) -> Result<EnginePlan, EngineError> {
        let main_path = Path::new(MAIN);
        let mut plan = EnginePlan::default();
        if let Some(mut main) = load(fs, main_path)? {
            let imports = imports_of(&main.doc, main_path)?;
            let backup = fs.read(&backup_path(main_path))?;
            let keep_key = match backup {
                Some(b) => parse(main_path, &b)
                    .map(|d| d.get("imports").is_some())
                    .unwrap_or(true),
                None => false,
            };
            remove_import(&mut main.doc, keep_key);
            remove_in_place(&mut main.doc);
            plan.changes.extend(change_if(&main));
            for p in resolve_imports(fs, &imports) {
                if p == Path::new(DROPIN) || p == main_path {
                    continue;
                }
                if let Some(mut l) = load(fs, &p)? {
                    if remove_in_place(&mut l.doc) {
                        plan.changes.extend(change_if(&l));
                    }
                }
            }
        }
        if let Some(b) = fs.read(Path::new(DROPIN))? {
            plan.changes.push(FileChange::config(DROPIN, Some(b), None));
        }
        Ok(plan)
    }

    fn installed_runtime(&self, fs: &dyn FsView) -> Result<Option<String>, EngineError> {
        Ok(installed_entry(fs, "BinaryName"))
    }

    fn finish(&self, ctx: &Ctx, installed: bool) -> Vec<String> {
        let mut out = vec![
            "  containerd does not reload its configuration (not even on SIGHUP); restart it to apply:".to_string(),
            "      sudo systemctl restart containerd      (running containers keep running)".to_string(),
        ];
        if ctx.root_given {
            out.insert(
                0,
                "  --root given: nothing restarted; on the target system:".into(),
            );
        }
        if installed {
            out.push(
                "verify:  sudo containerd config dump | grep -A9 'runtimes.gpu-quota]'".into(),
            );
            out.push(if self.kubernetes {
                "k8s:     cluster mode: requests only from the device plugin's container annotations; kubectl apply -f deploy/kubernetes/ (docs/kubernetes.md)".into()
            } else {
                "k8s:     RuntimeClass handler \"gpu-quota\" + pod annotation gpu-quota.io/vram: 8g (docs/install.md)".into()
            });
            out.push(format!(
                "ctr:     ctr run --runc-binary {} --annotation vram=8g IMAGE ID   (needs no install)",
                ctx.runtime
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::fsutil::MemFs;
    use crate::engines::plan::{plan_install, plan_uninstall};
    use crate::engines::tests::round_trip;

    const RT: &str = "/usr/local/bin/gpu-quota-runtime";
    const DEBIAN: &str = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".cni]\n      bin_dir = \"/usr/lib/cni\"\n      conf_dir = \"/etc/cni/net.d\"\n  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = \"/var/lib/containerd/opt\"\n";

    fn installed(fs: &MemFs) -> MemFs {
        let mut f = fs.clone();
        let p = plan_install(&Containerd::default(), &f, RT).unwrap();
        f.apply(&p.changes);
        f
    }

    fn doc(s: &str) -> DocumentMut {
        s.parse().unwrap()
    }

    #[test]
    fn globs() {
        assert!(import_matches("/etc/containerd/conf.d/*.toml", DROPIN));
        assert!(import_matches("conf.d/*.toml", DROPIN));
        assert!(import_matches(DROPIN, DROPIN));
        assert!(import_matches(
            "/etc/containerd/conf.d/[a-h]pu-quota.to?l",
            DROPIN
        ));
        assert!(!import_matches("/etc/containerd/conf.d/[^g]*.toml", DROPIN));
        assert!(!import_matches("/etc/containerd/*.toml", DROPIN));
        assert!(!import_matches("/etc/containerd/conf.d/*.conf", DROPIN));
    }

    #[test]
    fn fresh_tree() {
        let f = installed(&MemFs::new());
        assert_eq!(f.get(MAIN).unwrap(), fresh_main());
        let d = doc(&f.get(DROPIN).unwrap());
        assert_eq!(d["version"].as_integer(), Some(2));
        let rt = &d["plugins"][CRI_V2]["containerd"]["runtimes"];
        assert_eq!(rt["gpu-quota"]["runtime_type"].as_str(), Some(RUNC_V2));
        assert_eq!(rt["gpu-quota"]["options"]["BinaryName"].as_str(), Some(RT));
        assert_eq!(
            rt["runc"]["runtime_type"].as_str(),
            Some(RUNC_V2),
            "default runtime kept"
        );
        let ann: Vec<_> = rt["gpu-quota"]["pod_annotations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
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
        round_trip(EngineKind::Containerd, MemFs::new(), RT);
    }

    #[test]
    fn v2_with_cri_section_edits_in_place() {
        let fs = MemFs::new().with(MAIN, DEBIAN);
        let f = installed(&fs);
        assert!(
            f.get(DROPIN).is_none(),
            "no drop-in: it would wipe the CRI section on containerd 1.x"
        );
        let out = f.get(MAIN).unwrap();
        assert!(
            out.starts_with(
                DEBIAN
                    .split("  [plugins.\"io.containerd.internal")
                    .next()
                    .unwrap()
            ),
            "{out}"
        );
        let d = doc(&out);
        let cri = &d["plugins"][CRI_V2];
        assert_eq!(cri["cni"]["bin_dir"].as_str(), Some("/usr/lib/cni"));
        assert_eq!(
            cri["containerd"]["runtimes"]["gpu-quota"]["options"]["BinaryName"].as_str(),
            Some(RT)
        );
        assert_eq!(
            cri["containerd"]["runtimes"]["runc"]["runtime_type"].as_str(),
            Some(RUNC_V2)
        );
        assert!(d.get("imports").is_none());
        round_trip(EngineKind::Containerd, fs, RT);
    }

    #[test]
    fn v2_copies_runc_options_and_keeps_comments() {
        let src = "# my containerd\nversion = 2\n\n# CRI\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\" # default\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n\n# registry\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
        let fs = MemFs::new().with(MAIN, src);
        let f = installed(&fs);
        let out = f.get(MAIN).unwrap();
        let d = doc(&out);
        let rts = &d["plugins"][CRI_V2]["containerd"]["runtimes"];
        assert_eq!(
            rts["gpu-quota"]["options"]["SystemdCgroup"].as_bool(),
            Some(true)
        );
        assert!(
            !rts["runc"]
                .as_table()
                .unwrap()
                .decor()
                .prefix()
                .unwrap()
                .as_str()
                .unwrap()
                .contains(MARK),
            "user's runc untouched"
        );
        for line in src.lines() {
            assert!(out.contains(line), "kept {line:?}");
        }
        // Our tables come right after the runtimes they join, before the registry section.
        assert!(
            out.find("runtimes.gpu-quota]").unwrap() < out.find("# registry").unwrap(),
            "{out}"
        );
        round_trip(EngineKind::Containerd, fs, RT);
    }

    #[test]
    fn v3_uses_drop_in_and_import() {
        let src = "version = 3\nroot = '/var/lib/containerd'\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
        let fs = MemFs::new().with(MAIN, src);
        let f = installed(&fs);
        let main = f.get(MAIN).unwrap();
        assert_eq!(main, format!("version = 3\nroot = '/var/lib/containerd'\nimports = [\"{DROPIN}\"]\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n"));
        let d = doc(&f.get(DROPIN).unwrap());
        assert_eq!(d["version"].as_integer(), Some(3));
        let g = &d["plugins"][CRI_V3]["containerd"]["runtimes"]["gpu-quota"];
        assert_eq!(g["options"]["BinaryName"].as_str(), Some(RT));
        assert_eq!(g["options"]["SystemdCgroup"].as_bool(), Some(true));
        assert!(
            d["plugins"][CRI_V3]["containerd"]["runtimes"]
                .get("runc")
                .is_none(),
            "2.x merges: no runc needed"
        );
        round_trip(EngineKind::Containerd, fs, RT);
    }

    #[test]
    fn existing_glob_import_is_reused() {
        let src = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
        let fs = MemFs::new()
            .with(MAIN, src)
            .with("/etc/containerd/conf.d/10-mirror.toml", "version = 3\n");
        let f = installed(&fs);
        assert_eq!(f.get(MAIN).unwrap(), src, "main untouched");
        assert!(f.get(DROPIN).is_some());
        round_trip(EngineKind::Containerd, fs, RT);
    }

    #[test]
    fn v2_cri_defined_in_import_file() {
        let src = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
        let cri = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n";
        let fs = MemFs::new()
            .with(MAIN, src)
            .with("/etc/containerd/conf.d/50-cri.toml", cri);
        let f = installed(&fs);
        assert_eq!(f.get(MAIN).unwrap(), src);
        assert!(f.get(DROPIN).is_none());
        let d = doc(&f.get("/etc/containerd/conf.d/50-cri.toml").unwrap());
        assert_eq!(
            d["plugins"][CRI_V2]["containerd"]["runtimes"]["gpu-quota"]["options"]["BinaryName"]
                .as_str(),
            Some(RT)
        );
        round_trip(EngineKind::Containerd, fs, RT);
    }

    #[test]
    fn migrates_from_drop_in_when_cri_section_appears() {
        let src = "version = 2\n";
        let mut f = installed(&MemFs::new().with(MAIN, src));
        assert!(f.get(DROPIN).is_some());
        // The admin then adds CRI settings to config.toml.
        let main = f.get(MAIN).unwrap()
            + "\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n";
        f.put(MAIN, main.into_bytes());
        let p = plan_install(&Containerd::default(), &f, RT).unwrap();
        f.apply(&p.changes);
        assert!(f.get(DROPIN).is_none());
        let out = f.get(MAIN).unwrap();
        assert!(!out.contains("imports"), "{out}");
        assert!(out.contains("runtimes.gpu-quota"), "{out}");
        let again = plan_install(&Containerd::default(), &f, RT).unwrap();
        assert!(again.changes.is_empty());
        let u = plan_uninstall(&Containerd::default(), &f).unwrap();
        f.apply(&u.changes);
        assert_eq!(f.get(MAIN).unwrap(), "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n");
    }

    #[test]
    fn comment_only_file_and_errors() {
        let fs = MemFs::new().with(MAIN, "# nothing here yet\n");
        let f = installed(&fs);
        let out = f.get(MAIN).unwrap();
        assert!(
            out.contains("version = 2")
                && out.contains(DROPIN)
                && out.contains("# nothing here yet"),
            "{out}"
        );
        round_trip(EngineKind::Containerd, fs, RT);

        let e = plan_install(
            &Containerd::default(),
            &MemFs::new().with(MAIN, "version = 2\n[plugins\n"),
            RT,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("/etc/containerd/config.toml: not valid TOML"),
            "{e}"
        );
        let e = plan_install(
            &Containerd::default(),
            &MemFs::new().with(MAIN, "[plugins.cri]\nx = 1\n"),
            RT,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("version 1"), "{e}");
        let e = plan_install(
            &Containerd::default(),
            &MemFs::new().with(MAIN, "version = 4\n"),
            RT,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not supported"), "{e}");
        let bad_import = MemFs::new()
            .with(
                MAIN,
                "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n",
            )
            .with("/etc/containerd/conf.d/x.toml", "[[[");
        let e = plan_install(&Containerd::default(), &bad_import, RT)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("/etc/containerd/conf.d/x.toml: not valid TOML"),
            "{e}"
        );
    }

    #[test]
    fn multi_line_imports_layout() {
        let src = "version = 2\nimports = [\n  \"/opt/a.toml\",\n]\n";
        let fs = MemFs::new().with(MAIN, src);
        let f = installed(&fs);
        assert_eq!(
            f.get(MAIN).unwrap(),
            format!("version = 2\nimports = [\n  \"/opt/a.toml\",\n  \"{DROPIN}\",\n]\n")
        );
        round_trip(EngineKind::Containerd, fs, RT);
    }
}
