//! The ResourceSlices this node publishes: two devices per GPU, its memory
//! (and, on one of them, its SMs) as consumable capacity (KEP-5075), shared
//! by many claims.
//!
//! * `gpu-<i>` serves claims without a compute share: their containers run
//!   outside MPS and time-slice the GPU. Capacity `memory`.
//! * `gpu-<i>-compute` serves claims with one: capacity `memory` and
//!   `compute`, a percentage of the GPU's SMs (1–100); every container of
//!   such a claim is an MPS client, and together they hold the claim's
//!   share. A claim on it that names no `compute` asks for the whole GPU
//!   (the default, 100).
//!
//! A GPU serves one kind of claim at a time: an MPS client and a process
//! outside MPS time-slice (measured on the H200), so a share beside a
//! claim without one would not be a share. Both devices consume the GPU's
//! one `mode` counter (KEP-4815 partitionable devices, beta and on by
//! default in 1.36), in a counter set that a second slice of the pool
//! publishes (the API keeps counters and devices in separate slices). The
//! scheduler counts a device's counters once, when its first claim is
//! allocated, so while any claim holds one of the two devices the other
//! cannot be allocated, and once the last one is gone either can.
//!
//! `capacity.memory` is what the ledger can still hand to claims of that
//! kind on that GPU (`Offer.offer_bytes` / `share_bytes`: usable memory
//! minus what containers started outside Kubernetes hold; claims are not
//! subtracted, the scheduler counts them through `consumedCapacity`),
//! rounded down to the request step so that the scheduler never grants
//! what the ledger would refuse; `capacity.compute` is the percentage
//! those containers' shares leave (`Offer.share_percent`). Requests are
//! rounded up to a multiple of 256 MiB, at least the smallest claim that
//! can hold a CUDA context on that GPU (`Offer.min_bytes`: the context
//! charge and one allocation, e.g. 614 MiB + 2 MiB → 768 MiB on an H200),
//! 1 GiB when a claim names no amount: a smaller grant could run no CUDA
//! program, and a coarse step keeps the scheduler's arithmetic and the
//! figures users read short.
//!
//! A device that cannot take the smallest claim is left out of the slice:
//! the API server refuses a request policy whose minimum and one step do
//! not fit in the capacity, and a stale, larger offer would then stay
//! published. Claims already allocated on it keep their allocation.
use crate::api::DRIVER;
use crate::node::Offer;
use crate::quantity;
use gpuquota_core::formats::grant::SM_MAX;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Counter, CounterSet, Device,
    DeviceAttribute, DeviceCapacity, DeviceCounterConsumption, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

const MI: u64 = 1 << 20;
/// The request step and minimum.
pub const STEP_BYTES: u64 = 256 * MI;
/// What a claim that names no amount gets.
pub const DEFAULT_BYTES: u64 = 1 << 30;
/// The memory capacity's name.
pub const MEMORY: &str = "memory";
/// The compute capacity's name (a percentage of the GPU's SMs).
pub const COMPUTE: &str = "compute";
/// The counter both devices of a GPU consume (one claim kind at a time).
pub const MODE: &str = "mode";
/// The slices of a node's pool: devices, and the GPUs' counter sets.
pub const SLICES: usize = 2;

/// The devices slice's name for a node.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRIVER}")
}

/// The counters slice's name for a node.
pub fn counters_slice_name(node: &str) -> String {
    format!("{node}-{DRIVER}-counters")
}

/// The names of the pool's slices, in the order [`slices_for`] returns them.
pub fn slice_names(node: &str) -> [String; SLICES] {
    [slice_name(node), counters_slice_name(node)]
}

/// The device for claims without a compute share on the GPU with this index.
pub fn device_name(index: u32) -> String {
    format!("gpu-{index}")
}

/// The device for claims with a compute share on the GPU with this index.
pub fn compute_device_name(index: u32) -> String {
    format!("gpu-{index}-compute")
}

/// Both devices of the GPU with this index.
pub fn device_names(index: u32) -> [String; 2] {
    [device_name(index), compute_device_name(index)]
}

/// The GPU's counter set.
fn counter_set_name(index: u32) -> String {
    format!("gpu-{index}")
}

/// Which of a GPU's devices a claim was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `gpu-<i>`: no compute share.
    Plain,
    /// `gpu-<i>-compute`: a compute share.
    Compute,
}

/// The GPU behind a device name, and which of its devices it is, from the
/// same offers the slice was built from; None for a name this node does
/// not publish.
pub fn gpu_of<'a>(device: &str, offers: &'a [Offer]) -> Option<(&'a Offer, Kind)> {
    offers.iter().find_map(|o| {
        if device_name(o.index) == device {
            Some((o, Kind::Plain))
        } else if compute_device_name(o.index) == device {
            Some((o, Kind::Compute))
        } else {
            None
        }
    })
}

fn q(bytes: u64) -> Quantity {
    Quantity(quantity::format(bytes))
}

fn n(v: u32) -> Quantity {
    Quantity(v.to_string())
}

/// A consumable capacity of `value` with this minimum, default and step,
/// or None where the API server would refuse it (the minimum and one step
/// must fit in the value): the device is then left out.
fn consumable(
    value: u64,
    min: u64,
    default: u64,
    step: u64,
    fmt: fn(u64) -> Quantity,
) -> Option<DeviceCapacity> {
    (value >= min + step).then(|| DeviceCapacity {
        value: fmt(value),
        request_policy: Some(CapacityRequestPolicy {
            default: Some(fmt(default)),
            valid_range: Some(CapacityRequestPolicyRange {
                min: fmt(min),
                step: Some(fmt(step)),
                max: None,
            }),
            valid_values: None,
        }),
    })
}

fn devices(o: &Offer) -> Vec<Device> {
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
    let memory = |bytes: u64| {
        consumable(
            bytes / STEP_BYTES * STEP_BYTES,
            min,
            DEFAULT_BYTES.max(min),
            STEP_BYTES,
            q,
        )
    };
    let mode = vec![DeviceCounterConsumption {
        counter_set: counter_set_name(o.index),
        counters: mode_of_one(),
    }];
    let device = |name: String, capacity: BTreeMap<String, DeviceCapacity>| Device {
        name,
        allow_multiple_allocations: Some(true),
        attributes: Some(attributes.clone()),
        capacity: Some(capacity),
        consumes_counters: Some(mode.clone()),
        ..Default::default()
    };
    let mut out = vec![];
    if let Some(m) = memory(o.offer_bytes) {
        out.push(device(
            device_name(o.index),
            BTreeMap::from([(MEMORY.to_string(), m)]),
        ));
    }
    let share = consumable(u64::from(o.share_percent), 1, u64::from(SM_MAX), 1, |v| {
        n(v as u32)
    });
    if let (Some(m), Some(c)) = (memory(o.share_bytes), share) {
        out.push(device(
            compute_device_name(o.index),
            BTreeMap::from([(MEMORY.to_string(), m), (COMPUTE.to_string(), c)]),
        ));
    }
    out
}

/// One `mode`: what a GPU's counter set holds and each of its devices
/// consumes.
fn mode_of_one() -> BTreeMap<String, Counter> {
    BTreeMap::from([(MODE.to_string(), Counter { value: n(1) })])
}

fn counter_set(o: &Offer) -> CounterSet {
    CounterSet {
        name: counter_set_name(o.index),
        counters: mode_of_one(),
    }
}

/// The pool's slices for `node` from its offers, named as [`slice_names`]:
/// the devices, then the GPUs' counter sets (pool generation 1, no owner:
/// the publisher sets both).
pub fn slices_for(node: &str, offers: &[Offer]) -> [ResourceSlice; SLICES] {
    let slice = |name: String, devices, shared_counters| ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: DRIVER.into(),
            node_name: Some(node.into()),
            pool: ResourcePool {
                name: node.into(),
                generation: 1,
                resource_slice_count: SLICES as i64,
            },
            devices,
            shared_counters,
            ..Default::default()
        },
    };
    [
        slice(
            slice_name(node),
            Some(offers.iter().flat_map(devices).collect()),
            None,
        ),
        slice(
            counters_slice_name(node),
            None,
            Some(offers.iter().map(counter_set).collect()),
        ),
    ]
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
            share_bytes: offer_bytes,
            share_percent: 100,
        }
    }

    fn dev<'a>(s: &'a [ResourceSlice; SLICES], name: &str) -> &'a Device {
        s[0].spec
            .devices
            .as_ref()
            .unwrap()
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("no device {name}"))
    }

    fn cap<'a>(s: &'a [ResourceSlice; SLICES], name: &str, c: &str) -> &'a DeviceCapacity {
        &dev(s, name).capacity.as_ref().unwrap()[c]
    }

    fn names(s: &[ResourceSlice; SLICES]) -> Vec<&str> {
        s[0].spec
            .devices
            .as_ref()
            .unwrap()
            .iter()
            .map(|d| d.name.as_str())
            .collect()
    }

    #[test]
    fn two_devices_per_gpu_with_memory_rounded_down() {
        let s = slices_for(
            "node-a",
            &[
                offer(0, 140 * GI),
                offer(1, 6 * GI + 300 * MI),
                offer(3, 200 * MI),
            ],
        );
        assert_eq!(
            s[0].metadata.name.as_deref(),
            Some("node-a-vram.gpu-quota.io")
        );
        assert_eq!(
            s[1].metadata.name.as_deref(),
            Some("node-a-vram.gpu-quota.io-counters")
        );
        for x in &s {
            assert_eq!(x.spec.driver, "vram.gpu-quota.io");
            assert_eq!(x.spec.node_name.as_deref(), Some("node-a"));
            assert_eq!(x.spec.pool.name, "node-a");
            assert_eq!(x.spec.pool.resource_slice_count, 2);
        }
        // a device that cannot take the smallest claim is left out
        assert_eq!(
            names(&s),
            ["gpu-0", "gpu-0-compute", "gpu-1", "gpu-1-compute"]
        );
        assert!(s[0]
            .spec
            .devices
            .as_ref()
            .unwrap()
            .iter()
            .all(|d| d.allow_multiple_allocations == Some(true)));
        // rounded DOWN to 256 MiB: the scheduler never grants what the ledger refuses
        assert_eq!(cap(&s, "gpu-0", MEMORY).value.0, "140Gi");
        assert_eq!(cap(&s, "gpu-1", MEMORY).value.0, "6400Mi"); // 6 GiB + 256 MiB
        assert_eq!(cap(&s, "gpu-1-compute", MEMORY).value.0, "6400Mi");
        assert_eq!(cap(&s, "gpu-1-compute", COMPUTE).value.0, "100");
        assert!(!dev(&s, "gpu-1")
            .capacity
            .as_ref()
            .unwrap()
            .contains_key(COMPUTE));
        let a = dev(&s, "gpu-1").attributes.as_ref().unwrap();
        assert_eq!(a["uuid"].string.as_deref(), Some("GPU-111"));
        assert_eq!(a["productName"].string.as_deref(), Some("NVIDIA H200"));
        assert_eq!(a["index"].int, Some(1));
        assert_eq!(a.len(), 3);
        // the counters slice: one set per GPU, left-out devices' GPUs too
        assert!(s[1].spec.devices.is_none() && s[0].spec.shared_counters.is_none());
        let sets = s[1].spec.shared_counters.as_ref().unwrap();
        let set_names: Vec<&str> = sets.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(set_names, ["gpu-0", "gpu-1", "gpu-3"]);
        assert!(sets.iter().all(|c| c.counters[MODE].value.0 == "1"));
    }

    /// Both devices of a GPU consume its one `mode` counter, so the
    /// scheduler allocates claims of one kind at a time on it.
    #[test]
    fn both_devices_of_a_gpu_consume_its_one_mode_counter() {
        let s = slices_for("n", &[offer(0, 16 * GI), offer(1, 16 * GI)]);
        for (d, set) in [
            ("gpu-0", "gpu-0"),
            ("gpu-0-compute", "gpu-0"),
            ("gpu-1", "gpu-1"),
            ("gpu-1-compute", "gpu-1"),
        ] {
            let c = dev(&s, d).consumes_counters.as_ref().unwrap();
            assert_eq!(c.len(), 1, "{d}");
            assert_eq!(c[0].counter_set, set, "{d}");
            assert_eq!(c[0].counters[MODE].value.0, "1", "{d}");
        }
    }

    #[test]
    fn compute_is_what_outside_shares_leave_and_defaults_to_the_whole_gpu() {
        let mut o = offer(0, 16 * GI);
        o.share_percent = 75;
        o.share_bytes = 10 * GI;
        let s = slices_for("n", &[o.clone()]);
        let c = cap(&s, "gpu-0-compute", COMPUTE);
        assert_eq!(c.value.0, "75");
        let p = c.request_policy.as_ref().unwrap();
        assert_eq!(p.default.as_ref().unwrap().0, "100");
        let r = p.valid_range.as_ref().unwrap();
        assert_eq!(
            (r.min.0.as_str(), r.step.as_ref().unwrap().0.as_str()),
            ("1", "1")
        );
        assert_eq!(cap(&s, "gpu-0-compute", MEMORY).value.0, "10Gi");
        // containers outside Kubernetes without a share: no compute device;
        // with shares: no plain device
        o.share_percent = 0;
        assert_eq!(names(&slices_for("n", &[o.clone()])), ["gpu-0"]);
        o.share_percent = 50;
        o.offer_bytes = 0;
        assert_eq!(names(&slices_for("n", &[o])), ["gpu-0-compute"]);
    }

    #[test]
    fn request_policy_default_1gi_min_and_step_256mi() {
        let s = slices_for("n", &[offer(0, 16 * GI)]);
        for d in ["gpu-0", "gpu-0-compute"] {
            let p = cap(&s, d, MEMORY).request_policy.as_ref().unwrap();
            assert_eq!(p.default.as_ref().unwrap().0, "1Gi");
            let r = p.valid_range.as_ref().unwrap();
            assert_eq!(r.min.0, "256Mi");
            assert_eq!(r.step.as_ref().unwrap().0, "256Mi");
            assert!(r.max.is_none() && p.valid_values.is_none());
        }
    }

    /// The API server refuses a policy whose minimum and one step exceed
    /// the capacity (validateRequestPolicyRange): such a device is left
    /// out rather than published with a policy it would refuse.
    #[test]
    fn a_device_is_published_only_with_room_for_its_minimum_and_a_step() {
        let mi = 1u64 << 20;
        let mut o = offer(0, 1024 * mi);
        o.min_bytes = 614 * mi + 2 * mi; // min 768Mi
        assert_eq!(
            names(&slices_for("n", &[o.clone()])),
            ["gpu-0", "gpu-0-compute"]
        );
        o.offer_bytes = 1023 * mi;
        o.share_bytes = 1023 * mi;
        assert!(names(&slices_for("n", &[o.clone()])).is_empty());
        o.offer_bytes = 0;
        o.share_bytes = 16 * GI;
        o.share_percent = 1;
        assert!(
            names(&slices_for("n", &[o.clone()])).is_empty(),
            "1 % left: no step fits"
        );
        o.share_percent = 2;
        assert_eq!(names(&slices_for("n", &[o])), ["gpu-0-compute"]);
    }

    /// The smallest request a GPU takes can hold a CUDA context: the H200's
    /// measured charge (614 MiB) and one allocation round up to 768 MiB; a
    /// charge above the default claim raises the default too.
    #[test]
    fn the_minimum_request_can_hold_a_context() {
        let mi = 1u64 << 20;
        let mut o = offer(0, 16 * GI);
        o.min_bytes = 614 * mi + 2 * mi;
        let s = slices_for("n", &[o.clone()]);
        let p = cap(&s, "gpu-0", MEMORY).request_policy.as_ref().unwrap();
        assert_eq!(p.valid_range.as_ref().unwrap().min.0, "768Mi");
        assert_eq!(p.default.as_ref().unwrap().0, "1Gi");
        o.min_bytes = 1100 * mi;
        let s = slices_for("n", &[o]);
        let p = cap(&s, "gpu-0", MEMORY).request_policy.as_ref().unwrap();
        assert_eq!(p.valid_range.as_ref().unwrap().min.0, "1280Mi");
        assert_eq!(p.default.as_ref().unwrap().0, "1280Mi");
    }

    #[test]
    fn serializes_with_the_1_36_field_names() {
        let [d, c] = slices_for("n", &[offer(0, 16 * GI)]);
        let v = serde_json::to_value(d).unwrap();
        let dev = &v["spec"]["devices"][1];
        assert_eq!(dev["name"], "gpu-0-compute");
        assert_eq!(dev["allowMultipleAllocations"], true);
        assert_eq!(dev["capacity"]["memory"]["value"], "16Gi");
        assert_eq!(dev["capacity"]["compute"]["value"], "100");
        assert_eq!(
            dev["capacity"]["memory"]["requestPolicy"]["validRange"]["step"],
            "256Mi"
        );
        assert_eq!(dev["consumesCounters"][0]["counterSet"], "gpu-0");
        assert_eq!(dev["consumesCounters"][0]["counters"]["mode"]["value"], "1");
        assert_eq!(v["spec"]["pool"]["resourceSliceCount"], 2);
        assert_eq!(v["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(v["kind"], "ResourceSlice");
        let v = serde_json::to_value(c).unwrap();
        assert_eq!(v["spec"]["sharedCounters"][0]["name"], "gpu-0");
        assert_eq!(
            v["spec"]["sharedCounters"][0]["counters"]["mode"]["value"],
            "1"
        );
        assert!(v["spec"].get("devices").is_none());
    }

    #[test]
    fn device_names_map_back_to_the_offered_gpu_and_kind_only() {
        let offers = [offer(0, GI), offer(2, GI)];
        let (o, k) = gpu_of("gpu-2", &offers).unwrap();
        assert_eq!((o.uuid.as_str(), k), ("GPU-222", Kind::Plain));
        let (o, k) = gpu_of("gpu-2-compute", &offers).unwrap();
        assert_eq!((o.uuid.as_str(), k), ("GPU-222", Kind::Compute));
        for bad in [
            "gpu-1",
            "gpu-02",
            "GPU-222",
            "",
            "gpu-",
            "gpu-1-compute",
            "gpu-2-compute-",
        ] {
            assert!(gpu_of(bad, &offers).is_none(), "{bad}");
        }
    }
}
