//! CRI-O: a runtime handler `gpu-quota` in the drop-in `/etc/crio/crio.conf.d/99-gpu-quota.conf`.
//!
//! No `allowed_annotations`: that list is only for CRI-O's own experimental annotations
//! (`io.kubernetes.cri-o.*`, ...), and CRI-O refuses a runtime handler that lists any other key
//! ("invalid allowed_annotation"). Ordinary pod annotations such as `gpu-quota.io/vram` reach
//! the container's config.json without it.
use super::dropin;
use super::engine::Engine;
use super::model::{toml_str, Ctx, EngineError, EngineKind, EnginePlan, RUNTIME_NAME};

pub const DROPIN: &str = "/etc/crio/crio.conf.d/99-gpu-quota.conf";
/// runc state of containers of this handler (separate from runc's /run/runc).
pub const RUNTIME_ROOT: &str = "/run/gpu-quota-runc";

#[derive(Debug, Clone, Copy, Default)]
pub struct Crio {
    /// Cluster mode (`--kubernetes`): the same handler, documented for gpu-quota-device-plugin.
    pub kubernetes: bool,
}

/// Cluster mode needs no other key: CRI-O puts only a container's own annotations (the
/// kubelet's, with the device plugin's `gpu-quota.io/vram` and `gpu-quota.io/gpu`) into its
/// config.json; pod annotations reach only the pod's infra container, which gpu-quota never
/// charges.
const CLUSTER_NOTE: &str = "# Cluster mode (--kubernetes): slices come from the resource gpu-quota.io/vram through\n\
     # gpu-quota-device-plugin, whose Allocate answer the kubelet passes as container annotations.\n\
     # CRI-O gives a workload container only its own annotations; pod annotations reach the\n\
     # pod's infra container alone, which gpu-quota never charges: they grant nothing.\n";

pub fn dropin_text(runtime: &str, kubernetes: bool) -> String {
    let (flag, note) = if kubernetes {
        (" --kubernetes", CLUSTER_NOTE)
    } else {
        (
            "",
            "# Pod annotations (gpu-quota.io/vram, ...) reach config.json as they are, no allowed_annotations needed.\n",
        )
    };
    format!(
        "# Added by `gpu-quota install crio{flag}`; `gpu-quota uninstall crio` removes this file.\n\
         # Kubernetes selects it with a RuntimeClass whose handler is \"{RUNTIME_NAME}\".\n\
         {note}\
         [crio.runtime.runtimes.{RUNTIME_NAME}]\n\
         runtime_path = {}\n\
         runtime_type = \"oci\"\n\
         runtime_root = {}\n",
        toml_str(runtime),
        toml_str(RUNTIME_ROOT)
    )
}

impl Engine for Crio {
    fn kind(&self) -> EngineKind {
        EngineKind::Crio
    }

    fn env_requests(&self) -> super::model::EnvRequests {
        super::model::EnvRequests::Set(
            false,
            "CRI-O passes pod annotations: requests come from annotations only.".into(),
        )
    }

    fn plan_install(
        &self,
        fs: &dyn super::fsutil::FsView,
        runtime: &str,
    ) -> Result<EnginePlan, EngineError> {
        dropin::plan_install(fs, DROPIN, dropin_text(runtime, self.kubernetes))
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
            .get("crio")
            .and_then(|c| c.get("runtime"))
            .and_then(|r| r.get("runtimes"))
            .and_then(|r| r.get(RUNTIME_NAME))
            .and_then(|r| r.get("runtime_path"))
            .and_then(|p| p.as_str())
            .map(String::from))
    }

    fn finish(&self, ctx: &Ctx, installed: bool) -> Vec<String> {
        let mut out = vec!["  restart CRI-O to apply:  sudo systemctl restart crio   (running containers keep running)".to_string()];
        if ctx.root_given {
            out.insert(
                0,
                "  --root given: nothing restarted; on the target system:".into(),
            );
        }
        if installed {
            out.push(
                "verify:  sudo crio config 2>/dev/null | grep -A4 'runtimes.gpu-quota'".into(),
            );
            out.push(if self.kubernetes {
                "k8s:     cluster mode: requests only from the device plugin's container annotations; kubectl apply -f deploy/kubernetes/ (docs/kubernetes.md)".into()
            } else {
                "k8s:     RuntimeClass handler \"gpu-quota\" + pod annotation gpu-quota.io/vram: 8g (docs/install.md)".into()
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::fsutil::MemFs;
    use crate::engines::tests::round_trip;

    const RT: &str = "/usr/local/bin/gpu-quota-runtime";

    #[test]
    fn drop_in() {
        let fs = MemFs::new().with(
            "/etc/crio/crio.conf.d/10-crio.conf",
            "[crio.runtime]\ndefault_runtime = \"crun\"\n",
        );
        let (inst, _) = round_trip(EngineKind::Crio, fs, RT);
        let doc: toml_edit::DocumentMut = inst.get(DROPIN).unwrap().parse().unwrap();
        let h = &doc["crio"]["runtime"]["runtimes"]["gpu-quota"];
        assert_eq!(h["runtime_path"].as_str(), Some(RT));
        assert_eq!(h["runtime_type"].as_str(), Some("oci"));
        assert_eq!(h["runtime_root"].as_str(), Some(RUNTIME_ROOT));
        assert!(h.get("allowed_annotations").is_none());
        assert_eq!(
            Crio::default().installed_runtime(&inst).unwrap().as_deref(),
            Some(RT)
        );
        round_trip(EngineKind::Crio, MemFs::new(), RT);
    }
}
