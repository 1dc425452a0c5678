//! `process.env` edits: the variables that name GPUs (the toolkit's
//! `NVIDIA_VISIBLE_DEVICES`, CUDA's `CUDA_VISIBLE_DEVICES`) point at the
//! slice, and a DRA claim's variable (its token) is taken out so that runc
//! and the container never see it.
use super::Modifier;
use crate::toolkit::{CUDA_VISIBLE_DEVICES, VISIBLE_DEVICES};
use gpuquota_formats::keys;
use serde_json::Value;

/// Built with [`Environment::slice_gpus`] and [`Environment::without_claim`];
/// the default edits nothing. Only definitions already in the config are
/// rewritten or removed: none is added, and a config without
/// `process.env` keeps none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Every definition of each variable gets this value.
    rewrite: Vec<(&'static str, String)>,
    /// Definitions whose text starts with one of these go.
    remove: Vec<&'static str>,
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
