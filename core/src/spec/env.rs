//! `process.env` edits: the variables that name GPUs (the toolkit's
//! `NVIDIA_VISIBLE_DEVICES`, CUDA's `CUDA_VISIBLE_DEVICES`) point at the
//! slice, and a DRA claim's variable (its token) is taken out so that runc
//! and the container never see it.
use super::Modifier;
use crate::toolkit::{CUDA_VISIBLE_DEVICES, VISIBLE_DEVICES};
use gpuquota_formats::keys;
use serde_json::Value;

/// Built with [`Environment::slice_gpus`], [`Environment::without_claim`]
/// and [`Environment::mps_client`]; the default edits nothing. Apart from
/// an MPS client's variables, only definitions already in the config are
/// rewritten or removed, and a config without `process.env` keeps none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Every definition of each variable gets this value.
    rewrite: Vec<(&'static str, String)>,
    /// Definitions whose text starts with one of these go.
    remove: Vec<&'static str>,
    /// Set once each, appended; every other definition of the name goes.
    set: Vec<(&'static str, String)>,
}

impl Environment {
    /// The variables that name GPUs name exactly `uuids` (every definition:
    /// the toolkit reads the last, glibc's getenv the first).
    pub fn slice_gpus(mut self, uuids: &[String]) -> Self {
        let v = uuids.join(",");
        for var in [VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES] {
            self.rewrite.push((var, v.clone()));
        }
        self
    }

    /// Every DRA claim variable (`GPU_QUOTA_CLAIM_…`) goes.
    pub fn without_claim(mut self) -> Self {
        self.remove.push(keys::ENV_CLAIM_PREFIX);
        self
    }

    /// An MPS client of the GPU's daemon at its part of `share` (the
    /// share split over its processes) and a per-process limit of the
    /// slice. The image's own definitions go: the driver reads the first,
    /// and an image must not choose its share. (A process can still change
    /// its environment before CUDA reads it; libgpuquota.so sets the same
    /// values again at `cuInit`.)
    pub fn mps_client<U>(mut self, share: &gpuquota_formats::grant::GpuGrant<U>) -> Self {
        use gpuquota_formats::mps;
        self.set.extend([
            (mps::ENV_PIPE_DIRECTORY, mps::CONTAINER_PIPE_DIR.to_string()),
            (
                mps::ENV_ACTIVE_THREAD_PERCENTAGE,
                mps::thread_percentage(share.sm_percent, share.sm_procs)
                    .as_str()
                    .to_string(),
            ),
            (
                mps::ENV_PINNED_DEVICE_MEM_LIMIT,
                mps::pinned_limit(share.vram_bytes).as_str().to_string(),
            ),
        ]);
        self
    }
}

impl Modifier for Environment {
    fn what(&self) -> &'static str {
        "environment"
    }
    fn modify(&self, config: &mut Value) -> Result<(), String> {
        let Some(env) = config
            .pointer_mut("/process/env")
            .and_then(Value::as_array_mut)
        else {
            return Ok(());
        };
        env.retain(|e| {
            !e.as_str()
                .is_some_and(|s| self.remove.iter().any(|p| s.starts_with(p)))
        });
        env.retain(|e| {
            !e.as_str().is_some_and(|s| {
                self.set
                    .iter()
                    .any(|(var, _)| s.strip_prefix(var).is_some_and(|r| r.starts_with('=')))
            })
        });
        for (var, value) in &self.set {
            env.push(Value::String(format!("{var}={value}")));
        }
        for (var, value) in &self.rewrite {
            let prefix = format!("{var}=");
            for e in env.iter_mut() {
                if e.as_str().is_some_and(|s| s.starts_with(&prefix)) {
                    *e = Value::String(format!("{prefix}{value}"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuquota_formats::grant::GpuGrant;
    use serde_json::json;

    #[test]
    fn gpu_variables_name_the_slice_in_every_definition_and_none_is_added() {
        let mut v = json!({"process": {"env": [
            "NVIDIA_VISIBLE_DEVICES=all", "A=b", "NVIDIA_VISIBLE_DEVICES=void",
            "CUDA_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES_X=keep", 7
        ]}});
        let e = Environment::default().slice_gpus(&["GPU-1".into(), "GPU-2".into()]);
        e.modify(&mut v).unwrap();
        assert_eq!(
            v["process"]["env"],
            json!([
                "NVIDIA_VISIBLE_DEVICES=GPU-1,GPU-2",
                "A=b",
                "NVIDIA_VISIBLE_DEVICES=GPU-1,GPU-2",
                "CUDA_VISIBLE_DEVICES=GPU-1,GPU-2",
                "NVIDIA_VISIBLE_DEVICES_X=keep",
                7
            ])
        );
        let once = v.clone();
        e.modify(&mut v).unwrap();
        assert_eq!(v, once, "idempotent");
        // a variable the image does not set stays unset
        let mut bare = json!({"process": {"env": ["PATH=/bin"]}});
        e.modify(&mut bare).unwrap();
        assert_eq!(bare["process"]["env"], json!(["PATH=/bin"]));
        let mut none = json!({"process": {}});
        e.modify(&mut none).unwrap();
        assert_eq!(none, json!({"process": {}}));
    }

    #[test]
    fn an_mps_client_gets_its_share_whatever_the_image_set() {
        let mut v = json!({"process": {"env": [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100", "PATH=/bin",
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/mine", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT_X=keep"
        ]}});
        let share = GpuGrant {
            uuid: "GPU-a",
            index: 0,
            vram_bytes: 8 << 30,
            sm_percent: 25,
            sm_user: Some(0),
            sm_procs: 1,
            burst: None,
        };
        let e = Environment::default().mps_client(&share);
        e.modify(&mut v).unwrap();
        assert_eq!(
            v["process"]["env"],
            json!([
                "PATH=/bin",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT_X=keep",
                "CUDA_MPS_PIPE_DIRECTORY=/run/gpu-quota/mps",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M"
            ])
        );
        let once = v.clone();
        e.modify(&mut v).unwrap();
        assert_eq!(v, once, "idempotent");
        // a share split over 4 processes: each starts at its part
        let e = Environment::default().mps_client(&GpuGrant {
            sm_procs: 4,
            ..share
        });
        e.modify(&mut v).unwrap();
        assert!(v["process"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=6.25")));
    }

    #[test]
    fn a_claims_token_goes_and_nothing_else() {
        let mut v = json!({"process": {"env": [
            "GPU_QUOTA_CLAIM_u_1=secret", "PATH=/bin", "GPU_QUOTA_CLAIM_u_1=secret", "GPU_QUOTA_VRAM=1g",
            "GPU_QUOTA_CLAIM_b"
        ]}});
        Environment::default()
            .without_claim()
            .modify(&mut v)
            .unwrap();
        assert_eq!(
            v["process"]["env"],
            json!(["PATH=/bin", "GPU_QUOTA_VRAM=1g"])
        );
        // the default edits nothing
        let before =
            json!({"process": {"env": ["GPU_QUOTA_CLAIM_u=t", "NVIDIA_VISIBLE_DEVICES=all"]}});
        let mut same = before.clone();
        Environment::default().modify(&mut same).unwrap();
        assert_eq!(same, before);
    }
}
