//! What a hook in config.json does, read from its path and every argument,
//! never from its file name alone: engines and installers wrap the
//! toolkit's programs (containerd runs `containerd oci-hook --
//! nvidia-container-cli … configure --device=N … {{rootfs}}` for `ctr run
//! --gpus`; Kata and peer-pod setups install `…/nvidia-container-toolkit.sh`;
//! a hook may be `sh -c "… nvidia-container-cli configure …"`). A program
//! is named by its basename without extension wherever it appears: the path,
//! any argument, any word of an argument.
//!
//! A hook whose path and arguments name none of the toolkit's programs is
//! not recognised (an opaque wrapper is indistinguishable from any other
//! hook); docs/security.md says so.
use serde_json::Value;

/// The toolkit's legacy OCI hook (`nvidia-container-runtime-hook`, its old
/// name `nvidia-container-toolkit`): mounts the GPUs that
/// `NVIDIA_VISIBLE_DEVICES` in `process.env` names.
pub const LEGACY_HOOKS: [&str; 2] = ["nvidia-container-runtime-hook", "nvidia-container-toolkit"];
/// The program the legacy hook drives; as a hook itself (containerd's
/// `oci-hook`, nerdctl) its `configure --device=…` names the GPUs.
pub const CLI: &str = "nvidia-container-cli";
/// The toolkit's CDI hooks (kept: they set up driver files, no devices).
pub const CDI_HOOKS: [&str; 2] = ["nvidia-cdi-hook", "nvidia-ctk"];

/// Arguments looked at per hook, and words looked at per hook (a hook is
/// written by the engine, but its size is still not ours to trust).
const MAX_ARGS: usize = 256;
const MAX_WORDS: usize = 4096;
const MAX_ARG_LEN: usize = 64 << 10;

/// What a hook does to the container's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The legacy hook, by any name or wrapper. `docker`: exactly the entry
    /// dockerd writes for `--gpus` (path and `args[0]` the hook's own name,
    /// then `prestart`, in the prestart stage).
    Legacy { docker: bool },
    /// `nvidia-container-cli … configure`: the GPUs of its `--device`
    /// options (joined as the CLI joins repeated ones; empty: none).
    Cli { devices: String },
    /// A CDI hook of the toolkit.
    Cdi,
    /// Nothing of the toolkit's.
    Other,
}

/// Does this hook hand the container GPUs (and so go when gpu-quota owns
/// them)?
impl Role {
    pub fn hands_out_gpus(&self) -> bool {
        matches!(self, Role::Legacy { .. } | Role::Cli { .. })
    }
}

/// A program name as written: the basename, without any extension
/// (`/usr/share/oci/hooks/nvidia-container-toolkit.sh` →
/// `nvidia-container-toolkit`).
fn program(word: &str) -> &str {
    let base = word.rsplit('/').next().unwrap_or(word);
    base.split('.').next().unwrap_or(base)
}

/// The path and arguments, split into words at whitespace and shell
/// punctuation (a `sh -c` script names its programs as words).
fn words(h: &Value) -> Vec<&str> {
    let path = h.get("path").and_then(Value::as_str).into_iter();
    let args = h
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(MAX_ARGS)
        .filter_map(Value::as_str)
        .map(|a| &a[..floor_char(a, MAX_ARG_LEN)]);
    path.chain(args)
        .flat_map(|a| {
            a.split(|c: char| c.is_whitespace() || ";|&()'\"`<>".contains(c))
                .filter(|w| !w.is_empty())
        })
        .take(MAX_WORDS)
        .collect()
}

fn floor_char(s: &str, max: usize) -> usize {
    let mut i = s.len().min(max);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The `--device` values after `configure` (`--device=X`, `--device X`,
/// `-d X`, `-dX`), joined with commas.
fn cli_devices(after_configure: &[&str]) -> String {
    let mut out: Vec<&str> = vec![];
    let mut it = after_configure.iter();
    while let Some(w) = it.next() {
        let v = if let Some(v) = w.strip_prefix("--device=") {
            Some(v)
        } else if *w == "--device" || *w == "-d" {
            it.next().copied()
        } else {
            w.strip_prefix("-d")
        };
        out.extend(v.filter(|v| !v.is_empty()));
    }
    out.join(",")
}

/// What hook `h` (in `stage`) does.
pub fn role(stage: &str, h: &Value) -> Role {
    let w = words(h);
    // the toolkit's CDI hooks by their own path first: their arguments name
    // directories, which could end in a toolkit program's name
    let first = w.first().map_or("", |x| program(x));
    if CDI_HOOKS.contains(&first) {
        return Role::Cdi;
    }
    if let Some(i) = w.iter().position(|x| program(x) == CLI) {
        let rest = &w[i + 1..];
        // `nvidia-container-cli` without `configure` (info, list) hands out
        // nothing; a wrapper naming it without arguments may pass its own:
        // every GPU then
        return match rest.iter().position(|x| *x == "configure") {
            Some(c) => Role::Cli {
                devices: cli_devices(&rest[c + 1..]),
            },
            None if rest
                .iter()
                .any(|x| ["info", "list", "--version"].contains(x)) =>
            {
                Role::Other
            }
            None => Role::Cli {
                devices: "all".into(),
            },
        };
    }
    if w.iter().any(|x| LEGACY_HOOKS.contains(&program(x))) {
        let path = h.get("path").and_then(Value::as_str).unwrap_or("");
        let args: Vec<&str> = h
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let name = path.rsplit('/').next().unwrap_or("");
        let docker = stage == "prestart"
            && name == LEGACY_HOOKS[0]
            && args.len() == 2
            && args[0].rsplit('/').next() == Some(name)
            && args[1] == "prestart";
        return Role::Legacy { docker };
    }
    Role::Other
}

/// Every hook of the spec, with its stage.
pub fn entries(config: &Value) -> impl Iterator<Item = (&str, &Value)> {
    config
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter())
        .filter_map(|(stage, v)| Some((stage.as_str(), v.as_array()?)))
        .flat_map(|(stage, a)| a.iter().map(move |h| (stage, h)))
}

/// Remove every hook that hands out GPUs; how many went.
pub fn remove_gpu_hooks(config: &mut Value) -> usize {
    let mut removed = 0;
    if let Some(hooks) = config.get_mut("hooks").and_then(Value::as_object_mut) {
        for (stage, list) in hooks.iter_mut() {
            if let Some(list) = list.as_array_mut() {
                let before = list.len();
                list.retain(|h| !role(stage, h).hands_out_gpus());
                removed += before - list.len();
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// containerd's `contrib/nvidia` (ctr run --gpus 1, nerdctl --gpus).
    fn ctr(device: &str) -> Value {
        json!({"path": "/usr/bin/containerd", "args": ["containerd", "oci-hook", "--", "/usr/bin/nvidia-container-cli", "--load-kmods", "configure", format!("--device={device}"), "--compute", "--compat32", "--graphics", "--utility", "--video", "--display", "--pid={{pid}}", "{{rootfs}}"]})
    }

    #[test]
    fn recognised_by_what_they_run() {
        assert_eq!(
            role("prestart", &ctr("1")),
            Role::Cli {
                devices: "1".into()
            }
        );
        assert_eq!(
            role("prestart", &ctr("GPU-ab,0")),
            Role::Cli {
                devices: "GPU-ab,0".into()
            }
        );
        // repeated and short forms are joined, as the CLI joins them
        let h = json!({"path": "/opt/bin/nvidia-container-cli", "args": ["nvidia-container-cli", "configure", "--device", "0", "-d", "1", "-d2", "/rootfs"]});
        assert_eq!(
            role("createRuntime", &h),
            Role::Cli {
                devices: "0,1,2".into()
            }
        );
        // configure without --device: no GPU
        let h = json!({"path": "/usr/bin/nvidia-container-cli", "args": ["x", "configure", "--utility", "/r"]});
        assert_eq!(
            role("prestart", &h),
            Role::Cli {
                devices: String::new()
            }
        );
        // in a shell script
        let h = json!({"path": "/bin/sh", "args": ["sh", "-c", "exec /usr/bin/nvidia-container-cli --load-kmods configure --device=1 --pid=$PID \"$ROOTFS\""]});
        assert_eq!(
            role("prestart", &h),
            Role::Cli {
                devices: "1".into()
            }
        );
        // a wrapper that passes its own arguments: every GPU
        let h = json!({"path": "/usr/local/bin/gpu-wrap", "args": ["gpu-wrap", "/usr/bin/nvidia-container-cli"]});
        assert_eq!(
            role("prestart", &h),
            Role::Cli {
                devices: "all".into()
            }
        );
        assert_eq!(
            role(
                "prestart",
                &json!({"path": "/usr/bin/nvidia-container-cli", "args": ["c", "info"]})
            ),
            Role::Other
        );
    }

    #[test]
    fn the_legacy_hook_under_any_name() {
        let docker = json!({"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"], "env": ["PATH=/usr/bin"]});
        assert_eq!(role("prestart", &docker), Role::Legacy { docker: true });
        assert_eq!(
            role("createRuntime", &docker),
            Role::Legacy { docker: false }
        );
        // NVIDIA's hooks.d file (older toolkit) and Kata's wrapper script
        let hooksd = json!({"path": "/usr/bin/nvidia-container-toolkit", "args": ["nvidia-container-toolkit", "prestart"]});
        assert_eq!(role("prestart", &hooksd), Role::Legacy { docker: false });
        let kata = json!({"path": "/usr/share/oci/hooks/prestart/nvidia-container-toolkit.sh", "args": ["nvidia-container-toolkit.sh", "prestart"]});
        assert_eq!(role("prestart", &kata), Role::Legacy { docker: false });
        let wrapped = json!({"path": "/usr/bin/env", "args": ["env", "/usr/bin/nvidia-container-runtime-hook", "-debug", "prestart"]});
        assert_eq!(role("prestart", &wrapped), Role::Legacy { docker: false });
        // the CDI hooks, and others
        let cdi = json!({"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]});
        assert_eq!(role("createContainer", &cdi), Role::Cdi);
        let cdi = json!({"path": "/usr/bin/nvidia-ctk", "args": ["nvidia-ctk", "hook", "update-ldcache", "--folder", "/usr/lib/nvidia-container-toolkit"]});
        assert_eq!(role("createContainer", &cdi), Role::Cdi);
        assert_eq!(
            role("prestart", &json!({"path": "/usr/bin/other-hook"})),
            Role::Other
        );
        assert_eq!(
            role(
                "prestart",
                &json!({"path": "/usr/bin/containerd", "args": ["containerd", "oci-hook", "--", "/x/y"]})
            ),
            Role::Other
        );
    }

    #[test]
    fn hostile_sizes_are_bounded() {
        let many: Vec<String> = (0..100_000).map(|i| format!("a{i}")).collect();
        let mut args = many.clone();
        args.push("nvidia-container-cli".into());
        assert_eq!(
            role("prestart", &json!({"path": "/x", "args": args})),
            Role::Other,
            "looked at a bounded prefix"
        );
        let long = format!("{}é nvidia-container-toolkit", "x".repeat(MAX_ARG_LEN - 1));
        assert_eq!(
            role("prestart", &json!({"path": "/x", "args": [long]})),
            Role::Other
        );
    }
}
