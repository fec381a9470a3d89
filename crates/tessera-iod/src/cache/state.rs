//! The cache's state under its one lock: the units by key, their replacement order, the spare
//! buffers, and the units each grant holds ([`Held`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use super::buffer::UnitBuffer;
use super::ready::ReadyArena;
use super::{
    CacheError, Demoted, End, Mode, Replacement, UnitId, UnitKey, OBJECTS_MAX, SPARE_UNITS_MAX,
};

pub(super) struct Unit {
    pub(super) key: UnitKey,
    pub(super) buffer: Arc<UnitBuffer>,
    pub(super) readers: u32,
    pub(super) writer: bool,
    pub(super) filled: bool,
    /// The bytes written and not yet marked clean, as one span within the unit.
    pub(super) dirty: Option<Range<usize>>,
}

impl Unit {
    pub(super) fn granted(&self) -> bool {
        self.writer || self.readers > 0
    }

    pub(super) fn evictable(&self) -> bool {
        !self.granted() && self.filled && self.dirty.is_none()
    }
}

pub(super) struct State {
    pub(super) units: Vec<Option<Unit>>,
    pub(super) free_ids: Vec<UnitId>,
    pub(super) index: BTreeMap<UnitKey, UnitId>,
    pub(super) unit_bytes: HashMap<u64, usize>,
    pub(super) dirty: BTreeSet<UnitKey>,
    pub(super) used_bytes: usize,
    pub(super) dirty_bytes: usize,
    pub(super) policy: Box<dyn Replacement>,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) evictions: u64,
    pub(super) grant_waits: u64,
    pub(super) ready_units_made: u64,
    pub(super) raw_units_made: u64,
    pub(super) units_landed: u64,
    pub(super) units_demoted: u64,
    /// Heap buffers of evicted units, for landings to receive into (at most
    /// [`SPARE_UNITS_MAX`]): no allocation, zeroing or page faults per landed unit.
    pub(super) spare: Vec<UnitBuffer>,
}

impl State {
    /// Takes the cached unit `id` for a grant of `mode` when nothing holding it conflicts: a
    /// read shares a filled unit no writer holds; a write holds a unit nobody holds. `None`:
    /// the grant must wait. Gives the unit's id, buffer, whether it is filled, and whether
    /// it is held alone.
    pub(super) fn take_cached(
        &mut self,
        id: UnitId,
        mode: Mode,
        landing_donor: bool,
    ) -> Option<(UnitId, Arc<UnitBuffer>, bool, bool)> {
        let unit = self.unit(id);
        let compatible = match mode {
            Mode::Read | Mode::ReadCached => !unit.writer && unit.filled,
            Mode::Write => !unit.granted(),
        };
        if !compatible {
            return None;
        }
        if unit.evictable() {
            self.policy.remove(id);
        }
        let unit = self.unit_mut(id);
        match mode {
            Mode::Read | Mode::ReadCached => unit.readers += 1,
            Mode::Write => {
                unit.writer = true;
                // A reply still being sent from the unit's bytes (`Pinned`) keeps them: the
                // write goes to a copy (or to the landed buffer that will replace them).
                if !landing_donor && Arc::strong_count(&unit.buffer) > 1 {
                    unit.buffer = Arc::new(unit.buffer.duplicate());
                }
            }
        }
        let (buffer, filled) = (Arc::clone(&unit.buffer), unit.filled);
        if mode != Mode::ReadCached {
            self.hits += 1;
        }
        Some((id, buffer, filled, mode == Mode::Write))
    }

    /// Keeps the buffer of a unit that left the cache for a later landing, if nothing else
    /// holds it, it is heap memory, and fewer than [`SPARE_UNITS_MAX`] are kept.
    pub(super) fn keep_spare(&mut self, buffer: Arc<UnitBuffer>) {
        if self.spare.len() >= SPARE_UNITS_MAX {
            return;
        }
        if let Ok(buffer) = Arc::try_unwrap(buffer) {
            if !buffer.is_ready() {
                self.spare.push(buffer);
            }
        }
    }

    /// A kept buffer of `len` bytes (holding an old unit's bytes: for a landing only).
    pub(super) fn take_spare(&mut self, len: usize) -> Option<UnitBuffer> {
        let at = self.spare.iter().position(|buffer| buffer.len() == len)?;
        Some(self.spare.swap_remove(at))
    }

    pub(super) fn unit(&self, id: UnitId) -> &Unit {
        self.units[id].as_ref().expect("indexed units exist")
    }

    pub(super) fn unit_mut(&mut self, id: UnitId) -> &mut Unit {
        self.units[id].as_mut().expect("indexed units exist")
    }

    /// The object's unit size, fixing it to `default` at first use.
    pub(super) fn unit_bytes_of(
        &mut self,
        handle: u64,
        default: usize,
    ) -> Result<usize, CacheError> {
        if let Some(&unit_bytes) = self.unit_bytes.get(&handle) {
            return Ok(unit_bytes);
        }
        if self.unit_bytes.len() >= OBJECTS_MAX {
            return Err(CacheError::TooManyObjects { handle });
        }
        self.unit_bytes.insert(handle, default);
        Ok(default)
    }

    /// Moves unit `id` to `end` of the recency order if it is evictable now (a granted unit
    /// is placed when released).
    pub(super) fn place_evictable(&mut self, id: UnitId, end: End) {
        if self.unit(id).evictable() {
            self.policy.remove(id);
            self.policy.insert(id, end);
        }
    }

    /// Evict clean ungranted units until `bytes` more fit in `budget_bytes`.
    pub(super) fn make_room(&mut self, bytes: usize, budget_bytes: usize) -> bool {
        while self.used_bytes + bytes > budget_bytes {
            let Some(id) = self.policy.victim() else {
                return false;
            };
            let unit = self.units[id]
                .take()
                .expect("the policy holds cached units");
            debug_assert!(unit.evictable());
            self.index.remove(&unit.key);
            self.used_bytes -= unit.buffer.len();
            self.free_ids.push(id);
            self.evictions += 1;
            self.keep_spare(unit.buffer);
        }
        true
    }

    /// A demoted unit `key` put in clean at `end`, made by `make` (which fills it, held as
    /// its writer) unless it is cached already or no clean unit can be evicted for room
    /// (`(unit_bytes, budget_bytes)`).
    pub(super) fn insert_demoted(
        &mut self,
        key: UnitKey,
        (unit_bytes, budget_bytes): (usize, usize),
        end: End,
        make: impl FnOnce(&mut Self) -> UnitId,
    ) -> Demoted {
        if let Some(&id) = self.index.get(&key) {
            // The client dropped its copy: this one goes where a demote puts it.
            self.place_evictable(id, end);
            return Demoted::Cached;
        }
        if !self.make_room(unit_bytes, budget_bytes) {
            return Demoted::NoRoom;
        }
        let id = make(self);
        let unit = self.unit_mut(id);
        unit.writer = false;
        unit.filled = true;
        self.policy.insert(id, end);
        self.units_demoted += 1;
        Demoted::Inserted
    }

    /// Make the unit `key`, held by the caller alone and unfilled, with the buffer `donor`
    /// (a landed write's) or a new one: a Ready slot while one is free, else the heap.
    /// `zeroed`: a new buffer must not show old bytes of a Ready slot (false only where the
    /// holder writes every byte before the unit counts as filled).
    pub(super) fn insert_unit(
        &mut self,
        key: UnitKey,
        unit_bytes: usize,
        ready: Option<&Arc<ReadyArena>>,
        donor: Option<&Arc<UnitBuffer>>,
        zeroed: bool,
    ) -> (UnitId, Arc<UnitBuffer>) {
        let buffer = if let Some(donor) = donor {
            Arc::clone(donor)
        } else if let Some(buffer) =
            ready.and_then(|arena| UnitBuffer::from_ready(arena, unit_bytes, zeroed))
        {
            self.ready_units_made += 1;
            Arc::new(buffer)
        } else {
            self.raw_units_made += 1;
            Arc::new(UnitBuffer::new_zeroed(unit_bytes))
        };
        let unit = Unit {
            key,
            buffer: Arc::clone(&buffer),
            readers: 0,
            writer: true,
            filled: false,
            dirty: None,
        };
        let id = if let Some(id) = self.free_ids.pop() {
            self.units[id] = Some(unit);
            id
        } else {
            self.units.push(Some(unit));
            self.units.len() - 1
        };
        self.index.insert(key, id);
        self.used_bytes += unit_bytes;
        (id, buffer)
    }

    /// Drop a cached unit that no grant holds (invalidation, or an unfilled release).
    pub(super) fn drop_unit(&mut self, id: UnitId) {
        let unit = self.units[id].take().expect("dropped units exist");
        debug_assert!(!unit.granted());
        self.policy.remove(id);
        self.index.remove(&unit.key);
        if let Some(dirty) = unit.dirty {
            self.dirty_bytes -= dirty.len();
            self.dirty.remove(&unit.key);
        }
        self.used_bytes -= unit.buffer.len();
        self.free_ids.push(id);
        self.keep_spare(unit.buffer);
    }

    /// Give back one held unit, applying what the holder did to it.
    pub(super) fn release(&mut self, held: &Held) {
        let unit = self.unit_mut(held.id);
        if held.exclusive {
            unit.writer = false;
            unit.filled |= held.filled;
        } else {
            unit.readers -= 1;
        }
        let mut dirtied = 0;
        if let Some(written) = &held.written {
            let old = unit.dirty.clone();
            let merged = match &old {
                Some(old) => old.start.min(written.start)..old.end.max(written.end),
                None => written.clone(),
            };
            dirtied = merged.len() - old.map_or(0, |old| old.len());
            unit.dirty = Some(merged);
        }
        let (key, granted, filled, evictable) =
            (unit.key, unit.granted(), unit.filled, unit.evictable());
        if held.written.is_some() {
            self.dirty_bytes += dirtied;
            self.dirty.insert(key);
        }
        if !granted && !filled {
            self.drop_unit(held.id);
        } else if evictable {
            self.policy.insert(held.id, End::MostRecent);
        }
    }

    #[cfg(test)]
    pub(super) fn check_consistency(&self, budget_bytes: usize) {
        let cached: Vec<&Unit> = self.units.iter().flatten().collect();
        assert_eq!(cached.len(), self.index.len());
        assert_eq!(
            cached.iter().map(|u| u.buffer.len()).sum::<usize>(),
            self.used_bytes
        );
        assert!(self.used_bytes <= budget_bytes);
        let dirty: usize = cached
            .iter()
            .filter_map(|u| u.dirty.as_ref())
            .map(Range::len)
            .sum();
        assert_eq!(dirty, self.dirty_bytes);
        assert_eq!(
            cached.iter().filter(|u| u.dirty.is_some()).count(),
            self.dirty.len()
        );
        assert_eq!(
            cached.iter().filter(|u| u.evictable()).count(),
            self.policy.len()
        );
        for (id, unit) in self.units.iter().enumerate() {
            let Some(unit) = unit else { continue };
            assert!(
                unit.filled || unit.granted(),
                "an unfilled unit stays only while granted"
            );
            assert_eq!(self.index[&unit.key], id);
        }
    }
}

/// One unit held by a grant.
pub(super) struct Held {
    pub(super) id: UnitId,
    pub(super) key: UnitKey,
    pub(super) buffer: Arc<UnitBuffer>,
    /// The bytes of the unit the grant covers (for a dirty grant, the dirty span; for a
    /// grant of several ranges, the span from the first to the last byte they cover).
    pub(super) range: Range<usize>,
    /// One range of the grant covers the whole unit (a write needs none of its old bytes).
    pub(super) whole: bool,
    /// Held alone (a write, or a read that must fill a missing unit).
    pub(super) exclusive: bool,
    /// Holds valid data (as seen by this grant).
    pub(super) filled: bool,
    /// Bytes this grant wrote, made dirty at release.
    pub(super) written: Option<Range<usize>>,
}
