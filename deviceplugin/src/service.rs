//! The gRPC `DevicePlugin` service.
use crate::allocate;
use crate::api::{self, device_plugin_server::DevicePlugin};
use crate::prefer;
use crate::units::Snapshot;
use gpuquota_core::config::Policy;
use std::pin::Pin;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// What the service reads: the current snapshot and placement policy
/// (kept up to date by the daemon's poller), and a stop signal that ends
/// open ListAndWatch streams so the server can shut down.
#[derive(Clone)]
pub struct PluginService {
    pub snapshot: watch::Receiver<Snapshot>,
    pub policy: watch::Receiver<Policy>,
    pub stop: watch::Receiver<bool>,
}

type Stream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

fn response(s: &Snapshot) -> api::ListAndWatchResponse {
    api::ListAndWatchResponse {
        devices: s.devices(),
    }
}

#[tonic::async_trait]
impl DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = Stream;

    async fn list_and_watch(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut snap = self.snapshot.clone();
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            let first = response(&snap.borrow_and_update());
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            loop {
                tokio::select! {
                    c = snap.changed() => {
                        if c.is_err() { break }
                        let r = response(&snap.borrow_and_update());
                        if tx.send(Ok(r)).await.is_err() { break }
                    }
                    _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
                    _ = tx.closed() => break,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<api::PreferredAllocationRequest>,
    ) -> Result<Response<api::PreferredAllocationResponse>, Status> {
        let policy = *self.policy.borrow();
        let order: Vec<String> = self
            .snapshot
            .borrow()
            .gpus
            .iter()
            .map(|g| g.uuid.clone())
            .collect();
        let container_responses = req
            .into_inner()
            .container_requests
            .iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size.max(0)).unwrap_or(0);
                let ids = prefer::preferred(
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    size,
                    policy,
                    &order,
                );
                tracing::info!(
                    "preferred allocation of {size} unit(s) ({policy:?}): {}",
                    summarize(&ids)
                );
                api::ContainerPreferredAllocationResponse { device_i_ds: ids }
            })
            .collect();
        Ok(Response::new(api::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        req: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        let snap = self.snapshot.borrow().clone();
        let mut container_responses = Vec::new();
        for c in req.into_inner().container_requests {
            match allocate::annotations(&c.devices_ids, &snap) {
                Ok(annotations) => {
                    tracing::info!(
                        "allocate {}: {}={} {}={}",
                        summarize(&c.devices_ids),
                        allocate::VRAM_KEY,
                        annotations[allocate::VRAM_KEY],
                        allocate::GPU_KEY,
                        annotations[allocate::GPU_KEY]
                    );
                    container_responses.push(api::ContainerAllocateResponse {
                        annotations,
                        ..Default::default()
                    });
                }
                Err(e) => {
                    tracing::warn!("allocate {} refused: {e}", summarize(&c.devices_ids));
                    return Err(Status::invalid_argument(format!("gpu-quota: {e}")));
                }
            }
        }
        Ok(Response::new(api::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<api::PreStartContainerRequest>,
    ) -> Result<Response<api::PreStartContainerResponse>, Status> {
        Ok(Response::new(api::PreStartContainerResponse {}))
    }
}

/// The options this plugin registers with.
pub fn options() -> api::DevicePluginOptions {
    api::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

/// "GPU-…_0..GPU-…_7 (8)" style, for the log.
fn summarize(ids: &[String]) -> String {
    match ids {
        [] => "no units".into(),
        [one] => one.clone(),
        [first, .., last] => format!("{} units {first} … {last}", ids.len()),
    }
}
