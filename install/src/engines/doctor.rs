//! `gpu-quota doctor`'s engine checks: which engines are on the host, whether each has the
//! gpu-quota runtime registered, and whether requests can reach it (Docker >= 24 passes
//! annotations, older Docker needs `env_requests = true`; containerd passes only the keys
//! in the runtime's `pod_annotations`).
//!
//! Pure over its inputs (the configuration tree, which programs exist, the Docker version),
//! so the verdicts are unit-tested.
use super::check::{Check, Host, Verdict};
use super::containerd;
use super::dockerver::ANNOTATIONS_SINCE;
use super::model::{EngineKind, CLUSTER_ANNOTATIONS};
use super::registry::engine_of;
use gpuquota_core::formats::keys;

fn check(name: &str, verdict: Verdict, text: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        verdict,
        text: text.into(),
    }
}

/// The request keys that must reach the runtime through CRI pod annotations:
/// every key a request is made with, from the one list of them (a hand list
/// here once missed `sm`, so a configuration that dropped it passed).
const REQUEST_KEYS: &[&str] = &keys::ANNOTATION_KEYS;

/// containerd's own rule for annotation patterns (Go's `path.Match`).
use super::glob::path_match as glob_match;

fn registered(h: &Host, kind: EngineKind) -> Option<String> {
    engine_of(kind).installed_runtime(h.fs).ok().flatten()
}

pub fn checks(h: &Host) -> Vec<Check> {
    let mut out = Vec::new();

    // docker
    let name = "engine docker";
    let present = (h.program)("dockerd") || h.docker_version.is_some();
    match (present, registered(h, EngineKind::Docker)) {
        (false, None) => out.push(check(name, Verdict::Info, "not installed")),
        (_, None) => out.push(check(
            name,
            Verdict::Info,
            "installed, runtime gpu-quota not registered (gpu-quota install docker)",
        )),
        (_, Some(rt)) => {
            let (verdict, how) = match &h.docker_version {
                Some(v) if v.passes_annotations() => (
                    Verdict::Ok,
                    format!("Docker {} passes --annotation vram=… to it", v.text),
                ),
                Some(v) if h.env_requests => (
                    Verdict::Ok,
                    format!(
                        "Docker {} cannot pass annotations (needs >= {ANNOTATIONS_SINCE}); env_requests = true: -e GPU_QUOTA_VRAM=… reaches it",
                        v.text
                    ),
                ),
                Some(v) => (
                    Verdict::Fail,
                    format!(
                        "Docker {} cannot pass annotations (needs >= {ANNOTATIONS_SINCE}) and env_requests is false: no request can reach it (gpu-quota install docker sets env_requests = true)",
                        v.text
                    ),
                ),
                None => (
                    Verdict::Info,
                    "daemon version unknown (not running?): annotations reach the runtime from Docker 24 on".into(),
                ),
            };
            out.push(check(
                name,
                verdict,
                format!("runtime gpu-quota -> {rt}; {how}"),
            ));
        }
    }

    // containerd (CRI)
    let name = "engine containerd";
    match (
        (h.program)("containerd"),
        registered(h, EngineKind::Containerd),
    ) {
        (false, None) => out.push(check(name, Verdict::Info, "not installed")),
        (_, None) => out.push(check(
            name,
            Verdict::Info,
            "installed, CRI runtime handler gpu-quota not registered (gpu-quota install containerd; ctr run --runc-binary needs none)",
        )),
        (_, Some(rt))
            if containerd::installed_entry(h.fs, "container_annotations").is_some() =>
        {
            // cluster mode (install containerd --kubernetes): the device plugin's keys as
            // container annotations, and no pod annotation may reach the runtime
            let ca = containerd::installed_entry(h.fs, "container_annotations").unwrap_or_default();
            let pa = containerd::installed_entry(h.fs, "pod_annotations").unwrap_or_default();
            let has_all = CLUSTER_ANNOTATIONS
                .iter()
                .all(|k| ca.split(',').any(|p| glob_match(p, k)));
            let (verdict, text) = if has_all && pa.is_empty() {
                (Verdict::Ok, format!("runtime handler gpu-quota -> {rt}; cluster mode: container_annotations [{ca}] pass the device plugin's keys, no pod_annotations"))
            } else if !pa.is_empty() {
                (Verdict::Fail, format!("runtime handler gpu-quota -> {rt}: cluster mode, but pod_annotations [{pa}] let pod authors grant themselves slices (gpu-quota install containerd --kubernetes removes them)"))
            } else {
                (Verdict::Fail, format!("runtime handler gpu-quota -> {rt}: container_annotations [{ca}] drop the device plugin's keys (gpu-quota install containerd --kubernetes)"))
            };
            out.push(check(name, verdict, text));
            // DRA claims (gpu-quota-dra) reach containers as CDI devices
            out.push(match containerd::cdi_enabled(h.fs) {
                Some(true) => check("containerd CDI", Verdict::Ok, "enable_cdi is on: DRA claims prepared by gpu-quota-dra reach their containers"),
                Some(false) => check("containerd CDI", Verdict::Info, "enable_cdi is off: the device plugin works, but DRA claims prepared by gpu-quota-dra never reach their containers; for DRA set enable_cdi = true (and cdi_spec_dirs with /var/run/cdi) under [plugins.\"io.containerd.grpc.v1.cri\"] and restart containerd (docs/kubernetes.md)"),
                None => check("containerd CDI", Verdict::Info, "no readable containerd config"),
            });
        }
        (_, Some(rt)) => {
            let pats = containerd::installed_entry(h.fs, "pod_annotations").unwrap_or_default();
            let pats: Vec<&str> = pats.split(',').filter(|p| !p.is_empty()).collect();
            let missing: Vec<&str> = REQUEST_KEYS
                .iter()
                .copied()
                .filter(|k| !pats.iter().any(|p| glob_match(p, k)))
                .collect();
            if missing.is_empty() {
                out.push(check(
                    name,
                    Verdict::Ok,
                    format!(
                        "runtime handler gpu-quota -> {rt}; pod_annotations [{}] pass the request keys",
                        pats.join(", ")
                    ),
                ));
            } else {
                out.push(check(
                    name,
                    Verdict::Fail,
                    format!(
                        "runtime handler gpu-quota -> {rt}, but pod_annotations [{}] drop {}: those pod annotations never reach the runtime (gpu-quota install containerd adds them)",
                        pats.join(", "),
                        missing.join(", ")
                    ),
                ));
            }
        }
    }

    // podman, CRI-O
    for (kind, prog, how) in [
        (
            EngineKind::Podman,
            "podman",
            "--annotation vram=… reaches it",
        ),
        (
            EngineKind::Crio,
            "crio",
            "pod annotations reach it as they are",
        ),
    ] {
        let name = format!("engine {}", kind.name());
        match ((h.program)(prog), registered(h, kind)) {
            (false, None) => out.push(check(&name, Verdict::Info, "not installed")),
            (_, None) => out.push(check(
                &name,
                Verdict::Info,
                format!(
                    "installed, runtime gpu-quota not registered (gpu-quota install {})",
                    kind.name()
                ),
            )),
            (_, Some(rt)) => out.push(check(
                &name,
                Verdict::Ok,
                format!("runtime gpu-quota -> {rt}; {how}"),
            )),
        }
    }
    // the NVIDIA Container Toolkit beside gpu-quota
    out.extend(super::toolkit_doctor::checks(h));
    out
}

#[cfg(test)]
mod tests {
    use super::super::dockerver::DockerVersion;
    use super::super::fsutil::MemFs;
    use super::*;

    fn v(t: &str) -> Option<DockerVersion> {
        let (major, minor) = super::super::dockerver::parse(t).unwrap();
        Some(DockerVersion {
            major,
            minor,
            text: t.into(),
            source: "test".into(),
        })
    }
    fn run(fs: &MemFs, progs: &[&str], dv: Option<DockerVersion>, env: bool) -> Vec<Check> {
        let has = |p: &str| progs.contains(&p);
        checks(&Host {
            fs,
            program: &has,
            docker_version: dv,
            env_requests: env,
        })
    }
    fn find<'a>(c: &'a [Check], n: &str) -> &'a Check {
        c.iter().find(|c| c.name == n).unwrap()
    }
    const DOCKER: &str =
        r#"{"runtimes": {"gpu-quota": {"path": "/usr/local/bin/gpu-quota-runtime"}}}"#;

    #[test]
    fn nothing_installed() {
        let c = run(&MemFs::new(), &[], None, false);
        assert_eq!(c.len(), 5, "four engines and the NVIDIA Container Toolkit");
        assert!(
            c.iter()
                .all(|c| c.verdict == Verdict::Info && c.text.starts_with("not installed")),
            "{c:?}"
        );
    }

    #[test]
    fn docker_versions_and_env_requests() {
        let fs = MemFs::new().with("/etc/docker/daemon.json", DOCKER);
        let c = run(&fs, &["dockerd"], v("26.1.5"), false);
        assert_eq!(find(&c, "engine docker").verdict, Verdict::Ok, "{c:?}");
        assert!(find(&c, "engine docker")
            .text
            .contains("passes --annotation"));
        let c = run(&fs, &["dockerd"], v("20.10.24"), true);
        assert_eq!(find(&c, "engine docker").verdict, Verdict::Ok);
        let c = run(&fs, &["dockerd"], v("20.10.24"), false);
        assert_eq!(find(&c, "engine docker").verdict, Verdict::Fail, "{c:?}");
        let c = run(&MemFs::new(), &["dockerd"], v("26.1.5"), false);
        assert!(find(&c, "engine docker").text.contains("not registered"));
    }

    #[test]
    fn containerd_pod_annotations() {
        let ok = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-quota]\n\
                  runtime_type = \"io.containerd.runc.v2\"\npod_annotations = [\"vram\", \"gpu\", \"gpus\", \"sm\", \"sm-procs\", \"vram-limit\", \"vram-priority\", \"gpu-quota.io/*\"]\n\
                  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-quota.options]\nBinaryName = \"/x/gpu-quota-runtime\"\n";
        let fs = MemFs::new().with("/etc/containerd/config.toml", ok);
        let c = run(&fs, &["containerd"], None, false);
        assert_eq!(find(&c, "engine containerd").verdict, Verdict::Ok, "{c:?}");
        let bad = ok.replace(", \"gpu-quota.io/*\"", "");
        let fs = MemFs::new().with("/etc/containerd/config.toml", &bad);
        let c = run(&fs, &["containerd"], None, false);
        let d = find(&c, "engine containerd");
        assert_eq!(d.verdict, Verdict::Fail, "{c:?}");
        assert!(d.text.contains("drop gpu-quota.io/vram"), "{}", d.text);
        assert!(glob_match("gpu-quota.io/*", "gpu-quota.io/vram") && !glob_match("vram", "vram2"));
        // a config from before burst limits drops vram-limit: flagged
        let old = ok.replace(", \"vram-limit\", \"vram-priority\"", "");
        let fs = MemFs::new().with("/etc/containerd/config.toml", &old);
        let d = find(&run(&fs, &["containerd"], None, false), "engine containerd").clone();
        assert_eq!(d.verdict, Verdict::Fail, "{}", d.text);
        assert!(d.text.contains("drop vram-limit"), "{}", d.text);
    }

    /// The doctor's verdict on a containerd config whose gpu-quota runtime
    /// passes the pod annotations `pats` (TOML list items).
    fn containerd_verdict(pats: &str) -> Check {
        let conf = format!("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-quota]\n\
                 runtime_type = \"io.containerd.runc.v2\"\npod_annotations = [{pats}]\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-quota.options]\nBinaryName = \"/x/gpu-quota-runtime\"\n");
        let fs = MemFs::new().with("/etc/containerd/config.toml", &conf);
        let c = run(&fs, &["containerd"], None, false);
        find(&c, "engine containerd").clone()
    }

    /// A configuration that passes the memory keys but drops the compute
    /// share's is flagged, naming `sm`; every key of formats::keys is
    /// checked, so a key added there is checked here without an edit.
    #[test]
    fn containerd_pod_annotations_that_drop_sm_are_flagged() {
        let d = containerd_verdict(
            r#""vram", "gpu", "gpus", "gpu-quota.io/vram", "gpu-quota.io/gpu", "gpu-quota.io/gpus""#,
        );
        assert_eq!(d.verdict, Verdict::Fail, "{}", d.text);
        assert!(
            d.text.contains("drop sm, ") && d.text.contains("gpu-quota.io/sm"),
            "{}",
            d.text
        );
        // control: what `gpu-quota install containerd` writes passes
        let all: Vec<String> = keys::ANNOTATION_PATTERNS
            .iter()
            .map(|p| format!("{p:?}"))
            .collect();
        let d = containerd_verdict(&all.join(", "));
        assert_eq!(d.verdict, Verdict::Ok, "{}", d.text);
    }

    /// Doctor matched pod_annotations patterns by prefix only
    /// ("gpu*" passed "gpu-quota.io/vram"), containerd matches them with Go's
    /// path.Match (`*` stops at '/', classes work): doctor said Ok for a key
    /// containerd drops, and Fail for a key it passes.
    #[test]
    fn containerd_pod_annotations_are_matched_as_containerd_does() {
        // control: the patterns containerd passes every key with
        let d = containerd_verdict(
            r#""[v]ram", "gpu?", "gpu", "s[m]", "sm-pro?s", "vram-?imit", "vram-priority", "gpu-quota.io/*""#,
        );
        assert_eq!(d.verdict, Verdict::Ok, "{}", d.text);
        // `*` does not cross '/': containerd drops gpu-quota.io/vram
        let d = containerd_verdict(
            r#""vram", "sm", "sm-procs", "vram-limit", "vram-priority", "gpu*""#,
        );
        assert_eq!(d.verdict, Verdict::Fail, "{}", d.text);
        assert!(d.text.contains("drop gpu-quota.io/vram"), "{}", d.text);
    }

    #[test]
    fn containerd_cluster_mode() {
        let ok = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-quota]\n\
                  runtime_type = \"io.containerd.runc.v2\"\ncontainer_annotations = [\"gpu-quota.io/vram\", \"gpu-quota.io/gpu\"]\n\
                  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu-quota.options]\nBinaryName = \"/x/gpu-quota-runtime\"\n";
        let c = run(
            &MemFs::new().with("/etc/containerd/config.toml", ok),
            &["containerd"],
            None,
            false,
        );
        let d = find(&c, "engine containerd");
        assert_eq!(d.verdict, Verdict::Ok, "{c:?}");
        assert!(d.text.contains("cluster mode"), "{}", d.text);
        // CDI: off by default in a version 2 config (containerd 1.x), on when set,
        // and on by default in version 3 (containerd 2.x) unless turned off
        let cdi = |cfg: &str| {
            let c = run(
                &MemFs::new().with("/etc/containerd/config.toml", cfg),
                &["containerd"],
                None,
                false,
            );
            let d = find(&c, "containerd CDI");
            (d.verdict.clone(), d.text.clone())
        };
        let (v, t) = cdi(ok);
        assert_eq!(v, Verdict::Info, "{t}");
        assert!(
            t.contains("enable_cdi is off") && t.contains("enable_cdi = true"),
            "{t}"
        );
        let on = format!("{ok}[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n");
        assert_eq!(cdi(&on).0, Verdict::Ok, "{}", cdi(&on).1);
        let v3 = ok
            .replace("version = 2", "version = 3")
            .replace("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime");
        assert_eq!(cdi(&v3).0, Verdict::Ok, "{}", cdi(&v3).1);
        let v3_off =
            format!("{v3}[plugins.\"io.containerd.cri.v1.runtime\"]\nenable_cdi = false\n");
        assert_eq!(cdi(&v3_off).0, Verdict::Info, "{}", cdi(&v3_off).1);
        let leaky = ok.replace(
            "container_annotations",
            "pod_annotations = [\"vram\"]\ncontainer_annotations",
        );
        let c = run(
            &MemFs::new().with("/etc/containerd/config.toml", &leaky),
            &["containerd"],
            None,
            false,
        );
        assert_eq!(
            find(&c, "engine containerd").verdict,
            Verdict::Fail,
            "{c:?}"
        );
        let short = ok.replace(", \"gpu-quota.io/gpu\"", "");
        let c = run(
            &MemFs::new().with("/etc/containerd/config.toml", &short),
            &["containerd"],
            None,
            false,
        );
        assert_eq!(
            find(&c, "engine containerd").verdict,
            Verdict::Fail,
            "{c:?}"
        );
    }
}
