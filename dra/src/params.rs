//! A claim's parameters for this driver: the opaque device configuration
//! (`spec.devices.config[].opaque` of the claim or its class, copied by the
//! scheduler into `status.allocation.devices.config`) whose `driver` is
//! this one and which applies to the claim's request.
//!
//! One parameter exists: `smProcs`, the number of CUDA processes a claim's
//! compute share is split over across all its containers (as a container's
//! `sm-procs=`): MPS bounds each client process, so each of them runs at
//! `compute / smProcs` and one more is refused at `cuInit`. `apiVersion`
//! and `kind` are accepted and ignored (the convention for opaque
//! parameters); any other key is refused, so a misspelt parameter is not
//! silently dropped. Later entries override earlier ones, and the claim's
//! own (listed after its class's) override the class's, as KEP-4381 orders
//! them. The API server bounds the parameters' size; only top-level keys
//! are looked at.
use crate::api::DRIVER;
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde_json::Value;

/// The parameters that apply to one request of a claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    pub sm_procs: Option<u32>,
}

/// Why the parameters cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error(
        "the opaque parameters of driver {DRIVER} must be a JSON object, e.g. {{\"smProcs\": 4}}"
    )]
    NotAnObject,
    #[error("unknown parameter {0:?} for driver {DRIVER}; the only one is smProcs (the CUDA processes a compute share is split over)")]
    Unknown(String),
    #[error("smProcs must be a whole number from 1 to 64, not {0}")]
    BadProcs(String),
}

const KNOWN_IGNORED: [&str; 2] = ["apiVersion", "kind"];

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
                    let n = v.as_u64().filter(|n| (1..=64).contains(n)).ok_or_else(|| {
                        ParamsError::BadProcs(v.to_string().chars().take(32).collect())
                    })?;
                    p.sm_procs = Some(n as u32);
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
        ] {
            let c = config(
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params}}]),
            );
            assert_eq!(of(Some(&c), "gpu"), Err(want));
        }
    }
}
