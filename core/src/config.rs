//! `/etc/gpu-quota/config.toml` (path overridable with `GPU_QUOTA_CONFIG`).
//! A missing file means defaults; every key is documented in docs/config.md.
use crate::units;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub use crate::formats::layout::CONFIG_FILE as DEFAULT_PATH;
pub const ENV_PATH: &str = "GPU_QUOTA_CONFIG";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Fill the most-used GPU that still fits (keeps whole GPUs free).
    #[default]
    Binpack,
    /// Use the GPU with the most free memory.
    Spread,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InventorySource {
    /// NVML when it loads, else the static list, else no GPUs.
    #[default]
    Auto,
    Nvml,
    Static,
}

/// Where the runtime, the hook and `gpu-quota` write their event lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogTarget {
    /// journald when its socket exists, else `log_file`.
    #[default]
    Auto,
    Journald,
    File,
    /// No event lines (counters are still kept).
    Off,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StaticGpu {
    pub index: u32,
    pub uuid: String,
    #[serde(default = "default_gpu_name")]
    pub name: String,
    /// Total memory: a size string like "16g".
    pub memory: String,
    /// Minor number of /dev/nvidiaN; defaults to the index.
    pub minor: Option<u32>,
}

fn default_gpu_name() -> String {
    "Simulated GPU".into()
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct InventoryConfig {
    pub source: InventorySource,
    /// GPUs declared by hand (hosts without NVML: tests, CI, demos).
    /// Shown as "simulated" everywhere.
    pub gpu: Vec<StaticGpu>,
}

impl Default for InventoryConfig {
    fn default() -> Self {
        Self {
            source: InventorySource::Auto,
            gpu: vec![],
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DriverConfig {
    /// Where the host's NVIDIA device nodes are.
    pub dev_root: PathBuf,
    /// The host's loader cache, used to find driver libraries.
    pub ldcache: PathBuf,
    /// When non-empty: search these directories instead of the ldcache.
    pub lib_dirs: Vec<PathBuf>,
    /// Library name prefixes (before `.so`) to inject.
    pub libraries: Vec<String>,
    /// Driver programs to inject into /usr/bin.
    pub binaries: Vec<String>,
    /// Directories searched for `binaries`.
    pub bin_dirs: Vec<PathBuf>,
    /// Accepted for old configs and ignored: gpu-quota no longer runs any
    /// host program against a container rootfs (it writes the container's
    /// loader cache itself).
    pub ldconfig: PathBuf,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            dev_root: "/dev".into(),
            ldcache: "/etc/ld.so.cache".into(),
            lib_dirs: vec![],
            libraries: [
                "libcuda",
                "libcudadebugger",
                "libnvidia-ml",
                "libnvidia-ptxjitcompiler",
                "libnvidia-nvvm",
                "libnvidia-gpucomp",
                "libnvidia-allocator",
                "libnvidia-cfg",
                "libnvidia-opencl",
            ]
            .map(String::from)
            .to_vec(),
            binaries: vec!["nvidia-smi".into()],
            bin_dirs: [
                "/usr/bin",
                "/usr/local/bin",
                "/usr/local/nvidia/bin",
                "/usr/sbin",
                "/bin",
            ]
            .map(PathBuf::from)
            .to_vec(),
            ldconfig: "/sbin/ldconfig".into(),
        }
    }
}

/// The runc roots of CRI-managed containers, by default: containerd's CRI
/// plugin in its `k8s.io` namespace, and the CRI-O handler's `runtime_root`
/// written by `gpu-quota install crio`.
pub const KUBERNETES_RUNC_ROOTS: [&str; 2] = ["/run/containerd/runc/k8s.io", "/run/gpu-quota-runc"];

fn root_in(roots: &[String], runc_root: Option<&str>) -> bool {
    let Some(root) = runc_root else {
        return false;
    };
    let root = root.trim_end_matches('/');
    !root.is_empty() && roots.iter().any(|k| k.trim_end_matches('/') == root)
}

/// Default `docker_runc_roots`: dockerd's runc root under its default
/// `--exec-root` (`/var/run` is a link to `/run`).
pub const DOCKER_RUNC_ROOTS: [&str; 2] = [
    "/run/docker/runtime-runc/moby",
    "/var/run/docker/runtime-runc/moby",
];

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Directory of the host ledger (ledger.json + ledger.lock) and caches.
    pub ledger_dir: PathBuf,
    /// Directory of per-container state (limits, usage) on the host.
    pub state_dir: PathBuf,
    /// The real runc: a path, or a name looked up in PATH.
    pub runc: PathBuf,
    /// gpu-quota-hook; default: next to gpu-quota-runtime.
    pub hook: Option<PathBuf>,
    /// gpu-quota-driver, which loads the driver's libraries in helper
    /// children; default: `../lib/gpu-quota/` from the hook, else beside it.
    pub driver_helper: Option<PathBuf>,
    /// libgpuquota.so; default: ../lib/gpu-quota/libgpuquota.so from the binaries.
    pub interceptor: Option<PathBuf>,
    /// Memory kept free on every GPU (never handed out), e.g. "1g".
    pub reserve: String,
    /// Charged by the interceptor once per process and GPU when it creates
    /// its CUDA context (the driver's own per-context memory): "auto"
    /// (measured once per driver and GPU model, see ctxcost.rs) or a size
    /// such as "512m" ("0" = none).
    pub context_overhead: String,
    pub placement: Policy,
    /// GPUs that may be sliced (indices or UUIDs); empty = all.
    pub gpus: Vec<String>,
    /// Whether `GPU_QUOTA_*` variables in a container's environment may be a
    /// request (only for engines that cannot pass annotations, Docker < 24).
    /// Off by default: the environment includes the image's ENV. Even when
    /// on, any request annotation makes the environment irrelevant.
    pub env_requests: bool,
    /// The runc roots of containers the CRI runs (Kubernetes pods): the
    /// `--root` the engine passes, never anything a pod controls. A
    /// container under one of them never takes a request from its
    /// environment, whatever `env_requests` says (`install docker`
    /// for Docker < 24 turns `env_requests` on host-wide, and a pod's
    /// `GPU_QUOTA_VRAM` then bypassed the scheduler). Default: containerd's
    /// CRI (`k8s.io` namespace) and the CRI-O handler of `install crio`.
    pub kubernetes_runc_roots: Vec<String>,
    /// The runc roots of Docker's containers. Only there is the
    /// `NVIDIA_VISIBLE_DEVICES` beside the toolkit's legacy hook the
    /// engine's own (`--gpus` appends it after the image's ENV and adds the
    /// hook); under any other root the hook may be an always-on hooks.d hook
    /// and the variable the image's, so it never chooses GPUs there (see
    /// `toolkit`). Default: dockerd's default `--exec-root`.
    pub docker_runc_roots: Vec<String>,
    /// Seconds a reservation may stay without a container process before
    /// it counts as abandoned (a create that crashed).
    pub create_grace_secs: u64,
    /// Where event lines (admission, refusal, release, reclaim) go.
    pub log: LogTarget,
    /// The log file when journald is absent (or `log = "file"`); appended
    /// to, never followed through a symlink.
    pub log_file: PathBuf,
    pub driver: DriverConfig,
    pub inventory: InventoryConfig,
    /// Where `core::claims` writes the CDI spec of each prepared DRA claim
    /// (the container engine's CDI spec directory; made 0755 if missing).
    pub cdi_dir: PathBuf,
    /// NVIDIA's `nvidia-cuda-mps-control`, which serves compute shares
    /// (`sm=`); default: the first executable of that name in the driver's
    /// `bin_dirs`. Run as root with a clean environment, so it must be a
    /// root-owned file nobody else can change (`paths::trusted_program`).
    pub mps_control: Option<PathBuf>,
    /// Whether a compute share may run as host root (a container's root
    /// without a user namespace). Off by default: MPS takes commands from
    /// root on the client socket that steer the GPU's server (every
    /// client's percentage) and end other containers' clients (measured on
    /// the H200), so only a host whose tenants all trust each other
    /// should turn it on.
    pub mps_root_shares: bool,
    /// How long an allocation within a guarantee that the driver refused
    /// beside burstable slices waits for `gpu-quota burst-supervise` to end
    /// bursters (ms, at most 300000; 0: never waits, no burster is ended).
    /// The supervisor hands it to the containers through their grants.
    pub burst_reclaim_wait_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ledger_dir: crate::formats::layout::DEFAULT_LEDGER_DIR.into(),
            state_dir: crate::formats::layout::DEFAULT_STATE_DIR.into(),
            runc: "runc".into(),
            hook: None,
            driver_helper: None,
            interceptor: None,
            reserve: "0".into(),
            context_overhead: "auto".into(),
            placement: Policy::Binpack,
            gpus: vec![],
            env_requests: false,
            kubernetes_runc_roots: KUBERNETES_RUNC_ROOTS.map(String::from).to_vec(),
            docker_runc_roots: DOCKER_RUNC_ROOTS.map(String::from).to_vec(),
            create_grace_secs: 120,
            log: LogTarget::Auto,
            log_file: "/var/log/gpu-quota.log".into(),
            driver: DriverConfig::default(),
            inventory: InventoryConfig::default(),
            cdi_dir: "/var/run/cdi".into(),
            mps_control: None,
            mps_root_shares: false,
            burst_reclaim_wait_ms: 30_000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("invalid config {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

/// The most bytes a Unix socket's path may have: `sun_path` holds 108,
/// the last a NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// A socket path longer than [`MAX_SOCKET_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} would be {path} ({len} bytes), and a Unix socket's path holds at most {max} bytes (sun_path is 108 with its NUL): choose a shorter directory", max = MAX_SOCKET_PATH)]
pub struct SocketPathError {
    pub what: String,
    pub path: PathBuf,
    pub len: usize,
}

/// The longest socket path of an MPS daemon under `state_dir`
/// (`<state_dir>/mps/<GPU uuid>/pipe/control_privileged`, core::mps):
/// [`Config::parse`] refuses a `state_dir` that makes it longer than
/// [`MAX_SOCKET_PATH`].
pub fn longest_mps_socket(state_dir: &Path) -> PathBuf {
    use crate::formats::mps as names;
    state_dir
        .join(names::DAEMONS_SUBDIR)
        .join(format!("GPU-{}", "0".repeat(names::GPU_UUID_LEN - 4)))
        .join(names::DAEMON_PIPE)
        .join(names::LONGEST_SOCKET)
}

/// Whether `path` can be a Unix socket's (bind and connect refuse a longer
/// one); `what` says whose socket it is, for the message.
pub fn check_socket_path(what: &str, path: &Path) -> Result<(), SocketPathError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(SocketPathError {
            what: what.into(),
            path: path.into(),
            len,
        });
    }
    Ok(())
}

impl Config {
    /// The path in use: `$GPU_QUOTA_CONFIG`, else the default.
    pub fn path_from_env() -> PathBuf {
        std::env::var_os(ENV_PATH)
            .map(PathBuf::from)
            .unwrap_or_else(|| DEFAULT_PATH.into())
    }

    /// Load `path`; a missing file yields defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(s) => Self::parse(&s, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(ConfigError::Read {
                path: path.into(),
                err: e,
            }),
        }
    }

    pub fn load_default() -> Result<Config, ConfigError> {
        Self::load(&Self::path_from_env())
    }

    pub fn parse(s: &str, path: &Path) -> Result<Config, ConfigError> {
        let bad = |message: String| ConfigError::Parse {
            path: path.into(),
            message,
        };
        let c: Config = toml::from_str(s).map_err(|e| bad(e.to_string()))?;
        c.context_overhead_setting()
            .map_err(|e| bad(format!("context_overhead = {:?}: {e}", c.context_overhead)))?;
        c.reserve_bytes()
            .map_err(|e| bad(format!("reserve = {:?}: {e}", c.reserve)))?;
        // refused here, for every host, rather than when the first share
        // (sm=) starts a daemon whose sockets cannot be made
        let sock = longest_mps_socket(&c.state_dir);
        check_socket_path("the MPS control daemon's socket", &sock).map_err(|e| {
            let room = MAX_SOCKET_PATH - (e.len - c.state_dir.as_os_str().len());
            bad(format!(
                "state_dir = {:?}: {e}; a state_dir of at most {room} bytes leaves room (the default is {})",
                c.state_dir,
                crate::formats::layout::DEFAULT_STATE_DIR
            ))
        })?;
        for g in &c.inventory.gpu {
            g.memory_bytes().map_err(|e| {
                bad(format!(
                    "inventory.gpu {}: memory = {:?}: {e}",
                    g.index, g.memory
                ))
            })?;
        }
        Ok(c)
    }

    /// Per-GPU reserve in bytes ("0" allowed here).
    pub fn reserve_bytes(&self) -> Result<u64, units::SizeError> {
        absolute_or_zero(&self.reserve)
    }

    /// Per-process context charge: "auto" or bytes ("0" allowed).
    pub fn context_overhead_setting(&self) -> Result<Setting, units::SizeError> {
        parse_setting(&self.context_overhead)
    }

    /// The charge in bytes as far as the config alone knows it: the size
    /// given, or for "auto" the built-in default (the measured value lives
    /// in the context-cost cache, see `ctxcost`).
    pub fn context_overhead_bytes(&self) -> Result<u64, units::SizeError> {
        Ok(match self.context_overhead_setting()? {
            Setting::Bytes(b) => b,
            Setting::Auto => BUILTIN_DEFAULT_BYTES,
        })
    }

    /// Whether `runc_root` (the engine's `runc --root`) is one of
    /// `kubernetes_runc_roots` (compared without trailing slashes; a root
    /// inside or beside one is not).
    pub fn is_kubernetes_root(&self, runc_root: Option<&str>) -> bool {
        root_in(&self.kubernetes_runc_roots, runc_root)
    }

    /// Whether `runc_root` is one of `docker_runc_roots` (compared as
    /// `is_kubernetes_root` does).
    pub fn is_docker_root(&self, runc_root: Option<&str>) -> bool {
        root_in(&self.docker_runc_roots, runc_root)
    }

    /// The request policy for the environment of a container started
    /// under `runc_root`: never for the CRI's containers (the scheduler
    /// alone grants those slices), else `env_requests`.
    pub fn env_policy_for(&self, runc_root: Option<&str>) -> crate::request::EnvRequests {
        if self.is_kubernetes_root(runc_root) {
            crate::request::EnvRequests::Ignored
        } else {
            self.env_policy()
        }
    }

    /// The host-wide `env_requests` setting alone (see `env_policy_for`).
    pub fn env_policy(&self) -> crate::request::EnvRequests {
        if self.env_requests {
            crate::request::EnvRequests::Allowed
        } else {
            crate::request::EnvRequests::Ignored
        }
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.ledger_dir.join("ledger.json")
    }
}

/// An absolute size where "0" means none (percentages make no sense here).
fn absolute_or_zero(s: &str) -> Result<u64, units::SizeError> {
    match units::parse_size(s) {
        Ok(units::Size::Bytes(b)) => Ok(b),
        Ok(units::Size::Ppm(_)) => Err(units::SizeError::UnknownUnit("%".into())),
        Err(units::SizeError::Zero) => Ok(0),
        Err(e) => Err(e),
    }
}

impl StaticGpu {
    pub fn memory_bytes(&self) -> Result<u64, units::SizeError> {
        match units::parse_size(&self.memory)? {
            units::Size::Bytes(b) => Ok(b),
            units::Size::Ppm(_) => Err(units::SizeError::UnknownUnit("%".into())),
        }
    }
}

/// `context_overhead = "auto"` without a cache entry and without a usable
/// driver (CI, hosts with a simulated inventory): the H200 figure, the
/// measuring child's NVML usage there (520 MiB: 518 MiB of context + its
/// 2 MiB block) + the 96 MiB margin (`ctxcost::MARGIN_BYTES`). A measured
/// H200 is charged `ctxcost::charge_for(518 MiB)` = 614 MiB
/// (docs/gpu-evidence.md).
pub use gpuquota_formats::ctxcost::BUILTIN_DEFAULT_BYTES;

/// The config key `context_overhead`: `"auto"` or an absolute size ("0" = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Auto,
    Bytes(u64),
}

pub fn parse_setting(s: &str) -> Result<Setting, units::SizeError> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(Setting::Auto);
    }
    match units::parse_size(s) {
        Ok(units::Size::Bytes(b)) => Ok(Setting::Bytes(b)),
        Ok(units::Size::Ppm(_)) => Err(units::SizeError::UnknownUnit("%".into())),
        Err(units::SizeError::Zero) => Ok(Setting::Bytes(0)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_is_defaults() {
        let c = Config::load(Path::new("/nonexistent/gpu-quota.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.placement, Policy::Binpack);
    }

    #[test]
    fn full_file() {
        let s = r#"
ledger_dir = "/tmp/l"
state_dir = "/tmp/s"
runc = "/usr/sbin/runc"
reserve = "1g"
context_overhead = "512m"
placement = "spread"
env_requests = true
log = "file"
log_file = "/tmp/gq.log"
gpus = ["0", "GPU-abc"]
[driver]
dev_root = "/tmp/dev"
lib_dirs = ["/tmp/lib"]
[inventory]
source = "static"
[[inventory.gpu]]
index = 0
uuid = "GPU-0000"
memory = "16g"
"#;
        let c = Config::parse(s, Path::new("x.toml")).unwrap();
        assert_eq!(c.placement, Policy::Spread);
        assert_eq!(c.log, LogTarget::File);
        assert_eq!(c.log_file, PathBuf::from("/tmp/gq.log"));
        assert_eq!(Config::default().log, LogTarget::Auto);
        assert_eq!(c.env_policy(), crate::request::EnvRequests::Allowed);
        assert_eq!(
            Config::default().env_policy(),
            crate::request::EnvRequests::Ignored,
            "env requests are off unless the host turns them on"
        );
        assert_eq!(c.reserve_bytes().unwrap(), 1 << 30);
        assert_eq!(
            c.context_overhead_setting().unwrap(),
            Setting::Bytes(512 << 20)
        );
        assert_eq!(
            Config::default().context_overhead_setting().unwrap(),
            Setting::Auto
        );
        assert_eq!(c.inventory.gpu[0].memory_bytes().unwrap(), 16 << 30);
        assert_eq!(c.driver.dev_root, PathBuf::from("/tmp/dev"));
        assert_eq!(c.driver.ldconfig, PathBuf::from("/sbin/ldconfig"));
    }

    #[test]
    fn env_requests_never_reach_kubernetes_containers() {
        use crate::request::EnvRequests::{Allowed, Ignored};
        let on = Config::parse("env_requests = true", Path::new("x.toml")).unwrap();
        let off = Config::default();
        for k in [
            "/run/containerd/runc/k8s.io",
            "/run/containerd/runc/k8s.io/",
            "/run/gpu-quota-runc",
        ] {
            assert!(on.is_kubernetes_root(Some(k)), "{k}");
            assert_eq!(on.env_policy_for(Some(k)), Ignored, "{k}");
            assert_eq!(off.env_policy_for(Some(k)), Ignored, "{k}");
        }
        for other in [
            Some("/var/run/docker/runtime-runc/moby"),
            Some("/run/containerd/runc/default"),
            Some("/run/containerd/runc/k8s.io.evil"),
            Some("/run/containerd/runc/k8s.io/x"),
            Some("/run/containerd/runc"),
            Some("/"),
            Some(""),
            None,
        ] {
            assert!(!on.is_kubernetes_root(other), "{other:?}");
            assert_eq!(on.env_policy_for(other), Allowed, "{other:?}");
            assert_eq!(off.env_policy_for(other), Ignored, "{other:?}");
        }
        // the list is configurable (a CRI with another root); empty = none
        let c = Config::parse(
            "env_requests = true\nkubernetes_runc_roots = [\"/srv/cri\"]",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.env_policy_for(Some("/srv/cri")), Ignored);
        assert_eq!(
            c.env_policy_for(Some("/run/containerd/runc/k8s.io")),
            Allowed
        );
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let e = Config::parse("placement = \"random\"", Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/x.toml") && e.contains("random"), "{e}");
        let e = Config::parse("reserve = \"lots\"", Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reserve"), "{e}");
        let e = Config::parse("unknown_key = 1", Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown_key"), "{e}");
    }

    /// A state_dir past 38 bytes made every share fail: the MPS daemon's
    /// `control_privileged` socket could not be made, and only a daemon
    /// that never answered said so.
    #[test]
    fn a_state_dir_too_deep_for_the_mps_sockets_is_refused_at_load() {
        let deep = format!("/var/lib/{}/state", "x".repeat(24));
        assert_eq!(deep.len(), 39);
        let e = Config::parse(&format!("state_dir = {deep:?}"), Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/etc/x.toml")
                && e.contains(&format!("{deep}/mps/GPU-"))
                && e.contains("/pipe/control_privileged (108 bytes)")
                && e.contains("at most 107 bytes")
                && e.contains("at most 38 bytes leaves room"),
            "{e}"
        );
        // 38 bytes fit, and so does the default
        let fits = &deep[..deep.len() - 1];
        assert_eq!(
            Config::parse(&format!("state_dir = {fits:?}"), Path::new("x"))
                .unwrap()
                .state_dir,
            PathBuf::from(fits)
        );
        let longest = longest_mps_socket(&Config::default().state_dir);
        assert!(check_socket_path("x", &longest).is_ok(), "{longest:?}");
    }

    #[test]
    fn setting_parses() {
        assert_eq!(parse_setting("auto").unwrap(), Setting::Auto);
        assert_eq!(parse_setting(" AUTO ").unwrap(), Setting::Auto);
        assert_eq!(parse_setting("0").unwrap(), Setting::Bytes(0));
        assert_eq!(parse_setting("512m").unwrap(), Setting::Bytes(512 << 20));
        assert!(parse_setting("10%").is_err());
        assert!(parse_setting("lots").is_err());
    }
}
