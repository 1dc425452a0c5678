//! Where ResourceClaims come from: the API server (kube-rs), or an
//! in-memory map in tests.
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("claim {ns}/{name} does not exist on the API server")]
    NotFound { ns: String, name: String },
    #[error("cannot read claim {ns}/{name} from the API server: {err}")]
    Api {
        ns: String,
        name: String,
        err: String,
    },
}

#[tonic::async_trait]
pub trait ClaimSource: Send + Sync {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError>;
}

/// The API server, with the driver's service account (RBAC: resourceclaims get).
pub struct KubeClaims(pub kube::Client);

#[tonic::async_trait]
impl ClaimSource for KubeClaims {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError> {
        let api: kube::Api<ResourceClaim> = kube::Api::namespaced(self.0.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(SourceError::NotFound {
                ns: namespace.into(),
                name: name.into(),
            }),
            Err(e) => Err(SourceError::Api {
                ns: namespace.into(),
                name: name.into(),
                err: e.to_string(),
            }),
        }
    }
}

/// Claims held in memory, keyed by (namespace, name): what tests serve
/// instead of an API server.
#[derive(Default)]
pub struct MemoryClaims(pub Mutex<BTreeMap<(String, String), ResourceClaim>>);

impl MemoryClaims {
    pub fn insert(&self, c: ResourceClaim) {
        let key = (
            c.metadata.namespace.clone().unwrap_or_default(),
            c.metadata.name.clone().unwrap_or_default(),
        );
        self.0.lock().unwrap().insert(key, c);
    }
}

#[tonic::async_trait]
impl ClaimSource for MemoryClaims {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError> {
        self.0
            .lock()
            .unwrap()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| SourceError::NotFound {
                ns: namespace.into(),
                name: name.into(),
            })
    }
}
