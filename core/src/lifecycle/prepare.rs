//! prepare: the runtime's `create` (and foreground `run`), before runc.
//! One function for the request path and the DRA-claim path: the bundle
//! loaded once, the container admitted (or passed through, or refused),
//! the spec edited by one list of modifiers, the state directory made, the
//! bundle flushed once.
use super::admit::{self, Admitted, Ask};
use super::{end, Bundle, Container, Exit, LifecycleError};
use crate::{
    claims,
    config::{Config, ConfigError},
    devices, events, mps, paths,
    request::{self, EnvRequests},
    spec::{self, Modifier},
    state, toolkit, Inventory, Request, Reservation,
};
use std::path::Path;

/// What runc's `create`/`run` command line says.
#[derive(Debug, Clone, Copy)]
pub struct Create<'a> {
    /// The container id (`None`: the line has none, which only a container
    /// with a request or a claim cannot do without).
    pub id: Option<&'a str>,
    /// runc's `--root` as given (`None`: runc's default; a container the CRI
    /// runs is known by its root, see `kubernetes_runc_roots`).
    pub root: Option<&'a str>,
    /// The bundle directory.
    pub bundle: &'a Path,
    /// Who records the events.
    pub program: &'a str,
}

/// prepare's outcome (a refusal is the `Err`).
// one value per runtime process: the larger variant is not worth a box
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Prepared {
    /// Neither a request nor a claim: run runc with the bundle untouched.
    /// `notice`: a request in the container's environment that this host
    /// does not take, to be said once.
    PassThrough { notice: Option<String> },
    /// Admitted: the bundle edited and flushed, the state directory made.
    /// The reservation ends through `end` when runc fails, when a
    /// foreground `run` is over, and at `delete`.
    Admitted {
        cfg: Config,
        reservation: Reservation,
    },
}

/// Prepare the container `call` names for runc, under the host config
/// `cfg` (a config that does not load counts as allowing environment
/// requests, so that such a request on a broken host is refused rather
/// than run unsliced). A config.json that does not load passes through
/// (runc reports a bad bundle itself), unless it seems to ask for GPU
/// memory or a claim (refused: never fail open). Refusals are recorded
/// wherever `cfg` loaded; a failure after admission releases the
/// reservation (cause "create-failed").
pub fn prepare(
    cfg: Result<Config, ConfigError>,
    call: &Create<'_>,
) -> Result<Prepared, LifecycleError> {
    let who = Container {
        id: call.id.unwrap_or(""),
        root: call.root,
        program: call.program,
    };
    let refused = |request: &str, reason: &str, e: &dyn std::fmt::Display| {
        if let Ok(cfg) = &cfg {
            let src = who.source("create");
            events::refused(cfg, src, who.id, request, reason, &e.to_string());
        }
    };
    let mut bundle = match Bundle::load(call.bundle) {
        Ok(b) => b,
        Err(e @ LifecycleError::RequestInInvalidJson { .. }) => return Err(e),
        // runc would read another spec than gpu-quota: refused whatever
        // it asks (spec::decode)
        Err(e @ LifecycleError::SpecKeys { .. }) => {
            refused("config.json", "invalid_request", &e);
            return Err(e);
        }
        Err(_) => return Ok(Prepared::PassThrough { notice: None }),
    };
    // A prepared DRA claim's variable (its CDI device sets it) binds the
    // container to that claim, in every mode: requests are not read then.
    // A container the CRI runs never takes a request from its environment:
    // the scheduler alone grants.
    let ask = match claims::presented(&bundle.config) {
        Ok(Some(p)) => Ask::Claim(p),
        Ok(None) => {
            let policy = cfg
                .as_ref()
                .map(|c| c.env_policy_for(call.root))
                .unwrap_or(EnvRequests::Allowed);
            match Request::from_config(&bundle.config, policy) {
                Ok(Some(r)) => Ask::Request(r),
                Ok(None) => {
                    let notice = ignored_env_notice(cfg.as_ref().ok(), call.root, &bundle, policy);
                    return Ok(Prepared::PassThrough { notice });
                }
                Err(e) => {
                    refused(&format!("{}={}", e.origin, e.value), "invalid_request", &e);
                    return Err(e.into());
                }
            }
        }
        Err(e) => {
            refused("claim", claims::reason_of(&e), &e);
            return Err(e.into());
        }
    };
    let id = call.id.ok_or(LifecycleError::NoId)?;
    let cfg = cfg?;
    let inv = Inventory::load(&cfg)?;
    let c = Container { id, ..who };
    let admitted = admit::admit(&cfg, &inv, &bundle, &c, &ask)?;
    setup(
        &cfg,
        &inv,
        &mut bundle,
        &c,
        &admitted,
        matches!(ask, Ask::Claim(_)),
    )?;
    Ok(Prepared::Admitted {
        cfg,
        reservation: admitted.reservation,
    })
}

/// The edits of an admitted container's spec, built once; [`Edits::list`]
/// is the order they apply in.
struct Edits<'a> {
    /// The engine asked for GPUs itself: gpu-quota owns the container's
    /// GPU devices, so hooks that hand out GPUs and other GPUs' nodes,
    /// rules and mounts go.
    narrow: Option<spec::Narrow<'a>>,
    env: spec::Environment,
    devices: spec::Devices,
    hooks: spec::HookSpec,
    annotations: spec::Annotations,
    /// A share for a non-root host user: its process stays non-root.
    process: Option<spec::ShareProcess>,
}

impl<'a> Edits<'a> {
    /// `uuids`: the slice's GPUs; `narrow`: the engine's request is to be
    /// narrowed away; `claim`: the config presents a claim's variable.
    fn new(
        slices: &[crate::placement::Slice],
        narrow: Option<spec::Narrow<'a>>,
        claim: bool,
        devices: spec::Devices,
        hooks: spec::HookSpec,
        record: Option<String>,
    ) -> Edits<'a> {
        let uuids: Vec<String> = slices.iter().map(|s| s.uuid.clone()).collect();
        let mut env = spec::Environment::default();
        if narrow.is_some() {
            env = env.slice_gpus(&uuids);
        }
        if claim {
            env = env.without_claim();
        }
        let share = gpuquota_formats::grant::share(slices);
        if let Some(s) = share {
            env = env.mps_client(s);
        }
        Edits {
            process: share
                .filter(|s| s.sm_user.is_some_and(|u| u != 0))
                .map(|_| spec::ShareProcess),
            narrow,
            env,
            devices,
            hooks,
            annotations: spec::Annotations {
                assigned: uuids.join(","),
                record,
            },
        }
    }

    /// Narrowing first (it keeps the slice's nodes and removes the rest),
    /// then the environment, then gpu-quota's own additions.
    fn list(&self) -> Vec<&dyn Modifier> {
        let mut l: Vec<&dyn Modifier> = vec![];
        if let Some(n) = &self.narrow {
            l.push(n);
        }
        l.extend([
            &self.env as &dyn Modifier,
            &self.devices,
            &self.hooks,
            &self.annotations,
        ]);
        if let Some(p) = &self.process {
            l.push(p);
        }
        l
    }
}

/// The spec edits, the state directory (made before runc clones the
/// container's mount namespace, see `state::create`), the flush. On error
/// the reservation is released (cause "create-failed").
fn setup(
    cfg: &Config,
    inv: &Inventory,
    bundle: &mut Bundle,
    c: &Container<'_>,
    a: &Admitted,
    claim: bool,
) -> Result<(), LifecycleError> {
    let r = &a.reservation;
    let done = (|| {
        let uuids: Vec<String> = r.slices.iter().map(|s| s.uuid.clone()).collect();
        let drm = toolkit::drm::HostPaths::default();
        let owner = |m| toolkit::drm::owner(&drm, m);
        let narrow = a.engine_request.then(|| spec::Narrow {
            slice_minors: spec::Narrow::minors_of(inv, &uuids),
            drm_owner: &owner,
        });
        let edits = Edits::new(
            &r.slices,
            narrow,
            claim,
            spec::Devices(devices::nodes_for(&cfg.driver.dev_root, inv, &r.slices)?),
            hook_spec(cfg, c.runc_root())?,
            crate::ledger::records::name_of(r),
        );
        bundle.apply(&edits.list())?;
        if let Some(s) = r.share() {
            // after the reservation is written (mps's lock order)
            let ctl = mps::HostControl::find(cfg)?;
            mps::ensure(cfg, &s.uuid, &ctl)?;
            // before the container's process runs: the daemon bounds a
            // client that bypasses libgpuquota.so (its limit counts this
            // share, read inside the daemons' lock); fails closed
            let limits = || {
                let d = crate::Ledger::new(cfg).read().ok()?;
                let mut l = mps::client_limits(&d);
                l.retain(|u, _| *u == s.uuid);
                Some(l)
            };
            if let Some(e) = mps::limit_clients(cfg, limits, &ctl)?.into_iter().next() {
                return Err(e.into());
            }
        }
        claims::shared_usage(cfg, r, state::UsageBacking::Tmpfs)?;
        state::create(cfg, r, state::UsageBacking::Tmpfs).map_err(|err| LifecycleError::State {
            path: state::container_dir(cfg, r),
            err,
        })?;
        bundle.flush()
    })();
    if done.is_err() {
        let _ = end(cfg, c, Exit::CreateFailed);
    }
    done
}

/// The hook entry for a container created under runc root `root`: the
/// hook binary, the config path in its environment, `--root ROOT`.
fn hook_spec(cfg: &Config, root: &str) -> Result<spec::HookSpec, LifecycleError> {
    let hook = paths::hook(cfg)
        .filter(|p| p.is_file())
        .ok_or_else(|| LifecycleError::NoHook(Config::path_from_env()))?;
    let hook = std::fs::canonicalize(&hook).unwrap_or(hook);
    let cp = Config::path_from_env();
    let cp = std::fs::canonicalize(&cp).unwrap_or(cp);
    Ok(spec::HookSpec {
        path: hook,
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            format!("{}={}", crate::config::ENV_PATH, cp.display()),
        ],
        // the hook's key: runc root (not in the OCI state) + id + bundle
        args: vec![spec::HOOK_ROOT_ARG.into(), root.into()],
        timeout_secs: 60,
    })
}

/// A container that asks through its environment on a host that takes no
/// requests from there runs without a slice: the line that says so.
fn ignored_env_notice(
    cfg: Option<&Config>,
    root: Option<&str>,
    bundle: &Bundle,
    policy: EnvRequests,
) -> Option<String> {
    let ignored = request::env_request_vars(&request::config_env(&bundle.config));
    if ignored.is_empty() || policy != EnvRequests::Ignored {
        return None;
    }
    Some(if cfg.is_some_and(|c| c.is_kubernetes_root(root)) {
        format!(
            "ignoring {} in the container's environment: runc root {} is a Kubernetes root (`kubernetes_runc_roots` in {}), where only the scheduler grants slices; request the gpu-quota.io/vram resource",
            ignored.join(", "),
            root.unwrap_or(""),
            Config::path_from_env().display()
        )
    } else {
        format!(
            "ignoring {} in the container's environment: this host takes requests only from annotations (`env_requests` is off in {}); pass --annotation vram=SIZE",
            ignored.join(", "),
            Config::path_from_env().display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook() -> spec::HookSpec {
        spec::HookSpec {
            path: "/usr/bin/gpu-quota-hook".into(),
            env: vec![],
            args: vec![spec::HOOK_ROOT_ARG.into(), "/run/runc".into()],
            timeout_secs: 60,
        }
    }
    fn slice(uuid: &str) -> crate::placement::Slice {
        crate::placement::Slice::memory(uuid.into(), 1, 1 << 30)
    }

    fn node(minor: u64) -> devices::DeviceNode {
        devices::DeviceNode {
            host_path: format!("/dev/nvidia{minor}").into(),
            container_path: format!("/dev/nvidia{minor}"),
            major: 195,
            minor,
        }
    }

    /// The whole list on what `docker run --gpus all -e …` writes, for a
    /// slice on GPU 1 of a container that also presents a claim variable:
    /// one place, every edit, in order.
    #[test]
    fn the_list_leaves_exactly_the_slice() {
        let mut v = json!({
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "GPU_QUOTA_CLAIM_u=t", "CUDA_VISIBLE_DEVICES=0"]},
            "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]},
            "linux": {"devices": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}],
                      "resources": {"devices": [{"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rwm"}]}},
            "annotations": {"vram": "1g", spec::RECORD_ANNOTATION: "r-stale"}
        });
        let slices = vec![slice("GPU-1")];
        let none = |_| None;
        let narrow = spec::Narrow {
            slice_minors: vec![1],
            drm_owner: &none,
        };
        let e = Edits::new(
            &slices,
            Some(narrow),
            true,
            spec::Devices(vec![node(1)]),
            hook(),
            Some("r-1".into()),
        );
        let names: Vec<&str> = e.list().iter().map(|m| m.what()).collect();
        assert_eq!(
            names,
            [
                "toolkit narrowing",
                "environment",
                "devices",
                "hooks",
                "annotations"
            ]
        );
        spec::apply(&mut v, &e.list()).unwrap();
        assert_eq!(
            v["process"]["env"],
            json!(["NVIDIA_VISIBLE_DEVICES=GPU-1", "CUDA_VISIBLE_DEVICES=GPU-1"])
        );
        let paths: Vec<&str> = v["linux"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["/dev/nvidia1"], "GPU 0 gone, GPU 1 once");
        assert_eq!(
            v.pointer("/linux/resources/devices").unwrap(),
            &json!([{"allow": true, "type": "c", "major": 195, "minor": 1, "access": "rwm"}])
        );
        assert_eq!(v["hooks"]["prestart"], json!([]));
        assert_eq!(
            v.pointer("/hooks/createRuntime/0/args/1").unwrap(),
            "create-runtime"
        );
        assert_eq!(v["annotations"][spec::ASSIGNED_ANNOTATION], "GPU-1");
        assert_eq!(spec::record_hint(&v), Some("r-1"));
        let once = v.clone();
        spec::apply(&mut v, &e.list()).unwrap();
        assert_eq!(v, once, "the list is idempotent");
    }

    /// Without an engine request nothing of the engine's is narrowed and
    /// the variables naming GPUs are left alone (they are not the engine's
    /// choice); without a claim, nothing is taken out of the environment.
    #[test]
    fn without_an_engine_request_or_a_claim_only_our_additions() {
        let before = json!({
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "GPU_QUOTA_CLAIM_u=t"]},
            "linux": {"devices": [{"path": "/dev/nvidia0"}]}
        });
        let mut v = before.clone();
        let e = Edits::new(
            &[slice("GPU-1")],
            None,
            false,
            spec::Devices(vec![node(1)]),
            hook(),
            None,
        );
        assert_eq!(e.list().len(), 4);
        spec::apply(&mut v, &e.list()).unwrap();
        assert_eq!(v["process"], before["process"]);
        assert_eq!(v["linux"]["devices"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn an_ignored_environment_request_is_said_once_with_why() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("config.json"),
            br#"{"process":{"env":["GPU_QUOTA_VRAM=1g"]}}"#,
        )
        .unwrap();
        let b = Bundle::load(d.path()).unwrap();
        let n = ignored_env_notice(None, None, &b, EnvRequests::Ignored).unwrap();
        assert!(
            n.contains("ignoring GPU_QUOTA_VRAM") && n.contains("env_requests"),
            "{n}"
        );
        assert_eq!(
            ignored_env_notice(None, None, &b, EnvRequests::Allowed),
            None
        );
        let cfg = Config {
            kubernetes_runc_roots: vec!["/run/k8s".into()],
            ..Config::default()
        };
        let n = ignored_env_notice(Some(&cfg), Some("/run/k8s"), &b, EnvRequests::Ignored).unwrap();
        assert!(n.contains("Kubernetes root"), "{n}");
    }
}
