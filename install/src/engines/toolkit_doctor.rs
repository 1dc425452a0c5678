//! `gpu-quota doctor`: the NVIDIA Container Toolkit beside gpu-quota. Whether
//! the toolkit is installed (its programs on PATH, its config, CDI specs naming
//! `nvidia.com/gpu`), in which mode (the legacy `nvidia-container-runtime-hook` that Docker's
//! `--gpus` calls, or CDI), and whether `--gpus` / CDI devices together with
//! `--runtime gpu-quota` are handled here.
//!
//! Pure over its inputs (the file tree and which programs exist): unit-tested.
use super::check::{Check, Host, Verdict};
use std::path::Path;

/// The toolkit's programs, by role.
const LEGACY_HOOK: &str = "nvidia-container-runtime-hook";
const PROGRAMS: [&str; 4] = [
    LEGACY_HOOK,
    "nvidia-ctk",
    "nvidia-cdi-hook",
    "nvidia-container-runtime",
];
const TOOLKIT_CONFIG: &str = "/etc/nvidia-container-runtime/config.toml";
/// Where CDI specs live (the CDI defaults: static, then generated).
const CDI_DIRS: [&str; 3] = ["/etc/cdi", "/var/run/cdi", "/run/cdi"];
/// A spec larger than this is not read (it is still counted as present).
const MAX_SPEC: usize = 4 << 20;

fn check(verdict: Verdict, text: String) -> Check {
    Check {
        name: "nvidia container toolkit".into(),
        verdict,
        text,
    }
}

/// `mode = "…"` of the toolkit's config (its `[nvidia-container-runtime]` table).
fn runtime_mode(text: &str) -> Option<String> {
    let mut table = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            table = l.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            continue;
        }
        if table != "nvidia-container-runtime" {
            continue;
        }
        if let Some(v) = l.strip_prefix("mode") {
            if let Some(v) = v.trim_start().strip_prefix('=') {
                let v = v.split('#').next().unwrap_or("").trim().trim_matches('"');
                return Some(v.to_string());
            }
        }
    }
    None
}

/// CDI spec files that declare NVIDIA GPUs (`kind: nvidia.com/gpu`).
fn nvidia_cdi_specs(h: &Host) -> Vec<String> {
    let mut out = vec![];
    for dir in CDI_DIRS {
        for name in h.fs.list_dir(Path::new(dir)) {
            if !(name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json")) {
                continue;
            }
            let p = Path::new(dir).join(&name);
            let Ok(Some(b)) = h.fs.read(&p) else { continue };
            let t = String::from_utf8_lossy(&b[..b.len().min(MAX_SPEC)]);
            if t.contains("nvidia.com/gpu") {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

pub fn checks(h: &Host) -> Vec<Check> {
    let programs: Vec<&str> = PROGRAMS
        .iter()
        .copied()
        .filter(|p| (h.program)(p))
        .collect();
    let config = h.fs.read(Path::new(TOOLKIT_CONFIG)).ok().flatten();
    let specs = nvidia_cdi_specs(h);
    if programs.is_empty() && config.is_none() && specs.is_empty() {
        return vec![check(
            Verdict::Info,
            "not installed (docker run --gpus and Compose device reservations fail without it; gpu-quota needs none of it: --annotation vram=…)".into(),
        )];
    }
    let mut found = vec![];
    if !programs.is_empty() {
        found.push(format!("{} on PATH", programs.join(", ")));
    }
    if let Some(c) = &config {
        let mode = runtime_mode(&String::from_utf8_lossy(c)).unwrap_or_else(|| "auto".into());
        found.push(format!("{TOOLKIT_CONFIG} (mode {mode})"));
    }
    if !specs.is_empty() {
        found.push(format!(
            "CDI specs for nvidia.com/gpu: {}",
            specs.join(", ")
        ));
    }
    let legacy = programs.contains(&LEGACY_HOOK);
    let mut modes = vec![];
    if legacy {
        modes.push("legacy hook: docker run --gpus and Compose device reservations add nvidia-container-runtime-hook to the container's spec");
    }
    if !specs.is_empty() {
        modes.push(
            "CDI: --device nvidia.com/gpu=… (and Docker >= 29.2's --gpus) inject device nodes",
        );
    }
    if modes.is_empty() {
        modes.push("neither the legacy hook nor CDI specs: docker run --gpus fails on this host");
    }
    vec![
        check(Verdict::Info, format!("installed: {}", found.join("; "))),
        check(
            Verdict::Ok,
            format!(
                "{}. With --runtime gpu-quota and a vram request, gpu-quota owns the GPU devices: the legacy hook is removed from the spec, CDI GPU nodes are narrowed to the slice, --gpus device=N / N / all choose the slice's GPUs, a contradiction is refused; without a vram request the container is the toolkit's, untouched",
                modes.join("; ")
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::fsutil::MemFs;
    use super::*;

    fn run(fs: &MemFs, progs: &[&str]) -> Vec<Check> {
        let has = |p: &str| progs.contains(&p);
        checks(&Host {
            fs,
            program: &has,
            docker_version: None,
            env_requests: false,
        })
    }

    #[test]
    fn not_installed() {
        let c = run(&MemFs::new(), &["dockerd"]);
        assert_eq!(c.len(), 1);
        assert!(c[0].text.starts_with("not installed"), "{c:?}");
    }

    #[test]
    fn legacy_and_cdi_modes() {
        let fs = MemFs::new().with(
            TOOLKIT_CONFIG,
            "[nvidia-container-cli]\nmode = \"x\"\n[nvidia-container-runtime]\nmode = \"cdi\" # comment\n",
        );
        let c = run(&fs, &[LEGACY_HOOK, "nvidia-ctk"]);
        assert!(
            c[0].text
                .contains("nvidia-container-runtime-hook, nvidia-ctk on PATH"),
            "{c:?}"
        );
        assert!(c[0].text.contains("(mode cdi)"), "{c:?}");
        assert!(c[1].text.starts_with("legacy hook"), "{c:?}");
        assert!(!c[1].text.contains("CDI:"), "{c:?}");
        let fs = MemFs::new()
            .with(
                "/var/run/cdi/nvidia.yaml",
                "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n",
            )
            .with("/etc/cdi/other.yaml", "kind: vendor.com/fpga\n");
        let c = run(&fs, &["nvidia-cdi-hook"]);
        assert!(
            c[0].text.contains("/var/run/cdi/nvidia.yaml") && !c[0].text.contains("other.yaml"),
            "{c:?}"
        );
        assert!(c[1].text.starts_with("CDI:"), "{c:?}");
        let c = run(&MemFs::new().with(TOOLKIT_CONFIG, ""), &[]);
        assert!(c[0].text.contains("(mode auto)"));
        assert!(c[1].text.starts_with("neither"), "{c:?}");
    }
}
