//! gpu-quota-hook's own entries in config.json: `createRuntime` (mount the
//! driver and the interceptor) and `poststop` (release), each carrying the
//! reservation's key (`--root RUNC_ROOT`).
use super::{arr, obj, Modifier};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The hook's argument that carries the runc root.
pub const HOOK_ROOT_ARG: &str = "--root";

/// How the hook must be called from the config; as a [`Modifier`], our two
/// entries. Others' hooks are kept; ours are replaced in place (a bundle
/// reused under another runc root gets this container's key, not a second
/// entry).
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

impl Modifier for HookSpec {
    fn what(&self) -> &'static str {
        "hooks"
    }
    fn modify(&self, config: &mut Value) -> Result<(), String> {
        let hooks = obj(config, "hooks")?;
        let path = self.path.to_string_lossy().into_owned();
        for (stage, arg) in [
            ("createRuntime", "create-runtime"),
            ("poststop", "poststop"),
        ] {
            let list = arr(hooks, stage)?;
            let mut args = vec!["gpu-quota-hook".to_string(), arg.to_string()];
            args.extend(self.args.iter().cloned());
            let entry = json!({
                "path": path, "args": args, "env": self.env, "timeout": self.timeout_secs
            });
            match list
                .iter_mut()
                .find(|h| h.get("path").and_then(Value::as_str) == Some(&path))
            {
                Some(h) => *h = entry,
                None => list.push(entry),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(root: &str) -> HookSpec {
        HookSpec {
            path: "/usr/local/bin/gpu-quota-hook".into(),
            env: vec!["PATH=/usr/bin".into()],
            args: vec![HOOK_ROOT_ARG.into(), root.into()],
            timeout_secs: 30,
        }
    }

    #[test]
    fn adds_both_entries_after_others_and_is_idempotent() {
        let mut v = json!({"hooks": {"prestart": [{"path": "/x"}], "poststop": null}, "zzz": 1});
        hook("/run/one").modify(&mut v).unwrap();
        let once = v.clone();
        hook("/run/one").modify(&mut v).unwrap();
        assert_eq!(v, once, "idempotent");
        assert_eq!(v["zzz"], 1);
        assert_eq!(v.pointer("/hooks/prestart/0/path").unwrap(), "/x");
        assert_eq!(
            v.pointer("/hooks/createRuntime/0").unwrap(),
            &json!({"path": "/usr/local/bin/gpu-quota-hook",
                    "args": ["gpu-quota-hook", "create-runtime", "--root", "/run/one"],
                    "env": ["PATH=/usr/bin"], "timeout": 30})
        );
        assert_eq!(
            v.pointer("/hooks/poststop/0/args").unwrap(),
            &json!(["gpu-quota-hook", "poststop", "--root", "/run/one"])
        );
        let mut bad = json!({"hooks": {"poststop": {}}});
        assert!(hook("/r")
            .modify(&mut bad)
            .unwrap_err()
            .contains("poststop"));
    }

    /// A bundle reused under another runc root carries that
    /// container's key in our hook entries, not the first one's (and no
    /// second entry); others' hooks are kept.
    #[test]
    fn reused_bundle_gets_this_containers_key() {
        let mut v: Value =
            serde_json::from_str(r#"{"hooks":{"poststop":[{"path":"/x","args":["x"]}]}}"#).unwrap();
        hook("/run/one").modify(&mut v).unwrap();
        hook("/run/two").modify(&mut v).unwrap();
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
}
