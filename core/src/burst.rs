//! Taking lent memory back from burstable slices, one round at a time
//! (`gpu-quota burst-supervise`).
//!
//! The driver moves a burster's managed pages to host memory when a
//! guaranteed allocation needs the room (measured: docs/burst.md); this is
//! the fallback for when it cannot, and the only place priority is
//! enforced, since the driver's eviction order cannot be chosen. Each round:
//!
//! - every container on a GPU with bursters gets the reclaim word in its
//!   grant entry for that GPU (the wait an allocation within its guarantee
//!   may take after the driver refused it); elsewhere the word is 0, and a
//!   refusal is final at once, as without bursts;
//! - where a container marks in its usage file that such an allocation
//!   waits, one burster on that GPU is ended: those above their guarantee
//!   first, then the lowest `vram-priority`, then the newest. Never a
//!   guaranteed container, never the waiter itself. The next is ended only
//!   after the last one's memory had time to go.
//!
//! Who bursts and in which order comes from the ledger (what gpu-quota
//! granted); the usage file, which the container writes, only says who is
//! above its guarantee now, so a burster that lies about its use moves
//! itself down the order of those above, never out of the candidates. A
//! wait, also written by the container, is believed only as far as its
//! guarantee entitles it: what the driver sees it hold on the GPU plus
//! what it waits for must fit in its guarantee, so a container can end
//! bursters only for memory it could have taken by allocating.
//! Planning is pure ([`plan`] over [`Look`]); the effects (grant words,
//! ending a container) are in [`end`] and the supervisor's loop.
use crate::ledger::{LedgerData, Reservation};
use crate::placement::Slice;
use std::cmp::Reverse;

pub mod end;

/// What a round reads of one container on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    /// Its whole use on the GPU (its usage file).
    pub used: u64,
    /// Bytes an allocation within its guarantee waits for (0: none).
    pub want: u64,
}

/// What a round may look at (the host's files, or a test's table).
pub trait Look {
    /// The container's reading on GPU `uuid` (None: no usage file yet, or
    /// one that does not parse).
    fn reading(&self, r: &Reservation, uuid: &str) -> Option<Reading>;
    /// The reclaim word its grant holds for GPU `uuid` now (None: no grant
    /// file, or not one of its GPUs).
    fn word(&self, r: &Reservation, uuid: &str) -> Option<u64>;
    /// What the driver attributes to the container's processes on GPU
    /// `uuid` (NVML's per-process memory: ordinary memory and contexts,
    /// not managed memory); None: the driver cannot tell.
    fn driver_held(&self, r: &Reservation, uuid: &str) -> Option<u64>;
}

/// A grant's reclaim word to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordChange {
    /// The container's position in the ledger's reservations.
    pub container: usize,
    pub uuid: String,
    pub word: u64,
}

/// A burster to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub victim: usize,
    /// The container whose allocation waits.
    pub waiter: usize,
    pub uuid: String,
    pub index: u32,
    /// The victim's guarantee and its use above it (from its usage file).
    pub guarantee: u64,
    pub above: u64,
    pub priority: u32,
    /// The waiter's wanted bytes and its priority (0: guaranteed).
    pub want: u64,
    /// How many bursters the GPU has (for the line: "the newest of N").
    pub bursters: usize,
}

/// One round's decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub words: Vec<WordChange>,
    pub ends: Vec<End>,
    /// Waits not believed: (container, GPU uuid, why), for the operator.
    pub doubted: Vec<(usize, String, String)>,
}

/// The slice a container holds on GPU `uuid`.
fn slice_on<'a>(r: &'a Reservation, uuid: &str) -> Option<&'a Slice> {
    r.slices.iter().find(|s| s.uuid == uuid)
}

/// A container (not a claim's own entry) with a slice.
fn container(r: &Reservation) -> bool {
    r.claim.is_none() && !r.slices.is_empty()
}

/// Decide one round. `wait_ms`: the configured wait (0: bursts are never
/// reclaimed by ending, and every word is 0). `settling(uuid)`: a burster
/// on that GPU was ended so recently that its memory may not be free yet.
pub fn plan(
    data: &LedgerData,
    wait_ms: u64,
    look: &dyn Look,
    settling: &dyn Fn(&str) -> bool,
) -> Round {
    let mut round = Round::default();
    let mut gpus: Vec<&str> = data
        .reservations
        .iter()
        .filter(|r| container(r))
        .flat_map(|r| r.slices.iter().map(|s| s.uuid.as_str()))
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    for uuid in gpus {
        let on: Vec<usize> = (0..data.reservations.len())
            .filter(|&i| {
                let r = &data.reservations[i];
                container(r) && slice_on(r, uuid).is_some()
            })
            .collect();
        let bursters: Vec<usize> = on
            .iter()
            .copied()
            .filter(|&i| slice_on(&data.reservations[i], uuid).is_some_and(|s| s.burst.is_some()))
            .collect();
        let word = if bursters.is_empty() { 0 } else { wait_ms };
        for &i in &on {
            let r = &data.reservations[i];
            if look.word(r, uuid).is_some_and(|w| w != word) {
                round.words.push(WordChange {
                    container: i,
                    uuid: uuid.to_string(),
                    word,
                });
            }
        }
        if word == 0 || settling(uuid) {
            continue;
        }
        // a want the waiter's guarantee covers, by the driver's account
        let mut waiter = None;
        for &i in &on {
            let r = &data.reservations[i];
            let Some(want) = look.reading(r, uuid).map(|x| x.want).filter(|w| *w > 0) else {
                continue;
            };
            let guarantee = slice_on(r, uuid).map_or(0, |s| s.vram_bytes);
            let doubt = match look.driver_held(r, uuid) {
                None => Some("the driver cannot tell what it holds there".to_string()),
                Some(held) if held.saturating_add(want) > guarantee => Some(format!(
                    "it waits for {} and the driver sees it hold {}, more than its guarantee of {}",
                    crate::units::human(want),
                    crate::units::human(held),
                    crate::units::human(guarantee)
                )),
                Some(_) => None,
            };
            match doubt {
                Some(why) => round.doubted.push((i, uuid.to_string(), why)),
                None => {
                    waiter = Some((i, want));
                    break;
                }
            }
        }
        let Some((waiter, want)) = waiter else {
            continue;
        };
        let above = |i: usize| {
            let r = &data.reservations[i];
            let g = slice_on(r, uuid).map_or(0, |s| s.vram_bytes);
            look.reading(r, uuid)
                .map_or(0, |x| x.used.saturating_sub(g))
        };
        let victim = bursters
            .iter()
            .copied()
            .filter(|&i| i != waiter)
            .min_by_key(|&i| {
                let r = &data.reservations[i];
                let p = slice_on(r, uuid)
                    .and_then(|s| s.burst)
                    .map_or(0, |b| b.priority);
                (
                    above(i) == 0,
                    p,
                    Reverse(r.created_unix),
                    r.container_id.clone(),
                )
            });
        if let Some(v) = victim {
            let s = slice_on(&data.reservations[v], uuid).expect("a burster's slice");
            round.ends.push(End {
                victim: v,
                waiter,
                uuid: uuid.to_string(),
                index: s.index,
                guarantee: s.vram_bytes,
                above: above(v),
                priority: s.burst.map_or(0, |b| b.priority),
                want,
                bursters: bursters.len(),
            });
        }
    }
    round
}

/// The line a victim gets on its stderr: why it ended.
pub fn end_line(e: &End) -> String {
    use crate::units::human;
    format!(
        "gpu-quota: container ended: it held {} above its guarantee of {} on GPU {}, and a container's allocation of {} within its guarantee needed the memory back; vram-priority {}, first of the {} burstable container(s) there to give back (lowest priority, then newest)",
        human(e.above),
        human(e.guarantee),
        e.index,
        human(e.want),
        e.priority,
        e.bursters
    )
}

#[cfg(test)]
mod tests;
