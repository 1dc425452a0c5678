//! Reading and patching a bundle's `config.json` as JSON: fields we do not
//! know are kept as they are (key order included), and a config without a
//! request is never rewritten.
use crate::devices::DeviceNode;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

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
    #[error("{path} is not valid JSON: {err}")]
    Json {
        path: PathBuf,
        err: serde_json::Error,
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
    let v = serde_json::from_slice(&bytes).map_err(|err| SpecError::Json {
        path: path.clone(),
        err,
    })?;
    Ok(v)
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

/// How the hook must be called from the config.
#[derive(Debug, Clone)]
pub struct HookSpec {
    pub path: PathBuf,
    /// Environment for the hook (runc gives it nothing else).
    pub env: Vec<String>,
    /// Arguments after the stage: the reservation's key (`--root DIR`, the
    /// runc root the container is created under; the OCI state does not
    /// carry it).
    pub args: Vec<String>,
    pub timeout_secs: u64,
}

/// The hook's argument that carries the runc root.
pub const HOOK_ROOT_ARG: &str = "--root";

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

fn arr<'a>(m: &'a mut Map<String, Value>, key: &str) -> Result<&'a mut Vec<Value>, String> {
    let e = m.entry(key.to_string()).or_insert_with(|| json!([]));
    if e.is_null() {
        *e = json!([]);
    }
    e.as_array_mut()
        .ok_or_else(|| format!("`{key}` is not an array"))
}

/// Add device nodes, their cgroup allow rules, the hooks, the
/// assignment annotation and the record hint (`record`: the reservation's
/// record file; `None` removes a hint the config came with). Idempotent: entries already present are kept,
/// except our own hook entries, which are replaced in place (a bundle
/// reused under another runc root gets this container's key).
pub fn patch(
    config: &mut Value,
    nodes: &[DeviceNode],
    hook: &HookSpec,
    assigned: &str,
    record: Option<&str>,
) -> Result<(), String> {
    {
        let linux = obj(config, "linux")?;
        let devices = arr(linux, "devices")?;
        for n in nodes {
            if devices
                .iter()
                .any(|d| d.get("path").and_then(Value::as_str) == Some(&n.container_path))
            {
                continue;
            }
            devices.push(json!({
                "path": n.container_path, "type": "c", "major": n.major, "minor": n.minor,
                "fileMode": 0o666, "uid": 0, "gid": 0
            }));
        }
    }
    {
        let linux = config.get_mut("linux").expect("created above");
        let resources = obj(linux, "resources")?;
        let rules = arr(resources, "devices")?;
        for n in nodes {
            let rule = json!({"allow": true, "type": "c", "major": n.major, "minor": n.minor, "access": "rwm"});
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    {
        let hooks = obj(config, "hooks")?;
        for (stage, arg) in [
            ("createRuntime", "create-runtime"),
            ("poststop", "poststop"),
        ] {
            let list = arr(hooks, stage)?;
            let path = hook.path.to_string_lossy().into_owned();
            let mut args = vec!["gpu-quota-hook".to_string(), arg.to_string()];
            args.extend(hook.args.iter().cloned());
            let entry = json!({
                "path": path, "args": args, "env": hook.env, "timeout": hook.timeout_secs
            });
            match list
                .iter_mut()
                .find(|h| h.get("path").and_then(Value::as_str) == Some(&path))
            {
                Some(h) => *h = entry,
                None => list.push(entry),
            }
        }
    }
    let ann = obj(config, "annotations")?;
    ann.insert(ASSIGNED_ANNOTATION.into(), Value::String(assigned.into()));
    match record {
        Some(f) => ann.insert(RECORD_ANNOTATION.into(), Value::String(f.into())),
        None => ann.remove(RECORD_ANNOTATION),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> HookSpec {
        HookSpec {
            path: "/usr/local/bin/gpu-quota-hook".into(),
            env: vec!["PATH=/usr/bin".into()],
            args: vec![HOOK_ROOT_ARG.into(), "/run/one".into()],
            timeout_secs: 30,
        }
    }
    fn nodes() -> Vec<DeviceNode> {
        vec![DeviceNode {
            host_path: "/dev/nvidia1".into(),
            container_path: "/dev/nvidia1".into(),
            major: 195,
            minor: 1,
        }]
    }

    #[test]
    fn patch_keeps_unknown_fields_and_is_idempotent() {
        let mut v: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","zzz":{"keep":[1,2]},"process":{"args":["sh"]},"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]}},"hooks":{"prestart":[{"path":"/x"}]}}"#,
        )
        .unwrap();
        patch(&mut v, &nodes(), &hook(), "GPU-1", Some("r-1")).unwrap();
        let once = v.clone();
        patch(&mut v, &nodes(), &hook(), "GPU-1", Some("r-1")).unwrap();
        assert_eq!(v, once, "idempotent");
        assert_eq!(record_hint(&v), Some("r-1"));
        patch(&mut v, &nodes(), &hook(), "GPU-1", None).unwrap();
        assert_eq!(record_hint(&v), None, "a hint without a record is removed");
        patch(&mut v, &nodes(), &hook(), "GPU-1", Some("r-1")).unwrap();
        assert_eq!(v["zzz"]["keep"], json!([1, 2]));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            &keys[..4],
            &["ociVersion", "zzz", "process", "linux"],
            "order kept"
        );
        let rules = v
            .pointer("/linux/resources/devices")
            .unwrap()
            .as_array()
            .unwrap();
        assert_eq!(rules[0]["allow"], false, "deny-all stays first");
        assert_eq!(rules[1]["major"], 195);
        assert_eq!(v.pointer("/linux/devices/0/path").unwrap(), "/dev/nvidia1");
        assert_eq!(v.pointer("/hooks/prestart/0/path").unwrap(), "/x");
        assert_eq!(
            v.pointer("/hooks/createRuntime/0/args/1").unwrap(),
            "create-runtime"
        );
        assert_eq!(
            v.pointer("/hooks/poststop/0/env/0").unwrap(),
            "PATH=/usr/bin"
        );
        assert_eq!(v["annotations"][ASSIGNED_ANNOTATION], "GPU-1");
        assert_eq!(
            v.pointer("/hooks/createRuntime/0/args").unwrap(),
            &json!(["gpu-quota-hook", "create-runtime", "--root", "/run/one"])
        );
    }

    /// Issue 16 §4: a bundle reused under another runc root carries that
    /// container's key in our hook entries, not the first one's (and no
    /// second entry); others' hooks are kept.
    #[test]
    fn reused_bundle_gets_this_containers_key() {
        let mut v: Value =
            serde_json::from_str(r#"{"hooks":{"poststop":[{"path":"/x","args":["x"]}]}}"#).unwrap();
        patch(&mut v, &nodes(), &hook(), "GPU-1", Some("r-1")).unwrap();
        let mut two = hook();
        two.args = vec![HOOK_ROOT_ARG.into(), "/run/two".into()];
        patch(&mut v, &nodes(), &two, "GPU-1", Some("r-1")).unwrap();
        for (stage, arg) in [
            ("createRuntime", "create-runtime"),
            ("poststop", "poststop"),
        ] {
            let ours: Vec<&Value> = v["hooks"][stage]
                .as_array()
                .unwrap()
                .iter()
                .filter(|h| h["path"] == "/usr/local/bin/gpu-quota-hook")
                .collect();
            assert_eq!(ours.len(), 1, "{v}");
            assert_eq!(
                ours[0]["args"],
                json!(["gpu-quota-hook", arg, "--root", "/run/two"])
            );
        }
        assert_eq!(v.pointer("/hooks/poststop/0/path").unwrap(), "/x");
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
