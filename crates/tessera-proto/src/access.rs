//! The share of one server in a datatype access: the walk both sides agree on.
//!
//! A datatype or view request names a range `[start, end)` of the stream of a file type
//! tiled from a displacement. The server walks the runs of that range lazily
//! ([`tessera_dtype::Datatype::runs`]), splits each run by the file's layout, keeps the
//! segments on its own position and merges those adjacent in its local object: the local
//! pieces of the request, in stream order. The client plans its requests with the same walk
//! and the same merge rule, so both sides arrive at the same pieces without a list on the
//! wire. A request may also name the parts of its range that hold the server's bytes (at
//! most [`STREAM_RANGES_MAX`]); the server then walks only those, not every server's runs.
//! The walk is bounded: at most [`REQUEST_SEGMENTS_MAX`] segments of all servers, at most
//! [`REQUEST_PIECES_MAX`] local pieces and [`MESSAGE_BULK_BYTES_MAX`] bytes.

use tessera_dtype::Datatype;

use crate::error::{ErrorCode, RemoteError};
use crate::layout::Layout;
use crate::limits::{
    FILE_BYTES_MAX, MATCH_RUNS_MAX, MESSAGE_BULK_BYTES_MAX, REQUEST_PIECES_MAX,
    REQUEST_SEGMENTS_MAX, STREAM_RANGES_MAX,
};
use crate::message::{FileType, Piece};

/// Checks that stream bytes `[start, end)` of `filetype` tiled from `displacement` fall
/// inside the file limits, before any walk.
pub fn check_file_range(
    filetype: &Datatype,
    displacement: u64,
    start: u64,
    end: u64,
) -> Result<(), RemoteError> {
    if start > end {
        return Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            format!("stream range {start}..{end} is reversed"),
        ));
    }
    if displacement > FILE_BYTES_MAX {
        return Err(RemoteError::over_limit(
            "file_bytes_max",
            displacement,
            FILE_BYTES_MAX,
        ));
    }
    if start == end {
        return Ok(());
    }
    if filetype.size() == 0 {
        return Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            "the file type selects no bytes, so no stream range of it can be accessed",
        ));
    }
    #[allow(clippy::cast_possible_wrap)] // displacement ≤ file_bytes_max < i64::MAX
    let (low, high) = filetype
        .span(displacement as i64, start, end)
        .expect("a non-empty range of a non-empty type");
    if low < 0 {
        return Err(RemoteError::new(
            ErrorCode::InvalidArgument,
            format!("the file type reaches byte {low}, before the start of the file"),
        ));
    }
    if high > i128::from(FILE_BYTES_MAX) {
        return Err(RemoteError::over_limit(
            "file_bytes_max",
            u64::try_from(high).unwrap_or(u64::MAX),
            FILE_BYTES_MAX,
        ));
    }
    Ok(())
}

/// The local pieces of one server's share of a request, in stream order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Share {
    /// Merged local pieces.
    pub pieces: Vec<Piece>,
    /// Bytes in them.
    pub bytes: u64,
}

/// Walks stream bytes `[start, end)` of `file` and returns the share of `file.position`.
/// With `ranges` (as (first stream byte, length), in order, inside `[start, end)`; empty:
/// the whole range), the ones the client found to hold this server's bytes
/// ([`check_stream_ranges`]), it walks only those: on a layout that spreads a request over
/// many servers each then visits its own runs, not every server's. A wrong list can change
/// the share but never reach outside `[start, end)`.
pub fn server_share(
    file: &FileType,
    start: u64,
    end: u64,
    ranges: &[Piece],
) -> Result<Share, RemoteError> {
    Ok(server_share_within(file, start, end, ranges, u64::MAX)?
        .expect("an unbounded walk always finishes"))
}

/// As [`server_share`], but gives up (`Ok(None)`) once the walk has
/// crossed more than `segments_max` segments of all servers: a server runs a walk it knows
/// to be short inline and moves a long one to a thread of its own without first having to
/// guess its length.
pub fn server_share_within(
    file: &FileType,
    start: u64,
    end: u64,
    ranges: &[Piece],
    segments_max: u64,
) -> Result<Option<Share>, RemoteError> {
    check_file_range(&file.filetype, file.displacement, start, end)?;
    check_stream_ranges(ranges, start, end)?;
    let mut share = Share::default();
    if start == end {
        return Ok(Some(share));
    }
    let whole = [Piece::new(start, end - start)];
    let ranges = if ranges.is_empty() {
        &whole[..]
    } else {
        ranges
    };
    let position = usize::from(file.position);
    let mut segments = 0u64;
    let mut failure = None;
    let mut cursor = crate::layout::SegmentCursor::new(&file.layout);
    for range in ranges {
        #[allow(clippy::cast_possible_wrap)] // displacement ≤ file_bytes_max < i64::MAX
        let runs = file
            .filetype
            .runs(
                file.displacement as i64,
                range.offset,
                range.offset + range.length,
            )
            .map_err(|err| RemoteError::new(ErrorCode::InvalidArgument, err.to_string()))?;
        for run in runs {
            let offset = u64::try_from(run.offset).expect("checked by check_file_range");
            cursor.for_each_segment(offset, run.length, |segment| {
                segments += 1;
                if segment.server_position != position || failure.is_some() {
                    return;
                }
                match share.pieces.last_mut() {
                    Some(last) if last.offset + last.length == segment.local_offset => {
                        last.length += segment.length;
                    }
                    _ => share
                        .pieces
                        .push(Piece::new(segment.local_offset, segment.length)),
                }
                share.bytes += segment.length;
                if share.pieces.len() > REQUEST_PIECES_MAX as usize {
                    failure = Some(RemoteError::over_limit(
                        "request_pieces_max",
                        share.pieces.len() as u64,
                        u64::from(REQUEST_PIECES_MAX),
                    ));
                } else if share.bytes > u64::from(MESSAGE_BULK_BYTES_MAX) {
                    failure = Some(RemoteError::over_limit(
                        "message_bulk_bytes_max",
                        share.bytes,
                        u64::from(MESSAGE_BULK_BYTES_MAX),
                    ));
                }
            });
            if let Some(failure) = failure {
                return Err(failure);
            }
            if segments > REQUEST_SEGMENTS_MAX {
                return Err(RemoteError::over_limit(
                    "request_segments_max",
                    segments,
                    REQUEST_SEGMENTS_MAX,
                ));
            }
            if segments > segments_max {
                return Ok(None);
            }
        }
    }
    Ok(Some(share))
}

/// Checks the stream ranges of a datatype or view request: at most `stream_ranges_max`,
/// none empty, in increasing order without overlap, all inside `[start, end)`.
pub fn check_stream_ranges(ranges: &[Piece], start: u64, end: u64) -> Result<(), RemoteError> {
    if ranges.len() > STREAM_RANGES_MAX {
        return Err(RemoteError::over_limit(
            "stream_ranges_max",
            ranges.len() as u64,
            STREAM_RANGES_MAX as u64,
        ));
    }
    let mut done = start;
    for range in ranges {
        let range_end = range.offset.checked_add(range.length);
        if range.length == 0 || range.offset < done || range_end.is_none_or(|e| e > end) {
            return Err(RemoteError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "stream range {}+{} is empty, out of order or outside the request's {start}..{end}",
                    range.offset, range.length
                ),
            ));
        }
        done = range.offset + range.length;
    }
    Ok(())
}

/// A view whose stream is exactly one server's bytes of a pattern layout, in file order
/// ([`PatternLayout::matched`](crate::PatternLayout::matched)): stream byte `x` lies at
/// local byte `local_base + x` of the server at `position`, so the share of any range is
/// found without a walk, on the client and on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchedView {
    /// The server holding the whole stream.
    pub position: usize,
    /// Its local offset of stream byte 0.
    pub local_base: u64,
}

impl MatchedView {
    /// The match of `filetype` tiled from `displacement` over `layout`, if there is one.
    pub fn of(layout: &Layout, filetype: &Datatype, displacement: u64) -> Option<Self> {
        let Layout::Pattern(pattern) = layout else {
            return None;
        };
        pattern
            .matched(filetype, displacement, MATCH_RUNS_MAX)
            .map(|(position, local_base)| Self {
                position,
                local_base,
            })
    }

    /// The share of `file.position` in stream bytes `[start, end)`: the same as
    /// [`server_share`]'s, with the same checks, in O(1).
    pub fn share(self, file: &FileType, start: u64, end: u64) -> Result<Share, RemoteError> {
        check_file_range(&file.filetype, file.displacement, start, end)?;
        let bytes = end - start;
        if bytes == 0 || usize::from(file.position) != self.position {
            return Ok(Share::default());
        }
        if bytes > u64::from(MESSAGE_BULK_BYTES_MAX) {
            return Err(RemoteError::over_limit(
                "message_bulk_bytes_max",
                bytes,
                u64::from(MESSAGE_BULK_BYTES_MAX),
            ));
        }
        Ok(Share {
            pieces: vec![Piece::new(self.local_base + start, bytes)],
            bytes,
        })
    }
}

/// Positions of the servers that some instance of `filetype` tiled from `displacement`
/// touches. The pattern of a tiled type over a periodic layout repeats after
/// `period / gcd(extent, period)` instances, so those are walked — up to a budget of
/// segments, past which every server is assumed to be touched.
pub fn touched_positions(layout: &Layout, filetype: &Datatype, displacement: u64) -> Vec<bool> {
    const SEGMENTS_BUDGET: u64 = 1 << 16;
    let servers = layout.servers().len();
    let mut touched = vec![false; servers];
    if filetype.size() == 0 {
        return touched;
    }
    let period = match layout {
        Layout::Stripe(stripe) => stripe.stripe_unit_bytes * servers as u64,
        Layout::Pattern(pattern) => pattern.period_bytes(),
    };
    let extent = filetype.extent().unsigned_abs();
    let instances = if extent == 0 {
        1
    } else {
        period / gcd(extent % period, period)
    };
    let bytes = u128::from(instances) * u128::from(filetype.size());
    let everything = vec![true; servers];
    let Ok(end) = u64::try_from(bytes) else {
        return everything;
    };
    if check_file_range(filetype, displacement, 0, end).is_err() {
        return everything;
    }
    #[allow(clippy::cast_possible_wrap)] // checked by check_file_range
    let Ok(runs) = filetype.runs(displacement as i64, 0, end) else {
        return everything;
    };
    let mut segments = 0u64;
    for run in runs {
        let offset = u64::try_from(run.offset).expect("checked by check_file_range");
        layout.for_each_segment(offset, run.length, |segment| {
            segments += 1;
            touched[segment.server_position] = true;
        });
        if segments > SEGMENTS_BUDGET || touched.iter().all(|&t| t) {
            return everything;
        }
    }
    touched
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StripeLayout;
    use crate::pattern::PatternLayout;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A (*,BLOCK)-like pattern: server `i` holds `widths[i]` columns of every row, in order.
    fn column_pattern(widths: &[u64]) -> PatternLayout {
        let row: u64 = widths.iter().sum();
        let mut first = 0;
        let types = widths
            .iter()
            .map(|&width| {
                let block = Datatype::hindexed(&[width], &[first], &Datatype::byte()).unwrap();
                first += i64::try_from(width).unwrap();
                Datatype::resized(0, i64::try_from(row).unwrap(), &block).unwrap()
            })
            .collect();
        PatternLayout::new((0..u16::try_from(widths.len()).unwrap()).collect(), types).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Where a view matches a pattern layout, the O(1) share is the walked share of every
        /// server for any range; and a block of columns that is one server's does match.
        #[test]
        fn a_matched_view_s_share_is_the_walked_share(
            widths in proptest::collection::vec(1u64..6, 1..5),
            rows in 1u64..12,
            server in 0usize..4,
            skew in prop_oneof![Just((0u64, 0i64)), (0u64..3, -1i64..2)],
            periods_before in 0u64..3,
            start in 0u64..80,
            length in 0u64..80,
        ) {
            let server = server % widths.len();
            let pattern = column_pattern(&widths);
            let row: u64 = widths.iter().sum();
            let first: u64 = widths[..server].iter().sum();
            // The server's own columns, or (skewed) a neighbouring block.
            let (shift, grow) = skew;
            let first = (first + shift).min(row - 1);
            let width = u64::try_from(i64::try_from(widths[server]).unwrap() + grow)
                .unwrap()
                .clamp(1, row - first);
            let filetype = columns(rows, row, first, width);
            let displacement = periods_before * row;
            let layout = Layout::Pattern(Arc::new(pattern));
            let matched = MatchedView::of(&layout, &filetype, displacement);
            if skew == (0, 0) {
                prop_assert_eq!(matched.map(|m| m.position), Some(server));
            }
            let Some(matched) = matched else {
                return Ok(());
            };
            let total = filetype.size() * 2;
            let (start, end) = (start.min(total), (start + length).min(total));
            for position in 0..widths.len() {
                let file = FileType {
                    layout: layout.clone(),
                    position: u16::try_from(position).unwrap(),
                    filetype: filetype.clone(),
                    displacement,
                };
                prop_assert_eq!(
                    matched.share(&file, start, end).unwrap(),
                    server_share(&file, start, end, &[]).unwrap()
                );
            }
        }
    }

    #[test]
    fn views_that_are_not_one_server_s_bytes_in_order_do_not_match() {
        let layout = Layout::Pattern(Arc::new(column_pattern(&[4, 4, 4, 4])));
        // Server 1's columns.
        assert_eq!(
            MatchedView::of(&layout, &columns(8, 16, 4, 4), 32),
            Some(MatchedView {
                position: 1,
                local_base: 8
            })
        );
        // Half of them; or two servers' columns; or displaced within a row.
        assert_eq!(MatchedView::of(&layout, &columns(8, 16, 4, 2), 0), None);
        assert_eq!(MatchedView::of(&layout, &columns(8, 16, 4, 8), 0), None);
        assert_eq!(MatchedView::of(&layout, &columns(8, 16, 4, 4), 3), None);
        // Server 1's columns, rows in reverse order.
        let reversed = Datatype::hindexed(&[4, 4], &[16 + 4, 4], &Datatype::byte()).unwrap();
        let reversed = Datatype::resized(0, 32, &reversed).unwrap();
        assert_eq!(MatchedView::of(&layout, &reversed, 0), None);
        // Stripes never match.
        let stripes = Layout::Stripe(StripeLayout::new(64, vec![0, 1]).unwrap());
        assert_eq!(MatchedView::of(&stripes, &columns(8, 16, 4, 4), 0), None);
    }

    fn columns(rows: u64, row_bytes: u64, first: u64, width: u64) -> Datatype {
        Datatype::subarray(
            &[rows, row_bytes],
            &[rows, width],
            &[0, first],
            tessera_dtype::Order::C,
            &Datatype::byte(),
        )
        .unwrap()
    }

    #[test]
    fn stream_ranges_out_of_order_outside_or_too_many_are_refused() {
        let ok = [Piece::new(10, 5), Piece::new(15, 5), Piece::new(40, 60)];
        assert!(check_stream_ranges(&ok, 10, 100).is_ok());
        assert!(check_stream_ranges(&[], 10, 100).is_ok());
        for bad in [
            vec![Piece::new(5, 10)],                      // before start
            vec![Piece::new(90, 11)],                     // past end
            vec![Piece::new(20, 0)],                      // empty
            vec![Piece::new(30, 10), Piece::new(35, 10)], // overlapping
            vec![Piece::new(50, 10), Piece::new(20, 10)], // out of order
            vec![Piece::new(u64::MAX, 2)],                // overflowing
        ] {
            let error = check_stream_ranges(&bad, 10, 100).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArgument, "{bad:?}");
        }
        let many: Vec<Piece> = (0..=STREAM_RANGES_MAX as u64)
            .map(|k| Piece::new(k, 1))
            .collect();
        let error = check_stream_ranges(&many, 0, 1 << 20).unwrap_err();
        assert_eq!(error.code, ErrorCode::LimitExceeded);
        assert!(error.message.contains("stream_ranges_max"));
    }

    #[test]
    fn a_matching_pattern_layout_gives_one_contiguous_piece() {
        // 8 rows of 16 bytes in (*,BLOCK) over 4 servers: 4 columns each.
        let row = |first| {
            Datatype::resized(
                0,
                16,
                &Datatype::hindexed(&[4], &[first], &Datatype::byte()).unwrap(),
            )
            .unwrap()
        };
        let pattern =
            PatternLayout::new(vec![0, 1, 2, 3], (0..4).map(|i| row(i * 4)).collect()).unwrap();
        let file = FileType {
            layout: Layout::Pattern(Arc::new(pattern)),
            position: 2,
            filetype: columns(8, 16, 8, 4),
            displacement: 0,
        };
        let share = server_share(&file, 0, 32, &[]).unwrap();
        assert_eq!(share.pieces, vec![Piece::new(0, 32)]);
        // The same view over stripes of 64 B: rows 0-3 on server 0, 4-7 on server 1.
        let striped = FileType {
            layout: Layout::Stripe(StripeLayout::new(64, vec![0, 1]).unwrap()),
            position: 1,
            ..file
        };
        let share = server_share(&striped, 0, 32, &[]).unwrap();
        assert_eq!(share.pieces.len(), 4);
        assert_eq!(share.bytes, 16);
        assert_eq!(
            touched_positions(&striped.layout, &striped.filetype, 0),
            vec![true, true]
        );
    }

    #[test]
    fn refuses_types_before_the_file_start() {
        let backwards = Datatype::hvector(2, 1, -8, &Datatype::byte()).unwrap();
        let error = check_file_range(&backwards, 0, 0, 2).unwrap_err();
        assert!(error.message.contains("before the start"), "{error}");
        assert!(check_file_range(&backwards, 8, 0, 2).is_ok());
    }
}
