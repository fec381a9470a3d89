//! Two-phase collective I/O (ROMIO-style; the baseline `server_directed` is measured against).
//!
//! 1. Each process flattens its access — the view's file type over its range, the memory
//!    type over its buffer — into file pieces, each with its position in the process's data
//!    stream, and packs its data (a write) in stream order.
//! 2. An allgather of every process's `[first, last)` file byte gives the range the group
//!    touches. It is split evenly into file domains, one per aggregator (`cb_nodes` of them,
//!    spread over the ranks), and each domain into windows of at most `cb_buffer_size` bytes;
//!    window `k` of every domain makes round `k`.
//! 3. In each round, every process sends each aggregator, with one alltoallv, its pieces that
//!    fall in that aggregator's window: (offset, length) pairs, then the data. An aggregator
//!    fills a window buffer in rank order (so where processes overlap the higher rank's bytes
//!    win) and writes the covered runs. A window with holes is **not** read first and written
//!    whole, as ROMIO does: the covered runs go as one list request per server instead. That
//!    costs no read, and it cannot overwrite bytes in the holes that another writer changed
//!    meanwhile, which a read-modify-write could without a lock.
//! 4. A read runs the rounds the other way: the processes send their pieces' (offset, length)
//!    to the aggregators, each aggregator reads the union of the pieces asked of its window
//!    once (list reads of the covered runs) and answers each process with its bytes through a
//!    second alltoallv, and each process unpacks them into its memory.
//!
//! Every process runs every round (an empty round is still an alltoallv), as MPI needs. A
//! process whose I/O fails keeps taking part in the rounds, so no other hangs, and reports
//! the failure at the end.

use std::io::{IoSlice, IoSliceMut};

use tessera_proto::Piece;

use super::{agree, Access, CollectiveOptions, Communicator, Reader, Writer};
use super::{CB_BUFFER_BYTES_MIN, TWO_PHASE_ROUNDS_MAX};
use crate::access::{memory_slices, memory_slices_mut, pack, ViewedFile, ACCESS_BATCH_PIECES_MAX};
use crate::error::ClientError;
use crate::file::IoReport;

/// A process's file pieces with their stream positions, in stream order.
struct Flat {
    pieces: Vec<(Piece, u64)>,
    total: u64,
}

fn flatten(viewed: &ViewedFile, access: &Access<'_>) -> Result<Flat, ClientError> {
    let (total, end) = access.range(viewed)?;
    let mut pieces = Vec::new();
    if total > 0 {
        let mut stream = 0u64;
        for piece in viewed.pieces(access.offset, end)? {
            pieces.push((piece, stream));
            stream += piece.length;
        }
    }
    Ok(Flat { pieces, total })
}

/// The file domains and rounds every process computes alike from the allgathered ranges.
struct Domains {
    low: u64,
    high: u64,
    domain_bytes: u64,
    window_bytes: u64,
    aggregators: usize,
    size: usize,
    rounds: u64,
}

impl Domains {
    fn new(
        ranges: &[(u64, u64)],
        size: usize,
        servers: usize,
        options: &CollectiveOptions,
    ) -> Result<Option<Self>, ClientError> {
        let used: Vec<&(u64, u64)> = ranges.iter().filter(|(low, high)| low < high).collect();
        let Some(low) = used.iter().map(|(low, _)| *low).min() else {
            return Ok(None);
        };
        let high = used.iter().map(|(_, high)| *high).max().expect("one range");
        let aggregators = options
            .cb_nodes
            .unwrap_or_else(|| size.min(servers))
            .clamp(1, size);
        let domain_bytes = (high - low).div_ceil(aggregators as u64);
        let window_bytes = options.cb_buffer_bytes.max(CB_BUFFER_BYTES_MIN);
        let rounds = domain_bytes.div_ceil(window_bytes);
        if rounds > TWO_PHASE_ROUNDS_MAX {
            return Err(ClientError::LimitExceeded {
                what: format!(
                    "two-phase access over file bytes {low}..{high} with {aggregators} aggregators of {window_bytes} bytes"
                ),
                limit: "two_phase_rounds_max",
                value: rounds,
                max: TWO_PHASE_ROUNDS_MAX,
            });
        }
        Ok(Some(Self {
            low,
            high,
            domain_bytes,
            window_bytes,
            aggregators,
            size,
            rounds,
        }))
    }

    /// The rank of aggregator `index`: spread evenly over the ranks.
    fn rank_of(&self, index: usize) -> usize {
        index * self.size / self.aggregators
    }

    /// The aggregator index of `rank`, if it is one.
    fn index_of(&self, rank: usize) -> Option<usize> {
        (0..self.aggregators).find(|&index| self.rank_of(index) == rank)
    }

    /// File bytes `[start, end)` of aggregator `index`'s window in `round` (maybe empty).
    fn window(&self, index: usize, round: u64) -> (u64, u64) {
        let domain_start = self.low + index as u64 * self.domain_bytes;
        let domain_end = (domain_start + self.domain_bytes).min(self.high);
        let start = (domain_start + round * self.window_bytes).min(domain_end);
        let end = (start + self.window_bytes).min(domain_end);
        (start, end)
    }

    /// Where file byte `offset` belongs: (round, aggregator index, end of that window).
    fn locate(&self, offset: u64) -> (u64, usize, u64) {
        let relative = offset - self.low;
        let index = usize::try_from(relative / self.domain_bytes).expect("below the aggregators");
        let within = relative - index as u64 * self.domain_bytes;
        let round = within / self.window_bytes;
        let (_, end) = self.window(index, round);
        (round, index, end)
    }
}

/// One piece cut at window boundaries: (round, aggregator index, offset, length, stream
/// position), in stream order within each (round, aggregator).
type Chunk = (u64, usize, u64, u64, u64);

fn chunks(flat: &Flat, domains: &Domains) -> Vec<Chunk> {
    let mut chunks = Vec::with_capacity(flat.pieces.len());
    for &(piece, stream) in &flat.pieces {
        let (mut offset, mut stream, end) = (piece.offset, stream, piece.offset + piece.length);
        while offset < end {
            let (round, index, window_end) = domains.locate(offset);
            let length = end.min(window_end) - offset;
            chunks.push((round, index, offset, length, stream));
            offset += length;
            stream += length;
        }
    }
    // Stable: stream order is kept inside each (round, aggregator).
    chunks.sort_by_key(|&(round, index, ..)| (round, index));
    chunks
}

/// Agrees on the domains: every process's `[first, last)` (or its error) goes round.
fn domains(
    viewed: &ViewedFile,
    communicator: &dyn Communicator,
    options: &CollectiveOptions,
    flat: Result<Flat, ClientError>,
) -> Result<Option<(Domains, Flat)>, ClientError> {
    let mut flat_kept = None;
    let local = flat.map(|flat| {
        let first = flat.pieces.iter().map(|(p, _)| p.offset).min().unwrap_or(0);
        let last = flat
            .pieces
            .iter()
            .map(|(p, _)| p.offset + p.length)
            .max()
            .unwrap_or(0);
        flat_kept = Some(flat);
        let mut writer = Writer::default();
        writer.u64(first);
        writer.u64(last);
        writer.0
    });
    let all = agree(communicator, local)?;
    let mut ranges = Vec::with_capacity(all.len());
    for (rank, bytes) in all.iter().enumerate() {
        let mut reader = Reader::new(bytes, rank);
        ranges.push((reader.u64()?, reader.u64()?));
    }
    let servers = viewed.file().layout().servers().len();
    let flat = flat_kept.expect("agreement succeeded, so this process flattened");
    Ok(Domains::new(&ranges, communicator.size(), servers, options)?.map(|d| (d, flat)))
}

/// The chunks of one round, by aggregator index, as ranges into `chunks`.
fn round_slices(
    chunks: &[Chunk],
    cursor: &mut usize,
    round: u64,
    aggregators: usize,
) -> Vec<(usize, usize)> {
    let mut ranges = vec![(0usize, 0usize); aggregators];
    while *cursor < chunks.len() && chunks[*cursor].0 == round {
        let index = chunks[*cursor].1;
        let start = *cursor;
        while *cursor < chunks.len() && chunks[*cursor].0 == round && chunks[*cursor].1 == index {
            *cursor += 1;
        }
        ranges[index] = (start, *cursor);
    }
    ranges
}

/// Sorted, merged runs of `pieces` (offset, length).
fn covered(pieces: &mut [(u64, u64)]) -> Vec<Piece> {
    pieces.sort_unstable_by_key(|&(offset, _)| offset);
    let mut runs: Vec<Piece> = Vec::new();
    for &(offset, length) in pieces.iter() {
        if length == 0 {
            continue;
        }
        match runs.last_mut() {
            Some(last) if offset <= last.offset + last.length => {
                let end = (offset + length).max(last.offset + last.length);
                last.length = end - last.offset;
            }
            _ => runs.push(Piece::new(offset, length)),
        }
    }
    runs
}

fn window_buffer(start: u64, end: u64) -> Vec<u8> {
    vec![0u8; usize::try_from(end - start).expect("a window is at most cb_buffer_size")]
}

fn at(offset: u64, start: u64) -> usize {
    usize::try_from(offset - start).expect("inside the window")
}

pub(crate) fn write(
    viewed: &mut ViewedFile,
    communicator: &dyn Communicator,
    options: &CollectiveOptions,
    access: &Access<'_>,
    memory: &[u8],
) -> Result<IoReport, ClientError> {
    let flat = flatten(viewed, access).and_then(|flat| {
        let slices = memory_slices(memory, access.memtype, access.count)?;
        Ok((flat, pack(&slices)))
    });
    let (flat, packed) = match flat {
        Ok((flat, packed)) => (Ok(flat), packed),
        Err(error) => (Err(error), Vec::new()),
    };
    let Some((domains, flat)) = domains(viewed, communicator, options, flat)? else {
        return Ok(IoReport::default());
    };
    let chunks = chunks(&flat, &domains);
    let rank = communicator.rank();
    let own_index = domains.index_of(rank);
    let mut report = IoReport::default();
    let mut failure: Option<ClientError> = None;
    let mut cursor = 0usize;
    for round in 0..domains.rounds {
        let ranges = round_slices(&chunks, &mut cursor, round, domains.aggregators);
        let mut messages = vec![Vec::new(); communicator.size()];
        for (index, &(start, end)) in ranges.iter().enumerate() {
            if start == end {
                continue;
            }
            let mut writer = Writer::default();
            writer.u32(u32::try_from(end - start).expect("pieces of one window fit u32"));
            for &(_, _, offset, length, _) in &chunks[start..end] {
                writer.u64(offset);
                writer.u64(length);
            }
            for &(_, _, _, length, stream) in &chunks[start..end] {
                let from = usize::try_from(stream).expect("inside memory");
                let to = from + usize::try_from(length).expect("inside memory");
                writer.0.extend_from_slice(&packed[from..to]);
            }
            messages[domains.rank_of(index)] = writer.0;
        }
        let received = communicator.alltoallv(messages)?;
        let Some(index) = own_index else { continue };
        let (start, end) = domains.window(index, round);
        if start == end || failure.is_some() {
            continue;
        }
        let mut buffer = window_buffer(start, end);
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        // Rank order: a higher rank's bytes land last and win where processes overlap.
        let filled = received.iter().enumerate().try_for_each(|(source, message)| {
            if message.is_empty() {
                return Ok(());
            }
            let mut reader = Reader::new(message, source);
            let count = reader.u32()?;
            let mut list = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let (offset, length) = (reader.u64()?, reader.u64()?);
                if offset < start || offset.saturating_add(length) > end {
                    return Err(ClientError::Collective(format!(
                        "rank {source} sent file bytes {offset}+{length} outside window {start}..{end}"
                    )));
                }
                list.push((offset, length));
            }
            for &(offset, length) in &list {
                let data = reader.bytes(length)?;
                buffer[at(offset, start)..at(offset + length, start)].copy_from_slice(data);
            }
            pieces.extend(list);
            Ok(())
        });
        if let Err(error) = filled {
            failure = Some(error);
            continue;
        }
        let runs = covered(&mut pieces);
        for batch in runs.chunks(ACCESS_BATCH_PIECES_MAX) {
            let slices: Vec<IoSlice<'_>> = batch
                .iter()
                .map(|run| {
                    IoSlice::new(&buffer[at(run.offset, start)..at(run.offset + run.length, start)])
                })
                .collect();
            match viewed.file().write_list(&slices, batch) {
                Ok(written) => report += written,
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    report.bytes = flat.total;
    Ok(report)
}

pub(crate) fn read(
    viewed: &mut ViewedFile,
    communicator: &dyn Communicator,
    options: &CollectiveOptions,
    access: &Access<'_>,
    memory: &mut [u8],
) -> Result<IoReport, ClientError> {
    let flat = flatten(viewed, access);
    // Check the memory before any data moves, so a bad memory type fails every process.
    let flat = flat.and_then(|flat| {
        memory_slices_mut(memory, access.memtype, access.count)?;
        Ok(flat)
    });
    let Some((domains, flat)) = domains(viewed, communicator, options, flat)? else {
        return Ok(IoReport::default());
    };
    let chunks = chunks(&flat, &domains);
    let rank = communicator.rank();
    let own_index = domains.index_of(rank);
    let mut packed = vec![0u8; usize::try_from(flat.total).expect("memory holds it")];
    let mut report = IoReport::default();
    let mut failure: Option<ClientError> = None;
    let mut cursor = 0usize;
    for round in 0..domains.rounds {
        let ranges = round_slices(&chunks, &mut cursor, round, domains.aggregators);
        let mut requests = vec![Vec::new(); communicator.size()];
        for (index, &(start, end)) in ranges.iter().enumerate() {
            if start == end {
                continue;
            }
            let mut writer = Writer::default();
            writer.u32(u32::try_from(end - start).expect("pieces of one window fit u32"));
            for &(_, _, offset, length, _) in &chunks[start..end] {
                writer.u64(offset);
                writer.u64(length);
            }
            requests[domains.rank_of(index)] = writer.0;
        }
        let asked = communicator.alltoallv(requests)?;
        let mut answers = vec![Vec::new(); communicator.size()];
        if let Some(index) = own_index.filter(|_| failure.is_none()) {
            let (start, end) = domains.window(index, round);
            match serve_window(viewed, &asked, start, end, &mut report) {
                Ok(served) => answers = served,
                Err(error) => failure = Some(error),
            }
        }
        let answered = communicator.alltoallv(answers)?;
        if failure.is_some() {
            continue;
        }
        for (index, &(start, end)) in ranges.iter().enumerate() {
            if start == end {
                continue;
            }
            let source = domains.rank_of(index);
            let mut reader = Reader::new(&answered[source], source);
            for &(_, _, _, length, stream) in &chunks[start..end] {
                match reader.bytes(length) {
                    Ok(data) => {
                        let from = usize::try_from(stream).expect("inside memory");
                        packed[from..from + data.len()].copy_from_slice(data);
                    }
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    let targets = memory_slices_mut(memory, access.memtype, access.count)?;
    crate::access::unpack(&packed, targets);
    report.bytes = flat.total;
    Ok(report)
}

/// An aggregator's part of a read round: reads the union of what every process asked of
/// window `[start, end)` and returns each process's bytes, in the order it asked.
fn serve_window(
    viewed: &ViewedFile,
    asked: &[Vec<u8>],
    start: u64,
    end: u64,
    report: &mut IoReport,
) -> Result<Vec<Vec<u8>>, ClientError> {
    let mut lists: Vec<Vec<(u64, u64)>> = Vec::with_capacity(asked.len());
    for (source, message) in asked.iter().enumerate() {
        let mut list = Vec::new();
        if !message.is_empty() {
            let mut reader = Reader::new(message, source);
            for _ in 0..reader.u32()? {
                let (offset, length) = (reader.u64()?, reader.u64()?);
                if offset < start || offset.saturating_add(length) > end {
                    return Err(ClientError::Collective(format!(
                        "rank {source} asked for file bytes {offset}+{length} outside window {start}..{end}"
                    )));
                }
                list.push((offset, length));
            }
        }
        lists.push(list);
    }
    let mut all: Vec<(u64, u64)> = lists.iter().flatten().copied().collect();
    let runs = covered(&mut all);
    if runs.is_empty() {
        return Ok(vec![Vec::new(); asked.len()]);
    }
    let mut buffer = window_buffer(start, end);
    {
        // Disjoint, sorted runs: cut the window buffer into their slices front to back.
        let mut rest: &mut [u8] = &mut buffer;
        let mut consumed = start;
        let mut slices: Vec<IoSliceMut<'_>> = Vec::with_capacity(runs.len());
        for run in &runs {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(at(run.offset, consumed));
            let (piece, tail) = tail.split_at_mut(at(run.offset + run.length, run.offset));
            slices.push(IoSliceMut::new(piece));
            rest = tail;
            consumed = run.offset + run.length;
        }
        let mut slices = slices.into_iter();
        for batch in runs.chunks(ACCESS_BATCH_PIECES_MAX) {
            let mut part: Vec<IoSliceMut<'_>> = slices.by_ref().take(batch.len()).collect();
            *report += viewed.file().read_list(&mut part, batch)?;
        }
    }
    Ok(lists
        .iter()
        .map(|list| {
            let mut data = Vec::with_capacity(
                usize::try_from(list.iter().map(|(_, length)| length).sum::<u64>())
                    .expect("inside the window"),
            );
            for &(offset, length) in list {
                data.extend_from_slice(&buffer[at(offset, start)..at(offset + length, start)]);
            }
            data
        })
        .collect())
}
