//! Checking deploy/kubernetes/ manifests against the Kubernetes API types
//! (k8s-openapi): shared by deviceplugin/tests/manifests.rs and
//! dra/tests/manifests.rs (included by path: one copy).
use serde_json::Value;

/// Every `a.b.c` path of `v` whose value is a scalar or empty; lists by index.
pub fn paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                paths(x, format!("{at}.{k}"), out)
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                paths(x, format!("{at}[{i}]"), out)
            }
        }
        _ => out.push(at),
    }
}

/// Deserialize as `T`, serialize back; report fields the type dropped.
pub fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value, file: &str) -> T {
    let t: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{file}: not a valid {}: {e}", doc["kind"]));
    let back = serde_json::to_value(&t).unwrap();
    let (mut want, mut have) = (vec![], vec![]);
    paths(doc, String::new(), &mut want);
    paths(&back, String::new(), &mut have);
    let unknown: Vec<&String> = want.iter().filter(|p| !have.contains(p)).collect();
    assert!(
        unknown.is_empty(),
        "{file}: fields the {} API does not have: {unknown:?}",
        doc["kind"]
    );
    t
}
