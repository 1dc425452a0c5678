//! The kubelet's two services: the plugin watcher's Registration (who we
//! are, where the DRA socket is) and the DRAPlugin (prepare and unprepare
//! claims).
use crate::api::dra::{self, dra_plugin_server::DraPlugin};
use crate::api::registration::{self, registration_server::Registration};
use crate::api::{DRIVER, PLUGIN_TYPE, SUPPORTED_SERVICES};
use crate::claim::{self, ClaimRef};
use crate::node::Node;
use crate::source::ClaimSource;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Registration: the plugin watcher calls GetInfo on our registration
/// socket, then tells us whether the kubelet accepted us.
pub struct RegistrationService {
    /// The DRA socket's absolute path.
    pub endpoint: String,
    /// Notified at each accepted registration: the kubelet (re)started and
    /// may have deleted this node's slices, so the publisher reads the API
    /// server's copy again.
    pub registered: Arc<tokio::sync::Notify>,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(
        &self,
        _: Request<registration::InfoRequest>,
    ) -> Result<Response<registration::PluginInfo>, Status> {
        Ok(Response::new(registration::PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: DRIVER.into(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_SERVICES.iter().map(|s| s.to_string()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<registration::RegistrationStatus>,
    ) -> Result<Response<registration::RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        if s.plugin_registered {
            tracing::info!(
                "registered with the kubelet as {DRIVER} ({})",
                self.endpoint
            );
            self.registered.notify_one();
        } else {
            tracing::warn!(
                "the kubelet refused the registration of {DRIVER}: {}",
                s.error
            );
        }
        Ok(Response::new(registration::RegistrationStatusResponse {}))
    }
}

/// The DRAPlugin service: claims are read from the API server, mapped to
/// one GPU and a byte count, and prepared as ledger claim reservations.
pub struct DraService {
    pub node: Arc<dyn Node>,
    pub claims: Arc<dyn ClaimSource>,
    /// This node's pool (its name).
    pub pool: String,
}

/// A message for `kubectl describe pod`: one `gpu-quota:` prefix, also
/// when a wrapped error (the node's) carries its own.
pub fn user_error(msg: impl std::fmt::Display) -> String {
    format!("gpu-quota: {}", msg.to_string().replace("gpu-quota: ", ""))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("gpu-quota: node task: {e}")))
}

impl DraService {
    async fn prepare_one(
        &self,
        c: &ClaimRef,
        offers: &Result<Vec<crate::node::Offer>, String>,
    ) -> Result<dra::Device, String> {
        let obj = self
            .claims
            .get(&c.namespace, &c.name)
            .await
            .map_err(user_error)?;
        let offers = offers.as_ref().map_err(|e| {
            user_error(format!(
                "claim {}/{}: cannot read this node's GPUs: {e}",
                c.namespace, c.name
            ))
        })?;
        let m = claim::map(c, &obj, &self.pool, offers).map_err(user_error)?;
        let node = self.node.clone();
        let alloc = m.alloc.clone();
        let prepared = blocking(move || node.prepare(&alloc))
            .await
            .map_err(|s| s.message().to_string())?
            .map_err(|e| {
                user_error(format!(
                    "claim {}/{} ({} on {}): {e}",
                    c.namespace,
                    c.name,
                    crate::quantity::format(m.alloc.bytes),
                    m.device_name
                ))
            })?;
        tracing::info!(
            "prepared claim {}/{} ({}): {} bytes on {} ({}), CDI {}",
            c.namespace,
            c.name,
            c.uid,
            m.alloc.bytes,
            m.device_name,
            m.alloc.gpu_uuid,
            prepared.cdi_device_ids.join(",")
        );
        Ok(dra::Device {
            request_names: m.request_names,
            pool_name: m.pool_name,
            device_name: m.device_name,
            cdi_device_ids: prepared.cdi_device_ids,
            share_id: m.share_id,
        })
    }
}

#[tonic::async_trait]
impl DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        req: Request<dra::NodePrepareResourcesRequest>,
    ) -> Result<Response<dra::NodePrepareResourcesResponse>, Status> {
        let node = self.node.clone();
        let offers = blocking(move || node.offers().map_err(|e| e.to_string())).await?;
        let mut claims = HashMap::new();
        for c in req.into_inner().claims {
            let r = ClaimRef {
                namespace: c.namespace,
                name: c.name,
                uid: c.uid,
            };
            let answer = match self.prepare_one(&r, &offers).await {
                Ok(d) => dra::NodePrepareResourceResponse {
                    devices: vec![d],
                    error: String::new(),
                },
                Err(error) => {
                    tracing::warn!("prepare {}/{} ({}): {error}", r.namespace, r.name, r.uid);
                    dra::NodePrepareResourceResponse {
                        devices: vec![],
                        error,
                    }
                }
            };
            claims.insert(r.uid, answer);
        }
        Ok(Response::new(dra::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<dra::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<dra::NodeUnprepareResourcesResponse>, Status> {
        let mut claims = HashMap::new();
        for c in req.into_inner().claims {
            let node = self.node.clone();
            let uid = c.uid.clone();
            let error = match blocking(move || node.unprepare(&uid)).await {
                Ok(Ok(())) => {
                    tracing::info!("unprepared claim {}/{} ({})", c.namespace, c.name, c.uid);
                    String::new()
                }
                Ok(Err(e)) => user_error(format!(
                    "claim {}/{}: cannot release it: {e}",
                    c.namespace, c.name
                )),
                Err(s) => s.message().to_string(),
            };
            if !error.is_empty() {
                tracing::warn!("unprepare {}/{} ({}): {error}", c.namespace, c.name, c.uid);
            }
            claims.insert(c.uid, dra::NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(dra::NodeUnprepareResourcesResponse {
            claims,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_prefix() {
        assert_eq!(user_error("x"), "gpu-quota: x");
        assert_eq!(user_error("gpu-quota: x"), "gpu-quota: x");
        assert_eq!(
            user_error("claim a/b: gpu-quota: x"),
            "gpu-quota: claim a/b: x"
        );
    }
}
