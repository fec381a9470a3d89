//! Byte ranges of this process's memory, and the page arithmetic every registrar needs.
//!
//! A [`Segment`] is what flows into the registration module: one contiguous piece of a caller's
//! buffer (a row of a subarray, one I/O buffer, an arena). Registration pins whole pages, so
//! the cost model and the pin registrar both work on the page span of a segment, computed here
//! once with the page size the kernel reports (`sysconf(_SC_PAGESIZE)`), never a guessed 4096.

use std::fmt;
use std::sync::OnceLock;

/// A byte range of this process's address space: `length` bytes from `address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Segment {
    /// First byte.
    pub address: usize,
    /// Bytes.
    pub length: usize,
}

impl Segment {
    /// The range of `length` bytes from `address`.
    pub const fn new(address: usize, length: usize) -> Self {
        Self { address, length }
    }

    /// The bytes of `slice`.
    pub fn of(slice: &[u8]) -> Self {
        Self {
            address: slice.as_ptr() as usize,
            length: slice.len(),
        }
    }

    /// One past the last byte, or `None` when the range wraps the address space.
    pub const fn checked_end(&self) -> Option<usize> {
        self.address.checked_add(self.length)
    }

    /// One past the last byte. Only for segments already checked with [`Self::checked_end`]
    /// (every segment the registry accepts is); saturates otherwise.
    pub const fn end(&self) -> usize {
        self.address.saturating_add(self.length)
    }

    /// Whether `other` lies wholly inside `self`.
    pub const fn covers(&self, other: &Segment) -> bool {
        other.address >= self.address && other.end() <= self.end()
    }

    /// Whether the two ranges share at least one byte.
    pub const fn overlaps(&self, other: &Segment) -> bool {
        self.length > 0
            && other.length > 0
            && self.address < other.end()
            && other.address < self.end()
    }

    /// The smallest range holding both.
    #[must_use]
    pub fn hull(&self, other: &Segment) -> Segment {
        let address = self.address.min(other.address);
        Segment::new(address, self.end().max(other.end()) - address)
    }

    /// First page and one past the last page this range touches, in page numbers
    /// (`address / page_bytes`). An empty range touches no page: `(p, p)`.
    pub fn page_span(&self, page_bytes: usize) -> (usize, usize) {
        let first = self.address / page_bytes;
        if self.length == 0 {
            return (first, first);
        }
        (first, (self.end() - 1) / page_bytes + 1)
    }

    /// Pages this range touches.
    pub fn pages(&self, page_bytes: usize) -> usize {
        let (first, end) = self.page_span(page_bytes);
        end - first
    }

    /// The page-aligned range covering the same pages.
    #[must_use]
    pub fn page_aligned(&self, page_bytes: usize) -> Segment {
        let (first, end) = self.page_span(page_bytes);
        Segment::new(first * page_bytes, (end - first) * page_bytes)
    }
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:#x}, {:#x}) ({} bytes)",
            self.address,
            self.end(),
            self.length
        )
    }
}

/// The page size of this machine in bytes, from `sysconf(_SC_PAGESIZE)` (read once).
pub fn page_bytes() -> usize {
    static PAGE_BYTES: OnceLock<usize> = OnceLock::new();
    *PAGE_BYTES.get_or_init(|| {
        // SAFETY: sysconf reads a system constant; it takes no pointers.
        let reported = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        match usize::try_from(reported) {
            Ok(bytes) if bytes.is_power_of_two() => bytes,
            // POSIX requires the constant; a broken libc is the only way here.
            _ => 4096,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_span_counts_touched_pages() {
        let page = 4096;
        assert_eq!(Segment::new(0, 4096).page_span(page), (0, 1));
        assert_eq!(Segment::new(16, 4096).page_span(page), (0, 2));
        assert_eq!(Segment::new(4095, 2).pages(page), 2);
        assert_eq!(Segment::new(8192, 1).pages(page), 1);
        assert_eq!(Segment::new(8192, 0).pages(page), 0);
        assert_eq!(
            Segment::new(4100, 10).page_aligned(page),
            Segment::new(4096, 4096)
        );
    }

    #[test]
    fn covers_overlaps_hull() {
        let a = Segment::new(100, 50);
        assert!(a.covers(&Segment::new(100, 50)));
        assert!(a.covers(&Segment::new(120, 30)));
        assert!(!a.covers(&Segment::new(120, 31)));
        assert!(a.overlaps(&Segment::new(149, 10)));
        assert!(!a.overlaps(&Segment::new(150, 10)));
        assert!(!a.overlaps(&Segment::new(120, 0)));
        assert_eq!(a.hull(&Segment::new(10, 5)), Segment::new(10, 140));
        assert_eq!(Segment::new(usize::MAX, 2).checked_end(), None);
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_bytes().is_power_of_two());
        assert!(page_bytes() >= 4096);
    }
}
