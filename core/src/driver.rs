//! Finding the host's driver files the way a host tool must: libraries from
//! the loader cache (or configured directories), keeping driver-versioned
//! file names, and driver programs such as nvidia-smi.
use crate::config::DriverConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One real library file to mount, and the names that must point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverLib {
    /// Canonical host path of the real file (e.g. …/libcuda.so.580.159.04).
    pub host_path: PathBuf,
    /// Its file name, kept in the container.
    pub name: String,
    /// Other names (SONAME, dev link) to create as symlinks to `name`.
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFiles {
    pub libs: Vec<DriverLib>,
    /// (program name, canonical host path)
    pub bins: Vec<(String, PathBuf)>,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot read loader cache {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error(
        "loader cache {path} has an unknown format ({what}); set [driver] lib_dirs in the config"
    )]
    Format { path: PathBuf, what: String },
    #[error("no NVIDIA driver library found (looked for {wanted} in {searched}); is the driver installed? check [driver] in the config")]
    NoCuda { wanted: String, searched: String },
}

#[cfg(target_arch = "x86_64")]
const ARCH_FLAGS: i32 = crate::ldcache::FLAG_ELF_LIBC6 | crate::ldcache::FLAG_X8664_LIB64;
#[cfg(target_arch = "aarch64")]
const ARCH_FLAGS: i32 = crate::ldcache::FLAG_ELF_LIBC6 | crate::ldcache::FLAG_AARCH64_LIB64;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH_FLAGS: i32 = crate::ldcache::FLAG_ELF_LIBC6;

/// The host's `ld.so.cache` (any format `core::ldcache` reads): (name, path)
/// pairs for this machine's architecture, in cache order.
pub fn parse_ldcache(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    let cache = crate::ldcache::LdCache::parse(bytes).map_err(|e| e.to_string())?;
    Ok(cache
        .entries
        .into_iter()
        .filter(|e| e.flags == ARCH_FLAGS)
        .filter_map(|e| {
            Some((
                String::from_utf8(e.key).ok()?,
                String::from_utf8(e.value).ok()?,
            ))
        })
        .collect())
}

fn wanted(prefixes: &[String], name: &str) -> bool {
    prefixes.iter().any(|p| {
        name.strip_prefix(p.as_str())
            .is_some_and(|r| r.starts_with(".so"))
    })
}

/// Group (name, path) candidates by their real file.
fn group(cands: Vec<(String, PathBuf)>) -> Vec<DriverLib> {
    let mut by_real: BTreeMap<PathBuf, DriverLib> = BTreeMap::new();
    for (name, path) in cands {
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        if !real.is_file() {
            continue;
        }
        let real_name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let e = by_real.entry(real.clone()).or_insert_with(|| DriverLib {
            host_path: real,
            name: real_name.clone(),
            aliases: vec![],
        });
        for n in [
            name,
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ] {
            if n != e.name && !n.is_empty() && !e.aliases.contains(&n) {
                e.aliases.push(n);
            }
        }
    }
    by_real.into_values().collect()
}

/// Find the driver's libraries and programs on this host.
pub fn discover(cfg: &DriverConfig) -> Result<DriverFiles, DriverError> {
    let mut cands: Vec<(String, PathBuf)> = Vec::new();
    let searched = if cfg.lib_dirs.is_empty() {
        let bytes = std::fs::read(&cfg.ldcache).map_err(|err| DriverError::Read {
            path: cfg.ldcache.clone(),
            err,
        })?;
        let entries = parse_ldcache(&bytes).map_err(|what| DriverError::Format {
            path: cfg.ldcache.clone(),
            what,
        })?;
        for (name, path) in entries {
            if wanted(&cfg.libraries, &name) {
                cands.push((name, PathBuf::from(path)));
            }
        }
        cfg.ldcache.display().to_string()
    } else {
        for d in &cfg.lib_dirs {
            let Ok(rd) = std::fs::read_dir(d) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if wanted(&cfg.libraries, &name) {
                    cands.push((name, e.path()));
                }
            }
        }
        cfg.lib_dirs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let libs = group(cands);
    if !libs
        .iter()
        .any(|l| l.name.starts_with("libcuda.so") || l.aliases.iter().any(|a| a == "libcuda.so.1"))
    {
        return Err(DriverError::NoCuda {
            wanted: "libcuda.so.1".into(),
            searched,
        });
    }
    let bins = find_programs(cfg, &libs);
    Ok(DriverFiles { libs, bins })
}

/// Driver programs: the first executable ELF file of each name, looked up
/// first in the `bin` directory beside the driver's libnvidia-ml (where
/// the driver installed it, e.g. /usr/local/nvidia/bin), then in
/// `bin_dirs`. Scripts are skipped: a host wrapper such as
/// `exec /usr/local/nvidia/bin/nvidia-smi` names a path the container
/// does not have.
fn find_programs(cfg: &DriverConfig, libs: &[DriverLib]) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<PathBuf> = libs
        .iter()
        .filter(|l| {
            l.name.starts_with("libnvidia-ml.so")
                || l.aliases.iter().any(|a| a.starts_with("libnvidia-ml.so"))
        })
        .filter_map(|l| {
            l.host_path
                .parent()
                .and_then(Path::parent)
                .map(|d| d.join("bin"))
        })
        .collect();
    dirs.extend(cfg.bin_dirs.iter().cloned());
    let mut bins = Vec::new();
    for b in &cfg.binaries {
        let found = dirs
            .iter()
            .filter_map(|d| std::fs::canonicalize(d.join(b)).ok())
            .find(|p| is_executable_elf(p));
        if let Some(real) = found {
            bins.push((b.clone(), real));
        }
    }
    bins
}

fn is_executable_elf(p: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let exec = std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    let mut magic = [0u8; 4];
    exec && std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The host path of libnvidia-ml among the driver files.
pub fn libnvml_of(files: &DriverFiles) -> Option<PathBuf> {
    files
        .libs
        .iter()
        .find(|l| {
            l.name.starts_with("libnvidia-ml.so")
                || l.aliases.iter().any(|a| a == "libnvidia-ml.so.1")
        })
        .map(|l| l.host_path.clone())
}

/// The host path of libcuda among the driver files.
pub fn libcuda_of(files: &DriverFiles) -> Option<PathBuf> {
    files
        .libs
        .iter()
        .find(|l| l.name.starts_with("libcuda.so") || l.aliases.iter().any(|a| a == "libcuda.so.1"))
        .map(|l| l.host_path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ldcache_parses() {
        // Every glibc host has a cache listing libc.so.6.
        let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
            return;
        };
        let e = parse_ldcache(&bytes).unwrap();
        assert!(
            e.iter()
                .any(|(k, v)| k == "libc.so.6" && v.ends_with("libc.so.6")),
            "{e:?}"
        );
    }

    #[test]
    fn ldcache_garbage_refused() {
        assert!(parse_ldcache(b"").is_err());
        assert!(parse_ldcache(b"glibc-ld.so.cache1.1\xff\xff\xff\x7f").is_err());
        assert!(parse_ldcache(&[0u8; 100]).is_err());
    }

    #[test]
    fn programs_skip_wrapper_scripts_and_prefer_the_driver_bin_dir() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for sub in ["wrapper", "other", "nvidia/lib64", "nvidia/bin"] {
            std::fs::create_dir_all(p.join(sub)).unwrap();
        }
        let script = p.join("wrapper/nvidia-smi");
        std::fs::write(
            &script,
            "#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy("/bin/true", p.join("other/nvidia-smi")).unwrap();
        std::fs::write(p.join("nvidia/lib64/libcuda.so.580.1"), b"x").unwrap();
        let cfg = DriverConfig {
            lib_dirs: vec![p.join("nvidia/lib64")],
            bin_dirs: vec![p.join("wrapper"), p.join("other")],
            ..DriverConfig::default()
        };
        // the script comes first in bin_dirs but is skipped
        assert_eq!(
            discover(&cfg).unwrap().bins,
            vec![("nvidia-smi".to_string(), p.join("other/nvidia-smi"))]
        );
        // with libnvidia-ml installed, the bin dir beside it wins
        std::fs::write(p.join("nvidia/lib64/libnvidia-ml.so.580.1"), b"x").unwrap();
        std::fs::copy("/bin/true", p.join("nvidia/bin/nvidia-smi")).unwrap();
        assert_eq!(
            discover(&cfg).unwrap().bins[0].1,
            p.join("nvidia/bin/nvidia-smi")
        );
    }

    #[test]
    fn lib_dirs_keep_versioned_names() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("libcuda.so.580.1"), b"x").unwrap();
        std::os::unix::fs::symlink("libcuda.so.580.1", p.join("libcuda.so.1")).unwrap();
        std::fs::write(p.join("libnvidia-ml.so.580.1"), b"y").unwrap();
        std::os::unix::fs::symlink("libnvidia-ml.so.580.1", p.join("libnvidia-ml.so.1")).unwrap();
        std::fs::write(p.join("libcudart.so.12"), b"not the driver").unwrap();
        let cfg = DriverConfig {
            lib_dirs: vec![p.into()],
            bin_dirs: vec![],
            ..DriverConfig::default()
        };
        let f = discover(&cfg).unwrap();
        assert_eq!(f.libs.len(), 2, "{f:?}");
        let cuda = f
            .libs
            .iter()
            .find(|l| l.name == "libcuda.so.580.1")
            .unwrap();
        assert_eq!(cuda.aliases, vec!["libcuda.so.1".to_string()]);
        let empty = tempfile::tempdir().unwrap();
        let cfg = DriverConfig {
            lib_dirs: vec![empty.path().into()],
            ..DriverConfig::default()
        };
        assert!(matches!(discover(&cfg), Err(DriverError::NoCuda { .. })));
    }
}
