//! Turning a list access into one request per involved server.
//!
//! The data stream of an access is the concatenation of its file pieces in list order; the
//! memory list holds the same stream. [`Plan::new`] walks the file pieces through the stripe
//! layout and gives every server the local pieces that fall on it, in stream order, merging a
//! piece into the previous one when they are adjacent in the server's object, and starting a
//! new request only when one would exceed `REQUEST_PIECES_MAX` pieces or
//! `MESSAGE_BULK_BYTES_MAX` bytes. [`Plan::carve`] then cuts the caller's memory pieces, in
//! stream order and without copying, into the slices each request sends from or receives into.

use tessera_proto::access::MatchedView;
use tessera_proto::limits::{
    MESSAGE_BULK_BYTES_MAX, REQUEST_PIECES_MAX, REQUEST_SEGMENTS_MAX, STREAM_RANGES_MAX,
};
use tessera_proto::{Layout, Piece, SegmentCursor};

/// A datatype or view request may span at most this many layout segments of all servers:
/// half the server's limit, so the boundary runs the two sides cut differently never matter.
const PLAN_SEGMENTS_MAX: u64 = REQUEST_SEGMENTS_MAX / 2;

/// One request to one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPlan {
    /// Position of the server in the layout.
    pub server_position: usize,
    /// Local pieces, in data order.
    pub pieces: Vec<Piece>,
    /// Bytes of data.
    pub bytes: u64,
    /// The stream range `[start, end)` of the access this request serves: the server's share
    /// of exactly this range is `pieces` (used by datatype and view requests).
    pub stream: (u64, u64),
    /// Local pieces the server will find in its share: `pieces.len()`, except in a plan made
    /// by [`Plan::counted_from_runs`], whose `pieces` is a placeholder.
    pub local_pieces: usize,
    /// The parts of `stream` that hold this request's bytes, merged, in stream order; `None`
    /// past `STREAM_RANGES_MAX` (see [`RequestPlan::stream_ranges`]).
    stream_ranges: Option<Vec<Piece>>,
    /// Index of the layout segment (over all servers) where the request began.
    first_segment: u64,
    /// For each piece, the number of this request's stream chunks up to its end.
    piece_chunk_ends: Vec<usize>,
    chunk_count: usize,
}

impl RequestPlan {
    fn new(server_position: usize, stream: u64, first_segment: u64) -> Self {
        Self {
            server_position,
            pieces: Vec::new(),
            bytes: 0,
            stream: (stream, stream),
            local_pieces: 0,
            stream_ranges: Some(Vec::new()),
            first_segment,
            piece_chunk_ends: Vec::new(),
            chunk_count: 0,
        }
    }

    /// Adds stream bytes `[start, start + length)` (after all the request has) to the request.
    fn add_stream(&mut self, start: u64, length: u64) {
        self.stream.1 = start + length;
        let Some(ranges) = &mut self.stream_ranges else {
            return;
        };
        if let Some(last) = ranges
            .last_mut()
            .filter(|last| last.offset + last.length == start)
        {
            last.length += length;
        } else if ranges.len() < STREAM_RANGES_MAX {
            ranges.push(Piece::new(start, length));
        } else {
            self.stream_ranges = None;
        }
    }

    /// The parts of `stream` that hold this request's bytes, for a datatype or view request to
    /// name so its server walks only those: empty when they are the whole range or too many.
    pub fn stream_ranges(&self) -> Vec<Piece> {
        match &self.stream_ranges {
            Some(ranges) if ranges.len() > 1 => ranges.clone(),
            _ => Vec::new(),
        }
    }
}

/// The requests of one access, and the stream chunks that map memory to them.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Requests, grouped by server in the order they must be sent.
    pub requests: Vec<RequestPlan>,
    /// Stream chunks in stream order: (index into `requests`, length).
    chunks: Vec<(usize, u64)>,
    /// Bytes of the whole access.
    pub total_bytes: u64,
}

/// Memory that can be cut into consecutive parts without copying: `&[u8]` or `&mut [u8]`.
pub trait Carve: Sized {
    /// Bytes held.
    fn length(&self) -> usize;
    /// Splits off the first `at` bytes.
    fn cut(self, at: usize) -> (Self, Self);
}

impl Carve for &[u8] {
    fn length(&self) -> usize {
        self.len()
    }
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }
}

impl Carve for &mut [u8] {
    fn length(&self) -> usize {
        self.len()
    }
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// The memory of one request: slices in data order, grouped by piece (see
/// `tessera_net::PieceData`).
#[derive(Debug)]
pub struct CarvedRequest<S> {
    /// Slices in data order.
    pub slices: Vec<S>,
    /// End index into `slices` of each piece.
    pub piece_ends: Vec<usize>,
}

impl Plan {
    /// Entries the plan holds: stream chunks, and each request's pieces, piece ends and stream
    /// ranges (8 to 16 bytes each). What keeping the plan costs in memory.
    pub fn entries(&self) -> usize {
        self.chunks.len()
            + self
                .requests
                .iter()
                .map(|request| {
                    request.pieces.len()
                        + request.piece_chunk_ends.len()
                        + request.stream_ranges.as_ref().map_or(0, Vec::len)
                })
                .sum::<usize>()
    }

    /// Plans `file_pieces` over `layout`. Zero-length pieces are skipped.
    pub fn new(layout: &Layout, file_pieces: &[Piece]) -> Self {
        Self::from_runs(layout, 0, file_pieces.iter().copied())
    }

    /// Plans the file runs of a stream that starts at stream byte `stream_start`, in stream
    /// order. Zero-length runs are skipped.
    pub fn from_runs(
        layout: &Layout,
        stream_start: u64,
        runs: impl IntoIterator<Item = Piece>,
    ) -> Self {
        Self::from_runs_capped(
            layout,
            stream_start,
            runs,
            u64::from(MESSAGE_BULK_BYTES_MAX),
        )
    }

    /// As [`Plan::from_runs`], with requests of at most `bulk_max` bytes (at least 1, at most
    /// `MESSAGE_BULK_BYTES_MAX`): a server-directed collective keeps each participant's
    /// requests small enough for every participant's data to fit the server's collective
    /// limit at once.
    pub fn from_runs_capped(
        layout: &Layout,
        stream_start: u64,
        runs: impl IntoIterator<Item = Piece>,
        bulk_max: u64,
    ) -> Self {
        let bulk_max = bulk_max.clamp(1, u64::from(MESSAGE_BULK_BYTES_MAX));
        let mut plan = Self::default();
        // Index in `requests` of each server's open request.
        let mut open: Vec<Option<usize>> = vec![None; layout.servers().len()];
        let mut stream = stream_start;
        let mut segment_index = 0u64;
        let mut cursor = SegmentCursor::new(layout);
        for run in runs.into_iter().filter(|run| run.length > 0) {
            cursor.for_each_segment(run.offset, run.length, |segment| {
                segment_index += 1;
                let mut local_offset = segment.local_offset;
                let mut remaining = segment.length;
                while remaining > 0 {
                    let position = segment.server_position;
                    let fits = |request: &RequestPlan| {
                        request.bytes < bulk_max
                            && request.pieces.len() < REQUEST_PIECES_MAX as usize
                            && segment_index - request.first_segment < PLAN_SEGMENTS_MAX
                    };
                    let index = match open[position] {
                        Some(index) if fits(&plan.requests[index]) => index,
                        _ => {
                            plan.requests
                                .push(RequestPlan::new(position, stream, segment_index));
                            open[position] = Some(plan.requests.len() - 1);
                            plan.requests.len() - 1
                        }
                    };
                    let request = &mut plan.requests[index];
                    let length = remaining.min(bulk_max - request.bytes);
                    request.chunk_count += 1;
                    match request.pieces.last_mut() {
                        Some(last) if last.offset + last.length == local_offset => {
                            last.length += length;
                            *request
                                .piece_chunk_ends
                                .last_mut()
                                .expect("one end per piece") = request.chunk_count;
                        }
                        _ => {
                            request.pieces.push(Piece::new(local_offset, length));
                            request.piece_chunk_ends.push(request.chunk_count);
                            request.local_pieces += 1;
                        }
                    }
                    request.bytes += length;
                    request.add_stream(stream, length);
                    stream += length;
                    plan.chunks.push((index, length));
                    plan.total_bytes += length;
                    local_offset += length;
                    remaining -= length;
                }
            });
        }
        plan
    }

    /// The plan of stream bytes `[start, end)` of a view that matches a pattern layout
    /// ([`MatchedView`]), found without a walk: requests of at most `bulk_max` bytes to its one
    /// server, each a single local piece.
    pub fn matched(matched: MatchedView, start: u64, end: u64, bulk_max: u64) -> Self {
        let bulk_max = bulk_max.clamp(1, u64::from(MESSAGE_BULK_BYTES_MAX));
        let mut plan = Self::default();
        let mut stream = start;
        while stream < end {
            let length = (end - stream).min(bulk_max);
            let mut request = RequestPlan::new(matched.position, stream, 0);
            request.pieces = vec![Piece::new(matched.local_base + stream, length)];
            request.local_pieces = 1;
            request.bytes = length;
            request.piece_chunk_ends = vec![1];
            request.chunk_count = 1;
            request.add_stream(stream, length);
            plan.chunks.push((plan.requests.len(), length));
            plan.requests.push(request);
            plan.total_bytes += length;
            stream += length;
        }
        plan
    }

    /// As [`Plan::from_runs_capped`] for datatype-described requests whose pieces the server
    /// computes itself: the requests, their stream ranges, bytes and piece counts
    /// (`local_pieces`) are the same, but no piece list is kept — each request's `pieces` is
    /// one placeholder piece of its length — and consecutive stream chunks of one request are
    /// recorded as one. So it costs a counter per run instead of list entries, and its memory
    /// must be cut with [`Plan::carve_merged`] and sent in a mode other than the framed
    /// `multiple` (which sends one frame per real piece).
    pub fn counted_from_runs(
        layout: &Layout,
        stream_start: u64,
        runs: impl IntoIterator<Item = Piece>,
        bulk_max: u64,
    ) -> Self {
        let bulk_max = bulk_max.clamp(1, u64::from(MESSAGE_BULK_BYTES_MAX));
        let mut plan = Self::default();
        let mut open: Vec<Option<usize>> = vec![None; layout.servers().len()];
        // The local end of each request's last piece.
        let mut local_ends: Vec<u64> = Vec::new();
        let mut stream = stream_start;
        let mut segment_index = 0u64;
        let mut cursor = SegmentCursor::new(layout);
        for run in runs.into_iter().filter(|run| run.length > 0) {
            cursor.for_each_segment(run.offset, run.length, |segment| {
                segment_index += 1;
                let mut local_offset = segment.local_offset;
                let mut remaining = segment.length;
                while remaining > 0 {
                    let position = segment.server_position;
                    let index = match open[position] {
                        Some(index)
                            if plan.requests[index].bytes < bulk_max
                                && plan.requests[index].local_pieces
                                    < REQUEST_PIECES_MAX as usize
                                && segment_index - plan.requests[index].first_segment
                                    < PLAN_SEGMENTS_MAX =>
                        {
                            index
                        }
                        _ => {
                            plan.requests
                                .push(RequestPlan::new(position, stream, segment_index));
                            local_ends.push(u64::MAX);
                            open[position] = Some(plan.requests.len() - 1);
                            plan.requests.len() - 1
                        }
                    };
                    let request = &mut plan.requests[index];
                    let length = remaining.min(bulk_max - request.bytes);
                    if local_ends[index] != local_offset {
                        request.local_pieces += 1;
                    }
                    local_ends[index] = local_offset + length;
                    request.bytes += length;
                    request.add_stream(stream, length);
                    stream += length;
                    match plan.chunks.last_mut() {
                        Some((last, bytes)) if *last == index => *bytes += length,
                        _ => plan.chunks.push((index, length)),
                    }
                    plan.total_bytes += length;
                    local_offset += length;
                    remaining -= length;
                }
            });
        }
        for request in &mut plan.requests {
            request.pieces = vec![Piece::new(0, request.bytes)];
        }
        plan
    }

    /// Positions of the servers the plan sends to, without repeats.
    pub fn server_positions(&self) -> Vec<usize> {
        let mut positions: Vec<usize> = self.requests.iter().map(|r| r.server_position).collect();
        positions.sort_unstable();
        positions.dedup();
        positions
    }

    /// Rounds of requests: round `r` holds the `r`-th request of every server, so each server
    /// has at most one request outstanding while the servers work in parallel.
    pub fn rounds(&self) -> Vec<Vec<usize>> {
        let mut seen = std::collections::HashMap::new();
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        for (index, request) in self.requests.iter().enumerate() {
            let round = seen.entry(request.server_position).or_insert(0usize);
            if rounds.len() <= *round {
                rounds.push(Vec::new());
            }
            rounds[*round].push(index);
            *round += 1;
        }
        rounds
    }

    /// As [`Plan::carve`], but consecutive chunks of one request are cut as one: a request
    /// whose stream is contiguous in the caller's memory gets one slice, not one per piece.
    /// The slices then do not end at piece boundaries, so `piece_ends` only says where the
    /// last piece ends (every entry is the slice count): fit for every transfer but the
    /// framed `multiple` mode, which sends each piece's slices in a frame of its own.
    pub fn carve_merged<S: Carve>(
        &self,
        memory: impl IntoIterator<Item = S>,
    ) -> Vec<CarvedRequest<S>> {
        let mut carved: Vec<CarvedRequest<S>> = self
            .requests
            .iter()
            .map(|_| CarvedRequest {
                slices: Vec::new(),
                piece_ends: Vec::new(),
            })
            .collect();
        let mut memory = memory.into_iter().filter(|slice| slice.length() > 0);
        let mut current: Option<S> = None;
        let mut chunks = self.chunks.iter().peekable();
        while let Some(&(index, length)) = chunks.next() {
            let mut needed = length;
            while let Some(&&(next, more)) = chunks.peek() {
                if next != index {
                    break;
                }
                needed += more;
                chunks.next();
            }
            let mut needed =
                usize::try_from(needed).expect("a request is bounded by the bulk limit");
            while needed > 0 {
                let slice = current
                    .take()
                    .or_else(|| memory.next())
                    .expect("memory holds the whole stream");
                if slice.length() <= needed {
                    needed -= slice.length();
                    carved[index].slices.push(slice);
                } else {
                    let (head, tail) = slice.cut(needed);
                    carved[index].slices.push(head);
                    current = Some(tail);
                    needed = 0;
                }
            }
        }
        debug_assert!(
            current.is_none() && memory.next().is_none(),
            "memory longer than the stream"
        );
        for (request, carved) in self.requests.iter().zip(&mut carved) {
            carved.piece_ends = vec![carved.slices.len(); request.pieces.len()];
        }
        carved
    }

    /// Cuts `memory` (whose lengths add up to `total_bytes`) into each request's slices.
    pub fn carve<S: Carve>(&self, memory: impl IntoIterator<Item = S>) -> Vec<CarvedRequest<S>> {
        let mut carved: Vec<CarvedRequest<S>> = self
            .requests
            .iter()
            .map(|request| CarvedRequest {
                slices: Vec::new(),
                piece_ends: Vec::with_capacity(request.pieces.len()),
            })
            .collect();
        // Slice count of each request at the end of each of its chunks.
        let mut chunk_slice_ends: Vec<Vec<usize>> = self
            .requests
            .iter()
            .map(|request| Vec::with_capacity(request.chunk_count))
            .collect();
        let mut memory = memory.into_iter().filter(|slice| slice.length() > 0);
        let mut current: Option<S> = None;
        for &(index, length) in &self.chunks {
            let mut needed = usize::try_from(length).expect("chunks are bounded by the bulk limit");
            while needed > 0 {
                let slice = current
                    .take()
                    .or_else(|| memory.next())
                    .expect("memory holds the whole stream");
                if slice.length() <= needed {
                    needed -= slice.length();
                    carved[index].slices.push(slice);
                } else {
                    let (head, tail) = slice.cut(needed);
                    carved[index].slices.push(head);
                    current = Some(tail);
                    needed = 0;
                }
            }
            chunk_slice_ends[index].push(carved[index].slices.len());
        }
        debug_assert!(
            current.is_none() && memory.next().is_none(),
            "memory longer than the stream"
        );
        for ((request, carved), slice_ends) in
            self.requests.iter().zip(&mut carved).zip(&chunk_slice_ends)
        {
            carved.piece_ends = request
                .piece_chunk_ends
                .iter()
                .map(|&chunks| slice_ends[chunks - 1])
                .collect();
        }
        carved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tessera_proto::access::server_share;
    use tessera_proto::{Datatype, FileType, StripeLayout};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A server that walks only the stream ranges a request names finds the same local
        /// pieces as one that walks the request's whole range, and as the client planned;
        /// the ranges hold exactly the request's bytes.
        #[test]
        fn a_request_s_stream_ranges_hold_its_whole_share(
            blocklen in 1u64..40,
            gap in 0u64..90,
            count in 1u64..60,
            unit in 64u64..160,
            servers in 1u16..5,
            displacement in 0u64..300,
            start in 0u64..200,
            length in 0u64..3000,
            bulk_max in prop_oneof![Just(u64::MAX), 1u64..400],
        ) {
            let stride = i64::try_from(blocklen + gap).unwrap();
            let filetype = Datatype::hvector(count, blocklen, stride, &Datatype::byte()).unwrap();
            let layout: Layout =
                StripeLayout::new(unit, (0..servers).collect()).unwrap().into();
            let end = start + length;
            let runs = filetype.runs(i64::try_from(displacement).unwrap(), start, end).unwrap();
            let runs: Vec<Piece> = runs
                .map(|run| Piece::new(u64::try_from(run.offset).unwrap(), run.length))
                .collect();
            let plan = Plan::from_runs_capped(&layout, start, runs.iter().copied(), bulk_max);
            let counted = Plan::counted_from_runs(&layout, start, runs.iter().copied(), bulk_max);
            for (request, counted) in plan.requests.iter().zip(&counted.requests) {
                let ranges = request.stream_ranges();
                prop_assert_eq!(&ranges, &counted.stream_ranges());
                if !ranges.is_empty() {
                    prop_assert_eq!(ranges.iter().map(|r| r.length).sum::<u64>(), request.bytes);
                }
                let file = FileType {
                    layout: layout.clone(),
                    position: u16::try_from(request.server_position).unwrap(),
                    filetype: filetype.clone(),
                    displacement,
                };
                let (first, last) = request.stream;
                let named = server_share(&file, first, last, &ranges).unwrap();
                let whole = server_share(&file, first, last, &[]).unwrap();
                prop_assert_eq!(&named.pieces, &request.pieces);
                prop_assert_eq!(&whole.pieces, &request.pieces);
                prop_assert_eq!(named.bytes, request.bytes);
            }
        }
    }

    #[test]
    fn a_request_with_too_many_stream_ranges_names_none() {
        let layout: Layout = StripeLayout::new(64, vec![0, 1]).unwrap().into();
        // 64-byte runs alternate servers: server 0's ranges are every other run.
        let runs = |count: u64| (0..count).map(|k| Piece::new(k * 64, 64));
        let plan = Plan::from_runs(&layout, 0, runs(2 * STREAM_RANGES_MAX as u64));
        let ranges = plan.requests[0].stream_ranges();
        assert_eq!(ranges.len(), STREAM_RANGES_MAX);
        assert_eq!(ranges[1], Piece::new(128, 64));
        let plan = Plan::from_runs(&layout, 0, runs(2 * STREAM_RANGES_MAX as u64 + 2));
        assert!(plan.requests[0].stream_ranges().is_empty());
        // One range, the whole request: none named.
        let plan = Plan::from_runs(&layout, 0, [Piece::new(0, 64)]);
        assert!(plan.requests[0].stream_ranges().is_empty());
    }

    #[test]
    fn a_plan_s_entries_count_its_chunks_lists_and_ranges() {
        let layout: Layout = StripeLayout::new(64, vec![0, 1]).unwrap().into();
        // 32-byte runs, one per stripe unit, alternate servers: 8 chunks; each server gets
        // 4 pieces, 4 piece ends and 4 stream ranges, in a counted plan the ranges and one
        // piece standing for the request's bytes.
        let runs = (0..8).map(|k| Piece::new(k * 64, 32));
        let plan = Plan::from_runs(&layout, 0, runs.clone());
        assert_eq!(plan.entries(), 8 + 2 * (4 + 4 + 4));
        let counted = Plan::counted_from_runs(&layout, 0, runs, u64::MAX);
        assert_eq!(counted.entries(), 8 + 2 * (1 + 4));
    }

    #[test]
    fn a_counted_plan_has_the_full_plans_requests_without_their_lists() {
        let layout: Layout = StripeLayout::new(64, vec![0, 1, 2]).unwrap().into();
        // Runs of 5 bytes every 7, some across unit boundaries; small requests.
        let runs: Vec<Piece> = (0..500).map(|k| Piece::new(k * 7, 5)).collect();
        for bulk_max in [16, 100, 1 << 20] {
            let full = Plan::from_runs_capped(&layout, 3, runs.iter().copied(), bulk_max);
            let counted = Plan::counted_from_runs(&layout, 3, runs.iter().copied(), bulk_max);
            assert_eq!(full.requests.len(), counted.requests.len());
            assert_eq!(full.total_bytes, counted.total_bytes);
            for (full, counted) in full.requests.iter().zip(&counted.requests) {
                assert_eq!(full.server_position, counted.server_position);
                assert_eq!(full.stream, counted.stream);
                assert_eq!(full.bytes, counted.bytes);
                assert_eq!(full.local_pieces, full.pieces.len());
                assert_eq!(counted.local_pieces, full.pieces.len());
                assert_eq!(counted.pieces, vec![Piece::new(0, full.bytes)]);
            }
            let memory: Vec<u8> = (0..2500u32)
                .map(|k| u8::try_from(k % 251).unwrap())
                .collect();
            for (a, b) in full
                .carve_merged([&memory[..]])
                .iter()
                .zip(&counted.carve_merged([&memory[..]]))
            {
                assert_eq!(a.slices.concat(), b.slices.concat());
            }
        }
    }

    #[test]
    fn merged_carving_gives_one_slice_per_contiguous_request() {
        let layout: Layout = StripeLayout::new(64, vec![0, 1]).unwrap().into();
        // Every other 4-byte int of 256 bytes: stripes of 64 alternate servers.
        let pieces: Vec<Piece> = (0..32).map(|k| Piece::new(k * 8, 4)).collect();
        let plan = Plan::new(&layout, &pieces);
        let memory: Vec<u8> = (0..128).collect();
        let exact = plan.carve([&memory[..]]);
        let merged = plan.carve_merged([&memory[..]]);
        for (exact, merged) in exact.iter().zip(&merged) {
            assert_eq!(exact.slices.concat(), merged.slices.concat());
            assert!(merged.slices.len() < exact.slices.len());
            assert_eq!(merged.piece_ends.len(), exact.piece_ends.len());
        }
        // The stream alternates servers every 8 pieces: 4 runs of 8, one slice each.
        assert_eq!(merged.iter().map(|c| c.slices.len()).sum::<usize>(), 4);
    }

    #[test]
    fn one_request_per_server_with_merged_pieces() {
        let layout: Layout = StripeLayout::new(100, vec![0, 1]).unwrap().into();
        // Two pieces that meet on server 0's object: [0,100) then [200,250) — local 0..100, 100..150.
        let plan = Plan::new(
            &layout,
            &[Piece::new(0, 100), Piece::new(0, 0), Piece::new(150, 100)],
        );
        assert_eq!(plan.total_bytes, 200);
        assert_eq!(plan.requests.len(), 2);
        assert_eq!(
            plan.requests[0].pieces,
            vec![Piece::new(0, 150)],
            "adjacent local pieces merge"
        );
        assert_eq!(plan.requests[1].pieces, vec![Piece::new(50, 50)]);
        assert_eq!(plan.rounds(), vec![vec![0, 1]]);

        let memory: Vec<u8> = (0..200u8).collect();
        let (first, second) = memory.split_at(130);
        let carved = plan.carve([first, second]);
        let server0: Vec<u8> = carved[0].slices.concat();
        let server1: Vec<u8> = carved[1].slices.concat();
        let mut expected0: Vec<u8> = (0..100).collect();
        expected0.extend(150..200u8);
        assert_eq!(server0, expected0);
        assert_eq!(server1, (100..150).collect::<Vec<u8>>());
        assert_eq!(carved[0].piece_ends, vec![carved[0].slices.len()]);
    }

    #[test]
    fn splits_requests_at_the_piece_limit() {
        let layout: Layout = StripeLayout::new(64, vec![0]).unwrap().into();
        let pieces: Vec<Piece> = (0..u64::from(REQUEST_PIECES_MAX) + 3)
            .map(|i| Piece::new(i * 2, 1))
            .collect();
        let plan = Plan::new(&layout, &pieces);
        assert_eq!(plan.requests.len(), 2);
        assert_eq!(plan.requests[0].pieces.len(), REQUEST_PIECES_MAX as usize);
        assert_eq!(plan.requests[1].pieces.len(), 3);
        assert_eq!(plan.rounds(), vec![vec![0], vec![1]]);
    }
}
