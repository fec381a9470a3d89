//! What went wrong in the cache: [`CacheError`], each message naming the value, object or
//! limit involved.

use std::time::Duration;

use super::{GRANT_WAIT_MAX, OBJECTS_MAX, UNIT_BYTES_MAX, UNIT_BYTES_MIN};

pub(super) fn check_unit_bytes(unit_bytes: usize) -> Result<(), CacheError> {
    if unit_bytes.is_power_of_two() && (UNIT_BYTES_MIN..=UNIT_BYTES_MAX).contains(&unit_bytes) {
        Ok(())
    } else {
        Err(CacheError::UnitBytes { unit_bytes })
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
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
