//! The process of a compute share that runs as a non-root user in the
//! host's user namespace: it must not become root, since MPS takes
//! commands that steer the GPU's server from host root on the client
//! socket. So it gets `noNewPrivileges` (no setuid-root program or file
//! capability raises it) and loses `CAP_SETUID` in every set (it cannot
//! `setuid(0)` itself). A container with a user namespace of its own is
//! left alone: its root is another host uid, and admission refused the
//! ones that map any uid to host root (`spec::share_uid`).
use super::{user_namespace, Modifier, UserNs};
use serde_json::Value;

/// The capability whose holder can become any uid.
const CAP_SETUID: &str = "CAP_SETUID";
const SETS: [&str; 5] = [
    "bounding",
    "effective",
    "inheritable",
    "permitted",
    "ambient",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareProcess;

impl Modifier for ShareProcess {
    fn what(&self) -> &'static str {
        "process"
    }
    fn modify(&self, config: &mut Value) -> Result<(), String> {
        if user_namespace(config) != UserNs::Host {
            return Ok(());
        }
        let Some(process) = config.get_mut("process") else {
            return Err("the config has no process".into());
        };
        let Some(process) = process.as_object_mut() else {
            return Err("process is not an object".into());
        };
        process.insert("noNewPrivileges".into(), Value::Bool(true));
        let Some(caps) = process.get_mut("capabilities") else {
            return Ok(());
        };
        let Some(caps) = caps.as_object_mut() else {
            return Err("process.capabilities is not an object".into());
        };
        for set in SETS {
            match caps.get_mut(set) {
                None | Some(Value::Null) => {}
                Some(Value::Array(list)) => list.retain(|c| c.as_str() != Some(CAP_SETUID)),
                Some(_) => return Err(format!("process.capabilities.{set} is not a list")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_share_process_cannot_regain_root() {
        let all = json!(["CAP_CHOWN", "CAP_SETUID", "CAP_SETGID"]);
        let mut c = json!({"process": {"user": {"uid": 1000}, "capabilities": {
            "bounding": all, "effective": all, "inheritable": all, "permitted": all, "ambient": ["CAP_SETUID"]}}});
        ShareProcess.modify(&mut c).unwrap();
        assert_eq!(c["process"]["noNewPrivileges"], json!(true));
        for set in SETS {
            let l = c["process"]["capabilities"][set].as_array().unwrap();
            assert!(!l.contains(&json!("CAP_SETUID")), "{set}: {l:?}");
        }
        assert_eq!(
            c["process"]["capabilities"]["bounding"],
            json!(["CAP_CHOWN", "CAP_SETGID"]),
            "the others stay"
        );
        // a spec that sets noNewPrivileges false gets it true
        let mut off = json!({"process": {"noNewPrivileges": false}});
        ShareProcess.modify(&mut off).unwrap();
        assert_eq!(off["process"]["noNewPrivileges"], json!(true));
    }

    #[test]
    fn a_user_namespace_of_its_own_is_left_alone_and_odd_shapes_are_refused() {
        let own = json!({"process": {"capabilities": {"bounding": ["CAP_SETUID"]}},
            "linux": {"namespaces": [{"type": "user"}]}});
        let mut c = own.clone();
        ShareProcess.modify(&mut c).unwrap();
        assert_eq!(c, own);
        for bad in [
            json!({}),
            json!({"process": 1}),
            json!({"process": {"capabilities": []}}),
            json!({"process": {"capabilities": {"bounding": "CAP_SETUID"}}}),
        ] {
            let mut c = bad.clone();
            assert!(ShareProcess.modify(&mut c).is_err(), "{bad}");
        }
    }
}
