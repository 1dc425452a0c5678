//! GetPreferredAllocation: all units of a container on one GPU.
//!
//! The kubelet offers the ids it may still hand out (healthy and not yet
//! allocated). We pick one GPU that has `size` of them — the fullest such
//! GPU under `binpack` (whole GPUs stay free), the emptiest under `spread` —
//! and, on it, the lowest-numbered units (the high ones are those reported
//! unhealthy first when containers outside Kubernetes take memory).
use crate::units::parse_device_id;
use gpuquota_core::config::Policy;
use std::collections::BTreeMap;

/// The preferred ids for one container. When no single GPU can hold the
/// request (or `must_include` spans GPUs) the answer is the best single-GPU
/// part; the kubelet fills up the rest and `Allocate` then refuses the
/// split with a message.
pub fn preferred(
    available: &[String],
    must_include: &[String],
    size: usize,
    policy: Policy,
    gpu_order: &[String],
) -> Vec<String> {
    // uuid -> unit numbers offered, sorted
    let mut by_gpu: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for id in available.iter().chain(must_include) {
        if let Some((uuid, n)) = parse_device_id(id) {
            let v = by_gpu.entry(uuid).or_default();
            if !v.contains(&n) {
                v.push(n);
            }
        }
    }
    for v in by_gpu.values_mut() {
        v.sort_unstable();
    }
    let order = |u: &str| gpu_order.iter().position(|g| g == u).unwrap_or(usize::MAX);
    let forced: Vec<&str> = {
        let mut f: Vec<&str> = must_include
            .iter()
            .filter_map(|id| parse_device_id(id).map(|(u, _)| u))
            .collect();
        f.dedup();
        f
    };
    let candidates: Vec<(&str, usize)> = by_gpu
        .iter()
        .filter(|(u, _)| forced.is_empty() || forced[0] == **u)
        .map(|(u, v)| (*u, v.len()))
        .collect();
    let fits: Vec<&(&str, usize)> = candidates.iter().filter(|(_, n)| *n >= size).collect();
    let chosen = if fits.is_empty() {
        // nothing fits: the GPU with the most, to make the shortfall smallest
        candidates
            .iter()
            .max_by_key(|(u, n)| (*n, std::cmp::Reverse(order(u))))
    } else {
        match policy {
            Policy::Binpack => fits.into_iter().min_by_key(|(u, n)| (*n, order(u))),
            Policy::Spread => fits
                .into_iter()
                .max_by_key(|(u, n)| (*n, std::cmp::Reverse(order(u)))),
        }
    };
    let Some((uuid, _)) = chosen else {
        return must_include.to_vec();
    };
    let mut out: Vec<String> = must_include
        .iter()
        .filter(|id| parse_device_id(id).map(|(u, _)| u) == Some(uuid))
        .cloned()
        .collect();
    for n in &by_gpu[uuid] {
        if out.len() >= size {
            break;
        }
        let id = crate::units::device_id(uuid, *n);
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::device_id;

    fn ids(gpu: &str, ns: impl IntoIterator<Item = u32>) -> Vec<String> {
        ns.into_iter().map(|n| device_id(gpu, n)).collect()
    }
    fn order() -> Vec<String> {
        vec!["GPU-a".into(), "GPU-b".into(), "GPU-c".into()]
    }

    #[test]
    fn binpack_takes_the_fullest_gpu_that_fits() {
        // GPU-a has 10 free, GPU-b 4 free, GPU-c 16 free
        let mut avail = ids("GPU-a", 6..16);
        avail.extend(ids("GPU-b", [1, 3, 5, 7]));
        avail.extend(ids("GPU-c", 0..16));
        let p = preferred(&avail, &[], 4, Policy::Binpack, &order());
        assert_eq!(p, ids("GPU-b", [1, 3, 5, 7]));
        let p = preferred(&avail, &[], 8, Policy::Binpack, &order());
        assert_eq!(
            p,
            ids("GPU-a", 6..14),
            "lowest units of the fullest fitting GPU"
        );
        let p = preferred(&avail, &[], 8, Policy::Spread, &order());
        assert_eq!(p, ids("GPU-c", 0..8), "spread: the emptiest GPU");
    }

    #[test]
    fn ties_follow_inventory_order_and_must_include_pins_the_gpu() {
        let mut avail = ids("GPU-b", 0..8);
        avail.extend(ids("GPU-a", 0..8));
        assert_eq!(
            preferred(&avail, &[], 2, Policy::Binpack, &order()),
            ids("GPU-a", 0..2)
        );
        assert_eq!(
            preferred(&avail, &[], 2, Policy::Spread, &order()),
            ids("GPU-a", 0..2)
        );
        let must = ids("GPU-b", [5]);
        let p = preferred(&avail, &must, 3, Policy::Binpack, &order());
        assert_eq!(p, ids("GPU-b", [5, 0, 1]));
    }

    #[test]
    fn nothing_fits_gives_the_largest_part() {
        let mut avail = ids("GPU-a", 0..3);
        avail.extend(ids("GPU-b", 0..5));
        let p = preferred(&avail, &[], 6, Policy::Binpack, &order());
        assert_eq!(p, ids("GPU-b", 0..5));
        assert!(preferred(&[], &[], 1, Policy::Binpack, &order()).is_empty());
        // junk ids are ignored, never echoed
        let p = preferred(
            &["x".into(), "GPU-a_1".into()],
            &[],
            1,
            Policy::Binpack,
            &order(),
        );
        assert_eq!(p, vec!["GPU-a_1".to_string()]);
    }
}
