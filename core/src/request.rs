//! The request model: what a container asks for, read from OCI annotations
//! (`vram`, `gpu`, `gpus`, `sm`, `sm-procs`, `vram-limit`, `vram-priority`,
//! and the `gpu-quota.io/…` aliases) or, only
//! where the host allows it (`env_requests` in the config, for engines that
//! cannot pass annotations), the process environment (`GPU_QUOTA_VRAM`,
//! `GPU_QUOTA_GPU`, `GPU_QUOTA_GPUS`, `GPU_QUOTA_SM`, `GPU_QUOTA_SM_PROCS`,
//! `GPU_QUOTA_VRAM_LIMIT`, `GPU_QUOTA_VRAM_PRIORITY`).
//!
//! One request has one source: when any request annotation is present the
//! environment is ignored entirely. The environment includes the image's
//! `ENV`, which nobody reviewing a pod or a `docker run` line sees, so it must
//! never add to (or widen) what the annotations asked for.
//!
//! Parsing is pure: it never looks at the host. Checks that need the
//! inventory (unknown index, slice larger than the GPU) happen in placement.
use crate::units::{self, Size, SizeError};
use gpuquota_formats::keys;
use serde_json::{Map, Value};

/// A request field and where its value may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Vram,
    Gpu,
    Gpus,
    Sm,
    SmProcs,
    VramLimit,
    VramPriority,
}

impl Field {
    pub fn annotations(self) -> [&'static str; 2] {
        match self {
            Field::Vram => [keys::ANN_VRAM, keys::ANN_NS_VRAM],
            Field::Gpu => [keys::ANN_GPU, keys::ANN_NS_GPU],
            Field::Gpus => [keys::ANN_GPUS, keys::ANN_NS_GPUS],
            Field::Sm => [keys::ANN_SM, keys::ANN_NS_SM],
            Field::SmProcs => [keys::ANN_SM_PROCS, keys::ANN_NS_SM_PROCS],
            Field::VramLimit => [keys::ANN_VRAM_LIMIT, keys::ANN_NS_VRAM_LIMIT],
            Field::VramPriority => [keys::ANN_VRAM_PRIORITY, keys::ANN_NS_VRAM_PRIORITY],
        }
    }
    pub fn env(self) -> &'static str {
        match self {
            Field::Vram => keys::ENV_VRAM,
            Field::Gpu => keys::ENV_GPU,
            Field::Gpus => keys::ENV_GPUS,
            Field::Sm => keys::ENV_SM,
            Field::SmProcs => keys::ENV_SM_PROCS,
            Field::VramLimit => keys::ENV_VRAM_LIMIT,
            Field::VramPriority => keys::ENV_VRAM_PRIORITY,
        }
    }
    fn accepted(self) -> &'static str {
        match self {
            Field::Vram => units::SIZE_FORMS,
            Field::Gpu => "a GPU index (0), a UUID (GPU-8f6c…), or a comma-separated list of distinct GPUs (0,1)",
            Field::Gpus => "a count of GPUs (1, 2, …) or \"all\"",
            Field::Sm => "a whole percentage of one GPU's SMs from 1% to 100% (sm=25%)",
            Field::SmProcs => "with sm=, the number of CUDA processes the share is split over, from 1 to 64 and at most the share's percentage (sm-procs=4)",
            Field::VramLimit => "with vram= (the guarantee), the most the container may hold on each of its GPUs, at least vram=, in vram='s sizes (vram=4g vram-limit=16g)",
            Field::VramPriority => "with vram-limit=, a whole number from 0 to 1000: among containers holding lent memory on a GPU, the lowest gives it back first, then the newest (default 0)",
        }
    }
}

/// Every annotation key the product reads (for engine allowlists).
pub use keys::ANNOTATION_KEYS;

/// Where a value was found, as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Annotation(String),
    Env(&'static str),
    /// A DRA claim the kubelet prepares (`claims::prepare`): its size was
    /// decided by the scheduler, its GPU named by the allocation.
    Claim {
        namespace: String,
        name: String,
    },
    /// One of a DRA claim's opaque parameters (`memoryLimit`).
    ClaimParam {
        namespace: String,
        name: String,
        key: &'static str,
    },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Annotation(k) => write!(f, "annotation {k}"),
            Origin::Env(k) => write!(f, "environment variable {k}"),
            Origin::Claim { namespace, name } => write!(f, "claim {namespace}/{name}"),
            Origin::ClaimParam {
                namespace,
                name,
                key,
            } => write!(f, "claim {namespace}/{name} parameter {key}"),
        }
    }
}

/// A request the user made that we refuse, with everything needed to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GPU request: {origin}={value:?}: {reason}; accepted: {accepted}")]
pub struct RequestError {
    pub origin: String,
    pub value: String,
    pub reason: String,
    pub accepted: &'static str,
}

/// A GPU named by the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRef {
    Index(u32),
    Uuid(String),
}

impl std::fmt::Display for GpuRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuRef::Index(i) => write!(f, "{i}"),
            GpuRef::Uuid(u) => f.write_str(u),
        }
    }
}

/// Which GPUs the container wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSelector {
    /// Let placement choose this many GPUs.
    Count(u32),
    /// Every GPU that may be sliced.
    All,
    /// Exactly these GPUs.
    List(Vec<GpuRef>),
}

/// A parsed, syntactically valid request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Per-GPU slice.
    pub vram: Size,
    pub gpus: GpuSelector,
    /// Where `vram` came from (for messages).
    pub origin: Origin,
    /// The user named the GPUs (a `gpu` or `gpus` key in the request's one
    /// source), rather than taking the default of one GPU chosen by
    /// placement: an engine's own choice of GPUs (`--gpus`, CDI) may then
    /// only agree with `gpus`, never replace it (`toolkit::reconcile`).
    /// Recorded here, when the request is read, so that nothing after
    /// parsing goes back to config.json's keys.
    pub named_gpus: bool,
    /// A compute share of the one GPU, in percent of its SMs (1–100),
    /// served through that GPU's MPS daemon; `None`: no share.
    pub sm: Option<u32>,
    /// With a share: the number of CUDA processes it is split over
    /// (`sm-procs=`, default 1). MPS bounds each client process, so each of
    /// them gets `sm / sm_procs` and one more is refused at `cuInit`; 0
    /// without a share.
    pub sm_procs: u32,
    /// The host uid the container's process runs as, where a share needs
    /// it (`spec::host_uid`; set at admission, never by the request):
    /// a GPU's MPS daemon serves one user at a time. `None`: not known.
    pub user: Option<u32>,
    /// A burst limit above `vram` (then the guarantee): `vram-limit=`,
    /// `vram-priority=`. `None`: a guaranteed slice.
    pub burst: Option<BurstAsk>,
}

/// A burst as asked: the limit in `vram`'s grammar (a percentage is of
/// each GPU, resolved by placement) and the priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BurstAsk {
    pub limit: Size,
    pub priority: u32,
    /// Where the limit came from (for messages).
    pub origin: Origin,
}

/// Upper bound on `gpus=N` and on list lengths: no host has more.
pub const MAX_GPUS: u32 = 64;

struct Raw {
    origin: Origin,
    value: String,
}

fn err(field: Field, origin: &Origin, value: &str, reason: impl Into<String>) -> RequestError {
    RequestError {
        origin: origin.to_string(),
        value: value.chars().take(units::MAX_VALUE_LEN).collect(),
        reason: reason.into(),
        accepted: field.accepted(),
    }
}

fn lookup_annotation(
    field: Field,
    annotations: Option<&Map<String, Value>>,
) -> Result<Option<Raw>, RequestError> {
    let mut found: Option<Raw> = None;
    if let Some(ann) = annotations {
        for key in field.annotations() {
            let Some(v) = ann.get(key) else { continue };
            let origin = Origin::Annotation(key.to_string());
            let Some(s) = v.as_str() else {
                return Err(err(
                    field,
                    &origin,
                    &v.to_string(),
                    "annotation values must be strings",
                ));
            };
            if let Some(prev) = &found {
                if prev.value != s {
                    return Err(err(
                        field,
                        &origin,
                        s,
                        format!(
                            "contradicts {}={:?}; set only one of them",
                            prev.origin, prev.value
                        ),
                    ));
                }
                continue;
            }
            found = Some(Raw {
                origin,
                value: s.to_string(),
            });
        }
    }
    Ok(found)
}

fn lookup_env(field: Field, env: &[String]) -> Option<Raw> {
    let prefix = format!("{}=", field.env());
    // the first definition wins, as glibc's getenv sees it
    env.iter().find_map(|e| {
        e.strip_prefix(&prefix).map(|v| Raw {
            origin: Origin::Env(field.env()),
            value: v.to_string(),
        })
    })
}

/// Whether the container's environment may carry a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvRequests {
    /// `env_requests = true`: used when no request annotation is present.
    Allowed,
    /// The default: `GPU_QUOTA_*` in the environment is never a request.
    Ignored,
}

/// Every request field set in `env` (`GPU_QUOTA_VRAM`, …), for the notice
/// that they were ignored.
pub fn env_request_vars(env: &[String]) -> Vec<&'static str> {
    [
        Field::Vram,
        Field::Gpu,
        Field::Gpus,
        Field::Sm,
        Field::SmProcs,
    ]
    .into_iter()
    .filter(|f| lookup_env(*f, env).is_some())
    .map(Field::env)
    .collect()
}

/// The OCI process environment of a config.json.
pub fn config_env(config: &Value) -> Vec<String> {
    config
        .pointer("/process/env")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_vram(raw: &Raw) -> Result<Size, RequestError> {
    units::parse_size(&raw.value)
        .map_err(|e: SizeError| err(Field::Vram, &raw.origin, &raw.value, e.to_string()))
}

fn parse_sm(raw: &Raw) -> Result<u32, RequestError> {
    let bad = |reason: &str| err(Field::Sm, &raw.origin, &raw.value, reason);
    let v = raw.value.trim();
    let digits = v.strip_suffix('%').unwrap_or(v).trim();
    if digits.is_empty() {
        return Err(bad("empty value"));
    }
    if digits.starts_with('-') {
        return Err(bad("negative share"));
    }
    if digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("not a whole percentage"));
    }
    match digits.parse::<u32>() {
        Ok(0) => Err(bad("a share of 0% is no share; leave sm out")),
        Ok(p) if p <= gpuquota_formats::grant::SM_MAX => Ok(p),
        _ => Err(bad("more than the whole GPU")),
    }
}

/// `sm-procs` beside a share of `sm` percent: 1 to [`mps::PROCS_MAX`]
/// processes, each getting at least 1 % (MPS's smallest meaningful part,
/// about one SM of an H200).
fn parse_sm_procs(raw: &Raw, sm: u32) -> Result<u32, RequestError> {
    use crate::formats::mps::PROCS_MAX;
    let bad = |reason: String| err(Field::SmProcs, &raw.origin, &raw.value, reason);
    let v = raw.value.trim();
    if v.is_empty() {
        return Err(bad("empty value".into()));
    }
    if v.starts_with('-') || !v.bytes().all(|b| b.is_ascii_digit()) || v.len() > 8 {
        return Err(bad("not a whole number of processes".into()));
    }
    match v.parse::<u32>() {
        Ok(0) => Err(bad(
            "a share split over 0 processes serves none; leave sm-procs out for one".into(),
        )),
        Ok(n) if n > PROCS_MAX => Err(bad(format!(
            "a share is split over at most {PROCS_MAX} CUDA processes; ask for fewer, or run the processes in several containers"
        ))),
        Ok(n) if n > sm => Err(bad(format!(
            "sm={sm}% split over {n} processes would give each less than 1% of the GPU's SMs; ask for at most {sm} processes or a larger share"
        ))),
        Ok(n) => Ok(n),
        Err(_) => Err(bad("not a whole number of processes".into())),
    }
}

fn parse_priority(raw: &Raw) -> Result<u32, RequestError> {
    use crate::formats::grant::PRIORITY_MAX;
    let bad = |reason: &str| err(Field::VramPriority, &raw.origin, &raw.value, reason);
    let v = raw.value.trim();
    if v.is_empty() {
        return Err(bad("empty value"));
    }
    if v.starts_with('-') {
        return Err(bad("negative priority"));
    }
    if v.len() > 4 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("not a whole number from 0 to 1000"));
    }
    match v.parse::<u32>() {
        Ok(p) if p <= PRIORITY_MAX => Ok(p),
        _ => Err(bad("more than 1000")),
    }
}

/// The burst beside a guarantee of `vram`, where `vram-limit` or
/// `vram-priority` was given.
fn parse_burst(
    limit: Option<&Raw>,
    priority: Option<&Raw>,
    vram: Size,
    sm: Option<&Raw>,
) -> Result<Option<BurstAsk>, RequestError> {
    let Some(l) = limit else {
        if let Some(p) = priority {
            return Err(err(
                Field::VramPriority,
                &p.origin,
                &p.value,
                "orders containers holding lent memory, and this one asked for none: add vram-limit=SIZE above vram=, or leave vram-priority out",
            ));
        }
        return Ok(None);
    };
    let size = units::parse_size(&l.value)
        .map_err(|e: SizeError| err(Field::VramLimit, &l.origin, &l.value, e.to_string()))?;
    if let Some(s) = sm {
        return Err(err(
            Field::VramLimit,
            &l.origin,
            &l.value,
            format!("a compute share ({}={}) is a reservation served through MPS, and memory lent under MPS is not measured: ask for sm= with a guaranteed slice (leave vram-limit out), or for a burstable slice without sm=", s.origin, s.value),
        ));
    }
    // bytes beside bytes (or a percentage beside a percentage) compare here;
    // a percentage beside bytes only per GPU, in placement
    let below = match (vram, size) {
        (Size::Bytes(g), Size::Bytes(x)) => x < g,
        (Size::Ppm(g), Size::Ppm(x)) => x < g,
        _ => false,
    };
    if below {
        return Err(err(
            Field::VramLimit,
            &l.origin,
            &l.value,
            "is below the guarantee vram=; a limit is the most the container may hold, guarantee included: ask for at least vram=",
        ));
    }
    if size == vram {
        // a limit equal to the guarantee lends nothing: a guaranteed slice
        return match priority {
            Some(p) => parse_priority(p).map(|_| None),
            None => Ok(None),
        };
    }
    Ok(Some(BurstAsk {
        limit: size,
        priority: priority.map(parse_priority).transpose()?.unwrap_or(0),
        origin: l.origin.clone(),
    }))
}

fn parse_gpu_list(raw: &Raw) -> Result<Vec<GpuRef>, RequestError> {
    let bad = |reason: String| err(Field::Gpu, &raw.origin, &raw.value, reason);
    if raw.value.len() > 1024 {
        return Err(bad("value is too long".into()));
    }
    if raw.value.trim().is_empty() {
        return Err(bad("empty value".into()));
    }
    let mut out: Vec<GpuRef> = Vec::new();
    for part in raw.value.split(',') {
        let p = part.trim();
        let r = if p.is_empty() {
            return Err(bad("empty element in the list".into()));
        } else if p.bytes().all(|b| b.is_ascii_digit()) {
            match p.parse::<u32>() {
                Ok(i) if i < MAX_GPUS => GpuRef::Index(i),
                _ => return Err(bad(format!("GPU index {p} is out of range"))),
            }
        } else if p.len() > 4 && p.as_bytes()[..4].eq_ignore_ascii_case(b"GPU-") {
            let u = &p[4..]; // the first 4 bytes are ASCII: a char boundary
            if u.len() > 64 || !u.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                return Err(bad(format!("{p:?} is not a GPU UUID")));
            }
            GpuRef::Uuid(format!("GPU-{}", u.to_ascii_lowercase()))
        } else if p.len() > 4 && p.as_bytes()[..4].eq_ignore_ascii_case(b"MIG-") {
            return Err(bad(
                "MIG devices are not supported; name the whole GPU".into()
            ));
        } else if p.starts_with('-') {
            return Err(bad(format!("negative GPU index {p}")));
        } else {
            return Err(bad(format!("{p:?} is neither a GPU index nor a GPU UUID")));
        };
        if out.contains(&r) {
            return Err(bad(format!("GPU {p} is listed twice")));
        }
        if out.len() as u32 >= MAX_GPUS {
            return Err(bad("too many GPUs in the list".into()));
        }
        out.push(r);
    }
    Ok(out)
}

fn parse_gpus(raw: &Raw) -> Result<GpuSelector, RequestError> {
    let v = raw.value.trim();
    if v.eq_ignore_ascii_case("all") {
        return Ok(GpuSelector::All);
    }
    let bad = |reason: &str| err(Field::Gpus, &raw.origin, &raw.value, reason);
    if v.is_empty() {
        return Err(bad("empty value"));
    }
    if v.starts_with('-') {
        return Err(bad("negative count"));
    }
    if !v.bytes().all(|b| b.is_ascii_digit()) || v.len() > 8 {
        return Err(bad("not a whole number"));
    }
    match v.parse::<u32>() {
        Ok(0) => Err(bad("count is zero")),
        Ok(n) if n <= MAX_GPUS => Ok(GpuSelector::Count(n)),
        _ => Err(bad("more GPUs than any host has")),
    }
}

impl Request {
    /// For core's tests: a slice of `bytes` on GPU `gpu` (named by
    /// annotation) without a share, for a root process.
    #[cfg(test)]
    pub(crate) fn slice_for_test(bytes: u64, gpu: u32) -> Request {
        Request {
            vram: Size::Bytes(bytes),
            gpus: GpuSelector::List(vec![GpuRef::Index(gpu)]),
            origin: Origin::Annotation("vram".into()),
            named_gpus: true,
            sm: None,
            sm_procs: 0,
            user: Some(0),
            burst: None,
        }
    }

    /// For core's tests: `bytes` and a `sm` % share of GPU `gpu`, for a
    /// container's non-root user (root's shares are the operator's opt-in).
    #[cfg(test)]
    pub(crate) fn share_for_test(bytes: u64, gpu: u32, sm: u32) -> Request {
        Request {
            sm: Some(sm),
            sm_procs: 1,
            user: Some(1000),
            ..Request::slice_for_test(bytes, gpu)
        }
    }

    /// Read the request from a container's annotations and process env.
    /// `Ok(None)` means the container asked for nothing and must be left
    /// untouched.
    pub fn from_parts(
        annotations: Option<&Map<String, Value>>,
        env: &[String],
        env_requests: EnvRequests,
    ) -> Result<Option<Request>, RequestError> {
        let mut vram = lookup_annotation(Field::Vram, annotations)?;
        let mut gpu = lookup_annotation(Field::Gpu, annotations)?;
        let mut gpus = lookup_annotation(Field::Gpus, annotations)?;
        let mut sm = lookup_annotation(Field::Sm, annotations)?;
        let mut procs = lookup_annotation(Field::SmProcs, annotations)?;
        let mut limit = lookup_annotation(Field::VramLimit, annotations)?;
        let mut priority = lookup_annotation(Field::VramPriority, annotations)?;
        let any_annotation = vram.is_some()
            || gpu.is_some()
            || gpus.is_some()
            || sm.is_some()
            || procs.is_some()
            || limit.is_some()
            || priority.is_some();
        if !any_annotation && env_requests == EnvRequests::Allowed {
            vram = lookup_env(Field::Vram, env);
            gpu = lookup_env(Field::Gpu, env);
            gpus = lookup_env(Field::Gpus, env);
            sm = lookup_env(Field::Sm, env);
            procs = lookup_env(Field::SmProcs, env);
            limit = lookup_env(Field::VramLimit, env);
            priority = lookup_env(Field::VramPriority, env);
        }
        if let (Some(r), None) = (&procs, &sm) {
            return Err(err(
                Field::SmProcs,
                &r.origin,
                &r.value,
                "splits a compute share, and none was asked for: add sm=PERCENT (for example sm=25%), or leave sm-procs out",
            ));
        }
        let Some(vram) = vram else {
            if let Some(r) = limit.as_ref().or(priority.as_ref()) {
                let field = if limit.is_some() {
                    Field::VramLimit
                } else {
                    Field::VramPriority
                };
                return Err(err(
                    field,
                    &r.origin,
                    &r.value,
                    "a burst limit was asked for without a guarantee; a limit always comes with one: add vram=SIZE (for example vram=4g vram-limit=16g)",
                ));
            }
            if let Some(r) = &sm {
                return Err(err(
                    Field::Sm,
                    &r.origin,
                    &r.value,
                    "a compute share was asked for without a memory slice; a share always comes with one: add vram=SIZE (for example vram=8g)",
                ));
            }
            if let Some(r) = gpu.as_ref().or(gpus.as_ref()) {
                let field = if gpu.is_some() {
                    Field::Gpu
                } else {
                    Field::Gpus
                };
                return Err(err(
                    field,
                    &r.origin,
                    &r.value,
                    "a GPU was named without a memory slice; add vram=SIZE (for example vram=8g, or vram=100% for the whole GPU)",
                ));
            }
            return Ok(None);
        };
        let size = parse_vram(&vram)?;
        let burst = parse_burst(limit.as_ref(), priority.as_ref(), size, sm.as_ref())?;
        let sm = sm.as_ref().map(parse_sm).transpose()?;
        let sm_procs = match (sm, &procs) {
            (None, _) => 0,
            (Some(_), None) => 1,
            (Some(p), Some(r)) => parse_sm_procs(r, p)?,
        };
        let selector = match (&gpu, &gpus) {
            (None, None) => GpuSelector::Count(1),
            (None, Some(n)) => parse_gpus(n)?,
            (Some(g), None) => GpuSelector::List(parse_gpu_list(g)?),
            (Some(g), Some(n)) => {
                let list = parse_gpu_list(g)?;
                match parse_gpus(n)? {
                    GpuSelector::Count(c) if c as usize == list.len() => GpuSelector::List(list),
                    GpuSelector::All => {
                        return Err(err(
                            Field::Gpus,
                            &n.origin,
                            &n.value,
                            format!("contradicts {}={:?}; use one of them", g.origin, g.value),
                        ))
                    }
                    _ => {
                        return Err(err(
                            Field::Gpus,
                            &n.origin,
                            &n.value,
                            format!(
                                "contradicts {}={:?}, which names {} GPU(s)",
                                g.origin,
                                g.value,
                                list.len()
                            ),
                        ))
                    }
                }
            }
        };
        Ok(Some(Request {
            vram: size,
            gpus: selector,
            origin: vram.origin,
            named_gpus: gpu.is_some() || gpus.is_some(),
            sm,
            sm_procs,
            user: None,
            burst,
        }))
    }

    /// Read from a parsed OCI config.json. Kubernetes sandbox ("pause")
    /// containers get the pod's annotations too but never use a GPU: they
    /// are left alone.
    pub fn from_config(
        config: &Value,
        env_requests: EnvRequests,
    ) -> Result<Option<Request>, RequestError> {
        let ann = config.get("annotations").and_then(Value::as_object);
        if let Some(a) = ann {
            let sandbox = |k: &str| a.get(k).and_then(Value::as_str) == Some("sandbox");
            if sandbox("io.kubernetes.cri.container-type")
                || sandbox("io.kubernetes.cri-o.ContainerType")
            {
                return Ok(None);
            }
        }
        Request::from_parts(ann, &config_env(config), env_requests)
    }
}

#[cfg(test)]
mod tests;
