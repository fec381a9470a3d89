//! The `pin` registrar: `mlock`/`munlock`, the pinning step that dominates real registration.
//!
//! A registration here locks every page its segment touches, so the policies above can be
//! measured on any machine without a fabric. Two things about `mlock` shape this file:
//!
//! - Locks do not nest: one `munlock` unlocks a page however many `mlock`s covered it. Real
//!   registrations (pinned page references) do nest, and the cache holds overlapping ones (a
//!   group and a row inside it, two rows sharing a page). So the registrar keeps the page
//!   ranges of its live registrations and, on deregistration, unlocks only the pages no other
//!   registration still covers.
//! - A failed `mlock` over a range with an unmapped hole has already locked the mappings
//!   before the hole (the kernel flags them in address order and stops at the first gap). The
//!   registrar finds the first unmapped page ([`crate::holes::first_unmapped_page`]) and
//!   unlocks everything before it (again only pages no other registration covers), so a
//!   failure leaves nothing locked, and it reports the hole, or RLIMIT_MEMLOCK when the range
//!   was wholly mapped (then the whole range is unlocked: a failure after the flags were set,
//!   while faulting pages in, leaves all of them flagged).
//!
//! Calls are serialised by one mutex around the coverage and the system call, which the
//! kernel serialises anyway (it takes the address-space write lock for both).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::RegError;
use crate::holes::{first_unmapped_page, mapped_runs, HoleQuery};
use crate::registrar::{CostModel, RegHandle, Registrar};
use crate::segment::{page_bytes, Segment};

/// Locks pages with `mlock`, unlocks them with `munlock`.
#[derive(Debug)]
pub struct PinRegistrar {
    coverage: Mutex<Coverage>,
    next_key: AtomicU64,
    cost: CostModel,
}

impl Default for PinRegistrar {
    fn default() -> Self {
        Self::new()
    }
}

impl PinRegistrar {
    /// A registrar claiming [`CostModel::PIN_DEFAULT`].
    pub fn new() -> Self {
        Self::with_cost(CostModel::PIN_DEFAULT)
    }

    /// A registrar claiming `cost` (from [`crate::calibrate`] on this machine).
    pub fn with_cost(cost: CostModel) -> Self {
        Self {
            coverage: Mutex::new(Coverage::default()),
            next_key: AtomicU64::new(1),
            cost,
        }
    }

    /// A registrar whose cost model is measured now with [`crate::calibrate`].
    pub fn calibrated() -> Result<Self, RegError> {
        let probe = Self::new();
        let cost = crate::registrar::calibrate(&probe)?;
        Ok(Self::with_cost(cost))
    }

    /// Live registrations.
    pub fn live(&self) -> usize {
        self.lock().live
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Coverage> {
        // A panic while holding the lock leaves the coverage as consistent as the last
        // finished call left it; keep going.
        self.coverage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Unlocks the pages of `first..end` that no live registration covers.
    fn unlock_uncovered(coverage: &Coverage, first: usize, end: usize) -> Result<(), RegError> {
        for (part_first, part_end) in coverage.uncovered(first, end) {
            unlock_pages(part_first, part_end)?;
        }
        Ok(())
    }
}

/// `munlock` of pages `first..end`; when part of the range is no longer mapped (ENOMEM), the
/// mapped runs only — unmapping already dropped the lock on the rest.
fn unlock_pages(first: usize, end: usize) -> Result<(), RegError> {
    let page = page_bytes();
    let range = Segment::new(first * page, (end - first) * page);
    match munlock(range) {
        Ok(()) => Ok(()),
        Err(err) if err.raw_os_error() == Some(libc::ENOMEM) => {
            for run in mapped_runs(range, HoleQuery::Mincore)? {
                if let Err(source) = munlock(run) {
                    if source.raw_os_error() != Some(libc::ENOMEM) {
                        return Err(RegError::Os {
                            operation: "munlock",
                            segment: run,
                            source,
                        });
                    }
                }
            }
            tracing::debug!(%range, "munlock: part of the range was unmapped since registration");
            Ok(())
        }
        Err(source) => Err(RegError::Os {
            operation: "munlock",
            segment: range,
            source,
        }),
    }
}

fn munlock(range: Segment) -> std::io::Result<()> {
    // SAFETY: munlock changes only the lock flag of the pages of the range; it reads and
    // writes no memory of ours and fails with ENOMEM if part of it is unmapped.
    if unsafe { libc::munlock(range.address as *const libc::c_void, range.length) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn mlock(range: Segment) -> std::io::Result<()> {
    // SAFETY: mlock changes only the lock flag of the pages of the range and faults them in;
    // it reads and writes no memory of ours, and fails cleanly on unmapped parts.
    if unsafe { libc::mlock(range.address as *const libc::c_void, range.length) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What a kernel refusal to pin `segment` means: the unmapped page `hole` if one was found,
/// RLIMIT_MEMLOCK for ENOMEM, EAGAIN or EPERM, else the failed `operation`.
pub(crate) fn refusal(
    segment: Segment,
    hole: Option<usize>,
    operation: &'static str,
    source: std::io::Error,
) -> RegError {
    if let Some(address) = hole {
        return RegError::Unmapped {
            segment,
            hole: Segment::new(address, page_bytes()),
            source,
        };
    }
    if matches!(
        source.raw_os_error(),
        Some(libc::ENOMEM | libc::EAGAIN | libc::EPERM)
    ) {
        RegError::MemlockLimit {
            segment,
            limit: memlock_limit(),
            source,
        }
    } else {
        RegError::Os {
            operation,
            segment,
            source,
        }
    }
}

/// RLIMIT_MEMLOCK as a person reads it.
pub fn memlock_limit() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, std::ptr::addr_of_mut!(limit)) } != 0 {
        return "unknown (getrlimit failed)".to_owned();
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".to_owned()
    } else {
        format!("{} bytes ({} KiB)", limit.rlim_cur, limit.rlim_cur / 1024)
    }
}

impl Registrar for PinRegistrar {
    fn name(&self) -> &'static str {
        "pin"
    }

    fn register(&self, segment: Segment) -> Result<RegHandle, RegError> {
        if segment.checked_end().is_none() {
            return Err(RegError::AddressOverflow {
                address: segment.address,
                length: segment.length,
            });
        }
        if segment.length == 0 {
            return Err(RegError::EmptySegment { index: 0 });
        }
        let page = page_bytes();
        let (first, end) = segment.page_span(page);
        let mut coverage = self.lock();
        match mlock(Segment::new(first * page, (end - first) * page)) {
            Ok(()) => {
                coverage.insert(first, end);
                Ok(RegHandle {
                    segment,
                    key: self.next_key.fetch_add(1, Ordering::Relaxed),
                    descriptor: None,
                    token: 0,
                })
            }
            Err(source) => {
                // Undo what the kernel locked before it stopped, except pages other
                // registrations hold.
                let hole = first_unmapped_page(segment)?;
                let undo_end = hole.map_or(end, |address| address / page);
                Self::unlock_uncovered(&coverage, first, undo_end)?;
                Err(refusal(segment, hole, "mlock", source))
            }
        }
    }

    fn deregister(&self, handle: RegHandle) -> Result<(), RegError> {
        let (first, end) = handle.segment.page_span(page_bytes());
        let mut coverage = self.lock();
        if !coverage.remove(first, end) {
            return Err(RegError::Registrar {
                registrar: "pin".to_owned(),
                operation: "deregister",
                segment: handle.segment,
                message: format!("key {} is not a live registration", handle.key),
            });
        }
        Self::unlock_uncovered(&coverage, first, end)
    }

    /// One lock of the coverage for the whole batch, and one `munlock` per run of adjacent
    /// or overlapping ranges rather than one per handle.
    fn deregister_batch(&self, handles: Vec<RegHandle>) -> Result<(), RegError> {
        let page = page_bytes();
        let mut coverage = self.lock();
        let mut first_failure = None;
        let mut spans = Vec::with_capacity(handles.len());
        for handle in handles {
            let (first, end) = handle.segment.page_span(page);
            if coverage.remove(first, end) {
                spans.push((first, end));
            } else {
                first_failure.get_or_insert(RegError::Registrar {
                    registrar: "pin".to_owned(),
                    operation: "deregister",
                    segment: handle.segment,
                    message: format!("key {} is not a live registration", handle.key),
                });
            }
        }
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
        for (first, end) in spans {
            match merged.last_mut() {
                Some(last) if first <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((first, end)),
            }
        }
        for (first, end) in merged {
            if let Err(err) = Self::unlock_uncovered(&coverage, first, end) {
                first_failure.get_or_insert(err);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    fn cost(&self) -> CostModel {
        self.cost
    }
}

/// Page ranges of the live registrations, with multiplicity.
#[derive(Debug, Default)]
struct Coverage {
    /// (first page, end page) → registrations with exactly that span.
    spans: BTreeMap<(usize, usize), u32>,
    /// span length in pages → spans of that length (with multiplicity); its last key bounds
    /// how far below a page an overlapping span can start.
    lengths: BTreeMap<usize, usize>,
    live: usize,
}

impl Coverage {
    fn insert(&mut self, first: usize, end: usize) {
        *self.spans.entry((first, end)).or_insert(0) += 1;
        *self.lengths.entry(end - first).or_insert(0) += 1;
        self.live += 1;
    }

    fn remove(&mut self, first: usize, end: usize) -> bool {
        let Some(count) = self.spans.get_mut(&(first, end)) else {
            return false;
        };
        *count -= 1;
        if *count == 0 {
            self.spans.remove(&(first, end));
        }
        let length = end - first;
        if let Some(count) = self.lengths.get_mut(&length) {
            *count -= 1;
            if *count == 0 {
                self.lengths.remove(&length);
            }
        }
        self.live -= 1;
        true
    }

    /// The parts of pages `first..end` that no live span covers, in order.
    fn uncovered(&self, first: usize, end: usize) -> Vec<(usize, usize)> {
        let longest = self.lengths.keys().next_back().copied().unwrap_or(0);
        let lowest_start = first.saturating_sub(longest);
        let mut parts = Vec::new();
        let mut cursor = first;
        for &(span_first, span_end) in self.spans.range((lowest_start, 0)..(end, 0)).map(|e| e.0) {
            if span_end <= cursor {
                continue;
            }
            if span_first > cursor {
                parts.push((cursor, span_first.min(end)));
            }
            cursor = span_end;
            if cursor >= end {
                break;
            }
        }
        if cursor < end {
            parts.push((cursor, end));
        }
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_uncovered_parts() {
        let mut coverage = Coverage::default();
        assert_eq!(coverage.uncovered(0, 10), vec![(0, 10)]);
        coverage.insert(2, 4);
        coverage.insert(3, 6);
        coverage.insert(8, 20);
        assert_eq!(coverage.uncovered(0, 10), vec![(0, 2), (6, 8)]);
        assert_eq!(coverage.uncovered(3, 5), Vec::new());
        assert_eq!(coverage.uncovered(19, 25), vec![(20, 25)]);
        // A long span starting far below still counts.
        coverage.insert(0, 100);
        assert_eq!(coverage.uncovered(50, 60), Vec::new());
        assert!(coverage.remove(0, 100));
        assert!(!coverage.remove(0, 100));
        assert_eq!(coverage.uncovered(50, 60), vec![(50, 60)]);
        coverage.insert(2, 4);
        assert!(coverage.remove(2, 4));
        assert_eq!(
            coverage.uncovered(2, 4),
            Vec::new(),
            "one (2, 4) is still live"
        );
        assert_eq!(coverage.live, 3);
    }
}
