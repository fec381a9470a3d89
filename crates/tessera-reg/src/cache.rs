//! The registry's table of registrations: cache entries, the FMRD queue, arenas, and the
//! entries invalidated while held.
//!
//! Every registration the registry keeps past one acquire lives in a slot here, and each
//! segment of an acquire is looked up here first, so a hit must be cheap: slots are a vector
//! (no hashing), the LRU order of idle entries is a list threaded through the slots (O(1) to
//! join, leave and evict), an acquire marks the entries it holds instead of keeping a set, and
//! the lookup by address is one ordered-set range walk bounded by the longest cached region.
//! The table makes no registrar call: it returns what must be deregistered, and the registry
//! does that after dropping its lock.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::RegError;
use crate::policy::{CacheCapacity, FMRD_BATCH};
use crate::registrar::RegHandle;
use crate::segment::Segment;
use crate::stats::{bump, Counters};

/// A slot index.
pub(crate) type Slot = u32;

const NIL: Slot = Slot::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// In the cache (idle when `holders == 0`, then also in the LRU list).
    Cached,
    /// Evicted, waiting in the FMRD queue; still found by lookups (and revived).
    Queued,
    /// An arena.
    Arena,
    /// Invalidated while held: in no index, deregistered on its last release.
    Doomed,
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub handle: RegHandle,
    pub holders: u32,
    pub place: Place,
    /// Creation order: breaks ties between regions at one address, and names arenas.
    pub sequence: u64,
    /// The acquire that last took a hold (so one acquire holds an entry once).
    pub mark: u64,
    lru_prev: Slot,
    lru_next: Slot,
}

/// Deregistrations decided under the lock, done after it.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    /// Each deregistered on its own (pin-down evictions, dynamic releases, invalidation).
    pub now: Vec<RegHandle>,
    /// FMRD batches for the deregistration thread.
    pub batches: Vec<Vec<RegHandle>>,
}

/// What is cached, and how to evict: the policy's part the table needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub capacity: CacheCapacity,
    /// Evictions go to the FMRD queue (else they are deregistered at once).
    pub fmrd: bool,
}

#[derive(Debug)]
pub(crate) struct Table {
    slots: Vec<Option<Entry>>,
    free: Vec<Slot>,
    /// Cached and queued entries by (region address, sequence).
    index: BTreeSet<(usize, u64, Slot)>,
    /// Region length → indexed entries of that length; the largest bounds lookups.
    lengths: BTreeMap<usize, usize>,
    lru_head: Slot,
    lru_tail: Slot,
    lru_len: usize,
    /// Bytes of the entries in the LRU list.
    idle_bytes: usize,
    next_sequence: u64,
    marks: u64,
    /// Cached entries (idle or held) and their bytes.
    pub cached_entries: usize,
    pub cached_bytes: usize,
    /// The FMRD queue, oldest first.
    pub queue: Vec<Slot>,
    pub arenas: Vec<Slot>,
    /// Bumped by every invalidation.
    pub generation: u64,
    /// How far into the unmap monitor's log this table has applied.
    pub monitor_cursor: u64,
}

impl Default for Table {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: BTreeSet::new(),
            lengths: BTreeMap::new(),
            lru_head: NIL,
            lru_tail: NIL,
            lru_len: 0,
            idle_bytes: 0,
            next_sequence: 0,
            marks: 0,
            cached_entries: 0,
            cached_bytes: 0,
            queue: Vec::new(),
            arenas: Vec::new(),
            generation: 0,
            monitor_cursor: 0,
        }
    }
}

impl Table {
    pub fn entry(&self, slot: Slot) -> &Entry {
        self.slots[slot as usize].as_ref().expect("a live slot")
    }

    fn entry_mut(&mut self, slot: Slot) -> &mut Entry {
        self.slots[slot as usize].as_mut().expect("a live slot")
    }

    fn allocate(&mut self, handle: RegHandle, holders: u32, place: Place) -> Slot {
        let entry = Entry {
            handle,
            holders,
            place,
            sequence: self.next_sequence,
            mark: 0,
            lru_prev: NIL,
            lru_next: NIL,
        };
        self.next_sequence += 1;
        if let Some(slot) = self.free.pop() {
            self.slots[slot as usize] = Some(entry);
            return slot;
        }
        self.slots.push(Some(entry));
        Slot::try_from(self.slots.len() - 1).expect("fewer slots than u32::MAX")
    }

    fn release_slot(&mut self, slot: Slot) -> RegHandle {
        let entry = self.slots[slot as usize].take().expect("a live slot");
        self.free.push(slot);
        entry.handle
    }

    /// A fresh mark for one acquire.
    pub fn new_mark(&mut self) -> u64 {
        self.marks += 1;
        self.marks
    }

    fn index_insert(&mut self, slot: Slot) {
        let (region, sequence) = {
            let entry = self.entry(slot);
            (entry.handle.segment, entry.sequence)
        };
        self.index.insert((region.address, sequence, slot));
        *self.lengths.entry(region.length).or_insert(0) += 1;
    }

    fn index_remove(&mut self, slot: Slot) {
        let (region, sequence) = {
            let entry = self.entry(slot);
            (entry.handle.segment, entry.sequence)
        };
        if self.index.remove(&(region.address, sequence, slot)) {
            if let Some(count) = self.lengths.get_mut(&region.length) {
                *count -= 1;
                if *count == 0 {
                    self.lengths.remove(&region.length);
                }
            }
        }
    }

    fn lru_push_back(&mut self, slot: Slot) {
        let tail = self.lru_tail;
        let length = {
            let entry = self.entry_mut(slot);
            entry.lru_prev = tail;
            entry.lru_next = NIL;
            entry.handle.segment.length
        };
        if tail == NIL {
            self.lru_head = slot;
        } else {
            self.entry_mut(tail).lru_next = slot;
        }
        self.lru_tail = slot;
        self.lru_len += 1;
        self.idle_bytes += length;
    }

    fn lru_unlink(&mut self, slot: Slot) {
        let (prev, next, length) = {
            let entry = self.entry_mut(slot);
            let links = (entry.lru_prev, entry.lru_next);
            entry.lru_prev = NIL;
            entry.lru_next = NIL;
            (links.0, links.1, entry.handle.segment.length)
        };
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.entry_mut(prev).lru_next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.entry_mut(next).lru_prev = prev;
        }
        self.lru_len -= 1;
        self.idle_bytes -= length;
    }

    /// Idle cached entries, least recently released first.
    pub fn idle(&self) -> Vec<Slot> {
        let mut slots = Vec::with_capacity(self.lru_len);
        let mut slot = self.lru_head;
        while slot != NIL {
            slots.push(slot);
            slot = self.entry(slot).lru_next;
        }
        slots
    }

    /// Cached entries held by some acquire.
    pub fn held_entries(&self) -> usize {
        self.cached_entries - self.lru_len
    }

    pub fn find_arena(&self, segment: Segment) -> Option<Slot> {
        self.arenas
            .iter()
            .copied()
            .find(|&slot| self.entry(slot).handle.segment.covers(&segment))
    }

    pub fn arena_by_id(&self, id: u64) -> Option<Slot> {
        self.arenas
            .iter()
            .copied()
            .find(|&slot| self.entry(slot).sequence == id)
    }

    /// The cached or queued entry serving `segment`: of those covering it, the one with the
    /// highest (address, sequence).
    pub fn find_cached(&self, segment: Segment) -> Option<Slot> {
        let longest = self.lengths.keys().next_back().copied().unwrap_or(0);
        let low = segment.address.saturating_sub(longest);
        self.index
            .range((low, 0, 0)..=(segment.address, u64::MAX, Slot::MAX))
            .rev()
            .map(|&(_, _, slot)| slot)
            .find(|&slot| self.entry(slot).handle.segment.covers(&segment))
    }

    /// Every cached, queued or arena entry overlapping `segment`.
    pub fn overlapping(&self, segment: Segment) -> Vec<Slot> {
        let longest = self.lengths.keys().next_back().copied().unwrap_or(0);
        let low = segment.address.saturating_sub(longest);
        let high = segment.end().saturating_sub(1);
        let mut slots: Vec<Slot> = self
            .index
            .range((low, 0, 0)..=(high, u64::MAX, Slot::MAX))
            .map(|&(_, _, slot)| slot)
            .filter(|&slot| self.entry(slot).handle.segment.overlaps(&segment))
            .collect();
        slots.extend(
            self.arenas
                .iter()
                .copied()
                .filter(|&slot| self.entry(slot).handle.segment.overlaps(&segment)),
        );
        slots
    }

    /// Takes one hold on `slot` for the acquire marked `mark`, unless it holds it already;
    /// returns whether a hold was taken. An idle cached entry leaves the LRU list.
    pub fn hold(&mut self, slot: Slot, mark: u64) -> bool {
        let (place, holders, previous) = {
            let entry = self.entry(slot);
            (entry.place, entry.holders, entry.mark)
        };
        if previous == mark {
            return false;
        }
        if place == Place::Cached && holders == 0 {
            self.lru_unlink(slot);
        }
        let entry = self.entry_mut(slot);
        entry.mark = mark;
        entry.holders += 1;
        true
    }

    /// Gives back one hold; returns the handle to deregister when the entry was doomed and
    /// this was its last holder.
    pub fn release(&mut self, slot: Slot) -> Option<RegHandle> {
        let entry = self.entry_mut(slot);
        entry.holders -= 1;
        if entry.holders > 0 {
            return None;
        }
        match entry.place {
            Place::Cached => {
                self.lru_push_back(slot);
                None
            }
            Place::Doomed => Some(self.release_slot(slot)),
            Place::Arena | Place::Queued => None,
        }
    }

    /// Moves a queued entry back into the cache, making room for it; on error it stays
    /// queued (at the end of the queue).
    pub fn revive(
        &mut self,
        slot: Slot,
        rules: &Rules,
        counters: &Counters,
        deferred: &mut Deferred,
    ) -> Result<(), RegError> {
        self.queue.retain(|&queued| queued != slot);
        let length = self.entry(slot).handle.segment.length;
        if let Err(err) = self.make_room(rules, 1, length, counters, deferred) {
            self.queue.push(slot);
            return Err(err);
        }
        self.entry_mut(slot).place = Place::Cached;
        self.cached_entries += 1;
        self.cached_bytes += length;
        // Idle until the caller holds it.
        self.lru_push_back(slot);
        Ok(())
    }

    /// Evicts idle entries, least recently released first, until `entries` more entries of
    /// `bytes` more bytes fit; refuses before evicting anything when the held ones alone
    /// leave no room.
    pub fn make_room(
        &mut self,
        rules: &Rules,
        entries: usize,
        bytes: usize,
        counters: &Counters,
        deferred: &mut Deferred,
    ) -> Result<(), RegError> {
        let capacity = rules.capacity;
        let held_entries = self.held_entries() + entries;
        let held_bytes = (self.cached_bytes - self.idle_bytes).saturating_add(bytes);
        if held_entries > capacity.entries_max {
            return Err(RegError::CacheFull {
                limit: "CacheCapacity::entries_max",
                unit: "entries",
                max: capacity.entries_max,
                needed: held_entries,
            });
        }
        if held_bytes > capacity.bytes_max {
            return Err(RegError::CacheFull {
                limit: "CacheCapacity::bytes_max",
                unit: "bytes",
                max: capacity.bytes_max,
                needed: held_bytes,
            });
        }
        while self.cached_entries + entries > capacity.entries_max
            || self.cached_bytes.saturating_add(bytes) > capacity.bytes_max
        {
            let victim = self.lru_head;
            assert_ne!(victim, NIL, "the held part fits, so an idle entry is left");
            self.lru_unlink(victim);
            bump(&counters.evictions, 1);
            let length = self.entry(victim).handle.segment.length;
            self.cached_entries -= 1;
            self.cached_bytes -= length;
            if rules.fmrd {
                self.entry_mut(victim).place = Place::Queued;
                self.queue.push(victim);
                if self.queue.len() >= FMRD_BATCH {
                    deferred.batches.push(self.take_queue());
                }
            } else {
                self.index_remove(victim);
                deferred.now.push(self.release_slot(victim));
            }
        }
        Ok(())
    }

    /// Empties the FMRD queue, returning the handles to deregister.
    pub fn take_queue(&mut self) -> Vec<RegHandle> {
        let queue = std::mem::take(&mut self.queue);
        queue
            .into_iter()
            .map(|slot| {
                self.index_remove(slot);
                self.release_slot(slot)
            })
            .collect()
    }

    /// Adds a new registration as a cached entry held by the acquire marked `mark`.
    pub fn insert_cached(&mut self, handle: RegHandle, mark: u64) -> Slot {
        self.cached_entries += 1;
        self.cached_bytes += handle.segment.length;
        let slot = self.allocate(handle, 1, Place::Cached);
        self.entry_mut(slot).mark = mark;
        self.index_insert(slot);
        slot
    }

    /// Adds an arena; returns its slot.
    pub fn insert_arena(&mut self, handle: RegHandle) -> Slot {
        let slot = self.allocate(handle, 0, Place::Arena);
        self.arenas.push(slot);
        slot
    }

    /// Removes `slot` from every index; returns its handle if nobody holds it (to deregister
    /// now), else dooms it to be deregistered on its last release.
    pub fn unlink(&mut self, slot: Slot) -> Option<RegHandle> {
        let (place, holders, length) = {
            let entry = self.entry(slot);
            (entry.place, entry.holders, entry.handle.segment.length)
        };
        match place {
            Place::Cached => {
                self.index_remove(slot);
                self.cached_entries -= 1;
                self.cached_bytes -= length;
                if holders == 0 {
                    self.lru_unlink(slot);
                }
            }
            Place::Queued => {
                self.index_remove(slot);
                self.queue.retain(|&queued| queued != slot);
            }
            Place::Arena => self.arenas.retain(|&arena| arena != slot),
            Place::Doomed => return None,
        }
        if holders == 0 {
            Some(self.release_slot(slot))
        } else {
            self.entry_mut(slot).place = Place::Doomed;
            None
        }
    }

    /// Every registration in the table (for the registry's drop, when nothing is held).
    pub fn drain(&mut self) -> Vec<RegHandle> {
        let handles = self
            .slots
            .drain(..)
            .flatten()
            .map(|entry| entry.handle)
            .collect();
        *self = Self::default();
        handles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(address: usize, length: usize) -> RegHandle {
        RegHandle {
            segment: Segment::new(address, length),
            key: address as u64,
            descriptor: None,
            token: 0,
        }
    }

    #[test]
    fn lru_list_evicts_least_recently_released_and_reuses_slots() {
        let counters = Counters::default();
        let rules = Rules {
            capacity: CacheCapacity {
                entries_max: 2,
                bytes_max: usize::MAX,
            },
            fmrd: false,
        };
        let mut table = Table::default();
        let mark = table.new_mark();
        let a = table.insert_cached(handle(0, 10), mark);
        let b = table.insert_cached(handle(100, 10), mark);
        assert!(!table.hold(a, mark), "one hold per acquire");
        assert_eq!(table.release(b), None);
        assert_eq!(table.release(a), None);
        assert_eq!(table.idle(), vec![b, a]);
        let mut deferred = Deferred::default();
        table
            .make_room(&rules, 1, 10, &counters, &mut deferred)
            .unwrap();
        assert_eq!(deferred.now, vec![handle(100, 10)]);
        assert_eq!(table.idle(), vec![a]);
        let c = table.insert_cached(handle(200, 10), table.marks + 1);
        assert_eq!(c, b, "the freed slot is reused");
        assert_eq!(table.find_cached(Segment::new(202, 3)), Some(c));
        assert_eq!(table.find_cached(Segment::new(105, 3)), None);
        assert_eq!((table.cached_entries, table.cached_bytes), (2, 20));
        assert_eq!(table.held_entries(), 1);
    }
}
