//! Allocate: the units the kubelet gave a container become the request the
//! runtime enforces — container annotations `gpu-quota.io/vram=<n>GiB` and
//! `gpu-quota.io/gpu=<uuid>`, which the kubelet passes to the CRI's
//! CreateContainer and the runtime reads like any request. The scheduler's
//! count of units and the node ledger then describe the same slice.
use crate::units::{parse_device_id, Snapshot};
use std::collections::HashMap;

pub use gpuquota_core::formats::keys::{ANN_NS_GPU as GPU_KEY, ANN_NS_VRAM as VRAM_KEY};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    #[error("no devices in the request")]
    Empty,
    #[error("device id {0:?} is not one of this plugin's units")]
    Unknown(String),
    #[error("device id {0:?} appears twice")]
    Duplicate(String),
    #[error("the {units} units given span {gpus} GPUs ({list}); a gpu-quota slice is on one GPU. No GPU on this node had {units} GiB free when the pod was admitted: ask for less, or let the scheduler pick another node")]
    Split {
        units: usize,
        gpus: usize,
        list: String,
    },
}

/// The annotations for one container's units.
pub fn annotations(
    ids: &[String],
    snapshot: &Snapshot,
) -> Result<HashMap<String, String>, AllocateError> {
    if ids.is_empty() {
        return Err(AllocateError::Empty);
    }
    let mut gpus: Vec<&str> = Vec::new();
    // compared as parsed units, not as strings: one unit is one GiB whatever
    // its spelling (parse_device_id also accepts only the canonical one)
    let mut seen: Vec<(&str, u32)> = Vec::new();
    for id in ids {
        let (uuid, n) = parse_device_id(id).ok_or_else(|| AllocateError::Unknown(id.clone()))?;
        match snapshot.gpu(uuid) {
            Some(g) if n < g.units => {}
            _ => return Err(AllocateError::Unknown(id.clone())),
        }
        if seen.contains(&(uuid, n)) {
            return Err(AllocateError::Duplicate(id.clone()));
        }
        seen.push((uuid, n));
        if !gpus.contains(&uuid) {
            gpus.push(uuid);
        }
    }
    if gpus.len() > 1 {
        return Err(AllocateError::Split {
            units: ids.len(),
            gpus: gpus.len(),
            list: gpus.join(", "),
        });
    }
    Ok(HashMap::from([
        (VRAM_KEY.to_string(), format!("{}GiB", ids.len())),
        (GPU_KEY.to_string(), gpus[0].to_string()),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{device_id, GpuUnits};
    use gpuquota_core::request::{EnvRequests, GpuRef, GpuSelector, Request};
    use gpuquota_core::units::Size;

    fn snap() -> Snapshot {
        Snapshot {
            gpus: ["GPU-a", "GPU-b"]
                .iter()
                .enumerate()
                .map(|(i, u)| GpuUnits {
                    uuid: u.to_string(),
                    index: i as u32,
                    units: 16,
                    usable: 16,
                    why: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn annotations_are_the_request_the_runtime_reads() {
        let ids: Vec<String> = (3..11).map(|n| device_id("GPU-b", n)).collect();
        let a = annotations(&ids, &snap()).unwrap();
        assert_eq!(a[VRAM_KEY], "8GiB");
        assert_eq!(a[GPU_KEY], "GPU-b");
        // exactly what the runtime will parse from CreateContainer's annotations
        let m: serde_json::Map<String, serde_json::Value> = a
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let r = Request::from_parts(Some(&m), &[], EnvRequests::Ignored)
            .unwrap()
            .unwrap();
        assert_eq!(r.vram, Size::Bytes(8 << 30));
        assert_eq!(
            r.gpus,
            GpuSelector::List(vec![GpuRef::Uuid("GPU-b".into())])
        );
    }

    #[test]
    fn refusals() {
        let s = snap();
        assert_eq!(annotations(&[], &s), Err(AllocateError::Empty));
        let e = annotations(&["GPU-a_1".into(), "GPU-b_1".into()], &s).unwrap_err();
        assert!(matches!(e, AllocateError::Split { gpus: 2, .. }), "{e}");
        assert!(e.to_string().contains("GPU-a, GPU-b"), "{e}");
        assert!(matches!(
            annotations(&["GPU-a_16".into()], &s),
            Err(AllocateError::Unknown(_))
        ));
        assert!(matches!(
            annotations(&["GPU-z_0".into()], &s),
            Err(AllocateError::Unknown(_))
        ));
        assert!(matches!(
            annotations(&["GPU-a_1".into(), "GPU-a_1".into()], &s),
            Err(AllocateError::Duplicate(_))
        ));
    }

    #[test]
    fn one_unit_spelled_twice_is_not_two_units() {
        // `_1,_01` gave vram=2GiB — one unit counted twice
        let s = snap();
        for ids in [
            vec!["GPU-a_1", "GPU-a_01"],
            vec!["GPU-a_01", "GPU-a_1"],
            vec!["GPU-a_0", "GPU-a_00"],
            vec!["GPU-a_1", "GPU-a_001"],
        ] {
            let ids: Vec<String> = ids.into_iter().map(String::from).collect();
            let r = annotations(&ids, &s);
            assert!(
                matches!(
                    r,
                    Err(AllocateError::Unknown(_)) | Err(AllocateError::Duplicate(_))
                ),
                "{ids:?} gave {r:?}"
            );
        }
        // a non-canonical spelling alone is not one of our units either
        assert_eq!(
            annotations(&["GPU-a_01".into()], &s),
            Err(AllocateError::Unknown("GPU-a_01".into()))
        );
        // the canonical spellings of two distinct units still make 2 GiB
        let a = annotations(&["GPU-a_1".into(), "GPU-a_10".into()], &s).unwrap();
        assert_eq!(a[VRAM_KEY], "2GiB");
    }
}
