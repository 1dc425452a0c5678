//! Which GPU a DRM node (`/dev/dri/cardN`, `/dev/dri/renderDN`, major 226)
//! belongs to. `nvidia-ctk cdi generate` lists each GPU's DRM nodes beside
//! its `/dev/nvidiaN` where nvidia-drm is loaded, but config.json keeps no
//! trace of the CDI device that brought them, so the owner is read from the
//! host: `/sys/dev/char/226:M/device` is the GPU's PCI device, and NVIDIA's
//! `/proc/driver/nvidia/gpus/<PCI address>/information` says its `Device
//! Minor` (the N of `/dev/nvidiaN`). Both are the host's, written by the
//! kernel; no container can change them. A node whose owner cannot be read
//! this way is not provably the slice's, and callers remove it.
use std::path::{Path, PathBuf};

/// Major number of DRM device nodes.
pub const DRM_MAJOR: u64 = 226;
/// Longest `information` file read (it is a few hundred bytes).
const MAX_INFO: u64 = 16 << 10;

/// Where the host's sysfs and NVIDIA's procfs directory are.
#[derive(Debug, Clone)]
pub struct HostPaths {
    pub sys: PathBuf,
    pub nvidia_gpus: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        Self {
            sys: "/sys".into(),
            nvidia_gpus: "/proc/driver/nvidia/gpus".into(),
        }
    }
}

fn pci_address(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

/// The NVIDIA device minor of the GPU that DRM node `226:drm_minor` belongs
/// to, or None when it is not an NVIDIA GPU's or cannot be told.
pub fn owner(h: &HostPaths, drm_minor: u32) -> Option<u32> {
    let link = std::fs::read_link(
        h.sys
            .join("dev/char")
            .join(format!("{DRM_MAJOR}:{drm_minor}"))
            .join("device"),
    )
    .ok()?;
    let pci = link.file_name()?.to_str()?;
    if !pci_address(pci) {
        return None;
    }
    let info = read_info(&h.nvidia_gpus.join(pci).join("information"))?;
    info.lines().find_map(|l| {
        let v = l.strip_prefix("Device Minor:")?.trim();
        v.parse().ok()
    })
}

fn read_info(p: &Path) -> Option<String> {
    let f = crate::fsutil::open_regular(p, std::fs::OpenOptions::new().read(true)).ok()?;
    let b = crate::fsutil::read_prefix(f, MAX_INFO).ok()?;
    String::from_utf8(b).ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A host with two NVIDIA GPUs (minors 0 and 1) and an Intel iGPU, laid
    /// out as the kernel does.
    pub(crate) fn fake_host(d: &Path) -> HostPaths {
        let h = HostPaths {
            sys: d.join("sys"),
            nvidia_gpus: d.join("proc"),
        };
        for (drm, pci, nv) in [
            (0, "0000:00:02.0", None),
            (1, "0000:3b:00.0", Some(0)),
            (129, "0000:3b:00.0", Some(0)),
            (2, "0000:86:00.0", Some(1)),
            (130, "0000:86:00.0", Some(1)),
        ] {
            let dev = d.join("sys/devices/pci0000:00").join(pci);
            std::fs::create_dir_all(&dev).unwrap();
            let c = h.sys.join("dev/char").join(format!("226:{drm}"));
            std::fs::create_dir_all(&c).unwrap();
            std::os::unix::fs::symlink(
                format!("../../../devices/pci0000:00/{pci}"),
                c.join("device"),
            )
            .unwrap();
            if let Some(m) = nv {
                let g = h.nvidia_gpus.join(pci);
                std::fs::create_dir_all(&g).unwrap();
                std::fs::write(
                    g.join("information"),
                    format!("Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nDevice Minor: \t {m}\nBus Location: \t {pci}\n"),
                )
                .unwrap();
            }
        }
        h
    }

    #[test]
    fn drm_nodes_map_to_their_gpu() {
        let d = tempfile::tempdir().unwrap();
        let h = fake_host(d.path());
        assert_eq!(owner(&h, 1), Some(0));
        assert_eq!(owner(&h, 129), Some(0));
        assert_eq!(owner(&h, 2), Some(1));
        assert_eq!(owner(&h, 130), Some(1));
        assert_eq!(owner(&h, 0), None, "not an NVIDIA GPU");
        assert_eq!(owner(&h, 7), None, "no such node");
        assert_eq!(owner(&HostPaths::default(), 4000), None);
    }
}
