//! Which host user a container's process runs as: read from the spec, not
//! an edit. MPS lets host root steer a GPU's server from the client socket
//! (its clients' percentage, ending other containers' clients: measured on
//! the H200), so a compute share is admitted for a process that cannot
//! become host root (`ledger::container`), and gpu-quota's daemons run
//! multi-user, one server for every uid.
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
    match user_namespace(config) {
        UserNs::Host => Some(uid),
        UserNs::Joined => None,
        UserNs::Own => mappings(config)?.find_map(|(inside, host, size)| {
            let off = u64::from(uid).checked_sub(inside)?;
            if off >= size {
                return None;
            }
            u32::try_from(host.checked_add(off)?).ok()
        }),
    }
}

/// The host uid a compute share is admitted for: [`host_uid`], but 0
/// where any uid of the container's own user namespace maps to host root
/// (root inside may `setuid` to it). `None` where the spec does not say.
pub fn share_uid(config: &Value) -> Option<u32> {
    let uid = host_uid(config)?;
    if user_namespace(config) == UserNs::Own
        && mappings(config)?.any(|(_, host, size)| host == 0 && size > 0)
    {
        return Some(0);
    }
    Some(uid)
}

/// Which user namespace the container's processes run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserNs {
    /// the host's (no `user` entry in `linux.namespaces`)
    Host,
    /// one of its own, with the spec's mappings (runc makes a new one for
    /// an entry without a path or with an empty one)
    Own,
    /// an existing one at a path: its mappings are not in the spec
    Joined,
}

pub fn user_namespace(config: &Value) -> UserNs {
    let userns = config
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .and_then(|ns| {
            ns.iter()
                .find(|n| n.get("type").and_then(Value::as_str) == Some("user"))
        });
    match userns {
        None => UserNs::Host,
        Some(n)
            if n.get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| !p.is_empty()) =>
        {
            UserNs::Joined
        }
        Some(_) => UserNs::Own,
    }
}

/// `linux.uidMappings` as (containerID, hostID, size), the first
/// [`MAX_MAPPINGS`]; a mapping with a field that is not a number is left
/// out. `None`: no mappings.
fn mappings(config: &Value) -> Option<impl Iterator<Item = (u64, u64, u64)> + '_> {
    let maps = config.pointer("/linux/uidMappings")?.as_array()?;
    Some(maps.iter().take(MAX_MAPPINGS).filter_map(|m| {
        let field = |k: &str| m.get(k)?.as_u64();
        Some((field("containerID")?, field("hostID")?, field("size")?))
    }))
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

    #[test]
    fn a_share_is_root_s_where_any_mapping_reaches_host_root() {
        let c = |maps: serde_json::Value| {
            json!({"process": {"user": {"uid": 0}},
                "linux": {"namespaces": [{"type": "user"}], "uidMappings": maps}})
        };
        let remapped = c(json!([{"containerID": 0, "hostID": 100000, "size": 65536}]));
        assert_eq!(share_uid(&remapped), Some(100000));
        // root inside is host 100000, but uid 5000 inside is host root
        let back_door = c(json!([{"containerID": 0, "hostID": 100000, "size": 1000},
                                 {"containerID": 5000, "hostID": 0, "size": 1}]));
        assert_eq!(host_uid(&back_door), Some(100000));
        assert_eq!(share_uid(&back_door), Some(0));
        let identity = c(json!([{"containerID": 0, "hostID": 0, "size": 4294967295u64}]));
        assert_eq!(share_uid(&identity), Some(0));
        // without a namespace of its own, the process's uid
        let plain = json!({"process": {"user": {"uid": 1000}}});
        assert_eq!(share_uid(&plain), Some(1000));
        assert_eq!(share_uid(&json!({})), Some(0));
        let joined =
            json!({"linux": {"namespaces": [{"type": "user", "path": "/proc/1/ns/user"}]}});
        assert_eq!(share_uid(&joined), None);
    }
}
