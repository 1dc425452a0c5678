//! The ResourceSlice this node publishes: one device per GPU, its memory
//! as consumable capacity (KEP-5075), shared by many claims.
//!
//! `capacity.memory` is what the ledger can still hand to claims on that GPU
//! (`Offer.offer_bytes`: usable memory minus what containers started outside
//! Kubernetes hold; claims are not subtracted, the scheduler counts them
//! through `consumedCapacity`), rounded down to the request step so that the
//! scheduler never grants what the ledger would refuse. Requests are rounded
//! up to a multiple of 256 MiB, at least the smallest claim that can hold a
//! CUDA context on that GPU (`Offer.min_bytes`: the context charge and one
//! allocation, e.g. 614 MiB + 2 MiB → 768 MiB on an H200), 1 GiB when a
//! claim names no amount: a smaller grant could run no CUDA program, and a
//! coarse step keeps the scheduler's arithmetic and the figures users read
//! short.
use crate::api::DRIVER;
use crate::node::Offer;
use crate::quantity;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity,
    ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

const MI: u64 = 1 << 20;
/// The request step and minimum.
pub const STEP_BYTES: u64 = 256 * MI;
/// What a claim that names no amount gets.
pub const DEFAULT_BYTES: u64 = 1 << 30;
/// The capacity name.
pub const MEMORY: &str = "memory";

/// The slice's name for a node.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRIVER}")
}

/// The device name of the GPU with this index.
pub fn device_name(index: u32) -> String {
    format!("gpu-{index}")
}

/// The GPU uuid behind a device name, from the same offers the slice was
/// built from; None for a name this node does not publish.
pub fn gpu_of<'a>(device: &str, offers: &'a [Offer]) -> Option<&'a Offer> {
    offers.iter().find(|o| device_name(o.index) == device)
}

fn q(bytes: u64) -> Quantity {
    Quantity(quantity::format(bytes))
}

fn device(o: &Offer) -> Device {
    let attributes = BTreeMap::from([
        (
            "uuid".to_string(),
            DeviceAttribute {
                string: Some(o.uuid.clone()),
                ..Default::default()
            },
        ),
        (
            "productName".to_string(),
            DeviceAttribute {
                string: Some(o.product.clone()),
                ..Default::default()
            },
        ),
        (
            "index".to_string(),
            DeviceAttribute {
                int: Some(i64::from(o.index)),
                ..Default::default()
            },
        ),
    ]);
    // the smallest request this GPU takes: one step, or the smallest claim
    // that can hold a CUDA context there, rounded up to the step (the
    // scheduler rounds a smaller request up to it)
    let min = o.min_bytes.div_ceil(STEP_BYTES).max(1) * STEP_BYTES;
    let capacity = BTreeMap::from([(
        MEMORY.to_string(),
        DeviceCapacity {
            value: q(o.offer_bytes / STEP_BYTES * STEP_BYTES),
            request_policy: Some(CapacityRequestPolicy {
                default: Some(q(DEFAULT_BYTES.max(min))),
                valid_range: Some(CapacityRequestPolicyRange {
                    min: q(min),
                    step: Some(q(STEP_BYTES)),
                    max: None,
                }),
                valid_values: None,
            }),
        },
    )]);
    Device {
        name: device_name(o.index),
        allow_multiple_allocations: Some(true),
        attributes: Some(attributes),
        capacity: Some(capacity),
        ..Default::default()
    }
}

/// The slice for `node` from its offers (pool generation 1, no owner: the
/// publisher sets both).
pub fn slice_for(node: &str, offers: &[Offer]) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(node)),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: DRIVER.into(),
            node_name: Some(node.into()),
            pool: ResourcePool {
                name: node.into(),
                generation: 1,
                resource_slice_count: 1,
            },
            devices: Some(offers.iter().map(device).collect()),
            ..Default::default()
        },
    }
}

/// The owner reference to the Node object (uid from the API server), so
/// that deleting the node deletes its slice.
pub fn node_owner(node: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u64 = 1 << 30;

    fn offer(index: u32, offer_bytes: u64) -> Offer {
        Offer {
            uuid: format!("GPU-{index}{index}{index}"),
            index,
            product: "NVIDIA H200".into(),
            total_bytes: 141 * GI,
            offer_bytes,
            min_bytes: 0,
        }
    }

    fn memory(s: &ResourceSlice, i: usize) -> &DeviceCapacity {
        &s.spec.devices.as_ref().unwrap()[i]
            .capacity
            .as_ref()
            .unwrap()[MEMORY]
    }

    #[test]
    fn one_device_per_gpu_shared_with_memory_rounded_down() {
        let s = slice_for(
            "node-a",
            &[
                offer(0, 140 * GI),
                offer(1, 6 * GI + 300 * MI),
                offer(3, 200 * MI),
            ],
        );
        assert_eq!(s.metadata.name.as_deref(), Some("node-a-vram.gpu-quota.io"));
        assert_eq!(s.spec.driver, "vram.gpu-quota.io");
        assert_eq!(s.spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(s.spec.pool.name, "node-a");
        assert_eq!(s.spec.pool.resource_slice_count, 1);
        let devs = s.spec.devices.as_ref().unwrap();
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-0", "gpu-1", "gpu-3"]);
        assert!(devs
            .iter()
            .all(|d| d.allow_multiple_allocations == Some(true)));
        // rounded DOWN to 256 MiB: the scheduler never grants what the ledger refuses
        assert_eq!(memory(&s, 0).value.0, "140Gi");
        assert_eq!(memory(&s, 1).value.0, "6400Mi"); // 6 GiB + 256 MiB
        assert_eq!(memory(&s, 2).value.0, "0");
        let a = devs[1].attributes.as_ref().unwrap();
        assert_eq!(a["uuid"].string.as_deref(), Some("GPU-111"));
        assert_eq!(a["productName"].string.as_deref(), Some("NVIDIA H200"));
        assert_eq!(a["index"].int, Some(1));
        assert_eq!(a.len(), 3);
    }

    #[test]
    fn request_policy_default_1gi_min_and_step_256mi() {
        let s = slice_for("n", &[offer(0, 16 * GI)]);
        let p = memory(&s, 0).request_policy.as_ref().unwrap();
        assert_eq!(p.default.as_ref().unwrap().0, "1Gi");
        let r = p.valid_range.as_ref().unwrap();
        assert_eq!(r.min.0, "256Mi");
        assert_eq!(r.step.as_ref().unwrap().0, "256Mi");
        assert!(r.max.is_none() && p.valid_values.is_none());
    }

    /// The smallest request a GPU takes can hold a CUDA context: the H200's
    /// measured charge (614 MiB) and one allocation round up to 768 MiB; a
    /// charge above the default claim raises the default too.
    #[test]
    fn the_minimum_request_can_hold_a_context() {
        let mi = 1u64 << 20;
        let mut o = offer(0, 16 * GI);
        o.min_bytes = 614 * mi + 2 * mi;
        let s = slice_for("n", &[o.clone()]);
        let p = memory(&s, 0).request_policy.as_ref().unwrap();
        assert_eq!(p.valid_range.as_ref().unwrap().min.0, "768Mi");
        assert_eq!(p.default.as_ref().unwrap().0, "1Gi");
        o.min_bytes = 1100 * mi;
        let s = slice_for("n", &[o]);
        let p = memory(&s, 0).request_policy.as_ref().unwrap();
        assert_eq!(p.valid_range.as_ref().unwrap().min.0, "1280Mi");
        assert_eq!(p.default.as_ref().unwrap().0, "1280Mi");
    }

    #[test]
    fn serializes_with_the_1_36_field_names() {
        let v = serde_json::to_value(slice_for("n", &[offer(0, 16 * GI)])).unwrap();
        let d = &v["spec"]["devices"][0];
        assert_eq!(d["allowMultipleAllocations"], true);
        assert_eq!(d["capacity"]["memory"]["value"], "16Gi");
        assert_eq!(
            d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"],
            "256Mi"
        );
        assert_eq!(v["spec"]["pool"]["resourceSliceCount"], 1);
        assert_eq!(v["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(v["kind"], "ResourceSlice");
    }

    #[test]
    fn device_names_map_back_to_the_offered_gpu_only() {
        let offers = [offer(0, GI), offer(2, GI)];
        assert_eq!(gpu_of("gpu-2", &offers).unwrap().uuid, "GPU-222");
        for bad in ["gpu-1", "gpu-02", "GPU-222", "", "gpu-"] {
            assert!(gpu_of(bad, &offers).is_none(), "{bad}");
        }
    }
}
