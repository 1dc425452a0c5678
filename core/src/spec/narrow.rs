//! The toolkit's narrowing as a modifier: with a slice, gpu-quota owns the
//! container's GPU devices, so what an engine added for other GPUs goes
//! (hooks that hand out GPUs, other GPUs' nodes, DRM nodes not proven the
//! slice's, their rules and bind mounts: `toolkit::narrow`). The variables
//! naming GPUs are [`super::Environment`]'s.
use super::Modifier;
use crate::toolkit;
use serde_json::Value;

/// Narrow to the GPUs of these device minors; `drm_owner` maps a DRM
/// minor to the NVIDIA minor it belongs to (`toolkit::drm::owner`).
pub struct Narrow<'a> {
    pub slice_minors: Vec<u32>,
    pub drm_owner: &'a dyn Fn(u32) -> Option<u32>,
}

impl Narrow<'_> {
    /// The minors of `uuids` in `inv` (a GPU not there has no node to keep).
    pub fn minors_of(inv: &crate::Inventory, uuids: &[String]) -> Vec<u32> {
        uuids
            .iter()
            .filter_map(|u| inv.find_uuid(u).map(|g| g.minor))
            .collect()
    }
}

impl Modifier for Narrow<'_> {
    fn what(&self) -> &'static str {
        "toolkit narrowing"
    }
    fn modify(&self, config: &mut Value) -> Result<(), String> {
        toolkit::narrow(config, &self.slice_minors, self.drm_owner);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn other_gpus_go_the_slices_stay() {
        let mut v = json!({
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]},
            "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]},
            "linux": {"devices": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}, {"path": "/dev/nvidiactl"},
                                  {"path": "/dev/dri/card1", "major": 226, "minor": 1},
                                  {"path": "/dev/dri/card2", "major": 226, "minor": 2}]}
        });
        let owner = |drm: u32| Some(drm - 1); // card1 is GPU 0's, card2 GPU 1's
        Narrow {
            slice_minors: vec![1],
            drm_owner: &owner,
        }
        .modify(&mut v)
        .unwrap();
        let paths: Vec<&str> = v["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["/dev/nvidia1", "/dev/nvidiactl", "/dev/dri/card2"]);
        assert_eq!(v["hooks"]["prestart"], json!([]));
        assert_eq!(
            v["process"]["env"],
            json!(["NVIDIA_VISIBLE_DEVICES=all"]),
            "the environment is Environment's"
        );
    }

    #[test]
    fn minors_of_the_inventorys_gpus() {
        let g = |i: u32, minor: u32| crate::Gpu {
            index: i,
            uuid: format!("GPU-{i}"),
            name: "x".into(),
            total_bytes: 1 << 30,
            minor,
            simulated: true,
        };
        let inv = crate::Inventory {
            gpus: vec![g(0, 4), g(1, 7)],
            driver_version: "simulated".into(),
        };
        assert_eq!(
            Narrow::minors_of(&inv, &["GPU-1".into(), "GPU-9".into(), "GPU-0".into()]),
            [7, 4]
        );
    }
}
