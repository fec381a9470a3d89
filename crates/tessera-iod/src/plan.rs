//! Active Data Sieving: per request, choose how the pieces become storage calls.
//!
//! A request's pieces arrive in data order. Consecutive pieces adjacent in the object are
//! merged into [`Run`]s first (that is free). Then the planner prices three plans with the
//! measured [`CostModel`] (seed 001 §3.3, Table 3.1 and the equations under it) and takes the
//! cheapest, unless the client asked for one plan by name:
//! - **per-piece**: `N × (O + O_seek) + Σ S_i / B(S_i)`;
//! - **batched**: one io_uring submission per `URING_BATCH_ENTRIES_MAX` runs plus a per-entry
//!   cost — a plan the seed did not have;
//! - **sieve**: the runs, sorted by offset, are grouped into chunks of at most
//!   `SIEVE_CHUNK_BYTES_MAX` bytes, a new chunk starting wherever the gap to the next run is
//!   wider than the model's break-even gap. A chunk of one run is served directly; a larger
//!   one costs `T_dsr = O_r + O_seek + S_ds / B_r(S_ds)` plus the copy for reads, and adds
//!   `S_req / B_mem + O_lock + O_w + S_ds / B_w(S_ds) + O_unlock` for writes
//!   (read-modify-write). A plan in which no chunk holds two runs is not sieving and is not
//!   offered.
//!
//! Reads are priced by where their bytes are. When most of a read's extent is not in the page
//! cache (the caller asks the kernel, [`Residency`]), each chunk is priced with the cold
//! figures instead: per-piece `N × O_r + S_span / B_stream(S_span)` (the kernel's readahead
//! streams the span ahead of the calls) against sieving's `O_r + S_chunk / B_cold(S_chunk)`
//! plus the copy; batches are not offered (io_uring hands buffered reads that miss the cache to
//! kernel worker threads, one entry at a time). Measured here, one call over a cold span wins
//! for small spans and loses from about 1 MiB on, so the planner stops sieving there.
//!
//! Writes whose runs overlap keep list order (the later piece wins): a batch would not, so it
//! is not offered for them, and sieving is offered only if every group of overlapping runs
//! fits one chunk (the chunk applies its runs in list order).

use std::ops::Range;

use tessera_proto::limits::{SIEVE_CHUNK_BYTES_MAX, URING_BATCH_ENTRIES_MAX};
use tessera_proto::{Piece, StoragePlan};

use crate::cost::{CostModel, Direction};
pub use crate::run::Run;

/// Merges consecutive pieces that are adjacent in the object; drops empty ones.
// Inlinable into the store's request paths, which are generic over the storage and so
// compiled in the crate that names it (the server binary): it was inlined there before.
#[inline]
pub fn merge_runs(pieces: &[Piece]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut data = 0usize;
    for piece in pieces {
        if piece.length == 0 {
            continue;
        }
        match runs.last_mut() {
            Some(last) if last.end() == piece.offset => last.length += piece.length,
            _ => runs.push(Run {
                offset: piece.offset,
                length: piece.length,
                data,
            }),
        }
        data += usize::try_from(piece.length).expect("pieces lie within one bulk buffer");
    }
    runs
}

/// A sieving chunk: one covering read (and write) of `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First object byte.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// The chunk's runs: a range of [`Decision::order`].
    pub members: Range<usize>,
}

impl Chunk {
    /// Bytes the chunk covers.
    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

/// Whether the bytes of a read are in the page cache, as far as the server could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Residency {
    /// In the page cache (or not known): the calibrated, cached figures apply.
    #[default]
    Cached,
    /// Mostly not in the page cache: the cold-read figures apply.
    Cold,
}

/// What each plan would cost, µs (`None`: not offered for this request).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimates {
    /// One call per run.
    pub per_piece_us: f64,
    /// One io_uring batch.
    pub batched_us: Option<f64>,
    /// Sieving.
    pub sieve_us: Option<f64>,
    /// Whether a read was priced as cold.
    pub cold: bool,
}

/// The plan chosen for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Never [`StoragePlan::Auto`].
    pub plan: StoragePlan,
    /// Run indices sorted by offset (sieve only).
    pub order: Vec<usize>,
    /// Sieving chunks, ascending (sieve only).
    pub chunks: Vec<Chunk>,
    /// The prices compared (only for [`StoragePlan::Auto`] requests).
    pub estimates: Estimates,
}

impl Decision {
    fn simple(plan: StoragePlan) -> Self {
        Self {
            plan,
            order: Vec::new(),
            chunks: Vec::new(),
            estimates: Estimates::default(),
        }
    }

    /// Largest chunk buffer the plan needs, bytes (0 unless it sieves).
    pub fn buffer_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|chunk| chunk.members.len() > 1)
            .map(Chunk::bytes)
            .max()
            .unwrap_or(0)
    }
}

/// Chooses storage plans with a cost model.
#[derive(Debug, Clone)]
pub struct Planner {
    model: CostModel,
    batching: bool,
}

impl Planner {
    /// A planner pricing with `model`; `batching` says whether io_uring can be used.
    pub fn new(model: CostModel, batching: bool) -> Self {
        Self { model, batching }
    }

    /// The model in use.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    /// Whether batched plans can run.
    pub fn batching(&self) -> bool {
        self.batching
    }

    /// The plan for `runs` (in data order) moving in `direction`, as `requested`, with the
    /// bytes taken to be in the page cache.
    pub fn plan(&self, direction: Direction, runs: &[Run], requested: StoragePlan) -> Decision {
        self.plan_with(direction, runs, requested, Residency::Cached)
    }

    /// Whether an [`StoragePlan::Auto`] read of `runs` would be priced by residency: only
    /// then is it worth asking the kernel.
    pub fn wants_residency(direction: Direction, runs: &[Run], requested: StoragePlan) -> bool {
        direction == Direction::Read && requested == StoragePlan::Auto && runs.len() > 1
    }

    /// [`Planner::plan`] for bytes whose page-cache `residency` is known (it matters only to
    /// reads the model prices). Each decision between plans (a request of more than one run)
    /// is counted in `tessera_plan_decisions_total`.
    pub fn plan_with(
        &self,
        direction: Direction,
        runs: &[Run],
        requested: StoragePlan,
        residency: Residency,
    ) -> Decision {
        let decision = self.decide(direction, runs, requested, residency);
        if runs.len() > 1 {
            metrics::counter!(
                tessera_proto::metrics::PLAN_DECISIONS,
                "direction" => match direction {
                    Direction::Read => "read",
                    Direction::Write => "write",
                },
                "requested" => requested.name(),
                "chosen" => decision.plan.name(),
                "priced" => if decision.estimates.cold { "cold" } else { "cached" },
            )
            .increment(1);
        }
        decision
    }

    fn decide(
        &self,
        direction: Direction,
        runs: &[Run],
        requested: StoragePlan,
        residency: Residency,
    ) -> Decision {
        if runs.len() <= 1 {
            return Decision::simple(StoragePlan::PerPiece);
        }
        match requested {
            StoragePlan::Batched if self.batch_allowed(direction, runs) => {
                Decision::simple(StoragePlan::Batched)
            }
            // A plan not offered for this request falls back to one call per run.
            StoragePlan::PerPiece | StoragePlan::Batched => Decision::simple(StoragePlan::PerPiece),
            StoragePlan::Sieve => Self::sieve(direction, runs, SIEVE_CHUNK_BYTES_MAX)
                .unwrap_or_else(|| Decision::simple(StoragePlan::PerPiece)),
            StoragePlan::Auto if direction == Direction::Read && residency == Residency::Cold => {
                self.cheapest_cold_read(runs)
            }
            StoragePlan::Auto => self.cheapest(direction, runs),
        }
    }

    /// The cheaper of per-piece and sieving for a read whose bytes are mostly not cached,
    /// compared chunk by chunk of the sieving grouping (runs farther apart than the break-even
    /// gap are read one call each by both plans).
    fn cheapest_cold_read(&self, runs: &[Run]) -> Decision {
        let model = &self.model;
        let Some(mut decision) = Self::sieve(
            Direction::Read,
            runs,
            model.gap_break_bytes(Direction::Read),
        ) else {
            return Decision {
                estimates: Estimates {
                    per_piece_us: self.per_piece_us(Direction::Read, runs),
                    cold: true,
                    ..Estimates::default()
                },
                ..Decision::simple(StoragePlan::PerPiece)
            };
        };
        let (mut per_piece_us, mut sieve_us) = (0.0, 0.0);
        for chunk in &decision.chunks {
            let members = &decision.order[chunk.members.clone()];
            let streamed = model.cold_stream_us(chunk.bytes(), members.len());
            per_piece_us += streamed;
            sieve_us += if members.len() == 1 {
                streamed
            } else {
                let wanted: u64 = members.iter().map(|&index| runs[index].length).sum();
                model.cold_read_us(chunk.bytes()) + model.copy_us(wanted)
            };
        }
        let estimates = Estimates {
            per_piece_us,
            batched_us: None,
            sieve_us: Some(sieve_us),
            cold: true,
        };
        if sieve_us < per_piece_us * model.plan_margin {
            decision.estimates = estimates;
            return decision;
        }
        Decision {
            estimates,
            ..Decision::simple(StoragePlan::PerPiece)
        }
    }

    fn cheapest(&self, direction: Direction, runs: &[Run]) -> Decision {
        let per_piece_us = self.per_piece_us(direction, runs);
        let batched_us = self
            .batch_allowed(direction, runs)
            .then(|| self.batched_us(direction, runs));
        let sieve = Self::sieve(direction, runs, self.model.gap_break_bytes(direction));
        let sieve_us = sieve
            .as_ref()
            .map(|decision| self.sieve_us(direction, runs, decision));
        let estimates = Estimates {
            per_piece_us,
            batched_us,
            sieve_us,
            cold: false,
        };
        let margin = self.model.plan_margin;
        let best_other = batched_us
            .filter(|&cost| cost < per_piece_us * margin)
            .unwrap_or(per_piece_us);
        if let (Some(mut decision), Some(cost)) = (sieve, sieve_us) {
            if cost < best_other * margin {
                decision.estimates = estimates;
                return decision;
            }
        }
        let plan = if batched_us.is_some_and(|cost| cost < per_piece_us * margin) {
            StoragePlan::Batched
        } else {
            StoragePlan::PerPiece
        };
        Decision {
            estimates,
            ..Decision::simple(plan)
        }
    }

    fn batch_allowed(&self, direction: Direction, runs: &[Run]) -> bool {
        self.batching && (direction == Direction::Read || !overlapping(runs))
    }

    /// `N × (O + O_seek) + Σ S_i / B(S_i)`, with no seek charged for a run that continues
    /// the previous one.
    pub fn per_piece_us(&self, direction: Direction, runs: &[Run]) -> f64 {
        let mut previous_end = None;
        runs.iter()
            .map(|run| {
                let seek = previous_end != Some(run.offset);
                previous_end = Some(run.end());
                self.model.call_us(direction, run.length, seek)
            })
            .sum()
    }

    /// One submission per `URING_BATCH_ENTRIES_MAX` runs, plus each entry and its bytes.
    pub fn batched_us(&self, direction: Direction, runs: &[Run]) -> f64 {
        let submissions = runs.len().div_ceil(URING_BATCH_ENTRIES_MAX as usize);
        let entry_us = self.model.batch_entry_us(direction);
        submissions as f64 * self.model.batch_submit_us
            + runs
                .iter()
                .map(|run| {
                    entry_us + run.length as f64 * self.model.us_per_byte(direction, run.length)
                })
                .sum::<f64>()
    }

    /// The price of a sieving decision (seed 001's `T_dsr` and `T_dsw`, per chunk).
    pub fn sieve_us(&self, direction: Direction, runs: &[Run], decision: &Decision) -> f64 {
        let model = &self.model;
        decision
            .chunks
            .iter()
            .map(|chunk| {
                let members = &decision.order[chunk.members.clone()];
                if members.len() == 1 {
                    return model.call_us(direction, runs[members[0]].length, true);
                }
                let wanted: u64 = members.iter().map(|&index| runs[index].length).sum();
                let read =
                    model.call_us(Direction::Read, chunk.bytes(), true) + model.copy_us(wanted);
                match direction {
                    Direction::Read => read,
                    Direction::Write => {
                        read + model.lock_us
                            + model.call_us(Direction::Write, chunk.bytes(), false)
                            + model.unlock_us
                    }
                }
            })
            .sum()
    }

    /// Groups the runs into sieving chunks, breaking at gaps wider than `gap_break_bytes`
    /// and at `SIEVE_CHUNK_BYTES_MAX`. `None` when no chunk would hold two runs, or when
    /// overlapping runs of a write do not fit one chunk.
    fn sieve(direction: Direction, runs: &[Run], gap_break_bytes: u64) -> Option<Decision> {
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&index| (runs[index].offset, index));
        let mut chunks: Vec<Chunk> = Vec::new();
        for (position, &index) in order.iter().enumerate() {
            let run = runs[index];
            if let Some(chunk) = chunks.last_mut() {
                let overlaps = run.offset < chunk.end;
                let end = chunk.end.max(run.end());
                let fits = end - chunk.start <= SIEVE_CHUNK_BYTES_MAX;
                let near = run.offset <= chunk.end.saturating_add(gap_break_bytes);
                if near && fits {
                    chunk.end = end;
                    chunk.members.end = position + 1;
                    continue;
                }
                if overlaps && direction == Direction::Write {
                    return None;
                }
            }
            chunks.push(Chunk {
                start: run.offset,
                end: run.end(),
                members: position..position + 1,
            });
        }
        chunks
            .iter()
            .any(|chunk| chunk.members.len() > 1)
            .then(|| Decision {
                plan: StoragePlan::Sieve,
                order,
                chunks,
                estimates: Estimates::default(),
            })
    }
}

/// Whether any two runs share an object byte.
fn overlapping(runs: &[Run]) -> bool {
    let mut sorted: Vec<(u64, u64)> = runs.iter().map(|run| (run.offset, run.end())).collect();
    sorted.sort_unstable();
    sorted.windows(2).any(|pair| pair[1].0 < pair[0].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs_of(pieces: &[(u64, u64)]) -> Vec<Run> {
        let pieces: Vec<Piece> = pieces
            .iter()
            .map(|&(offset, length)| Piece::new(offset, length))
            .collect();
        merge_runs(&pieces)
    }

    /// `count` pieces of `bytes` every `stride` bytes.
    fn strided(count: u64, bytes: u64, stride: u64) -> Vec<Run> {
        runs_of(&(0..count).map(|i| (i * stride, bytes)).collect::<Vec<_>>())
    }

    fn planner(batching: bool) -> Planner {
        Planner::new(CostModel::default(), batching)
    }

    #[test]
    fn merging_joins_adjacent_consecutive_pieces_and_drops_empty_ones() {
        let runs = runs_of(&[(0, 4), (4, 4), (100, 0), (2, 2), (10, 1)]);
        assert_eq!(
            runs,
            vec![
                Run {
                    offset: 0,
                    length: 8,
                    data: 0
                },
                Run {
                    offset: 2,
                    length: 2,
                    data: 8
                },
                Run {
                    offset: 10,
                    length: 1,
                    data: 10
                },
            ]
        );
    }

    #[test]
    fn many_tiny_nearby_pieces_are_sieved() {
        for direction in [Direction::Read, Direction::Write] {
            let runs = strided(1000, 128, 512);
            let decision = planner(true).plan(direction, &runs, StoragePlan::Auto);
            assert_eq!(
                decision.plan,
                StoragePlan::Sieve,
                "{direction:?} {:?}",
                decision.estimates
            );
            assert_eq!(decision.chunks.len(), 1, "512 KB fits one chunk");
            assert_eq!(decision.chunks[0].bytes(), 999 * 512 + 128);
            let estimates = decision.estimates;
            assert!(estimates.sieve_us.unwrap() < estimates.per_piece_us);
        }
    }

    #[test]
    fn few_large_pieces_are_served_one_call_each() {
        for direction in [Direction::Read, Direction::Write] {
            let runs = strided(4, 1 << 20, 3 << 20);
            let decision = planner(false).plan(direction, &runs, StoragePlan::Auto);
            assert_eq!(
                decision.plan,
                StoragePlan::PerPiece,
                "{:?}",
                decision.estimates
            );
            assert!(
                decision.estimates.sieve_us.is_none(),
                "gaps of 2 MiB never join a chunk"
            );
        }
    }

    #[test]
    fn sieving_turns_off_as_pieces_grow_apart() {
        // The block-column shape: pieces of s bytes every 4 s.
        let plan_at = |piece: u64| {
            planner(false)
                .plan(
                    Direction::Write,
                    &strided(256, piece, 4 * piece),
                    StoragePlan::Auto,
                )
                .plan
        };
        assert_eq!(plan_at(128), StoragePlan::Sieve);
        assert_eq!(plan_at(64 << 10), StoragePlan::PerPiece);
    }

    #[test]
    fn cold_reads_sieve_small_spans_and_stream_large_ones() {
        // Block columns of 4 clients: pieces of s bytes every 4 s. Cached, both spans sieve.
        let small = strided(128, 128, 512); // a 64 KiB span
        let large = strided(512, 512, 2048); // a 1 MiB span
        for runs in [&small, &large] {
            let cached = planner(true).plan(Direction::Read, runs, StoragePlan::Auto);
            assert_eq!(cached.plan, StoragePlan::Sieve, "{:?}", cached.estimates);
            assert!(!cached.estimates.cold);
        }
        let cold = |runs: &[Run]| {
            planner(true).plan_with(Direction::Read, runs, StoragePlan::Auto, Residency::Cold)
        };
        let small_cold = cold(&small);
        assert_eq!(
            small_cold.plan,
            StoragePlan::Sieve,
            "{:?}",
            small_cold.estimates
        );
        assert!(small_cold.estimates.cold && small_cold.estimates.batched_us.is_none());
        let large_cold = cold(&large);
        assert_eq!(
            large_cold.plan,
            StoragePlan::PerPiece,
            "{:?}",
            large_cold.estimates
        );
        let margin = planner(true).model().plan_margin;
        assert!(
            large_cold.estimates.sieve_us.unwrap() >= large_cold.estimates.per_piece_us * margin
        );
        // Residency changes nothing for writes or for plans the client forced.
        let write =
            planner(true).plan_with(Direction::Write, &large, StoragePlan::Auto, Residency::Cold);
        assert_eq!(
            write,
            planner(true).plan(Direction::Write, &large, StoragePlan::Auto)
        );
        let forced =
            planner(true).plan_with(Direction::Read, &large, StoragePlan::Sieve, Residency::Cold);
        assert_eq!(forced.plan, StoragePlan::Sieve);
        assert!(!Planner::wants_residency(
            Direction::Read,
            &large,
            StoragePlan::Sieve
        ));
        assert!(Planner::wants_residency(
            Direction::Read,
            &large,
            StoragePlan::Auto
        ));
        assert!(!Planner::wants_residency(
            Direction::Write,
            &large,
            StoragePlan::Auto
        ));
    }

    #[test]
    fn batches_are_chosen_for_many_scattered_pieces_when_io_uring_exists() {
        let runs = strided(500, 4096, 1 << 20);
        let with = planner(true).plan(Direction::Read, &runs, StoragePlan::Auto);
        assert_eq!(with.plan, StoragePlan::Batched, "{:?}", with.estimates);
        let without = planner(false).plan(Direction::Read, &runs, StoragePlan::Auto);
        assert_eq!(without.plan, StoragePlan::PerPiece);
        assert!(without.estimates.batched_us.is_none());
    }

    #[test]
    fn overlapping_writes_keep_list_order() {
        // Overlaps that fit one chunk may sieve (applied in list order); a batch never.
        let runs = runs_of(&[(0, 100), (50, 100), (1000, 10), (1020, 10)]);
        assert!(overlapping(&runs));
        let batched = planner(true).plan(Direction::Write, &runs, StoragePlan::Batched);
        assert_eq!(batched.plan, StoragePlan::PerPiece);
        let sieve = planner(true).plan(Direction::Write, &runs, StoragePlan::Sieve);
        assert_eq!(sieve.plan, StoragePlan::Sieve);
        // Overlapping runs too large for one chunk: no sieving for writes; reads may.
        let huge = SIEVE_CHUNK_BYTES_MAX;
        let runs = runs_of(&[(0, huge), (huge - 10, 100), (5, 5)]);
        let write = planner(true).plan(Direction::Write, &runs, StoragePlan::Sieve);
        assert_eq!(write.plan, StoragePlan::PerPiece);
        let read = planner(true).plan(Direction::Read, &runs, StoragePlan::Sieve);
        assert_eq!(read.plan, StoragePlan::Sieve);
    }

    #[test]
    fn forced_plans_and_single_runs() {
        let runs = strided(10, 1 << 20, 2 << 20);
        let forced = planner(false).plan(Direction::Read, &runs, StoragePlan::Sieve);
        assert_eq!(
            forced.plan,
            StoragePlan::Sieve,
            "forced sieving reads through gaps"
        );
        assert!(forced
            .chunks
            .iter()
            .all(|chunk| chunk.bytes() <= SIEVE_CHUNK_BYTES_MAX));
        assert!(forced.buffer_bytes() <= SIEVE_CHUNK_BYTES_MAX);
        let one = strided(1, 10, 10);
        for requested in StoragePlan::ALL {
            assert_eq!(
                planner(true).plan(Direction::Write, &one, requested).plan,
                StoragePlan::PerPiece
            );
        }
    }
}
