//! What a [`Registry`](crate::Registry) is asked to do and within which limits: the
//! [`Policy`] (grouping of misses, caching, the cache's capacity, the FMRD thread, unmap
//! watching) and the limits every registry and its cache hold to. A leaf: the registry and
//! its cache both read it, and it reads neither.

use crate::error::RegError;

/// Most segments in one acquire.
pub const ACQUIRE_SEGMENTS_MAX: usize = 1 << 16;
/// Largest `CacheCapacity::entries_max` a policy may ask for.
pub const CACHE_ENTRIES_MAX: usize = 1 << 16;
/// Default `CacheCapacity::entries_max`.
pub const CACHE_ENTRIES_DEFAULT: usize = 4096;
/// Default `CacheCapacity::bytes_max`: 1 GiB.
pub const CACHE_BYTES_DEFAULT: usize = 1 << 30;
/// FMRD deregisters evicted entries in batches of this many.
pub const FMRD_BATCH: usize = 32;
/// Batches waiting for the FMRD thread at most; past this the acquiring thread deregisters
/// the batch itself (back-pressure rather than an unbounded queue).
pub const FMRD_BATCHES_QUEUED_MAX: usize = 4;
/// Most arenas registered at once.
pub const ARENAS_MAX: usize = 64;

const _: () = assert!(FMRD_BATCH >= 1 && FMRD_BATCH <= CACHE_ENTRIES_MAX);
const _: () = assert!(CACHE_ENTRIES_DEFAULT <= CACHE_ENTRIES_MAX);
// An acquire of individually registered segments fits a cache of the largest size.
const _: () = assert!(ACQUIRE_SEGMENTS_MAX <= CACHE_ENTRIES_MAX);

/// How the misses of one acquire are registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// One registration per distinct segment.
    Individual,
    /// Optimistic Group Registration.
    Ogr,
}

/// What happens to a registration once its guard is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caching {
    /// Deregistered at once ("dynamic").
    None,
    /// Cached; an evicted entry is deregistered at once.
    PinDown,
    /// Cached; evicted entries are queued and deregistered [`FMRD_BATCH`] at a time, on the
    /// acquiring thread when the queue fills, or by a thread of the registry
    /// ([`Policy::fmrd_thread`]).
    Fmrd,
}

impl Grouping {
    /// "individual" or "ogr".
    pub fn name(self) -> &'static str {
        match self {
            Self::Individual => "individual",
            Self::Ogr => "ogr",
        }
    }
}

impl Caching {
    /// "none", "pin-down" or "fmrd".
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::PinDown => "pin-down",
            Self::Fmrd => "fmrd",
        }
    }
}

/// The cache's limits; an entry is evicted when adding one would pass either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheCapacity {
    /// Registrations cached at once, idle or in use (1..=[`CACHE_ENTRIES_MAX`]).
    pub entries_max: usize,
    /// Bytes those cover at once (at least 1).
    pub bytes_max: usize,
}

impl Default for CacheCapacity {
    fn default() -> Self {
        Self {
            entries_max: CACHE_ENTRIES_DEFAULT,
            bytes_max: CACHE_BYTES_DEFAULT,
        }
    }
}

/// How a [`Registry`](crate::Registry) registers and keeps registrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How misses are grouped.
    pub grouping: Grouping,
    /// What is cached.
    pub caching: Caching,
    /// The cache's limits (unused without a cache).
    pub capacity: CacheCapacity,
    /// FMRD hands each full batch to a deregistration thread (the default) instead of
    /// deregistering it on the acquiring thread. The thread overlaps deregistration with the
    /// transfers; with the `pin` registrar and the `local` backend its `munlock`s still
    /// contend for the client's address-space lock with the next `mlock` and the server's
    /// `process_vm_readv`, yet measured at least as fast as inline batches and the pin-down
    /// cache on a quiet machine (the `fmrd` benchmark runs both ways: at 20 % reuse the
    /// thread was ahead of inline batches in four of five runs). With both cores busy with
    /// other work, inline batches were ahead instead.
    pub fmrd_thread: bool,
    /// Cached registrations are watched for unmaps by the process's [`Monitor`](crate::Monitor) (the
    /// default), so one over memory unmapped, discarded or moved since is never returned; a
    /// registration whose memory cannot be watched is used once and not cached. Where the
    /// kernel offers no monitor, caching goes on unwatched and says so once in the log.
    pub watch_unmaps: bool,
}

impl Policy {
    /// `grouping` and `caching` with the default capacity.
    pub fn new(grouping: Grouping, caching: Caching) -> Self {
        Self {
            grouping,
            caching,
            capacity: CacheCapacity::default(),
            fmrd_thread: true,
            watch_unmaps: true,
        }
    }

    /// The same policy with cached registrations watched for unmaps (`true`, the default) or
    /// not (then the caller must [`Registry::invalidate`](crate::Registry::invalidate) before unmapping).
    #[must_use]
    pub fn with_watch_unmaps(mut self, watch_unmaps: bool) -> Self {
        self.watch_unmaps = watch_unmaps;
        self
    }

    /// The same policy with FMRD batches deregistered by a thread of the registry (`true`, the
    /// default) or on the acquiring thread (`false`).
    #[must_use]
    pub fn with_fmrd_thread(mut self, fmrd_thread: bool) -> Self {
        self.fmrd_thread = fmrd_thread;
        self
    }

    /// The same policy with at most `entries_max` cached registrations.
    #[must_use]
    pub fn with_entries_max(mut self, entries_max: usize) -> Self {
        self.capacity.entries_max = entries_max;
        self
    }

    /// The same policy with at most `bytes_max` cached bytes.
    #[must_use]
    pub fn with_bytes_max(mut self, bytes_max: usize) -> Self {
        self.capacity.bytes_max = bytes_max;
        self
    }

    pub(crate) fn check(&self) -> Result<(), RegError> {
        let entries = self.capacity.entries_max;
        if entries == 0 || entries > CACHE_ENTRIES_MAX {
            return Err(RegError::Policy(format!(
                "CacheCapacity::entries_max is {entries}; it must be 1..={CACHE_ENTRIES_MAX} \
                 (CACHE_ENTRIES_MAX)"
            )));
        }
        if self.capacity.bytes_max == 0 {
            return Err(RegError::Policy(
                "CacheCapacity::bytes_max is 0; it must be at least 1".to_owned(),
            ));
        }
        Ok(())
    }
}

impl Default for Policy {
    /// OGR with FMRD: what the transport should use.
    fn default() -> Self {
        Self::new(Grouping::Ogr, Caching::Fmrd)
    }
}
