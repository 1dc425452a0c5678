//! `env_requests` was one host-wide key. `install containerd --kubernetes`
//! turned it off, a later `install docker` for Docker < 24 on the same node turned it on
//! for the CRI handler too, and a pod's `GPU_QUOTA_VRAM` then bypassed the scheduler.
//! Whatever another engine's install writes, a container the CRI runs (its runc root is a
//! Kubernetes root) never takes a request from its environment.
use gpuquota_core::request::EnvRequests;
use gpuquota_core::Config;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gpu-quota");
const RT: &str = "/usr/local/bin/gpu-quota-runtime";
const GQ_CONFIG: &str = "etc/gpu-quota/config.toml";
/// The runc roots the engines pass: containerd's CRI (namespace k8s.io), CRI-O's handler
/// from `install crio`, and Docker's.
const CRI_CONTAINERD: &str = "/run/containerd/runc/k8s.io";
const CRI_CRIO: &str = "/run/gpu-quota-runc";
const DOCKER: &str = "/var/run/docker/runtime-runc/moby";

fn install(root: &Path, args: &[&str]) {
    let o = Command::new(BIN)
        .arg("install")
        .args(args)
        .args(["--runtime-path", RT, "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "install {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// What the runtime decides for a container started under `runc_root`.
fn policy(cfg: &Config, runc_root: &str) -> EnvRequests {
    cfg.env_policy_for(Some(runc_root))
}

#[test]
fn cluster_mode_is_not_undone_by_installing_old_docker() {
    for (cri, root) in [("containerd", CRI_CONTAINERD), ("crio", CRI_CRIO)] {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join(RT.trim_start_matches('/')).parent().unwrap())
            .unwrap();
        std::fs::write(t.path().join(RT.trim_start_matches('/')), b"#!/bin/sh\n").unwrap();
        install(t.path(), &[cri, "--kubernetes"]);
        let cfg = Config::load(&t.path().join(GQ_CONFIG)).unwrap();
        assert_eq!(policy(&cfg, root), EnvRequests::Ignored, "{cri}");
        install(t.path(), &["docker", "--docker-version", "20.10.24"]);
        let cfg = Config::load(&t.path().join(GQ_CONFIG)).unwrap();
        // negative control: Docker 20.10 cannot pass annotations, so its install really
        // turns env requests on, and they reach Docker's containers
        assert!(
            cfg.env_requests,
            "{cri}: install docker 20.10 left env_requests off"
        );
        assert_eq!(policy(&cfg, DOCKER), EnvRequests::Allowed, "{cri}");
        // ... but never the CRI's
        assert_eq!(
            policy(&cfg, root),
            EnvRequests::Ignored,
            "{cri}: after `install docker --docker-version 20.10` a pod's GPU_QUOTA_VRAM is a request"
        );
    }
}
