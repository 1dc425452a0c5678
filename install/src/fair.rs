//! The exporter's connection slots shared out by peer (metrics_server.rs):
//! a peer holds at most its share, and when every slot is taken a newcomer
//! closes the oldest connection of the peer holding the most, if that peer
//! holds more than the newcomer's will. Max-min fairness: whatever one peer
//! opens or cycles, a peer holding fewer always gets a slot.
use crate::peer::Peer;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The connections served, by peer.
#[derive(Default)]
pub struct Table {
    peers: HashMap<Peer, Held>,
    total: usize,
    next_id: u64,
}

struct Held {
    /// (id, eviction signal), the oldest first.
    conns: VecDeque<(u64, Arc<Notify>)>,
}

/// A served connection's place in the table; given back on drop.
pub struct Ticket {
    table: Arc<Mutex<Table>>,
    peer: Peer,
    id: u64,
    /// Told once when the connection must close to make room.
    pub evicted: Arc<Notify>,
}

impl Table {
    /// A slot for a connection of `who` among `max` in all and `per_peer`
    /// a peer, or None (refuse it).
    pub fn admit(
        table: &Arc<Mutex<Table>>,
        who: Peer,
        max: usize,
        per_peer: usize,
    ) -> Option<Ticket> {
        let mut t = table.lock().unwrap();
        let mine = t.peers.get(&who).map_or(0, |h| h.conns.len());
        if mine >= per_peer {
            return None;
        }
        if t.total >= max {
            // the busiest peer gives up its oldest, if it holds more than
            // `who` will; otherwise the newcomer is the one over its share
            let busiest = t
                .peers
                .iter_mut()
                .max_by_key(|(_, h)| h.conns.len())
                .filter(|(_, h)| h.conns.len() > mine + 1)
                .and_then(|(_, h)| h.conns.pop_front());
            let (_, evict) = busiest?;
            evict.notify_one();
            t.total -= 1;
            t.peers.retain(|_, h| !h.conns.is_empty());
        }
        let id = t.next_id;
        t.next_id += 1;
        t.total += 1;
        let evicted = Arc::new(Notify::new());
        let held = t.peers.entry(who).or_insert_with(|| Held {
            conns: VecDeque::new(),
        });
        held.conns.push_back((id, evicted.clone()));
        Some(Ticket {
            table: table.clone(),
            peer: who,
            id,
            evicted,
        })
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap();
        let Some(h) = t.peers.get_mut(&self.peer) else {
            return;
        };
        let before = h.conns.len();
        h.conns.retain(|(id, _)| *id != self.id);
        // an evicted connection left the table when it was evicted
        let gone = before - h.conns.len();
        let empty = h.conns.is_empty();
        t.total -= gone;
        if empty {
            t.peers.remove(&self.peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_peer_over_its_share_is_refused_and_the_busiest_gives_way() {
        let t = Arc::new(Mutex::new(Table::default()));
        let (a, b, c) = (Peer::Uid(65534), Peer::Uid(0), Peer::Uid(1000));
        let a1 = Table::admit(&t, a, 4, 3).unwrap();
        let _a2 = Table::admit(&t, a, 4, 3).unwrap();
        let _a3 = Table::admit(&t, a, 4, 3).unwrap();
        // over a's own share
        assert!(Table::admit(&t, a, 4, 3).is_none());
        let _b1 = Table::admit(&t, b, 4, 3).unwrap();
        // full: c (none held) takes a's oldest
        let c1 = Table::admit(&t, c, 4, 3).unwrap();
        assert!(
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap()
                .block_on(async {
                    tokio::time::timeout(Duration::from_millis(10), a1.evicted.notified())
                        .await
                        .is_ok()
                }),
            "a's oldest was not told to close"
        );
        // a (2 held) against the busiest (a itself, 2): refused, nobody evicted
        assert!(Table::admit(&t, a, 4, 3).is_none());
        // c's second: c would hold 2, a holds 2: refused
        assert!(Table::admit(&t, c, 4, 3).is_none());
        assert_eq!(t.lock().unwrap().total, 4);
        // the evicted one's drop does not free a second slot
        drop(a1);
        assert_eq!(t.lock().unwrap().total, 4);
        drop(c1);
        assert_eq!(t.lock().unwrap().total, 3);
        assert!(!t.lock().unwrap().peers.contains_key(&c));
    }
}
