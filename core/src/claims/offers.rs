//! What the node offers claims on each GPU (the DRA driver's ResourceSlice).
use super::*;

/// What claims may take on each sliceable GPU of the inventory.
pub fn offers(cfg: &Config, costs: &ContextCosts) -> Result<Vec<Offer>, ClaimError> {
    let inv = Inventory::load(cfg)?;
    let ledger = Ledger::new(cfg);
    let data = ledger.read()?;
    let now = fsutil::now_unix();
    Ok(offers_of(cfg, costs, &inv, &data.reservations, &|r| {
        ledger.is_stale(r, now)
    }))
}

fn offers_of(
    cfg: &Config,
    costs: &ContextCosts,
    inv: &Inventory,
    held: &[Reservation],
    stale: &dyn Fn(&Reservation) -> bool,
) -> Vec<Offer> {
    let reserve = cfg.reserve_bytes().unwrap_or(0);
    inv.gpus
        .iter()
        .filter(|g| placement::is_sliceable(&cfg.gpus, g))
        .map(|g| {
            let others: u64 = held
                .iter()
                .filter(|r| !r.is_claim() && r.counts())
                .flat_map(|r| r.slices.iter().filter(|s| s.uuid == g.uuid))
                .map(|s| s.vram_bytes)
                .sum();
            // a dead container's share does not keep claims away (gc or
            // the next admission reclaims it)
            let shared = crate::ledger::live_shares_on(held, &g.uuid, stale)
                .next()
                .is_some();
            Offer {
                uuid: g.uuid.clone(),
                index: g.index,
                product: g.name.clone(),
                total_bytes: g.total_bytes,
                offer_bytes: if shared {
                    0
                } else {
                    placement::usable(g, reserve).saturating_sub(others)
                },
                min_bytes: smallest_useful(cfg, costs, g),
            }
        })
        .collect()
}

/// What a process's CUDA context is charged on GPU `g`, as a claim's
/// container will be charged it: the configured `context_overhead`, else
/// the cost measured on this host for that model (`costs`, from the
/// context-cost cache: `ctxcost::known_costs`), else the built-in default.
pub fn context_charge(cfg: &Config, costs: &ContextCosts, g: &Gpu) -> u64 {
    match cfg.context_overhead_setting() {
        Ok(Setting::Bytes(b)) => b,
        _ => costs
            .measured
            .get(&g.name)
            .copied()
            .unwrap_or(BUILTIN_DEFAULT_BYTES),
    }
}

/// The smallest claim worth granting on GPU `g`: its context charge and
/// one allocation above it (0 where no context is charged). A smaller
/// claim could not create a CUDA context in its container.
pub fn smallest_useful(cfg: &Config, costs: &ContextCosts, g: &Gpu) -> u64 {
    match context_charge(cfg, costs, g) {
        0 => 0,
        c => c.saturating_add(placement::MIN_USEFUL_ABOVE_CONTEXT),
    }
}
