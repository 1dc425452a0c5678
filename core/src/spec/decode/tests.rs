use super::*;

fn keys_err(text: &str) -> String {
    match parse(text.as_bytes()) {
        Err(DecodeError::Keys(m)) => m,
        other => panic!("not refused for its keys: {other:?}"),
    }
}

/// runc 1.1.5 (Go 1.19) runs `{"uid": 0, "UID": 1000}` as uid 1000 and
/// `{"UID": 1000, "uid": 0}` as 0 (measured: `id -u` in a busybox
/// bundle); serde_json's pointer read 0 for both.
#[test]
fn a_uid_beside_a_uid_of_another_case_is_refused() {
    for user in [r#"{"uid": 0, "UID": 1000}"#, r#"{"UID": 1000, "uid": 0}"#] {
        let text = format!(r#"{{"process": {{"user": {user}, "env": []}}}}"#);
        let m = keys_err(&text);
        assert!(
            m.contains("`process.user`")
                && m.contains("\"uid\"")
                && m.contains("\"UID\"")
                && m.contains("runc"),
            "{m}"
        );
    }
    // an exact duplicate (Go merges, serde keeps the last) and a spelling
    // through an escape are the same key twice
    keys_err(r#"{"process": {"user": {"uid": 0, "ui\u0064": 1000}}}"#);
    keys_err(r#"{"process": {"user": {"uid": 0}}, "process": {"env": []}}"#);
}

/// Go's folding is Unicode's simple one: runc reads `"uidMappingſ"` (long
/// s) as `uidMappings` (measured: the container got the mapping).
#[test]
fn a_lone_key_in_another_case_is_refused_naming_the_field() {
    let m = keys_err(r#"{"linux": {"namespaces": [{"type": "pid"}, {"Type": "user"}]}}"#);
    assert!(
        m.contains("\"Type\"") && m.contains("`linux.namespaces[1]`") && m.contains("\"type\""),
        "{m}"
    );
    let m = keys_err(r#"{"linux": {"uidMappingſ": []}}"#);
    assert!(m.contains("linux.uidMappings"), "{m}");
    let m = keys_err(r#"{"linux": {"devices": [{"path": "/dev/null", "MAJOR": 1}]}}"#);
    assert!(m.contains("linux.devices[0].major"), "{m}");
    keys_err(r#"{"linux": {"resources": {"devices": [{"Allow": true}]}}}"#);
    keys_err(r#"{"hooks": {"createRuntime": [{"PATH": "/x"}]}}"#);
    keys_err(r#"{"hooks": {"Prestart": []}}"#);
    keys_err(r#"{"mounts": [{"destination": "/x", "Source": "/y"}]}"#);
    keys_err(r#"{"root": {"Path": "/elsewhere"}}"#);
    keys_err(r#"{"process": {"ENV": ["GPU_QUOTA_VRAM=1g"]}}"#);
    keys_err(r#"{"linux": {"uidMappings": [{"containerID": 0, "HostID": 0, "size": 1}]}}"#);
}

/// A request hidden under a key runc reads as `annotations` is no longer
/// missed: the spec is refused.
#[test]
fn annotations_or_process_in_another_case_alone_are_refused() {
    let m = keys_err(r#"{"ociVersion": "1.0.2", "Annotations": {"vram": "8g"}}"#);
    assert!(
        m.contains("\"Annotations\"") && m.contains("the top level") && m.contains("`annotations`"),
        "{m}"
    );
    let m = keys_err(r#"{"Process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}"#);
    assert!(m.contains("\"Process\"") && m.contains("`process`"), "{m}");
    // the Kelvin sign folds to k: runc's `hooks`
    keys_err("{\"hoo\u{212a}s\": {}}");
}

/// Map keys are matched exactly by runc too: `Foo` and `foo` are two
/// annotations, two sysctls. Unknown keys are not runc's business either.
#[test]
fn map_keys_and_unknown_keys_are_left_alone() {
    let text = r#"{"ociVersion": "1.0.2",
        "annotations": {"Foo": "1", "foo": "2", "VRAM": "1g", "vram": "2g"},
        "process": {"user": {"uid": 0}, "env": ["A=1", "a=2"]},
        "linux": {"sysctl": {"net.X": "1", "net.x": "2"}, "resources": {"unified": {"A": "1", "a": "2"}},
                  "namespaces": [{"type": "user"}], "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}]},
        "x-unknown": 1, "X-Unknown2": {"Process": 1}}"#;
    let v = parse(text.as_bytes()).unwrap();
    assert_eq!(v["annotations"]["foo"], "2");
    assert_eq!(crate::spec::host_uid(&v), Some(1000));
    // another type than the spec's is not this check's to refuse
    parse(br#"{"process": 1, "linux": {"namespaces": {"type": "user"}}, "mounts": [1, null]}"#)
        .unwrap();
    parse(b"[]").unwrap();
}

#[test]
fn bounded_and_text_serde_cannot_read_is_told_apart() {
    let mut wide = String::from(r#"{"process": {"user": {"#);
    for i in 0..MAX_STRUCT_KEYS + 1 {
        wide.push_str(&format!(r#""k{i}": 0,"#));
    }
    wide.push_str(r#""uid": 0}}}"#);
    let m = keys_err(&wide);
    assert!(m.contains("more than 1024 keys"), "{m}");
    // past serde_json's 128 levels: Go's decoder takes up to 10 000
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    assert!(matches!(
        parse(deep.as_bytes()),
        Err(DecodeError::Json {
            runc_reads_it: true,
            ..
        })
    ));
    let deep = format!(r#"{{"process": {}1{}}}"#, "[".repeat(100), "]".repeat(100));
    parse(deep.as_bytes()).unwrap();
    // Go reads these as U+FFFD; serde_json refuses them
    for go_only in [&b"{\"a\": \"\\ud800\"}"[..], b"{\"a\": \"\xff\"}"] {
        assert!(matches!(
            parse(go_only),
            Err(DecodeError::Json {
                runc_reads_it: true,
                ..
            })
        ));
    }
    assert!(matches!(
        parse(b"{\"a\": "),
        Err(DecodeError::Json {
            runc_reads_it: false,
            ..
        })
    ));
}

#[test]
fn fold_is_gos_for_ascii_field_names() {
    assert_eq!(fold("UidMappingS"), "uidmappings");
    assert_eq!(fold("uidMappingſ"), "uidmappings");
    assert_eq!(fold("\u{212a}"), "k");
    assert_eq!(
        fold("É"),
        "É",
        "no non-ASCII letter folds to an ASCII one but these two"
    );
}
