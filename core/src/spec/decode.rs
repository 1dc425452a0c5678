//! The one parse of a bundle's config.json, checked so that what gpu-quota
//! reads is what runc reads.
//!
//! runc decodes the spec with Go's `encoding/json` into the runtime-spec's
//! structs, and that decoder matches a JSON key to a struct field *without
//! regard to case* (and with Unicode's simple folding: `ſ` is `s`, the
//! Kelvin sign `K` is `k`), each key in turn, so that of `{"uid": 0, "UID":
//! 1000}` the last wins, and a second `"process"` object is merged into the
//! first. `serde_json::Value` keeps exact keys, the last of duplicates:
//! gpu-quota read uid 0 where runc ran uid 1000, and missed a lone
//! `"Annotations"` or `"Process"` that runc read as the field. Map keys
//! (`annotations`, `linux.sysctl`) are matched exactly by both, and are not
//! touched here.
//!
//! **Decided: refuse, do not imitate.** In every object that is an OCI
//! struct on a path admission reads ([`SPEC`]), a key that folds to a field
//! name but is not spelled as the spec spells it, and two keys that fold to
//! one another (an exact duplicate included), refuse the config with one
//! message naming the keys. Engines write the spec from Go structs with
//! the canonical names and no duplicates, so no container an engine makes
//! is refused; what remains is read the same by both decoders.
//!
//! Bounded work: one extra pass over the bytes, linear in them (each key of
//! a struct object folded once into a hash set); nesting is bounded by
//! serde_json's recursion limit (128), the same in both passes; a struct
//! object of more than [`MAX_STRUCT_KEYS`] keys is refused (runtime-spec's
//! widest struct has 16 fields).
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;

/// Most keys taken in one object that is an OCI struct.
pub const MAX_STRUCT_KEYS: usize = 1024;

/// What a value on a path admission reads is, for this check.
#[derive(Debug)]
pub enum Shape {
    /// A runtime-spec struct: its fields as the spec spells them.
    Struct(&'static [Field]),
    /// An array of values of one shape.
    List(&'static Shape),
    /// Anything else (a string, a number, a map, a list of strings): not
    /// looked into.
    Other,
}

/// One field of a struct, and the shape of its value.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
}

const fn f(name: &'static str) -> Field {
    Field {
        name,
        shape: Shape::Other,
    }
}

const fn s(name: &'static str, fields: &'static [Field]) -> Field {
    Field {
        name,
        shape: Shape::Struct(fields),
    }
}

const fn list(name: &'static str, of: &'static Shape) -> Field {
    Field {
        name,
        shape: Shape::List(of),
    }
}

// runtime-spec v1.2 (specs-go/config.go), the structs on the paths that
// gpu-quota reads: process.env and .user, root.path, mounts, hooks,
// annotations, linux.namespaces, .uidMappings, .devices and
// .resources.devices. Every field of each is listed, so a stray spelling
// of any of them is refused, read or not.
const USER: &[Field] = &[
    f("uid"),
    f("gid"),
    f("umask"),
    f("additionalGids"),
    f("username"),
];
const PROCESS: &[Field] = &[
    f("terminal"),
    f("consoleSize"),
    s("user", USER),
    f("args"),
    f("commandLine"),
    f("env"),
    f("cwd"),
    f("capabilities"),
    f("rlimits"),
    f("noNewPrivileges"),
    f("apparmorProfile"),
    f("oomScoreAdj"),
    f("scheduler"),
    f("selinuxLabel"),
    f("ioPriority"),
    f("execCPUAffinity"),
];
const ROOT: &[Field] = &[f("path"), f("readonly")];
const MOUNT: &[Field] = &[
    f("destination"),
    f("type"),
    f("source"),
    f("options"),
    f("uidMappings"),
    f("gidMappings"),
];
const HOOK: &[Field] = &[f("path"), f("args"), f("env"), f("timeout")];
const HOOKS: &[Field] = &[
    list("prestart", &Shape::Struct(HOOK)),
    list("createRuntime", &Shape::Struct(HOOK)),
    list("createContainer", &Shape::Struct(HOOK)),
    list("startContainer", &Shape::Struct(HOOK)),
    list("poststart", &Shape::Struct(HOOK)),
    list("poststop", &Shape::Struct(HOOK)),
];
const ID_MAPPING: &[Field] = &[f("containerID"), f("hostID"), f("size")];
const NAMESPACE: &[Field] = &[f("type"), f("path")];
const DEVICE: &[Field] = &[
    f("path"),
    f("type"),
    f("major"),
    f("minor"),
    f("fileMode"),
    f("uid"),
    f("gid"),
];
const DEVICE_RULE: &[Field] = &[f("allow"), f("type"), f("major"), f("minor"), f("access")];
const RESOURCES: &[Field] = &[
    list("devices", &Shape::Struct(DEVICE_RULE)),
    f("memory"),
    f("cpu"),
    f("pids"),
    f("blockIO"),
    f("hugepageLimits"),
    f("network"),
    f("rdma"),
    f("unified"),
];
const LINUX: &[Field] = &[
    list("uidMappings", &Shape::Struct(ID_MAPPING)),
    list("gidMappings", &Shape::Struct(ID_MAPPING)),
    f("timeOffsets"),
    f("sysctl"),
    s("resources", RESOURCES),
    f("cgroupsPath"),
    list("namespaces", &Shape::Struct(NAMESPACE)),
    list("devices", &Shape::Struct(DEVICE)),
    f("seccomp"),
    f("rootfsPropagation"),
    f("maskedPaths"),
    f("readonlyPaths"),
    f("mountLabel"),
    f("intelRdt"),
    f("personality"),
    f("netDevices"),
];
/// The spec's top level.
pub const SPEC: Shape = Shape::Struct(&[
    f("ociVersion"),
    s("process", PROCESS),
    s("root", ROOT),
    f("hostname"),
    f("domainname"),
    list("mounts", &Shape::Struct(MOUNT)),
    s("hooks", HOOKS),
    f("annotations"),
    s("linux", LINUX),
    f("solaris"),
    f("windows"),
    f("vm"),
    f("zos"),
]);

/// Why a config.json is not taken.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON to serde_json. `runc_reads_it`: Go's decoder may take it
    /// (bytes that are not UTF-8 and a lone surrogate `\uD800`, which Go
    /// reads as U+FFFD; nesting past serde_json's 128 levels, Go's limit
    /// is 10 000), so runc may run it.
    #[error("not valid JSON: {err}")]
    Json {
        err: serde_json::Error,
        runc_reads_it: bool,
    },
    /// Keys runc reads otherwise than gpu-quota would.
    #[error("{0}")]
    Keys(String),
}

/// Parse config.json's bytes into the one `Value` every reader of the spec
/// uses, refusing what runc would read otherwise (see the module's text).
pub fn parse(bytes: &[u8]) -> Result<Value, DecodeError> {
    let v = serde_json::from_slice(bytes).map_err(|err| DecodeError::Json {
        runc_reads_it: go_only_text(bytes) || err.to_string().starts_with("recursion limit"),
        err,
    })?;
    check_keys(bytes, &SPEC).map_err(DecodeError::Keys)?;
    Ok(v)
}

/// Whether `bytes` hold text Go's `encoding/json` decodes and serde_json
/// refuses: invalid UTF-8, or a `\u` escape of a surrogate (a valid pair
/// parses in both; this is asked only of text serde_json refused).
fn go_only_text(bytes: &[u8]) -> bool {
    if std::str::from_utf8(bytes).is_err() {
        return true;
    }
    bytes.windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && matches!(w[2], b'd' | b'D')
            && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// A key as Go's decoder compares it with a field name: ASCII letters
/// without case, `ſ` (U+017F) as `s`, the Kelvin sign (U+212A) as `k`
/// (the only non-ASCII characters that fold to an ASCII letter).
pub fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{17f}' => 's',
            '\u{212a}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Check the keys of `bytes` (JSON that serde_json parses) against `shape`.
/// `Err`: the message.
pub fn check_keys(bytes: &[u8], shape: &'static Shape) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    Walk {
        shape,
        path: String::new(),
    }
    .deserialize(&mut de)
    .map_err(|e| e.to_string())
}

/// A value of `shape` found at `path` (`process.user`, `linux.devices[2]`).
struct Walk {
    shape: &'static Shape,
    path: String,
}

impl Walk {
    fn at(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
    fn where_(&self) -> String {
        if self.path.is_empty() {
            "the top level".to_string()
        } else {
            format!("`{}`", self.path)
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.shape {
            Shape::Other => d.deserialize_ignored_any(IgnoredAny).map(|_| ()),
            _ => d.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    // a value of another type than the spec's: runc refuses the spec
    // itself, and gpu-quota's readers take it as absent
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = match self.shape {
            Shape::List(inner) => inner,
            _ => &Shape::Other,
        };
        let mut i = 0usize;
        while seq
            .next_element_seed(Walk {
                shape: inner,
                path: format!("{}[{i}]", self.path),
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Shape::Struct(fields) = self.shape else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        // folded key -> the key as written
        let mut seen: HashMap<String, String> = HashMap::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.len() >= MAX_STRUCT_KEYS {
                return Err(de::Error::custom(format!(
                    "{} has more than {MAX_STRUCT_KEYS} keys; refused",
                    self.where_()
                )));
            }
            let folded = fold(&key);
            if let Some(first) = seen.get(&folded) {
                return Err(de::Error::custom(format!(
                    "{} has the keys {first:?} and {key:?}, which runc reads as one field (Go's JSON decoder matches field names without regard to case, and the last one wins); gpu-quota would read another value than runc: refused. Write each field once, as the OCI runtime spec spells it",
                    self.where_()
                )));
            }
            let field = fields.iter().find(|f| fold(f.name) == folded);
            if let Some(fl) = field.filter(|fl| fl.name != key) {
                return Err(de::Error::custom(format!(
                    "the key {key:?} at {} is runc's `{}` (Go's JSON decoder matches field names without regard to case); gpu-quota reads only the OCI runtime spec's spelling: refused. Write it as {:?}",
                    self.where_(),
                    self.at(fl.name),
                    fl.name
                )));
            }
            let shape = field.map(|fl| &fl.shape).unwrap_or(&Shape::Other);
            map.next_value_seed(Walk {
                shape,
                path: self.at(&key),
            })?;
            seen.insert(folded, key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
