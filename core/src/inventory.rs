//! The GPUs of this host: from NVML (cached across container starts), or a
//! static list declared in the config (labelled simulated wherever shown).
use crate::config::{Config, InventorySource};
use crate::fsutil;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    /// `GPU-…`, lower case.
    pub uuid: String,
    pub name: String,
    pub total_bytes: u64,
    /// Minor number of `/dev/nvidia<minor>`.
    pub minor: u32,
    /// Declared in the config, not read from a driver.
    pub simulated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub gpus: Vec<Gpu>,
    /// Driver version, or "simulated".
    pub driver_version: String,
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("NVML is not usable ({0}); install the NVIDIA driver, or declare [[inventory.gpu]] entries in the config for a simulated inventory")]
    Nvml(String),
    #[error("invalid [[inventory.gpu]] entry {index}: {message}")]
    Static { index: u32, message: String },
}

impl Inventory {
    pub fn find_uuid(&self, uuid: &str) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(uuid))
    }
    pub fn find_index(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// The inventory the config asks for.
    pub fn load(cfg: &Config) -> Result<Inventory, InventoryError> {
        match cfg.inventory.source {
            InventorySource::Static => Self::from_static(cfg),
            InventorySource::Nvml => Self::from_nvml_cached(cfg),
            InventorySource::Auto => {
                if !cfg.inventory.gpu.is_empty() {
                    Self::from_static(cfg)
                } else {
                    Self::from_nvml_cached(cfg)
                }
            }
        }
    }

    pub fn from_static(cfg: &Config) -> Result<Inventory, InventoryError> {
        let mut gpus: Vec<Gpu> = Vec::new();
        for g in &cfg.inventory.gpu {
            let bad = |message: String| InventoryError::Static {
                index: g.index,
                message,
            };
            let total = g.memory_bytes().map_err(|e| bad(format!("memory: {e}")))?;
            if !g.uuid.starts_with("GPU-") {
                return Err(bad(format!("uuid {:?} must start with GPU-", g.uuid)));
            }
            if gpus
                .iter()
                .any(|o| o.index == g.index || o.uuid.eq_ignore_ascii_case(&g.uuid))
            {
                return Err(bad("duplicate index or uuid".into()));
            }
            gpus.push(Gpu {
                index: g.index,
                uuid: g.uuid.to_ascii_lowercase().replacen("gpu-", "GPU-", 1),
                name: g.name.clone(),
                total_bytes: total,
                minor: g.minor.unwrap_or(g.index),
                simulated: true,
            });
        }
        gpus.sort_by_key(|g| g.index);
        Ok(Inventory {
            gpus,
            driver_version: "simulated".into(),
        })
    }

    /// NVML, but only when something changed since the last read: the cache
    /// key is the kernel driver's version text, the boot id and the set of
    /// `/dev/nvidiaN` nodes, all cheap to read.
    pub fn from_nvml_cached(cfg: &Config) -> Result<Inventory, InventoryError> {
        let key = cache_key(&cfg.driver.dev_root);
        let cache = cache_path(cfg);
        if let Some(key) = &key {
            if let Some(c) = read_cache(&cache) {
                if &c.key == key {
                    return Ok(c.inventory);
                }
            }
        }
        let inv = Self::from_nvml_for(cfg)?;
        if let Some(key) = key {
            let c = Cached {
                key,
                inventory: inv.clone(),
            };
            // only into an existing, safe ledger directory: read-only
            // commands (ls, doctor, metrics) create nothing, and the cache is
            // never written through a symlink or into a directory others own
            if let Ok(bytes) = serde_json::to_vec_pretty(&c) {
                if cfg.ledger_dir.is_dir() && fsutil::secure_dir(&cfg.ledger_dir, 0o755).is_ok() {
                    let _ = fsutil::write_atomic(&cache, &bytes, 0o644);
                }
            }
        }
        Ok(inv)
    }

    /// Full NVML read where this process can load it: in the process
    /// itself, or, in a statically linked binary (gpu-quota-runtime and
    /// gpu-quota-hook, for their start-up cost; a static binary loads no
    /// library), in gpu-quota-driver's `nvml-inventory` helper child
    /// (`helper::run_helper`: empty environment, own process group, killed at
    /// the deadline), which prints the inventory as one JSON line.
    pub fn from_nvml_for(cfg: &Config) -> Result<Inventory, InventoryError> {
        if crate::dl::STATIC {
            let helper = crate::paths::driver_helper(cfg).ok_or_else(|| {
                InventoryError::Nvml(format!(
                    "{}, which reads NVML for the statically linked gpu-quota binaries, is not found (or not a root-owned file others cannot write) in ../lib/gpu-quota/ from gpu-quota-hook or beside it; set `driver_helper` in the config",
                    crate::paths::DRIVER_HELPER_NAME
                ))
            })?;
            Self::from_nvml_helper(&helper)
        } else {
            Self::from_nvml()
        }
    }

    /// NVML read by `HELPER nvml-inventory` (gpu-quota-driver, linked
    /// dynamically).
    pub fn from_nvml_helper(helper: &Path) -> Result<Inventory, InventoryError> {
        let what = format!("{} {NVML_INVENTORY_SUBCOMMAND}", helper.display());
        let out = crate::helper::run_helper(
            helper,
            &[NVML_INVENTORY_SUBCOMMAND],
            &[],
            std::time::Duration::from_secs(NVML_INVENTORY_TIMEOUT_SECS),
            &what,
        )
        .map_err(|e| InventoryError::Nvml(e.to_string()))?;
        let (line, _) = out.json_line();
        serde_json::from_str(&line)
            .map_err(|e| InventoryError::Nvml(format!("{what} printed no inventory: {e}")))
    }

    /// Full NVML read in this process (loads libnvidia-ml.so.1 at run time).
    pub fn from_nvml() -> Result<Inventory, InventoryError> {
        if crate::dl::STATIC {
            return Err(InventoryError::Nvml(
                "this binary is statically linked and loads no library; Inventory::from_nvml_for reads NVML through gpu-quota-driver".into(),
            ));
        }
        use nvml_wrapper::Nvml;
        let e = |x: nvml_wrapper::error::NvmlError| InventoryError::Nvml(x.to_string());
        let nvml = Nvml::init().map_err(e)?;
        let n = nvml.device_count().map_err(e)?;
        let mut gpus = Vec::new();
        for i in 0..n {
            let d = nvml.device_by_index(i).map_err(e)?;
            gpus.push(Gpu {
                index: i,
                uuid: d
                    .uuid()
                    .map_err(e)?
                    .to_ascii_lowercase()
                    .replacen("gpu-", "GPU-", 1),
                name: d.name().map_err(e)?,
                total_bytes: d.memory_info().map_err(e)?.total,
                minor: d.minor_number().map_err(e)?,
                simulated: false,
            });
        }
        let driver_version = nvml.sys_driver_version().map_err(e)?;
        Ok(Inventory {
            gpus,
            driver_version,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Cached {
    key: String,
    inventory: Inventory,
}

/// gpu-quota-driver's stage that prints the NVML inventory as one JSON line.
pub const NVML_INVENTORY_SUBCOMMAND: &str = crate::formats::helper::Stage::NvmlInventory.name();
/// How long that child may take (NVML init of 8 GPUs takes about a second).
pub const NVML_INVENTORY_TIMEOUT_SECS: u64 = 30;

/// The most the inventory cache may hold: a few KiB for a node's GPUs.
pub const CACHE_MAX: u64 = 1 << 20;

/// The cache file `<ledger_dir>/inventory.json`, written by the runtime.
pub fn cache_path(cfg: &Config) -> std::path::PathBuf {
    cfg.ledger_dir.join("inventory.json")
}

/// The one reader of the inventory cache: not through a symlink, never a
/// FIFO or device, at most `CACHE_MAX` bytes (`fsutil::read_regular_capped`);
/// None for anything else, so the caller asks NVML again.
fn read_cache(path: &Path) -> Option<Cached> {
    let bytes = fsutil::read_regular_capped(path, CACHE_MAX).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The cached NVML inventory, whatever its key (for the hook, which must not
/// load NVML; see `inventory_without_nvml`).
pub fn cached(cfg: &Config) -> Option<Inventory> {
    read_cache(&cache_path(cfg)).map(|c| c.inventory)
}

/// The inventory as far as it is known without loading NVML (the hook must
/// not load it: it enters the container's mount namespace afterwards, which
/// needs a single-threaded process): the static list, else the NVML
/// inventory cache that the runtime wrote at admission.
pub fn inventory_without_nvml(cfg: &Config) -> Option<Inventory> {
    if !cfg.inventory.gpu.is_empty() || cfg.inventory.source == InventorySource::Static {
        return Inventory::from_static(cfg).ok();
    }
    cached(cfg)
}

fn cache_key(dev_root: &Path) -> Option<String> {
    let version = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let mut nodes: Vec<String> = std::fs::read_dir(dev_root)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with("nvidia") && n[6..].bytes().all(|b| b.is_ascii_digit()) && n.len() > 6
        })
        .collect();
    nodes.sort();
    Some(format!(
        "{}|{}|{}",
        version.trim(),
        boot.trim(),
        nodes.join(",")
    ))
}

/// For messages: "GPU 0 (GPU-…, Simulated GPU, simulated)".
pub fn describe(g: &Gpu) -> String {
    format!(
        "GPU {} ({}, {}{})",
        g.index,
        g.uuid,
        g.name,
        if g.simulated { ", simulated" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `gpu-quota-driver nvml-inventory`: a script that checks
    /// its argument and environment, then prints what the test gives it.
    fn fake_hook(d: &Path, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = d.join("hook");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_nvml_inventory_child_gets_an_empty_environment_and_its_errors_name_it() {
        let d = tempfile::tempdir().unwrap();
        let inv = Inventory {
            gpus: vec![Gpu {
                index: 0,
                uuid: "GPU-aaaa".into(),
                name: "NVIDIA H200".into(),
                total_bytes: 150 << 30,
                minor: 0,
                simulated: false,
            }],
            driver_version: "580.159.04".into(),
        };
        let json = serde_json::to_string(&inv).unwrap();
        // the child gets exactly the subcommand and an empty environment
        let hook = fake_hook(
            d.path(),
            &format!(
                "[ \"$*\" = {NVML_INVENTORY_SUBCOMMAND} ] && [ -z \"$GQ_LEAK\" ] || exit 3\necho 'nvml loaded'\necho '{json}'"
            ),
        );
        std::env::set_var("GQ_LEAK", "1");
        assert_eq!(Inventory::from_nvml_helper(&hook).unwrap(), inv);
        // a child that fails or prints no inventory: an NVML error naming it
        let hook = fake_hook(d.path(), "echo 'libnvidia-ml.so.1: not found' >&2; exit 1");
        let e = Inventory::from_nvml_helper(&hook).unwrap_err().to_string();
        assert!(
            e.contains("nvml-inventory") && e.contains("not found"),
            "{e}"
        );
        let hook = fake_hook(d.path(), "echo '{\"gpus\": 1}'");
        let e = Inventory::from_nvml_helper(&hook).unwrap_err().to_string();
        assert!(e.contains("printed no inventory"), "{e}");
    }

    #[test]
    fn static_inventory() {
        let cfg = Config::parse(
            r#"
[[inventory.gpu]]
index = 1
uuid = "GPU-BBBB"
memory = "16g"
[[inventory.gpu]]
index = 0
uuid = "GPU-aaaa"
memory = "16g"
minor = 3
"#,
            Path::new("t"),
        )
        .unwrap();
        let inv = Inventory::load(&cfg).unwrap();
        assert_eq!(inv.gpus.len(), 2);
        assert_eq!(inv.gpus[0].index, 0);
        assert_eq!(inv.gpus[0].minor, 3);
        assert_eq!(inv.gpus[1].uuid, "GPU-bbbb");
        assert!(inv.gpus.iter().all(|g| g.simulated));
        assert!(describe(&inv.gpus[0]).contains("simulated"));
    }

    #[test]
    fn duplicate_static_refused() {
        let cfg = Config::parse(
            "[[inventory.gpu]]\nindex = 0\nuuid = \"GPU-a\"\nmemory = \"1g\"\n[[inventory.gpu]]\nindex = 0\nuuid = \"GPU-b\"\nmemory = \"1g\"\n",
            Path::new("t"),
        )
        .unwrap();
        assert!(Inventory::load(&cfg).is_err());
    }

    /// Security.md said the inventory cache is read O_NOFOLLOW and
    /// capped; both readers (the runtime's, and the hook's through
    /// `inventory_without_nvml`) used a plain `fs::read`.
    #[test]
    fn the_inventory_cache_is_read_without_links_and_capped() {
        let d = tempfile::tempdir().unwrap();
        let ledger = d.path().join("ledger");
        std::fs::create_dir(&ledger).unwrap();
        let cfg = Config::parse(
            &format!(
                "ledger_dir = \"{}\"\n[inventory]\nsource = \"nvml\"\n",
                ledger.display()
            ),
            Path::new("t"),
        )
        .unwrap();
        let inv = Inventory {
            gpus: vec![Gpu {
                index: 0,
                uuid: "GPU-cafe".into(),
                name: "t".into(),
                total_bytes: 1 << 30,
                minor: 0,
                simulated: false,
            }],
            driver_version: "580.1".into(),
        };
        let json = serde_json::to_vec(&Cached {
            key: "k".into(),
            inventory: inv.clone(),
        })
        .unwrap();
        let cache = ledger.join("inventory.json");
        let read = || {
            (
                inventory_without_nvml(&cfg),
                read_cache(&cache).map(|c| c.inventory),
            )
        };
        // control: a regular cache file is read by both
        std::fs::write(&cache, &json).unwrap();
        assert_eq!(read(), (Some(inv.clone()), Some(inv.clone())));
        // a symlink at the cache path is not followed
        std::fs::remove_file(&cache).unwrap();
        let elsewhere = d.path().join("planted.json");
        std::fs::write(&elsewhere, &json).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &cache).unwrap();
        assert_eq!(read(), (None, None), "a symlinked cache was followed");
        // a FIFO is not opened for a blocking read
        std::fs::remove_file(&cache).unwrap();
        nix::unistd::mkfifo(&cache, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(read(), (None, None), "a FIFO was read");
        // an oversized file (valid JSON, padded) is refused, not parsed
        std::fs::remove_file(&cache).unwrap();
        let mut big = json.clone();
        big.extend(std::iter::repeat_n(b' ', (CACHE_MAX as usize) + 1));
        std::fs::write(&cache, &big).unwrap();
        assert_eq!(read(), (None, None), "an oversized cache was parsed");
    }

    #[test]
    fn inventory_from_the_runtimes_cache_without_nvml() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            ledger_dir: d.path().into(),
            ..Config::default()
        };
        assert!(inventory_without_nvml(&cfg).is_none());
        let inv = Inventory {
            gpus: vec![Gpu {
                index: 0,
                uuid: "GPU-1".into(),
                name: "NVIDIA H200".into(),
                total_bytes: 1 << 40,
                minor: 0,
                simulated: false,
            }],
            driver_version: "580.159.04".into(),
        };
        let cached = serde_json::json!({"key": "k", "inventory": inv});
        std::fs::write(d.path().join("inventory.json"), cached.to_string()).unwrap();
        assert_eq!(inventory_without_nvml(&cfg), Some(inv));
    }
}
