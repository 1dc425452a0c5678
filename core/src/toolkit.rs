//! Beside the NVIDIA Container Toolkit (issue 19): what an engine asked for
//! with `--gpus`, a Compose device reservation or a CDI device, reconciled
//! with the gpu-quota request, and the spec edits that leave the container
//! exactly its slice's GPUs.
//!
//! An engine request is detected by what the engine adds to config.json,
//! never by the image's `ENV`:
//! - the toolkit's legacy hook (`nvidia-container-runtime-hook`, or its old
//!   name `nvidia-container-toolkit`, as the path's basename of any hook): it
//!   would mount the GPUs named by `NVIDIA_VISIBLE_DEVICES` (the last
//!   definition in `process.env`, as the toolkit reads it) into the
//!   container; Docker's `--gpus` writes `all`, the ids given, or for a
//!   count N `0,1,…,N-1`;
//! - CDI edits: NVIDIA GPU device nodes (`/dev/nvidiaN`) in `linux.devices`
//!   (with `nvidia-cdi-hook` / `nvidia-ctk` hooks or not): the GPUs named
//!   by those nodes.
//!
//! `NVIDIA_VISIBLE_DEVICES` without the hook means nothing (CUDA base images
//! set it to `all` themselves).
//!
//! Everything here is pure: the inventory comes in as a list of GPUs.
use crate::request::{GpuRef, GpuSelector, Origin, Request};
use serde_json::Value;

/// Basenames of the toolkit's legacy OCI hook.
pub const LEGACY_HOOKS: [&str; 2] = ["nvidia-container-runtime-hook", "nvidia-container-toolkit"];
/// Basenames of the toolkit's CDI hooks (kept: they set up driver files).
pub const CDI_HOOKS: [&str; 2] = ["nvidia-cdi-hook", "nvidia-ctk"];
/// The variable the toolkit and Docker use to name GPUs.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// Major number of the NVIDIA GPU and control device nodes.
pub const NVIDIA_MAJOR: u64 = 195;
/// Minors above this on major 195 are control nodes (nvidiactl 255,
/// nvidia-modeset 254), not GPUs.
pub const MAX_GPU_MINOR: u64 = 253;
/// Longest `NVIDIA_VISIBLE_DEVICES` value looked at.
const MAX_VALUE: usize = 4096;
/// Most entries of a list looked at (no host has more GPUs).
const MAX_LIST: usize = 64;

/// Which GPUs the engine asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineGpus {
    /// `void`, `none`, empty: no GPU.
    Nothing,
    /// `all`, or CDI nodes of every GPU of the host.
    All,
    /// `0,1,…,N-1`: what `--gpus N` and Compose `count: N` write.
    Count(u32),
    /// Exactly these GPUs (`--gpus device=…`, Compose `device_ids`, CDI).
    List(Vec<GpuRef>),
}

/// How the engine asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineRequest {
    pub gpus: EngineGpus,
    /// The legacy hook is in the spec.
    pub legacy_hook: bool,
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
    #[error("{VISIBLE_DEVICES}={value:?} set with the NVIDIA Container Toolkit hook is not understood: {reason}; use all, a count (--gpus 2), or GPU indices/UUIDs (--gpus '\"device=0,1\"')")]
    Invalid { value: String, reason: String },
    #[error("the engine injected NVIDIA device node {path} (CDI), which is not a GPU of this host's inventory; refusing rather than leaving it in the container")]
    UnknownNode { path: String },
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn hook_entries(config: &Value) -> impl Iterator<Item = (&str, &Value)> {
    config
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter())
        .filter_map(|(stage, v)| Some((stage.as_str(), v.as_array()?)))
        .flat_map(|(stage, a)| a.iter().map(move |h| (stage, h)))
}

fn hook_is(h: &Value, names: &[&str]) -> bool {
    h.get("path")
        .and_then(Value::as_str)
        .is_some_and(|p| names.contains(&basename(p)))
}

/// Does the spec carry the toolkit's legacy hook?
pub fn has_legacy_hook(config: &Value) -> bool {
    hook_entries(config).any(|(_, h)| hook_is(h, &LEGACY_HOOKS))
}

/// Does the spec carry one of the toolkit's CDI hooks?
pub fn has_cdi_hook(config: &Value) -> bool {
    hook_entries(config).any(|(_, h)| hook_is(h, &CDI_HOOKS))
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
    let bad = |reason: String| ToolkitError::Invalid {
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

/// The engine's GPU request in `config`, if it made one.
pub fn detect(config: &Value, host: &[HostGpu]) -> Result<Option<EngineRequest>, ToolkitError> {
    let legacy_hook = has_legacy_hook(config);
    let nodes = injected_gpu_nodes(config);
    if !legacy_hook && nodes.is_empty() {
        return Ok(None);
    }
    let mut parts = vec![];
    let mut gpus = EngineGpus::Nothing;
    if legacy_hook {
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
    }
    if !nodes.is_empty() {
        let mut list = vec![];
        for (path, minor) in &nodes {
            let g = host
                .iter()
                .find(|g| g.minor == *minor)
                .ok_or_else(|| ToolkitError::UnknownNode { path: path.clone() })?;
            let r = GpuRef::Uuid(g.uuid.clone());
            if !list.contains(&r) {
                list.push(r);
            }
        }
        let cdi = if list.len() == host.len() {
            EngineGpus::All
        } else {
            EngineGpus::List(list)
        };
        parts.push(format!(
            "GPU device nodes (CDI or a device plugin) {}",
            nodes
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ));
        gpus = match (gpus, cdi) {
            (EngineGpus::Nothing, c) => c,
            (EngineGpus::All, c) | (c, EngineGpus::All) => c,
            (a, b) if a == b => a,
            // the hook and CDI disagree: the union is what it would get
            (_, _) => EngineGpus::All,
        };
    }
    Ok(Some(EngineRequest {
        gpus,
        legacy_hook,
        cdi_nodes: !nodes.is_empty(),
        described: parts.join(" and "),
    }))
}

/// Did the gpu-quota request name its GPUs (`gpu`/`gpus` annotations, or
/// the env keys when the request came from the environment)?
pub fn names_gpus(config: &Value, req: &Request) -> bool {
    match &req.origin {
        Origin::Annotation(_) => {
            let ann = config.get("annotations").and_then(Value::as_object);
            ["gpu", "gpus", "gpu-quota.io/gpu", "gpu-quota.io/gpus"]
                .iter()
                .any(|k| ann.is_some_and(|a| a.contains_key(*k)))
        }
        Origin::Env(_) => {
            let env = crate::request::config_env(config);
            env.iter()
                .any(|e| e.starts_with("GPU_QUOTA_GPU=") || e.starts_with("GPU_QUOTA_GPUS="))
        }
    }
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
/// GPUs where it made one; a contradiction is refused naming both.
/// `named`: the gpu-quota request named its GPUs itself ([`names_gpus`]).
pub fn reconcile(
    ours: &Request,
    named: bool,
    engine: &EngineRequest,
    host: &[HostGpu],
) -> Result<Request, ToolkitError> {
    let conflict = || ToolkitError::Contradiction {
        engine: engine.described.clone(),
        ours: if named {
            describe_selector(&ours.gpus)
        } else {
            "one GPU".into()
        },
    };
    let mut out = ours.clone();
    match &engine.gpus {
        // no GPU from the engine, or any: placement chooses as asked
        EngineGpus::Nothing | EngineGpus::All => {}
        EngineGpus::Count(n) => match &ours.gpus {
            _ if !named => out.gpus = GpuSelector::Count(*n),
            GpuSelector::Count(m) if m == n => {}
            GpuSelector::List(l) if l.len() == *n as usize => {}
            _ => return Err(conflict()),
        },
        EngineGpus::List(e) => match &ours.gpus {
            _ if !named => out.gpus = GpuSelector::List(e.clone()),
            GpuSelector::Count(m) if *m as usize == e.len() => {
                out.gpus = GpuSelector::List(e.clone())
            }
            GpuSelector::List(l) if l.len() == e.len() => {
                // the same GPUs, however each side named them
                let mut a: Vec<Option<String>> = l.iter().map(|r| uuid_of(r, host)).collect();
                let mut b: Vec<Option<String>> = e.iter().map(|r| uuid_of(r, host)).collect();
                if a.iter().chain(b.iter()).any(Option::is_none) {
                    // an unknown GPU: placement names it in its refusal
                    if l != e {
                        return Err(conflict());
                    }
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

/// Leave the container its slice's GPUs only: remove the toolkit's legacy
/// hook (as the toolkit's own hook remover does), the GPU device nodes of
/// other GPUs (`slice_minors` are kept), their cgroup allow rules (and a
/// wildcard allow of every NVIDIA node), bind mounts of other GPUs' nodes,
/// and point `NVIDIA_VISIBLE_DEVICES` at the slice's UUIDs. gpu-quota's
/// own edits (spec::patch) then add the slice's nodes and rules.
pub fn narrow(config: &mut Value, slice_minors: &[u32], slice_uuids: &[String]) -> Narrowed {
    let mut out = Narrowed::default();
    if let Some(hooks) = config.get_mut("hooks").and_then(Value::as_object_mut) {
        for list in hooks.values_mut().filter_map(Value::as_array_mut) {
            let before = list.len();
            list.retain(|h| !hook_is(h, &LEGACY_HOOKS));
            out.removed_hooks += before - list.len();
        }
    }
    let foreign_node = |p: &str| gpu_node_minor(p).is_some_and(|m| !slice_minors.contains(&m));
    if let Some(devs) = config
        .pointer_mut("/linux/devices")
        .and_then(Value::as_array_mut)
    {
        devs.retain(|d| {
            let p = d.get("path").and_then(Value::as_str).unwrap_or("");
            if foreign_node(p) {
                out.removed_nodes.push(p.to_string());
                false
            } else {
                true
            }
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
    if let Some(env) = config
        .pointer_mut("/process/env")
        .and_then(Value::as_array_mut)
    {
        let prefix = format!("{VISIBLE_DEVICES}=");
        for e in env.iter_mut() {
            if e.as_str().is_some_and(|s| s.starts_with(&prefix)) {
                *e = Value::String(format!("{prefix}{}", slice_uuids.join(",")));
            }
        }
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
/// request when there is one (then [`narrow_to_slices`] must follow).
pub fn request_for_create(
    config: &Value,
    req: &Request,
    inv: &crate::Inventory,
) -> Result<(Request, Option<EngineRequest>), ToolkitError> {
    let host = host_gpus(inv);
    let Some(engine) = detect(config, &host)? else {
        return Ok((req.clone(), None));
    };
    let named = names_gpus(config, req);
    let r = reconcile(req, named, &engine, &host)?;
    Ok((r, Some(engine)))
}

/// [`narrow`] to the GPUs admitted.
pub fn narrow_to_slices(
    config: &mut Value,
    inv: &crate::Inventory,
    slices: &[crate::placement::Slice],
) -> Narrowed {
    let minors: Vec<u32> = slices
        .iter()
        .filter_map(|s| inv.find_uuid(&s.uuid).map(|g| g.minor))
        .collect();
    let uuids: Vec<String> = slices.iter().map(|s| s.uuid.clone()).collect();
    narrow(config, &minors, &uuids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Size;
    use serde_json::json;

    fn host() -> Vec<HostGpu> {
        (0..4)
            .map(|i| HostGpu {
                index: i,
                uuid: format!("GPU-0000000{i}-0000-0000-0000-000000000000"),
                minor: i,
            })
            .collect()
    }
    fn req(gpus: GpuSelector) -> Request {
        Request {
            vram: Size::Bytes(8 << 30),
            gpus,
            origin: Origin::Annotation("vram".into()),
        }
    }
    /// What dockerd 26 writes for `--gpus X` (legacy hook + env).
    fn docker(visible: &str) -> Value {
        json!({
            "process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", format!("NVIDIA_VISIBLE_DEVICES={visible}")]},
            "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["/usr/bin/nvidia-container-runtime-hook", "prestart"]}]},
            "annotations": {"vram": "8g"}
        })
    }
    fn engine(v: &Value) -> EngineRequest {
        detect(v, &host()).unwrap().unwrap()
    }

    #[test]
    fn image_env_alone_is_not_a_request() {
        let v = json!({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4"]},
                        "hooks": {"prestart": [{"path": "/usr/bin/other-hook"}]}});
        assert_eq!(detect(&v, &host()), Ok(None));
        assert_eq!(detect(&json!({}), &host()), Ok(None));
    }

    #[test]
    fn docker_gpus_forms() {
        assert_eq!(engine(&docker("all")).gpus, EngineGpus::All);
        assert_eq!(engine(&docker("0,1")).gpus, EngineGpus::Count(2));
        assert_eq!(engine(&docker("0")).gpus, EngineGpus::Count(1));
        assert_eq!(
            engine(&docker("1")).gpus,
            EngineGpus::List(vec![GpuRef::Index(1)])
        );
        assert_eq!(
            engine(&docker("1,GPU-ABCD-01")).gpus,
            EngineGpus::List(vec![GpuRef::Index(1), GpuRef::Uuid("GPU-abcd-01".into())])
        );
        assert_eq!(engine(&docker("void")).gpus, EngineGpus::Nothing);
        assert_eq!(engine(&docker("none")).gpus, EngineGpus::Nothing);
        // the last definition counts (the image's `all` comes first)
        let e = engine(&docker("2"));
        assert!(e.legacy_hook && !e.cdi_nodes);
        assert!(
            e.described.contains("NVIDIA_VISIBLE_DEVICES=2"),
            "{}",
            e.described
        );
        // the old hook name, in createRuntime
        let v = json!({"hooks": {"createRuntime": [{"path": "/x/nvidia-container-toolkit"}]}});
        assert_eq!(engine(&v).gpus, EngineGpus::All, "unset: all");
        for bad in ["MIG-1234", "0:1", "GPU-xyz", "one"] {
            assert!(
                matches!(
                    detect(&docker(bad), &host()),
                    Err(ToolkitError::Invalid { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn cdi_nodes() {
        let v = json!({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
            "linux": {"devices": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia2"}, {"path": "/dev/nvidia-uvm"}]},
            "hooks": {"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}]}});
        let e = engine(&v);
        assert!(e.cdi_nodes && !e.legacy_hook);
        assert!(has_cdi_hook(&v));
        assert_eq!(
            e.gpus,
            EngineGpus::List(vec![GpuRef::Uuid(host()[2].uuid.clone())])
        );
        let all = json!({"linux": {"devices": (0..4).map(|i| json!({"path": format!("/dev/nvidia{i}")})).collect::<Vec<_>>()}});
        assert_eq!(engine(&all).gpus, EngineGpus::All);
        let unknown = json!({"linux": {"devices": [{"path": "/dev/nvidia9"}]}});
        assert!(matches!(
            detect(&unknown, &host()),
            Err(ToolkitError::UnknownNode { .. })
        ));
        assert_eq!(gpu_node_minor("/dev/nvidia-uvm"), None);
        assert_eq!(gpu_node_minor("/dev/nvidiactl"), None);
        assert_eq!(gpu_node_minor("/dev/nvidia12"), Some(12));
    }

    #[test]
    fn reconcile_rules() {
        let h = host();
        let one = req(GpuSelector::Count(1));
        // --gpus device=1 chooses the GPU of the slice
        let r = reconcile(&one, false, &engine(&docker("1")), &h).unwrap();
        assert_eq!(r.gpus, GpuSelector::List(vec![GpuRef::Index(1)]));
        // --gpus 2 is gpus=2
        let r = reconcile(&one, false, &engine(&docker("0,1")), &h).unwrap();
        assert_eq!(r.gpus, GpuSelector::Count(2));
        // --gpus all: placement chooses what the request says
        let r = reconcile(&one, false, &engine(&docker("all")), &h).unwrap();
        assert_eq!(r.gpus, GpuSelector::Count(1));
        let r = reconcile(
            &req(GpuSelector::Count(3)),
            true,
            &engine(&docker("all")),
            &h,
        )
        .unwrap();
        assert_eq!(r.gpus, GpuSelector::Count(3));
        // agreeing: by index on one side, UUID on the other
        let g1 = req(GpuSelector::List(vec![GpuRef::Uuid(h[1].uuid.clone())]));
        let r = reconcile(&g1, true, &engine(&docker("1")), &h).unwrap();
        assert_eq!(r.gpus, g1.gpus);
        let r = reconcile(
            &req(GpuSelector::Count(2)),
            true,
            &engine(&docker("0,1")),
            &h,
        )
        .unwrap();
        assert_eq!(r.gpus, GpuSelector::Count(2));
        // contradictions, naming both
        let g0 = req(GpuSelector::List(vec![GpuRef::Index(0)]));
        let e = reconcile(&g0, true, &engine(&docker("1")), &h).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("NVIDIA_VISIBLE_DEVICES=1") && msg.contains("gpu=0"),
            "{msg}"
        );
        assert!(reconcile(
            &req(GpuSelector::Count(1)),
            true,
            &engine(&docker("0,1")),
            &h
        )
        .is_err());
        assert!(reconcile(&req(GpuSelector::All), true, &engine(&docker("0,1")), &h).is_err());
        assert!(reconcile(&req(GpuSelector::Count(2)), true, &engine(&docker("1")), &h).is_err());
        assert!(reconcile(
            &req(GpuSelector::List(vec![GpuRef::Index(2), GpuRef::Index(3)])),
            true,
            &engine(&docker("0,1")),
            &h
        )
        .is_ok());
        assert!(reconcile(
            &req(GpuSelector::List(vec![GpuRef::Index(2)])),
            true,
            &engine(&docker("0,1")),
            &h
        )
        .is_err());
    }

    #[test]
    fn names_gpus_by_origin() {
        let v = json!({"annotations": {"vram": "8g", "gpu-quota.io/gpus": "2"}});
        assert!(names_gpus(&v, &req(GpuSelector::Count(2))));
        assert!(!names_gpus(
            &json!({"annotations": {"vram": "8g"}}),
            &req(GpuSelector::Count(1))
        ));
        let mut r = req(GpuSelector::Count(1));
        r.origin = Origin::Env("GPU_QUOTA_VRAM");
        assert!(names_gpus(
            &json!({"process": {"env": ["GPU_QUOTA_GPU=1"]}}),
            &r
        ));
        assert!(!names_gpus(&json!({"annotations": {"gpu": "1"}}), &r));
    }

    #[test]
    fn narrow_to_the_slice() {
        let mut v = json!({
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "A=b", "NVIDIA_VISIBLE_DEVICES=void"]},
            "hooks": {
                "prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}, {"path": "/usr/bin/keep"}],
                "createContainer": [{"path": "/usr/bin/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}]
            },
            "mounts": [
                {"destination": "/dev/nvidia3", "source": "/dev/nvidia3", "type": "bind"},
                {"destination": "/usr/lib/libcuda.so.1", "source": "/usr/lib/libcuda.so.1", "type": "bind"}
            ],
            "linux": {
                "devices": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}, {"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/null"}],
                "resources": {"devices": [
                    {"allow": false, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 195, "minor": 255, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 195, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
                ]}
            }
        });
        let n = narrow(&mut v, &[1], &["GPU-1".into()]);
        assert_eq!(n.removed_hooks, 1);
        assert_eq!(n.removed_nodes, vec!["/dev/nvidia0".to_string()]);
        assert_eq!(n.removed_rules, 2);
        assert_eq!(n.removed_mounts, 1);
        assert_eq!(v["hooks"]["prestart"], json!([{"path": "/usr/bin/keep"}]));
        assert_eq!(
            v["hooks"]["createContainer"].as_array().unwrap().len(),
            1,
            "CDI hooks kept"
        );
        let paths: Vec<&str> = v["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/dev/nvidia1",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/null"
            ]
        );
        let minors: Vec<Value> = v["linux"]["resources"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["minor"].clone())
            .collect();
        assert_eq!(minors, [Value::Null, json!(1), json!(255), json!(3)]);
        assert_eq!(
            v["process"]["env"],
            json!([
                "NVIDIA_VISIBLE_DEVICES=GPU-1",
                "A=b",
                "NVIDIA_VISIBLE_DEVICES=GPU-1"
            ])
        );
        assert!(!has_legacy_hook(&v));
        // idempotent
        let once = v.clone();
        assert_eq!(narrow(&mut v, &[1], &["GPU-1".into()]), Narrowed::default());
        assert_eq!(v, once);
    }
}
