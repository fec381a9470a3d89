//! Hole queries: which pages of a range are mapped in this process.
//!
//! Optimistic Group Registration registers the hull of a group of segments, holes between them
//! included. When the kernel refuses because part of a hole is not mapped, OGR asks here for
//! the mapped runs of the hull and registers exactly those that hold wanted segments; the pin
//! registrar asks here which pages a failed `mlock` may have locked before it stopped, to undo
//! them. Two ways to ask (seed 001 §4.3.3): `mincore`, which fails with ENOMEM when a range
//! holds an unmapped page (bisected here down to single pages, so a query costs about
//! 2·log2(pages) calls per hole), and `/proc/self/maps`, the slower text listing.

use crate::error::RegError;
use crate::segment::{page_bytes, Segment};

/// Most mapped runs one query may return; a range more fragmented than this is refused.
pub const HOLE_RUNS_MAX: usize = 1 << 14;
/// Largest range, in pages, one `mincore` call is given (bounds its result vector).
pub const MINCORE_PAGES_MAX: usize = 1 << 12;

/// How to find holes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HoleQuery {
    /// Bisect with `mincore`.
    #[default]
    Mincore,
    /// Parse `/proc/self/maps`.
    ProcMaps,
}

/// The mapped runs of the pages `segment` touches: page-aligned, in address order, adjacent
/// runs merged. An empty result means no page of it is mapped.
pub fn mapped_runs(segment: Segment, method: HoleQuery) -> Result<Vec<Segment>, RegError> {
    if segment.checked_end().is_none() {
        return Err(RegError::AddressOverflow {
            address: segment.address,
            length: segment.length,
        });
    }
    match method {
        HoleQuery::Mincore => mincore_runs(segment),
        HoleQuery::ProcMaps => proc_maps_runs(segment),
    }
}

/// The address of the first unmapped page of `segment`'s pages, if any: a binary search on
/// prefixes, about log2(pages) `mincore` calls — what undoing a failed `mlock` needs (the
/// kernel locks the mappings in order and stops at the first hole).
pub fn first_unmapped_page(segment: Segment) -> Result<Option<usize>, RegError> {
    if segment.checked_end().is_none() {
        return Err(RegError::AddressOverflow {
            address: segment.address,
            length: segment.length,
        });
    }
    let page = page_bytes();
    let (first, end) = segment.page_span(page);
    let mut scratch = vec![0u8; MINCORE_PAGES_MAX];
    let mut chunk_first = first;
    while chunk_first < end {
        let pages = MINCORE_PAGES_MAX.min(end - chunk_first);
        if !mincore_all_mapped(chunk_first, pages, &mut scratch)? {
            // A prefix of `mapped` pages is mapped; one of `holed` pages holds a hole.
            let (mut mapped, mut holed) = (0, pages);
            while holed - mapped > 1 {
                let middle = mapped + (holed - mapped) / 2;
                if mincore_all_mapped(chunk_first, middle, &mut scratch)? {
                    mapped = middle;
                } else {
                    holed = middle;
                }
            }
            return Ok(Some((chunk_first + mapped) * page));
        }
        chunk_first += pages;
    }
    Ok(None)
}

/// The first page-aligned unmapped part of `segment`'s pages, if any.
pub fn first_hole(segment: Segment, runs: &[Segment]) -> Option<Segment> {
    let span = segment.page_aligned(page_bytes());
    let mut cursor = span.address;
    for run in runs {
        if run.address > cursor {
            let hole_end = run.address.min(span.end());
            if hole_end > cursor {
                return Some(Segment::new(cursor, hole_end - cursor));
            }
        }
        cursor = cursor.max(run.end());
    }
    (cursor < span.end()).then(|| Segment::new(cursor, span.end() - cursor))
}

fn push_run(runs: &mut Vec<Segment>, run: Segment, queried: Segment) -> Result<(), RegError> {
    if let Some(last) = runs.last_mut() {
        if last.end() == run.address {
            last.length += run.length;
            return Ok(());
        }
    }
    if runs.len() == HOLE_RUNS_MAX {
        return Err(RegError::TooManyRuns {
            segment: queried,
            max: HOLE_RUNS_MAX,
        });
    }
    runs.push(run);
    Ok(())
}

/// Whether every page of the page-aligned `first_page .. first_page + pages` is mapped.
fn mincore_all_mapped(
    first_page: usize,
    pages: usize,
    scratch: &mut [u8],
) -> Result<bool, RegError> {
    let page = page_bytes();
    debug_assert!(pages <= scratch.len());
    // SAFETY: mincore reads no memory of the range (it only inspects page tables) and writes
    // one byte per page into `scratch`, which holds at least `pages` bytes; the address is
    // page-aligned as the call requires.
    let status = unsafe {
        libc::mincore(
            (first_page * page) as *mut libc::c_void,
            pages * page,
            scratch.as_mut_ptr(),
        )
    };
    if status == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENOMEM) {
        return Ok(false);
    }
    Err(RegError::Os {
        operation: "mincore",
        segment: Segment::new(first_page * page, pages * page),
        source: err,
    })
}

fn mincore_runs(segment: Segment) -> Result<Vec<Segment>, RegError> {
    let page = page_bytes();
    let (first, end) = segment.page_span(page);
    let mut scratch = vec![0u8; MINCORE_PAGES_MAX];
    let mut runs = Vec::new();
    // Ranges still to look at, the lowest on top, so runs come out in address order.
    let mut pending = Vec::new();
    let mut start = end;
    while start > first {
        let chunk_first = first.max(start.saturating_sub(MINCORE_PAGES_MAX));
        pending.push((chunk_first, start - chunk_first));
        start = chunk_first;
    }
    while let Some((range_first, pages)) = pending.pop() {
        if mincore_all_mapped(range_first, pages, &mut scratch)? {
            push_run(
                &mut runs,
                Segment::new(range_first * page, pages * page),
                segment,
            )?;
        } else if pages > 1 {
            let half = pages / 2;
            pending.push((range_first + half, pages - half));
            pending.push((range_first, half));
        }
    }
    Ok(runs)
}

fn proc_maps_runs(segment: Segment) -> Result<Vec<Segment>, RegError> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(RegError::ProcMaps)?;
    let span = segment.page_aligned(page_bytes());
    let mut runs = Vec::new();
    for line in maps.lines() {
        let Some(range) = line.split_whitespace().next() else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let (start, end) = (start.max(span.address), end.min(span.end()));
        if start < end {
            push_run(&mut runs, Segment::new(start, end - start), segment)?;
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{serial, AnonymousMapping};

    #[test]
    fn both_methods_find_the_same_holes() {
        let _serial = serial();
        let page = page_bytes();
        let mut mapping = AnonymousMapping::new(64).unwrap();
        for (first, pages) in [(3, 1), (10, 4), (40, 2), (63, 1)] {
            mapping.punch_hole(first, pages).unwrap();
        }
        let expected = mapping.mapped_parts();
        assert_eq!(expected.len(), 4);
        // A range starting and ending mid-page: its whole pages are reported.
        let queried = Segment::new(mapping.address() + 7, 64 * page - 20);
        for method in [HoleQuery::Mincore, HoleQuery::ProcMaps] {
            let runs = mapped_runs(queried, method).unwrap();
            assert_eq!(runs, expected, "{method:?}");
        }
        assert_eq!(
            first_hole(queried, &expected),
            Some(Segment::new(mapping.address() + 3 * page, page))
        );
        assert_eq!(
            first_unmapped_page(queried).unwrap(),
            Some(mapping.address() + 3 * page)
        );
        let after_first = Segment::new(mapping.address() + 4 * page, 30 * page);
        assert_eq!(
            first_unmapped_page(after_first).unwrap(),
            Some(mapping.address() + 10 * page)
        );
        let mapped = Segment::new(mapping.address() + 4 * page, 6 * page);
        assert_eq!(first_unmapped_page(mapped).unwrap(), None);
    }

    #[test]
    fn fully_mapped_range_is_one_run() {
        let _serial = serial();
        let mapping = AnonymousMapping::new(8).unwrap();
        let runs = mapped_runs(mapping.segment(), HoleQuery::Mincore).unwrap();
        assert_eq!(runs, vec![mapping.segment()]);
        assert_eq!(first_hole(mapping.segment(), &runs), None);
    }

    #[test]
    fn unmapped_range_has_no_run() {
        let _serial = serial();
        let mut mapping = AnonymousMapping::new(4).unwrap();
        let hole = mapping.punch_hole(1, 2).unwrap();
        for method in [HoleQuery::Mincore, HoleQuery::ProcMaps] {
            assert_eq!(mapped_runs(hole, method).unwrap(), Vec::new());
        }
        assert_eq!(first_hole(hole, &[]), Some(hole));
    }

    #[test]
    fn large_ranges_are_chunked() {
        let _serial = serial();
        let pages = MINCORE_PAGES_MAX + 100;
        let mut mapping = AnonymousMapping::new(pages).unwrap();
        mapping.punch_hole(MINCORE_PAGES_MAX + 5, 1).unwrap();
        let runs = mapped_runs(mapping.segment(), HoleQuery::Mincore).unwrap();
        assert_eq!(runs, mapping.mapped_parts());
        assert_eq!(
            first_unmapped_page(mapping.segment()).unwrap(),
            Some(mapping.address() + (MINCORE_PAGES_MAX + 5) * page_bytes())
        );
    }
}
