//! The kubelet's optional DRA health stream (dra-health v1alpha1,
//! `DRAResourceHealth/NodeWatchResources`) on the DRA socket.
//!
//! Every device this node publishes (`gpu-<index>` and
//! `gpu-<index>-compute` in the pool named after the node, exactly
//! slice.rs's names) is reported HEALTHY while its GPU is
//! among the node's offers; a GPU that was published and is gone from them
//! (taken out of gpu-quota's inventory, or the driver no longer lists it)
//! stays listed as UNHEALTHY with a message naming it until it is back; when
//! the offers cannot be read, every device is UNKNOWN with the reason. The
//! source is the daemon's one poll of `Node::offers()` (the same reads the
//! slice is published from), handed to every stream through a `watch`.
//!
//! The kubelet treats each response as the driver's complete list and
//! stamps it with ITS receive time (it ignores `last_updated_time` for
//! staleness); a device not re-reported within `health_check_timeout_seconds`
//! becomes Unknown. So the list is sent at once, at every change, and again
//! every third of the timeout, but only after a fresh poll: if reading the
//! node stalls, the kubelet shows Unknown rather than a stale HEALTHY.
use crate::api::health::{
    self, dra_resource_health_server::DraResourceHealth, DeviceHealth, DeviceIdentifier,
    HealthStatus,
};
use crate::node::Offer;
use crate::slice::device_names;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Instant;
use tonic::{Request, Response, Status};

/// The `health_check_timeout_seconds` the binary reports: the kubelet's own
/// default (30 s), re-sent every 10 s, so two lost or late re-sends (a
/// ledger lock held, a busy node) still do not turn the devices Unknown,
/// while a driver that stopped polling shows as Unknown within 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Health streams served at once: the kubelet holds one per registration;
/// more are refused (RESOURCE_EXHAUSTED), so the work stays bounded.
pub const MAX_STREAMS: usize = 4;

/// One device's health, before it is stamped for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub device: String,
    pub status: HealthStatus,
    pub message: String,
}

/// One read of the node's offers and the health it gives, as the daemon's
/// poll hands it to the slice publisher and the health streams.
#[derive(Debug)]
pub struct Polled {
    pub offers: Result<Vec<Offer>, String>,
    pub health: Vec<Health>,
}

/// The GPUs published so far (index → uuid), so that one that disappears
/// is reported UNHEALTHY rather than silently dropped. Bounded by the
/// inventory's indices (host configuration, not hostile input).
#[derive(Debug, Default)]
pub struct Tracker {
    known: BTreeMap<u32, String>,
}

impl Tracker {
    /// The health of every device published so far, by index, from the
    /// latest read of the offers.
    pub fn observe(&mut self, offers: &Result<Vec<Offer>, String>) -> Vec<Health> {
        let offers = match offers {
            Ok(o) => o,
            Err(e) => {
                return self
                    .known
                    .keys()
                    .flat_map(|&i| device_names(i))
                    .map(|device| Health {
                        device,
                        status: HealthStatus::Unknown,
                        message: format!("gpu-quota: cannot read this node's GPUs: {e}"),
                    })
                    .collect()
            }
        };
        for o in offers {
            self.known.insert(o.index, o.uuid.clone());
        }
        self.known
            .iter()
            .flat_map(|(&i, uuid)| device_names(i).map(|name| (i, uuid, name)))
            .map(|(i, uuid, name)| {
                if offers.iter().any(|o| o.index == i) {
                    Health {
                        device: name,
                        status: HealthStatus::Healthy,
                        message: String::new(),
                    }
                } else {
                    Health {
                        message: format!(
                            "gpu-quota: {name} ({uuid}) is no longer among this node's GPUs \
                             (gpu-quota's inventory); put it back, or restart gpu-quota-dra \
                             to stop publishing it"
                        ),
                        device: name,
                        status: HealthStatus::Unhealthy,
                    }
                }
            })
            .collect()
    }
}

/// The wire message: every device, this node's pool, stamped `now`.
pub fn response(
    pool: &str,
    devices: &[Health],
    timeout: Duration,
    now_unix: i64,
) -> health::NodeWatchResourcesResponse {
    health::NodeWatchResourcesResponse {
        devices: devices
            .iter()
            .map(|h| DeviceHealth {
                device: Some(DeviceIdentifier {
                    pool_name: pool.into(),
                    device_name: h.device.clone(),
                }),
                health: h.status as i32,
                last_updated_time: now_unix,
                health_check_timeout_seconds: timeout_seconds(timeout),
                message: h.message.clone(),
            })
            .collect(),
    }
}

fn timeout_seconds(t: Duration) -> i64 {
    t.as_secs().max(1) as i64
}

/// The DRAResourceHealth service.
pub struct HealthService {
    /// The daemon's poll (None until the first read).
    pub polled: watch::Receiver<Option<Arc<Polled>>>,
    /// Set when the driver stops: every stream ends.
    pub stop: watch::Receiver<bool>,
    /// This node's pool (its name).
    pub pool: String,
    pub timeout: Duration,
    pub slots: Arc<Semaphore>,
}

impl HealthService {
    pub fn new(
        polled: watch::Receiver<Option<Arc<Polled>>>,
        stop: watch::Receiver<bool>,
        pool: String,
        timeout: Duration,
    ) -> HealthService {
        HealthService {
            polled,
            stop,
            pool,
            timeout,
            slots: Arc::new(Semaphore::new(MAX_STREAMS)),
        }
    }
}

type Item = Result<health::NodeWatchResourcesResponse, Status>;

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = tokio_stream::wrappers::ReceiverStream<Item>;

    async fn node_watch_resources(
        &self,
        _: Request<health::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "gpu-quota: already serving {MAX_STREAMS} health streams; close one and retry"
            ))
        })?;
        // one message in flight: a client that does not read holds the
        // stream's task at its send, nothing queues up
        let (tx, rx) = mpsc::channel(1);
        let mut polled = self.polled.clone();
        let mut stop = self.stop.clone();
        let (pool, timeout) = (self.pool.clone(), self.timeout);
        let resend = Duration::from_secs(timeout_seconds(timeout) as u64) / 3;
        tokio::spawn(async move {
            let _permit = permit;
            let mut last: Option<(Vec<Health>, Instant)> = None;
            loop {
                let current = polled.borrow_and_update().clone();
                if let Some(p) = current {
                    let due = match &last {
                        Some((h, at)) => *h != p.health || at.elapsed() >= resend,
                        None => true,
                    };
                    if due {
                        let now = gpuquota_core::fsutil::now_unix() as i64;
                        let msg = response(&pool, &p.health, timeout, now);
                        tokio::select! {
                            r = tx.send(Ok(msg)) => if r.is_err() { return },
                            _ = stop.wait_for(|s| *s) => return,
                        }
                        last = Some((p.health.clone(), Instant::now()));
                    }
                }
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = tx.closed() => return,
                    r = polled.changed() => if r.is_err() { return },
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(index: u32) -> Offer {
        Offer {
            uuid: format!("GPU-{index}{index}{index}"),
            index,
            product: "P".into(),
            total_bytes: 16 << 30,
            offer_bytes: 15 << 30,
            min_bytes: 0,
            share_bytes: 15 << 30,
            share_percent: 100,
        }
    }

    fn ok(name: &str) -> Health {
        Health {
            device: name.into(),
            status: HealthStatus::Healthy,
            message: String::new(),
        }
    }

    /// Both devices of each GPU, healthy.
    fn oks(indices: &[u32]) -> Vec<Health> {
        indices
            .iter()
            .flat_map(|&i| [ok(&format!("gpu-{i}")), ok(&format!("gpu-{i}-compute"))])
            .collect()
    }

    #[test]
    fn a_published_gpu_that_goes_is_unhealthy_and_healthy_when_back() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(&Ok(vec![])), [], "nothing published yet");
        let both = oks(&[0, 2]);
        assert_eq!(t.observe(&Ok(vec![offer(2), offer(0)])), both, "by index");
        let gone = t.observe(&Ok(vec![offer(0)]));
        assert_eq!(gone[..2], oks(&[0]));
        for (h, name) in gone[2..].iter().zip(["gpu-2", "gpu-2-compute"]) {
            assert_eq!(h.device, name);
            assert_eq!(h.status, HealthStatus::Unhealthy);
            assert!(
                h.message
                    .starts_with(&format!("gpu-quota: {name} (GPU-222)"))
                    && h.message.matches("gpu-quota:").count() == 1,
                "{}",
                h.message
            );
        }
        // still listed while gone (the kubelet would otherwise only time it out)
        assert_eq!(t.observe(&Ok(vec![offer(0)])), gone);
        assert_eq!(t.observe(&Ok(vec![offer(0), offer(2)])), both);
        // a new GPU joins the list
        assert_eq!(
            t.observe(&Ok(vec![offer(0), offer(1), offer(2)])),
            oks(&[0, 1, 2])
        );
    }

    #[test]
    fn unreadable_offers_make_every_known_device_unknown() {
        let mut t = Tracker::default();
        assert_eq!(t.observe(&Err("bad config".into())), []);
        t.observe(&Ok(vec![offer(0), offer(1)]));
        let u = t.observe(&Err("bad config".into()));
        assert_eq!(u.len(), 4);
        for (h, name) in u
            .iter()
            .zip(["gpu-0", "gpu-0-compute", "gpu-1", "gpu-1-compute"])
        {
            assert_eq!((&*h.device, h.status), (name, HealthStatus::Unknown));
            assert_eq!(
                h.message,
                "gpu-quota: cannot read this node's GPUs: bad config"
            );
        }
        assert_eq!(t.observe(&Ok(vec![offer(0), offer(1)])), oks(&[0, 1]));
    }

    #[test]
    fn the_wire_message_names_the_pool_time_and_timeout() {
        let r = response("node-a", &[ok("gpu-0")], Duration::from_secs(30), 1700);
        let d = &r.devices[0];
        let id = d.device.as_ref().unwrap();
        assert_eq!((&*id.pool_name, &*id.device_name), ("node-a", "gpu-0"));
        assert_eq!(d.health(), HealthStatus::Healthy);
        assert_eq!(
            (d.last_updated_time, d.health_check_timeout_seconds),
            (1700, 30)
        );
        // below a second: still a positive timeout (0 means the kubelet's default)
        let r = response("n", &[ok("gpu-0")], Duration::from_millis(10), 1);
        assert_eq!(r.devices[0].health_check_timeout_seconds, 1);
    }
}
