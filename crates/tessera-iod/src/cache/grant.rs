//! Grants: the units a read or write holds, released on drop, and access to their bytes
//! ([`Grant`], [`ReadGrant`], [`Pinned`], [`WriteGrant`], [`DirtyGrant`]).

use std::io::IoSliceMut;
use std::ops::Range;
use std::sync::Arc;

use super::buffer::UnitBuffer;
use super::{Cache, CacheError, Held, UnitKey};

/// What the read and write grants share (both dereference to it): the units held, released
/// on drop, and shared access to their bytes.
pub struct Grant {
    pub(super) cache: Cache,
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) held: Vec<Held>,
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut state = self.cache.lock();
        for held in &self.held {
            state.release(held);
        }
        drop(state);
        self.cache.shared.released.notify_all();
    }
}

/// One unit of a grant, as the caller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedUnit {
    /// The unit's index in its object.
    pub index: u64,
    /// The unit's size.
    pub unit_bytes: usize,
    /// The bytes of the unit the grant covers.
    pub range: Range<usize>,
    /// Whether the unit holds valid data.
    pub filled: bool,
}

impl Grant {
    pub(super) fn held(&self, position: usize) -> Result<&Held, CacheError> {
        self.held.get(position).ok_or(CacheError::NoSuchUnit {
            position,
            count: self.held.len(),
        })
    }

    /// How many units the grant holds.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether the grant holds no unit (a zero-length range).
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Whether every unit holds valid data.
    pub fn all_filled(&self) -> bool {
        self.held.iter().all(|held| held.filled)
    }

    /// The range's first byte in the object.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Copy the whole granted range into `target` (exactly the grant's length; every unit must
    /// be filled, or written by this grant).
    pub fn copy_to(&self, target: &mut [u8]) -> Result<(), CacheError> {
        copy_out(self, target)
    }

    /// The units, in ascending order.
    pub fn units(&self) -> impl Iterator<Item = GrantedUnit> + '_ {
        self.held.iter().map(|held| GrantedUnit {
            index: held.key.index,
            unit_bytes: held.buffer.len(),
            range: held.range.clone(),
            filled: held.filled,
        })
    }

    /// The covered bytes of the unit at `position` (it must be filled, or written by this
    /// grant).
    pub fn bytes(&self, position: usize) -> Result<&[u8], CacheError> {
        let held = self.held(position)?;
        if !held.filled {
            return Err(CacheError::Unfilled {
                handle: held.key.handle,
                unit_index: held.key.index,
            });
        }
        // SAFETY: the buffer is alive (the `Arc`) and `range` lies within it. The grant holds
        // the unit shared (no writer exists) or exclusively (the only `&mut` would come from
        // this grant through `&mut self`, which the borrow of `&self` here rules out).
        Ok(unsafe {
            std::slice::from_raw_parts(held.buffer.start().add(held.range.start), held.range.len())
        })
    }

    /// Hold shared, from now on, the units this grant filled alone, so other readers of them
    /// need not wait for it to be dropped (a read grant filled the units it missed).
    pub(super) fn share_filled(&mut self) {
        if !self.held.iter().any(|held| held.exclusive && held.filled) {
            return;
        }
        let mut state = self.cache.lock();
        for held in self
            .held
            .iter_mut()
            .filter(|held| held.exclusive && held.filled)
        {
            let unit = state.unit_mut(held.id);
            unit.writer = false;
            unit.filled = true;
            unit.readers += 1;
            held.exclusive = false;
        }
        drop(state);
        self.cache.shared.released.notify_all();
    }

    /// The object and unit size of the units held (`None` when none is).
    pub(super) fn unit_size(&self) -> (u64, Option<u64>) {
        let first = self.held.first();
        (
            first.map_or(0, |held| held.key.handle),
            first.map(|held| held.buffer.len() as u64),
        )
    }

    /// The position of the held unit of index `index`.
    pub(super) fn position(&self, index: u64) -> Option<usize> {
        self.held
            .binary_search_by_key(&index, |held| held.key.index)
            .ok()
    }

    /// Hand `each` the bytes `[offset, offset + len)` of the object as slices of the held
    /// units, in order; the units must be filled and held by this grant.
    pub fn for_each_slice<E: From<CacheError>>(
        &self,
        offset: u64,
        len: u64,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let (handle, unit_bytes) = self.unit_size();
        let position = |index| self.position(index);
        for_each_step(
            handle,
            unit_bytes,
            (offset, len),
            position,
            |position, from, step| {
                let held = &self.held[position];
                if !held.filled {
                    return Err(CacheError::Unfilled {
                        handle,
                        unit_index: held.key.index,
                    }
                    .into());
                }
                // SAFETY: the buffer is alive (the `Arc`) and `from + step` lies within it. The
                // grant holds the unit shared (no writer exists) or exclusively (the only `&mut`
                // would come from this grant through `&mut self`, ruled out by `&self`).
                each(unsafe { std::slice::from_raw_parts(held.buffer.start().add(from), step) })
            },
        )
    }

    /// Copy the object bytes at `offset` into `target`, from the held units.
    pub fn read_at(&self, offset: u64, target: &mut [u8]) -> Result<(), CacheError> {
        let mut copied = 0;
        self.for_each_slice(offset, target.len() as u64, |bytes: &[u8]| {
            target[copied..copied + bytes.len()].copy_from_slice(bytes);
            copied += bytes.len();
            Ok::<(), CacheError>(())
        })
    }

    /// Call `fill` with the whole buffer of each exclusively held unfilled unit that passes
    /// `wanted`, then count it filled.
    pub(super) fn fill_missing<E>(
        &mut self,
        wanted: impl Fn(&Held) -> bool,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.fill_missing_runs(wanted, |first, buffers| {
            (first..)
                .zip(buffers.iter_mut())
                .try_for_each(|(index, buffer)| fill(index, buffer))
        })
    }

    /// Call `fill(first unit index, buffers)` once per run of exclusively held unfilled
    /// units that pass `wanted` and follow each other in the object (one storage call can
    /// fill a run), then count them filled.
    pub(super) fn fill_missing_runs<E>(
        &mut self,
        wanted: impl Fn(&Held) -> bool,
        mut fill: impl FnMut(u64, &mut [IoSliceMut<'_>]) -> Result<(), E>,
    ) -> Result<(), E> {
        let missing = |held: &Held| !held.filled && held.exclusive && wanted(held);
        let mut at = 0;
        while at < self.held.len() {
            if !missing(&self.held[at]) {
                at += 1;
                continue;
            }
            let mut end = at + 1;
            while end < self.held.len()
                && missing(&self.held[end])
                && self.held[end].key.index == self.held[end - 1].key.index + 1
            {
                end += 1;
            }
            let mut buffers: Vec<IoSliceMut<'_>> = self.held[at..end]
                .iter()
                .map(|held| {
                    // SAFETY: the grant holds each of these units exclusively (no other grant
                    // can reach its bytes), the `Arc`s keep them alive, the buffers are
                    // distinct allocations, and `&mut self` means no slice from this grant is
                    // alive either.
                    IoSliceMut::new(unsafe {
                        std::slice::from_raw_parts_mut(held.buffer.start(), held.buffer.len())
                    })
                })
                .collect();
            fill(self.held[at].key.index, &mut buffers)?;
            drop(buffers);
            for held in &mut self.held[at..end] {
                held.filled = true;
            }
            at = end;
        }
        Ok(())
    }
}

/// Shared access to the units covering a byte range; released on drop.
///
/// Units that were not cached are held alone until the grant drops, so the caller can fill
/// them from storage ([`ReadGrant::fill_missing`]) before serving.
pub struct ReadGrant {
    pub(super) grant: Grant,
}

impl std::ops::Deref for ReadGrant {
    type Target = Grant;

    fn deref(&self) -> &Grant {
        &self.grant
    }
}

impl ReadGrant {
    /// Fill every unfilled unit from storage: `fill(unit index, whole unit buffer)`.
    pub fn fill_missing<E>(
        &mut self,
        fill: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let filled = self.grant.fill_missing(|_| true, fill);
        self.grant.share_filled();
        filled
    }

    /// [`ReadGrant::fill_missing`], one call per run of units that follow each other:
    /// `fill(first unit index, their whole buffers)`.
    pub fn fill_missing_runs<E>(
        &mut self,
        fill: impl FnMut(u64, &mut [IoSliceMut<'_>]) -> Result<(), E>,
    ) -> Result<(), E> {
        let filled = self.grant.fill_missing_runs(|_| true, fill);
        self.grant.share_filled();
        filled
    }
}

impl ReadGrant {
    /// Keep the held units' bytes readable after the grant is released (dropped here), for a
    /// reply sent from them over a socket: writes to the units from now on go to copies
    /// (copy-on-write), so no write waits for the send and the pinned bytes never change. A
    /// pinned buffer no longer counts against the budget; callers bound the bytes they pin.
    pub fn pin(self) -> Pinned {
        let units = self
            .grant
            .held
            .iter()
            .map(|held| (held.key, held.filled, Arc::clone(&held.buffer)))
            .collect();
        Pinned { units }
    }
}

/// Unit bytes kept after their read grant was released ([`ReadGrant::pin`]); immutable.
#[derive(Default)]
pub struct Pinned {
    /// In ascending unit order, one entry per unit.
    pub(super) units: Vec<(UnitKey, bool, Arc<UnitBuffer>)>,
}

impl Pinned {
    /// Add the units of `other` (pinned later, of the same object); where both pinned a unit,
    /// the earlier pin is kept.
    pub fn merge(&mut self, other: Pinned) {
        self.units.extend(other.units);
        self.units.sort_by_key(|(key, _, _)| *key);
        self.units.dedup_by_key(|(key, _, _)| *key);
    }

    /// Hand `each` the object bytes `[offset, offset + len)` as slices of the pinned units,
    /// in order (they must be pinned and filled).
    pub fn for_each_slice<E: From<CacheError>>(
        &self,
        offset: u64,
        len: u64,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let first = self.units.first();
        let handle = first.map_or(0, |(key, _, _)| key.handle);
        let unit_bytes = first.map(|(_, _, buffer)| buffer.len() as u64);
        let position = |index| {
            self.units
                .binary_search_by_key(&index, |(key, _, _)| key.index)
                .ok()
        };
        for_each_step(
            handle,
            unit_bytes,
            (offset, len),
            position,
            |position, from, step| {
                let (key, filled, buffer) = &self.units[position];
                if !filled {
                    return Err(CacheError::Unfilled {
                        handle,
                        unit_index: key.index,
                    }
                    .into());
                }
                // SAFETY: the `Arc` keeps the buffer alive and `from + step` lies within it.
                // Nothing writes a pinned buffer: a write to its unit copies it first.
                each(unsafe { std::slice::from_raw_parts(buffer.start().add(from), step) })
            },
        )
    }
}

/// Walks object bytes `[offset, offset + len)` over units of `unit_bytes` (`None`: no unit),
/// handing `each` the position of the unit holding each part (`position(unit index)`), the
/// part's first byte within the unit and its length. A byte in no unit is
/// [`CacheError::NotGranted`].
pub(super) fn for_each_step<E: From<CacheError>>(
    handle: u64,
    unit_bytes: Option<u64>,
    (offset, len): (u64, u64),
    position: impl Fn(u64) -> Option<usize>,
    mut each: impl FnMut(usize, usize, usize) -> Result<(), E>,
) -> Result<(), E> {
    let (mut at, end) = (offset, offset.saturating_add(len));
    while at < end {
        let (unit_bytes, index, found) = unit_bytes
            .and_then(|unit_bytes| {
                let index = at / unit_bytes;
                position(index).map(|found| (unit_bytes, index, found))
            })
            .ok_or(CacheError::NotGranted { handle, offset: at })?;
        // Both fit in the unit: `at` lies in it and the step stops at its end.
        let from = usize::try_from(at - index * unit_bytes).expect("within one unit");
        let step =
            usize::try_from((end - at).min(unit_bytes - from as u64)).expect("within one unit");
        each(found, from, step)?;
        at += step as u64;
    }
    Ok(())
}

pub(super) fn copy_out(grant: &Grant, target: &mut [u8]) -> Result<(), CacheError> {
    if target.len() != grant.len {
        return Err(CacheError::LengthMismatch {
            grant_len: grant.len,
            buffer_len: target.len(),
        });
    }
    grant.read_at(grant.offset, target)
}

/// Exclusive access to the units covering a byte range; released on drop, when the bytes
/// written become dirty.
pub struct WriteGrant {
    pub(super) grant: Grant,
}

impl std::ops::Deref for WriteGrant {
    type Target = Grant;

    fn deref(&self) -> &Grant {
        &self.grant
    }
}

impl WriteGrant {
    /// Fill from storage every unfilled unit the write covers only in part (a unit it covers
    /// whole needs no old bytes): `fill(unit index, whole unit buffer)`.
    pub fn fill_missing<E>(
        &mut self,
        fill: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.grant.fill_missing(|held| !held.whole, fill)
    }

    /// [`WriteGrant::fill_missing`], one call per run of units that follow each other.
    pub fn fill_missing_runs<E>(
        &mut self,
        fill: impl FnMut(u64, &mut [IoSliceMut<'_>]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.grant.fill_missing_runs(|held| !held.whole, fill)
    }

    /// The covered bytes of the unit at `position`, to write; they count as written (dirty
    /// at release). A unit covered only in part must be filled first.
    pub fn bytes_mut(&mut self, position: usize) -> Result<&mut [u8], CacheError> {
        let count = self.grant.held.len();
        let held = self.grant.held.get_mut(position);
        let held = held.ok_or(CacheError::NoSuchUnit { position, count })?;
        let whole = held.range.len() == held.buffer.len();
        if !held.filled && !whole {
            return Err(CacheError::Unfilled {
                handle: held.key.handle,
                unit_index: held.key.index,
            });
        }
        held.filled = true;
        held.written = Some(held.range.clone());
        // SAFETY: the grant holds this unit exclusively, the `Arc` keeps it alive, `range`
        // lies within it, and `&mut self` means no other slice from this grant is alive.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(
                held.buffer.start().add(held.range.start),
                held.range.len(),
            )
        })
    }

    /// Copy `source` over the object bytes at `offset`, into the held units (each must be
    /// filled, or covered whole by the grant's own ranges and by this copy). The bytes count
    /// as written. Checks every unit before writing any.
    pub fn write_at(&mut self, offset: u64, source: &[u8]) -> Result<(), CacheError> {
        let (handle, unit_bytes) = self.grant.unit_size();
        let mut steps = Vec::new();
        let grant = &self.grant;
        let position = |index| grant.position(index);
        let span = (offset, source.len() as u64);
        for_each_step(
            handle,
            unit_bytes,
            span,
            position,
            |position, from, step| {
                let held = &grant.held[position];
                if !held.filled && step < held.buffer.len() {
                    return Err(CacheError::Unfilled {
                        handle,
                        unit_index: held.key.index,
                    });
                }
                steps.push((position, from, step));
                Ok(())
            },
        )?;
        let mut copied = 0;
        for (position, from, step) in steps {
            let held = &mut self.grant.held[position];
            held.filled = true;
            held.written = Some(match held.written.take() {
                Some(old) => old.start.min(from)..old.end.max(from + step),
                None => from..from + step,
            });
            // SAFETY: the grant holds this unit exclusively, the `Arc` keeps it alive,
            // `from + step` lies within it, and `&mut self` means no slice from this grant
            // is alive.
            let target =
                unsafe { std::slice::from_raw_parts_mut(held.buffer.start().add(from), step) };
            target.copy_from_slice(&source[copied..copied + step]);
            copied += step;
        }
        Ok(())
    }

    /// Copy `source` (exactly the grant's length) over the whole granted range.
    pub fn copy_from(&mut self, source: &[u8]) -> Result<(), CacheError> {
        if source.len() != self.grant.len {
            return Err(CacheError::LengthMismatch {
                grant_len: self.grant.len,
                buffer_len: source.len(),
            });
        }
        // Check every unit before writing any, so a refusal leaves nothing half written.
        for held in &self.grant.held {
            if !held.filled && held.range.len() < held.buffer.len() {
                return Err(CacheError::Unfilled {
                    handle: held.key.handle,
                    unit_index: held.key.index,
                });
            }
        }
        let mut at = 0;
        for position in 0..self.grant.held.len() {
            let target = self.bytes_mut(position)?;
            let n = target.len();
            target.copy_from_slice(&source[at..at + n]);
            at += n;
        }
        Ok(())
    }
}

/// One dirty unit handed to a write-back.
#[derive(Debug)]
pub struct DirtyUnit<'a> {
    /// The object.
    pub handle: u64,
    /// The unit's index.
    pub index: u64,
    /// The object offset of the first dirty byte.
    pub offset: u64,
    /// The dirty bytes, to write at `offset`.
    pub bytes: &'a [u8],
    /// The object offset of the unit's first byte.
    pub unit_start: u64,
    /// The whole unit (filled: every byte valid), for writes widened to storage alignment.
    pub unit: &'a [u8],
}

/// Dirty units held shared for a write-back; writes to them wait until it drops.
pub struct DirtyGrant {
    pub(super) grant: Grant,
}

impl DirtyGrant {
    /// How many units it holds.
    pub fn len(&self) -> usize {
        self.grant.held.len()
    }

    /// Whether it holds no unit (nothing was dirty, or every dirty unit was being written).
    pub fn is_empty(&self) -> bool {
        self.grant.held.is_empty()
    }

    /// The dirty bytes it holds.
    pub fn dirty_bytes(&self) -> usize {
        self.grant.held.iter().map(|held| held.range.len()).sum()
    }

    /// The units, in ascending (handle, index) order.
    pub fn units(&self) -> impl Iterator<Item = DirtyUnit<'_>> + '_ {
        self.grant
            .held
            .iter()
            .enumerate()
            .map(|(position, held)| DirtyUnit {
                handle: held.key.handle,
                index: held.key.index,
                offset: held.key.index * held.buffer.len() as u64 + held.range.start as u64,
                bytes: self.grant.bytes(position).expect("dirty units are filled"),
                unit_start: held.key.index * held.buffer.len() as u64,
                // SAFETY: the buffer is alive (the `Arc`) and `len` bytes long; the dirty
                // grant holds the unit shared, so no writer exists while the slice lives.
                unit: unsafe { std::slice::from_raw_parts(held.buffer.start(), held.buffer.len()) },
            })
    }

    /// The units are on storage now: they become clean (and evictable once ungranted).
    pub fn mark_clean(self) {
        let mut state = self.grant.cache.lock();
        for held in &self.grant.held {
            let unit = state.unit_mut(held.id);
            // Another write-back of the same units may have marked them clean first; no write
            // can dirty them again while this grant holds them.
            let Some(dirty) = unit.dirty.take() else {
                continue;
            };
            let key = unit.key;
            state.dirty_bytes -= dirty.len();
            state.dirty.remove(&key);
        }
        // Dropping `self` releases the units (and wakes waiters).
    }
}
