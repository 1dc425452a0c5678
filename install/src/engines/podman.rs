//! podman: the runtime in a containers.conf drop-in,
//! `/etc/containers/containers.conf.d/gpu-quota.conf` (podman >= 4 reads containers.conf.d):
//! `[engine.runtimes] gpu-quota = ["<runtime>"]`, used as `podman run --runtime gpu-quota`.
//! No other file is touched. No OCI hooks.d file either: gpu-quota-runtime injects its hook
//! into config.json itself, and a hooks.d entry would run the hook a second time (or, with
//! crun or runc as the runtime, outside the quota runtime).
use super::dropin;
use super::engine::Engine;
use super::model::{toml_str, Ctx, EngineError, EngineKind, EnginePlan, RUNTIME_NAME};

pub const DROPIN: &str = "/etc/containers/containers.conf.d/gpu-quota.conf";

pub struct Podman;

pub fn dropin_text(runtime: &str) -> String {
    format!(
        "# Added by `gpu-quota install podman`; `gpu-quota uninstall podman` removes this file.\n\
         # Use it with: podman run --runtime {RUNTIME_NAME} --annotation vram=8g IMAGE ...\n\
         [engine.runtimes]\n\
         {RUNTIME_NAME} = [{}]\n",
        toml_str(runtime)
    )
}

impl Engine for Podman {
    fn kind(&self) -> EngineKind {
        EngineKind::Podman
    }

    fn plan_install(
        &self,
        fs: &dyn super::fsutil::FsView,
        runtime: &str,
    ) -> Result<EnginePlan, EngineError> {
        dropin::plan_install(fs, DROPIN, dropin_text(runtime))
    }

    fn plan_uninstall(&self, fs: &dyn super::fsutil::FsView) -> Result<EnginePlan, EngineError> {
        dropin::plan_uninstall(fs, DROPIN)
    }

    fn installed_runtime(
        &self,
        fs: &dyn super::fsutil::FsView,
    ) -> Result<Option<String>, EngineError> {
        let Some(doc) = dropin::read_toml(fs, DROPIN)? else {
            return Ok(None);
        };
        Ok(doc
            .get("engine")
            .and_then(|e| e.get("runtimes"))
            .and_then(|r| r.get(RUNTIME_NAME))
            .and_then(|a| a.as_array())
            .and_then(|a| a.get(0))
            .and_then(|v| v.as_str())
            .map(String::from))
    }

    fn finish(&self, _ctx: &Ctx, installed: bool) -> Vec<String> {
        if !installed {
            return vec![
                "  podman has no daemon: the next podman command no longer knows the runtime"
                    .into(),
            ];
        }
        vec![
            "  podman has no daemon: the next podman command sees the runtime".into(),
            "verify:  podman --runtime gpu-quota info --format '{{.Host.OCIRuntime.Path}}'".into(),
            "run:     podman run --rm --runtime gpu-quota --annotation vram=8g IMAGE ...".into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::fsutil::MemFs;
    use crate::engines::tests::round_trip;

    const RT: &str = "/usr/local/bin/gpu-quota-runtime";

    #[test]
    fn drop_in_only() {
        let other = "[engine]\ncgroup_manager = \"cgroupfs\"\n";
        let fs = MemFs::new()
            .with(
                "/etc/containers/containers.conf",
                "[containers]\nlog_size_max = -1\n",
            )
            .with("/etc/containers/containers.conf.d/10-local.conf", other);
        let (inst, _) = round_trip(EngineKind::Podman, fs, RT);
        assert_eq!(inst.get(DROPIN).unwrap(), dropin_text(RT));
        assert_eq!(
            inst.get("/etc/containers/containers.conf.d/10-local.conf")
                .unwrap(),
            other
        );
        let doc: toml_edit::DocumentMut = dropin_text(RT).parse().unwrap();
        assert_eq!(doc["engine"]["runtimes"]["gpu-quota"][0].as_str(), Some(RT));
        assert_eq!(
            Podman.installed_runtime(&inst).unwrap().as_deref(),
            Some(RT)
        );
        round_trip(EngineKind::Podman, MemFs::new(), RT);
    }
}
