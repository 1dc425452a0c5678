//! The CRI runtime tables: finding them, building our runtime entry (and `runc` beside
//! it), adding it in place with the file's own layout, removing it, and the drop-in.
use super::*;

pub(super) fn cri_table<'a>(
    doc: &'a DocumentMut,
    plugin: &str,
) -> Option<&'a dyn toml_edit::TableLike> {
    doc.get("plugins")?
        .as_table_like()?
        .get(plugin)?
        .as_table_like()
}

pub(super) fn runtimes_table<'a>(
    doc: &'a DocumentMut,
    plugin: &str,
) -> Option<&'a dyn toml_edit::TableLike> {
    cri_table(doc, plugin)?
        .get("containerd")?
        .as_table_like()?
        .get("runtimes")?
        .as_table_like()
}

pub(super) fn runtimes_table_mut<'a>(
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
pub(super) fn default_runtime_options(doc: &DocumentMut, plugin: &str) -> Option<Table> {
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
pub(super) fn annotation_entry(k8s: bool) -> (&'static str, &'static [&'static str], &'static str) {
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
pub(super) fn runtime_table(runtime: &str, copied: Option<&Table>, k8s: bool) -> Table {
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

pub(super) fn runc_table() -> Table {
    let mut t = Table::new();
    t.insert("runtime_type", value(RUNC_V2));
    t
}

pub(super) fn ensure_table<'a>(
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
pub(super) struct Layout {
    head: String,
    key: String,
}

pub(super) fn last_line(t: &Table) -> String {
    let p = t.decor().prefix().and_then(|p| p.as_str()).unwrap_or("");
    let l = p.rsplit('\n').next().unwrap_or("");
    if l.chars().all(|c| c == ' ' || c == '\t') {
        l.to_string()
    } else {
        String::new()
    }
}

/// Indentation of the first `key = value` of an explicit table.
pub(super) fn key_indent(t: &Table) -> Option<String> {
    let (k, _) = t.iter().find(|(_, v)| v.is_value())?;
    let p = t
        .key(k)?
        .leaf_decor()
        .prefix()
        .and_then(|p| p.as_str())?
        .to_string();
    p.chars().all(|c| c == ' ' || c == '\t').then_some(p)
}

pub(super) fn explicit(t: &Table) -> bool {
    !t.is_implicit() && !t.is_dotted()
}

/// Lay our tables out like their neighbours: like a sibling runtime when there is one, else
/// nested one step under the nearest table on our path that the file spells out.
pub(super) fn layout(doc: &DocumentMut, plugin: &str) -> Layout {
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
pub(super) fn indent_table(t: &mut Table, lay: &Layout, comment: &str) {
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
pub(super) fn add_in_place(
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
pub(super) fn update_runtime(t: &mut Table, runtime: &str, copied: Option<&Table>, k8s: bool) {
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
pub(super) fn remove_in_place(doc: &mut DocumentMut) -> bool {
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
pub(super) fn dropin_text(
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
