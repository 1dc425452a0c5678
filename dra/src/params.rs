//! A claim's parameters for this driver: the opaque device configuration
//! (`spec.devices.config[].opaque` of the claim or its class, copied by the
//! scheduler into `status.allocation.devices.config`) whose `driver` is
//! this one and which applies to the claim's request.
//!
//! The parameters:
//!
//! * `smProcs`: the number of CUDA processes a claim's compute share is
//!   split over across all its containers (as a container's `sm-procs=`):
//!   MPS bounds each client process, so each of them runs at
//!   `compute / smProcs` and one more is refused at `cuInit`.
//! * `memoryLimit`: a burst limit (as a container's `vram-limit=`), a
//!   Kubernetes quantity string (`"16Gi"`) or a number of bytes: the most
//!   the claim's containers may hold together, guarantee included. It is
//!   not a capacity the scheduler sums (it would sum limits, and nothing
//!   would be lent); prepare checks it against the granted memory and the
//!   GPU (`core::claims`), and refuses it beside a compute share.
//! * `burstPriority` (0–1000): who gives lent memory back first, the
//!   lowest, as `vram-priority=`. Read from the DeviceClass's config only
//!   (`source: FromClass`): a claim naming it is refused, so that tenants
//!   cannot raise their own. A class may name it for claims without a
//!   limit: it is then unused.
//!
//! `apiVersion` and `kind` are accepted and ignored (the convention for
//! opaque parameters); any other key is refused, so a misspelt parameter
//! is not silently dropped. Later entries override earlier ones, and the
//! claim's own (listed after its class's) override the class's, as
//! KEP-4381 orders them. The API server bounds the parameters' size; only
//! top-level keys are looked at.
use crate::api::DRIVER;
use crate::quantity;
use gpuquota_core::formats::grant::PRIORITY_MAX;
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde_json::Value;

/// The parameters that apply to one request of a claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    pub sm_procs: Option<u32>,
    /// `memoryLimit`, in bytes.
    pub memory_limit: Option<u64>,
    /// `burstPriority`, from the class only.
    pub burst_priority: Option<u32>,
}

/// Why the parameters cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error(
        "the opaque parameters of driver {DRIVER} must be a JSON object, e.g. {{\"smProcs\": 4}}"
    )]
    NotAnObject,
    #[error("unknown parameter {0:?} for driver {DRIVER}; the parameters are smProcs (the CUDA processes a compute share is split over), memoryLimit (a burst limit, e.g. \"16Gi\") and, in a DeviceClass only, burstPriority")]
    Unknown(String),
    #[error("smProcs must be a whole number from 1 to 64, not {0}")]
    BadProcs(String),
    #[error("memoryLimit must be a Kubernetes quantity of whole bytes above 0 (e.g. \"16Gi\") or a number of bytes, not {value}{why}")]
    BadLimit { value: String, why: String },
    #[error("burstPriority must be a whole number from 0 to 1000, not {0}")]
    BadPriority(String),
    #[error("burstPriority {0} is set in the claim; tenants cannot raise their own priority: only the DeviceClass's config sets it (ask the cluster's operator for a class with the priority you need), so leave it out of the claim")]
    PriorityFromClaim(String),
}

const KNOWN_IGNORED: [&str; 2] = ["apiVersion", "kind"];
/// `source` of an entry from the claim's DeviceClass.
const FROM_CLASS: &str = "FromClass";

/// A value as a refusal quotes it.
fn quoted(v: &Value) -> String {
    v.to_string().chars().take(32).collect()
}

fn memory_limit(v: &Value) -> Result<u64, ParamsError> {
    let bad = |why: String| ParamsError::BadLimit {
        value: quoted(v),
        why,
    };
    let bytes = match v {
        Value::String(s) => quantity::bytes(s).map_err(|e| bad(format!(": {e}")))?,
        Value::Number(n) => n.as_u64().ok_or_else(|| bad(String::new()))?,
        _ => return Err(bad(String::new())),
    };
    if bytes == 0 {
        return Err(bad(String::new()));
    }
    Ok(bytes)
}

/// The parameters for `request` from the allocation's configuration.
pub fn of(
    config: Option<&[DeviceAllocationConfiguration]>,
    request: &str,
) -> Result<Params, ParamsError> {
    let mut p = Params::default();
    for c in config.unwrap_or_default() {
        let applies = c
            .requests
            .as_deref()
            .is_none_or(|r| r.is_empty() || r.iter().any(|n| n == request));
        let Some(o) = c.opaque.as_ref().filter(|o| o.driver == DRIVER && applies) else {
            continue;
        };
        let Value::Object(m) = &o.parameters.0 else {
            return Err(ParamsError::NotAnObject);
        };
        for (k, v) in m {
            match k.as_str() {
                "smProcs" => {
                    let n = v
                        .as_u64()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| ParamsError::BadProcs(quoted(v)))?;
                    p.sm_procs = Some(n as u32);
                }
                "memoryLimit" => p.memory_limit = Some(memory_limit(v)?),
                "burstPriority" => {
                    if c.source != FROM_CLASS {
                        return Err(ParamsError::PriorityFromClaim(quoted(v)));
                    }
                    let n = v
                        .as_u64()
                        .filter(|n| *n <= u64::from(PRIORITY_MAX))
                        .ok_or_else(|| ParamsError::BadPriority(quoted(v)))?;
                    p.burst_priority = Some(n as u32);
                }
                k if KNOWN_IGNORED.contains(&k) => {}
                k => return Err(ParamsError::Unknown(k.chars().take(64).collect())),
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: Value) -> Vec<DeviceAllocationConfiguration> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_claims_entry_overrides_the_class_and_other_drivers_are_ignored() {
        let c = config(json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"smProcs": 2}}},
            {"source": "FromClaim", "opaque": {"driver": "gpu.example.com", "parameters": {"whatever": 1}}},
            {"source": "FromClaim", "requests": ["other"], "opaque": {"driver": DRIVER, "parameters": {"smProcs": 8}}},
            {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "v1", "kind": "Params", "smProcs": 4}}},
        ]));
        assert_eq!(of(Some(&c), "gpu").unwrap().sm_procs, Some(4));
        assert_eq!(of(Some(&c), "third").unwrap().sm_procs, Some(2));
        assert_eq!(of(None, "gpu").unwrap(), Params::default());
    }

    #[test]
    fn misspelt_or_out_of_range_parameters_are_refused() {
        for (params, want) in [
            (
                json!({"smprocs": 4}),
                ParamsError::Unknown("smprocs".into()),
            ),
            (json!({"smProcs": 0}), ParamsError::BadProcs("0".into())),
            (json!({"smProcs": 65}), ParamsError::BadProcs("65".into())),
            (
                json!({"smProcs": "4"}),
                ParamsError::BadProcs("\"4\"".into()),
            ),
            (json!([4]), ParamsError::NotAnObject),
            (
                json!({"memorylimit": "16Gi"}),
                ParamsError::Unknown("memorylimit".into()),
            ),
        ] {
            let c = config(
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params}}]),
            );
            assert_eq!(of(Some(&c), "gpu"), Err(want));
        }
    }

    fn from(source: &str, params: Value) -> Vec<DeviceAllocationConfiguration> {
        config(json!([{"source": source, "opaque": {"driver": DRIVER, "parameters": params}}]))
    }

    #[test]
    fn a_memory_limit_is_a_quantity_or_bytes() {
        for (v, want) in [
            (json!("16Gi"), 16 << 30),
            (json!("8G"), 8_000_000_000),
            (json!(17179869184u64), 16 << 30),
        ] {
            for source in ["FromClaim", "FromClass"] {
                let c = from(source, json!({ "memoryLimit": v }));
                assert_eq!(of(Some(&c), "gpu").unwrap().memory_limit, Some(want), "{v}");
            }
        }
        // the claim's overrides the class's
        let c = config(json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"memoryLimit": "8Gi"}}},
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"memoryLimit": "12Gi"}}},
        ]));
        assert_eq!(of(Some(&c), "gpu").unwrap().memory_limit, Some(12 << 30));
    }

    #[test]
    fn a_bad_memory_limit_is_refused() {
        for v in [
            json!("16GiB"),
            json!("1.5"),
            json!("-16Gi"),
            json!("0"),
            json!(0),
            json!(-1),
            json!(1.5),
            json!(true),
            json!({"limit": "16Gi"}),
        ] {
            let c = from("FromClaim", json!({ "memoryLimit": v }));
            let e = of(Some(&c), "gpu").unwrap_err();
            assert!(matches!(e, ParamsError::BadLimit { .. }), "{v}: {e:?}");
            assert!(e.to_string().contains("memoryLimit must be"), "{e}");
        }
    }

    /// A class sets the priority; a claim (even one that only repeats the
    /// class's value) is refused, so no tenant raises its own.
    #[test]
    fn burst_priority_comes_from_the_class_only() {
        let c = from("FromClass", json!({"burstPriority": 100}));
        assert_eq!(of(Some(&c), "gpu").unwrap().burst_priority, Some(100));
        let c = config(json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"burstPriority": 100}}},
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"burstPriority": 1000, "memoryLimit": "16Gi"}}},
        ]));
        let e = of(Some(&c), "gpu").unwrap_err();
        assert_eq!(e, ParamsError::PriorityFromClaim("1000".into()));
        assert!(
            e.to_string()
                .contains("tenants cannot raise their own priority"),
            "{e}"
        );
        for v in [json!(1001), json!(-1), json!("100"), json!(2.5)] {
            let c = from("FromClass", json!({ "burstPriority": v }));
            assert!(
                matches!(of(Some(&c), "gpu"), Err(ParamsError::BadPriority(_))),
                "{v}"
            );
        }
    }
}
