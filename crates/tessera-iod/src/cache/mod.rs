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
mod landing;
mod ready;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IoSliceMut;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use buffer::UnitBuffer;
pub use landing::{Landing, Part};
use ready::ReadyArena;
pub use ready::READY_REGISTRATIONS_MAX;
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

fn check_unit_bytes(unit_bytes: usize) -> Result<(), CacheError> {
    if unit_bytes.is_power_of_two() && (UNIT_BYTES_MIN..=UNIT_BYTES_MAX).contains(&unit_bytes) {
        Ok(())
    } else {
        Err(CacheError::UnitBytes { unit_bytes })
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl CacheError {
    /// Whether the grant failed only because it would have had to wait (a conflicting grant,
    /// or no room): with more time it may succeed.
    pub fn would_wait(&self) -> bool {
        matches!(
            self,
            Self::WaitTimeout { .. } | Self::CacheFull { .. } | Self::NotCached { .. }
        )
    }
}

/// What went wrong in the cache; every message names the value, object or limit involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// A unit size outside the limits.
    #[error(
        "cache unit of {unit_bytes} bytes is not a power of two from {UNIT_BYTES_MIN} to {UNIT_BYTES_MAX} bytes"
    )]
    UnitBytes {
        /// The size asked for.
        unit_bytes: usize,
    },
    /// A budget below one largest unit.
    #[error(
        "cache budget of {budget_bytes} bytes is below one largest unit ({UNIT_BYTES_MAX} bytes)"
    )]
    BudgetTooSmall {
        /// The budget asked for.
        budget_bytes: usize,
    },
    /// A configured wait above [`GRANT_WAIT_MAX`].
    #[error("cache grant wait of {wait_ms} ms exceeds GRANT_WAIT_MAX ({} ms)", GRANT_WAIT_MAX.as_millis())]
    GrantWaitTooLong {
        /// The wait asked for, in milliseconds.
        wait_ms: u64,
    },
    /// [`Cache::set_unit_bytes`] after the object's unit size was fixed.
    #[error("object {handle}: its cache unit is already fixed at {unit_bytes} bytes (asked for {requested})")]
    UnitBytesFixed {
        /// The object.
        handle: u64,
        /// Its unit size.
        unit_bytes: usize,
        /// The size asked for.
        requested: usize,
    },
    /// More objects than [`OBJECTS_MAX`].
    #[error("object {handle}: the cache already knows {OBJECTS_MAX} objects (OBJECTS_MAX)")]
    TooManyObjects {
        /// The object refused.
        handle: u64,
    },
    /// A byte range whose end does not fit in a `u64`.
    #[error("object {handle}: the range of {len} bytes at offset {offset} overflows")]
    RangeOverflow {
        /// The object.
        handle: u64,
        /// The range's first byte.
        offset: u64,
        /// Its length.
        len: usize,
    },
    /// A grant whose units could never fit in the budget at once.
    #[error(
        "object {handle}: {len} bytes at offset {offset} span {needed_bytes} bytes of units, more than the cache budget of {budget_bytes} bytes"
    )]
    GrantTooLarge {
        /// The object.
        handle: u64,
        /// The range's first byte.
        offset: u64,
        /// Its length.
        len: usize,
        /// The bytes of the units covering it.
        needed_bytes: usize,
        /// The cache budget.
        budget_bytes: usize,
    },
    /// A unit stayed held by a conflicting grant for the whole wait.
    #[error(
        "object {handle}: unit {unit_index} stayed held by a conflicting grant for {waited_ms} ms"
    )]
    WaitTimeout {
        /// The object.
        handle: u64,
        /// The unit.
        unit_index: u64,
        /// How long the grant waited.
        waited_ms: u64,
    },
    /// The budget stayed full of dirty or granted units for the whole wait.
    #[error(
        "cache full: its budget of {budget_bytes} bytes stayed taken by dirty or granted units ({dirty_bytes} bytes dirty) for {waited_ms} ms"
    )]
    CacheFull {
        /// The cache budget.
        budget_bytes: usize,
        /// The dirty bytes when the grant gave up.
        dirty_bytes: usize,
        /// How long the grant waited.
        waited_ms: u64,
    },
    /// A unit not cached (or held by a writer) where only cached units were asked for.
    #[error("object {handle}: cache unit {unit_index} is not cached and free now")]
    NotCached {
        /// The object.
        handle: u64,
        /// The unit.
        unit_index: u64,
    },
    /// The Ready region could not be set up.
    #[error("cache Ready region of {bytes} bytes: {reason}")]
    ReadyRefused {
        /// The Ready bytes asked for.
        bytes: usize,
        /// Why (the registrar's error, or a limit).
        reason: String,
    },
    /// A byte outside every unit the grant holds.
    #[error("object {handle}: byte {offset} lies in no unit of the grant")]
    NotGranted {
        /// The object.
        handle: u64,
        /// The byte.
        offset: u64,
    },
    /// Reading, or partly writing, a unit that holds no valid data yet.
    #[error(
        "object {handle}: cache unit {unit_index} holds no data yet; fill it from storage first"
    )]
    Unfilled {
        /// The object.
        handle: u64,
        /// The unit.
        unit_index: u64,
    },
    /// A position past the grant's units.
    #[error("the grant holds {count} units; there is no unit at position {position}")]
    NoSuchUnit {
        /// The position asked for.
        position: usize,
        /// The grant's unit count.
        count: usize,
    },
    /// A copy whose buffer length differs from the grant's range.
    #[error("the grant covers {grant_len} bytes but the buffer has {buffer_len}")]
    LengthMismatch {
        /// The grant's range length.
        grant_len: usize,
        /// The caller's buffer length.
        buffer_len: usize,
    },
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

struct Unit {
    key: UnitKey,
    buffer: Arc<UnitBuffer>,
    readers: u32,
    writer: bool,
    filled: bool,
    /// The bytes written and not yet marked clean, as one span within the unit.
    dirty: Option<Range<usize>>,
}

impl Unit {
    fn granted(&self) -> bool {
        self.writer || self.readers > 0
    }

    fn evictable(&self) -> bool {
        !self.granted() && self.filled && self.dirty.is_none()
    }
}

struct State {
    units: Vec<Option<Unit>>,
    free_ids: Vec<UnitId>,
    index: BTreeMap<UnitKey, UnitId>,
    unit_bytes: HashMap<u64, usize>,
    dirty: BTreeSet<UnitKey>,
    used_bytes: usize,
    dirty_bytes: usize,
    policy: Box<dyn Replacement>,
    hits: u64,
    misses: u64,
    evictions: u64,
    grant_waits: u64,
    ready_units_made: u64,
    raw_units_made: u64,
    units_landed: u64,
    units_demoted: u64,
    /// Heap buffers of evicted units, for landings to receive into (at most
    /// [`SPARE_UNITS_MAX`]): no allocation, zeroing or page faults per landed unit.
    spare: Vec<UnitBuffer>,
}

impl State {
    /// Keeps the buffer of a unit that left the cache for a later landing, if nothing else
    /// holds it, it is heap memory, and fewer than [`SPARE_UNITS_MAX`] are kept.
    fn keep_spare(&mut self, buffer: Arc<UnitBuffer>) {
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
    fn take_spare(&mut self, len: usize) -> Option<UnitBuffer> {
        let at = self.spare.iter().position(|buffer| buffer.len() == len)?;
        Some(self.spare.swap_remove(at))
    }

    fn unit(&self, id: UnitId) -> &Unit {
        self.units[id].as_ref().expect("indexed units exist")
    }

    fn unit_mut(&mut self, id: UnitId) -> &mut Unit {
        self.units[id].as_mut().expect("indexed units exist")
    }

    /// The object's unit size, fixing it to `default` at first use.
    fn unit_bytes_of(&mut self, handle: u64, default: usize) -> Result<usize, CacheError> {
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
    fn place_evictable(&mut self, id: UnitId, end: End) {
        if self.unit(id).evictable() {
            self.policy.remove(id);
            self.policy.insert(id, end);
        }
    }

    /// Evict clean ungranted units until `bytes` more fit in `budget_bytes`.
    fn make_room(&mut self, bytes: usize, budget_bytes: usize) -> bool {
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
    fn insert_demoted(
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
    fn insert_unit(
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
    fn drop_unit(&mut self, id: UnitId) {
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
    fn release(&mut self, held: &Held) {
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
    fn check_consistency(&self, budget_bytes: usize) {
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
struct Held {
    id: UnitId,
    key: UnitKey,
    buffer: Arc<UnitBuffer>,
    /// The bytes of the unit the grant covers (for a dirty grant, the dirty span; for a
    /// grant of several ranges, the span from the first to the last byte they cover).
    range: Range<usize>,
    /// One range of the grant covers the whole unit (a write needs none of its old bytes).
    whole: bool,
    /// Held alone (a write, or a read that must fill a missing unit).
    exclusive: bool,
    /// Holds valid data (as seen by this grant).
    filled: bool,
    /// Bytes this grant wrote, made dirty at release.
    written: Option<Range<usize>>,
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
                    let unit = state.unit(id);
                    let compatible = match mode {
                        Mode::Read | Mode::ReadCached => !unit.writer && unit.filled,
                        Mode::Write => !unit.granted(),
                    };
                    if compatible {
                        if unit.evictable() {
                            state.policy.remove(id);
                        }
                        let unit = state.unit_mut(id);
                        match mode {
                            Mode::Read | Mode::ReadCached => unit.readers += 1,
                            Mode::Write => {
                                unit.writer = true;
                                // A reply still being sent from the unit's bytes (`Pinned`)
                                // keeps them: the write goes to a copy (or to the landed
                                // buffer that will replace them).
                                if donor.is_none() && Arc::strong_count(&unit.buffer) > 1 {
                                    unit.buffer = Arc::new(unit.buffer.duplicate());
                                }
                            }
                        }
                        let (buffer, filled) = (Arc::clone(&unit.buffer), unit.filled);
                        if mode != Mode::ReadCached {
                            state.hits += 1;
                        }
                        Some((id, buffer, filled, mode == Mode::Write))
                    } else {
                        None
                    }
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

/// What the read and write grants share (both dereference to it): the units held, released
/// on drop, and shared access to their bytes.
pub struct Grant {
    cache: Cache,
    offset: u64,
    len: usize,
    held: Vec<Held>,
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
    fn held(&self, position: usize) -> Result<&Held, CacheError> {
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
    fn share_filled(&mut self) {
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
    fn unit_size(&self) -> (u64, Option<u64>) {
        let first = self.held.first();
        (
            first.map_or(0, |held| held.key.handle),
            first.map(|held| held.buffer.len() as u64),
        )
    }

    /// The position of the held unit of index `index`.
    fn position(&self, index: u64) -> Option<usize> {
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
    fn fill_missing<E>(
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
    fn fill_missing_runs<E>(
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
    grant: Grant,
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
    units: Vec<(UnitKey, bool, Arc<UnitBuffer>)>,
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
fn for_each_step<E: From<CacheError>>(
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

fn copy_out(grant: &Grant, target: &mut [u8]) -> Result<(), CacheError> {
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
    grant: Grant,
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
    grant: Grant,
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
