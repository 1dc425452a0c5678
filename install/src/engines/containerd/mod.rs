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
use std::path::{Path, PathBuf};

use toml_edit::{value, Array, DocumentMut, Item, Table};

use super::fsutil::{backup_path, normalize, FsView};
use super::{
    Ctx, Engine, EngineError, EngineKind, EnginePlan, FileChange, ANNOTATION_PATTERNS,
    CLUSTER_ANNOTATIONS, RUNTIME_NAME,
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

fn imports_of(doc: &DocumentMut, path: &Path) -> Result<Vec<String>, EngineError> {
    match doc.get("imports") {
        None => Ok(Vec::new()),
        Some(item) => {
            let bad = || {
                EngineError::invalid(
                    path,
                    "`imports` is not an array of strings",
                    "fix it by hand, then run the command again",
                )
            };
            let arr = item.as_array().ok_or_else(bad)?;
            arr.iter()
                .map(|v| v.as_str().map(String::from).ok_or_else(bad))
                .collect()
        }
    }
}

use super::glob::{has_meta, path_match as component_match};

fn import_abs(imp: &str) -> PathBuf {
    let p = Path::new(imp);
    if p.is_absolute() {
        normalize(p)
    } else {
        // containerd resolves relative imports against the main config's directory.
        normalize(&Path::new(MAIN).parent().unwrap().join(p))
    }
}

/// Whether an `imports` entry names (or matches) `target`.
fn import_matches(imp: &str, target: &str) -> bool {
    let pat = import_abs(imp);
    let pc: Vec<_> = pat.components().collect();
    let tc: Vec<_> = Path::new(target).components().collect();
    pc.len() == tc.len()
        && pc.iter().zip(&tc).all(|(a, b)| {
            component_match(
                &a.as_os_str().to_string_lossy(),
                &b.as_os_str().to_string_lossy(),
            )
        })
}

/// The files an `imports` list loads, in containerd's order.
fn resolve_imports(fs: &dyn FsView, imports: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for imp in imports {
        let p = import_abs(imp);
        let mut bases = vec![PathBuf::from("/")];
        for comp in p.components().skip(1) {
            let c = comp.as_os_str().to_string_lossy().into_owned();
            bases = if has_meta(&c) {
                bases
                    .iter()
                    .flat_map(|b| {
                        fs.list_dir(b)
                            .into_iter()
                            .filter(|n| component_match(&c, n))
                            .map(move |n| b.join(n))
                    })
                    .collect()
            } else {
                bases.iter().map(|b| b.join(&c)).collect()
            };
        }
        for b in bases {
            if fs.exists(&b) && !out.contains(&b) {
                out.push(b);
            }
        }
    }
    out
}

fn cri_table<'a>(doc: &'a DocumentMut, plugin: &str) -> Option<&'a dyn toml_edit::TableLike> {
    doc.get("plugins")?
        .as_table_like()?
        .get(plugin)?
        .as_table_like()
}

fn runtimes_table<'a>(doc: &'a DocumentMut, plugin: &str) -> Option<&'a dyn toml_edit::TableLike> {
    cri_table(doc, plugin)?
        .get("containerd")?
        .as_table_like()?
        .get("runtimes")?
        .as_table_like()
}

fn runtimes_table_mut<'a>(
    doc: &'a mut DocumentMut,
    plugin: &str,
) -> Option<&'a mut dyn toml_edit::TableLike> {
    doc.get_mut("plugins")?
        .as_table_like_mut()?
        .get_mut(plugin)?
        .as_table_like_mut()?
        .get_mut("containerd")?
        .as_table_like_mut()?
        .get_mut("runtimes")?
        .as_table_like_mut()
}

/// `options` of the runtime the CRI plugin uses by default, to copy (SystemdCgroup, ...): our
/// runtime must create containers the way the node's default runtime does.
fn default_runtime_options(doc: &DocumentMut, plugin: &str) -> Option<Table> {
    let name = cri_table(doc, plugin)
        .and_then(|c| c.get("containerd"))
        .and_then(|c| c.as_table_like())
        .and_then(|c| c.get("default_runtime_name"))
        .and_then(|v| v.as_str())
        .unwrap_or("runc")
        .to_string();
    let rt = runtimes_table(doc, plugin)?.get(&name)?.as_table_like()?;
    if rt
        .get("runtime_type")
        .and_then(|v| v.as_str())
        .is_some_and(|t| t != RUNC_V2)
    {
        return None; // kata, runsc, ...: their options mean nothing to runc
    }
    let opts = rt.get("options")?.as_table_like()?;
    let mut t = Table::new();
    for (k, v) in opts.iter() {
        if k == "BinaryName" {
            continue;
        }
        if let Some(v) = v.as_value() {
            let mut v = v.clone();
            v.decor_mut().clear();
            t.insert(k, Item::Value(v));
        }
    }
    (!t.is_empty()).then_some(t)
}

/// The handler key that passes requests, its value, and the key of the other mode.
fn annotation_entry(k8s: bool) -> (&'static str, &'static [&'static str], &'static str) {
    if k8s {
        (
            "container_annotations",
            &CLUSTER_ANNOTATIONS,
            "pod_annotations",
        )
    } else {
        (
            "pod_annotations",
            &ANNOTATION_PATTERNS,
            "container_annotations",
        )
    }
}

/// `[...runtimes.gpu-quota]` and its `options`.
fn runtime_table(runtime: &str, copied: Option<&Table>, k8s: bool) -> Table {
    let mut t = Table::new();
    t.insert("runtime_type", value(RUNC_V2));
    let (key, keys, _) = annotation_entry(k8s);
    t.insert(key, value(keys.iter().copied().collect::<Array>()));
    let mut o = Table::new();
    o.insert("BinaryName", value(runtime));
    if let Some(c) = copied {
        for (k, v) in c.iter() {
            o.insert(k, v.clone());
        }
    }
    t.insert("options", Item::Table(o));
    t
}

fn runc_table() -> Table {
    let mut t = Table::new();
    t.insert("runtime_type", value(RUNC_V2));
    t
}

fn ensure_table<'a>(
    parent: &'a mut Table,
    key: &str,
    path: &Path,
) -> Result<&'a mut Table, EngineError> {
    let item = parent.entry(key).or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    item.as_table_mut().ok_or_else(|| {
        EngineError::invalid(
            path,
            format!("`{key}` is not a [table] (an inline table or a value), so gpu-quota cannot add its runtime to it"),
            "write it as a standard [table], or add the runtime by hand (see docs/install.md); then run the command again",
        )
    })
}

/// Indentation for the tables we add: header and key indentation of our runtime table.
struct Layout {
    head: String,
    key: String,
}

fn last_line(t: &Table) -> String {
    let p = t.decor().prefix().and_then(|p| p.as_str()).unwrap_or("");
    let l = p.rsplit('\n').next().unwrap_or("");
    if l.chars().all(|c| c == ' ' || c == '\t') {
        l.to_string()
    } else {
        String::new()
    }
}

/// Indentation of the first `key = value` of an explicit table.
fn key_indent(t: &Table) -> Option<String> {
    let (k, _) = t.iter().find(|(_, v)| v.is_value())?;
    let p = t
        .key(k)?
        .leaf_decor()
        .prefix()
        .and_then(|p| p.as_str())?
        .to_string();
    p.chars().all(|c| c == ' ' || c == '\t').then_some(p)
}

fn explicit(t: &Table) -> bool {
    !t.is_implicit() && !t.is_dotted()
}

/// Lay our tables out like their neighbours: like a sibling runtime when there is one, else
/// nested one step under the nearest table on our path that the file spells out.
fn layout(doc: &DocumentMut, plugin: &str) -> Layout {
    let mut path: Vec<&Table> = Vec::new();
    let mut t = doc.get("plugins").and_then(Item::as_table);
    for k in [plugin, "containerd", "runtimes", ""] {
        let Some(tab) = t else { break };
        path.push(tab);
        t = tab.get(k).and_then(Item::as_table);
    }
    if let Some(rts) = path.get(3) {
        for (_, item) in rts.iter() {
            if let Some(sib) = item.as_table().filter(|s| explicit(s)) {
                let head = last_line(sib);
                let key = key_indent(sib).unwrap_or_else(|| head.clone());
                return Layout { head, key };
            }
        }
    }
    if let Some(anc) = path.iter().rev().find(|a| explicit(a)) {
        let h = last_line(anc);
        let inner = key_indent(anc)
            .or_else(|| {
                anc.iter()
                    .find_map(|(_, v)| v.as_table().filter(|c| explicit(c)).map(last_line))
            })
            .unwrap_or_else(|| h.clone());
        let step = inner.strip_prefix(h.as_str()).unwrap_or("").to_string();
        return Layout {
            key: format!("{inner}{step}"),
            head: inner,
        };
    }
    Layout {
        head: String::new(),
        key: String::new(),
    }
}

/// Give a table we add the file's layout (child tables one step further in).
fn indent_table(t: &mut Table, lay: &Layout, comment: &str) {
    let comment: String = comment
        .lines()
        .map(|l| format!("{}{l}\n", lay.head))
        .collect();
    t.decor_mut().set_prefix(format!("\n{comment}{}", lay.head));
    let step = lay
        .key
        .strip_prefix(lay.head.as_str())
        .unwrap_or("")
        .to_string();
    let child = Layout {
        head: lay.key.clone(),
        key: format!("{}{step}", lay.key),
    };
    let keys: Vec<String> = t.iter().map(|(k, _)| k.to_string()).collect();
    for k in keys {
        if let Some(Item::Table(c)) = t.get_mut(&k) {
            indent_table(c, &child, "");
        } else if let Some(mut key) = t.key_mut(&k) {
            key.leaf_decor_mut().set_prefix(lay.key.clone());
        }
    }
}

/// Add (or bring up to date) our runtime in `doc`'s CRI section. Version 2 only.
fn add_in_place(
    doc: &mut DocumentMut,
    plugin: &str,
    runtime: &str,
    path: &Path,
    k8s: bool,
) -> Result<(), EngineError> {
    let copied = default_runtime_options(doc, plugin);
    let lay = layout(doc, plugin);
    let plugins = ensure_table(doc.as_table_mut(), "plugins", path)?;
    let cri = ensure_table(plugins, plugin, path)?;
    let ctd = ensure_table(cri, "containerd", path)?;
    let runtimes = ensure_table(ctd, "runtimes", path)?;
    let had_runtimes = runtimes.iter().any(|(_, v)| v.is_table_like());
    match runtimes.get_mut(RUNTIME_NAME).and_then(Item::as_table_mut) {
        Some(t) => update_runtime(t, runtime, copied.as_ref(), k8s),
        None => {
            if !had_runtimes {
                let mut runc = runc_table();
                indent_table(&mut runc, &lay, &format!(
                    "# Added by `{MARK}`: listing any runtime drops containerd 1.x's built-in \"runc\"\n\
                     # runtime (the default one); this keeps it."
                ));
                runtimes.insert("runc", Item::Table(runc));
            }
            let mut t = runtime_table(runtime, copied.as_ref(), k8s);
            indent_table(
                &mut t,
                &lay,
                &format!("# Added by `{MARK}`; `gpu-quota uninstall containerd` removes it."),
            );
            runtimes.insert(RUNTIME_NAME, Item::Table(t));
        }
    }
    Ok(())
}

/// Set the values we own in an existing runtime table, touching nothing already right.
fn update_runtime(t: &mut Table, runtime: &str, copied: Option<&Table>, k8s: bool) {
    if t.get("runtime_type").and_then(Item::as_str) != Some(RUNC_V2) {
        t.insert("runtime_type", value(RUNC_V2));
    }
    let (key, want, other) = annotation_entry(k8s);
    let have: Option<Vec<&str>> = t
        .get(key)
        .and_then(Item::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect());
    if have.as_deref() != Some(want) {
        let is_new = t.get(key).is_none();
        t.insert(key, value(want.iter().copied().collect::<Array>()));
        // a new key is laid out like runtime_type (its indentation)
        let prefix = t
            .key("runtime_type")
            .and_then(|k| k.leaf_decor().prefix())
            .and_then(|p| p.as_str())
            .map(str::to_string);
        if let (true, Some(p), Some(mut k)) = (is_new, prefix, t.key_mut(key)) {
            k.leaf_decor_mut().set_prefix(p);
        }
    }
    t.remove(other);
    let o = t
        .entry("options")
        .or_insert_with(|| Item::Table(Table::new()));
    if let Some(o) = o.as_table_like_mut() {
        if o.get("BinaryName").and_then(Item::as_str) != Some(runtime) {
            o.insert("BinaryName", value(runtime));
        }
        if let Some(c) = copied {
            for (k, v) in c.iter() {
                if o.get(k).is_none() {
                    o.insert(k, v.clone());
                }
            }
        }
    }
}

/// Remove our runtime (and the `runc` we added) from `doc`; whether anything changed.
fn remove_in_place(doc: &mut DocumentMut) -> bool {
    let mut changed = false;
    for plugin in [CRI_V2, CRI_V3] {
        if let Some(rts) = runtimes_table_mut(doc, plugin) {
            changed |= rts.remove(RUNTIME_NAME).is_some();
            let ours = rts
                .get("runc")
                .and_then(Item::as_table)
                .and_then(|t| {
                    t.decor()
                        .prefix()
                        .and_then(|p| p.as_str())
                        .map(|p| p.contains(MARK))
                })
                .unwrap_or(false);
            if ours {
                rts.remove("runc");
                changed = true;
            }
        }
    }
    changed
}

/// The drop-in file for config `version`.
fn dropin_text(
    version: i64,
    runtime: &str,
    copied: Option<&Table>,
    with_runc: bool,
    k8s: bool,
) -> String {
    let mut doc = DocumentMut::new();
    let mut header = format!(
        "# Added by `{MARK}`; `gpu-quota uninstall containerd` removes this file.\n\
         # Imported by {MAIN} (`imports`). containerd reads it only when it starts:\n\
         # restart containerd after a change (systemctl restart containerd).\n"
    );
    if version == 2 {
        header.push_str(
            "# containerd 1.x replaces the whole CRI plugin section with the last file that defines it:\n\
             # if you add CRI settings to config.toml, run `gpu-quota install containerd` again\n\
             # (it then adds the runtime to config.toml itself and removes this file).\n",
        );
    }
    doc.decor_mut().set_prefix(header);
    doc.insert("version", value(version));
    let mut runtimes = Table::new();
    runtimes.set_implicit(true);
    if with_runc {
        let mut runc = runc_table();
        runc.decor_mut().set_prefix(
            "\n# containerd 1.x drops its built-in \"runc\" runtime (the default) as soon as any\n\
             # runtime is listed; this keeps it.\n",
        );
        runtimes.insert("runc", Item::Table(runc));
    }
    runtimes.insert(
        RUNTIME_NAME,
        Item::Table(runtime_table(runtime, copied, k8s)),
    );
    let mut ctd = Table::new();
    ctd.set_implicit(true);
    ctd.insert("runtimes", Item::Table(runtimes));
    let mut cri = Table::new();
    cri.set_implicit(true);
    cri.insert("containerd", Item::Table(ctd));
    let mut plugins = Table::new();
    plugins.set_implicit(true);
    plugins.insert(plugin_for(version), Item::Table(cri));
    doc.insert("plugins", Item::Table(plugins));
    doc.to_string()
}

/// Add `DROPIN` to `imports` (after the existing entries, laid out like them).
fn add_import(doc: &mut DocumentMut) {
    match doc.get_mut("imports").and_then(Item::as_array_mut) {
        Some(arr) => {
            // Lay it out like the last entry, unless that is the first entry on the `[` line
            // (which has no leading space).
            let decor = arr
                .get(arr.len().wrapping_sub(1))
                .map(|v| v.decor().clone())
                .filter(|d| {
                    arr.len() > 1
                        || d.prefix()
                            .and_then(|p| p.as_str())
                            .is_some_and(|p| p.contains('\n'))
                });
            arr.push(DROPIN);
            if let (Some(d), Some(v)) = (decor, arr.get_mut(arr.len() - 1)) {
                *v.decor_mut() = d;
            }
        }
        None => {
            let arr: Array = [DROPIN].into_iter().collect();
            doc.insert("imports", value(arr));
        }
    }
}

/// Remove `DROPIN` from `imports`; the key goes too when left empty and `keep_key` is false.
fn remove_import(doc: &mut DocumentMut, keep_key: bool) -> bool {
    let Some(arr) = doc.get_mut("imports").and_then(Item::as_array_mut) else {
        return false;
    };
    let Some(i) = arr.iter().position(|v| v.as_str() == Some(DROPIN)) else {
        return false;
    };
    let removed_decor = arr.get(i).map(|v| v.decor().clone());
    arr.remove(i);
    if i == 0 {
        if let (Some(d), Some(next)) = (removed_decor, arr.get_mut(0)) {
            next.decor_mut()
                .set_prefix(d.prefix().cloned().unwrap_or_default());
        }
    }
    if arr.is_empty() && !keep_key {
        doc.remove("imports");
    }
    true
}

fn fresh_main() -> String {
    format!(
        "# Created by `{MARK}` (there was no {MAIN}).\n\
         # containerd's defaults apply; gpu-quota's runtime is in the imported file.\n\
         version = 2\nimports = [\"{DROPIN}\"]\n"
    )
}

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
        kind: super::ChangeKind::Config,
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

impl Engine for Containerd {
    fn kind(&self) -> EngineKind {
        EngineKind::Containerd
    }

    fn env_requests(&self) -> super::EnvRequests {
        super::EnvRequests::Set(false, "containerd passes the request keys listed in pod_annotations: requests come from annotations only.".into())
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
    use crate::engines::tests::round_trip;
    use crate::engines::{plan_install, plan_uninstall};

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
        assert_eq!(ann, ["vram", "gpu", "gpus", "gpu-quota.io/*"]);
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
