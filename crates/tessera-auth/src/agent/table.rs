//! The agent's table of open connections, by uid: what decides at accept whether a connection
//! is served, and which connection makes room when the table is full.
//!
//! The accept loop asks [`Connections::admit`] with the uid `SO_PEERCRED` names, before the
//! connection reads a byte. Each admitted connection gets an entry under its uid, keyed by an
//! id that grows with every admission (so a uid's lowest id is its oldest connection). The
//! entry holds the sending half of a oneshot channel: dropping it (an eviction) tells the
//! connection's task to close. The task holds a [`Slot`] that removes the entry when it ends.
//!
//! Two rules, so that one user can never keep another out:
//! - a uid holds at most [`AGENT_CONNECTIONS_PER_UID_MAX`]; a connection past that is refused;
//! - a connection within its uid's share is always admitted. When the table already holds
//!   [`AGENT_CONNECTIONS_MAX`], the oldest connection of the uid holding the most (the
//!   newcomer's own on a tie) is closed to make room. Refusing the newcomer instead would let a
//!   few uids at their share (two, at 128 each) lock every other uid out; evicting from the
//!   largest holder shares the table evenly among however many uids want it. The oldest is
//!   the one to go because an honest exchange is one round trip of well under a millisecond:
//!   a connection that has lasted is idle or slow, and its request deadline is nearly spent.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::{AGENT_CONNECTIONS_MAX, AGENT_CONNECTIONS_PER_UID_MAX};

/// The connections the agent serves now.
#[derive(Debug, Clone, Default)]
pub(super) struct Connections {
    table: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    /// The id of the next admission.
    next_id: u64,
    /// Entries in `by_uid`, all uids together.
    total: usize,
    /// Each uid's connections, oldest first; a uid with none has no key.
    by_uid: HashMap<u32, BTreeMap<u64, oneshot::Sender<()>>>,
}

/// An admitted connection.
#[derive(Debug)]
pub(super) struct Admitted {
    /// Its place in the table, for as long as its task holds it.
    pub(super) slot: Slot,
    /// Completes when the connection is evicted to make room for another.
    pub(super) evicted: oneshot::Receiver<()>,
    /// The connection closed to make room for this one, if the table was full.
    pub(super) made_room: Option<Eviction>,
}

/// The connection closed to make room: its uid, and how many that uid held before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Eviction {
    pub(super) uid: u32,
    pub(super) held: usize,
}

/// A refusal: the uid already holds its share, `held` connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OverShare {
    pub(super) held: usize,
}

/// An admitted connection's place in the table; dropping it gives the place back.
#[derive(Debug)]
pub(super) struct Slot {
    table: Arc<Mutex<Table>>,
    uid: u32,
    id: u64,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a new connection of `uid`, or refuses it if `uid` holds its share already.
    pub(super) fn admit(&self, uid: u32) -> Result<Admitted, OverShare> {
        let mut table = self.lock();
        let held = table.held(uid);
        if held >= AGENT_CONNECTIONS_PER_UID_MAX {
            return Err(OverShare { held });
        }
        let made_room = (table.total >= AGENT_CONNECTIONS_MAX).then(|| table.evict_for(uid));
        let id = table.next_id;
        table.next_id += 1;
        let (sender, evicted) = oneshot::channel();
        table.by_uid.entry(uid).or_default().insert(id, sender);
        table.total += 1;
        table.check();
        Ok(Admitted {
            slot: Slot {
                table: self.table.clone(),
                uid,
                id,
            },
            evicted,
            made_room,
        })
    }

    /// Connections in the table, all uids together.
    #[cfg(test)]
    pub(super) fn total(&self) -> usize {
        self.lock().total
    }

    /// Connections `uid` holds.
    #[cfg(test)]
    pub(super) fn held(&self, uid: u32) -> usize {
        self.lock().held(uid)
    }
}

impl Table {
    fn held(&self, uid: u32) -> usize {
        self.by_uid.get(&uid).map_or(0, BTreeMap::len)
    }

    /// Closes the oldest connection of the uid that holds the most (`newcomer`'s own on a
    /// tie, so no uid loses a connection to one that would then hold more than it).
    fn evict_for(&mut self, newcomer: u32) -> Eviction {
        let (uid, held) = self
            .by_uid
            .iter()
            .map(|(&uid, entries)| (uid, entries.len()))
            .max_by_key(|&(uid, held)| (held, uid == newcomer))
            .expect("a full table holds connections");
        self.remove(uid, None);
        Eviction { uid, held }
    }

    /// Removes connection `id` of `uid` (its oldest if `None`), if still there. Dropping the
    /// entry's sender is what closes an evicted connection.
    fn remove(&mut self, uid: u32, id: Option<u64>) {
        let Some(entries) = self.by_uid.get_mut(&uid) else {
            return;
        };
        let removed = match id {
            Some(id) => entries.remove(&id).is_some(),
            None => entries.pop_first().is_some(),
        };
        if entries.is_empty() {
            self.by_uid.remove(&uid);
        }
        if removed {
            self.total -= 1;
        }
        self.check();
    }

    /// The table's invariants; the whole walk only in debug builds.
    fn check(&self) {
        assert!(
            self.total <= AGENT_CONNECTIONS_MAX,
            "{} connections",
            self.total
        );
        #[cfg(debug_assertions)]
        {
            let mut total = 0;
            for (uid, entries) in &self.by_uid {
                assert!(!entries.is_empty(), "uid {uid} kept with no connection");
                assert!(
                    entries.len() <= AGENT_CONNECTIONS_PER_UID_MAX,
                    "uid {uid} holds {}",
                    entries.len()
                );
                total += entries.len();
            }
            assert_eq!(total, self.total);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(self.uid, Some(self.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: u32 = 2001;
    const BOB: u32 = 2002;

    fn closed(admitted: &mut Admitted) -> bool {
        matches!(
            admitted.evicted.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        )
    }

    #[test]
    fn a_uid_past_its_share_is_refused_and_a_closed_connection_gives_its_place_back() {
        let connections = Connections::default();
        let mut held: Vec<Admitted> = (0..AGENT_CONNECTIONS_PER_UID_MAX)
            .map(|_| connections.admit(ALICE).unwrap())
            .collect();
        assert_eq!(
            connections.admit(ALICE).unwrap_err(),
            OverShare {
                held: AGENT_CONNECTIONS_PER_UID_MAX
            }
        );
        // Another uid is not counted against Alice's share.
        let bob = connections.admit(BOB).unwrap();
        assert!(bob.made_room.is_none());
        drop(held.pop());
        assert_eq!(connections.held(ALICE), AGENT_CONNECTIONS_PER_UID_MAX - 1);
        assert!(connections.admit(ALICE).is_ok());
        assert!(held.iter_mut().all(|admitted| !closed(admitted)));
    }

    #[test]
    fn a_full_table_makes_room_from_the_largest_holder_oldest_first() {
        let connections = Connections::default();
        // Uids 1.. fill the table at their share; then one more uid arrives, and more.
        let uids_at_share = AGENT_CONNECTIONS_MAX / AGENT_CONNECTIONS_PER_UID_MAX;
        let mut held: Vec<(u32, Admitted)> = (0..AGENT_CONNECTIONS_MAX)
            .map(|index| {
                let uid = u32::try_from(index / AGENT_CONNECTIONS_PER_UID_MAX + 1).unwrap();
                (uid, connections.admit(uid).unwrap())
            })
            .collect();
        assert_eq!(connections.total(), AGENT_CONNECTIONS_MAX);
        let newcomer = connections.admit(BOB).unwrap();
        let eviction = newcomer.made_room.unwrap();
        assert_eq!(eviction.held, AGENT_CONNECTIONS_PER_UID_MAX);
        assert!(eviction.uid >= 1 && usize::try_from(eviction.uid).unwrap() <= uids_at_share);
        assert_eq!(connections.total(), AGENT_CONNECTIONS_MAX);
        // The evicted one is the oldest connection of that uid, and only it.
        let victims: Vec<usize> = held
            .iter_mut()
            .enumerate()
            .filter_map(|(index, (_, admitted))| closed(admitted).then_some(index))
            .collect();
        let first_of_uid = held
            .iter()
            .position(|(uid, _)| *uid == eviction.uid)
            .unwrap();
        assert_eq!(victims, vec![first_of_uid]);
        // The evicted connection's task ends later; its slot is already gone from the table.
        let (_, gone) = held.remove(first_of_uid);
        drop(gone);
        assert_eq!(connections.total(), AGENT_CONNECTIONS_MAX);
        // Bob keeps coming: each of his connections evicts from whoever holds the most (his
        // own oldest once that is him), so the table ends shared evenly by the three uids.
        let mut bobs = vec![newcomer];
        for _ in 1..AGENT_CONNECTIONS_MAX {
            bobs.push(connections.admit(BOB).unwrap());
        }
        assert_eq!(connections.total(), AGENT_CONNECTIONS_MAX);
        let shares: Vec<usize> = (1..=u32::try_from(uids_at_share).unwrap())
            .chain([BOB])
            .map(|uid| connections.held(uid))
            .collect();
        let (least, most) = (*shares.iter().min().unwrap(), *shares.iter().max().unwrap());
        assert!(most - least <= 1, "{shares:?}");
        // His newest connections are the ones still open.
        let open: Vec<bool> = bobs.iter_mut().map(|bob| !closed(bob)).collect();
        let closed_count = open.len() - connections.held(BOB);
        assert!(open[..closed_count].iter().all(|&open| !open));
        assert!(open[closed_count..].iter().all(|&open| open));
    }

    #[test]
    fn on_a_tie_the_newcomer_gives_up_its_own_oldest() {
        const CAROL: u32 = 2003;
        let connections = Connections::default();
        // Alice and Bob hold the most, as many each; Carol the rest of the table.
        let most = AGENT_CONNECTIONS_MAX / 3 + 1;
        let rest = AGENT_CONNECTIONS_MAX - 2 * most;
        assert!(most <= AGENT_CONNECTIONS_PER_UID_MAX && rest < most);
        let admit = |uid, count| -> Vec<Admitted> {
            (0..count)
                .map(|_| connections.admit(uid).unwrap())
                .collect()
        };
        let (mut alices, mut bobs, mut carols) =
            (admit(ALICE, most), admit(BOB, most), admit(CAROL, rest));
        let admitted = connections.admit(BOB).unwrap();
        assert_eq!(
            admitted.made_room,
            Some(Eviction {
                uid: BOB,
                held: most
            })
        );
        assert!(closed(&mut bobs[0]));
        assert!(bobs[1..].iter_mut().all(|bob| !closed(bob)));
        assert!(alices
            .iter_mut()
            .chain(&mut carols)
            .all(|other| !closed(other)));
        assert_eq!(
            (
                connections.held(ALICE),
                connections.held(BOB),
                connections.held(CAROL)
            ),
            (most, most, rest)
        );
    }
}
