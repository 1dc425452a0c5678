//! The request keys: where a container asks for GPU memory. Read by the
//! runtime (core's request parser), written by the device plugin's
//! Allocate, allowed through by the engine configuration `gpu-quota
//! install` writes and checked by `gpu-quota doctor`. `GPU_QUOTA_VRAM` is
//! also the interceptor's standalone budget.
use core::ffi::CStr;

/// The prefix of the namespaced annotations.
pub const ANNOTATION_PREFIX: &str = "gpu-quota.io/";

/// Short annotation keys (`docker run --annotation vram=8g`).
pub const ANN_VRAM: &str = "vram";
pub const ANN_GPU: &str = "gpu";
pub const ANN_GPUS: &str = "gpus";
/// A compute share (`sm=25%`): a percentage of the GPU's SMs, through MPS.
pub const ANN_SM: &str = "sm";
/// The number of CUDA processes a compute share is split over
/// (`sm-procs=4`: each gets a quarter of the share; default 1).
pub const ANN_SM_PROCS: &str = "sm-procs";
/// A burst limit beside the guarantee `vram` (`vram-limit=16g`): memory
/// past the guarantee, up to this, is lent while nobody uses it.
pub const ANN_VRAM_LIMIT: &str = "vram-limit";
/// Among bursters, who gives lent memory back first (`vram-priority=100`;
/// 0-1000, default 0: lowest first, then the newest).
pub const ANN_VRAM_PRIORITY: &str = "vram-priority";

/// Namespaced annotation keys (Kubernetes, the device plugin).
pub const ANN_NS_VRAM: &str = "gpu-quota.io/vram";
pub const ANN_NS_GPU: &str = "gpu-quota.io/gpu";
pub const ANN_NS_GPUS: &str = "gpu-quota.io/gpus";
pub const ANN_NS_SM: &str = "gpu-quota.io/sm";
pub const ANN_NS_SM_PROCS: &str = "gpu-quota.io/sm-procs";
pub const ANN_NS_VRAM_LIMIT: &str = "gpu-quota.io/vram-limit";
pub const ANN_NS_VRAM_PRIORITY: &str = "gpu-quota.io/vram-priority";

/// Annotation the runtime writes into config.json with the GPUs it
/// assigned (read back by its own toolkit narrowing in a reused bundle).
pub const ANN_ASSIGNED: &str = "gpu-quota.io/assigned";
/// Annotation the runtime writes into config.json with the file name of
/// the container's ledger record (a hint the hook checks).
pub const ANN_RECORD: &str = "gpu-quota.io/record";
/// The annotations only the runtime writes (not requests).
pub const RUNTIME_ANNOTATIONS: [&str; 2] = [ANN_ASSIGNED, ANN_RECORD];

/// Every annotation key that makes a request (engine allowlists).
pub const ANNOTATION_KEYS: [&str; 14] = [
    ANN_VRAM,
    ANN_GPU,
    ANN_GPUS,
    ANN_SM,
    ANN_SM_PROCS,
    ANN_VRAM_LIMIT,
    ANN_VRAM_PRIORITY,
    ANN_NS_VRAM,
    ANN_NS_GPU,
    ANN_NS_GPUS,
    ANN_NS_SM,
    ANN_NS_SM_PROCS,
    ANN_NS_VRAM_LIMIT,
    ANN_NS_VRAM_PRIORITY,
];

/// The same, as patterns for engines that take globs (containerd's
/// `pod_annotations`).
pub const ANNOTATION_PATTERNS: [&str; 8] = [
    ANN_VRAM,
    ANN_GPU,
    ANN_GPUS,
    ANN_SM,
    ANN_SM_PROCS,
    ANN_VRAM_LIMIT,
    ANN_VRAM_PRIORITY,
    "gpu-quota.io/*",
];

/// The extended resource the device plugin advertises (pods ask for
/// `resources.limits["gpu-quota.io/vram"]`); spelled as the annotation
/// its Allocate returns, so a pod names one thing.
pub const RESOURCE_VRAM: &str = ANN_NS_VRAM;

/// The container annotations the device plugin's Allocate returns.
pub const CLUSTER_ANNOTATIONS: [&str; 2] = [ANN_NS_VRAM, ANN_NS_GPU];

/// The DRA driver's name: its ResourceSlices and DeviceClass,
/// and the vendor of its CDI kind (`vram.gpu-quota.io/claim`).
pub const DRA_DRIVER: &str = "vram.gpu-quota.io";

/// The CDI kind of a prepared claim's device (`<DRA_DRIVER>/claim`).
pub const DRA_CDI_KIND: &str = "vram.gpu-quota.io/claim";

/// A prepared claim's CDI device sets `GPU_QUOTA_CLAIM_<uid, - as _>=<token>`
/// in its container; the runtime binds the container to the claim by it.
pub const ENV_CLAIM_PREFIX: &str = "GPU_QUOTA_CLAIM_";

/// Environment keys, as C strings for the interceptor's getenv.
pub const ENV_VRAM_C: &CStr = c"GPU_QUOTA_VRAM";
pub const ENV_GPU_C: &CStr = c"GPU_QUOTA_GPU";
pub const ENV_GPUS_C: &CStr = c"GPU_QUOTA_GPUS";
pub const ENV_SM_C: &CStr = c"GPU_QUOTA_SM";
pub const ENV_SM_PROCS_C: &CStr = c"GPU_QUOTA_SM_PROCS";
pub const ENV_VRAM_LIMIT_C: &CStr = c"GPU_QUOTA_VRAM_LIMIT";
pub const ENV_VRAM_PRIORITY_C: &CStr = c"GPU_QUOTA_VRAM_PRIORITY";

/// A C-string constant as text (every key here is ASCII).
pub(crate) const fn str_of(c: &'static CStr) -> &'static str {
    match core::str::from_utf8(c.to_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("environment keys are ASCII"),
    }
}

/// Environment keys (only where the host allows `env_requests`).
pub const ENV_VRAM: &str = str_of(ENV_VRAM_C);
pub const ENV_GPU: &str = str_of(ENV_GPU_C);
pub const ENV_GPUS: &str = str_of(ENV_GPUS_C);
pub const ENV_SM: &str = str_of(ENV_SM_C);
pub const ENV_SM_PROCS: &str = str_of(ENV_SM_PROCS_C);
pub const ENV_VRAM_LIMIT: &str = str_of(ENV_VRAM_LIMIT_C);
pub const ENV_VRAM_PRIORITY: &str = str_of(ENV_VRAM_PRIORITY_C);

/// The interceptor's other environment keys, which the host's tests and
/// documentation name too: a state directory to read `limits` from
/// instead of the container's, a usage file for a standalone budget, the
/// context charge, another context-cost cache, debug lines.
pub const ENV_STATE_DIR_C: &CStr = c"GPU_QUOTA_STATE_DIR";
pub const ENV_USAGE_FILE_C: &CStr = c"GPU_QUOTA_USAGE_FILE";
pub const ENV_CONTEXT_OVERHEAD_C: &CStr = c"GPU_QUOTA_CONTEXT_OVERHEAD";
pub const ENV_CONTEXT_COST_FILE_C: &CStr = c"GPU_QUOTA_CONTEXT_COST_FILE";
pub const ENV_DEBUG_C: &CStr = c"GPU_QUOTA_DEBUG";
pub const ENV_STATE_DIR: &str = str_of(ENV_STATE_DIR_C);
pub const ENV_USAGE_FILE: &str = str_of(ENV_USAGE_FILE_C);
pub const ENV_CONTEXT_OVERHEAD: &str = str_of(ENV_CONTEXT_OVERHEAD_C);
pub const ENV_CONTEXT_COST_FILE: &str = str_of(ENV_CONTEXT_COST_FILE_C);
pub const ENV_DEBUG: &str = str_of(ENV_DEBUG_C);

/// Every environment key the interceptor reads.
pub const INTERCEPTOR_ENV: [&str; 8] = [
    ENV_VRAM,
    ENV_GPU,
    ENV_GPUS,
    ENV_STATE_DIR,
    ENV_USAGE_FILE,
    ENV_CONTEXT_OVERHEAD,
    ENV_CONTEXT_COST_FILE,
    ENV_DEBUG,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        assert_eq!(ENV_VRAM, "GPU_QUOTA_VRAM");
        assert_eq!(ENV_GPU, "GPU_QUOTA_GPU");
        assert_eq!(ENV_GPUS, "GPU_QUOTA_GPUS");
        assert_eq!(DRA_CDI_KIND, [DRA_DRIVER, "claim"].join("/"));
        for k in INTERCEPTOR_ENV {
            assert!(
                k.starts_with("GPU_QUOTA_") && !k.starts_with(ENV_CLAIM_PREFIX),
                "{k}"
            );
        }
        for k in RUNTIME_ANNOTATIONS {
            assert!(k.starts_with(ANNOTATION_PREFIX), "{k}");
            // a runtime annotation is never taken for a request
            assert!(
                !ANNOTATION_KEYS.contains(&&k[ANNOTATION_PREFIX.len()..]),
                "{k}"
            );
        }
        assert_eq!(ENV_SM_PROCS, "GPU_QUOTA_SM_PROCS");
        for k in [
            ANN_NS_VRAM,
            ANN_NS_GPU,
            ANN_NS_GPUS,
            ANN_NS_SM,
            ANN_NS_SM_PROCS,
            ANN_NS_VRAM_LIMIT,
            ANN_NS_VRAM_PRIORITY,
        ] {
            assert!(k.starts_with(ANNOTATION_PREFIX), "{k}");
            assert!(
                ANNOTATION_KEYS.contains(&&k[ANNOTATION_PREFIX.len()..]),
                "{k}"
            );
        }
        // every key is matched by a pattern
        for k in ANNOTATION_KEYS {
            assert!(
                ANNOTATION_PATTERNS
                    .iter()
                    .any(|p| match p.strip_suffix('*') {
                        Some(prefix) => k.starts_with(prefix),
                        None => *p == k,
                    }),
                "{k}"
            );
        }
    }
}
