//! A bundle's config.json, loaded once, edited by the list of modifiers
//! (`spec::apply`), written back at most once.
use super::LifecycleError;
use crate::{fsutil, spec, spec::decode::DecodeError};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct Bundle {
    pub dir: PathBuf,
    pub config: Value,
    mode: u32,
}

impl Bundle {
    pub fn config_path(&self) -> PathBuf {
        spec::config_path(&self.dir)
    }

    /// Load `dir/config.json` (`spec::decode::parse`, the one parse). A
    /// config that is not JSON is [`LifecycleError::RequestInInvalidJson`]
    /// when it seems to ask for GPU memory or carries a DRA claim's
    /// variable, or when runc's decoder may read it all the same (never
    /// fail open), else [`LifecycleError::Json`]; one whose keys runc reads
    /// otherwise is [`LifecycleError::SpecKeys`].
    pub fn load(dir: &Path) -> Result<Bundle, LifecycleError> {
        let path = spec::config_path(dir);
        let bytes = std::fs::read(&path).map_err(|err| LifecycleError::Read {
            path: path.clone(),
            err,
        })?;
        let mode = std::fs::metadata(&path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
            .unwrap_or(0o644);
        let config = spec::decode::parse(&bytes).map_err(|e| match e {
            DecodeError::Json { err, runc_reads_it } => {
                if runc_reads_it || contains_request_key(&bytes) {
                    LifecycleError::RequestInInvalidJson { path, err }
                } else {
                    LifecycleError::Json { path, err }
                }
            }
            DecodeError::Keys(message) => LifecycleError::SpecKeys { path, message },
        })?;
        Ok(Bundle {
            dir: dir.into(),
            config,
            mode,
        })
    }

    /// Whether gpu-quota-runtime prepared this config for a reservation
    /// (its assignment annotation): the hook's one look at the config
    /// besides the mounts it declares, and never a request.
    pub fn prepared_by_runtime(&self) -> bool {
        self.config
            .pointer("/annotations")
            .and_then(|a| a.get(spec::ASSIGNED_ANNOTATION))
            .is_some()
    }

    /// Apply the modifiers, in order (nothing is written yet).
    pub fn apply(&mut self, modifiers: &[&dyn spec::Modifier]) -> Result<(), LifecycleError> {
        spec::apply(&mut self.config, modifiers).map_err(|err| LifecycleError::Edit {
            path: self.config_path(),
            err,
        })
    }

    /// Write the config back atomically, with the mode it had. Not
    /// fsync'd: runc and the hooks read it in this boot, and every engine
    /// writes the bundle anew at its next create (docs/security.md §11).
    pub fn flush(&self) -> Result<(), LifecycleError> {
        let path = self.config_path();
        let mut out = serde_json::to_vec(&self.config).expect("a Value serializes");
        out.push(b'\n');
        fsutil::replace_atomic(&path, &out, self.mode)
            .map_err(|err| LifecycleError::Write { path, err })
    }
}

fn contains_request_key(b: &[u8]) -> bool {
    use gpuquota_formats::keys;
    let s = String::from_utf8_lossy(b);
    s.contains(&format!("\"{}\"", keys::ANN_VRAM))
        || s.contains(keys::ANNOTATION_PREFIX)
        || s.contains(keys::ENV_VRAM)
        // a DRA claim's variable: never run unbound, nor hand
        // its token to runc and the container
        || s.contains(keys::ENV_CLAIM_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_loads_once_applies_and_flushes_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        std::fs::write(&p, br#"{"ociVersion":"1.0.2","zzz":1}"#).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut b = Bundle::load(d.path()).unwrap();
        assert!(!b.prepared_by_runtime());
        let ann = spec::Annotations {
            assigned: "GPU-1".into(),
            record: None,
        };
        b.apply(&[&ann]).unwrap();
        assert!(
            !Bundle::load(d.path()).unwrap().prepared_by_runtime(),
            "nothing written before the flush"
        );
        b.flush().unwrap();
        let again = Bundle::load(d.path()).unwrap();
        assert!(again.prepared_by_runtime());
        assert_eq!(again.config["zzz"], 1);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777,
            0o600
        );
        // an edit that fails names the file and the edit
        let mut bad = Bundle::load(d.path()).unwrap();
        bad.config["annotations"] = serde_json::json!("x");
        let e = bad.apply(&[&ann]).unwrap_err().to_string();
        assert!(e.contains("config.json: annotations:"), "{e}");
        std::fs::write(&p, b"{\"vram\": ").unwrap();
        assert!(matches!(
            Bundle::load(d.path()),
            Err(LifecycleError::RequestInInvalidJson { .. })
        ));
        // a DRA claim's variable in a config serde_json refuses and Go's
        // encoding/json reads (a lone surrogate escape)
        std::fs::write(
            &p,
            b"{\"process\":{\"env\":[\"GPU_QUOTA_CLAIM_u=t\",\"X=\\udc00\"]}}",
        )
        .unwrap();
        assert!(matches!(
            Bundle::load(d.path()),
            Err(LifecycleError::RequestInInvalidJson { .. })
        ));
        std::fs::write(&p, b"{ nope").unwrap();
        assert!(matches!(
            Bundle::load(d.path()),
            Err(LifecycleError::Json { .. })
        ));
    }

    /// A share's user as runc reads it (the last of `uid`/`UID`: 1000,
    /// measured with runc 1.1.5) was read as root's by the one parse, which
    /// admitted a root share. Now the spec is refused before any reading.
    #[test]
    fn a_spec_whose_keys_runc_reads_otherwise_is_refused_at_load() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        for text in [
            r#"{"process":{"user":{"uid":0,"UID":1000},"env":[]},"annotations":{"vram":"1g","sm":"25%"}}"#,
            r#"{"process":{"user":{"uid":0}},"linux":{"namespaces":[{"Type":"user"}],"uidMappings":[{"containerID":0,"hostID":100000,"size":65536}]},"annotations":{"vram":"1g","sm":"25%"}}"#,
            r#"{"Annotations":{"vram":"1g"}}"#,
        ] {
            std::fs::write(&p, text).unwrap();
            match Bundle::load(d.path()) {
                Err(e) => {
                    let m = e.to_string();
                    assert!(m.contains("config.json") && m.contains("runc"), "{m}");
                }
                Ok(b) => panic!(
                    "loaded {text}: gpu-quota reads host uid {:?}",
                    spec::host_uid(&b.config)
                ),
            }
        }
    }
}
