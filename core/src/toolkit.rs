//! Beside the NVIDIA Container Toolkit: what an engine asked for with
//! `--gpus`, a Compose device reservation, `ctr run --gpus` or a CDI
//! device, reconciled with the gpu-quota request, and the spec edits that
//! leave the container exactly its slice's GPUs.
//!
//! An engine request is detected by what the engine adds to config.json,
//! never by the image's `ENV`; hooks by what they run ([`hooks`]), not by
//! their file name:
//! - `nvidia-container-cli … configure --device=…` (containerd's `oci-hook`
//!   for `ctr run --gpus` and nerdctl, or any wrapper): the GPUs of its
//!   `--device`, which only the engine writes;
//! - the toolkit's legacy hook (`nvidia-container-runtime-hook`, its old
//!   name `nvidia-container-toolkit`, any wrapper naming them): it mounts
//!   the GPUs `NVIDIA_VISIBLE_DEVICES` names (the last definition, as the
//!   toolkit reads it). That variable is the engine's only under Docker
//!   (`--gpus` appends it after the image's ENV and writes the hook as
//!   [`hooks::Role::Legacy`] `docker`), known by the runc root
//!   (`docker_runc_roots`). Anywhere else the hook may be NVIDIA's always-on
//!   hooks.d hook (podman, CRI-O), which puts it in every container, and the
//!   variable is the image's or `-e`'s: it is not read, gpu-quota's own keys
//!   place the slice ([`VisibleFrom`]);
//! - CDI edits: NVIDIA GPU device nodes (`/dev/nvidiaN`) in `linux.devices`:
//!   the GPUs named by those nodes, except the nodes gpu-quota itself added
//!   to a bundle now reused (named by its `gpu-quota.io/assigned`).
//!
//! With a request, gpu-quota owns the container's GPU devices: hooks that
//! hand out GPUs are removed (gpu-quota's own hook injects the driver files
//! and `spec::Devices` adds the slice's nodes), other GPUs' nodes, DRM
//! nodes, rules and mounts go ([`narrow`]), and
//! `NVIDIA_VISIBLE_DEVICES`/`CUDA_VISIBLE_DEVICES` name the slice
//! (`spec::Environment`).
//!
//! Everything here but [`drm::owner`] is pure: the inventory comes in as a
//! list of GPUs.
use crate::request::{GpuRef, GpuSelector, Request};
use serde_json::Value;

pub mod drm;
pub mod hooks;

pub use hooks::{CDI_HOOKS, CLI, LEGACY_HOOKS};

/// The variable the toolkit and Docker use to name GPUs.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// The variable CUDA uses to choose among the GPUs it sees.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// Annotation the runtime adds with the GPUs it assigned (their UUIDs,
/// comma-separated): in a bundle reused after a create, the nodes of those
/// GPUs are gpu-quota's own edit, not an engine's request.
pub use crate::formats::keys::ANN_ASSIGNED as ASSIGNED_ANNOTATION;
/// Major number of the NVIDIA GPU and control device nodes.
pub const NVIDIA_MAJOR: u64 = 195;
/// Minors above this on major 195 are control nodes (nvidiactl 255,
/// nvidia-modeset 254), not GPUs.
pub const MAX_GPU_MINOR: u64 = 253;
/// Longest `NVIDIA_VISIBLE_DEVICES` value looked at.
const MAX_VALUE: usize = 4096;
/// Most entries of a list looked at (no host has more GPUs).
const MAX_LIST: usize = 64;
/// Most distinct DRM nodes whose owner is looked up (the rest go).
const MAX_DRM_LOOKUPS: usize = 64;

/// Who may have set `NVIDIA_VISIBLE_DEVICES` beside the legacy hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisibleFrom {
    /// The engine (Docker's `--gpus`): its value is a request.
    Engine,
    /// Maybe the image or `-e` (an always-on hooks.d hook): never read.
    Unknown,
}

impl VisibleFrom {
    /// For a container created under `runc_root`.
    pub fn for_root(cfg: &crate::config::Config, runc_root: Option<&str>) -> Self {
        if cfg.is_docker_root(runc_root) {
            VisibleFrom::Engine
        } else {
            VisibleFrom::Unknown
        }
    }
}

/// Which GPUs the engine asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineGpus {
    /// `void`, `none`, empty: no GPU.
    Nothing,
    /// `all`, CDI nodes of every GPU of the host, or GPUs the engine did not
    /// choose (a hook whose variable is not read, gpu-quota's own nodes).
    All,
    /// `0,1,…,N-1`: what `--gpus N` and Compose `count: N` write.
    Count(u32),
    /// Exactly these GPUs (`--gpus device=…`, Compose `device_ids`, CDI,
    /// `ctr run --gpus N`).
    List(Vec<GpuRef>),
}

/// How the engine asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineRequest {
    pub gpus: EngineGpus,
    /// The legacy hook is in the spec.
    pub legacy_hook: bool,
    /// An `nvidia-container-cli configure` hook is in the spec.
    pub cli_hook: bool,
    /// NVIDIA GPU device nodes were injected (CDI).
    pub cdi_nodes: bool,
    /// As the user would recognise it, for messages.
    pub described: String,
}

/// What the inventory says about one GPU (index, UUID, device minor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGpu {
    pub index: u32,
    pub uuid: String,
    pub minor: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolkitError {
    #[error("the engine asked for GPUs with {engine} but the gpu-quota request says {ours}; these contradict each other. Name the GPUs once: drop `--gpus`, the device reservation or `nvidia.com/gpu` and use gpu-quota's keys (gpu=…, gpus=…), or make both agree")]
    Contradiction { engine: String, ours: String },
    #[error("{what}={value:?} is not understood: {reason}; use all, a count (--gpus 2), or GPU indices/UUIDs (--gpus '\"device=0,1\"')")]
    Invalid {
        what: String,
        value: String,
        reason: String,
    },
    #[error("the engine injected NVIDIA device node {path} (CDI), which is not a GPU of this host's inventory; refusing rather than leaving it in the container")]
    UnknownNode { path: String },
    #[error("the engine asked for GPU {gpu} with {engine}, which this host does not have; GPUs here: {known}")]
    UnknownGpu {
        engine: String,
        gpu: String,
        known: String,
    },
}

/// Does the spec carry the toolkit's legacy hook (by any name)?
pub fn has_legacy_hook(config: &Value) -> bool {
    hooks::entries(config).any(|(s, h)| matches!(hooks::role(s, h), hooks::Role::Legacy { .. }))
}

/// Does the spec carry one of the toolkit's CDI hooks?
pub fn has_cdi_hook(config: &Value) -> bool {
    hooks::entries(config).any(|(s, h)| hooks::role(s, h) == hooks::Role::Cdi)
}

/// `/dev/nvidiaN` → N (a GPU node; not nvidiactl, nvidia-uvm, …).
pub fn gpu_node_minor(path: &str) -> Option<u32> {
    let n = path.strip_prefix("/dev/nvidia")?;
    if n.is_empty() || n.len() > 3 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// The GPU device nodes in `linux.devices` (path, minor from the path).
fn injected_gpu_nodes(config: &Value) -> Vec<(String, u32)> {
    config
        .pointer("/linux/devices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let p = d.get("path")?.as_str()?;
            Some((p.to_string(), gpu_node_minor(p)?))
        })
        .collect()
}

/// The GPUs gpu-quota assigned to this bundle at an earlier create.
fn assigned_uuids(config: &Value) -> Vec<String> {
    config
        .pointer("/annotations")
        .and_then(|a| a.get(ASSIGNED_ANNOTATION))
        .and_then(Value::as_str)
        .map(|s| {
            s.split(',')
                .take(MAX_LIST)
                .map(|u| u.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default()
}

/// The last `NVIDIA_VISIBLE_DEVICES` of `process.env` (the toolkit reads
/// the environment into a map: the last definition wins).
pub fn visible_devices(config: &Value) -> Option<String> {
    let prefix = format!("{VISIBLE_DEVICES}=");
    config
        .pointer("/process/env")
        .and_then(Value::as_array)?
        .iter()
        .rev()
        .find_map(|e| e.as_str()?.strip_prefix(&prefix))
        .map(|v| v.chars().take(MAX_VALUE).collect())
}

/// Parse a `NVIDIA_VISIBLE_DEVICES` value.
pub fn parse_visible(value: &str) -> Result<EngineGpus, ToolkitError> {
    parse_gpus(
        &format!("{VISIBLE_DEVICES} (set with the NVIDIA Container Toolkit hook)"),
        value,
    )
}

/// Parse a list of GPUs as the toolkit reads it (`what`: where it was
/// found, for the error).
fn parse_gpus(what: &str, value: &str) -> Result<EngineGpus, ToolkitError> {
    let bad = |reason: String| ToolkitError::Invalid {
        what: what.into(),
        value: value.chars().take(128).collect(),
        reason,
    };
    let v = value.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("void") || v.eq_ignore_ascii_case("none") {
        return Ok(EngineGpus::Nothing);
    }
    if v.eq_ignore_ascii_case("all") {
        return Ok(EngineGpus::All);
    }
    let mut list: Vec<GpuRef> = Vec::new();
    for part in v.split(',') {
        let p = part.trim();
        if list.len() >= MAX_LIST {
            return Err(bad("too many GPUs".into()));
        }
        let r = if !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()) {
            GpuRef::Index(
                p.parse()
                    .map_err(|_| bad(format!("{p:?} is out of range")))?,
            )
        } else if p.len() > 4 && p.as_bytes()[..4].eq_ignore_ascii_case(b"GPU-") {
            let u = &p[4..];
            if u.len() > 64 || !u.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                return Err(bad(format!("{p:?} is not a GPU UUID")));
            }
            GpuRef::Uuid(format!("GPU-{}", u.to_ascii_lowercase()))
        } else if p.len() > 4 && p.as_bytes()[..4].eq_ignore_ascii_case(b"MIG-") || p.contains(':')
        {
            return Err(bad(format!(
                "{p:?} is a MIG device; gpu-quota slices whole GPUs"
            )));
        } else {
            return Err(bad(format!("{p:?} is neither a GPU index nor a GPU UUID")));
        };
        if !list.contains(&r) {
            list.push(r);
        }
    }
    // `--gpus N` / `count: N` is written as 0,1,…,N-1: read it as a count
    let n = list.len();
    if list
        .iter()
        .enumerate()
        .all(|(i, r)| *r == GpuRef::Index(i as u32))
    {
        return Ok(EngineGpus::Count(n as u32));
    }
    Ok(EngineGpus::List(list))
}

/// Both of two engine choices, as the container would get them.
fn union(a: EngineGpus, b: EngineGpus) -> EngineGpus {
    match (a, b) {
        (EngineGpus::Nothing, c) | (c, EngineGpus::Nothing) => c,
        (EngineGpus::All, c) | (c, EngineGpus::All) => c,
        (a, b) if a == b => a,
        // two sources disagree: the union is what it would get
        (_, _) => EngineGpus::All,
    }
}

/// The engine's GPU request in `config`, if it made one (also when only
/// gpu-quota's own nodes of an earlier create are there: they must be
/// narrowed too). `from`: who may have set `NVIDIA_VISIBLE_DEVICES`.
pub fn detect(
    config: &Value,
    host: &[HostGpu],
    from: VisibleFrom,
) -> Result<Option<EngineRequest>, ToolkitError> {
    let roles: Vec<hooks::Role> = hooks::entries(config)
        .map(|(s, h)| hooks::role(s, h))
        .filter(hooks::Role::hands_out_gpus)
        .collect();
    let nodes = injected_gpu_nodes(config);
    if roles.is_empty() && nodes.is_empty() {
        return Ok(None);
    }
    let mut parts = vec![];
    let mut gpus = EngineGpus::Nothing;
    let legacy: Vec<bool> = roles
        .iter()
        .filter_map(|r| match r {
            hooks::Role::Legacy { docker } => Some(*docker),
            _ => None,
        })
        .collect();
    if !legacy.is_empty() {
        if from == VisibleFrom::Engine && legacy.iter().all(|d| *d) {
            let v = visible_devices(config);
            // the hook with the variable unset: the toolkit may still mount
            // every GPU (legacy CUDA images): treat it as all
            gpus = match &v {
                Some(v) => parse_visible(v)?,
                None => EngineGpus::All,
            };
            parts.push(format!(
                "the NVIDIA Container Toolkit hook ({VISIBLE_DEVICES}={})",
                v.as_deref().unwrap_or("unset")
            ));
        } else {
            gpus = EngineGpus::All;
            parts.push(format!("the NVIDIA Container Toolkit hook (an always-on or wrapped hook: its {VISIBLE_DEVICES} may be the image's and is not read)"));
        }
    }
    for r in &roles {
        if let hooks::Role::Cli { devices } = r {
            let what = format!("{CLI} configure --device");
            gpus = union(gpus, parse_gpus(&what, devices)?);
            parts.push(format!(
                "the {CLI} hook (ctr run --gpus, nerdctl: --device={devices})"
            ));
        }
    }
    if !nodes.is_empty() {
        let own = assigned_uuids(config);
        let mut list = vec![];
        let mut foreign = vec![];
        for (path, minor) in &nodes {
            let g = host
                .iter()
                .find(|g| g.minor == *minor)
                .ok_or_else(|| ToolkitError::UnknownNode { path: path.clone() })?;
            if own.contains(&g.uuid.to_ascii_lowercase()) {
                continue;
            }
            foreign.push(path.as_str());
            let r = GpuRef::Uuid(g.uuid.clone());
            if !list.contains(&r) {
                list.push(r);
            }
        }
        let cdi = if list.is_empty() {
            // only gpu-quota's own nodes: no choice, but narrowed
            EngineGpus::All
        } else if list.len() == host.len() {
            EngineGpus::All
        } else {
            EngineGpus::List(list)
        };
        if !foreign.is_empty() {
            parts.push(format!(
                "GPU device nodes (CDI or a device plugin) {}",
                foreign.join(",")
            ));
        }
        gpus = union(gpus, cdi);
    }
    let has = |f: fn(&hooks::Role) -> bool| roles.iter().any(f);
    Ok(Some(EngineRequest {
        gpus,
        legacy_hook: has(|r| matches!(r, hooks::Role::Legacy { .. })),
        cli_hook: has(|r| matches!(r, hooks::Role::Cli { .. })),
        cdi_nodes: !nodes.is_empty(),
        described: if parts.is_empty() {
            "gpu-quota's own device nodes of an earlier create".into()
        } else {
            parts.join(" and ")
        },
    }))
}

fn describe_selector(s: &GpuSelector) -> String {
    match s {
        GpuSelector::Count(n) => format!("gpus={n}"),
        GpuSelector::All => "gpus=all".into(),
        GpuSelector::List(l) => format!(
            "gpu={}",
            l.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

fn uuid_of(r: &GpuRef, host: &[HostGpu]) -> Option<String> {
    match r {
        GpuRef::Index(i) => host.iter().find(|g| g.index == *i).map(|g| g.uuid.clone()),
        GpuRef::Uuid(u) => host
            .iter()
            .find(|g| g.uuid.eq_ignore_ascii_case(u))
            .map(|g| g.uuid.clone()),
    }
}

/// The request to admit: the gpu-quota request with the engine's choice of
/// GPUs where it made one; a contradiction is refused naming both. Whether
/// the gpu-quota request named its GPUs itself is `ours.named_gpus`,
/// recorded when it was read: config.json is not looked at again.
pub fn reconcile(
    ours: &Request,
    engine: &EngineRequest,
    host: &[HostGpu],
) -> Result<Request, ToolkitError> {
    Ok(Request {
        gpus: reconcile_gpus(&ours.gpus, ours.named_gpus, engine, host)?,
        ..ours.clone()
    })
}

/// For a container whose GPUs are decided already (a DRA claim's): the
/// engine's request, if it names GPUs, must name exactly these.
pub fn agrees_with(
    uuids: &[String],
    engine: &EngineRequest,
    host: &[HostGpu],
) -> Result<(), ToolkitError> {
    let ours = GpuSelector::List(uuids.iter().map(|u| GpuRef::Uuid(u.clone())).collect());
    reconcile_gpus(&ours, true, engine, host).map(|_| ())
}

/// [`reconcile`]'s decision on the GPUs alone (`named`: the user named
/// `ours`; else it is the default, which the engine's choice replaces).
fn reconcile_gpus(
    ours: &GpuSelector,
    named: bool,
    engine: &EngineRequest,
    host: &[HostGpu],
) -> Result<GpuSelector, ToolkitError> {
    let conflict = || ToolkitError::Contradiction {
        engine: engine.described.clone(),
        ours: if named {
            describe_selector(ours)
        } else {
            "one GPU".into()
        },
    };
    if let EngineGpus::List(e) = &engine.gpus {
        if let Some(r) = e.iter().find(|r| uuid_of(r, host).is_none()) {
            return Err(ToolkitError::UnknownGpu {
                engine: engine.described.clone(),
                gpu: r.to_string(),
                known: host
                    .iter()
                    .map(|g| format!("{} ({})", g.index, g.uuid))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    let mut out = ours.clone();
    match &engine.gpus {
        // no GPU from the engine, or any: placement chooses as asked
        EngineGpus::Nothing | EngineGpus::All => {}
        EngineGpus::Count(n) => match ours {
            _ if !named => out = GpuSelector::Count(*n),
            GpuSelector::Count(m) if m == n => {}
            GpuSelector::List(l) if l.len() == *n as usize => {}
            _ => return Err(conflict()),
        },
        EngineGpus::List(e) => match ours {
            _ if !named => out = GpuSelector::List(e.clone()),
            GpuSelector::Count(m) if *m as usize == e.len() => out = GpuSelector::List(e.clone()),
            GpuSelector::List(l) if l.len() == e.len() => {
                // the same GPUs, however each side named them
                let mut a: Vec<Option<String>> = l.iter().map(|r| uuid_of(r, host)).collect();
                let mut b: Vec<Option<String>> = e.iter().map(|r| uuid_of(r, host)).collect();
                if a.iter().any(Option::is_none) && l != e {
                    // our own unknown GPU: placement names it in its refusal
                    return Err(conflict());
                }
                a.sort();
                b.sort();
                if a != b {
                    return Err(conflict());
                }
            }
            _ => return Err(conflict()),
        },
    }
    Ok(out)
}

/// What [`narrow`] changed, for the runtime's log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Narrowed {
    pub removed_hooks: usize,
    pub removed_nodes: Vec<String>,
    pub removed_rules: usize,
    pub removed_mounts: usize,
}

/// DRM nodes' owners, looked up once each and at most
/// [`MAX_DRM_LOOKUPS`] times in all (an unlooked-up node is not the
/// slice's).
struct DrmOwners<'a> {
    owner: &'a dyn Fn(u32) -> Option<u32>,
    seen: Vec<(u32, Option<u32>)>,
}

impl DrmOwners<'_> {
    fn ours(&mut self, drm_minor: u32, slice_minors: &[u32]) -> bool {
        let o = match self.seen.iter().find(|(m, _)| *m == drm_minor) {
            Some((_, o)) => *o,
            None if self.seen.len() >= MAX_DRM_LOOKUPS => None,
            None => {
                let o = (self.owner)(drm_minor);
                self.seen.push((drm_minor, o));
                o
            }
        };
        o.is_some_and(|g| slice_minors.contains(&g))
    }
}

fn is_drm_path(p: &str) -> bool {
    p == "/dev/dri" || p.starts_with("/dev/dri/")
}

/// Leave the container its slice's GPUs only: remove every hook that hands
/// out GPUs ([`hooks::Role::hands_out_gpus`]), the GPU device nodes of
/// other GPUs (`slice_minors` are kept), their cgroup allow rules (and a
/// wildcard allow of every NVIDIA node), DRM nodes and their rules unless
/// `drm_owner` (DRM minor → NVIDIA minor, [`drm::owner`]) proves them the
/// slice's, and bind mounts of other GPUs' nodes. gpu-quota's own edits
/// then add the slice's nodes and rules (`spec::Devices`) and point the
/// variables naming GPUs at the slice (`spec::Environment`); as a modifier
/// this is `spec::Narrow`.
pub fn narrow(
    config: &mut Value,
    slice_minors: &[u32],
    drm_owner: &dyn Fn(u32) -> Option<u32>,
) -> Narrowed {
    let mut out = Narrowed {
        removed_hooks: hooks::remove_gpu_hooks(config),
        ..Narrowed::default()
    };
    let mut drm = DrmOwners {
        owner: drm_owner,
        seen: vec![],
    };
    let foreign_node = |p: &str| gpu_node_minor(p).is_some_and(|m| !slice_minors.contains(&m));
    if let Some(devs) = config
        .pointer_mut("/linux/devices")
        .and_then(Value::as_array_mut)
    {
        devs.retain(|d| {
            let p = d.get("path").and_then(Value::as_str).unwrap_or("");
            let major = d.get("major").and_then(Value::as_u64);
            let keep = if major == Some(drm::DRM_MAJOR) || is_drm_path(p) {
                major == Some(drm::DRM_MAJOR)
                    && d.get("minor")
                        .and_then(Value::as_u64)
                        .and_then(|m| u32::try_from(m).ok())
                        .is_some_and(|m| drm.ours(m, slice_minors))
            } else {
                !foreign_node(p)
            };
            if !keep {
                out.removed_nodes.push(p.to_string());
            }
            keep
        });
    }
    if let Some(rules) = config
        .pointer_mut("/linux/resources/devices")
        .and_then(Value::as_array_mut)
    {
        let before = rules.len();
        rules.retain(|r| {
            let allow = r.get("allow").and_then(Value::as_bool) == Some(true);
            let major = r.get("major").and_then(Value::as_i64);
            let minor = r.get("minor").and_then(Value::as_i64);
            let ty = r.get("type").and_then(Value::as_str).unwrap_or("a");
            if !allow || !(ty == "c" || ty == "a") {
                return true;
            }
            match (major, minor) {
                (Some(195), None) | (Some(195), Some(-1)) => false,
                (Some(195), Some(m)) => {
                    !(0..=MAX_GPU_MINOR as i64).contains(&m) || slice_minors.contains(&(m as u32))
                }
                (Some(226), Some(m)) => u32::try_from(m).is_ok_and(|m| drm.ours(m, slice_minors)),
                (Some(226), None) => false,
                _ => true,
            }
        });
        out.removed_rules = before - rules.len();
    }
    if let Some(mounts) = config.get_mut("mounts").and_then(Value::as_array_mut) {
        let before = mounts.len();
        mounts.retain(|m| {
            let s = m.get("source").and_then(Value::as_str).unwrap_or("");
            let d = m.get("destination").and_then(Value::as_str).unwrap_or("");
            !foreign_node(s) && !foreign_node(d)
        });
        out.removed_mounts = before - mounts.len();
    }
    out
}

/// The inventory as [`detect`] and [`reconcile`] see it.
pub fn host_gpus(inv: &crate::Inventory) -> Vec<HostGpu> {
    inv.gpus
        .iter()
        .map(|g| HostGpu {
            index: g.index,
            uuid: g.uuid.clone(),
            minor: g.minor,
        })
        .collect()
}

/// For the runtime's create: the request to admit, and the engine's
/// request when there is one (then the spec is narrowed to the slice:
/// `spec::Narrow`).
pub fn request_for_create(
    config: &Value,
    req: &Request,
    inv: &crate::Inventory,
    from: VisibleFrom,
) -> Result<(Request, Option<EngineRequest>), ToolkitError> {
    let host = host_gpus(inv);
    let Some(engine) = detect(config, &host, from)? else {
        return Ok((req.clone(), None));
    };
    let r = reconcile(req, &engine, &host)?;
    Ok((r, Some(engine)))
}

#[cfg(test)]
mod tests;
