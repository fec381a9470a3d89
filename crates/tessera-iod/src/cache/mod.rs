//! The unified server cache's core (seed 001 ch. 5): buffers the cache owns, granted to
//! operations by allocate–release sharing (seed §5.2.3). The store serves every request
//! through it under `--serve unified` (`store/unified.rs`).
//!
//! An object's bytes are cached in units of one size per object (4–64 KiB, a power of two,
//! fixed at the object's first use), keyed by (object handle, unit index). An operation asks
//! for the byte range it touches — [`Cache::grant_read`] or [`Cache::grant_write`] — and gets
//! a guard holding every unit that covers it. Read grants of a unit share it; a write grant
//! holds its units alone, so a conflicting grant waits (bounded by
//! [`CacheConfig::grant_wait`], at most [`GRANT_WAIT_MAX`]). A grant takes its units in
//! ascending (handle, index) order, so two grants never wait for each other in a cycle, and
//! it releases them all when dropped, waking whoever waits.
//!
//! A unit that was not cached arrives empty (`filled == false`) and held by the grant alone:
//! the caller reads storage into it (`fill_missing`), then serves it. A write grant marks
//! the bytes it wrote dirty; dirty units are never evicted. A write-back takes them with
//! [`Cache::take_dirty`], writes them to storage and calls [`DirtyGrant::mark_clean`].
//! Eviction takes only clean, ungranted units, in the order of a pluggable [`Replacement`]
//! policy ([`Lru`] by default). The bytes of all units never exceed the budget; when it is all
//! dirty or granted, a grant waits for room and then fails with [`CacheError::CacheFull`].
//! A grant waiting for room keeps the units it already took, so two large grants against a
//! budget full of each other's units wait until one times out; callers keep grants small
//! against the budget (a grant larger than the whole budget is refused at once).
//!
//! One grant may cover several ranges at once ([`Cache::grant_read_ranges`]), all its units
//! taken in ascending order. A read grant can be turned into [`Pinned`] bytes that outlive it
//! (a reply still being sent): a later write to such a unit copies it first. Units take the
//! slots of a registered Ready region while there are free ones (`ready.rs`), else heap memory.

mod buffer;
mod error;
mod grant;
mod landing;
mod ready;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use error::CacheError;
use error::{check_unit_bytes, millis};
pub use grant::{DirtyGrant, DirtyUnit, Grant, GrantedUnit, Pinned, ReadGrant, WriteGrant};
pub use landing::{Landing, Part};
use ready::ReadyArena;
pub use ready::READY_REGISTRATIONS_MAX;
use state::{Held, State};
pub use tessera_policy::{End, Lru, Replacement, UnitId};

/// What became of one demoted unit ([`State::insert_demoted`]).
enum Demoted {
    /// Put in clean.
    Inserted,
    /// Cached already: left as it is.
    Cached,
    /// No clean unit to evict for room: the demote stops here.
    NoRoom,
}

/// The smallest cache unit, in bytes.
pub const UNIT_BYTES_MIN: usize = 4 * 1024;
/// The largest cache unit, in bytes.
pub const UNIT_BYTES_MAX: usize = 64 * 1024;
/// The unit of an object nobody chose one for, unless the configuration says otherwise.
pub const UNIT_BYTES_DEFAULT: usize = UNIT_BYTES_MAX;
/// Every unit buffer starts on this boundary (the strictest O_DIRECT alignment we expect).
pub const BUFFER_ALIGN_BYTES: usize = 4096;
/// The longest any grant, invalidation or wait for room may wait.
pub const GRANT_WAIT_MAX: Duration = Duration::from_secs(10);
/// How many objects' unit sizes the cache remembers (until their invalidation).
pub const OBJECTS_MAX: usize = 1 << 20;
/// Buffers of evicted units kept for landings to receive into (at most 4 MiB of
/// `UNIT_BYTES_MAX` units), beyond the budget.
pub const SPARE_UNITS_MAX: usize = 64;

const _: () = assert!(UNIT_BYTES_MIN.is_power_of_two() && UNIT_BYTES_MAX.is_power_of_two());
const _: () = assert!(UNIT_BYTES_MIN <= UNIT_BYTES_DEFAULT && UNIT_BYTES_DEFAULT <= UNIT_BYTES_MAX);
const _: () = assert!(UNIT_BYTES_MIN.is_multiple_of(BUFFER_ALIGN_BYTES));
// The units files may ask for on the wire (`Create`, `ObjectCreate`) are the cache's.
const _: () = assert!(
    UNIT_BYTES_MIN == tessera_proto::limits::CACHE_UNIT_BYTES_MIN as usize
        && UNIT_BYTES_MAX == tessera_proto::limits::CACHE_UNIT_BYTES_MAX as usize
);

/// The size and behaviour of one cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// The most bytes all units together may hold; at least one [`UNIT_BYTES_MAX`] unit.
    pub budget_bytes: usize,
    /// The unit of objects without [`Cache::set_unit_bytes`]: a power of two in
    /// [`UNIT_BYTES_MIN`]..=[`UNIT_BYTES_MAX`].
    pub default_unit_bytes: usize,
    /// How long a grant waits for a conflicting grant or for room; at most [`GRANT_WAIT_MAX`].
    pub grant_wait: Duration,
    /// The Ready part of the budget: mapped and registered (pinned) once for the cache's
    /// life, units taking its slots first; a multiple of [`UNIT_BYTES_MAX`], at most the
    /// budget (0: every unit is Raw heap memory).
    pub ready_bytes: usize,
}

impl CacheConfig {
    /// A configuration with `budget_bytes`, the default unit and the longest wait.
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            budget_bytes,
            default_unit_bytes: UNIT_BYTES_DEFAULT,
            grant_wait: GRANT_WAIT_MAX,
            ready_bytes: 0,
        }
    }

    /// Check every limit, naming the first value that breaks one.
    pub fn validate(&self) -> Result<(), CacheError> {
        check_unit_bytes(self.default_unit_bytes)?;
        if self.budget_bytes < UNIT_BYTES_MAX {
            return Err(CacheError::BudgetTooSmall {
                budget_bytes: self.budget_bytes,
            });
        }
        if self.ready_bytes > self.budget_bytes || !self.ready_bytes.is_multiple_of(UNIT_BYTES_MAX)
        {
            return Err(CacheError::ReadyRefused {
                bytes: self.ready_bytes,
                reason: format!(
                    "not a multiple of {UNIT_BYTES_MAX} bytes within the budget of {} bytes",
                    self.budget_bytes
                ),
            });
        }
        if self.grant_wait > GRANT_WAIT_MAX {
            return Err(CacheError::GrantWaitTooLong {
                wait_ms: millis(self.grant_wait),
            });
        }
        Ok(())
    }
}

/// A unit's place: the object and the unit's index in it (byte offset / unit size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitKey {
    /// The object.
    pub handle: u64,
    /// The unit's index in the object.
    pub index: u64,
}

/// A snapshot of the cache's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Units a grant found cached.
    pub hits: u64,
    /// Units a grant had to create (and, for a read, fill from storage).
    pub misses: u64,
    /// Clean units dropped to make room.
    pub evictions: u64,
    /// Units a grant had to wait for (a conflicting grant, or room).
    pub grant_waits: u64,
    /// Bytes written under grants and not yet marked clean.
    pub dirty_bytes: usize,
    /// Units cached now.
    pub units_in_use: usize,
    /// Bytes of those units.
    pub bytes_in_use: usize,
    /// The budget.
    pub budget_bytes: usize,
    /// Units given a Ready slot, and units given heap (Raw) memory, since the start.
    pub ready_units_made: u64,
    /// See `ready_units_made`.
    pub raw_units_made: u64,
    /// Units a write's data was received straight into ([`Cache::land`]; counted in the
    /// two above as well).
    pub units_landed: u64,
    /// Units a caching client demoted into the cache ([`Cache::insert_clean`]).
    pub units_demoted: u64,
    /// Ready slots held now (by units, or by replies still pinning them).
    pub ready_slots_taken: usize,
    /// The Ready region's bytes, and the registrar that registered it.
    pub ready_bytes: usize,
    /// See `ready_bytes`: every registrar of the region, joined by `+` (`pin`, or
    /// `pin+ofi:tcp;ofi_rxm` once a fabric registered it too; "" without a Ready region).
    pub ready_registrar: String,
}

struct Shared {
    config: CacheConfig,
    /// The Ready region, when `config.ready_bytes` asks for one.
    ready: Option<Arc<ReadyArena>>,
    state: Mutex<State>,
    /// Signalled whenever units are released or dropped.
    released: Condvar,
}

/// The cache's Ready region as other registrars see it (a fabric's `fi_mr_reg`): its bytes
/// stay mapped while this is held, and every registration made through it lasts until the
/// region is unmapped.
#[derive(Debug, Clone)]
pub struct ReadyMemory(Arc<ReadyArena>);

impl ReadyMemory {
    /// The region's bytes.
    pub fn bytes(&self) -> usize {
        self.0.bytes()
    }

    /// Whether `bytes` lie inside the region (a pinned unit's slice, say).
    pub fn contains(&self, bytes: &[u8]) -> bool {
        self.0.contains(bytes)
    }

    /// Registers the whole region with `registrar` for as long as it is mapped; `label`
    /// names the registration in [`CacheStats::ready_registrar`] (`ofi:tcp;ofi_rxm`). The
    /// handle's `descriptor` and `key` stay valid while this `ReadyMemory` (or the cache) is
    /// held.
    pub fn register(
        &self,
        registrar: Arc<dyn tessera_reg::Registrar>,
        label: &str,
    ) -> Result<tessera_reg::RegHandle, CacheError> {
        self.0.register(registrar, label)
    }
}

/// The cache. Cloning is cheap and shares it; grants keep it alive.
#[derive(Clone)]
pub struct Cache {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The units some ranges touch, by index: the span of each they cover, and whether one range
/// covers it whole.
type CoveredUnits = BTreeMap<u64, (Range<usize>, bool)>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    /// A read of units that are all cached and filled now, or nothing (no insert, no wait).
    ReadCached,
    Write,
}

impl Cache {
    /// A cache with an [`Lru`] policy.
    pub fn new(config: CacheConfig) -> Result<Self, CacheError> {
        Self::with_policy(config, Box::new(Lru::new()))
    }

    /// A cache with the given replacement policy (which must start empty).
    pub fn with_policy(
        config: CacheConfig,
        policy: Box<dyn Replacement>,
    ) -> Result<Self, CacheError> {
        config.validate()?;
        let state = State {
            units: Vec::new(),
            free_ids: Vec::new(),
            index: BTreeMap::new(),
            unit_bytes: HashMap::new(),
            dirty: BTreeSet::new(),
            used_bytes: 0,
            dirty_bytes: 0,
            policy,
            hits: 0,
            misses: 0,
            evictions: 0,
            grant_waits: 0,
            ready_units_made: 0,
            raw_units_made: 0,
            units_landed: 0,
            units_demoted: 0,
            spare: Vec::new(),
        };
        // Pinned pages (mlock), the registration the `local` backend's memory gets.
        let ready = match config.ready_bytes {
            0 => None,
            bytes => Some(Arc::new(ReadyArena::new(
                bytes,
                Arc::new(tessera_reg::PinRegistrar::new()),
            )?)),
        };
        let shared = Shared {
            config,
            ready,
            state: Mutex::new(state),
            released: Condvar::new(),
        };
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &CacheConfig {
        &self.shared.config
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock leaves no half-done change (every change completes before
        // anything that can panic), so a poisoned state is still consistent.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait for a release until `deadline`; `None` once it has passed.
    fn wait<'a>(
        &self,
        state: MutexGuard<'a, State>,
        deadline: Instant,
    ) -> Option<MutexGuard<'a, State>> {
        let remaining = deadline.checked_duration_since(Instant::now())?;
        if remaining.is_zero() {
            return None;
        }
        let (state, _) = self
            .shared
            .released
            .wait_timeout(state, remaining)
            .unwrap_or_else(PoisonError::into_inner);
        Some(state)
    }

    /// Fix the unit size of `handle` before its first grant.
    pub fn set_unit_bytes(&self, handle: u64, unit_bytes: usize) -> Result<(), CacheError> {
        check_unit_bytes(unit_bytes)?;
        let mut state = self.lock();
        match state.unit_bytes.get(&handle) {
            Some(&fixed) if fixed == unit_bytes => Ok(()),
            Some(&fixed) => Err(CacheError::UnitBytesFixed {
                handle,
                unit_bytes: fixed,
                requested: unit_bytes,
            }),
            None if state.unit_bytes.len() >= OBJECTS_MAX => {
                Err(CacheError::TooManyObjects { handle })
            }
            None => {
                state.unit_bytes.insert(handle, unit_bytes);
                Ok(())
            }
        }
    }

    /// The unit size of `handle` (the default if it has none yet; does not fix it).
    pub fn unit_bytes(&self, handle: u64) -> usize {
        let state = self.lock();
        state
            .unit_bytes
            .get(&handle)
            .copied()
            .unwrap_or(self.shared.config.default_unit_bytes)
    }

    /// Grant shared access to the units covering `len` bytes at `offset` of `handle`.
    pub fn grant_read(
        &self,
        handle: u64,
        offset: u64,
        len: usize,
    ) -> Result<ReadGrant, CacheError> {
        self.grant_read_ranges(handle, &[(offset, len)], self.shared.config.grant_wait)
    }

    /// Grant exclusive access to the units covering `len` bytes at `offset` of `handle`.
    pub fn grant_write(
        &self,
        handle: u64,
        offset: u64,
        len: usize,
    ) -> Result<WriteGrant, CacheError> {
        self.grant_write_ranges(handle, &[(offset, len)], self.shared.config.grant_wait)
    }

    /// Grant shared access to every unit covering any of `ranges` (`(offset, len)`, in any
    /// order, overlapping or not) of `handle`, all at once, waiting at most `wait` (capped at
    /// the configured wait; zero: fail at once with an error for which
    /// [`CacheError::would_wait`] holds rather than wait).
    pub fn grant_read_ranges(
        &self,
        handle: u64,
        ranges: &[(u64, usize)],
        wait: Duration,
    ) -> Result<ReadGrant, CacheError> {
        Ok(ReadGrant {
            grant: self.acquire(handle, ranges, Mode::Read, wait, None)?,
        })
    }

    /// Grant shared access to the units covering `ranges` of `handle` only if every one is
    /// cached, filled and free of writers now: never inserts, fills or waits
    /// ([`CacheError::NotCached`] otherwise, for which [`CacheError::would_wait`] holds).
    pub fn grant_cached(
        &self,
        handle: u64,
        ranges: &[(u64, usize)],
    ) -> Result<ReadGrant, CacheError> {
        Ok(ReadGrant {
            grant: self.acquire(handle, ranges, Mode::ReadCached, Duration::ZERO, None)?,
        })
    }

    /// Whether every unit covering `ranges` of `handle` is cached, filled and free of writers
    /// now (nothing is taken or counted).
    pub fn peek_cached(&self, handle: u64, ranges: &[(u64, usize)]) -> bool {
        self.peek(handle, ranges, false, None)
    }

    /// [`Cache::peek_cached`] for blocks a client offers to demote: if they are cached, the
    /// units evictable now go to `end`, where the demote would have put them (the client is
    /// dropping its copy, so the refused blocks must not stay where a send left them).
    pub fn refuse_cached(&self, handle: u64, ranges: &[(u64, usize)], end: End) -> bool {
        self.peek(handle, ranges, false, Some(end))
    }

    /// [`Cache::peek_cached`], and every one of those units lies in the Ready region (a hint
    /// for serving from its registration, never a promise).
    pub fn peek_ready(&self, handle: u64, ranges: &[(u64, usize)]) -> bool {
        self.peek(handle, ranges, true, None)
    }

    /// The Ready region, kept mapped while the answer is held; `None` without one.
    pub fn ready_memory(&self) -> Option<ReadyMemory> {
        self.shared.ready.clone().map(ReadyMemory)
    }

    fn peek(
        &self,
        handle: u64,
        ranges: &[(u64, usize)],
        ready_only: bool,
        place: Option<End>,
    ) -> bool {
        let mut state = self.lock();
        let unit_bytes = state
            .unit_bytes
            .get(&handle)
            .copied()
            .unwrap_or(self.shared.config.default_unit_bytes);
        let max_units = self.shared.config.budget_bytes / unit_bytes;
        let Ok(Some(units)) = Self::covered_units(handle, ranges, unit_bytes, max_units) else {
            return false;
        };
        let ids: Option<Vec<UnitId>> = units
            .keys()
            .map(|&index| {
                let id = *state.index.get(&UnitKey { handle, index })?;
                let unit = state.unit(id);
                (unit.filled && !unit.writer && (!ready_only || unit.buffer.is_ready()))
                    .then_some(id)
            })
            .collect();
        let Some(ids) = ids else {
            return false;
        };
        if let Some(end) = place {
            for id in ids {
                state.place_evictable(id, end);
            }
        }
        true
    }

    /// Grant exclusive access to every unit covering any of `ranges` of `handle`, as
    /// [`Cache::grant_read_ranges`].
    pub fn grant_write_ranges(
        &self,
        handle: u64,
        ranges: &[(u64, usize)],
        wait: Duration,
    ) -> Result<WriteGrant, CacheError> {
        Ok(WriteGrant {
            grant: self.acquire(handle, ranges, Mode::Write, wait, None)?,
        })
    }

    /// [`Cache::grant_write_ranges`] for a landed write: a missing unit that `landing`
    /// holds whole is made of the landed buffer, and a cached one is not copied for a pinned
    /// reply (the landed buffer replaces it); [`WriteGrant::install`] then swaps them in.
    pub fn grant_write_landed(
        &self,
        landing: &Landing,
        ranges: &[(u64, usize)],
        wait: Duration,
    ) -> Result<WriteGrant, CacheError> {
        let handle = landing.handle();
        Ok(WriteGrant {
            grant: self.acquire(handle, ranges, Mode::Write, wait, Some(landing))?,
        })
    }

    /// The units `ranges` touch, ascending, each with the span of it they cover and whether
    /// one range covers it whole; `None` past `max_units` units.
    fn covered_units(
        handle: u64,
        ranges: &[(u64, usize)],
        unit_bytes: usize,
        max_units: usize,
    ) -> Result<Option<CoveredUnits>, CacheError> {
        let unit_bytes_u64 = unit_bytes as u64;
        let mut units = CoveredUnits::new();
        for &(offset, len) in ranges.iter().filter(|(_, len)| *len > 0) {
            let end = u64::try_from(len)
                .ok()
                .and_then(|l| offset.checked_add(l))
                .ok_or(CacheError::RangeOverflow {
                    handle,
                    offset,
                    len,
                })?;
            for index in offset / unit_bytes_u64..=(end - 1) / unit_bytes_u64 {
                let unit_start = index * unit_bytes_u64;
                // Both ends lie within this unit, so the differences fit in `unit_bytes`.
                let start = usize::try_from(offset.max(unit_start) - unit_start).unwrap_or(0);
                let stop = usize::try_from(end.min(unit_start + unit_bytes_u64) - unit_start)
                    .unwrap_or(unit_bytes);
                let whole = start == 0 && stop == unit_bytes;
                units
                    .entry(index)
                    .and_modify(|(span, covered)| {
                        *span = span.start.min(start)..span.end.max(stop);
                        *covered |= whole;
                    })
                    .or_insert((start..stop, whole));
                if units.len() > max_units {
                    return Ok(None);
                }
            }
        }
        Ok(Some(units))
    }

    fn acquire(
        &self,
        handle: u64,
        ranges: &[(u64, usize)],
        mode: Mode,
        wait: Duration,
        landing: Option<&Landing>,
    ) -> Result<Grant, CacheError> {
        let config = &self.shared.config;
        let mut state = self.lock();
        let unit_bytes = state.unit_bytes_of(handle, config.default_unit_bytes)?;
        let (offset, len) = ranges.first().copied().unwrap_or((0, 0));
        let mut grant = Grant {
            cache: self.clone(),
            offset,
            len,
            held: Vec::new(),
        };
        let max_units = config.budget_bytes / unit_bytes;
        let Some(units) = Self::covered_units(handle, ranges, unit_bytes, max_units)? else {
            return Err(CacheError::GrantTooLarge {
                handle,
                offset,
                len: ranges.iter().map(|&(_, len)| len).sum(),
                needed_bytes: (max_units + 1) * unit_bytes,
                budget_bytes: config.budget_bytes,
            });
        };
        if units.is_empty() {
            return Ok(grant);
        }
        let started = Instant::now();
        let deadline = started + wait.min(config.grant_wait);
        grant.held.reserve(units.len());
        for (index, (range, whole)) in units {
            let key = UnitKey { handle, index };
            let donor = landing
                .filter(|_| whole)
                .and_then(|landing| landing.donor(index, unit_bytes));
            let mut waited = false;
            loop {
                let taken = if let Some(&id) = state.index.get(&key) {
                    state.take_cached(id, mode, donor.is_some())
                } else if mode == Mode::ReadCached {
                    // Unlocked first: dropping `grant` then releases what it took so far.
                    drop(state);
                    return Err(CacheError::NotCached {
                        handle,
                        unit_index: index,
                    });
                } else if state.make_room(unit_bytes, config.budget_bytes) {
                    // A write covering the unit whole fills every byte before it counts.
                    let zeroed = !(mode == Mode::Write && whole);
                    let ready = self.shared.ready.as_ref();
                    let (id, buffer) = state.insert_unit(key, unit_bytes, ready, donor, zeroed);
                    state.misses += 1;
                    Some((id, buffer, false, true))
                } else {
                    None
                };
                if let Some((id, buffer, filled, exclusive)) = taken {
                    grant.held.push(Held {
                        id,
                        key,
                        buffer,
                        range: range.clone(),
                        whole,
                        exclusive,
                        filled,
                        written: None,
                    });
                    break;
                }
                if mode == Mode::ReadCached {
                    drop(state);
                    return Err(CacheError::NotCached {
                        handle,
                        unit_index: index,
                    });
                }
                if !waited {
                    waited = true;
                    state.grant_waits += 1;
                }
                let full = !state.index.contains_key(&key);
                if let Some(woken) = self.wait(state, deadline) {
                    state = woken;
                    continue;
                }
                let waited_ms = millis(started.elapsed());
                let error = if full {
                    CacheError::CacheFull {
                        budget_bytes: config.budget_bytes,
                        dirty_bytes: self.lock().dirty_bytes,
                        waited_ms,
                    }
                } else {
                    CacheError::WaitTimeout {
                        handle,
                        unit_index: index,
                        waited_ms,
                    }
                };
                // Dropping `grant` releases what it took so far.
                return Err(error);
            }
        }
        if mode == Mode::ReadCached {
            state.hits += grant.held.len() as u64;
        }
        Ok(grant)
    }

    /// Moves the cached units covering `ranges` of `handle` that nobody holds to `end` of
    /// the replacement order (DEMOTE: blocks just sent to a caching client go to the least
    /// recent end, so the two caches hold different blocks). Never waits.
    pub fn place(&self, handle: u64, ranges: &[(u64, usize)], end: End) {
        let mut state = self.lock();
        let Some(&unit_bytes) = state.unit_bytes.get(&handle) else {
            return;
        };
        let Ok(Some(units)) = Self::covered_units(handle, ranges, unit_bytes, usize::MAX) else {
            return;
        };
        for index in units.keys() {
            let Some(&id) = state.index.get(&UnitKey {
                handle,
                index: *index,
            }) else {
                continue;
            };
            if state.unit(id).evictable() {
                state.policy.remove(id);
                state.policy.insert(id, end);
            }
        }
    }

    /// Caches `bytes`, the clean contents of object `handle` from `offset` on (as storage
    /// holds them), unit by unit at `end` of the replacement order (a DEMOTE inserts at the
    /// most recent end): each whole unit they cover that is not cached, if there is room
    /// without waiting (clean units nobody holds are evicted for it). Never waits, never
    /// touches a cached unit. Returns how many units it inserted.
    pub fn insert_clean(
        &self,
        handle: u64,
        offset: u64,
        bytes: &[u8],
        end: End,
    ) -> Result<usize, CacheError> {
        let config = &self.shared.config;
        let mut state = self.lock();
        let unit_bytes = state.unit_bytes_of(handle, config.default_unit_bytes)?;
        let unit = unit_bytes as u64;
        let skip = usize::try_from(offset.next_multiple_of(unit) - offset).unwrap_or(usize::MAX);
        let mut inserted = 0;
        for (at, chunk) in bytes
            .get(skip..)
            .unwrap_or_default()
            .chunks_exact(unit_bytes)
            .enumerate()
        {
            let index = (offset + skip as u64) / unit + at as u64;
            let key = UnitKey { handle, index };
            let ready = self.shared.ready.as_ref();
            let made = state.insert_demoted(key, (unit_bytes, config.budget_bytes), end, |state| {
                let (id, buffer) = state.insert_unit(key, unit_bytes, ready, None, false);
                // SAFETY: the unit was just made, held by this call alone (`writer`), under
                // the lock; the buffer is `unit_bytes` long, as is `chunk`.
                unsafe {
                    std::ptr::copy_nonoverlapping(chunk.as_ptr(), buffer.start(), unit_bytes);
                };
                id
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

    /// Hand back dirty units of `handle` (or of every object) for write-back, in ascending
    /// order, until they hold at least `limit_bytes` dirty bytes (at least one unit if any).
    /// Units held by a writer now are skipped; the ones taken stay shared-readable, and no
    /// write can change them until the grant is dropped.
    pub fn take_dirty(&self, handle: Option<u64>, limit_bytes: usize) -> DirtyGrant {
        let mut state = self.lock();
        let keys: Vec<UnitKey> = match handle {
            Some(handle) => state
                .dirty
                .range(
                    UnitKey { handle, index: 0 }..=UnitKey {
                        handle,
                        index: u64::MAX,
                    },
                )
                .copied()
                .collect(),
            None => state.dirty.iter().copied().collect(),
        };
        let mut grant = Grant {
            cache: self.clone(),
            offset: 0,
            len: 0,
            held: Vec::new(),
        };
        let mut taken_bytes = 0;
        for key in keys {
            if taken_bytes >= limit_bytes && !grant.held.is_empty() {
                break;
            }
            let id = state.index[&key];
            let unit = state.unit_mut(id);
            if unit.writer {
                continue;
            }
            unit.readers += 1;
            let range = unit
                .dirty
                .clone()
                .expect("units in the dirty set are dirty");
            taken_bytes += range.len();
            let buffer = Arc::clone(&unit.buffer);
            grant.held.push(Held {
                id,
                key,
                buffer,
                range,
                whole: false,
                exclusive: false,
                filled: true,
                written: None,
            });
        }
        DirtyGrant { grant }
    }

    /// Drop every unit of `handle`, dirty or not (the object was removed or truncated),
    /// waiting for its grants; forget its unit size. Returns how many units were dropped.
    pub fn invalidate(&self, handle: u64) -> Result<usize, CacheError> {
        let started = Instant::now();
        let deadline = started + self.shared.config.grant_wait;
        let mut state = self.lock();
        let mut dropped = 0;
        loop {
            let units: Vec<(UnitKey, UnitId)> = state
                .index
                .range(
                    UnitKey { handle, index: 0 }..=UnitKey {
                        handle,
                        index: u64::MAX,
                    },
                )
                .map(|(&key, &id)| (key, id))
                .collect();
            let mut busy = None;
            for (key, id) in units {
                if state.unit(id).granted() {
                    busy.get_or_insert(key.index);
                } else {
                    state.drop_unit(id);
                    dropped += 1;
                }
            }
            let Some(unit_index) = busy else {
                state.unit_bytes.remove(&handle);
                drop(state);
                self.shared.released.notify_all();
                return Ok(dropped);
            };
            state = self.wait(state, deadline).ok_or(CacheError::WaitTimeout {
                handle,
                unit_index,
                waited_ms: millis(started.elapsed()),
            })?;
        }
    }

    /// Bytes written under grants and not yet marked clean.
    pub fn dirty_bytes(&self) -> usize {
        self.lock().dirty_bytes
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        let state = self.lock();
        CacheStats {
            hits: state.hits,
            misses: state.misses,
            evictions: state.evictions,
            grant_waits: state.grant_waits,
            dirty_bytes: state.dirty_bytes,
            units_in_use: state.index.len(),
            bytes_in_use: state.used_bytes,
            budget_bytes: self.shared.config.budget_bytes,
            ready_units_made: state.ready_units_made,
            raw_units_made: state.raw_units_made,
            units_landed: state.units_landed,
            units_demoted: state.units_demoted,
            ready_slots_taken: self.shared.ready.as_ref().map_or(0, |arena| arena.taken()),
            ready_bytes: self.shared.ready.as_ref().map_or(0, |arena| arena.bytes()),
            ready_registrar: self
                .shared
                .ready
                .as_ref()
                .map_or_else(String::new, |arena| arena.registrars()),
        }
    }

    /// Assert the cache's internal invariants (tests only).
    #[cfg(test)]
    pub(crate) fn check_consistency(&self) {
        self.lock()
            .check_consistency(self.shared.config.budget_bytes);
    }
}
