//! One reservation per container, whatever a crash left.
//!
//! A record's name carries its bytes, so a write that changes them (a
//! resize) writes the record under its new name and removes the old name
//! after ledger.json is written ([`Ledger::save`]); a whole-ledger write
//! that moves a reservation from a record to ledger.json removes the
//! record last. A crash in between leaves the container held twice
//! (never nowhere). Every read of the whole ledger merges such copies
//! into one ([`merge`]) and every transaction writes the merged one back,
//! so the next `gc`, resize or whole-ledger admission leaves one record.
//! Until then an admission that finds a container twice among the names
//! it sums goes the whole-ledger way ([`duplicated`]): it never counts a
//! container twice, and never less than it may hold.
use super::resize::PendingResize;
use super::{records, LedgerData, Reservation};
use std::collections::{HashMap, HashSet};

/// Whether `a` and `b` are the same container's reservation (a claim's
/// entry is its own). What [`Ledger::save`] matches records by.
pub(super) fn same(a: &Reservation, b: &Reservation) -> bool {
    !a.is_claim()
        && !b.is_claim()
        && a.container_id == b.container_id
        && a.runtime_root == b.runtime_root
        && a.bundle == b.bundle
        && a.created_unix == b.created_unix
}

/// Merge the copies of each container's reservation into its first: per
/// GPU the larger slice (the one the ledger must keep counting: a grow's
/// new size before the container has it, a shrink's old size before the
/// container was checked against the new one), the marker either copy
/// had, the hook's confirmation either copy had. Copies that disagree on
/// a size and carry no marker get one, so the repair gives the container
/// what the ledger now counts. Returns whether anything was merged.
pub(super) fn merge(d: &mut LedgerData) -> bool {
    let mut first: HashMap<(&str, Option<&str>, &str, u64), usize> = HashMap::new();
    let mut copies: Vec<(usize, usize)> = vec![];
    for (i, r) in d.reservations.iter().enumerate() {
        if r.is_claim() {
            continue;
        }
        let k = (
            r.container_id.as_str(),
            r.runtime_root.as_deref(),
            r.bundle.as_str(),
            r.created_unix,
        );
        match first.get(&k) {
            Some(&j) => copies.push((j, i)),
            None => {
                first.insert(k, i);
            }
        }
    }
    if copies.is_empty() {
        return false;
    }
    for &(keep, copy) in &copies {
        let c = d.reservations[copy].clone();
        absorb(&mut d.reservations[keep], c);
    }
    let gone: HashSet<usize> = copies.iter().map(|(_, c)| *c).collect();
    let mut i = 0;
    d.reservations.retain(|_| {
        i += 1;
        !gone.contains(&(i - 1))
    });
    true
}

fn absorb(keep: &mut Reservation, c: Reservation) {
    if keep.pid.is_none() && c.pid.is_some() {
        keep.pid = c.pid;
        keep.pid_start = c.pid_start;
        keep.state = c.state;
        keep.started_unix = c.started_unix;
        keep.pid_ns = c.pid_ns;
        keep.mnt_ns = c.mnt_ns;
        keep.boot_id = c.boot_id.clone();
    }
    let mut differ = None;
    for s in keep.slices.iter_mut() {
        let Some(o) = c.slices.iter().find(|o| o.uuid == s.uuid) else {
            continue;
        };
        if o.vram_bytes != s.vram_bytes {
            let (lo, hi) = (
                o.vram_bytes.min(s.vram_bytes),
                o.vram_bytes.max(s.vram_bytes),
            );
            differ.get_or_insert((s.uuid.clone(), lo, hi));
            s.vram_bytes = hi;
        }
    }
    if keep.resizing.is_none() {
        keep.resizing = c.resizing;
    }
    if let (None, Some((uuid, lo, hi))) = (&keep.resizing, differ) {
        keep.resizing = Some(PendingResize::new(uuid, lo, hi));
    }
}

/// Whether an admission's view holds a container twice: two of this
/// boot's record `names` of one key, or a record of a container that
/// ledger.json holds too.
pub(super) fn duplicated(names: &[records::Name], json: &LedgerData) -> bool {
    let mut keys = HashSet::with_capacity(names.len());
    if !names.iter().all(|n| keys.insert(n.key)) {
        return true;
    }
    json.reservations.iter().any(|r| {
        !r.is_claim()
            && keys.contains(&records::key_hash(
                &r.container_id,
                r.runtime_root.as_deref(),
            ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ResState;
    use crate::placement::Slice;

    const G: u64 = 1 << 30;

    fn res(bytes: u64) -> Reservation {
        let s = Slice::memory("GPU-0".into(), 0, bytes);
        Reservation {
            created_unix: 7,
            ..Reservation::new("a", Some("/r"), "/b/a", vec![s], "vram=4g")
        }
    }

    #[test]
    fn copies_merge_to_the_larger_slice_with_a_marker() {
        // a grow's begin that crashed before the old name went: the old
        // copy without a marker, the new one with it
        let marker = PendingResize::new("GPU-0", 4 * G, 6 * G);
        let mut grown = res(6 * G);
        grown.resizing = Some(marker.clone());
        let mut confirmed = res(4 * G);
        confirmed.pid = Some(1);
        confirmed.state = ResState::Running;
        let other = Reservation {
            container_id: "b".into(),
            ..res(G)
        };
        let mut d = LedgerData {
            version: 2,
            reservations: vec![confirmed, other.clone(), grown],
        };
        assert!(merge(&mut d));
        assert_eq!(d.reservations.len(), 2);
        let a = &d.reservations[0];
        assert_eq!(a.slices[0].vram_bytes, 6 * G, "the larger size");
        assert_eq!(a.resizing.as_ref(), Some(&marker), "the marker kept");
        assert_eq!((a.pid, a.state), (Some(1), ResState::Running));
        assert_eq!(d.reservations[1], other);
        assert!(!merge(&mut d), "nothing left to merge");
        // copies that disagree without a marker get one
        let mut d = LedgerData {
            version: 2,
            reservations: vec![res(2 * G), res(4 * G)],
        };
        assert!(merge(&mut d));
        let p = d.reservations[0].resizing.clone().unwrap();
        assert_eq!(
            (p.from, p.to, d.reservations[0].slices[0].vram_bytes),
            (2 * G, 4 * G, 4 * G)
        );
        // another creation of the same id is another reservation
        let mut d = LedgerData {
            version: 2,
            reservations: vec![
                res(G),
                Reservation {
                    created_unix: 8,
                    ..res(G)
                },
            ],
        };
        assert!(!merge(&mut d));
    }
}
