//! The device nodes a slice needs: the GPU's `/dev/nvidiaN` plus the
//! control and UVM nodes, with major/minor read from the host nodes (UVM's
//! major is dynamic: never hard-coded).
use crate::inventory::Inventory;
use crate::placement::Slice;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub host_path: PathBuf,
    /// Path inside the container (always under /dev).
    pub container_path: String,
    pub major: u64,
    pub minor: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device node {path} is missing: {err}; is the NVIDIA driver loaded (nvidia-modprobe / nvidia-smi on the host creates it)? check [driver] dev_root in the config")]
    Missing { path: PathBuf, err: std::io::Error },
    #[error("{path} is not a character device")]
    NotCharDevice { path: PathBuf },
    #[error("GPU {uuid} is not in the inventory")]
    UnknownGpu { uuid: String },
}

fn node(dev_root: &Path, name: &str) -> Result<DeviceNode, DeviceError> {
    let host_path = dev_root.join(name);
    let md = std::fs::metadata(&host_path).map_err(|err| DeviceError::Missing {
        path: host_path.clone(),
        err,
    })?;
    if !md.file_type().is_char_device() {
        return Err(DeviceError::NotCharDevice { path: host_path });
    }
    let rdev = md.rdev();
    Ok(DeviceNode {
        host_path,
        container_path: format!("/dev/{name}"),
        major: libc::major(rdev) as u64,
        minor: libc::minor(rdev) as u64,
    })
}

/// Nodes for the given slices: each GPU's node, then `nvidiactl`,
/// `nvidia-uvm` (required), `nvidia-uvm-tools` (when present).
pub fn nodes_for(
    dev_root: &Path,
    inv: &Inventory,
    slices: &[Slice],
) -> Result<Vec<DeviceNode>, DeviceError> {
    let mut out = Vec::new();
    for s in slices {
        let g = inv
            .find_uuid(&s.uuid)
            .ok_or_else(|| DeviceError::UnknownGpu {
                uuid: s.uuid.clone(),
            })?;
        out.push(node(dev_root, &format!("nvidia{}", g.minor))?);
    }
    out.push(node(dev_root, "nvidiactl")?);
    out.push(node(dev_root, "nvidia-uvm")?);
    if let Ok(n) = node(dev_root, "nvidia-uvm-tools") {
        out.push(n);
    }
    Ok(out)
}
