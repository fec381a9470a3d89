//! Counters of registration work, and every timed call into a registrar.
//!
//! The benchmarks and the lead's transport report what registration cost (seed 000 Table 3
//! reports registrations and their µs per case), so each registrar call the registry makes —
//! from an acquire, an eviction, an invalidation or the FMRD thread — goes through
//! [`Counters`], which times it and counts it. Counters are atomics: the FMRD thread and any
//! number of acquiring threads update them without the cache lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::RegError;
use crate::holes::{mapped_runs, HoleQuery};
use crate::registrar::{RegHandle, Registrar};
use crate::segment::Segment;

/// What a [`crate::Registry`] has done since it was made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegStats {
    /// Successful registrar registrations.
    pub registrations: u64,
    /// Deregistrations handed to the registrar (one per registration, batched or not).
    pub deregistrations: u64,
    /// µs spent in registrar registrations, failed optimistic attempts included.
    pub registration_us: f64,
    /// µs spent in registrar deregistrations, on any thread.
    pub deregistration_us: f64,
    /// Of `deregistration_us`, the µs the FMRD thread spent (off the acquiring threads).
    pub background_deregistration_us: f64,
    /// Segments served by an existing registration (cache entry or arena), counted for
    /// acquires that succeeded.
    pub cache_hits: u64,
    /// Of `cache_hits`, segments served by an arena.
    pub arena_hits: u64,
    /// Of `cache_hits`, segments served by an entry revived from the FMRD queue.
    pub revivals: u64,
    /// Segments that needed a new registration, counted for acquires that succeeded.
    pub cache_misses: u64,
    /// Cache entries evicted to make room (deregistered at once or queued).
    pub evictions: u64,
    /// Deregistration batches (FMRD).
    pub deregistration_batches: u64,
    /// OGR group registrations the registrar refused.
    pub failed_optimistic: u64,
    /// Hole queries OGR made after a refusal.
    pub hole_queries: u64,
    /// µs spent in hole queries.
    pub hole_query_us: f64,
    /// Registrations removed by `invalidate`.
    pub invalidated: u64,
    /// Registrations removed because the unmap monitor saw their memory unmapped, discarded
    /// or moved.
    pub unmapped: u64,
    /// Registrations used once instead of cached because their memory could not be watched.
    pub unwatched: u64,
    /// Deregistrations that failed (logged; the registration is forgotten regardless).
    pub deregistration_failures: u64,
    /// Registrations in the cache now, idle or in use (arenas and the FMRD queue excluded).
    pub cached_entries: usize,
    /// Bytes those cover.
    pub cached_bytes: usize,
    /// Registrations waiting in the FMRD queue now.
    pub queued: usize,
    /// Arenas registered now.
    pub arenas: usize,
}

/// The atomic counters behind [`RegStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub registrations: AtomicU64,
    pub deregistrations: AtomicU64,
    pub registration_ns: AtomicU64,
    pub deregistration_ns: AtomicU64,
    pub background_deregistration_ns: AtomicU64,
    pub cache_hits: AtomicU64,
    pub arena_hits: AtomicU64,
    pub revivals: AtomicU64,
    pub cache_misses: AtomicU64,
    pub evictions: AtomicU64,
    pub deregistration_batches: AtomicU64,
    pub failed_optimistic: AtomicU64,
    pub hole_queries: AtomicU64,
    pub hole_query_ns: AtomicU64,
    pub invalidated: AtomicU64,
    pub unmapped: AtomicU64,
    pub unwatched: AtomicU64,
    pub deregistration_failures: AtomicU64,
}

fn nanos_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn us(nanos: &AtomicU64) -> f64 {
    nanos.load(Ordering::Relaxed) as f64 / 1e3
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    /// One timed registration.
    pub fn register(
        &self,
        registrar: &dyn Registrar,
        segment: Segment,
    ) -> Result<RegHandle, RegError> {
        let started = Instant::now();
        let result = registrar.register(segment);
        bump(&self.registration_ns, nanos_since(started));
        if result.is_ok() {
            bump(&self.registrations, 1);
        }
        result
    }

    /// Timed deregistrations of `handles` in one batch call (one plain call for one handle).
    /// Failures are logged and counted, never returned: the registration is forgotten either
    /// way, and the caller has nothing better to do with it. Returns the first failure for
    /// callers that report it.
    pub fn deregister(
        &self,
        registrar: &dyn Registrar,
        mut handles: Vec<RegHandle>,
        background: bool,
    ) -> Option<RegError> {
        if handles.is_empty() {
            return None;
        }
        let count = handles.len() as u64;
        let started = Instant::now();
        let result = if handles.len() == 1 {
            registrar.deregister(handles.pop().expect("one handle"))
        } else {
            bump(&self.deregistration_batches, 1);
            registrar.deregister_batch(handles)
        };
        let nanos = nanos_since(started);
        bump(&self.deregistration_ns, nanos);
        if background {
            bump(&self.background_deregistration_ns, nanos);
        }
        bump(&self.deregistrations, count);
        match result {
            Ok(()) => None,
            Err(err) => {
                bump(&self.deregistration_failures, 1);
                tracing::warn!(registrar = registrar.name(), error = %err, "deregistration failed");
                Some(err)
            }
        }
    }

    /// One timed hole query.
    pub fn query_holes(&self, segment: Segment) -> Result<Vec<Segment>, RegError> {
        let started = Instant::now();
        let result = mapped_runs(segment, HoleQuery::Mincore);
        bump(&self.hole_query_ns, nanos_since(started));
        bump(&self.hole_queries, 1);
        result
    }

    /// The counters now; the gauges are the caller's.
    pub fn snapshot(&self) -> RegStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RegStats {
            registrations: load(&self.registrations),
            deregistrations: load(&self.deregistrations),
            registration_us: us(&self.registration_ns),
            deregistration_us: us(&self.deregistration_ns),
            background_deregistration_us: us(&self.background_deregistration_ns),
            cache_hits: load(&self.cache_hits),
            arena_hits: load(&self.arena_hits),
            revivals: load(&self.revivals),
            cache_misses: load(&self.cache_misses),
            evictions: load(&self.evictions),
            deregistration_batches: load(&self.deregistration_batches),
            failed_optimistic: load(&self.failed_optimistic),
            hole_queries: load(&self.hole_queries),
            hole_query_us: us(&self.hole_query_ns),
            invalidated: load(&self.invalidated),
            unmapped: load(&self.unmapped),
            unwatched: load(&self.unwatched),
            deregistration_failures: load(&self.deregistration_failures),
            ..RegStats::default()
        }
    }
}
