//! Objects made ahead of their creates, as Lustre's object servers precreate objects for its
//! metadata server: a create of an ordinary striped file then costs one commit, not a round
//! of `ObjectCreate` on every iod of its layout.
//!
//! The pool holds handles whose objects exist on every iod, made with the cache unit a create
//! with the defaults gives ([`crate::Namespace::precreatable`] says which creates fit). A
//! thread of the mds (`mds-precreate`) keeps it between [`PRECREATE_LOW`] and its capacity
//! (`tessera mds --precreate N`, at most [`PRECREATE_MAX`]; 0 turns it off): it reserves a
//! batch of handles, commits the next free handle past them durably, then makes their objects.
//! After a crash of the mds those handles are never handed out again: their objects are
//! orphans, removed by each iod's sweep at its next start. Every pooled handle is in the mds's
//! set of creates in flight, so a sweep never removes a pooled object.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Most handles the pool holds (`tessera mds --precreate`'s ceiling): one refill asks each
/// iod for at most this many objects in one `ObjectCreateMany`.
pub const PRECREATE_MAX: usize = 4096;
/// Handles one `ObjectCreateMany` asks each iod for: a refill goes in chunks this size, so
/// the first objects are there for creates while the rest are made.
pub const PRECREATE_CHUNK: usize = 128;
/// The pool is refilled when it holds fewer than this (or than half its capacity).
pub const PRECREATE_LOW: usize = 512;
/// How long the refill thread waits between two looks at the pool when nothing wakes it.
pub const PRECREATE_TICK: Duration = Duration::from_millis(200);
/// How long it waits after a refill failed (an iod down) before it tries again.
pub const PRECREATE_RETRY: Duration = Duration::from_secs(1);

const _: () = assert!(PRECREATE_LOW <= PRECREATE_MAX);
const _: () = assert!(PRECREATE_MAX <= tessera_proto::limits::HANDLES_LIVE_MAX);

/// Handles whose objects exist on every iod, not yet given to a file.
#[derive(Debug)]
pub struct Precreated {
    state: Mutex<VecDeque<u64>>,
    capacity: usize,
    /// Signalled when a take leaves the pool low.
    low: Condvar,
}

impl Precreated {
    /// A pool of at most `capacity` handles (clamped to [`PRECREATE_MAX`]; 0: off).
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(VecDeque::new()),
            capacity: capacity.min(PRECREATE_MAX),
            low: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, VecDeque<u64>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn threshold(&self) -> usize {
        PRECREATE_LOW.min(self.capacity / 2).max(1)
    }

    /// A handle whose objects exist, if the pool has one.
    pub fn take(&self) -> Option<u64> {
        let mut state = self.state();
        let handle = state.pop_front();
        if state.len() < self.threshold() {
            self.low.notify_all();
        }
        handle
    }

    /// Puts back a handle [`Precreated::take`] gave that no file took.
    pub fn give_back(&self, handle: u64) {
        self.state().push_front(handle);
    }

    /// Adds a handle whose objects were just made.
    pub fn add(&self, handle: u64) {
        self.state().push_back(handle);
    }

    /// Handles pooled now.
    pub fn len(&self) -> usize {
        self.state().len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.state().is_empty()
    }

    /// How many handles to make now: up to the capacity once the pool is low, else 0. Waits at
    /// most `wait` for the pool to turn low first.
    pub fn wanted(&self, wait: Duration) -> usize {
        if self.capacity == 0 {
            std::thread::sleep(wait);
            return 0;
        }
        let mut state = self.state();
        if state.len() >= self.threshold() {
            state = self
                .low
                .wait_timeout(state, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.len() < self.threshold() {
            self.capacity - state.len()
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_asks_for_handles_once_low_and_up_to_its_capacity() {
        let pool = Precreated::new(8);
        assert_eq!(pool.wanted(Duration::ZERO), 8);
        for handle in 10..18 {
            pool.add(handle);
        }
        assert_eq!(pool.wanted(Duration::ZERO), 0);
        for expected in 10..14 {
            assert_eq!(pool.take(), Some(expected));
        }
        // 4 left: low (below half of 8).
        assert_eq!(pool.len(), 4);
        assert_eq!(pool.wanted(Duration::ZERO), 0, "4 is not below 4");
        assert_eq!(pool.take(), Some(14));
        assert_eq!(pool.wanted(Duration::ZERO), 5);
        pool.give_back(14);
        assert_eq!(pool.take(), Some(14));
    }

    #[test]
    fn a_pool_of_capacity_zero_is_off() {
        let pool = Precreated::new(0);
        assert_eq!(pool.wanted(Duration::ZERO), 0);
        assert_eq!(pool.take(), None);
        assert_eq!(Precreated::new(PRECREATE_MAX * 2).capacity, PRECREATE_MAX);
        assert_eq!(Precreated::new(2048).threshold(), PRECREATE_LOW);
    }
}
