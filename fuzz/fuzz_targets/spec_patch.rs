//! gpu-quota's own spec modifiers (spec::Devices, spec::HookSpec,
//! spec::Annotations, applied by spec::apply as lifecycle::prepare does) on
//! arbitrary JSON configs: never panics, idempotent, and on success the
//! devices, rules, hooks and annotation are all there while unrelated
//! top-level keys are untouched.
#![no_main]
use arbitrary::{Arbitrary, Unstructured};
use gpuquota_core::devices::DeviceNode;
use gpuquota_core::spec::{apply, Annotations, Devices, HookSpec, ASSIGNED_ANNOTATION};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

const KEYS: &[&str] = &[
    "linux",
    "devices",
    "resources",
    "hooks",
    "createRuntime",
    "poststop",
    "annotations",
    "path",
    "type",
    "major",
    "minor",
    "allow",
    "access",
    "process",
    "env",
    "args",
];
const PATHS: &[&str] = &[
    "/dev/nvidia0",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/usr/bin/gpu-quota-hook",
];

fn string(u: &mut Unstructured) -> arbitrary::Result<String> {
    Ok(match u.int_in_range(0..=3)? {
        0 => KEYS[u.choose_index(KEYS.len())?].to_string(),
        1 => PATHS[u.choose_index(PATHS.len())?].to_string(),
        _ => String::arbitrary(u)?,
    })
}

fn value(u: &mut Unstructured, depth: u32) -> arbitrary::Result<Value> {
    let top = if depth == 0 { 3 } else { 6 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => json!(bool::arbitrary(u)?),
        2 => json!(u.int_in_range(0u64..=300)?),
        3 => Value::String(string(u)?),
        4 => Value::Array(
            (0..u.int_in_range(0..=4)?)
                .map(|_| value(u, depth - 1))
                .collect::<arbitrary::Result<_>>()?,
        ),
        _ => {
            let mut m = Map::new();
            for _ in 0..u.int_in_range(0..=5)? {
                m.insert(string(u)?, value(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(config) = (|| -> arbitrary::Result<Value> {
        // mostly objects: that is what config.json is
        if bool::arbitrary(&mut u)? {
            let mut m = Map::new();
            for _ in 0..u.int_in_range(0..=5)? {
                m.insert(string(&mut u)?, value(&mut u, 4)?);
            }
            Ok(Value::Object(m))
        } else {
            value(&mut u, 5)
        }
    })() else {
        return;
    };
    let Ok(nodes) = (0..u.int_in_range(0..=3).unwrap_or(0))
        .map(|_| -> arbitrary::Result<DeviceNode> {
            Ok(DeviceNode {
                host_path: PathBuf::from(string(&mut u)?),
                container_path: string(&mut u)?,
                major: u.int_in_range(0..=300)?,
                minor: u.int_in_range(0..=300)?,
            })
        })
        .collect::<arbitrary::Result<Vec<_>>>()
    else {
        return;
    };
    let hook = HookSpec {
        path: PathBuf::from(string(&mut u).unwrap_or_default()),
        env: Vec::<String>::arbitrary(&mut u).unwrap_or_default(),
        args: Vec::<String>::arbitrary(&mut u).unwrap_or_default(),
        timeout_secs: u64::arbitrary(&mut u).unwrap_or(0),
    };
    let assigned = String::arbitrary(&mut u).unwrap_or_default();
    let devices = Devices(nodes.clone());
    let annotations = Annotations {
        assigned: assigned.clone(),
        record: Option::<String>::arbitrary(&mut u).unwrap_or_default(),
    };
    let patch = |config: &mut Value| apply(config, &[&devices, &hook, &annotations]);

    let mut once = config.clone();
    let r1 = patch(&mut once);
    let mut twice = once.clone();
    let r2 = patch(&mut twice);
    assert_eq!(twice, once, "the modifiers are not idempotent");
    assert_eq!(r1.is_ok(), r2.is_ok(), "{r1:?} then {r2:?}");
    if let Err(e) = &r1 {
        assert!(!e.message.is_empty());
        return;
    }

    // postconditions
    let devices = once
        .pointer("/linux/devices")
        .and_then(Value::as_array)
        .expect("linux.devices");
    let rules = once
        .pointer("/linux/resources/devices")
        .and_then(Value::as_array)
        .expect("rules");
    for n in &nodes {
        assert!(devices
            .iter()
            .any(|d| d.get("path").and_then(Value::as_str) == Some(n.container_path.as_str())));
        let rule = json!({"allow": true, "type": "c", "major": n.major, "minor": n.minor, "access": "rwm"});
        assert!(rules.contains(&rule), "missing rule {rule}");
    }
    let hook_path = hook.path.to_string_lossy();
    for (stage, arg) in [("createRuntime", "create-runtime"), ("poststop", "poststop")] {
        let list = once
            .pointer(&format!("/hooks/{stage}"))
            .and_then(Value::as_array)
            .expect("hooks");
        // our (first) entry carries this patch's key, whatever was there
        let ours = list
            .iter()
            .find(|h| h.get("path").and_then(Value::as_str) == Some(hook_path.as_ref()))
            .expect("our hook entry");
        let mut want = vec!["gpu-quota-hook".to_string(), arg.to_string()];
        want.extend(hook.args.iter().cloned());
        assert_eq!(ours.get("args"), Some(&json!(want)), "{stage} args");
    }
    assert_eq!(
        once.pointer("/annotations")
            .and_then(|a| a.get(ASSIGNED_ANNOTATION)),
        Some(&Value::String(assigned.clone()))
    );
    // nothing else at the top level changed
    let (Some(before), Some(after)) = (config.as_object(), once.as_object()) else {
        panic!("patch succeeded on a non-object config");
    };
    for (k, v) in before {
        if !["linux", "hooks", "annotations"].contains(&k.as_str()) {
            assert_eq!(after.get(k), Some(v), "top-level {k} changed");
        }
    }
});
