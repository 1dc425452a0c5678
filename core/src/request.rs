//! The request model: what a container asks for, read from OCI annotations
//! (`vram`, `gpu`, `gpus`, `sm`, and the `gpu-quota.io/…` aliases) or, only
//! where the host allows it (`env_requests` in the config, for engines that
//! cannot pass annotations), the process environment (`GPU_QUOTA_VRAM`,
//! `GPU_QUOTA_GPU`, `GPU_QUOTA_GPUS`, `GPU_QUOTA_SM`).
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
}

impl Field {
    pub fn annotations(self) -> [&'static str; 2] {
        match self {
            Field::Vram => [keys::ANN_VRAM, keys::ANN_NS_VRAM],
            Field::Gpu => [keys::ANN_GPU, keys::ANN_NS_GPU],
            Field::Gpus => [keys::ANN_GPUS, keys::ANN_NS_GPUS],
            Field::Sm => [keys::ANN_SM, keys::ANN_NS_SM],
        }
    }
    pub fn env(self) -> &'static str {
        match self {
            Field::Vram => keys::ENV_VRAM,
            Field::Gpu => keys::ENV_GPU,
            Field::Gpus => keys::ENV_GPUS,
            Field::Sm => keys::ENV_SM,
        }
    }
    fn accepted(self) -> &'static str {
        match self {
            Field::Vram => units::SIZE_FORMS,
            Field::Gpu => "a GPU index (0), a UUID (GPU-8f6c…), or a comma-separated list of distinct GPUs (0,1)",
            Field::Gpus => "a count of GPUs (1, 2, …) or \"all\"",
            Field::Sm => "a whole percentage of one GPU's SMs from 1% to 100% (sm=25%)",
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
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Annotation(k) => write!(f, "annotation {k}"),
            Origin::Env(k) => write!(f, "environment variable {k}"),
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
    /// The host uid the container's process runs as, where a share needs
    /// it (`spec::host_uid`; set at admission, never by the request):
    /// a GPU's MPS daemon serves one user at a time. `None`: not known.
    pub user: Option<u32>,
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
    [Field::Vram, Field::Gpu, Field::Gpus, Field::Sm]
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
    /// For core's tests: `bytes` and a `sm` % share of GPU `gpu` (named by
    /// annotation), for a root process.
    #[cfg(test)]
    pub(crate) fn share_for_test(bytes: u64, gpu: u32, sm: u32) -> Request {
        Request {
            vram: Size::Bytes(bytes),
            gpus: GpuSelector::List(vec![GpuRef::Index(gpu)]),
            origin: Origin::Annotation("vram".into()),
            named_gpus: true,
            sm: Some(sm),
            user: Some(0),
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
        let any_annotation = vram.is_some() || gpu.is_some() || gpus.is_some() || sm.is_some();
        if !any_annotation && env_requests == EnvRequests::Allowed {
            vram = lookup_env(Field::Vram, env);
            gpu = lookup_env(Field::Gpu, env);
            gpus = lookup_env(Field::Gpus, env);
            sm = lookup_env(Field::Sm, env);
        }
        let Some(vram) = vram else {
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
        let sm = sm.as_ref().map(parse_sm).transpose()?;
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
            user: None,
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
mod tests {
    use super::*;
    use serde_json::json;
    const G: u64 = 1 << 30;

    fn ann(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn compute_share() {
        let r = |v: Value| Request::from_parts(Some(&ann(v)), &[], EnvRequests::Ignored);
        let ok = r(json!({"vram": "8g", "sm": "25%"})).unwrap().unwrap();
        assert_eq!((ok.sm, ok.vram), (Some(25), Size::Bytes(8 * G)));
        assert_eq!(
            r(json!({"vram": "8g", "gpu-quota.io/sm": "100"}))
                .unwrap()
                .unwrap()
                .sm,
            Some(100)
        );
        assert_eq!(r(json!({"vram": "8g"})).unwrap().unwrap().sm, None);
        for (bad, why) in [
            ("0%", "no share"),
            ("101%", "whole GPU"),
            ("-5%", "negative"),
            ("12.5%", "whole percentage"),
            ("%", "empty"),
            ("1000", "whole percentage"),
        ] {
            let e = r(json!({"vram": "8g", "sm": bad})).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        let e = r(json!({"sm": "25%"})).unwrap_err().to_string();
        assert!(
            e.contains("without a memory slice") && e.contains("vram="),
            "{e}"
        );
        // the environment form, only where env requests are allowed, and
        // never beside an annotation
        let env = [
            "GPU_QUOTA_VRAM=4g".to_string(),
            "GPU_QUOTA_SM=50%".to_string(),
        ];
        let allowed = Request::from_parts(None, &env, EnvRequests::Allowed)
            .unwrap()
            .unwrap();
        assert_eq!(allowed.sm, Some(50));
        assert_eq!(
            Request::from_parts(None, &env, EnvRequests::Ignored).unwrap(),
            None
        );
        let a = Request::from_parts(
            Some(&ann(json!({"vram": "1g"}))),
            &env,
            EnvRequests::Allowed,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.sm, None, "an image ENV never adds a share to annotations");
    }

    #[test]
    fn no_request() {
        assert_eq!(
            Request::from_parts(
                Some(&ann(json!({"foo": "bar"}))),
                &["PATH=/bin".into()],
                EnvRequests::Allowed
            ),
            Ok(None)
        );
        assert_eq!(
            Request::from_parts(None, &[], EnvRequests::Ignored),
            Ok(None)
        );
    }

    #[test]
    fn annotation_and_aliases() {
        let r = Request::from_parts(Some(&ann(json!({"vram": "4g"}))), &[], EnvRequests::Ignored)
            .unwrap()
            .unwrap();
        assert_eq!(r.vram, Size::Bytes(4 * G));
        assert_eq!(r.gpus, GpuSelector::Count(1));
        let r = Request::from_parts(
            Some(&ann(
                json!({"gpu-quota.io/vram": "2g", "gpu-quota.io/gpu": "1"}),
            )),
            &[],
            EnvRequests::Ignored,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.vram, Size::Bytes(2 * G));
        assert_eq!(r.gpus, GpuSelector::List(vec![GpuRef::Index(1)]));
        // same value under both keys is fine
        assert!(Request::from_parts(
            Some(&ann(json!({"vram": "2g", "gpu-quota.io/vram": "2g"}))),
            &[],
            EnvRequests::Ignored
        )
        .is_ok());
    }

    #[test]
    fn kubernetes_sandbox_is_left_alone() {
        let c = json!({"annotations": {"gpu-quota.io/vram": "8g", "io.kubernetes.cri.container-type": "sandbox"}});
        assert_eq!(Request::from_config(&c, EnvRequests::Ignored), Ok(None));
        let c = json!({"annotations": {"gpu-quota.io/vram": "8g", "io.kubernetes.cri-o.ContainerType": "sandbox"}});
        assert_eq!(Request::from_config(&c, EnvRequests::Ignored), Ok(None));
        let c = json!({"annotations": {"gpu-quota.io/vram": "8g", "io.kubernetes.cri.container-type": "container"}});
        assert!(Request::from_config(&c, EnvRequests::Ignored)
            .unwrap()
            .is_some());
    }

    /// Issue 8, class 2: annotation `vram=1g` plus image `ENV GPU_QUOTA_GPUS=2`
    /// gave the container two GPUs (fields were merged one by one). One
    /// request has one source.
    #[test]
    fn annotations_make_the_environment_irrelevant() {
        let env = vec![
            "GPU_QUOTA_VRAM=8g".to_string(),
            "GPU_QUOTA_GPUS=2".to_string(),
        ];
        for policy in [EnvRequests::Allowed, EnvRequests::Ignored] {
            let r = Request::from_parts(Some(&ann(json!({"vram": "1g"}))), &env, policy)
                .unwrap()
                .unwrap();
            assert_eq!(r.vram, Size::Bytes(G));
            assert_eq!(
                r.gpus,
                GpuSelector::Count(1),
                "{policy:?}: env must not add GPUs"
            );
            assert_eq!(r.origin, Origin::Annotation("vram".into()));
        }
        // an annotation naming only the GPU still makes the env irrelevant
        // (and is refused for lacking a slice, not completed from the env)
        let e = Request::from_parts(Some(&ann(json!({"gpu": "0"}))), &env, EnvRequests::Allowed)
            .unwrap_err();
        assert!(e.to_string().contains("without a memory slice"), "{e}");
        // where the host allows env requests and no annotation is present
        let r = Request::from_parts(None, &env, EnvRequests::Allowed)
            .unwrap()
            .unwrap();
        assert_eq!(r.vram, Size::Bytes(8 * G));
        assert_eq!(r.gpus, GpuSelector::Count(2));
        assert_eq!(r.origin, Origin::Env("GPU_QUOTA_VRAM"));
        // by default the environment is never a request
        assert_eq!(
            Request::from_parts(None, &env, EnvRequests::Ignored),
            Ok(None)
        );
        assert_eq!(
            env_request_vars(&env),
            vec!["GPU_QUOTA_VRAM", "GPU_QUOTA_GPUS"]
        );
        // the first definition wins, as getenv sees it
        let dup = vec![
            "GPU_QUOTA_VRAM=2g".to_string(),
            "GPU_QUOTA_VRAM=8g".to_string(),
        ];
        let r = Request::from_parts(None, &dup, EnvRequests::Allowed)
            .unwrap()
            .unwrap();
        assert_eq!(r.vram, Size::Bytes(2 * G));
    }

    /// Whether the user named GPUs is read once, from the request's one
    /// source, with the request (toolkit::reconcile takes it from here).
    #[test]
    fn named_gpus_comes_from_the_requests_one_source() {
        let named = |a: Option<Value>, env: &[&str]| {
            let env: Vec<String> = env.iter().map(|e| e.to_string()).collect();
            Request::from_parts(a.map(ann).as_ref(), &env, EnvRequests::Allowed)
                .unwrap()
                .unwrap()
                .named_gpus
        };
        assert!(!named(Some(json!({"vram": "1g"})), &[]));
        assert!(named(Some(json!({"vram": "1g", "gpus": "1"})), &[]));
        assert!(named(
            Some(json!({"vram": "1g", "gpu-quota.io/gpu": "0"})),
            &[]
        ));
        assert!(named(
            Some(json!({"vram": "1g", "gpu": "0", "gpus": "1"})),
            &[]
        ));
        // the environment's GPU keys do not name GPUs of an annotation request
        assert!(!named(Some(json!({"vram": "1g"})), &["GPU_QUOTA_GPUS=2"]));
        assert!(named(None, &["GPU_QUOTA_VRAM=1g", "GPU_QUOTA_GPU=1"]));
        assert!(named(None, &["GPU_QUOTA_VRAM=1g", "GPU_QUOTA_GPUS=all"]));
        assert!(!named(None, &["GPU_QUOTA_VRAM=1g"]));
        // an annotation of a GPU key does not name GPUs of an env request:
        // a lone `gpu` annotation is a request of its own (refused)
        assert!(Request::from_parts(
            Some(&ann(json!({"gpu": "1"}))),
            &["GPU_QUOTA_VRAM=1g".into()],
            EnvRequests::Allowed
        )
        .is_err());
    }

    #[test]
    fn gpu_forms() {
        let r = Request::from_parts(
            Some(&ann(json!({"vram": "1g", "gpu": "0, GPU-ABCDEF01-2345"}))),
            &[],
            EnvRequests::Ignored,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            r.gpus,
            GpuSelector::List(vec![
                GpuRef::Index(0),
                GpuRef::Uuid("GPU-abcdef01-2345".into())
            ])
        );
        let r = Request::from_parts(
            Some(&ann(json!({"vram": "1g", "gpus": "all"}))),
            &[],
            EnvRequests::Ignored,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.gpus, GpuSelector::All);
        let r = Request::from_parts(
            Some(&ann(json!({"vram": "1g", "gpus": "2", "gpu": "0,1"}))),
            &[],
            EnvRequests::Ignored,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            r.gpus,
            GpuSelector::List(vec![GpuRef::Index(0), GpuRef::Index(1)])
        );
    }

    /// Table of malformed requests: each is refused with a message naming the
    /// key, the value and what is accepted.
    #[test]
    fn malformed_table() {
        let long = "9".repeat(100);
        let cases: Vec<(Value, &str, &str)> = vec![
            (json!({"vram": ""}), "annotation vram", "empty value"),
            (json!({"vram": "0"}), "annotation vram", "zero"),
            (json!({"vram": "-4g"}), "annotation vram", "negative"),
            (json!({"vram": "NaN"}), "annotation vram", "not a number"),
            (
                json!({"vram": "99999999999999999999g"}),
                "annotation vram",
                "64 bits",
            ),
            (json!({"vram": "4q"}), "annotation vram", "unknown unit"),
            (json!({"vram": long}), "annotation vram", "longer than"),
            (json!({"vram": 4}), "annotation vram", "must be strings"),
            (
                json!({"vram": "1g", "gpu-quota.io/vram": "2g"}),
                "annotation gpu-quota.io/vram",
                "contradicts",
            ),
            (
                json!({"vram": "1g", "gpu": "0,0"}),
                "annotation gpu",
                "listed twice",
            ),
            (
                json!({"vram": "1g", "gpu": "GPU-abc,gpu-ABC"}),
                "annotation gpu",
                "listed twice",
            ),
            (json!({"vram": "1g", "gpu": ""}), "annotation gpu", "empty"),
            (
                json!({"vram": "1g", "gpu": "0,,1"}),
                "annotation gpu",
                "empty element",
            ),
            (
                json!({"vram": "1g", "gpu": "-1"}),
                "annotation gpu",
                "negative",
            ),
            (
                json!({"vram": "1g", "gpu": "first"}),
                "annotation gpu",
                "neither",
            ),
            (
                json!({"vram": "1g", "gpu": "MIG-1234"}),
                "annotation gpu",
                "MIG",
            ),
            (
                json!({"vram": "1g", "gpu": "99999999999"}),
                "annotation gpu",
                "out of range",
            ),
            (
                json!({"vram": "1g", "gpus": "0"}),
                "annotation gpus",
                "zero",
            ),
            (
                json!({"vram": "1g", "gpus": "-2"}),
                "annotation gpus",
                "negative",
            ),
            (
                json!({"vram": "1g", "gpus": "two"}),
                "annotation gpus",
                "whole number",
            ),
            (
                json!({"vram": "1g", "gpus": "1000"}),
                "annotation gpus",
                "more GPUs",
            ),
            (
                json!({"vram": "1g", "gpus": "2", "gpu": "0"}),
                "annotation gpus",
                "contradicts",
            ),
            (
                json!({"vram": "1g", "gpus": "all", "gpu": "0"}),
                "annotation gpus",
                "contradicts",
            ),
            (
                json!({"gpu": "0"}),
                "annotation gpu",
                "without a memory slice",
            ),
        ];
        for (a, origin, reason) in cases {
            let e = Request::from_parts(Some(&ann(a.clone())), &[], EnvRequests::Ignored)
                .expect_err(&a.to_string());
            let msg = e.to_string();
            assert!(msg.contains(origin), "{msg} should name {origin}");
            assert!(msg.contains(reason), "{msg} should say {reason}");
            assert!(msg.contains("accepted:"), "{msg}");
        }
        let e = Request::from_parts(None, &["GPU_QUOTA_VRAM=lots".into()], EnvRequests::Allowed)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("environment variable GPU_QUOTA_VRAM"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_annotation_never_panics(v in ".{0,80}", g in ".{0,40}", n in ".{0,12}") {
            let a = ann(json!({"vram": v, "gpu": g, "gpus": n}));
            let _ = Request::from_parts(Some(&a), &[], EnvRequests::Ignored);
        }
    }
}
