//! Optimistic Group Registration (seed 000 §4.2.2 and §5.1, seed 001 §4.3.2-4.3.3).
//!
//! A list of segments (the rows of a subarray, the buffers of a list I/O call) comes in; a few
//! registrations covering them go out. Three steps:
//!
//! 1. **Group** ([`plan_groups`]): sort the segments by address and walk them, joining the
//!    next one to the current group when covering the gap costs less than a registration of
//!    its own. With T = a·pages + b for a registration plus its deregistration, joining a
//!    segment `g` pages past the group's last page costs a·g more pages and saves one b, so the
//!    gap is covered iff a·g ≤ b. Each gap is decided on its own, so the walk is optimal for
//!    this cost: total = a·(pages covered) + b·(groups).
//! 2. **Register each group's hull optimistically** ([`register_group`]); usually the
//!    segments come from one allocation and this is all.
//! 3. **On refusal**, a group of at most [`OGR_QUERY_SEGMENTS_MIN`] segments is registered
//!    segment by segment as given; a larger one asks the kernel for the mapped runs of its hull
//!    ([`crate::holes`]) and registers, in each run, the hull of the wanted segments inside
//!    it. A segment that is itself partly unmapped is an error naming it; a refusal with no
//!    hole behind it (RLIMIT_MEMLOCK, say) is returned as it came.

use crate::error::RegError;
use crate::holes::first_hole;
use crate::registrar::{CostModel, RegHandle, Registrar};
use crate::segment::Segment;
use crate::stats::{bump, Counters};

/// A refused group of at most this many segments is registered segment by segment instead of
/// querying the kernel for its holes (a query costs about as much as a few registrations).
pub const OGR_QUERY_SEGMENTS_MIN: usize = 8;

/// Segments registered together as one hull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// From the first byte of the lowest segment to the last byte of the highest.
    pub hull: Segment,
    /// Indices of its segments in the list given to [`plan_groups`], in address order.
    pub members: Vec<usize>,
}

/// Whether covering `gap_pages` unwanted pages is cheaper than one more registration.
pub fn worth_covering(cost: &CostModel, gap_pages: usize) -> bool {
    let per_page = cost.register_page_us + cost.deregister_page_us;
    let per_call = cost.register_call_us + cost.deregister_call_us;
    per_page * gap_pages as f64 <= per_call
}

/// Groups `segments` (non-empty, not wrapping) by the cost model.
pub fn plan_groups(segments: &[Segment], cost: &CostModel, page_bytes: usize) -> Vec<Group> {
    let mut order: Vec<usize> = (0..segments.len()).collect();
    order.sort_by_key(|&index| (segments[index].address, segments[index].end()));
    let mut groups: Vec<Group> = Vec::new();
    for index in order {
        let segment = segments[index];
        if let Some(group) = groups.last_mut() {
            let (_, group_end_page) = group.hull.page_span(page_bytes);
            let (first_page, _) = segment.page_span(page_bytes);
            if worth_covering(cost, first_page.saturating_sub(group_end_page)) {
                group.hull = group.hull.hull(&segment);
                group.members.push(index);
                continue;
            }
        }
        groups.push(Group {
            hull: segment,
            members: vec![index],
        });
    }
    groups
}

/// One registration made for a group, and the segments it covers.
#[derive(Debug)]
pub struct Made {
    /// The registration.
    pub handle: RegHandle,
    /// Indices of the segments inside it.
    pub members: Vec<usize>,
}

/// Registers one group: its hull optimistically, then, if refused, the parts as described in
/// the module documentation. On error nothing of this group stays registered.
pub(crate) fn register_group(
    registrar: &dyn Registrar,
    counters: &Counters,
    group: &Group,
    segments: &[Segment],
) -> Result<Vec<Made>, RegError> {
    let refusal = match counters.register(registrar, group.hull) {
        Ok(handle) => {
            return Ok(vec![Made {
                handle,
                members: group.members.clone(),
            }])
        }
        Err(err) if group.members.len() == 1 => return Err(err),
        Err(err) => err,
    };
    bump(&counters.failed_optimistic, 1);
    tracing::debug!(hull = %group.hull, error = %refusal, "optimistic group registration refused");
    let parts = if group.members.len() <= OGR_QUERY_SEGMENTS_MIN {
        as_given(group, segments)
    } else {
        let runs = counters.query_holes(group.hull)?;
        if first_hole(group.hull, &runs).is_none() {
            // Everything is mapped: the refusal was not about holes.
            return Err(refusal);
        }
        split_by_runs(group, segments, &runs)?
    };
    let mut made = Vec::with_capacity(parts.len());
    for (hull, members) in parts {
        match counters.register(registrar, hull) {
            Ok(handle) => made.push(Made { handle, members }),
            Err(err) => {
                let handles = made.into_iter().map(|made| made.handle).collect();
                counters.deregister(registrar, handles, false);
                return Err(err);
            }
        }
    }
    Ok(made)
}

/// Each distinct segment of the group on its own.
fn as_given(group: &Group, segments: &[Segment]) -> Vec<(Segment, Vec<usize>)> {
    let mut parts: Vec<(Segment, Vec<usize>)> = Vec::new();
    for &index in &group.members {
        match parts.last_mut() {
            Some((last, members)) if *last == segments[index] => members.push(index),
            _ => parts.push((segments[index], vec![index])),
        }
    }
    parts
}

/// In each mapped run, the hull of the group's segments inside it. `runs` are in address
/// order and the members sorted, so each run takes a consecutive stretch of members.
fn split_by_runs(
    group: &Group,
    segments: &[Segment],
    runs: &[Segment],
) -> Result<Vec<(Segment, Vec<usize>)>, RegError> {
    let mut parts: Vec<(Segment, Vec<usize>)> = Vec::new();
    let mut run_index = 0;
    let mut part_run = usize::MAX;
    for &index in &group.members {
        let segment = segments[index];
        while run_index < runs.len() && runs[run_index].end() <= segment.address {
            run_index += 1;
        }
        if run_index == runs.len() || !runs[run_index].covers(&segment) {
            let hole = first_hole(segment, runs).unwrap_or(segment);
            return Err(RegError::Unmapped {
                segment,
                hole,
                source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            });
        }
        match parts.last_mut() {
            Some((hull, members)) if part_run == run_index => {
                *hull = hull.hull(&segment);
                members.push(index);
            }
            _ => {
                parts.push((segment, vec![index]));
                part_run = run_index;
            }
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    #[test]
    fn subarray_rows_make_one_group() {
        // 1024 rows of 1024 ints of a 2048-int-wide array: 4 KiB wanted, 4 KiB gap.
        let base = 1 << 30;
        let rows: Vec<Segment> = (0..1024)
            .map(|row| Segment::new(base + 16 + row * 8192, 4096))
            .collect();
        let groups = plan_groups(&rows, &CostModel::PIN_DEFAULT, PAGE);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].members, (0..1024).collect::<Vec<_>>());
        assert_eq!(groups[0].hull, Segment::new(base + 16, 1023 * 8192 + 4096));
    }

    #[test]
    fn gaps_are_covered_only_when_cheaper() {
        let cost = CostModel::PIN_DEFAULT;
        // b / a = 2.6 / 0.48 = 5.4 pages.
        assert!(worth_covering(&cost, 5));
        assert!(!worth_covering(&cost, 6));
        let segments = [
            Segment::new(100 * PAGE, PAGE),
            Segment::new(106 * PAGE, PAGE),   // gap 5 pages: joined
            Segment::new(113 * PAGE, PAGE),   // gap 6 pages: new group
            Segment::new(113 * PAGE + 10, 5), // inside the previous one
        ];
        let groups = plan_groups(&segments, &cost, PAGE);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].members, vec![0, 1]);
        assert_eq!(groups[1].members, vec![2, 3]);
        assert_eq!(groups[1].hull, Segment::new(113 * PAGE, PAGE));
    }

    #[test]
    fn unsorted_input_is_sorted_and_free_cost_joins_everything() {
        let segments = [
            Segment::new(900 * PAGE, 10),
            Segment::new(PAGE, 10),
            Segment::new(500 * PAGE, 10),
        ];
        let groups = plan_groups(&segments, &CostModel::FREE, PAGE);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].members, vec![1, 2, 0]);
        let expensive_pages = CostModel {
            register_page_us: 1.0,
            register_call_us: 0.0,
            deregister_page_us: 0.0,
            deregister_call_us: 0.0,
        };
        assert_eq!(plan_groups(&segments, &expensive_pages, PAGE).len(), 3);
    }

    #[test]
    fn split_by_runs_keeps_segments_in_their_run() {
        let segments = [
            Segment::new(10 * PAGE, 100),
            Segment::new(11 * PAGE, 100),
            Segment::new(14 * PAGE, 100),
            Segment::new(15 * PAGE + 5, 100),
        ];
        let group = Group {
            hull: Segment::new(10 * PAGE, 5 * PAGE + 105),
            members: vec![0, 1, 2, 3],
        };
        let runs = [
            Segment::new(10 * PAGE, 2 * PAGE),
            Segment::new(14 * PAGE, 2 * PAGE),
        ];
        let parts = split_by_runs(&group, &segments, &runs).unwrap();
        assert_eq!(
            parts,
            vec![
                (Segment::new(10 * PAGE, PAGE + 100), vec![0, 1]),
                (Segment::new(14 * PAGE, PAGE + 105), vec![2, 3]),
            ]
        );
        let straddling = [Segment::new(11 * PAGE, PAGE + 1)];
        let group = Group {
            hull: straddling[0],
            members: vec![0],
        };
        assert!(matches!(
            split_by_runs(&group, &straddling, &runs),
            Err(RegError::Unmapped { hole, .. }) if hole == Segment::new(12 * PAGE, PAGE)
        ));
    }
}
