//! The runtime's annotations: the GPUs it assigned (`gpu-quota.io/assigned`,
//! read by `toolkit::detect` in a reused bundle and by the hook) and the
//! record hint (`gpu-quota.io/record`, the hook's shortcut to the ledger
//! record).
use super::{obj, Modifier, ASSIGNED_ANNOTATION, RECORD_ANNOTATION};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Annotations {
    /// The assigned GPUs' UUIDs, comma-separated.
    pub assigned: String,
    /// The reservation's record file; `None` removes a hint the config
    /// came with (a reused bundle must not point the hook elsewhere).
    pub record: Option<String>,
}

impl Modifier for Annotations {
    fn what(&self) -> &'static str {
        "annotations"
    }
    fn modify(&self, config: &mut Value) -> Result<(), String> {
        let ann = obj(config, "annotations")?;
        ann.insert(
            ASSIGNED_ANNOTATION.into(),
            Value::String(self.assigned.clone()),
        );
        match &self.record {
            Some(f) => ann.insert(RECORD_ANNOTATION.into(), Value::String(f.clone())),
            None => ann.remove(RECORD_ANNOTATION),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::record_hint;
    use super::*;
    use serde_json::json;

    fn ann(record: Option<&str>) -> Annotations {
        Annotations {
            assigned: "GPU-1,GPU-2".into(),
            record: record.map(Into::into),
        }
    }

    #[test]
    fn assigned_and_the_record_hint_set_replaced_and_removed() {
        let mut v = json!({"annotations": {"vram": "1g", ASSIGNED_ANNOTATION: "GPU-9"}});
        ann(Some("r-1")).modify(&mut v).unwrap();
        assert_eq!(v["annotations"][ASSIGNED_ANNOTATION], "GPU-1,GPU-2");
        assert_eq!(v["annotations"]["vram"], "1g");
        assert_eq!(record_hint(&v), Some("r-1"));
        let once = v.clone();
        ann(Some("r-1")).modify(&mut v).unwrap();
        assert_eq!(v, once, "idempotent");
        ann(None).modify(&mut v).unwrap();
        assert_eq!(record_hint(&v), None, "a hint without a record is removed");
        let mut bare = json!({"annotations": null});
        ann(None).modify(&mut bare).unwrap();
        assert_eq!(bare["annotations"][ASSIGNED_ANNOTATION], "GPU-1,GPU-2");
        assert!(ann(None).modify(&mut json!({"annotations": "x"})).is_err());
    }
}
