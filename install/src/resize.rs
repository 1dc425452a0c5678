//! `gpu-quota resize CONTAINER SIZE [--gpu N]`: change a running
//! container's slice without stopping it (`lifecycle::update`).
//!
//! CONTAINER is what `gpu-quota ls` shows: the id, a prefix of it that
//! names one container, or the engine's name for the container where the
//! engine passed one (nerdctl's name, a pod's container as
//! `namespace/pod/container`). SIZE is the `vram=` grammar: bytes or a
//! percentage of the GPU.
use crate::ops::{cli_source, load};
use anyhow::{bail, Context, Result};
use gpuquota_core::ledger::Key;
use gpuquota_core::lifecycle::update;
use gpuquota_core::units::{human, parse_size};
use gpuquota_core::{fsutil, Inventory, Reservation};

#[derive(clap::Args)]
pub struct ResizeArgs {
    /// The container: its id, a unique prefix of it, or its name as
    /// `gpu-quota ls` shows it under WORKLOAD.
    pub container: String,
    /// The new slice, as `vram=` takes it (8g, 12GiB, 25%).
    pub size: String,
    /// The GPU to resize (its index), when the container holds several.
    #[arg(long, value_name = "INDEX")]
    pub gpu: Option<u32>,
    /// The runc root the container was created under, when its id is held
    /// under several.
    #[arg(long, value_name = "DIR")]
    pub runtime_root: Option<String>,
}

/// The one live container `q` names.
pub(crate) fn find<'a>(
    held: &'a [Reservation],
    q: &str,
    root: Option<&str>,
    live: &dyn Fn(&Reservation) -> bool,
) -> Result<&'a Reservation> {
    let cands: Vec<&Reservation> = held
        .iter()
        .filter(|r| !r.is_claim() && live(r))
        .filter(|r| root.is_none_or(|x| r.runtime_root.as_deref() == Some(x)))
        .collect();
    let by = |f: &dyn Fn(&Reservation) -> bool| -> Vec<&'a Reservation> {
        cands.iter().copied().filter(|r| f(r)).collect()
    };
    let mut found = by(&|r| r.container_id == q);
    if found.is_empty() {
        found = by(&|r| {
            r.workload
                .as_ref()
                .is_some_and(|w| w.label() == q || w.container.as_deref() == Some(q))
        });
    }
    if found.is_empty() && !q.is_empty() {
        found = by(&|r| r.container_id.starts_with(q));
    }
    match found.as_slice() {
        [r] => Ok(r),
        [] => bail!(
            "no running container {q:?} holds a GPU-memory slice on this host (see `gpu-quota ls`). A process that runs with GPU_QUOTA_VRAM under the preload alone (no runtime) has no entry in the host ledger, so there is nothing to resize: restart it with another GPU_QUOTA_VRAM"
        ),
        many => {
            let ids: Vec<String> = many
                .iter()
                .map(|r| {
                    format!(
                        "{} (runc root {})",
                        r.container_id,
                        r.runtime_root.as_deref().unwrap_or("runc's default")
                    )
                })
                .collect();
            bail!(
                "{q:?} names {} containers: {}; give more of the id, or --runtime-root",
                many.len(),
                ids.join(", ")
            )
        }
    }
}

/// Who runs this command, for the event log.
fn operator() -> String {
    // SAFETY: getuid cannot fail
    let uid = unsafe { libc::getuid() };
    match std::env::var("SUDO_USER") {
        Ok(u) if !u.is_empty() && u.len() <= 64 => format!("uid {uid} (sudo from {u})"),
        _ => format!("uid {uid}"),
    }
}

pub fn resize(a: &ResizeArgs) -> Result<()> {
    let (cfg, ledger) = load()?;
    let to = parse_size(&a.size).with_context(|| {
        format!(
            "SIZE {:?}: give bytes with a unit (8g, 12GiB) or a percentage of the GPU (25%)",
            a.size
        )
    })?;
    let held = ledger.read()?.reservations;
    let now = fsutil::now_unix();
    let r = find(&held, &a.container, a.runtime_root.as_deref(), &|r| {
        !ledger.is_stale(r, now)
    })?;
    let inv = Inventory::load(&cfg)?;
    let contexts = gpuquota_core::ctxcost::known_costs(&cfg, true);
    let key = Key::Root {
        id: &r.container_id,
        root: r.runtime_root.as_deref(),
    };
    match update::resize(
        &cfg,
        &inv,
        &contexts,
        key,
        a.gpu,
        to,
        &operator(),
        cli_source("resize"),
    )? {
        None => gpuquota_core::outln!(
            "{} already holds {} there; nothing changed",
            r.container_id,
            a.size
        ),
        Some(x) => gpuquota_core::outln!(
            "resized {} on GPU {}: {} -> {}",
            x.reservation.container_id,
            x.gpu,
            human(x.from),
            human(x.to)
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuquota_core::placement::Slice;
    use gpuquota_core::workload::Workload;

    fn res(id: &str, root: Option<&str>, name: Option<&str>) -> Reservation {
        let s = Slice {
            uuid: "GPU-0".into(),
            index: 0,
            vram_bytes: 1 << 30,
            sm_percent: 0,
            sm_user: None,
            sm_procs: 0,
        };
        Reservation {
            workload: name.map(|n| Workload {
                container: Some(n.into()),
                ..Workload::default()
            }),
            ..Reservation::new(id, root, "/b", vec![s], "vram=1g")
        }
    }

    #[test]
    fn a_container_is_found_by_id_name_or_unique_prefix() {
        let held = vec![
            res("abc123", None, Some("web")),
            res("abd456", None, None),
            res("abc123", Some("/run/other"), None),
        ];
        let live = |_: &Reservation| true;
        let id = |q: &str, root: Option<&str>| {
            find(&held, q, root, &live).map(|r| (r.container_id.clone(), r.runtime_root.clone()))
        };
        assert_eq!(id("web", None).unwrap().0, "abc123");
        assert_eq!(id("abd", None).unwrap().0, "abd456");
        let e = id("abc123", None).unwrap_err().to_string();
        assert!(
            e.contains("names 2 containers") && e.contains("--runtime-root"),
            "{e}"
        );
        assert_eq!(
            id("abc123", Some("/run/other")).unwrap().1.as_deref(),
            Some("/run/other")
        );
        let e = id("ab", None).unwrap_err().to_string();
        assert!(e.contains("names 3 containers"), "{e}");
        let e = id("zzz", None).unwrap_err().to_string();
        assert!(
            e.contains("GPU_QUOTA_VRAM") && e.contains("nothing to resize"),
            "{e}"
        );
        // a gone container is not resized
        let e = find(&held, "abd456", None, &|_| false).unwrap_err();
        assert!(e.to_string().contains("no running container"), "{e}");
    }
}
