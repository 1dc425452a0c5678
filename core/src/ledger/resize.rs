//! Changing a running container's slice on one GPU, as the ledger sees it.
//!
//! A resize touches two places that cannot change together: the ledger
//! (what the host has handed out) and the container's live limit (its
//! `grant` file). The reservation carries the resize while it is under way
//! ([`PendingResize`]) and its `vram_bytes` is always the side that is safe
//! to believe after a crash:
//!
//! * **grow**: the ledger grows first ([`Ledger::resize_begin`] writes the
//!   new bytes), then the container's limit; a crash in between is rolled
//!   forward (the container is given what the ledger already counts);
//! * **shrink**: the ledger keeps the old bytes while the container's limit
//!   is lowered and its usage checked; only then does
//!   [`Ledger::resize_end`] write the new bytes. A crash in between is
//!   rolled back (the container gets its old limit again).
//!
//! Either way the repair is the same: give the container the reservation's
//! `vram_bytes` and clear the marker (`lifecycle`'s update phase does it
//! before any new resize and in `gpu-quota gc`), so the two agree on the
//! old size or the new one, never a mixture. The admission arithmetic is
//! placement's, against every other holder of the GPU, as for a new
//! container.
//!
//! Who may act on a marker: the resize that wrote it, while it holds the
//! container's resize lock ([`lock`]), and otherwise only a repair that
//! holds that lock (so the resize that wrote it is dead). Each marker
//! carries a token of its own, and [`Ledger::resize_end`] ends only the
//! marker it is given, never one written after it; ending a resize never
//! makes a slice larger (only [`Ledger::resize_begin`], which places, does).
use super::*;
use crate::formats::keys;
use crate::request::{BurstAsk, GpuRef, GpuSelector, Origin};
use crate::units::Size;

pub mod lock;

/// 64 random bits from the kernel, else from the clock and the pid: what
/// tells one marker from another with the same sizes.
fn new_token() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: the pointer and length describe `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

/// A resize under way, recorded on its reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingResize {
    pub uuid: String,
    pub from: u64,
    pub to: u64,
    /// Random, written by [`Ledger::resize_begin`]: this marker and no
    /// other (two resizes of the same sizes differ in it). 0 in a marker
    /// written before tokens.
    #[serde(default)]
    pub token: u64,
}

impl PendingResize {
    /// A marker of a resize of GPU `uuid` from `from` to `to`, with a
    /// token of its own.
    pub fn new(uuid: impl Into<String>, from: u64, to: u64) -> PendingResize {
        PendingResize {
            uuid: uuid.into(),
            from,
            to,
            token: new_token(),
        }
    }
}

/// What [`Ledger::resize_begin`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begun {
    /// The reservation as written (its marker set).
    pub reservation: Reservation,
    pub resize: PendingResize,
}

impl Begun {
    pub fn grows(&self) -> bool {
        self.resize.to > self.resize.from
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("no running container {id} holds a GPU-memory slice here; see `gpu-quota ls`")]
    NotFound { id: String },
    #[error("container {id}'s slice was granted by Kubernetes ({by}); resizing it here would leave the scheduler's accounting wrong. Change the pod's request instead (a new pod gets the new size)")]
    GrantedByKubernetes { id: String, by: String },
    #[error("container {id} holds slices on {count} GPUs ({slices}); name the one to resize with --gpu INDEX")]
    WhichGpu {
        id: String,
        count: usize,
        slices: String,
    },
    #[error("container {id} holds no slice on GPU {gpu}; it holds {slices}")]
    NotOnGpu {
        id: String,
        gpu: u32,
        slices: String,
    },
    #[error("container {id} is already being resized on GPU {gpu} ({from} → {to}), or an interrupted resize of it could not be finished; `gpu-quota gc` finishes it (and says why not), then resize again")]
    UnderWay {
        id: String,
        gpu: u32,
        from: String,
        to: String,
    },
    #[error("container {id} is being resized by another gpu-quota process right now (`gpu-quota ls` shows it as resizing); wait for that to finish, then resize again")]
    Busy { id: String },
    #[error("cannot resize container {id}: {err}")]
    Refused {
        id: String,
        err: Box<PlacementError>,
    },
}

/// Who granted a reservation when it was not this host's own admission.
fn kubernetes_grant(r: &Reservation) -> Option<String> {
    if let Some(uid) = &r.bound_claim {
        return Some(format!("DRA claim {uid}"));
    }
    r.workload
        .as_ref()
        .and_then(|w| w.pod_label())
        .map(|p| format!("pod {p}"))
}

impl Ledger {
    /// Begin resizing container `key`'s slice on GPU `gpu` (its host index;
    /// `None` when it holds one) to `to`. A grow is admitted like a new
    /// container on that GPU, against every other holder, and the new bytes
    /// are written now; a shrink writes only the marker. `Ok(None)`: the
    /// slice already has that size.
    pub fn resize_begin(
        &self,
        cfg: &Config,
        inv: &Inventory,
        contexts: &ContextCosts,
        key: Key<'_>,
        gpu: Option<u32>,
        to: Size,
    ) -> Result<Option<Begun>, ResizeError> {
        self.resize_begin_observed(cfg, inv, contexts, key, gpu, to, &mut |_| {})
    }

    /// As [`Ledger::resize_begin`], calling `observe` at each step of the
    /// writes (tests stop it there).
    #[allow(clippy::too_many_arguments)]
    pub fn resize_begin_observed(
        &self,
        cfg: &Config,
        inv: &Inventory,
        contexts: &ContextCosts,
        key: Key<'_>,
        gpu: Option<u32>,
        to: Size,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<Option<Begun>, ResizeError> {
        let (id, _) = key.id_root();
        let id = id.to_string();
        self.transact_observed(
            |d| {
                Ok(
                    match self.begin_in(d, cfg, inv, contexts, &key, gpu, to, &id) {
                        Ok(Some(b)) => (Ok(Some(b)), true),
                        other => (other, false),
                    },
                )
            },
            observe,
        )?
    }

    #[allow(clippy::too_many_arguments)]
    fn begin_in(
        &self,
        d: &mut LedgerData,
        cfg: &Config,
        inv: &Inventory,
        contexts: &ContextCosts,
        key: &Key<'_>,
        gpu: Option<u32>,
        to: Size,
        id: &str,
    ) -> Result<Option<Begun>, ResizeError> {
        let id = id.to_string();
        {
            let now = fsutil::now_unix();
            let Some(i) = d
                .reservations
                .iter()
                .position(|r| key.matches(r) && !self.is_stale(r, now))
            else {
                return Err(ResizeError::NotFound { id: id.clone() });
            };
            let r = &d.reservations[i];
            if let Some(by) = kubernetes_grant(r) {
                return Err(ResizeError::GrantedByKubernetes { id: id.clone(), by });
            }
            let slices = describe_slices(&r.slices);
            let s = match gpu {
                Some(g) => {
                    r.slices
                        .iter()
                        .position(|s| s.index == g)
                        .ok_or(ResizeError::NotOnGpu {
                            id: id.clone(),
                            gpu: g,
                            slices,
                        })?
                }
                None if r.slices.len() == 1 => 0,
                None => {
                    return Err(ResizeError::WhichGpu {
                        id: id.clone(),
                        count: r.slices.len(),
                        slices,
                    })
                }
            };
            let slice = r.slices[s].clone();
            if let Some(p) = &r.resizing {
                return Err(ResizeError::UnderWay {
                    id: id.clone(),
                    gpu: slice.index,
                    from: human(p.from),
                    to: human(p.to),
                });
            }
            let total = inv
                .gpus
                .iter()
                .find(|g| g.uuid == slice.uuid)
                .map(|g| g.total_bytes)
                .unwrap_or(0);
            let want = to.resolve(total);
            if want == slice.vram_bytes {
                return Ok(None);
            }
            if want > slice.vram_bytes {
                // the same arithmetic, refusal and message as a new
                // container asking for `want` on this GPU, with this
                // container's own slice on it left out
                let mut usage = d.usage();
                if let Some(e) = usage.get_mut(&slice.uuid) {
                    if r.counts() {
                        e.remove(&slice);
                    }
                }
                let placer = Placer::new(cfg, inv, contexts);
                let req = Request {
                    vram: Size::Bytes(want),
                    gpus: GpuSelector::List(vec![GpuRef::Uuid(slice.uuid.clone())]),
                    origin: Origin::Annotation("gpu-quota resize".into()),
                    named_gpus: true,
                    // the container keeps its share: the grow is checked
                    // beside the same shares it runs with
                    sm: (slice.sm_percent > 0).then_some(slice.sm_percent),
                    sm_procs: slice.sm_procs,
                    user: slice.sm_user,
                    // a burster's guarantee grows up to its limit, which
                    // stays as it is
                    burst: slice.burst.map(|b| BurstAsk {
                        limit: Size::Bytes(b.limit_bytes),
                        priority: b.priority,
                        origin: Origin::Annotation(keys::ANN_VRAM_LIMIT.into()),
                    }),
                };
                if let Err(err) = placer.place(&req, &usage) {
                    return Err(ResizeError::Refused {
                        id: id.clone(),
                        err: Box::new(err),
                    });
                }
            }
            let resize = PendingResize::new(slice.uuid.clone(), slice.vram_bytes, want);
            let r = &mut d.reservations[i];
            if want > slice.vram_bytes {
                r.slices[s].vram_bytes = want;
            }
            r.resizing = Some(resize.clone());
            Ok(Some(Begun {
                reservation: r.clone(),
                resize,
            }))
        }
    }

    /// End the resize `marker` of container `key`: its slice on the
    /// resized GPU becomes `vram_bytes` (a shrink's new size once the
    /// container fits in it; a grow's, already written; the old size to
    /// undo one; the reservation's own bytes to repair one) and the marker
    /// goes. Never larger than the slice is now: only a begin, which
    /// places, grows a reservation. Returns the reservation as written;
    /// `None` when it holds no such marker (released, or another marker).
    pub fn resize_end(
        &self,
        key: Key<'_>,
        marker: &PendingResize,
        vram_bytes: u64,
    ) -> Result<Option<Reservation>, LedgerError> {
        self.resize_end_observed(key, marker, vram_bytes, &mut |_| {})
    }

    /// As [`Ledger::resize_end`], calling `observe` at each step of the
    /// writes.
    pub fn resize_end_observed(
        &self,
        key: Key<'_>,
        marker: &PendingResize,
        vram_bytes: u64,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<Option<Reservation>, LedgerError> {
        self.transact_observed(
            |d| {
                let Some(r) = d
                    .reservations
                    .iter_mut()
                    .find(|r| key.matches(r) && r.resizing.as_ref() == Some(marker))
                else {
                    return Ok((None, false));
                };
                r.resizing = None;
                for s in r.slices.iter_mut().filter(|s| s.uuid == marker.uuid) {
                    s.vram_bytes = s.vram_bytes.min(vram_bytes);
                }
                Ok((Some(r.clone()), true))
            },
            observe,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Gpu;
    use crate::workload::Workload;

    const G: u64 = 1 << 30;

    fn setup() -> (tempfile::TempDir, Config, Inventory, Ledger) {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            ledger_dir: d.path().join("ledger"),
            state_dir: d.path().join("state"),
            ..Config::default()
        };
        let inv = Inventory {
            gpus: (0..2)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "Fake".into(),
                    total_bytes: 16 * G,
                    minor: i,
                    simulated: true,
                })
                .collect(),
            driver_version: "simulated".into(),
        };
        let l = Ledger::new(&cfg);
        (d, cfg, inv, l)
    }

    fn admit(
        cfg: &Config,
        inv: &Inventory,
        l: &Ledger,
        id: &str,
        vram: u64,
        gpu: u32,
    ) -> Reservation {
        let req = Request::slice_for_test(vram, gpu);
        l.admit(cfg, inv, &req, id, None, "/b", &mut vec![])
            .unwrap()
    }

    fn bytes_of(l: &Ledger, id: &str) -> (u64, Option<PendingResize>) {
        let d = l.read().unwrap();
        let r = d
            .reservations
            .iter()
            .find(|r| r.container_id == id)
            .unwrap();
        (r.slices[0].vram_bytes, r.resizing.clone())
    }

    fn key(id: &str) -> Key<'_> {
        Key::Root { id, root: None }
    }

    #[test]
    fn a_grow_is_admitted_against_the_others_and_written_first() {
        let (_d, cfg, inv, l) = setup();
        let c = ContextCosts::default();
        admit(&cfg, &inv, &l, "a", 4 * G, 0);
        admit(&cfg, &inv, &l, "b", 8 * G, 0);
        // 16 GiB GPU, b holds 8: a may grow to 8, not to 9
        let e = l
            .resize_begin(&cfg, &inv, &c, key("a"), None, Size::Bytes(9 * G))
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("cannot resize container a") && m.contains("only 8.00 GiB"),
            "{m}"
        );
        assert_eq!(
            bytes_of(&l, "a"),
            (4 * G, None),
            "a refusal changes nothing"
        );
        let b = l
            .resize_begin(&cfg, &inv, &c, key("a"), None, Size::Bytes(8 * G))
            .unwrap()
            .unwrap();
        assert!(b.grows());
        // the ledger already counts the new size, the marker says from what
        let p = PendingResize {
            uuid: "GPU-0".into(),
            from: 4 * G,
            to: 8 * G,
            token: b.resize.token,
        };
        assert_eq!(bytes_of(&l, "a"), (8 * G, Some(p.clone())));
        // a second resize waits for the first
        assert!(matches!(
            l.resize_begin(&cfg, &inv, &c, key("a"), None, Size::Bytes(2 * G)),
            Err(ResizeError::UnderWay { .. })
        ));
        // and a new container cannot take what the grow holds
        let req = Request::slice_for_test(G, 0);
        assert!(l
            .admit(&cfg, &inv, &req, "c", None, "/b", &mut vec![])
            .is_err());
        // only this marker ends it: not one of the same sizes written by
        // another resize
        let other = PendingResize::new("GPU-0", 4 * G, 8 * G);
        assert_ne!(other, p);
        assert_eq!(l.resize_end(key("a"), &other, 4 * G).unwrap(), None);
        assert_eq!(bytes_of(&l, "a"), (8 * G, Some(p.clone())));
        let r = l.resize_end(key("a"), &p, 8 * G).unwrap().unwrap();
        assert_eq!((r.slices[0].vram_bytes, r.resizing), (8 * G, None));
        assert_eq!(
            l.resize_end(key("a"), &p, 8 * G).unwrap(),
            None,
            "nothing under way"
        );
    }

    /// A share grows beside other users' shares, and one admitted before
    /// uids were recorded grows too (never "the spec does not say", which
    /// is for new ones).
    #[test]
    fn a_share_grows_whatever_its_recorded_user() {
        let (_d, cfg, inv, l) = setup();
        let c = ContextCosts::default();
        let share = |id: &str, user: Option<u32>| {
            let req = Request::share_for_test(2 * G, 0, 25);
            let r = l
                .admit(&cfg, &inv, &req, id, None, "/b", &mut vec![])
                .unwrap();
            // as a build before the uid was recorded wrote it
            l.transact(|d| {
                for r in d.reservations.iter_mut().filter(|r| r.container_id == id) {
                    r.slices[0].sm_user = user;
                }
                Ok(((), true))
            })
            .unwrap();
            r
        };
        share("a", Some(1000));
        share("old", None);
        for id in ["a", "old"] {
            let b = l
                .resize_begin(&cfg, &inv, &c, key(id), None, Size::Bytes(4 * G))
                .unwrap()
                .unwrap();
            assert!(b.grows(), "{id}");
            let r = l.resize_end(key(id), &b.resize, 4 * G).unwrap().unwrap();
            assert_eq!(
                (r.slices[0].vram_bytes, r.slices[0].sm_percent),
                (4 * G, 25),
                "{id} keeps its share"
            );
        }
    }

    #[test]
    fn a_shrink_keeps_the_old_bytes_until_it_ends() {
        let (_d, cfg, inv, l) = setup();
        let c = ContextCosts::default();
        admit(&cfg, &inv, &l, "a", 8 * G, 1);
        let b = l
            .resize_begin(&cfg, &inv, &c, key("a"), Some(1), Size::Ppm(250_000))
            .unwrap()
            .unwrap();
        assert!(!b.grows());
        assert_eq!(b.resize.to, 4 * G, "a percentage of that GPU");
        assert_eq!(bytes_of(&l, "a").0, 8 * G, "still counted at the old size");
        // given up (the container held too much): the old size stays
        l.resize_end(key("a"), &b.resize, b.resize.from).unwrap();
        assert_eq!(bytes_of(&l, "a"), (8 * G, None));
        // an end never makes the slice larger than it is
        let b2 = l
            .resize_begin(&cfg, &inv, &c, key("a"), Some(1), Size::Bytes(2 * G))
            .unwrap()
            .unwrap();
        assert_ne!(b2.resize.token, b.resize.token, "its own token");
        l.resize_end(key("a"), &b2.resize, 16 * G).unwrap();
        assert_eq!(bytes_of(&l, "a"), (8 * G, None));
        // done: the new size
        let b = l
            .resize_begin(&cfg, &inv, &c, key("a"), Some(1), Size::Bytes(4 * G))
            .unwrap()
            .unwrap();
        l.resize_end(key("a"), &b.resize, b.resize.to).unwrap();
        assert_eq!(bytes_of(&l, "a"), (4 * G, None));
        assert!(l
            .resize_begin(&cfg, &inv, &c, key("a"), None, Size::Bytes(4 * G))
            .unwrap()
            .is_none());
    }

    #[test]
    fn refusals_name_what_to_do() {
        let (_d, cfg, inv, l) = setup();
        let c = ContextCosts::default();
        let e = l
            .resize_begin(&cfg, &inv, &c, key("nope"), None, Size::Bytes(G))
            .unwrap_err();
        assert!(matches!(e, ResizeError::NotFound { .. }), "{e}");
        admit(&cfg, &inv, &l, "a", 2 * G, 0);
        let e = l
            .resize_begin(&cfg, &inv, &c, key("a"), Some(1), Size::Bytes(G))
            .unwrap_err();
        assert!(e.to_string().contains("holds no slice on GPU 1"), "{e}");
        // a pod's container: Kubernetes granted it
        l.transact(|d| {
            d.reservations[0].workload = Some(Workload {
                namespace: Some("team".into()),
                pod: Some("nb-0".into()),
                ..Workload::default()
            });
            Ok(((), true))
        })
        .unwrap();
        let e = l
            .resize_begin(&cfg, &inv, &c, key("a"), None, Size::Bytes(G))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("granted by Kubernetes (pod team/nb-0)"),
            "{e}"
        );
        // a container bound to a DRA claim: the claim's slice is the scheduler's
        l.transact(|d| {
            d.reservations[0].workload = None;
            d.reservations[0].bound_claim = Some("0a1b2c3d-0000-4000-8000-00000000c1a1".into());
            Ok(((), true))
        })
        .unwrap();
        let e = l
            .resize_begin(&cfg, &inv, &c, key("a"), None, Size::Bytes(G))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("granted by Kubernetes (DRA claim 0a1b2c3d-0000-4000-8000-00000000c1a1)"),
            "{e}"
        );
        assert_eq!(bytes_of(&l, "a"), (2 * G, None), "nothing changed");
    }
}
