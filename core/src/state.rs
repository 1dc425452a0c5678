//! The per-container state directory on the host (`<state_dir>/containers/<id>-<bundle hash>`),
//! bind-mounted read-only at `/run/gpu-quota` in the container:
//!
//! * `limits` — written by the hook: `key=value` lines (see docs/interceptor.md)
//! * `usage` — empty, mode 0666, its own read-write mount; the interceptor
//!   owns its binary format
//! * `driver/` — mount points for the driver libraries plus SONAME symlinks
//! * `libgpuquota.so` — mount point for the interceptor
//! * `ld.so.preload` — the merged preload list, bind-mounted on /etc/ld.so.preload
use crate::config::Config;
use crate::driver::DriverFiles;
use crate::ledger::Reservation;
use crate::mountplan::{DRIVER_SUBDIR, INTERCEPTOR_NAME};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const LIMITS_VERSION: u32 = 1;

/// The `limits` file for a reservation.
pub fn limits_text(r: &Reservation, context_overhead: u64) -> String {
    let vram = r.slices.iter().map(|s| s.bytes).min().unwrap_or(0);
    let mut s = String::new();
    s.push_str("# gpu-quota limits, written by gpu-quota-hook; read-only in the container\n");
    s.push_str(&format!("version={LIMITS_VERSION}\n"));
    s.push_str(&format!("container_id={}\n", r.container_id));
    s.push_str(&format!("vram_bytes={vram}\n"));
    s.push_str(&format!(
        "gpus={}\n",
        r.slices
            .iter()
            .map(|s| s.uuid.as_str())
            .collect::<Vec<_>>()
            .join(",")
    ));
    for sl in &r.slices {
        s.push_str(&format!("gpu.{}.vram_bytes={}\n", sl.uuid, sl.bytes));
    }
    if context_overhead > 0 {
        s.push_str(&format!("context_overhead_bytes={context_overhead}\n"));
    }
    s
}

/// The host state directory of a reservation:
/// `<state_dir>/containers/<id>-<hash of the bundle path>`. The hash keeps
/// containers apart that share an id under different engines or runc roots
/// (ctr namespaces, docker and podman on one host).
pub fn container_dir(cfg: &Config, r: &Reservation) -> PathBuf {
    // FNV-1a 64: stable across versions and processes (unlike std's hasher).
    let h = r.bundle.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    cfg.state_dir
        .join("containers")
        .join(format!("{}-{:016x}", r.container_id, h))
}

/// Container ids become directory names: allow what engines generate.
pub fn valid_container_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 1024
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Create the state directory afresh (a leftover from an earlier container
/// with the same id is removed first).
pub fn prepare(
    dir: &Path,
    r: &Reservation,
    files: &DriverFiles,
    context_overhead: u64,
) -> std::io::Result<()> {
    if dir.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    write(
        &dir.join("limits"),
        limits_text(r, context_overhead).as_bytes(),
        0o644,
    )?;
    write(&dir.join("usage"), b"", 0o666)?;
    write(&dir.join(INTERCEPTOR_NAME), b"", 0o644)?;
    write(&dir.join("ld.so.preload"), b"", 0o644)?;
    let d = dir.join(DRIVER_SUBDIR);
    std::fs::create_dir(&d)?;
    for l in &files.libs {
        write(&d.join(&l.name), b"", 0o755)?;
        for a in &l.aliases {
            std::os::unix::fs::symlink(&l.name, d.join(a))?;
        }
    }
    Ok(())
}

pub fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DriverLib;
    use crate::ledger::ResState;
    use crate::placement::Slice;

    #[test]
    fn prepare_layout() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("c1");
        let r = Reservation {
            container_id: "c1".into(),
            runtime_root: None,
            bundle: "/b".into(),
            slices: vec![Slice {
                uuid: "GPU-a".into(),
                index: 0,
                bytes: 4 << 30,
            }],
            request: "vram=4g".into(),
            created_unix: 0,
            started_unix: None,
            pid: None,
            pid_start: None,
            state: ResState::Reserved,
        };
        let files = DriverFiles {
            libs: vec![DriverLib {
                host_path: "/x".into(),
                name: "libcuda.so.580".into(),
                aliases: vec!["libcuda.so.1".into()],
            }],
            bins: vec![],
        };
        prepare(&dir, &r, &files, 0).unwrap();
        prepare(&dir, &r, &files, 512 << 20).unwrap(); // a leftover is replaced
        let limits = std::fs::read_to_string(dir.join("limits")).unwrap();
        assert!(
            limits.contains("vram_bytes=4294967296\n") && limits.contains("gpus=GPU-a\n"),
            "{limits}"
        );
        assert!(
            limits.contains("context_overhead_bytes=536870912\n"),
            "{limits}"
        );
        assert_eq!(
            std::fs::metadata(dir.join("usage"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o666
        );
        assert_eq!(
            std::fs::read_link(dir.join("driver/libcuda.so.1")).unwrap(),
            Path::new("libcuda.so.580")
        );
        let cfg = Config {
            state_dir: "/s".into(),
            ..Config::default()
        };
        let mut other = r.clone();
        other.bundle = "/other/bundle".into();
        assert!(container_dir(&cfg, &r)
            .to_string_lossy()
            .starts_with("/s/containers/c1-"));
        assert_ne!(
            container_dir(&cfg, &r),
            container_dir(&cfg, &other),
            "same id, other bundle"
        );
        assert_eq!(container_dir(&cfg, &r), container_dir(&cfg, &r.clone()));
        assert!(valid_container_id("0123abc_x.y-z"));
        assert!(
            !valid_container_id("../etc") && !valid_container_id("..") && !valid_container_id("")
        );
    }
}
