//! Which engine module serves which `EngineKind`: the one place that knows
//! every engine (the parent declares them; nothing below imports it).
use super::engine::Engine;
use super::model::{EngineArgs, EngineError, EngineKind};
use super::{containerd, crio, docker, dockerver, podman};

/// The engine for `kind`.
pub fn engine_of(kind: EngineKind) -> Box<dyn Engine> {
    match kind {
        EngineKind::Docker => Box::new(docker::Docker::default()),
        EngineKind::Containerd => Box::new(containerd::Containerd::default()),
        EngineKind::Podman => Box::new(podman::Podman),
        EngineKind::Crio => Box::new(crio::Crio::default()),
    }
}
/// The engine in cluster mode (`--kubernetes`); only the CRI engines have one.
pub fn cluster_engine_of(kind: EngineKind) -> Result<Box<dyn Engine>, EngineError> {
    match kind {
        EngineKind::Containerd => Ok(Box::new(containerd::Containerd { kubernetes: true })),
        EngineKind::Crio => Ok(Box::new(crio::Crio { kubernetes: true })),
        k => Err(EngineError::Usage(format!(
            "--kubernetes is for the Kubernetes node engines (containerd, crio), not {}",
            k.name()
        ))),
    }
}

/// The engine `gpu-quota install|uninstall` acts on: cluster mode where
/// asked, Docker with the version it runs (or the one given).
pub fn engine_for(args: &EngineArgs) -> Result<Box<dyn Engine>, EngineError> {
    Ok(match args.engine {
        _ if args.kubernetes => cluster_engine_of(args.engine)?,
        EngineKind::Docker => Box::new(docker::Docker::new(dockerver::detect(
            args.docker_version.as_deref(),
        ))),
        k => engine_of(k),
    })
}
