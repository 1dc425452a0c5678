//! The slice's device nodes in `linux.devices`, and a cgroup allow rule
//! for each in `linux.resources.devices` (runc makes both, on cgroup v1 and
//! v2 alike).
use super::{arr, obj, Modifier};
use crate::devices::DeviceNode;
use serde_json::{json, Value};

/// Add these nodes and their rules; entries already there are kept (a
/// reused bundle, or an engine's node of the same GPU), rules are appended
/// after the config's own (a deny-all stays first).
#[derive(Debug, Clone)]
pub struct Devices(pub Vec<DeviceNode>);

impl Modifier for Devices {
    fn what(&self) -> &'static str {
        "devices"
    }
    fn modify(&self, config: &mut Value) -> Result<(), String> {
        let linux = obj(config, "linux")?;
        {
            let devices = arr(linux, "devices")?;
            for n in &self.0 {
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
        let resources = obj(
            config.get_mut("linux").expect("made an object above"),
            "resources",
        )?;
        let rules = arr(resources, "devices")?;
        for n in &self.0 {
            let rule = json!({"allow": true, "type": "c", "major": n.major, "minor": n.minor, "access": "rwm"});
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Devices {
        Devices(vec![DeviceNode {
            host_path: "/dev/nvidia1".into(),
            container_path: "/dev/nvidia1".into(),
            major: 195,
            minor: 1,
        }])
    }

    #[test]
    fn nodes_and_rules_after_the_configs_own_idempotent() {
        let mut v: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","zzz":{"keep":[1,2]},"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]}}}"#,
        )
        .unwrap();
        nodes().modify(&mut v).unwrap();
        let once = v.clone();
        nodes().modify(&mut v).unwrap();
        assert_eq!(v, once, "idempotent");
        assert_eq!(v["zzz"]["keep"], json!([1, 2]));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["ociVersion", "zzz", "linux"], "order kept");
        let rules = v.pointer("/linux/resources/devices").unwrap();
        assert_eq!(rules[0]["allow"], false, "deny-all stays first");
        assert_eq!(
            rules[1],
            json!({"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"})
        );
        assert_eq!(
            v.pointer("/linux/devices/0").unwrap(),
            &json!({"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1,
                    "fileMode": 0o666, "uid": 0, "gid": 0})
        );
    }

    #[test]
    fn an_engines_node_of_the_same_path_is_kept_and_bad_shapes_are_errors() {
        let mut v = json!({"linux": {"devices": [{"path": "/dev/nvidia1", "major": 195, "minor": 1, "fileMode": 0o660}]}});
        nodes().modify(&mut v).unwrap();
        assert_eq!(v["linux"]["devices"].as_array().unwrap().len(), 1);
        assert_eq!(v["linux"]["devices"][0]["fileMode"], 0o660);
        assert!(nodes().modify(&mut json!({"linux": []})).is_err());
        assert!(nodes()
            .modify(&mut json!({"linux": {"resources": {"devices": {}}}}))
            .unwrap_err()
            .contains("devices"));
        assert!(nodes().modify(&mut json!([])).is_err());
    }
}
