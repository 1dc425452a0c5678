//! What the node offers claims on each GPU (the DRA driver's ResourceSlice):
//! what the placer would grant a claim there, without a compute share and
//! with one.
use super::{contexts, request, ClaimError, Offer};
use crate::config::Config;
use crate::fsutil;
use crate::inventory::Inventory;
use crate::ledger::{self, Ledger, Reservation};
use crate::placement::{self, ContextCosts, Placer};
use crate::request::Origin;

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

pub(super) fn offers_of(
    cfg: &Config,
    costs: &ContextCosts,
    inv: &Inventory,
    held: &[Reservation],
    stale: &dyn Fn(&Reservation) -> bool,
) -> Vec<Offer> {
    let contexts = contexts(cfg, costs);
    let placer = Placer::new(cfg, inv, &contexts);
    // claims are left out: the scheduler counts them itself
    // (`consumedCapacity`); a dead container's bytes count until it is
    // reclaimed, its share does not keep claims away
    let usage = ledger::usage_unreclaimed(held.iter().filter(|r| !r.is_claim()), stale);
    // an offer is to any claim: its request names none
    let any = Origin::Claim {
        namespace: String::new(),
        name: String::new(),
    };
    inv.gpus
        .iter()
        .filter(|g| placement::is_sliceable(&cfg.gpus, g))
        .map(|g| {
            // a claim without a share, and the smallest one with a share
            let plain = request(any.clone(), &g.uuid, 0, None);
            let shared = request(any.clone(), &g.uuid, 0, Some((1, 1)));
            Offer {
                uuid: g.uuid.clone(),
                index: g.index,
                product: g.name.clone(),
                total_bytes: g.total_bytes,
                offer_bytes: placer.room_for(&plain, g, &usage),
                min_bytes: contexts.smallest(g),
                share_bytes: placer.room_for(&shared, g, &usage),
                share_percent: placer.share_room(g, &usage),
            }
        })
        .collect()
}
