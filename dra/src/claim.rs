//! A ResourceClaim, as the API server has it, to the slice the node must
//! reserve: which GPU, how many bytes. Pure: every refusal is decided here
//! from the claim object and this node's offers.
//!
//! A claim is one slice on one GPU for one container: exactly one of its
//! allocation results may be this driver's (a claim with two requests of
//! `vram.gpu-quota.io`, or one request of count 2, is refused; ask for two
//! claims instead). The bytes are the scheduler's grant,
//! `consumedCapacity["memory"]` (KEP-5075 consumable capacity, the
//! `DRAConsumableCapacity` feature gate, beta and on by default in 1.36),
//! never the claim's own request. A claim allocated the GPU's compute
//! device (`gpu-<i>-compute`) has a compute share too, the scheduler's
//! `consumedCapacity["compute"]` (a percentage of the GPU's SMs), split
//! over the claim's `smProcs` parameter (crate::params, 1 when it names
//! none); one allocated the plain device has none, and names no `smProcs`.
use crate::api::DRIVER;
use crate::node::{ClaimAlloc, Offer};
use crate::params::{self, ParamsError};
use crate::quantity::{self, QuantityError};
use crate::slice::{self, Kind, COMPUTE, MEMORY};
use gpuquota_core::formats::grant::Burst;
use k8s_openapi::api::resource::v1::ResourceClaim;

/// The claim the kubelet names (namespace, name, uid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What to reserve, and what to answer the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub alloc: ClaimAlloc,
    pub request_names: Vec<String>,
    pub pool_name: String,
    pub device_name: String,
    pub share_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("claim {ns}/{name}: the kubelet asked for uid {asked} but the API server has uid {have:?} (the claim was deleted and recreated); the kubelet will retry with the current claim")]
    UidMismatch {
        ns: String,
        name: String,
        asked: String,
        have: Option<String>,
    },
    #[error("claim {ns}/{name} is not allocated yet (no status.allocation); the scheduler allocates it before the pod is bound")]
    NotAllocated { ns: String, name: String },
    #[error("claim {ns}/{name} has no device of driver {DRIVER} on this node (pool {pool}); its allocation is {have}: the pod was sent to the wrong node or the claim is another driver's")]
    NoResult {
        ns: String,
        name: String,
        pool: String,
        have: String,
    },
    #[error("claim {ns}/{name} has {count} devices of driver {DRIVER} (requests {requests}); a claim is one memory slice on one GPU: use one request with count 1, and one claim per slice")]
    SeveralResults {
        ns: String,
        name: String,
        count: usize,
        requests: String,
    },
    #[error("claim {ns}/{name}: device {device} has no consumedCapacity[\"{capacity}\"]: the cluster allocated a whole device, so the grant is unknown; enable the DRAConsumableCapacity feature gate (beta, on by default in Kubernetes 1.36) on the API server, scheduler and kubelet")]
    NoConsumedCapacity {
        ns: String,
        name: String,
        device: String,
        capacity: &'static str,
    },
    #[error(
        "claim {ns}/{name}: consumedCapacity memory {err}; the scheduler grants whole bytes only"
    )]
    BadQuantity {
        ns: String,
        name: String,
        err: QuantityError,
    },
    #[error("claim {ns}/{name}: consumedCapacity compute is {value:?}; a compute share is a whole percentage of the GPU's SMs from 1 to 100")]
    BadCompute {
        ns: String,
        name: String,
        value: String,
    },
    #[error("claim {ns}/{name}: {err}")]
    BadParams {
        ns: String,
        name: String,
        err: ParamsError,
    },
    #[error("claim {ns}/{name} names smProcs={procs}, but {why}")]
    ProcsWithoutShare {
        ns: String,
        name: String,
        procs: u32,
        why: String,
    },
    #[error("claim {ns}/{name}: consumedCapacity memory is 0; ask for at least 256Mi")]
    Zero { ns: String, name: String },
    #[error("claim {ns}/{name}: device {device} is not a GPU of this node (it publishes {have}); the GPU is gone or the slice was stale: delete the pod to reschedule it")]
    UnknownDevice {
        ns: String,
        name: String,
        device: String,
        have: String,
    },
}

/// The reservation for `req`, from its API object and this node's offers.
pub fn map(
    req: &ClaimRef,
    claim: &ResourceClaim,
    pool: &str,
    offers: &[Offer],
) -> Result<Mapped, Refusal> {
    let (ns, name) = (req.namespace.clone(), req.name.clone());
    if claim.metadata.uid.as_deref() != Some(req.uid.as_str()) {
        return Err(Refusal::UidMismatch {
            ns,
            name,
            asked: req.uid.clone(),
            have: claim.metadata.uid.clone(),
        });
    }
    let Some(alloc) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return Err(Refusal::NotAllocated { ns, name });
    };
    let results = alloc
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    let ours: Vec<_> = results.iter().filter(|r| r.driver == DRIVER).collect();
    let r = match ours.as_slice() {
        [] => {
            let have = if results.is_empty() {
                "empty".to_string()
            } else {
                results
                    .iter()
                    .map(|r| format!("{}/{}/{}", r.driver, r.pool, r.device))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(Refusal::NoResult {
                ns,
                name,
                pool: pool.into(),
                have,
            });
        }
        [one] if one.pool != pool => {
            return Err(Refusal::NoResult {
                ns,
                name,
                pool: pool.into(),
                have: format!("{}/{}/{}", one.driver, one.pool, one.device),
            })
        }
        [one] => *one,
        many => {
            return Err(Refusal::SeveralResults {
                ns,
                name,
                count: many.len(),
                requests: many
                    .iter()
                    .map(|r| r.request.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    let consumed = |capacity: &'static str| {
        r.consumed_capacity
            .as_ref()
            .and_then(|c| c.get(capacity))
            .ok_or_else(|| Refusal::NoConsumedCapacity {
                ns: ns.clone(),
                name: name.clone(),
                device: r.device.clone(),
                capacity,
            })
    };
    let mem = consumed(MEMORY)?;
    let bytes = quantity::bytes(&mem.0).map_err(|err| Refusal::BadQuantity {
        ns: ns.clone(),
        name: name.clone(),
        err,
    })?;
    if bytes == 0 {
        return Err(Refusal::Zero { ns, name });
    }
    let Some((gpu, kind)) = slice::gpu_of(&r.device, offers) else {
        return Err(Refusal::UnknownDevice {
            ns,
            name,
            device: r.device.clone(),
            have: offers
                .iter()
                .flat_map(|o| slice::device_names(o.index))
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let params = params::of(
        alloc.devices.as_ref().and_then(|d| d.config.as_deref()),
        &r.request,
    )
    .map_err(|err| Refusal::BadParams {
        ns: ns.clone(),
        name: name.clone(),
        err,
    })?;
    let sm = match kind {
        Kind::Plain => None,
        Kind::Compute => {
            let q = consumed(COMPUTE)?;
            let p = quantity::bytes(&q.0)
                .ok()
                .filter(|p| (1..=100).contains(p))
                .ok_or_else(|| Refusal::BadCompute {
                    ns: ns.clone(),
                    name: name.clone(),
                    value: q.0.chars().take(32).collect(),
                })?;
            Some(p as u32)
        }
    };
    let sm_procs = match (sm, params.sm_procs) {
        (None, None) => 0,
        (Some(_), None) => 1,
        (Some(p), Some(n)) if n <= p => n,
        (sm, Some(procs)) => {
            return Err(Refusal::ProcsWithoutShare {
                ns,
                name,
                procs,
                why: match sm {
                    None => format!("it was allocated {} (no compute share): request a compute capacity to have one", r.device),
                    Some(p) => format!("its compute share is {p} %: each process needs at least 1 %; ask for at least {procs} % or fewer processes"),
                },
            })
        }
    };
    Ok(Mapped {
        alloc: ClaimAlloc {
            uid: req.uid.clone(),
            namespace: ns,
            name,
            gpu_uuid: gpu.uuid.clone(),
            bytes,
            sm,
            sm_procs,
            // checked at prepare, beside the granted memory and the GPU
            burst: params.memory_limit.map(|limit_bytes| Burst {
                limit_bytes,
                priority: params.burst_priority.unwrap_or(0),
            }),
        },
        request_names: vec![r.request.clone()],
        pool_name: r.pool.clone(),
        device_name: r.device.clone(),
        share_id: r.share_id.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GI: u64 = 1 << 30;
    const UID: &str = "3f2a9c1e-7d4b-4e8a-9b1c-0123456789ab";

    fn offers() -> Vec<Offer> {
        [(0, "GPU-aaaa"), (1, "GPU-bbbb")]
            .map(|(index, uuid)| Offer {
                uuid: uuid.into(),
                index,
                product: "NVIDIA H200".into(),
                total_bytes: 16 * GI,
                offer_bytes: 15 * GI,
                min_bytes: 0,
                share_bytes: 15 * GI,
                share_percent: 100,
            })
            .to_vec()
    }

    fn req() -> ClaimRef {
        ClaimRef {
            namespace: "team".into(),
            name: "train-vram".into(),
            uid: UID.into(),
        }
    }

    fn result(driver: &str, pool: &str, device: &str, mem: Option<&str>) -> serde_json::Value {
        let mut r = json!({"request": "vram", "driver": driver, "pool": pool, "device": device,
                           "shareID": "9c0a6f4e-1111-2222-3333-444455556666"});
        if let Some(m) = mem {
            r["consumedCapacity"] = json!({ "memory": m });
        }
        r
    }

    fn claim(uid: &str, results: Vec<serde_json::Value>) -> ResourceClaim {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "train-vram", "namespace": "team", "uid": uid},
            "spec": {"devices": {"requests": [{"name": "vram", "exactly": {"deviceClassName": "vram.gpu-quota.io"}}]}},
            "status": {"allocation": {"devices": {"results": results}}}
        }))
        .unwrap()
    }

    fn ok(results: Vec<serde_json::Value>) -> Result<Mapped, Refusal> {
        map(&req(), &claim(UID, results), "node-a", &offers())
    }

    #[test]
    fn the_grant_on_the_allocated_gpu() {
        let m = ok(vec![
            result("gpu.example.com", "node-a", "gpu-0", Some("1")),
            result(DRIVER, "node-a", "gpu-1", Some("8Gi")),
        ])
        .unwrap();
        assert_eq!(
            m.alloc,
            ClaimAlloc {
                uid: UID.into(),
                namespace: "team".into(),
                name: "train-vram".into(),
                gpu_uuid: "GPU-bbbb".into(),
                bytes: 8 * GI,
                sm: None,
                sm_procs: 0,
                burst: None,
            }
        );
        assert_eq!(m.request_names, ["vram"]);
        assert_eq!(
            (m.pool_name.as_str(), m.device_name.as_str()),
            ("node-a", "gpu-1")
        );
        assert_eq!(
            m.share_id.as_deref(),
            Some("9c0a6f4e-1111-2222-3333-444455556666")
        );
        // decimal quantities are bytes too
        assert_eq!(
            ok(vec![result(DRIVER, "node-a", "gpu-0", Some("8G"))])
                .unwrap()
                .alloc
                .bytes,
            8_000_000_000
        );
    }

    #[test]
    fn uid_mismatch() {
        let e = map(
            &req(),
            &claim(
                "another-uid",
                vec![result(DRIVER, "node-a", "gpu-0", Some("1Gi"))],
            ),
            "node-a",
            &offers(),
        );
        assert!(
            matches!(e, Err(Refusal::UidMismatch { ref have, .. }) if have.as_deref() == Some("another-uid")),
            "{e:?}"
        );
        let mut no_uid = claim(UID, vec![result(DRIVER, "node-a", "gpu-0", Some("1Gi"))]);
        no_uid.metadata.uid = None;
        assert!(matches!(
            map(&req(), &no_uid, "node-a", &offers()),
            Err(Refusal::UidMismatch { .. })
        ));
    }

    #[test]
    fn not_allocated() {
        let mut c = claim(UID, vec![]);
        c.status = None;
        assert!(matches!(
            map(&req(), &c, "node-a", &offers()),
            Err(Refusal::NotAllocated { .. })
        ));
    }

    #[test]
    fn no_result_for_this_driver_or_node() {
        let e = ok(vec![result(
            "gpu.example.com",
            "node-a",
            "gpu-0",
            Some("8Gi"),
        )])
        .unwrap_err();
        assert!(matches!(e, Refusal::NoResult { .. }), "{e:?}");
        assert!(
            e.to_string().contains("gpu.example.com/node-a/gpu-0"),
            "{e}"
        );
        let e = ok(vec![result(DRIVER, "node-b", "gpu-0", Some("8Gi"))]).unwrap_err();
        assert!(matches!(e, Refusal::NoResult { .. }), "{e:?}");
        assert!(e.to_string().contains("node-b"), "{e}");
        assert!(matches!(ok(vec![]), Err(Refusal::NoResult { .. })));
    }

    #[test]
    fn one_slice_per_claim() {
        let e = ok(vec![
            result(DRIVER, "node-a", "gpu-0", Some("8Gi")),
            result(DRIVER, "node-a", "gpu-1", Some("8Gi")),
        ])
        .unwrap_err();
        assert!(
            matches!(e, Refusal::SeveralResults { count: 2, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("one claim per slice"), "{e}");
    }

    #[test]
    fn no_consumed_capacity_names_the_feature() {
        let e = ok(vec![result(DRIVER, "node-a", "gpu-0", None)]).unwrap_err();
        assert!(matches!(e, Refusal::NoConsumedCapacity { .. }), "{e:?}");
        assert!(e.to_string().contains("DRAConsumableCapacity"), "{e}");
    }

    #[test]
    fn bad_or_zero_quantity() {
        for q in ["1.5", "100m", "8GB", "-8Gi"] {
            let e = ok(vec![result(DRIVER, "node-a", "gpu-0", Some(q))]).unwrap_err();
            assert!(matches!(e, Refusal::BadQuantity { .. }), "{q}: {e:?}");
        }
        let e = ok(vec![result(DRIVER, "node-a", "gpu-0", Some("0"))]).unwrap_err();
        assert!(matches!(e, Refusal::Zero { .. }), "{e:?}");
    }

    #[test]
    fn unknown_device() {
        let e = ok(vec![result(DRIVER, "node-a", "gpu-7", Some("8Gi"))]).unwrap_err();
        assert!(matches!(e, Refusal::UnknownDevice { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("gpu-0, gpu-0-compute, gpu-1, gpu-1-compute"),
            "{e}"
        );
    }

    fn compute_result(device: &str, mem: &str, compute: Option<&str>) -> serde_json::Value {
        let mut r = result(DRIVER, "node-a", device, Some(mem));
        if let Some(c) = compute {
            r["consumedCapacity"]["compute"] = json!(c);
        }
        r
    }

    fn with_config(results: Vec<serde_json::Value>, params: serde_json::Value) -> ResourceClaim {
        let mut c = claim(UID, results);
        let mut v = serde_json::to_value(&c).unwrap();
        v["status"]["allocation"]["devices"]["config"] = json!([
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params}}
        ]);
        c = serde_json::from_value(v).unwrap();
        c
    }

    /// The compute device's grant carries the scheduler's compute share,
    /// split over the claim's smProcs (1 when it names none); the plain
    /// device's carries none.
    #[test]
    fn the_compute_device_grants_the_consumed_share() {
        let m = ok(vec![compute_result("gpu-1-compute", "8Gi", Some("25"))]).unwrap();
        assert_eq!(
            (m.alloc.gpu_uuid.as_str(), m.alloc.bytes),
            ("GPU-bbbb", 8 * GI)
        );
        assert_eq!((m.alloc.sm, m.alloc.sm_procs), (Some(25), 1));
        assert_eq!(m.device_name, "gpu-1-compute");
        let c = with_config(
            vec![compute_result("gpu-1-compute", "8Gi", Some("25"))],
            json!({"smProcs": 4}),
        );
        let m = map(&req(), &c, "node-a", &offers()).unwrap();
        assert_eq!((m.alloc.sm, m.alloc.sm_procs), (Some(25), 4));
        let m = ok(vec![compute_result("gpu-1", "8Gi", None)]).unwrap();
        assert_eq!((m.alloc.sm, m.alloc.sm_procs), (None, 0));
    }

    #[test]
    fn a_bad_compute_grant_or_parameter_is_refused() {
        let e = ok(vec![compute_result("gpu-0-compute", "8Gi", None)]).unwrap_err();
        assert!(
            matches!(
                e,
                Refusal::NoConsumedCapacity {
                    capacity: "compute",
                    ..
                }
            ),
            "{e:?}"
        );
        for bad in ["0", "101", "2.5", "25Mi", "-1"] {
            let e = ok(vec![compute_result("gpu-0-compute", "8Gi", Some(bad))]).unwrap_err();
            assert!(matches!(e, Refusal::BadCompute { .. }), "{bad}: {e:?}");
        }
        // smProcs on a claim without a share, or more processes than percent
        let c = with_config(
            vec![compute_result("gpu-0", "8Gi", None)],
            json!({"smProcs": 2}),
        );
        let e = map(&req(), &c, "node-a", &offers()).unwrap_err();
        assert!(matches!(e, Refusal::ProcsWithoutShare { .. }), "{e:?}");
        assert!(e.to_string().contains("request a compute capacity"), "{e}");
        let c = with_config(
            vec![compute_result("gpu-0-compute", "8Gi", Some("2"))],
            json!({"smProcs": 4}),
        );
        let e = map(&req(), &c, "node-a", &offers()).unwrap_err();
        assert!(e.to_string().contains("at least 1 %"), "{e}");
        let c = with_config(
            vec![compute_result("gpu-0", "8Gi", None)],
            json!({"smprocs": 2}),
        );
        assert!(matches!(
            map(&req(), &c, "node-a", &offers()),
            Err(Refusal::BadParams { .. })
        ));
    }

    /// The claim's memoryLimit and its class's burstPriority reach the
    /// allocation prepare places; the guarantee stays the scheduler's grant.
    #[test]
    fn a_memory_limit_and_the_class_priority_reach_the_allocation() {
        let mut v = serde_json::to_value(claim(
            UID,
            vec![result(DRIVER, "node-a", "gpu-1", Some("4Gi"))],
        ))
        .unwrap();
        v["status"]["allocation"]["devices"]["config"] = json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"burstPriority": 200}}},
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"memoryLimit": "16Gi"}}},
        ]);
        let m = map(
            &req(),
            &serde_json::from_value(v).unwrap(),
            "node-a",
            &offers(),
        )
        .unwrap();
        assert_eq!(m.alloc.bytes, 4 * GI);
        assert_eq!(
            m.alloc.burst,
            Some(Burst {
                limit_bytes: 16 * GI,
                priority: 200
            })
        );
        let c = with_config(
            vec![result(DRIVER, "node-a", "gpu-1", Some("4Gi"))],
            json!({"memoryLimit": "8Gi", "burstPriority": 1}),
        );
        let e = map(&req(), &c, "node-a", &offers()).unwrap_err();
        assert!(
            matches!(
                e,
                Refusal::BadParams {
                    err: ParamsError::PriorityFromClaim(_),
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
