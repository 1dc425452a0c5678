//! runc's command line: global flags, the command, its flags and the
//! container id. Only what the shim needs is interpreted; the original
//! argument vector is always what runc receives.
use std::ffi::OsString;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct RuncArgs {
    pub root: Option<String>,
    pub log: Option<String>,
    pub log_format: Option<String>,
    pub command: Option<String>,
    pub bundle: Option<String>,
    pub id: Option<String>,
    pub detach: bool,
    /// `run --keep`: runc leaves the stopped container for a later delete.
    pub keep: bool,
    /// Index of the command in argv (what precedes it are global flags).
    pub command_index: Option<usize>,
    /// `--version`/`-v` before any command (runc's global flag).
    pub version: bool,
    /// `--help`/`-h` before any command, or the command `help`.
    pub help: bool,
}

/// `argv` with `--keep` right after the command (for `run`).
pub fn with_keep(argv: &[OsString], command_index: usize) -> Vec<OsString> {
    let mut v = argv.to_vec();
    v.insert(command_index + 1, "--keep".into());
    v
}

const GLOBAL_VALUE: &[&str] = &["root", "log", "log-format", "criu", "rootless"];
const CMD_VALUE: &[&str] = &[
    "bundle",
    "b",
    "console-socket",
    "pid-file",
    "preserve-fds",
    "process",
    "p",
    "cwd",
    "env",
    "e",
    "user",
    "u",
    "additional-gids",
    "g",
    "cap",
    "c",
    "apparmor",
    "process-label",
    "signal",
    "s",
    "format",
    "f",
    "image-path",
    "work-path",
    "parent-path",
    "page-server",
    "manage-cgroups-mode",
    "empty-ns",
    "ext-unix-sk",
    "status-fd",
    "lazy-pages",
    "config",
    "l",
    "l",
];

/// Split `--name=value` / `-name` forms; returns (name, inline value).
fn flag(a: &str) -> Option<(&str, Option<&str>)> {
    let s = a.strip_prefix("--").or_else(|| a.strip_prefix('-'))?;
    if s.is_empty() {
        return None;
    }
    Some(match s.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (s, None),
    })
}

pub fn parse(argv: &[OsString]) -> RuncArgs {
    let mut r = RuncArgs::default();
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut i = 0;
    // global flags
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            i += 1;
            break;
        }
        let Some((name, inline)) = flag(a) else { break };
        match name {
            "version" | "v" => r.version = true,
            "help" | "h" => r.help = true,
            _ => {}
        }
        if GLOBAL_VALUE.contains(&name) {
            let v = match inline {
                Some(v) => Some(v.to_string()),
                None => {
                    i += 1;
                    args.get(i).cloned()
                }
            };
            match name {
                "root" => r.root = v,
                "log" => r.log = v,
                "log-format" => r.log_format = v,
                _ => {}
            }
        }
        i += 1;
    }
    r.command = args.get(i).cloned();
    r.command_index = r.command.as_ref().map(|_| i);
    if r.command.as_deref() == Some("help") {
        r.help = true;
    }
    i += 1;
    // command flags and the first positional (the container id)
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            if r.id.is_none() {
                r.id = args.get(i + 1).cloned();
            }
            break;
        }
        match flag(a) {
            Some((name, inline)) if CMD_VALUE.contains(&name) => {
                let v = match inline {
                    Some(v) => Some(v.to_string()),
                    None => {
                        i += 1;
                        args.get(i).cloned()
                    }
                };
                if name == "bundle" || name == "b" {
                    r.bundle = v;
                }
            }
            Some((name, _)) => {
                if name == "detach" || name == "d" {
                    r.detach = true;
                }
                if name == "keep" {
                    r.keep = true;
                }
            }
            None => {
                if r.id.is_none() {
                    r.id = Some(a.clone());
                }
            }
        }
        i += 1;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    fn p(s: &str) -> RuncArgs {
        parse(&s.split_whitespace().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn docker_create() {
        let r = p("--root /var/run/docker/runtime-runc/moby --log /x/log.json --log-format json create --bundle /b --pid-file /x/pid abc123");
        assert_eq!(r.root.as_deref(), Some("/var/run/docker/runtime-runc/moby"));
        assert_eq!(r.log.as_deref(), Some("/x/log.json"));
        assert_eq!(r.log_format.as_deref(), Some("json"));
        assert_eq!(r.command.as_deref(), Some("create"));
        assert_eq!(r.bundle.as_deref(), Some("/b"));
        assert_eq!(r.id.as_deref(), Some("abc123"));
    }

    #[test]
    fn other_forms() {
        let r = p("--debug --systemd-cgroup --root=/r run -d -b=/b --console-socket /s c1");
        assert_eq!(
            (
                r.root.as_deref(),
                r.command.as_deref(),
                r.bundle.as_deref(),
                r.id.as_deref(),
                r.detach
            ),
            (Some("/r"), Some("run"), Some("/b"), Some("c1"), true)
        );
        let r = p("delete --force c2");
        assert_eq!(
            (r.command.as_deref(), r.id.as_deref()),
            (Some("delete"), Some("c2"))
        );
        let r = p("-root /r state c3");
        assert_eq!(
            (r.root.as_deref(), r.command.as_deref(), r.id.as_deref()),
            (Some("/r"), Some("state"), Some("c3"))
        );
        assert_eq!(p("--version").command, None);
        let argv: Vec<OsString> = "--root /r run -b /b c4"
            .split_whitespace()
            .map(OsString::from)
            .collect();
        let r = parse(&argv);
        assert_eq!((r.command_index, r.keep), (Some(2), false));
        let k = with_keep(&argv, 2);
        assert_eq!(k[3], OsString::from("--keep"));
        let r = parse(&k);
        assert_eq!(
            (r.keep, r.id.as_deref(), r.bundle.as_deref()),
            (true, Some("c4"), Some("/b"))
        );
    }

    #[test]
    fn version_and_help() {
        assert!(p("--version").version && p("-v").version);
        assert!(p("--help").help && p("-h").help && p("help").help && p("--debug help").help);
        assert!(!p("create --bundle /b c1").help && !p("create --bundle /b c1").version);
        // a container called "help" is not a help request
        assert!(!p("start help").help);
    }
}
