//! Docker: `runtimes.gpu-quota = {"path": "<runtime>"}` in /etc/docker/daemon.json, then
//! a reload of this host's dockerd (`systemctl reload docker`, or SIGHUP to the pid in its
//! pid file; it reloads `runtimes` without a restart), and `env_requests` in gpu-quota's
//! config.toml: true only for Docker < 24, which cannot pass annotations.
//!
//! The file is edited as text: the JSON is validated with serde_json, then our member is
//! inserted after the last member of the object it belongs to, in the indentation and
//! `key: value` spacing the file already uses. Every other byte (other keys, their order,
//! formatting) stays as it was, and removing the member again gives the original text back.
use std::path::Path;

use super::dockerver::{DockerVersion, ANNOTATIONS_SINCE};
use super::engine::Engine;
use super::fsutil::{backup_path, FsView};
use super::model::{
    Ctx, EngineError, EngineKind, EnginePlan, EnvRequests, FileChange, RUNTIME_NAME,
};
use super::reload::{self, Reloaded};

pub const DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// Docker, with the daemon version found on the host (None: unknown).
#[derive(Default)]
pub struct Docker {
    version: Option<DockerVersion>,
}

impl Docker {
    pub fn new(version: Option<DockerVersion>) -> Self {
        Docker { version }
    }
}

impl Engine for Docker {
    fn kind(&self) -> EngineKind {
        EngineKind::Docker
    }

    fn env_requests(&self) -> EnvRequests {
        match &self.version {
            Some(v) if v.passes_annotations() => EnvRequests::Set(
                false,
                format!(
                    "Docker {} ({}) passes --annotation: requests come from annotations only.",
                    v.text, v.source
                ),
            ),
            Some(v) => EnvRequests::Set(
                true,
                format!(
                    "Docker {} ({}) cannot pass --annotation (needs Docker >= {ANNOTATIONS_SINCE}): accept GPU_QUOTA_* env requests.",
                    v.text, v.source
                ),
            ),
            None => EnvRequests::Unknown(format!(
                "could not tell the Docker version (no daemon answered, no dockerd on PATH): env_requests in {} left as it is; \
                 Docker < {ANNOTATIONS_SINCE} needs env_requests = true (or run again with --docker-version)",
                super::gqconfig::CONFIG
            )),
        }
    }

    fn plan_install(&self, fs: &dyn FsView, runtime: &str) -> Result<EnginePlan, EngineError> {
        let path = Path::new(DAEMON_JSON);
        let before = fs.read(path)?;
        let after = add_runtime(before.as_deref(), runtime).map_err(|e| e.at(path))?;
        Ok(EnginePlan {
            changes: vec![FileChange::config(DAEMON_JSON, before, Some(after))],
            notes: vec![],
        })
    }

    fn plan_uninstall(&self, fs: &dyn FsView) -> Result<EnginePlan, EngineError> {
        let path = Path::new(DAEMON_JSON);
        let Some(before) = fs.read(path)? else {
            return Ok(EnginePlan::default());
        };
        let backup = fs.read(&backup_path(path))?;
        let mut plan = EnginePlan::default();
        if let Some(after) = remove_runtime(&before, backup.as_deref()).map_err(|e| e.at(path))? {
            plan.changes
                .push(FileChange::config(DAEMON_JSON, Some(before), Some(after)));
        }
        Ok(plan)
    }

    fn installed_runtime(&self, fs: &dyn FsView) -> Result<Option<String>, EngineError> {
        let Some(b) = fs.read(Path::new(DAEMON_JSON))? else {
            return Ok(None);
        };
        let v: serde_json::Value = match serde_json::from_slice(&b) {
            Ok(v) => v,
            Err(_) => return Ok(None),
        };
        Ok(v.get("runtimes")
            .and_then(|r| r.get(RUNTIME_NAME))
            .and_then(|r| r.get("path"))
            .and_then(|p| p.as_str())
            .map(String::from))
    }

    fn finish(&self, ctx: &Ctx, installed: bool) -> Vec<String> {
        let mut out = Vec::new();
        let pid_file = reload::docker_pid_file(std::fs::read(DAEMON_JSON).ok().as_deref());
        let how = format!("systemctl reload docker   (or: kill -HUP $(cat {pid_file}))");
        if ctx.root_given {
            out.push(format!(
                "  --root given: no daemon signalled; on the target system run: {how}"
            ));
        } else if !ctx.may_signal() {
            out.push(format!(
                "  dockerd not signalled (--no-reload); to apply: {how}"
            ));
        } else {
            let r = reload::reload(
                &reload::HostSystemd,
                "docker.service",
                "dockerd",
                std::path::Path::new(&pid_file),
                libc::SIGHUP,
            );
            match r {
                Ok(done @ (Reloaded::Systemd(_) | Reloaded::Pid(_))) => {
                    let by = match done {
                        Reloaded::Systemd(u) => format!("systemctl reload {u}"),
                        Reloaded::Pid(p) => format!("SIGHUP to pid {p} from {pid_file}"),
                        Reloaded::NotRunning(_) => String::new(),
                    };
                    out.push(format!(
                        "  reloaded dockerd ({by}); runtimes are reloaded live, no restart needed"
                    ));
                    if !installed
                        && !has_runtimes_key(&std::fs::read(DAEMON_JSON).unwrap_or_default())
                    {
                        // Measured with dockerd 20.10: a reload leaves the runtime list alone
                        // unless daemon.json has a `runtimes` key (or exists at all).
                        out.push(
                            "  note: dockerd reloads its runtime list only from a daemon.json that has a \"runtimes\" key,\n\
                             \x20       so the running dockerd still lists gpu-quota until it restarts: systemctl restart docker"
                                .into(),
                        );
                    }
                }
                Ok(Reloaded::NotRunning(why)) => out.push(format!(
                    "  dockerd not signalled ({why}); a running dockerd reads the change on: {how}"
                )),
                Err(e) => out.push(format!("  could not reload dockerd ({e}); to apply: {how}")),
            }
        }
        if installed {
            out.push("verify:  docker info --format '{{json .Runtimes}}' | grep gpu-quota".into());
            out.push("run:     docker run --rm --runtime gpu-quota --annotation vram=8g IMAGE ...   (Docker >= 24)".into());
            out.push("         docker run --rm --runtime gpu-quota -e GPU_QUOTA_VRAM=8g IMAGE ...   (older Docker)".into());
        }
        out
    }
}

fn has_runtimes_key(b: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(b)
        .map(|v| v.get("runtimes").is_some())
        .unwrap_or(false)
}

/// Why daemon.json cannot be edited.
#[derive(Debug)]
pub enum JsonError {
    Syntax(serde_json::Error),
    Shape(String),
}

impl JsonError {
    fn at(self, path: &Path) -> EngineError {
        match self {
            JsonError::Syntax(err) => EngineError::BadJson { path: path.to_path_buf(), err },
            JsonError::Shape(what) => EngineError::invalid(
                path,
                what,
                "fix that entry by hand (see `man dockerd`, section daemon configuration file), then run the command again; nothing was changed",
            ),
        }
    }
}

/// The content for a daemon.json that does not exist yet (or is empty).
fn fresh(runtime: &str) -> Vec<u8> {
    format!("{{\n  \"runtimes\": {{\n    \"{RUNTIME_NAME}\": {{\n      \"path\": {}\n    }}\n  }}\n}}\n", jstr(runtime))
        .into_bytes()
}

fn jstr(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// daemon.json with our runtime registered (unchanged bytes when it already is).
pub fn add_runtime(before: Option<&[u8]>, runtime: &str) -> Result<Vec<u8>, JsonError> {
    let raw = before.unwrap_or_default();
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(fresh(runtime));
    }
    let text = validate(raw)?;
    let s = text.as_bytes();
    let top = object_at(s, ws(s, 0));
    let style = Style::of(text, &top);
    let rt_value = J::O(vec![("path", J::S(runtime.to_string()))]);
    let Some(ri) = top.last("runtimes") else {
        let v = J::O(vec![(RUNTIME_NAME, rt_value)]);
        return Ok(insert_member(text, &top, "runtimes", &v, &style).into_bytes());
    };
    let rm = &top.members[ri];
    if s[rm.value_start] != b'{' {
        return Err(JsonError::Shape("\"runtimes\" is not a JSON object".into()));
    }
    let robj = object_at(s, rm.value_start);
    let Some(gi) = robj.last(RUNTIME_NAME) else {
        return Ok(insert_member(text, &robj, RUNTIME_NAME, &rt_value, &style).into_bytes());
    };
    let gm = &robj.members[gi];
    if s[gm.value_start] != b'{' {
        // Not something docker accepts anyway: replace it with ours.
        return Ok(splice(
            text,
            gm.value_start,
            gm.value_end,
            &render(&rt_value, &style, &line_indent(text, gm.key_start)),
        ));
    }
    let gobj = object_at(s, gm.value_start);
    match gobj.last("path") {
        Some(pi) => {
            let pm = &gobj.members[pi];
            let cur: Option<String> =
                serde_json::from_str(&text[pm.value_start..pm.value_end]).ok();
            if cur.as_deref() == Some(runtime) {
                Ok(raw.to_vec())
            } else {
                Ok(splice(text, pm.value_start, pm.value_end, &jstr(runtime)))
            }
        }
        None => {
            Ok(insert_member(text, &gobj, "path", &J::S(runtime.to_string()), &style).into_bytes())
        }
    }
}

/// daemon.json without our runtime, or `None` when it is not there. The `runtimes` object
/// goes too when it is left empty and was not in the backup (install created it).
pub fn remove_runtime(before: &[u8], backup: Option<&[u8]>) -> Result<Option<Vec<u8>>, JsonError> {
    if before.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let text = validate(before)?;
    let s = text.as_bytes();
    let top = object_at(s, ws(s, 0));
    let Some(ri) = top.last("runtimes") else {
        return Ok(None);
    };
    let rm = &top.members[ri];
    if s[rm.value_start] != b'{' {
        return Ok(None);
    }
    let robj = object_at(s, rm.value_start);
    let Some(gi) = robj.last(RUNTIME_NAME) else {
        return Ok(None);
    };
    let out = remove_member(text, &robj, gi);
    if robj.members.len() > 1 {
        return Ok(Some(out.into_bytes()));
    }
    let runtimes_was_there = backup
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .map(|v| v.get("runtimes").is_some())
        .unwrap_or(false);
    if runtimes_was_there {
        return Ok(Some(out.into_bytes()));
    }
    let s2 = out.as_bytes();
    let top2 = object_at(s2, ws(s2, 0));
    let ri2 = top2.last("runtimes").expect("runtimes is still there");
    Ok(Some(remove_member(&out, &top2, ri2).into_bytes()))
}

fn validate(raw: &[u8]) -> Result<&str, JsonError> {
    let v: serde_json::Value = serde_json::from_slice(raw).map_err(JsonError::Syntax)?;
    if !v.is_object() {
        return Err(JsonError::Shape(
            "the top level is not a JSON object".into(),
        ));
    }
    // Valid JSON is valid UTF-8.
    Ok(std::str::from_utf8(raw).expect("valid JSON is UTF-8"))
}

// ---- a span scanner over JSON text already validated by serde_json ----

struct Member {
    key: String,
    key_start: usize,
    key_end: usize,
    value_start: usize,
    value_end: usize,
}

struct Obj {
    open: usize,
    close: usize,
    members: Vec<Member>,
}

impl Obj {
    /// Index of the last member named `key` (the one a JSON decoder keeps).
    fn last(&self, key: &str) -> Option<usize> {
        self.members.iter().rposition(|m| m.key == key)
    }
}

fn ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

fn string_end(s: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while s[j] != b'"' {
        j += if s[j] == b'\\' { 2 } else { 1 };
    }
    j + 1
}

fn value_end(s: &[u8], i: usize) -> usize {
    match s[i] {
        b'"' => string_end(s, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match s[j] {
                    b'"' => {
                        j = string_end(s, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            j
        }
    }
}

fn object_at(s: &[u8], open: usize) -> Obj {
    debug_assert_eq!(s[open], b'{');
    let mut members = Vec::new();
    let mut i = ws(s, open + 1);
    if s[i] == b'}' {
        return Obj {
            open,
            close: i,
            members,
        };
    }
    loop {
        let key_start = i;
        let key_end = string_end(s, i);
        let key: String = serde_json::from_slice(&s[key_start..key_end]).unwrap_or_default();
        i = ws(s, key_end); // at ':'
        let value_start = ws(s, i + 1);
        let value_end = value_end(s, value_start);
        members.push(Member {
            key,
            key_start,
            key_end,
            value_start,
            value_end,
        });
        i = ws(s, value_end);
        if s[i] == b',' {
            i = ws(s, i + 1);
        } else {
            return Obj {
                open,
                close: i,
                members,
            };
        }
    }
}

/// The whitespace that starts the line holding byte `at`.
fn line_indent(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
    text[start..]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// How the file is laid out: one line or one member per line, the indentation step, and the
/// text between a key and its value.
struct Style {
    multiline: bool,
    unit: String,
    colon: String,
}

impl Style {
    fn of(text: &str, top: &Obj) -> Style {
        match top.members.first() {
            None => Style {
                multiline: true,
                unit: "  ".into(),
                colon: ": ".into(),
            },
            Some(m) => {
                let sep = &text[top.open + 1..m.key_start];
                let multiline = sep.contains('\n');
                let unit = match sep.rfind('\n') {
                    Some(i) if i + 1 < sep.len() => sep[i + 1..].to_string(),
                    _ => "  ".into(),
                };
                Style {
                    multiline,
                    unit,
                    colon: text[m.key_end..m.value_start].to_string(),
                }
            }
        }
    }
}

/// A value we write: a string or an object.
enum J {
    S(String),
    O(Vec<(&'static str, J)>),
}

fn render(v: &J, st: &Style, indent: &str) -> String {
    match v {
        J::S(s) => jstr(s),
        J::O(members) if st.multiline => {
            let inner = format!("{indent}{}", st.unit);
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{inner}{}{}{}", jstr(k), st.colon, render(v, st, &inner)))
                .collect();
            format!("{{\n{}\n{indent}}}", body.join(",\n"))
        }
        J::O(members) => {
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}{}{}", jstr(k), st.colon, render(v, st, "")))
                .collect();
            format!("{{{}}}", body.join(", "))
        }
    }
}

fn splice(text: &str, from: usize, to: usize, with: &str) -> Vec<u8> {
    format!("{}{}{}", &text[..from], with, &text[to..]).into_bytes()
}

/// Insert `"key": value` as the last member of `obj`, laid out like its siblings.
fn insert_member(text: &str, obj: &Obj, key: &str, v: &J, st: &Style) -> String {
    match obj.members.last() {
        Some(last) => {
            let n = obj.members.len();
            let delim = if n >= 2 {
                text[..last.key_start].rfind(',').unwrap()
            } else {
                obj.open
            };
            let sep = &text[delim + 1..last.key_start];
            let colon = &text[last.key_end..last.value_start];
            let multiline = sep.contains('\n');
            let indent = match sep.rfind('\n') {
                Some(i) => sep[i + 1..].to_string(),
                None => String::new(),
            };
            let outer = line_indent(text, obj.open);
            let unit = indent
                .strip_prefix(outer.as_str())
                .filter(|u| !u.is_empty())
                .unwrap_or(&st.unit)
                .to_string();
            let local = Style {
                multiline,
                unit,
                colon: colon.to_string(),
            };
            let member = format!(",{sep}{}{colon}{}", jstr(key), render(v, &local, &indent));
            format!(
                "{}{}{}",
                &text[..last.value_end],
                member,
                &text[last.value_end..]
            )
        }
        None => {
            let outer = line_indent(text, obj.open);
            let inner = if st.multiline {
                let indent = format!("{outer}{}", st.unit);
                format!(
                    "\n{indent}{}{}{}\n{outer}",
                    jstr(key),
                    st.colon,
                    render(v, st, &indent)
                )
            } else {
                format!("{}{}{}", jstr(key), st.colon, render(v, st, ""))
            };
            format!("{}{}{}", &text[..obj.open + 1], inner, &text[obj.close..])
        }
    }
}

/// Remove member `idx` of `obj` with its separator; an object left empty becomes `{}`.
fn remove_member(text: &str, obj: &Obj, idx: usize) -> String {
    let m = &obj.members;
    let (from, to) = if idx > 0 {
        (m[idx - 1].value_end, m[idx].value_end)
    } else if m.len() > 1 {
        (m[0].key_start, m[1].key_start)
    } else {
        (obj.open + 1, obj.close)
    };
    format!("{}{}", &text[..from], &text[to..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::fsutil::MemFs;
    use crate::engines::tests::round_trip;

    const RT: &str = "/usr/local/bin/gpu-quota-runtime";

    fn add(s: &str) -> String {
        String::from_utf8(add_runtime(Some(s.as_bytes()), RT).unwrap()).unwrap()
    }
    fn remove(s: &str, backup: Option<&str>) -> Option<String> {
        remove_runtime(s.as_bytes(), backup.map(str::as_bytes))
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn fresh_file() {
        let out = String::from_utf8(add_runtime(None, RT).unwrap()).unwrap();
        assert_eq!(
            out,
            "{\n  \"runtimes\": {\n    \"gpu-quota\": {\n      \"path\": \"/usr/local/bin/gpu-quota-runtime\"\n    }\n  }\n}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["runtimes"]["gpu-quota"]["path"], RT);
        assert_eq!(add_runtime(Some(b"  \n"), RT).unwrap(), out.as_bytes());
    }

    #[test]
    fn keeps_other_keys_order_and_layout() {
        let src = "{\n    \"log-level\": \"warn\",\n    \"runtimes\": {\n        \"nvidia\": {\n            \"path\": \"nvidia-container-runtime\",\n            \"runtimeArgs\": []\n        }\n    },\n    \"default-runtime\": \"runc\"\n}\n";
        let out = add(src);
        assert_eq!(
            out,
            "{\n    \"log-level\": \"warn\",\n    \"runtimes\": {\n        \"nvidia\": {\n            \"path\": \"nvidia-container-runtime\",\n            \"runtimeArgs\": []\n        },\n        \"gpu-quota\": {\n            \"path\": \"/usr/local/bin/gpu-quota-runtime\"\n        }\n    },\n    \"default-runtime\": \"runc\"\n}\n"
        );
        assert_eq!(remove(&out, Some(src)).unwrap(), src);
    }

    #[test]
    fn adds_runtimes_object_when_missing() {
        let src = "{\n  \"storage-driver\": \"overlay2\",\n  \"debug\": true\n}";
        let out = add(src);
        assert_eq!(
            out,
            "{\n  \"storage-driver\": \"overlay2\",\n  \"debug\": true,\n  \"runtimes\": {\n    \"gpu-quota\": {\n      \"path\": \"/usr/local/bin/gpu-quota-runtime\"\n    }\n  }\n}"
        );
        // Created by us: the empty runtimes object goes too.
        assert_eq!(remove(&out, Some(src)).unwrap(), src);
        assert_eq!(remove(&out, None).unwrap(), src);
    }

    #[test]
    fn compact_one_line_file() {
        let src = "{\"debug\":true,\"runtimes\":{\"runsc\":{\"path\":\"/usr/bin/runsc\"}}}";
        let out = add(src);
        assert_eq!(
            out,
            "{\"debug\":true,\"runtimes\":{\"runsc\":{\"path\":\"/usr/bin/runsc\"},\"gpu-quota\":{\"path\":\"/usr/local/bin/gpu-quota-runtime\"}}}"
        );
        assert_eq!(remove(&out, Some(src)).unwrap(), src);
    }

    #[test]
    fn empty_objects() {
        assert_eq!(add("{}\n"), String::from_utf8(fresh(RT)).unwrap());
        let src = "{\n  \"runtimes\": {}\n}\n";
        let out = add(src);
        assert_eq!(out, "{\n  \"runtimes\": {\n    \"gpu-quota\": {\n      \"path\": \"/usr/local/bin/gpu-quota-runtime\"\n    }\n  }\n}\n");
        // The backup had `runtimes`: it stays (empty).
        assert_eq!(remove(&out, Some(src)).unwrap(), src);
    }

    #[test]
    fn idempotent_and_updates_path() {
        let once = add("{\"a\": 1}");
        assert_eq!(add(&once), once);
        let other = String::from_utf8(
            add_runtime(Some(once.as_bytes()), "/opt/gq/gpu-quota-runtime").unwrap(),
        )
        .unwrap();
        assert_eq!(other, once.replace(RT, "/opt/gq/gpu-quota-runtime"));
    }

    #[test]
    fn our_runtime_first_of_several() {
        let src = "{\"runtimes\": {\"gpu-quota\": {\"path\": \"/x\"}, \"b\": {\"path\": \"/b\"}}}";
        assert_eq!(
            remove(src, Some("{}")).unwrap(),
            "{\"runtimes\": {\"b\": {\"path\": \"/b\"}}}"
        );
        assert_eq!(remove("{\"a\": 1}", None), None);
    }

    #[test]
    fn errors() {
        match add_runtime(Some(b"{\"a\": 1,}"), RT) {
            Err(JsonError::Syntax(e)) => assert_eq!(e.line(), 1),
            _ => panic!("bad JSON refused"),
        }
        assert!(matches!(
            add_runtime(Some(b"[1]"), RT),
            Err(JsonError::Shape(_))
        ));
        assert!(matches!(
            add_runtime(Some(b"{\"runtimes\": 3}"), RT),
            Err(JsonError::Shape(_))
        ));
        let e = add_runtime(Some(b"{"), RT)
            .unwrap_err()
            .at(Path::new(DAEMON_JSON))
            .to_string();
        assert!(
            e.starts_with("/etc/docker/daemon.json: not valid JSON"),
            "{e}"
        );
    }

    #[test]
    fn strings_with_escapes_and_braces() {
        let src = "{\"x\": \"a}\\\"{,\", \"runtimes\": {\"r\": {\"path\": \"/p\", \"runtimeArgs\": [\"--a\", \"{\"]}}}";
        let out = add(src);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["x"], "a}\"{,");
        assert_eq!(v["runtimes"]["gpu-quota"]["path"], RT);
        assert_eq!(remove(&out, Some(src)).unwrap(), src);
    }

    #[test]
    fn planner_round_trips() {
        let (inst, _) = round_trip(EngineKind::Docker, MemFs::new(), RT);
        assert!(inst.get(DAEMON_JSON).unwrap().contains(RT));
        let src = "{\n\t\"dns\": [\"1.1.1.1\"],\n\t\"runtimes\": {\"x\": {\"path\": \"/x\"}}\n}\n";
        let (inst, _) = round_trip(EngineKind::Docker, MemFs::new().with(DAEMON_JSON, src), RT);
        assert!(inst.get("/etc/docker/daemon.json.gpu-quota.bak").is_some());
    }

    #[test]
    fn uninstall_after_user_edit_is_surgical() {
        let src = "{\n  \"debug\": true\n}\n";
        let mut fs = MemFs::new().with(DAEMON_JSON, src);
        let p = crate::engines::plan::plan_install(&Docker::default(), &fs, RT).unwrap();
        fs.apply(&p.changes);
        let edited = fs
            .get(DAEMON_JSON)
            .unwrap()
            .replace("\"debug\": true", "\"debug\": false");
        fs.put(DAEMON_JSON, edited.into_bytes());
        let u = crate::engines::plan::plan_uninstall(&Docker::default(), &fs).unwrap();
        fs.apply(&u.changes);
        assert_eq!(fs.get(DAEMON_JSON).unwrap(), "{\n  \"debug\": false\n}\n");
        assert!(
            fs.get("/etc/docker/daemon.json.gpu-quota.bak").is_some(),
            "backup kept"
        );
        assert!(u.notes.iter().any(|n| n.contains("changed after install")));
    }
}
