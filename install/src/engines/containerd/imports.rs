//! containerd's `imports`: read from the main config, resolved as containerd does
//! (globs per path component, relative to the main config's directory), ours added and
//! removed.
use super::*;

pub(super) fn imports_of(doc: &DocumentMut, path: &Path) -> Result<Vec<String>, EngineError> {
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

pub(super) fn import_abs(imp: &str) -> PathBuf {
    let p = Path::new(imp);
    if p.is_absolute() {
        normalize(p)
    } else {
        // containerd resolves relative imports against the main config's directory.
        normalize(&Path::new(MAIN).parent().unwrap().join(p))
    }
}

/// Whether an `imports` entry names (or matches) `target`.
pub(super) fn import_matches(imp: &str, target: &str) -> bool {
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
pub(super) fn resolve_imports(fs: &dyn FsView, imports: &[String]) -> Vec<PathBuf> {
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

/// Add `DROPIN` to `imports` (after the existing entries, laid out like them).
pub(super) fn add_import(doc: &mut DocumentMut) {
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
pub(super) fn remove_import(doc: &mut DocumentMut, keep_key: bool) -> bool {
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

pub(super) fn fresh_main() -> String {
    format!(
        "# Created by `{MARK}` (there was no {MAIN}).\n\
         # containerd's defaults apply; gpu-quota's runtime is in the imported file.\n\
         version = 2\nimports = [\"{DROPIN}\"]\n"
    )
}
