//! Receiving a write straight into cache units ("recvfile", seed 001 §5.2): the data of a
//! write lands in unit buffers *before* the write is granted, and the grant then installs
//! them as the units they cover, so no byte is copied between the socket (or the client's
//! memory) and the cache.
//!
//! The landing happens while the request's bytes arrive from a peer, which may take long, so
//! it holds no grant (no grant is ever held across a wait on a peer). Each unit the write
//! covers whole gets a buffer of its own, from the Ready region while a slot is free (not
//! zeroed: every byte of it is received before anyone can read it), else the heap; the bytes
//! of units covered only in part land back to back in one plain buffer and are copied into
//! their units under the grant, as any write is. [`WriteGrant::install`] swaps the landed
//! buffers in under the grant: a unit held by a pinned reply keeps its old buffer for that
//! reply, as with copy-on-write, and a missing unit takes the landed buffer as it is made
//! (`Cache::acquire` with donors), so it is never allocated twice.

use std::collections::BTreeMap;
use std::io::IoSliceMut;
use std::ops::Range;
use std::sync::Arc;

use super::buffer::UnitBuffer;
use super::{Cache, CacheError, Demoted, End, Held, State, UnitKey, WriteGrant};

/// Where one part of a landed write lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// A unit the write covers whole: in its own buffer.
    Whole,
    /// At this offset of the buffer of partial units.
    Rest(usize),
}

/// One part of a landed write: `len` object bytes at `offset`, within one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The object offset of its first byte.
    pub offset: u64,
    /// Its length (at most a unit).
    pub len: usize,
    place: Place,
}

/// A write's data, received (or about to be) into memory that will become its cache units;
/// made by [`Cache::land`], applied by the store under a write grant.
pub struct Landing {
    handle: u64,
    unit_bytes: usize,
    /// Buffers of the units covered whole, by unit index; the landing holds the only
    /// reference until a grant installs one.
    whole: BTreeMap<u64, Arc<UnitBuffer>>,
    /// The bytes of the parts of units covered in part, back to back.
    rest: Vec<u8>,
    /// Every part, in object order (which is also the order of the request's bytes).
    parts: Vec<Part>,
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing")
            .field("handle", &self.handle)
            .field("unit_bytes", &self.unit_bytes)
            .field("whole_units", &self.whole.len())
            .field("rest_bytes", &self.rest.len())
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Cache {
    /// Memory for the data of a write of `pieces` (`(offset, length)`, in the order their
    /// bytes arrive) of object `handle`, laid out as its cache units, or `None` where a
    /// landing gains nothing or cannot keep the write's meaning: pieces out of order or
    /// overlapping (where the later of two pieces must win), or no unit covered whole.
    /// Fixes the object's unit size. The caller bounds the bytes (its buffer budget).
    pub fn land(
        &self,
        handle: u64,
        pieces: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<Option<Landing>, CacheError> {
        self.land_counted(handle, pieces, true)
    }

    /// [`Cache::land`] for demoted blocks ([`Cache::insert_landed_clean`]), which do not
    /// count as landed writes.
    pub fn land_demote(
        &self,
        handle: u64,
        pieces: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<Option<Landing>, CacheError> {
        self.land_counted(handle, pieces, false)
    }

    fn land_counted(
        &self,
        handle: u64,
        pieces: impl IntoIterator<Item = (u64, u64)>,
        write: bool,
    ) -> Result<Option<Landing>, CacheError> {
        let unit_bytes = {
            let mut state = self.lock();
            state.unit_bytes_of(handle, self.shared.config.default_unit_bytes)?
        };
        let unit = unit_bytes as u64;
        let mut parts = Vec::new();
        let (mut rest_bytes, mut whole_units) = (0usize, 0usize);
        let mut end_of_last = 0u64;
        for (offset, length) in pieces {
            if length == 0 {
                continue;
            }
            let end = offset
                .checked_add(length)
                .ok_or(CacheError::RangeOverflow {
                    handle,
                    offset,
                    len: usize::try_from(length).unwrap_or(usize::MAX),
                })?;
            if offset < end_of_last {
                return Ok(None);
            }
            end_of_last = end;
            let mut at = offset;
            while at < end {
                let step = (end - at).min(unit - at % unit);
                let len = usize::try_from(step).expect("within one unit");
                let place = if len == unit_bytes {
                    whole_units += 1;
                    Place::Whole
                } else {
                    rest_bytes += len;
                    Place::Rest(rest_bytes - len)
                };
                parts.push(Part {
                    offset: at,
                    len,
                    place,
                });
                at += step;
            }
        }
        if whole_units == 0 {
            return Ok(None);
        }
        let mut whole = BTreeMap::new();
        let (mut ready_made, mut raw_made) = (0, 0);
        // Not zeroed: the receive writes every byte before the buffer can become a unit, and
        // a landing that fails is dropped unread. So a spare buffer (an evicted unit's) serves.
        let mut spares: Vec<UnitBuffer> = {
            let mut state = self.lock();
            (0..whole_units)
                .map_while(|_| state.take_spare(unit_bytes))
                .collect()
        };
        for part in parts.iter().filter(|part| part.place == Place::Whole) {
            let buffer = if let Some(buffer) = self
                .shared
                .ready
                .as_ref()
                .and_then(|arena| UnitBuffer::from_ready(arena, unit_bytes, false))
            {
                ready_made += 1;
                buffer
            } else if let Some(buffer) = spares.pop() {
                buffer
            } else {
                raw_made += 1;
                UnitBuffer::new_zeroed(unit_bytes)
            };
            whole.insert(part.offset / unit, Arc::new(buffer));
        }
        let mut state = self.lock();
        for buffer in spares {
            state.keep_spare(Arc::new(buffer));
        }
        state.ready_units_made += ready_made;
        state.raw_units_made += raw_made;
        if write {
            state.units_landed += ready_made + raw_made;
        }
        drop(state);
        Ok(Some(Landing {
            handle,
            unit_bytes,
            whole,
            rest: vec![0; rest_bytes],
            parts,
        }))
    }
}

impl Cache {
    /// Inserts the whole units of `landing` (demoted blocks, received into it) clean at
    /// `end`, each only if it is not cached, evicting clean units for room but never waiting;
    /// the bytes of units it covers only in part are dropped. Returns the units inserted.
    pub fn insert_landed_clean(&self, mut landing: Landing, end: End) -> Result<usize, CacheError> {
        let config = &self.shared.config;
        let mut state = self.lock();
        let unit_bytes = state.unit_bytes_of(landing.handle, config.default_unit_bytes)?;
        if unit_bytes != landing.unit_bytes {
            return Ok(0); // the object's unit changed since the landing (a truncate)
        }
        let mut inserted = 0;
        for (index, buffer) in std::mem::take(&mut landing.whole) {
            let key = UnitKey {
                handle: landing.handle,
                index,
            };
            let made = state.insert_demoted(key, (unit_bytes, config.budget_bytes), end, |state| {
                state
                    .insert_unit(key, unit_bytes, None, Some(&buffer), false)
                    .0
            });
            match made {
                Demoted::Inserted => inserted += 1,
                Demoted::Cached => {}
                Demoted::NoRoom => break,
            }
        }
        drop(state);
        if inserted > 0 {
            self.shared.released.notify_all();
        }
        Ok(inserted)
    }
}

impl Landing {
    /// The object.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The bytes the write carries.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|part| part.len as u64).sum()
    }

    /// The write's parts, in object order, each within one unit.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The landed bytes of part `index`: from its whole unit's buffer, or from the buffer of
    /// partial units (for a part still to be copied, or when the units could not be swapped
    /// in).
    pub fn part_bytes(&self, index: usize) -> &[u8] {
        let part = self.parts[index];
        match part.place {
            Place::Rest(at) => &self.rest[at..at + part.len],
            Place::Whole => {
                let buffer = &self.whole[&(part.offset / self.unit_bytes as u64)];
                // SAFETY: the landing holds the buffer (alive through the `Arc`), `len` is
                // its length, and nothing writes it now: `&self` rules out `slices`, and a
                // unit a grant made of it is held by that grant alone until installed.
                unsafe { std::slice::from_raw_parts(buffer.start(), part.len) }
            }
        }
    }

    /// The memory the write's bytes go into, in the order they arrive: each whole unit's
    /// buffer, and runs of the buffer of partial units.
    pub fn slices(&mut self) -> Vec<IoSliceMut<'_>> {
        let unit = self.unit_bytes as u64;
        let mut out = Vec::with_capacity(self.parts.len());
        let mut rest: &mut [u8] = &mut self.rest;
        let mut pending_rest = 0usize;
        for part in &self.parts {
            match part.place {
                Place::Rest(_) => pending_rest += part.len,
                Place::Whole => {
                    if pending_rest > 0 {
                        let (run, tail) = std::mem::take(&mut rest).split_at_mut(pending_rest);
                        out.push(IoSliceMut::new(run));
                        rest = tail;
                        pending_rest = 0;
                    }
                    let buffer = &self.whole[&(part.offset / unit)];
                    // SAFETY: the landing holds the only reference to the buffer (a grant
                    // takes one only after the receive, under `&mut self` of the store's
                    // apply, which this borrow of `&mut self` rules out), each whole unit
                    // appears in one part (the pieces are disjoint), and the slices live no
                    // longer than this borrow.
                    out.push(IoSliceMut::new(unsafe {
                        std::slice::from_raw_parts_mut(buffer.start(), buffer.len())
                    }));
                }
            }
        }
        if pending_rest > 0 {
            out.push(IoSliceMut::new(&mut rest[..pending_rest]));
        }
        out
    }

    /// The parts cut into batches whose units fit one grant of `max_units` units.
    pub fn batches(&self, max_units: usize) -> Vec<Range<usize>> {
        let unit = self.unit_bytes as u64;
        let mut batches = Vec::new();
        let (mut start, mut units, mut last_unit) = (0, 0usize, None);
        for (index, part) in self.parts.iter().enumerate() {
            let this_unit = part.offset / unit;
            if last_unit != Some(this_unit) {
                if units == max_units.max(1) {
                    batches.push(start..index);
                    (start, units) = (index, 0);
                }
                units += 1;
                last_unit = Some(this_unit);
            }
        }
        if start < self.parts.len() {
            batches.push(start..self.parts.len());
        }
        batches
    }

    /// The landed buffer for unit `index` of `unit_bytes`, if it is one (a donor).
    pub(super) fn donor(&self, index: u64, unit_bytes: usize) -> Option<&Arc<UnitBuffer>> {
        if unit_bytes != self.unit_bytes {
            return None;
        }
        self.whole.get(&index)
    }
}

impl State {
    /// Swap `buffer` in as the buffer of the unit `held` (held alone by a write grant).
    fn install(&mut self, held: &mut Held, buffer: Arc<UnitBuffer>) {
        let unit = self.unit_mut(held.id);
        debug_assert!(unit.writer && buffer.len() == unit.buffer.len());
        unit.buffer = Arc::clone(&buffer);
        held.buffer = buffer;
        held.filled = true;
        held.written = Some(0..held.buffer.len());
    }
}

impl WriteGrant {
    /// Install the landed buffers of the units this grant covers whole (as their new bytes,
    /// written), taking them out of `landing`; returns which parts of `landing` that covered
    /// (the caller copies the others in with [`WriteGrant::write_at`]). Installs nothing if
    /// the object's unit size changed since the landing (a truncate in between).
    pub fn install(&mut self, landing: &mut Landing, parts: Range<usize>) -> Vec<bool> {
        let unit = self.grant.unit_size().1;
        let mut installed = vec![false; parts.len()];
        if unit != Some(landing.unit_bytes as u64) || landing.handle != self.grant.unit_size().0 {
            return installed;
        }
        let mut state = self.grant.cache.lock();
        for (done, part) in installed.iter_mut().zip(&landing.parts[parts]) {
            if part.place != Place::Whole {
                continue;
            }
            let index = part.offset / landing.unit_bytes as u64;
            let Some(position) = self.grant.position(index) else {
                continue;
            };
            let Some(buffer) = landing.whole.remove(&index) else {
                continue;
            };
            let held = &mut self.grant.held[position];
            state.install(held, buffer);
            *done = true;
        }
        installed
    }
}
