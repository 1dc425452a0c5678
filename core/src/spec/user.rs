//! Which host user a container's process runs as: read from the spec, not
//! an edit. An MPS daemon serves one user per GPU at a time (a client of
//! another uid waits until every client of the running server has ended),
//! so a compute share records its host uid; admission takes root's only
//! (`ledger::container`), and placement keeps a GPU's shares to one uid.
use serde_json::Value;

/// The kernel takes at most this many lines in a `uid_map`; a spec with
/// more could not run, and only this many are looked at.
const MAX_MAPPINGS: usize = 340;

/// The host uid of the container's process: `process.user.uid` (0 where
/// the spec names none, as runc takes it) through the user namespace's
/// `linux.uidMappings` when the spec makes one. `None` where the spec does
/// not say: it joins an existing user namespace (its mappings are not in
/// the spec), no mapping holds the uid, or a field is not a number.
pub fn host_uid(config: &Value) -> Option<u32> {
    let uid = match config.pointer("/process/user/uid") {
        None => 0,
        Some(v) => u32::try_from(v.as_u64()?).ok()?,
    };
    let userns = config
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .and_then(|ns| {
            ns.iter()
                .find(|n| n.get("type").and_then(Value::as_str) == Some("user"))
        });
    let Some(userns) = userns else {
        return Some(uid);
    };
    // runc joins the namespace at a non-empty path, and makes a new one
    // for an empty path as for none
    if userns
        .get("path")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty())
    {
        return None;
    }
    let maps = config.pointer("/linux/uidMappings")?.as_array()?;
    maps.iter().take(MAX_MAPPINGS).find_map(|m| {
        let field = |k: &str| m.get(k)?.as_u64();
        let (inside, host, size) = (field("containerID")?, field("hostID")?, field("size")?);
        let off = u64::from(uid).checked_sub(inside)?;
        if off >= size {
            return None;
        }
        u32::try_from(host.checked_add(off)?).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_process_uid_without_a_user_namespace() {
        assert_eq!(host_uid(&json!({})), Some(0), "no process.user: root");
        assert_eq!(
            host_uid(&json!({"process": {"user": {"uid": 1000, "gid": 1000}}})),
            Some(1000)
        );
        let other_ns = json!({"process": {"user": {"uid": 7}},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]}});
        assert_eq!(host_uid(&other_ns), Some(7));
    }

    #[test]
    fn a_user_namespace_maps_the_uid_to_the_host() {
        let c = |uid: u64| {
            json!({"process": {"user": {"uid": uid}},
                "linux": {"namespaces": [{"type": "user"}],
                    "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 1000},
                                    {"containerID": 1000, "hostID": 5000, "size": 1}]}})
        };
        assert_eq!(host_uid(&c(0)), Some(100000));
        assert_eq!(host_uid(&c(999)), Some(100999));
        assert_eq!(host_uid(&c(1000)), Some(5000));
        assert_eq!(host_uid(&c(1001)), None, "no mapping holds it");
    }

    #[test]
    fn what_the_spec_does_not_say_is_not_guessed() {
        let joined = json!({"process": {"user": {"uid": 0}},
            "linux": {"namespaces": [{"type": "user", "path": "/proc/1/ns/user"}]}});
        assert_eq!(host_uid(&joined), None, "joins a namespace");
        let empty_path = json!({"process": {"user": {"uid": 0}},
            "linux": {"namespaces": [{"type": "user", "path": ""}],
                "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 10}]}});
        assert_eq!(
            host_uid(&empty_path),
            Some(100000),
            "an empty path: a new namespace"
        );
        let unmapped = json!({"linux": {"namespaces": [{"type": "user"}]}});
        assert_eq!(host_uid(&unmapped), None, "no mappings");
        for bad in [json!(-1), json!("0"), json!(1u64 << 32), json!(1.5)] {
            assert_eq!(host_uid(&json!({"process": {"user": {"uid": bad}}})), None);
        }
        let overflow = json!({"process": {"user": {"uid": 5}},
            "linux": {"namespaces": [{"type": "user"}],
                "uidMappings": [{"containerID": 0, "hostID": u32::MAX, "size": 10}]}});
        assert_eq!(host_uid(&overflow), None, "past the last host uid");
        // only the first 340 mappings are looked at (the kernel's most)
        let mut maps: Vec<_> = (0..340)
            .map(|i| json!({"containerID": 10000 + i, "hostID": 50000 + i, "size": 1}))
            .collect();
        maps.push(json!({"containerID": 0, "hostID": 7, "size": 1}));
        let past = json!({"process": {"user": {"uid": 0}},
            "linux": {"namespaces": [{"type": "user"}], "uidMappings": maps}});
        assert_eq!(host_uid(&past), None, "the 341st mapping is not read");
    }
}
