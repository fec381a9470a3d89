//! Running totals of each direction of storage requests, for `ServerStats` and the process's
//! metrics recorder.

use std::sync::atomic::{AtomicU64, Ordering};

use tessera_proto::metrics::{
    STORAGE_BYTES_MOVED, STORAGE_BYTES_WANTED, STORAGE_CALLS, STORAGE_PIECES, STORAGE_PLANS,
    STORAGE_REQUESTS,
};
use tessera_proto::{StorageCounters, StoragePlan};

use super::Outcome;

/// Running totals of one direction, for `ServerStats`; each record is also sent to the
/// process's metrics recorder (`tessera_storage_*`, labelled with the direction).
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// `read` or `write`: the `direction` label of the metrics.
    direction: &'static str,
    requests: AtomicU64,
    pieces: AtomicU64,
    calls: AtomicU64,
    bytes_wanted: AtomicU64,
    bytes_storage: AtomicU64,
    per_piece: AtomicU64,
    batched: AtomicU64,
    sieve: AtomicU64,
    mapped: AtomicU64,
}

impl Counters {
    pub(super) fn new(direction: &'static str) -> Self {
        Self {
            direction,
            ..Self::default()
        }
    }

    /// Sends one request's figures to the metrics recorder (a no-op without one).
    pub(super) fn export(
        &self,
        pieces: usize,
        wanted: u64,
        calls: u32,
        moved: u64,
        plan: &'static str,
    ) {
        let direction = self.direction;
        metrics::counter!(STORAGE_REQUESTS, "direction" => direction).increment(1);
        metrics::counter!(STORAGE_PIECES, "direction" => direction).increment(pieces as u64);
        metrics::counter!(STORAGE_CALLS, "direction" => direction).increment(u64::from(calls));
        metrics::counter!(STORAGE_BYTES_WANTED, "direction" => direction).increment(wanted);
        metrics::counter!(STORAGE_BYTES_MOVED, "direction" => direction).increment(moved);
        metrics::counter!(STORAGE_PLANS, "direction" => direction, "plan" => plan).increment(1);
    }

    pub(super) fn record(&self, pieces: usize, wanted: u64, outcome: &Outcome) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.pieces.fetch_add(pieces as u64, Ordering::Relaxed);
        self.calls
            .fetch_add(u64::from(outcome.calls), Ordering::Relaxed);
        self.bytes_wanted.fetch_add(wanted, Ordering::Relaxed);
        self.bytes_storage
            .fetch_add(outcome.storage_bytes, Ordering::Relaxed);
        let plan = match outcome.plan {
            StoragePlan::Batched => &self.batched,
            StoragePlan::Sieve => &self.sieve,
            StoragePlan::PerPiece | StoragePlan::Auto => &self.per_piece,
        };
        plan.fetch_add(1, Ordering::Relaxed);
        let plan = match outcome.plan {
            StoragePlan::Auto => StoragePlan::PerPiece.name(),
            plan => plan.name(),
        };
        self.export(pieces, wanted, outcome.calls, outcome.storage_bytes, plan);
    }

    /// A read served from a mapping: no storage call, `mapped` bytes of the object in it.
    pub(super) fn record_mapped(&self, pieces: usize, wanted: u64, mapped: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.pieces.fetch_add(pieces as u64, Ordering::Relaxed);
        self.bytes_wanted.fetch_add(wanted, Ordering::Relaxed);
        self.bytes_storage.fetch_add(mapped, Ordering::Relaxed);
        self.mapped.fetch_add(1, Ordering::Relaxed);
        self.export(pieces, wanted, 0, mapped, "mapped");
    }

    pub(super) fn snapshot(&self) -> StorageCounters {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StorageCounters {
            requests: load(&self.requests),
            pieces: load(&self.pieces),
            calls: load(&self.calls),
            bytes_wanted: load(&self.bytes_wanted),
            bytes_storage: load(&self.bytes_storage),
            per_piece: load(&self.per_piece),
            batched: load(&self.batched),
            sieve: load(&self.sieve),
            mapped: load(&self.mapped),
        }
    }
}
