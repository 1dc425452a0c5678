//! gpu-quota's own configuration, `/etc/gpu-quota/config.toml`: the one key an engine
//! install decides, `env_requests`.
//!
//! Requests from the container's environment (`GPU_QUOTA_*`) are accepted only when
//! `env_requests = true`; an engine that can pass annotations must not accept them (an
//! image's `ENV` would then be a request nobody made). So `install docker` writes
//! `env_requests = true` only for a Docker daemon older than 24 (no `--annotation`) and
//! `false` otherwise; `install containerd` / `install crio` write `false`.
//!
//! The file is edited with toml_edit: comments, other keys and their layout stay as they
//! are. The key carries a comment naming the engine whose install set it; uninstall of that
//! engine removes the key again (and the file, when install created it and nothing else is
//! in it).
use std::path::Path;

use toml_edit::{value, DocumentMut, Item};

use super::fsutil::FsView;
use super::model::{EngineError, FileChange};

pub use gpuquota_core::config::DEFAULT_PATH as CONFIG;
pub const KEY: &str = "env_requests";

fn marker(engine: &str) -> String {
    format!("# Set by `gpu-quota install {engine}`; `gpu-quota uninstall {engine}` removes it.")
}

fn parse(path: &Path, b: &[u8]) -> Result<DocumentMut, EngineError> {
    std::str::from_utf8(b)
        .map_err(|e| EngineError::bad_toml(path, e))?
        .parse::<DocumentMut>()
        .map_err(|e| EngineError::bad_toml(path, e))
}

/// The key's comment (decor prefix), if the key is there.
fn key_prefix(doc: &DocumentMut) -> Option<String> {
    doc.as_table()
        .key(KEY)
        .and_then(|k| k.leaf_decor().prefix())
        .and_then(|p| p.as_str())
        .map(String::from)
}

/// `before` with `env_requests = on`, marked as set by `engine` because of `why`.
/// Unchanged bytes when the key already has that value and that engine's mark.
pub fn set(
    before: Option<&[u8]>,
    on: bool,
    engine: &str,
    why: &str,
) -> Result<Vec<u8>, EngineError> {
    let path = Path::new(CONFIG);
    let mut doc = match before {
        Some(b) => parse(path, b)?,
        None => DocumentMut::new(),
    };
    let mark = marker(engine);
    let current = doc.get(KEY).and_then(Item::as_bool);
    if current == Some(on) && key_prefix(&doc).is_some_and(|p| p.contains(&mark)) {
        return Ok(before.unwrap_or_default().to_vec());
    }
    if let Some(v) = doc.get(KEY) {
        if v.as_bool().is_none() {
            return Err(EngineError::invalid(
                path,
                format!("{KEY} = {} is not a boolean", v.to_string().trim()),
                format!("set {KEY} = true or false (or remove it), then run the command again; nothing was changed"),
            ));
        }
    }
    doc.remove(KEY);
    doc.insert(KEY, value(on));
    let lead = if doc.as_table().len() > 1 || before.is_some_and(|b| !b.is_empty()) {
        "\n"
    } else {
        ""
    };
    if let Some(mut k) = doc.as_table_mut().key_mut(KEY) {
        k.leaf_decor_mut()
            .set_prefix(format!("{lead}{mark}\n# {why}\n"));
    }
    let mut s = doc.to_string();
    if !s.ends_with('\n') {
        s.push('\n');
    }
    Ok(s.into_bytes())
}

/// `before` without the key, when `engine`'s install set it (its mark is on the key);
/// None: nothing to change. Some(None): the file is left empty of content: delete it.
pub fn unset(before: &[u8], engine: &str) -> Result<Option<Option<Vec<u8>>>, EngineError> {
    let path = Path::new(CONFIG);
    let mut doc = parse(path, before)?;
    if !key_prefix(&doc).is_some_and(|p| p.contains(&marker(engine))) {
        return Ok(None);
    }
    doc.remove(KEY);
    let s = doc.to_string();
    if s.trim().is_empty() {
        return Ok(Some(None));
    }
    Ok(Some(Some(
        s.trim_start_matches('\n').to_string().into_bytes(),
    )))
}

/// The install change of config.toml for an engine that wants `env_requests = on`.
pub fn install_change(
    fs: &dyn FsView,
    on: bool,
    engine: &str,
    why: &str,
) -> Result<FileChange, EngineError> {
    let before = fs.read(Path::new(CONFIG))?;
    let after = set(before.as_deref(), on, engine, why)?;
    Ok(FileChange::config(CONFIG, before, Some(after)))
}

/// The uninstall change of config.toml: our key removed (None when it is not ours).
pub fn uninstall_change(fs: &dyn FsView, engine: &str) -> Result<Option<FileChange>, EngineError> {
    let Some(before) = fs.read(Path::new(CONFIG))? else {
        return Ok(None);
    };
    Ok(unset(&before, engine)?.map(|after| FileChange::config(CONFIG, Some(before), after)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn fresh_file_then_unset_deletes_it() {
        let a = set(None, true, "docker", "Docker 20.10 cannot pass annotations").unwrap();
        assert_eq!(
            s(&a),
            "# Set by `gpu-quota install docker`; `gpu-quota uninstall docker` removes it.\n\
             # Docker 20.10 cannot pass annotations\nenv_requests = true\n"
        );
        assert!(s(&a).parse::<DocumentMut>().unwrap()[KEY].as_bool() == Some(true));
        assert_eq!(unset(&a, "docker").unwrap(), Some(None));
        assert_eq!(
            unset(&a, "containerd").unwrap(),
            None,
            "not containerd's key"
        );
    }

    #[test]
    fn keeps_comments_and_keys_and_round_trips() {
        let before =
            "# my host\nledger_dir = \"/x\" # where\n\n[driver]\n# libs\nlib_dirs = [\"/l\"]\n";
        let a = set(Some(before.as_bytes()), false, "containerd", "why").unwrap();
        let t = s(&a);
        assert!(
            t.starts_with("# my host\nledger_dir = \"/x\" # where\n"),
            "{t}"
        );
        assert!(t.contains("[driver]\n# libs\nlib_dirs = [\"/l\"]\n"), "{t}");
        assert!(t.contains("env_requests = false\n"), "{t}");
        let key = t.find("env_requests").unwrap();
        assert!(
            key < t.find("[driver]").unwrap(),
            "a root key, before the tables: {t}"
        );
        assert!(s(&a).parse::<DocumentMut>().unwrap()[KEY].as_bool() == Some(false));
        // the config still parses as gpu-quota's
        gpuquota_core::config::Config::parse(t, Path::new("x")).unwrap();
        let back = unset(&a, "containerd").unwrap().unwrap().unwrap();
        assert_eq!(s(&back), before, "uninstall gives the original text back");
    }

    #[test]
    fn idempotent_and_flips_an_existing_value() {
        let a = set(Some(b"env_requests = true\n"), false, "docker", "Docker 26").unwrap();
        assert!(s(&a).parse::<DocumentMut>().unwrap()[KEY].as_bool() == Some(false));
        assert_eq!(s(&a).matches("env_requests").count(), 1, "{}", s(&a));
        let again = set(Some(&a), false, "docker", "Docker 26").unwrap();
        assert_eq!(again, a, "a second install changes nothing");
        // another engine's install takes the key over (and its mark)
        let c = set(Some(&a), true, "containerd", "x").unwrap();
        assert_eq!(unset(&c, "docker").unwrap(), None);
        assert!(unset(&c, "containerd").unwrap().is_some());
    }

    #[test]
    fn refuses_a_non_boolean_and_bad_toml() {
        assert!(set(Some(b"env_requests = \"yes\"\n"), true, "docker", "x").is_err());
        assert!(set(Some(b"[oops\n"), true, "docker", "x").is_err());
        // a user's own key (no mark) is never removed by uninstall
        assert_eq!(unset(b"env_requests = true\n", "docker").unwrap(), None);
    }
}
