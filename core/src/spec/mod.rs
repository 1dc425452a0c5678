//! A bundle's `config.json` as JSON, and the edits gpu-quota makes to it.
//!
//! The edits follow the NVIDIA Container Toolkit's runtime: the spec is
//! loaded once, a list of small [`Modifier`]s is applied to it in order
//! ([`apply`]), and it is written back once (`lifecycle::Bundle`). Each
//! modifier is one kind of edit, tested beside itself:
//!
//! | modifier | file | edits |
//! |---|---|---|
//! | [`Narrow`] | `narrow.rs` | the toolkit's narrowing: GPU-handing hooks, other GPUs' nodes, rules and mounts go (`toolkit::narrow`) |
//! | [`Environment`] | `env.rs` | `process.env`: variables naming GPUs point at the slice; a DRA claim's token goes |
//! | [`Devices`] | `devices.rs` | `linux.devices` and their cgroup allow rules |
//! | [`HookSpec`] | `hooks.rs` | gpu-quota-hook's `createRuntime` and `poststop` entries |
//! | [`Annotations`] | `annotations.rs` | `gpu-quota.io/assigned` and the record hint |
//! | [`ShareProcess`] | `share_process.rs` | a non-root share's process: `noNewPrivileges`, no `CAP_SETUID` |
//!
//! Fields nobody edits are kept as they are (key order included), and a
//! config without a request is never rewritten.
//!
//! Every reading of config.json goes through [`decode::parse`], which
//! refuses a spec whose keys runc (Go's case-insensitive decoder) would
//! read otherwise than the `Value` every reader here uses.
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

mod annotations;
pub mod decode;
mod devices;
mod env;
mod hooks;
mod narrow;
mod share_process;
mod user;
pub use annotations::Annotations;
pub use devices::Devices;
pub use env::Environment;
pub use hooks::{HookSpec, HOOK_ROOT_ARG};
pub use narrow::Narrow;
pub use share_process::ShareProcess;
pub use user::{host_uid, share_uid, user_namespace, UserNs};

/// Annotation the runtime adds with the GPUs it assigned: toolkit reads it
/// to tell its own nodes in a reused bundle from an engine's request.
pub use crate::toolkit::ASSIGNED_ANNOTATION;
/// Annotation the runtime adds with the file name of the container's ledger
/// record, so that the hook opens that record instead of listing every
/// container's (a hint: the hook checks the record's key, and lists the
/// records when the hint is missing or wrong).
pub const RECORD_ANNOTATION: &str = crate::formats::keys::ANN_RECORD;

/// The record hint of a config, if it has one.
pub fn record_hint(config: &Value) -> Option<&str> {
    config
        .pointer("/annotations")?
        .get(RECORD_ANNOTATION)?
        .as_str()
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Decode {
        path: PathBuf,
        err: decode::DecodeError,
    },
}

pub fn config_path(bundle: &Path) -> PathBuf {
    bundle.join("config.json")
}

pub fn read_config(bundle: &Path) -> Result<Value, SpecError> {
    let path = config_path(bundle);
    let bytes = std::fs::read(&path).map_err(|err| SpecError::Read {
        path: path.clone(),
        err,
    })?;
    decode::parse(&bytes).map_err(|err| SpecError::Decode { path, err })
}

/// The container's rootfs directory on the host.
pub fn rootfs_path(bundle: &Path, config: &Value) -> PathBuf {
    let p = config
        .pointer("/root/path")
        .and_then(Value::as_str)
        .unwrap_or("rootfs");
    let p = Path::new(p);
    if p.is_absolute() {
        p.into()
    } else {
        bundle.join(p)
    }
}

/// `v[key]`, made an empty object when missing or null.
fn obj<'a>(v: &'a mut Value, key: &str) -> Result<&'a mut Map<String, Value>, String> {
    let m = v
        .as_object_mut()
        .ok_or_else(|| "expected an object".to_string())?;
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if e.is_null() {
        *e = json!({});
    }
    e.as_object_mut()
        .ok_or_else(|| format!("`{key}` is not an object"))
}

/// `m[key]`, made an empty array when missing or null.
fn arr<'a>(m: &'a mut Map<String, Value>, key: &str) -> Result<&'a mut Vec<Value>, String> {
    let e = m.entry(key.to_string()).or_insert_with(|| json!([]));
    if e.is_null() {
        *e = json!([]);
    }
    e.as_array_mut()
        .ok_or_else(|| format!("`{key}` is not an array"))
}

/// One edit of a config.json: a small, pure function of the config (and
/// what the modifier was built with), idempotent, that keeps every field it
/// does not own.
pub trait Modifier {
    /// What it edits, for an error message ("devices", "hooks", …).
    fn what(&self) -> &'static str;
    /// Edit `config`; `Err`: the config has a shape this edit cannot make
    /// sense of (a `linux` that is not an object), said in a few words.
    fn modify(&self, config: &mut Value) -> Result<(), String>;
}

/// A modifier that could not edit the config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {message}")]
pub struct EditError {
    pub what: &'static str,
    pub message: String,
}

/// Apply `modifiers` to `config`, in order: the one place a spec is edited.
/// The first that fails stops the list (the config is then not written).
pub fn apply(config: &mut Value, modifiers: &[&dyn Modifier]) -> Result<(), EditError> {
    for m in modifiers {
        m.modify(config).map_err(|message| EditError {
            what: m.what(),
            message,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Set(&'static str, Value);
    impl Modifier for Set {
        fn what(&self) -> &'static str {
            self.0
        }
        fn modify(&self, config: &mut Value) -> Result<(), String> {
            obj(config, "annotations")?.insert(self.0.into(), self.1.clone());
            Ok(())
        }
    }

    #[test]
    fn apply_runs_the_list_in_order_and_stops_at_the_first_failure() {
        let mut v = json!({"keep": 1});
        let (a, b) = (Set("a", json!(1)), Set("b", json!(2)));
        apply(&mut v, &[&a, &b]).unwrap();
        assert_eq!(v, json!({"keep": 1, "annotations": {"a": 1, "b": 2}}));
        let keys: Vec<&String> = v["annotations"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["a", "b"], "in the list's order");
        // `annotations` that is not an object: the edit names itself, and
        // the modifiers after it do not run
        let mut bad = json!({"annotations": []});
        let e = apply(&mut bad, &[&Set("first", json!(0)), &b]).unwrap_err();
        assert_eq!(e.what, "first");
        assert!(e.to_string().starts_with("first: "), "{e}");
        assert_eq!(bad, json!({"annotations": []}));
    }

    #[test]
    fn rootfs_relative_and_absolute() {
        let b = Path::new("/b");
        assert_eq!(
            rootfs_path(b, &json!({"root":{"path":"rootfs"}})),
            PathBuf::from("/b/rootfs")
        );
        assert_eq!(
            rootfs_path(b, &json!({"root":{"path":"/r"}})),
            PathBuf::from("/r")
        );
    }
}
