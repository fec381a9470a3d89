//! The one error type of the registration module.
//!
//! Every failure a caller can see comes back as a [`RegError`] that names the range, the
//! errno and the limit involved, so a refused registration in a log says what to change
//! (`ulimit -l`, a cache capacity, the segment list) without a debugger.

use crate::segment::Segment;

/// A registration, deregistration, cache or hole-query failure.
#[derive(Debug, thiserror::Error)]
pub enum RegError {
    /// A segment of an acquire was empty; registrations cover at least one byte.
    #[error("segment {index} of the list is empty; every segment must hold at least one byte")]
    EmptySegment {
        /// Its index in the list.
        index: usize,
    },
    /// A segment wraps the end of the address space.
    #[error("segment at {address:#x} of {length} bytes wraps the end of the address space")]
    AddressOverflow {
        /// Its first byte.
        address: usize,
        /// Its length.
        length: usize,
    },
    /// More segments in one acquire than `ACQUIRE_SEGMENTS_MAX`.
    #[error("{count} segments in one acquire; at most ACQUIRE_SEGMENTS_MAX = {max}")]
    TooManySegments {
        /// Segments given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Part of the range is not mapped in this process.
    #[error("cannot register {segment}: {hole} is not mapped ({source})")]
    Unmapped {
        /// The range asked for.
        segment: Segment,
        /// An unmapped part of it: the first unmapped page (pin registrar), or the whole hole
        /// before the first mapped run holding the segment (OGR's hole query).
        hole: Segment,
        /// The errno the kernel gave.
        source: std::io::Error,
    },
    /// The kernel refused to lock more memory: RLIMIT_MEMLOCK without CAP_IPC_LOCK.
    #[error(
        "cannot lock {segment}: RLIMIT_MEMLOCK is {limit} and this process lacks CAP_IPC_LOCK \
         (raise `ulimit -l`, or register less: a smaller cache capacity) ({source})"
    )]
    MemlockLimit {
        /// The range asked for.
        segment: Segment,
        /// RLIMIT_MEMLOCK as `getrlimit` reports it, already formatted ("8388608 bytes",
        /// "unlimited").
        limit: String,
        /// The errno the kernel gave (ENOMEM, EAGAIN or EPERM).
        source: std::io::Error,
    },
    /// A system call on a range failed for another reason.
    #[error("{operation} on {segment}: {source}")]
    Os {
        /// The call ("mlock", "munlock", "mincore", ...).
        operation: &'static str,
        /// The range it was given.
        segment: Segment,
        /// Its errno.
        source: std::io::Error,
    },
    /// A registrar other than the built-in ones failed (the ofi registrar reports through
    /// this).
    #[error("registrar {registrar}: {operation} of {segment} failed: {message}")]
    Registrar {
        /// The registrar's name.
        registrar: String,
        /// "register" or "deregister".
        operation: &'static str,
        /// The range.
        segment: Segment,
        /// What the registrar reported.
        message: String,
    },
    /// A hole query found more mapped runs in one range than `HOLE_RUNS_MAX`.
    #[error("{segment} splits into more than HOLE_RUNS_MAX = {max} mapped runs")]
    TooManyRuns {
        /// The range queried.
        segment: Segment,
        /// The limit.
        max: usize,
    },
    /// A hole query read `/proc/self/maps` and could not.
    #[error("cannot read /proc/self/maps: {0}")]
    ProcMaps(std::io::Error),
    /// An acquire needs more registrations held at once than the cache may hold.
    #[error(
        "the registration cache holds at most {max} {unit} ({limit}), and {needed} {unit} \
         are needed by registrations in use"
    )]
    CacheFull {
        /// Which limit: `CacheCapacity::entries_max` or `CacheCapacity::bytes_max`.
        limit: &'static str,
        /// "entries" or "bytes".
        unit: &'static str,
        /// Its value.
        max: usize,
        /// What would have been held.
        needed: usize,
    },
    /// A policy's capacity is zero or above its limit.
    #[error("invalid registration policy: {0}")]
    Policy(String),
    /// More arenas than `ARENAS_MAX`.
    #[error("at most ARENAS_MAX = {max} arenas may be registered at once")]
    TooManyArenas {
        /// The limit.
        max: usize,
    },
    /// An arena id that is not (or no longer) registered.
    #[error("arena {0} is not registered (deregistered or invalidated)")]
    UnknownArena(u64),
    /// An arena still held by an acquire cannot be deregistered.
    #[error("arena {id} is in use by {holders} acquire(s); release them first")]
    ArenaInUse {
        /// The arena.
        id: u64,
        /// Guards holding it.
        holders: u32,
    },
    /// The FMRD deregistration thread could not be started.
    #[error("cannot start the FMRD deregistration thread: {0}")]
    Thread(std::io::Error),
}
