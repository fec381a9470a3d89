//! The server cache and its placement policy: where a block goes in the recency order when
//! the server sends it to a client, and when a client demotes it.
//!
//! [`Placement::Inclusive`] is plain LRU: a block just read is most recent, so the server
//! keeps the same blocks as its clients. [`Placement::Demote`] is the exclusive policy of
//! Wong and Wilkes (seed 001 §6.2, Figure 6.1): a block sent to a client goes to the
//! least-recent end (the client has it now), a demoted block to the most-recent end. A demote
//! comes as metadata first ([`ServerCache::offer`]): the server refuses blocks it already
//! caches (moving them where a demote would), and takes the data only of the others.

use std::hash::Hash;

use crate::cache::{BlockCache, CacheError};
use crate::replacement::End;

/// How the server cache places the blocks it sends and the blocks it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// LRU, no demotes: both levels end up holding the same blocks.
    Inclusive,
    /// Exclusive caching by DEMOTE: sent blocks least recent, demoted blocks most recent.
    Demote,
}

impl Placement {
    /// Where a block goes after the server sent it to a client (hit or disk read).
    pub fn end_after_send(self) -> End {
        match self {
            Placement::Inclusive => End::MostRecent,
            Placement::Demote => End::LeastRecent,
        }
    }

    /// Where a demoted (or written) block goes.
    pub fn end_after_demote(self) -> End {
        End::MostRecent
    }
}

/// What a read found at the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRead {
    /// The block was cached.
    Hit,
    /// The block came from the disk (and is now cached, placed as a sent block).
    Miss,
}

/// The server's block cache under a [`Placement`].
#[derive(Debug)]
pub struct ServerCache<K> {
    cache: BlockCache<K>,
    placement: Placement,
}

impl<K: Copy + Eq + Hash> ServerCache<K> {
    /// An empty server cache of `capacity` blocks.
    pub fn new(capacity: usize, placement: Placement) -> Result<Self, CacheError> {
        Ok(Self {
            cache: BlockCache::lru(capacity)?,
            placement,
        })
    }

    /// The placement policy.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// How many blocks it holds.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether it holds no block.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Whether `key` is cached.
    pub fn contains(&self, key: &K) -> bool {
        self.cache.contains(key)
    }

    /// A client reads `key`: served from the cache or the disk, then placed as sent.
    pub fn read(&mut self, key: K) -> ServerRead {
        let end = self.placement.end_after_send();
        if self.cache.place(&key, end) {
            ServerRead::Hit
        } else {
            self.cache.insert(key, end);
            ServerRead::Miss
        }
    }

    /// The metadata of a batch of demoted blocks: for each, whether the server wants its data.
    /// A block already cached is refused and moved where a demote would put it.
    pub fn offer(&mut self, keys: &[K]) -> Vec<bool> {
        let end = self.placement.end_after_demote();
        keys.iter().map(|key| !self.cache.place(key, end)).collect()
    }

    /// The data of a demoted block the server wanted arrives.
    pub fn accept(&mut self, key: K) {
        self.cache.insert(key, self.placement.end_after_demote());
    }

    /// An eager DEMOTE of one block: its metadata, then its data if wanted. Returns whether
    /// the data was sent.
    pub fn demote(&mut self, key: K) -> bool {
        let wanted = self.offer(&[key])[0];
        if wanted {
            self.accept(key);
        }
        wanted
    }

    /// A client writes `key` through: the server caches the new data as most recent.
    pub fn write(&mut self, key: K) {
        self.cache.insert(key, End::MostRecent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusive_keeps_what_it_sent_and_demote_drops_it_first() {
        let mut inclusive = ServerCache::new(2, Placement::Inclusive).unwrap();
        let mut demote = ServerCache::new(2, Placement::Demote).unwrap();
        for server in [&mut inclusive, &mut demote] {
            assert_eq!(server.read(1_u64), ServerRead::Miss);
            assert_eq!(server.read(2), ServerRead::Miss);
            assert_eq!(server.read(1), ServerRead::Hit);
            assert_eq!(server.read(3), ServerRead::Miss);
        }
        // Inclusive: LRU evicted 2. Demote: 1 was sent last, least recent, evicted first.
        assert!(inclusive.contains(&1) && !inclusive.contains(&2));
        assert!(!demote.contains(&1) && demote.contains(&2));
    }

    #[test]
    fn demoted_blocks_are_refused_when_cached_and_kept_most_recent() {
        let mut server = ServerCache::new(2, Placement::Demote).unwrap();
        assert_eq!(server.read(1_u64), ServerRead::Miss);
        assert_eq!(server.offer(&[1, 2]), vec![false, true]);
        server.accept(2);
        // 1 was refused but moved to most recent, then 2 came after it: 4 evicts 1.
        assert!(server.demote(4));
        assert!(!server.contains(&1) && server.contains(&2) && server.contains(&4));
        assert!(!server.demote(4));
        assert_eq!(server.len(), 2);
    }
}
