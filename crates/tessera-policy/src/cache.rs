//! A bounded cache of block keys over a [`Replacement`] policy: which blocks are cached and in
//! which order they leave, not their bytes.
//!
//! Keys map to stable slots ([`UnitId`]) that the policy orders, so the same [`Lru`] that
//! orders the iod's cache units orders the blocks of a client cache or of the simulated server
//! cache. Every cached block is evictable (clean blocks only: writes go through), so the
//! policy always holds exactly the cached blocks.

use std::collections::HashMap;
use std::hash::Hash;

use crate::replacement::{End, Lru, Replacement, UnitId};

/// The most blocks one cache may hold (2^24: 64 GiB of 4 KiB blocks).
pub const CACHE_BLOCKS_MAX: usize = 1 << 24;

/// A cache size outside `1..=CACHE_BLOCKS_MAX`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cache of {blocks} blocks: must be 1..={CACHE_BLOCKS_MAX}")]
pub struct CacheError {
    /// The size asked for.
    pub blocks: usize,
}

/// A client's cache of clean blocks: LRU; a read or a write (through) places a block most
/// recent, and the block it evicts is the one to demote.
pub type ClientCache<K> = BlockCache<K, Lru>;

/// A bounded set of cached block keys, evicted in the order of its replacement policy.
#[derive(Debug)]
pub struct BlockCache<K, R = Lru> {
    capacity: usize,
    slots: Vec<Option<K>>,
    free: Vec<UnitId>,
    index: HashMap<K, UnitId>,
    policy: R,
}

impl<K: Copy + Eq + Hash> BlockCache<K, Lru> {
    /// An empty LRU cache of `capacity` blocks.
    pub fn lru(capacity: usize) -> Result<Self, CacheError> {
        Self::new(capacity, Lru::new())
    }
}

impl<K: Copy + Eq + Hash, R: Replacement> BlockCache<K, R> {
    /// An empty cache of `capacity` blocks ordered by `policy`, which must start empty.
    pub fn new(capacity: usize, policy: R) -> Result<Self, CacheError> {
        if capacity == 0 || capacity > CACHE_BLOCKS_MAX {
            return Err(CacheError { blocks: capacity });
        }
        debug_assert!(policy.is_empty(), "a new cache's policy starts empty");
        Ok(Self {
            capacity,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            policy,
        })
    }

    /// How many blocks the cache may hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many blocks it holds.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether it holds no block.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `key` is cached (its place in the order does not change).
    pub fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// If `key` is cached, moves it to `end` and returns true.
    pub fn place(&mut self, key: &K, end: End) -> bool {
        let Some(&slot) = self.index.get(key) else {
            return false;
        };
        self.policy.remove(slot);
        self.policy.insert(slot, end);
        true
    }

    /// Caches `key` at `end` (or moves it there if cached); returns the block evicted to make
    /// room, if any.
    pub fn insert(&mut self, key: K, end: End) -> Option<K> {
        if self.place(&key, end) {
            return None;
        }
        let evicted = if self.index.len() == self.capacity {
            self.evict()
        } else {
            None
        };
        let slot = if let Some(slot) = self.free.pop() {
            self.slots[slot] = Some(key);
            slot
        } else {
            self.slots.push(Some(key));
            self.slots.len() - 1
        };
        self.index.insert(key, slot);
        self.policy.insert(slot, end);
        evicted
    }

    /// Drops `key` if cached; returns whether it was.
    pub fn remove(&mut self, key: &K) -> bool {
        let Some(slot) = self.index.remove(key) else {
            return false;
        };
        self.policy.remove(slot);
        self.slots[slot] = None;
        self.free.push(slot);
        true
    }

    /// Evicts the policy's victim and returns its key; `None` when empty.
    pub fn evict(&mut self) -> Option<K> {
        let slot = self.policy.victim()?;
        let key = self.slots[slot]
            .take()
            .expect("the policy holds only filled slots");
        self.index.remove(&key);
        self.free.push(slot);
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_out_of_range_are_refused() {
        assert_eq!(
            BlockCache::<u64>::lru(0).unwrap_err(),
            CacheError { blocks: 0 }
        );
        assert!(BlockCache::<u64>::lru(CACHE_BLOCKS_MAX + 1).is_err());
    }

    #[test]
    fn evicts_least_recent_and_honours_least_recent_inserts() {
        let mut cache = BlockCache::lru(3).unwrap();
        assert_eq!(cache.insert(1_u64, End::MostRecent), None);
        assert_eq!(cache.insert(2, End::MostRecent), None);
        assert_eq!(cache.insert(3, End::LeastRecent), None);
        assert!(cache.place(&1, End::MostRecent));
        assert_eq!(cache.insert(4, End::MostRecent), Some(3));
        assert_eq!(cache.insert(5, End::MostRecent), Some(2));
        assert!(cache.remove(&1));
        assert!(!cache.remove(&1));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.evict(), Some(4));
        assert_eq!(cache.evict(), Some(5));
        assert_eq!(cache.evict(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, bool),
        Place(u8, bool),
        Remove(u8),
        Evict,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0_u8..12, any::<bool>()).prop_map(|(k, e)| Op::Insert(k, e)),
            (0_u8..12, any::<bool>()).prop_map(|(k, e)| Op::Place(k, e)),
            (0_u8..12).prop_map(Op::Remove),
            Just(Op::Evict),
        ]
    }

    fn end(most_recent: bool) -> End {
        if most_recent {
            End::MostRecent
        } else {
            End::LeastRecent
        }
    }

    proptest! {
        /// The cache against a deque model: front = least recent.
        #[test]
        fn cache_matches_a_deque_model(capacity in 1_usize..6, ops in proptest::collection::vec(op(), 0..200)) {
            let mut cache = BlockCache::lru(capacity).unwrap();
            let mut model: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
            let model_place = |model: &mut std::collections::VecDeque<u8>, k: u8, most: bool| {
                if most { model.push_back(k) } else { model.push_front(k) }
            };
            for op in ops {
                match op {
                    Op::Insert(k, most) => {
                        let expect = if let Some(at) = model.iter().position(|&m| m == k) {
                            model.remove(at);
                            None
                        } else if model.len() == capacity {
                            model.pop_front()
                        } else {
                            None
                        };
                        model_place(&mut model, k, most);
                        prop_assert_eq!(cache.insert(k, end(most)), expect);
                    }
                    Op::Place(k, most) => {
                        let present = model.iter().position(|&m| m == k);
                        if let Some(at) = present {
                            model.remove(at);
                            model_place(&mut model, k, most);
                        }
                        prop_assert_eq!(cache.place(&k, end(most)), present.is_some());
                    }
                    Op::Remove(k) => {
                        let present = model.iter().position(|&m| m == k);
                        if let Some(at) = present {
                            model.remove(at);
                        }
                        prop_assert_eq!(cache.remove(&k), present.is_some());
                    }
                    Op::Evict => prop_assert_eq!(cache.evict(), model.pop_front()),
                }
                prop_assert_eq!(cache.len(), model.len());
                prop_assert!(cache.len() <= capacity);
            }
        }
    }
}
