//! Replacement policies: which evictable unit a cache evicts when it needs room.
//!
//! A cache tells its policy exactly which units are evictable right now. In the iod's unified
//! cache (`tessera_iod::cache`, which re-exports these types) a unit enters the policy when it
//! becomes clean and ungranted (a grant released it, or a write-back marked it clean) and
//! leaves it when it is granted again, dirtied, invalidated or evicted; in a [`BlockCache`]
//! every cached block is evictable. Because a unit enters at the most-recent end when it was
//! last used, the order of an [`Lru`] is the order of last use, and every operation is O(1). A policy may insert at the
//! least-recent end instead ([`End::LeastRecent`]), which is what an exclusive-caching
//! (DEMOTE) policy needs for blocks it expects the client to keep.
//!
//! [`BlockCache`]: crate::BlockCache

use std::collections::HashMap;

/// A unit's slot in the cache; stable while the unit is cached.
pub type UnitId = usize;

/// Which end of the recency order an inserted unit goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Evicted last (the usual place for a unit just used).
    MostRecent,
    /// Evicted first (a unit not expected to be read again here).
    LeastRecent,
}

/// A replacement policy over the cache's evictable units.
pub trait Replacement: Send {
    /// `unit` became evictable; place it at `end`. It is not in the policy already.
    fn insert(&mut self, unit: UnitId, end: End);
    /// `unit` is in use again (or gone) and must not be chosen; no-op if absent.
    fn remove(&mut self, unit: UnitId);
    /// Choose a unit to evict and forget it; `None` when nothing is evictable.
    fn victim(&mut self) -> Option<UnitId>;
    /// How many units the policy holds (for the cache's consistency checks).
    fn len(&self) -> usize;
    /// Whether the policy holds no unit.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Copy, Debug)]
struct Links {
    more_recent: Option<UnitId>,
    less_recent: Option<UnitId>,
}

/// Least recently used: a doubly linked list threaded through a map, O(1) per operation.
#[derive(Debug, Default)]
pub struct Lru {
    links: HashMap<UnitId, Links>,
    most_recent: Option<UnitId>,
    least_recent: Option<UnitId>,
}

impl Lru {
    /// An empty policy.
    pub fn new() -> Self {
        Self::default()
    }

    fn link_mut(&mut self, unit: UnitId) -> &mut Links {
        self.links
            .get_mut(&unit)
            .expect("LRU neighbours are always linked")
    }
}

impl Replacement for Lru {
    fn insert(&mut self, unit: UnitId, end: End) {
        debug_assert!(
            !self.links.contains_key(&unit),
            "unit {unit} inserted twice"
        );
        self.remove(unit);
        match end {
            End::MostRecent => {
                let old = self.most_recent;
                self.links.insert(
                    unit,
                    Links {
                        more_recent: None,
                        less_recent: old,
                    },
                );
                match old {
                    Some(old) => self.link_mut(old).more_recent = Some(unit),
                    None => self.least_recent = Some(unit),
                }
                self.most_recent = Some(unit);
            }
            End::LeastRecent => {
                let old = self.least_recent;
                self.links.insert(
                    unit,
                    Links {
                        more_recent: old,
                        less_recent: None,
                    },
                );
                match old {
                    Some(old) => self.link_mut(old).less_recent = Some(unit),
                    None => self.most_recent = Some(unit),
                }
                self.least_recent = Some(unit);
            }
        }
    }

    fn remove(&mut self, unit: UnitId) {
        let Some(links) = self.links.remove(&unit) else {
            return;
        };
        match links.more_recent {
            Some(more) => self.link_mut(more).less_recent = links.less_recent,
            None => self.most_recent = links.less_recent,
        }
        match links.less_recent {
            Some(less) => self.link_mut(less).more_recent = links.more_recent,
            None => self.least_recent = links.more_recent,
        }
    }

    fn victim(&mut self) -> Option<UnitId> {
        let unit = self.least_recent?;
        self.remove(unit);
        Some(unit)
    }

    fn len(&self) -> usize {
        self.links.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_in_order_of_insertion_and_honours_both_ends() {
        let mut lru = Lru::new();
        for unit in 0..4 {
            lru.insert(unit, End::MostRecent);
        }
        lru.remove(1);
        lru.insert(1, End::MostRecent);
        lru.insert(9, End::LeastRecent);
        assert_eq!(lru.len(), 5);
        let order: Vec<_> = std::iter::from_fn(|| lru.victim()).collect();
        assert_eq!(order, vec![9, 0, 2, 3, 1]);
        assert!(lru.is_empty());
        lru.remove(7);
        assert_eq!(lru.victim(), None);
    }
}
