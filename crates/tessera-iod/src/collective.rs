//! Server-directed collective I/O (seed 004, ECIO): the participants' parts of one collective
//! meet here, and are served together.
//!
//! Each participant of a collective write sends this server its own share of the access
//! (its file type and stream range, with its data) tagged with the collective's id, the
//! request round and the number of participants that will come. The first arrival opens the
//! collective; every arrival hands its pieces and data to it and waits. The last arrival takes
//! them all out, merges every participant's pieces by file offset into sorted runs (where
//! participants overlap, the higher rank's bytes win; within one participant, the later piece
//! in stream order), writes the runs through the store in one call — one storage call per
//! contiguous run under the object's extent lock, as the storage planner decides — and
//! answers every participant. A collective read gathers the participants' pieces the same
//! way, reads their union once in sorted runs, and answers each with its own bytes.
//!
//! Bounds: at most [`IOD_COLLECTIVES_OPEN_MAX`] collectives open, [`COLLECTIVE_BYTES_MAX`]
//! bytes held by one, [`COLLECTIVE_PARTICIPANTS_MAX`] participants; a collective still missing
//! participants when an arrival's wait runs out fails, and every participant that arrived gets
//! an error naming the collective and how many arrived. So do a duplicate rank, a participant
//! count that differs between arrivals, and a handle or direction that differs. The last
//! [`IOD_COLLECTIVES_FAILED_KEPT`] failures are remembered, so a late participant gets the
//! error at once.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tessera_proto::limits::{
    COLLECTIVE_BYTES_MAX, COLLECTIVE_PARTICIPANTS_MAX, COLLECTIVE_WAIT_MS_MAX,
    IOD_COLLECTIVES_FAILED_KEPT, IOD_COLLECTIVES_OPEN_MAX,
};
use tessera_proto::{CollectiveTag, ErrorCode, Piece, RemoteError, StoragePlan};
use tokio::sync::oneshot;

use crate::storage::ObjectStorage;
use crate::store::{ObjectStore, Outcome};

/// (collective id, round): one meeting of participants on this server.
type Key = (u64, u32);

/// What one participant brought.
#[derive(Debug)]
pub struct Arrival {
    /// Its rank.
    pub rank: u32,
    /// Its local pieces, in its stream order.
    pub pieces: Vec<Piece>,
    /// Its data in stream order (a write), or nothing (a read).
    pub data: Vec<u8>,
    /// Bytes of its pieces.
    pub bytes: u64,
}

/// What a participant gets back once the collective has been served.
#[derive(Debug, Default)]
pub struct Done {
    /// Its data, in its stream order (a read), or nothing (a write).
    pub data: Vec<u8>,
    /// The storage work of the whole collective, reported to the participant that arrived
    /// last only (so sums over the participants count it once).
    pub outcome: Outcome,
}

type Waiter = oneshot::Sender<Result<Done, RemoteError>>;

#[derive(Debug)]
struct Open {
    handle: u64,
    write: bool,
    participants: u32,
    storage: StoragePlan,
    bytes: u64,
    arrivals: Vec<Arrival>,
    waiters: Vec<Waiter>,
}

/// A collective whose participants have all arrived: the last arrival serves it.
#[derive(Debug)]
pub struct Complete {
    /// The object.
    pub handle: u64,
    /// The storage plan asked for by the first arrival.
    pub storage: StoragePlan,
    /// Every participant's part, the last arrival's included, in arrival order.
    pub arrivals: Vec<Arrival>,
    /// The waiting participants, in arrival order (the last arrival has none).
    waiters: Vec<Waiter>,
}

impl Complete {
    /// Answers every waiting participant: `results[i]` goes to arrival `i`; the last result
    /// belongs to the last arrival and is returned.
    pub fn answer(self, mut results: Vec<Result<Done, RemoteError>>) -> Result<Done, RemoteError> {
        debug_assert_eq!(results.len(), self.waiters.len() + 1);
        let own = results.pop().expect("one result per arrival");
        for (waiter, result) in self.waiters.into_iter().zip(results) {
            // A participant whose connection went away no longer listens; nothing to do.
            let _ = waiter.send(result);
        }
        own
    }
}

/// How an arrival continues.
#[derive(Debug)]
pub enum Joined {
    /// Wait for the last participant (or the timeout).
    Wait(oneshot::Receiver<Result<Done, RemoteError>>),
    /// This was the last participant: serve the collective.
    Last(Complete),
}

/// The collectives open on one iod.
#[derive(Debug, Default)]
pub struct Collectives {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    open: HashMap<Key, Open>,
    failed: VecDeque<(Key, RemoteError)>,
}

impl Inner {
    fn remember(&mut self, key: Key, error: RemoteError) {
        if self.failed.len() == IOD_COLLECTIVES_FAILED_KEPT {
            self.failed.pop_front();
        }
        self.failed.push_back((key, error));
    }

    /// Fails open collective `key`: every waiting participant gets `error`.
    fn fail(&mut self, key: Key, error: &RemoteError) {
        if let Some(open) = self.open.remove(&key) {
            for waiter in open.waiters {
                let _ = waiter.send(Err(error.clone()));
            }
        }
        self.remember(key, error.clone());
    }
}

fn name(tag: &CollectiveTag) -> String {
    format!("collective {:#x} round {}", tag.id, tag.round)
}

/// Checks a tag's fields against the limits.
pub fn check_tag(tag: &CollectiveTag) -> Result<(), RemoteError> {
    if tag.participants == 0 || tag.participants > COLLECTIVE_PARTICIPANTS_MAX {
        return Err(RemoteError::new(
            ErrorCode::LimitExceeded,
            format!(
                "{}: {} participants; collective_participants_max is {COLLECTIVE_PARTICIPANTS_MAX} (and at least 1 is needed)",
                name(tag),
                tag.participants
            ),
        ));
    }
    if tag.wait_ms == 0 || tag.wait_ms > COLLECTIVE_WAIT_MS_MAX {
        return Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            format!(
                "{}: wait of {} ms outside 1..={COLLECTIVE_WAIT_MS_MAX} (collective_wait_ms_max)",
                name(tag),
                tag.wait_ms
            ),
        ));
    }
    Ok(())
}

/// Refuses a single participant's part that alone passes the collective byte limit.
pub fn check_bytes(tag: &CollectiveTag, bytes: u64) -> Result<(), RemoteError> {
    if bytes > COLLECTIVE_BYTES_MAX {
        return Err(over_bytes(tag, bytes));
    }
    Ok(())
}

fn over_bytes(tag: &CollectiveTag, bytes: u64) -> RemoteError {
    RemoteError::new(
        ErrorCode::LimitExceeded,
        format!(
            "{}: its participants would hold {bytes} bytes on this server, over collective_bytes_max ({COLLECTIVE_BYTES_MAX})",
            name(tag)
        ),
    )
}

impl Collectives {
    /// Hands `arrival` to collective `tag` on object `handle`.
    pub fn join(
        &self,
        tag: &CollectiveTag,
        handle: u64,
        write: bool,
        storage: StoragePlan,
        arrival: Arrival,
    ) -> Result<Joined, RemoteError> {
        let key = (tag.id, tag.round);
        let mut inner = self.inner.lock().expect("collective table lock");
        if let Some((_, error)) = inner.failed.iter().find(|(failed, _)| *failed == key) {
            return Err(error.clone());
        }
        if !inner.open.contains_key(&key) && inner.open.len() >= IOD_COLLECTIVES_OPEN_MAX {
            return Err(RemoteError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "{}: this server already holds {} open collectives (iod_collectives_open_max)",
                    name(tag),
                    inner.open.len()
                ),
            ));
        }
        let open = inner.open.entry(key).or_insert_with(|| Open {
            handle,
            write,
            participants: tag.participants,
            storage,
            bytes: 0,
            arrivals: Vec::new(),
            waiters: Vec::new(),
        });
        let mismatch = if open.handle != handle {
            Some(format!(
                "rank {} names handle {handle:#x}, an earlier participant {:#x}",
                arrival.rank, open.handle
            ))
        } else if open.write != write {
            Some(format!(
                "rank {} {}s, an earlier participant {}s",
                arrival.rank,
                if write { "write" } else { "read" },
                if open.write { "write" } else { "read" }
            ))
        } else if open.participants != tag.participants {
            Some(format!(
                "rank {} expects {} participants, an earlier participant {}",
                arrival.rank, tag.participants, open.participants
            ))
        } else if open.arrivals.iter().any(|seen| seen.rank == arrival.rank) {
            Some(format!("rank {} arrived twice", arrival.rank))
        } else {
            None
        };
        if let Some(detail) = mismatch {
            let error = RemoteError::new(
                ErrorCode::InvalidArgument,
                format!("{}: {detail}", name(tag)),
            );
            inner.fail(key, &error);
            return Err(error);
        }
        let held = open.bytes + arrival.bytes;
        if held > COLLECTIVE_BYTES_MAX {
            let error = over_bytes(tag, held);
            inner.fail(key, &error);
            return Err(error);
        }
        open.bytes = held;
        open.arrivals.push(arrival);
        if open.arrivals.len() < open.participants as usize {
            let (sender, receiver) = oneshot::channel();
            open.waiters.push(sender);
            return Ok(Joined::Wait(receiver));
        }
        let open = inner.open.remove(&key).expect("the entry just used");
        Ok(Joined::Last(Complete {
            handle: open.handle,
            storage: open.storage,
            arrivals: open.arrivals,
            waiters: open.waiters,
        }))
    }

    /// Called when a waiting participant's wait ran out: fails the collective if it is still
    /// open, and returns the error; `None` if it was completed meanwhile (its answer is on
    /// the way).
    pub fn expire(&self, tag: &CollectiveTag) -> Option<RemoteError> {
        let key = (tag.id, tag.round);
        let mut inner = self.inner.lock().expect("collective table lock");
        let open = inner.open.get(&key)?;
        let error = RemoteError::new(
            ErrorCode::Unavailable,
            format!(
                "{} on handle {:#x}: {} of {} participants arrived within {} ms",
                name(tag),
                open.handle,
                open.arrivals.len(),
                open.participants,
                tag.wait_ms
            ),
        );
        inner.fail(key, &error);
        Some(error)
    }

    /// Collectives open now.
    pub fn open_count(&self) -> usize {
        self.inner.lock().expect("collective table lock").open.len()
    }
}

/// The union of every arrival's pieces as sorted, disjoint, non-adjacent runs, found by
/// sorting (any pieces).
fn union_runs(arrivals: &[Arrival]) -> Vec<Piece> {
    let mut all: Vec<Piece> = arrivals
        .iter()
        .flat_map(|arrival| arrival.pieces.iter().copied())
        .filter(|piece| piece.length > 0)
        .collect();
    all.sort_unstable_by_key(|piece| piece.offset);
    let mut runs: Vec<Piece> = Vec::new();
    for piece in all {
        match runs.last_mut() {
            Some(last) if piece.offset <= last.offset + last.length => {
                let end = (piece.offset + piece.length).max(last.offset + last.length);
                last.length = end - last.offset;
            }
            _ => runs.push(piece),
        }
    }
    runs
}

/// Sets bits `[start, end)` of `words`.
fn set_bits(words: &mut [u64], start: usize, end: usize) {
    let mut bit = start;
    while bit < end {
        let (word, within) = (bit / 64, bit % 64);
        let count = (64 - within).min(end - bit);
        let mask = if count == 64 {
            u64::MAX
        } else {
            ((1u64 << count) - 1) << within
        };
        words[word] |= mask;
        bit += count;
    }
}

/// The first bit at or after `from` (below `limit`) whose value is `set`, else `limit`.
fn next_bit(words: &[u64], from: usize, limit: usize, set: bool) -> usize {
    let mut bit = from;
    while bit < limit {
        let (word, within) = (bit / 64, bit % 64);
        let value = if set { words[word] } else { !words[word] };
        let masked = value & (u64::MAX << within);
        if masked != 0 {
            return (word * 64 + masked.trailing_zeros() as usize).min(limit);
        }
        bit = (word + 1) * 64;
    }
    limit
}

/// Where the pieces of a collective lie while it is served.
#[derive(Debug)]
enum Placement {
    /// The buffer covers file bytes `[low, low + span)`: byte `offset` is at `offset - low`
    /// (the union was found with a bitmap over that span; holes are compacted away before a
    /// write and opened up after a read).
    Span { low: u64, span: usize },
    /// The buffer holds the runs back to back: `bases[i]` is where run `i` starts.
    Compact { bases: Vec<usize> },
}

/// A span over which a bitmap is used is at most this many times the bytes of the pieces
/// (plus a page): sparser collectives sort their pieces instead.
const SPAN_PER_BYTE_MAX: u64 = 4;

/// The union of every arrival's pieces, and how the serving buffer is laid out. Pieces that
/// lie close together (the usual collective: interleaved shares of one range) are merged in
/// linear time with a bitmap over their span, one bit per byte; sparse ones are sorted.
fn union(arrivals: &[Arrival]) -> (Vec<Piece>, Placement) {
    let pieces = || {
        arrivals
            .iter()
            .flat_map(|arrival| arrival.pieces.iter())
            .filter(|piece| piece.length > 0)
    };
    let (Some(low), Some(high)) = (
        pieces().map(|piece| piece.offset).min(),
        pieces().map(|piece| piece.offset + piece.length).max(),
    ) else {
        return (Vec::new(), Placement::Compact { bases: Vec::new() });
    };
    let bytes: u64 = arrivals.iter().map(|arrival| arrival.bytes).sum();
    let span = high - low;
    if span > SPAN_PER_BYTE_MAX * bytes + 4096 || span > 2 * COLLECTIVE_BYTES_MAX {
        let runs = union_runs(arrivals);
        let (bases, _) = run_bases(&runs);
        return (runs, Placement::Compact { bases });
    }
    let span = usize::try_from(span).expect("bounded above");
    let mut words = vec![0u64; span.div_ceil(64)];
    for piece in pieces() {
        let start = usize::try_from(piece.offset - low).expect("inside the span");
        set_bits(
            &mut words,
            start,
            start + usize::try_from(piece.length).expect("inside the span"),
        );
    }
    let mut runs = Vec::new();
    let mut bit = 0;
    while bit < span {
        let start = next_bit(&words, bit, span, true);
        if start == span {
            break;
        }
        let end = next_bit(&words, start, span, false);
        runs.push(Piece::new(low + start as u64, (end - start) as u64));
        bit = end;
    }
    (runs, Placement::Span { low, span })
}

/// Where each run starts in a buffer holding the runs back to back, and that buffer's size.
fn run_bases(runs: &[Piece]) -> (Vec<usize>, usize) {
    let mut bases = Vec::with_capacity(runs.len());
    let mut total = 0usize;
    for run in runs {
        bases.push(total);
        total += usize::try_from(run.length).expect("bounded by collective_bytes_max");
    }
    (bases, total)
}

impl Placement {
    /// Bytes of the serving buffer.
    fn buffer_bytes(&self, runs: &[Piece]) -> usize {
        match self {
            Self::Span { span, .. } => *span,
            Self::Compact { .. } => run_bases(runs).1,
        }
    }

    /// The buffer position of file byte `offset`, which lies inside one of `runs`.
    fn position(&self, runs: &[Piece], offset: u64) -> usize {
        match self {
            Self::Span { low, .. } => usize::try_from(offset - low).expect("inside the span"),
            Self::Compact { bases } => {
                let index = runs.partition_point(|run| run.offset + run.length <= offset);
                debug_assert!(index < runs.len() && runs[index].offset <= offset);
                bases[index] + usize::try_from(offset - runs[index].offset).expect("inside a run")
            }
        }
    }

    /// Moves the runs of a span buffer to its front, back to back (before a write).
    fn compact(&self, runs: &[Piece], buffer: &mut [u8]) -> usize {
        let Self::Span { low, .. } = self else {
            return buffer.len();
        };
        let mut cursor = 0usize;
        for run in runs {
            let from = usize::try_from(run.offset - low).expect("inside the span");
            let length = usize::try_from(run.length).expect("inside the span");
            buffer.copy_within(from..from + length, cursor);
            cursor += length;
        }
        cursor
    }

    /// Moves runs read back to back at the front of a span buffer to their places (after a
    /// read); last run first, so no run overwrites one still to be moved.
    fn expand(&self, runs: &[Piece], buffer: &mut [u8]) {
        let Self::Span { low, .. } = self else {
            return;
        };
        let (bases, _) = run_bases(runs);
        for (run, &base) in runs.iter().zip(&bases).rev() {
            let to = usize::try_from(run.offset - low).expect("inside the span");
            let length = usize::try_from(run.length).expect("inside the span");
            buffer.copy_within(base..base + length, to);
        }
    }
}

/// Serves a complete collective write: merges every participant's pieces into sorted runs
/// (higher ranks applied last, so their bytes win where participants overlap) and writes the
/// runs in one store call.
pub fn serve_write<S: ObjectStorage>(
    store: &ObjectStore<S>,
    complete: &Complete,
) -> Result<Outcome, RemoteError> {
    let (runs, placement) = union(&complete.arrivals);
    if runs.is_empty() {
        return Ok(Outcome::default());
    }
    let mut buffer = vec![0u8; placement.buffer_bytes(&runs)];
    let mut order: Vec<&Arrival> = complete.arrivals.iter().collect();
    order.sort_by_key(|arrival| arrival.rank);
    for arrival in order {
        let mut cursor = 0usize;
        for piece in &arrival.pieces {
            let length = usize::try_from(piece.length).expect("bounded by the bulk limit");
            if length == 0 {
                continue;
            }
            let at = placement.position(&runs, piece.offset);
            buffer[at..at + length].copy_from_slice(&arrival.data[cursor..cursor + length]);
            cursor += length;
        }
    }
    let total = placement.compact(&runs, &mut buffer);
    store.write(complete.handle, &runs, &buffer[..total], complete.storage)
}

/// Serves a complete collective read: reads the union of the pieces once, in sorted runs,
/// and cuts each participant's bytes out of it, in its stream order.
pub fn serve_read<S: ObjectStorage>(
    store: &ObjectStore<S>,
    complete: &Complete,
) -> Result<(Vec<Vec<u8>>, Outcome), RemoteError> {
    let (runs, placement) = union(&complete.arrivals);
    let mut buffer = vec![0u8; placement.buffer_bytes(&runs)];
    let outcome = if runs.is_empty() {
        Outcome::default()
    } else {
        let (_, total) = run_bases(&runs);
        let outcome = store.read(
            complete.handle,
            &runs,
            &mut buffer[..total],
            complete.storage,
        )?;
        placement.expand(&runs, &mut buffer);
        outcome
    };
    let answers = complete
        .arrivals
        .iter()
        .map(|arrival| {
            let mut data =
                Vec::with_capacity(usize::try_from(arrival.bytes).expect("bounded by the limit"));
            for piece in arrival.pieces.iter().filter(|piece| piece.length > 0) {
                let length = usize::try_from(piece.length).expect("bounded by the bulk limit");
                let at = placement.position(&runs, piece.offset);
                data.extend_from_slice(&buffer[at..at + length]);
            }
            data
        })
        .collect();
    Ok((answers, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(participants: u32) -> CollectiveTag {
        CollectiveTag {
            id: 9,
            round: 0,
            rank: 0,
            participants,
            wait_ms: 100,
        }
    }

    fn arrival(rank: u32, pieces: Vec<Piece>, fill: u8) -> Arrival {
        let bytes = pieces.iter().map(|piece| piece.length).sum();
        Arrival {
            rank,
            pieces,
            data: vec![fill; usize::try_from(bytes).unwrap()],
            bytes,
        }
    }

    #[test]
    fn union_runs_merge_overlapping_and_adjacent_pieces_in_offset_order() {
        let arrivals = [
            arrival(0, vec![Piece::new(8, 4), Piece::new(0, 4)], 1),
            arrival(
                1,
                vec![Piece::new(4, 4), Piece::new(20, 2), Piece::new(21, 3)],
                2,
            ),
        ];
        assert_eq!(
            union_runs(&arrivals),
            vec![Piece::new(0, 12), Piece::new(20, 4)]
        );
    }

    #[test]
    fn the_bitmap_union_equals_the_sorted_one() {
        let mut seed = 7u64;
        for _ in 0..200 {
            let arrivals: Vec<Arrival> = (0..3)
                .map(|rank| {
                    let pieces = (0..20)
                        .map(|_| {
                            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                            Piece::new((seed >> 33) % 300, (seed >> 20) % 9)
                        })
                        .collect();
                    arrival(rank, pieces, 0)
                })
                .collect();
            let (runs, placement) = union(&arrivals);
            assert_eq!(runs, union_runs(&arrivals));
            assert!(matches!(placement, Placement::Span { .. }), "{placement:?}");
        }
        // Sparse pieces are sorted instead.
        let sparse = [arrival(
            0,
            vec![Piece::new(0, 4), Piece::new(1 << 20, 4)],
            1,
        )];
        let (runs, placement) = union(&sparse);
        assert_eq!(runs, union_runs(&sparse));
        assert!(matches!(placement, Placement::Compact { .. }));
    }

    #[test]
    fn the_last_arrival_completes_and_mismatches_fail_everyone() {
        let table = Collectives::default();
        let first = table
            .join(
                &tag(2),
                1,
                true,
                StoragePlan::Auto,
                arrival(0, vec![Piece::new(0, 4)], 1),
            )
            .unwrap();
        let Joined::Wait(mut waiting) = first else {
            panic!("the first of two waits")
        };
        let Joined::Last(complete) = table
            .join(
                &tag(2),
                1,
                true,
                StoragePlan::Auto,
                arrival(1, vec![Piece::new(4, 4)], 2),
            )
            .unwrap()
        else {
            panic!("the second of two completes")
        };
        assert_eq!(complete.arrivals.len(), 2);
        assert_eq!(table.open_count(), 0);
        let own = complete.answer(vec![Ok(Done::default()), Ok(Done::default())]);
        assert!(own.is_ok());
        assert!(waiting.try_recv().unwrap().is_ok());

        // A duplicate rank fails the collective for the waiting participant too.
        let second = CollectiveTag { id: 10, ..tag(3) };
        let Joined::Wait(mut waiting) = table
            .join(&second, 1, true, StoragePlan::Auto, arrival(0, vec![], 0))
            .unwrap()
        else {
            panic!("waits")
        };
        let error = table
            .join(&second, 1, true, StoragePlan::Auto, arrival(0, vec![], 0))
            .unwrap_err();
        assert!(error.message.contains("rank 0 arrived twice"), "{error}");
        let seen = waiting.try_recv().unwrap().unwrap_err();
        assert_eq!(seen, error);
        // A late participant gets the remembered error at once.
        let late = table
            .join(&second, 1, true, StoragePlan::Auto, arrival(2, vec![], 0))
            .unwrap_err();
        assert_eq!(late, error);

        // A count mismatch, and an expiry naming how many arrived.
        let third = CollectiveTag { id: 11, ..tag(3) };
        let Joined::Wait(_) = table
            .join(&third, 1, true, StoragePlan::Auto, arrival(0, vec![], 0))
            .unwrap()
        else {
            panic!("waits")
        };
        let expired = table.expire(&third).unwrap();
        assert!(expired.message.contains("1 of 3 participants"), "{expired}");
        let fourth = CollectiveTag { id: 12, ..tag(3) };
        let Joined::Wait(_) = table
            .join(&fourth, 1, true, StoragePlan::Auto, arrival(0, vec![], 0))
            .unwrap()
        else {
            panic!("waits")
        };
        let error = table
            .join(
                &CollectiveTag {
                    participants: 2,
                    ..fourth
                },
                1,
                true,
                StoragePlan::Auto,
                arrival(1, vec![], 0),
            )
            .unwrap_err();
        assert!(error.message.contains("expects 2 participants"), "{error}");
        assert_eq!(table.open_count(), 0);
    }

    #[test]
    fn open_collectives_are_bounded() {
        let table = Collectives::default();
        let mut waiting = Vec::new();
        for id in 0..IOD_COLLECTIVES_OPEN_MAX as u64 {
            let Joined::Wait(receiver) = table
                .join(
                    &CollectiveTag { id, ..tag(2) },
                    1,
                    true,
                    StoragePlan::Auto,
                    arrival(0, vec![], 0),
                )
                .unwrap()
            else {
                panic!("waits")
            };
            waiting.push(receiver);
        }
        let error = table
            .join(
                &CollectiveTag { id: 1000, ..tag(2) },
                1,
                true,
                StoragePlan::Auto,
                arrival(0, vec![], 0),
            )
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::LimitExceeded);
        assert!(
            error.message.contains("iod_collectives_open_max"),
            "{error}"
        );
        // A participant of an open collective still gets in.
        assert!(matches!(
            table.join(
                &CollectiveTag { id: 0, ..tag(2) },
                1,
                true,
                StoragePlan::Auto,
                arrival(1, vec![], 0)
            ),
            Ok(Joined::Last(_))
        ));
        assert_eq!(table.open_count(), IOD_COLLECTIVES_OPEN_MAX - 1);
    }

    #[test]
    fn bytes_over_the_limit_fail_the_collective_naming_it() {
        let table = Collectives::default();
        let half = COLLECTIVE_BYTES_MAX / 2 + 1;
        let big = |rank| Arrival {
            rank,
            pieces: vec![Piece::new(u64::from(rank) * half, half)],
            data: Vec::new(),
            bytes: half,
        };
        let Joined::Wait(_) = table
            .join(&tag(2), 1, false, StoragePlan::Auto, big(0))
            .unwrap()
        else {
            panic!("waits")
        };
        let error = table
            .join(&tag(2), 1, false, StoragePlan::Auto, big(1))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::LimitExceeded);
        assert!(error.message.contains("collective_bytes_max"), "{error}");
    }
}
