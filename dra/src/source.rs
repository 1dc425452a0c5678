//! Where ResourceClaims come from: the API server (kube-rs), or an
//! in-memory map in tests.
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("claim {ns:?}/{name:?} is not a valid Kubernetes namespace/name (a DNS label / DNS subdomain); not asked of the API server")]
    InvalidName { ns: String, name: String },
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

/// Whether `ns`/`name` are a namespace (an RFC 1123 label) and an object
/// name (an RFC 1123 subdomain) as the API server accepts them. kube-rs
/// puts both into the request's path as they are: a `/`, `..`, `?` or `%`
/// would make it another URL, so nothing else is sent (the kubelet checks
/// them too, but the client does not rely on it).
pub fn valid_claim_ref(ns: &str, name: &str) -> bool {
    fn label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }
    label(ns) && name.len() <= 253 && name.split('.').all(label)
}

/// The API server, with the driver's service account (RBAC: resourceclaims get).
pub struct KubeClaims(pub kube::Client);

#[tonic::async_trait]
impl ClaimSource for KubeClaims {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, SourceError> {
        if !valid_claim_ref(namespace, name) {
            return Err(SourceError::InvalidName {
                ns: namespace.chars().take(300).collect(),
                name: name.chars().take(300).collect(),
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An API server that records each request line and answers 404.
    async fn fake_api() -> (String, Arc<Mutex<Vec<String>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(vec![]));
        let s2 = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                let seen = s2.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = c.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    seen.lock()
                        .unwrap()
                        .push(req.lines().next().unwrap_or("").to_string());
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
                    let _ = c
                        .write_all(format!("HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).as_bytes())
                        .await;
                });
            }
        });
        (url, seen)
    }

    /// A namespace or name that is no DNS label/subdomain never reaches
    /// the API server's URL (on 6cea19e `../x` and `a?b=c` were sent).
    #[tokio::test(flavor = "current_thread")]
    async fn claim_refs_are_validated_before_any_request() {
        let (url, seen) = fake_api().await;
        let cfg = kube::Config::new(url.parse().unwrap());
        let src = KubeClaims(kube::Client::try_from(cfg).unwrap());
        assert!(matches!(
            src.get("default", "claim-1").await,
            Err(SourceError::NotFound { .. })
        ));
        for (ns, name) in [
            ("default", "../../secrets/x"),
            ("default", "a?b=c"),
            ("..", "x"),
            ("default", "a%2Fb"),
            ("Default", "x"),
            ("default", ""),
            ("a/b", "x"),
        ] {
            assert!(
                matches!(
                    src.get(ns, name).await,
                    Err(SourceError::InvalidName { .. })
                ),
                "{ns}/{name}"
            );
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            ["GET /apis/resource.k8s.io/v1/namespaces/default/resourceclaims/claim-1 HTTP/1.1"],
            "only the valid claim was asked for"
        );
        assert!(valid_claim_ref("kube-system", "gpu.claim-0"));
        assert!(!valid_claim_ref("kube-system", "gpu..claim"));
        assert!(!valid_claim_ref(&"a".repeat(64), "x"));
    }
}
