//! The iod's one mapping type: a read-only shared mapping (`PROT_READ`, `MAP_SHARED`, no
//! populate: pages are faulted in as they are touched) of part of an object file, made with
//! `memmap2` and unmapped on drop.
//!
//! The store maps objects for two things: to hand a one-sided read the object's page-cache
//! pages themselves (`ObjectStore::read_mapped`), and to ask `mincore` which pages of a read's
//! extent are cached (the planner's `Residency`). Bytes are only ever reached through raw
//! addresses handed to the kernel, never through a `&[u8]` over the whole mapping: a mapping
//! may reach past the end of its file, and touching a page there would be fatal (`SIGBUS`).

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};

/// Pages of a read's extent the server asks `mincore` about to price the read cold or cached
/// (16 MiB of 4 KiB pages; the first ones stand for the rest).
pub const RESIDENCY_PAGES_MAX: usize = 4096;

/// The system's page size.
fn page_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// A read-only shared mapping of `[origin, origin + len)` of a file.
#[derive(Debug)]
pub struct Mapping {
    map: Mmap,
    /// The file offset of the mapping's first byte (page-aligned).
    origin: u64,
    /// For a kept mapping, the server's count of kept bytes, given back on drop.
    kept_bytes: Option<Arc<AtomicU64>>,
}

impl Mapping {
    /// Maps file bytes `[offset, offset + length)` (widened down to a page boundary); the
    /// range may reach past the end of the file.
    pub fn new(file: &File, offset: u64, length: u64) -> io::Result<Self> {
        let origin = offset / page_bytes() * page_bytes();
        let mapped = usize::try_from(offset + length - origin)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: a new read-only shared mapping of an open file, which aliases no Rust
        // object. The file may change or shrink under it: its bytes are never read through a
        // Rust reference here, only through raw addresses the kernel is handed (see the
        // module comment), and callers touch only bytes below a size they hold steady.
        let map = unsafe { MmapOptions::new().offset(origin).len(mapped).map(file)? };
        Ok(Self {
            map,
            origin,
            kept_bytes: None,
        })
    }

    /// Marks this as a kept mapping: `kept_bytes`, which the caller raised by its length, is
    /// lowered again when it is dropped.
    #[must_use]
    pub fn kept(mut self, kept_bytes: Arc<AtomicU64>) -> Self {
        self.kept_bytes = Some(kept_bytes);
        self
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is mapped (never, for a mapping `new` made).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether the mapping covers file bytes `[start, end)`.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        start >= self.origin && end <= self.origin + self.len() as u64
    }

    /// Of the pages holding file bytes `[start, end)` (inside the mapping), how many are not
    /// in the page cache, and how many were asked about (at most [`RESIDENCY_PAGES_MAX`]).
    pub fn absent_pages(&self, start: u64, end: u64) -> io::Result<(usize, usize)> {
        assert!(self.covers(start, end), "a range outside its mapping");
        let page = page_bytes();
        let first = start / page * page;
        let pages = usize::try_from((end - first).div_ceil(page))
            .unwrap_or(RESIDENCY_PAGES_MAX)
            .min(RESIDENCY_PAGES_MAX);
        let mut vector = vec![0u8; pages];
        let skip = usize::try_from(first - self.origin).expect("inside the mapping");
        let length = pages * usize::try_from(page).expect("a page size fits usize");
        let length = length.min(self.len() - skip);
        // SAFETY: [base + skip, + length) lies inside this live mapping and starts on a page
        // boundary (origin and first are page-aligned); `vector` has one byte per page of it.
        // mincore reads no byte of the mapping.
        let status = unsafe {
            libc::mincore(
                self.map.as_ptr().wrapping_add(skip).cast_mut().cast(),
                length,
                vector.as_mut_ptr(),
            )
        };
        if status != 0 {
            return Err(io::Error::last_os_error());
        }
        let absent = vector.iter().filter(|&&flags| flags & 1 == 0).count();
        Ok((absent, pages))
    }

    /// Whether every page holding a byte of `ranges` (file ranges `[start, end)` inside the
    /// mapping, in any order) is in the page cache. Ranges on the same or adjacent pages are
    /// asked about together, so a strided read of many short runs costs a few `mincore`
    /// calls ([`Mapping::absent_pages`], [`RESIDENCY_PAGES_MAX`] pages a call), not one per run.
    pub fn all_cached(&self, ranges: impl IntoIterator<Item = (u64, u64)>) -> io::Result<bool> {
        let page = page_bytes();
        let mut ranges: Vec<(u64, u64)> = ranges.into_iter().filter(|(s, e)| e > s).collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len().min(64));
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start / page <= last.1.div_ceil(page) => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let window = RESIDENCY_PAGES_MAX as u64 * page;
        for (start, end) in merged {
            let mut at = start;
            while at < end {
                let next = (at / page * page + window).min(end);
                if self.absent_pages(at, next)?.0 > 0 {
                    return Ok(false);
                }
                at = next;
            }
        }
        Ok(true)
    }

    /// The address and length of file bytes `[offset, offset + length)`, which must lie
    /// inside the mapping.
    pub fn range(&self, offset: u64, length: u64) -> (*const u8, usize) {
        let skip = usize::try_from(offset - self.origin).expect("inside the mapping");
        let length = usize::try_from(length).expect("inside the mapping");
        assert!(skip + length <= self.len(), "a range outside its mapping");
        (self.map.as_ptr().wrapping_add(skip), length)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // The mapping itself is unmapped by `Mmap`'s drop, right after this.
        if let Some(kept_bytes) = &self.kept_bytes {
            kept_bytes.fetch_sub(self.len() as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn maps_from_a_page_boundary_and_gives_kept_bytes_back() {
        let file = tempfile::tempfile().unwrap();
        file.write_all_at(&[7u8; 10_000], 0).unwrap();
        let kept = Arc::new(AtomicU64::new(0));
        let page = page_bytes();
        kept.fetch_add(page + 100, Ordering::Relaxed);
        let mapping = Mapping::new(&file, 100, page).unwrap().kept(kept.clone());
        assert_eq!(mapping.len() as u64, page + 100, "widened down to offset 0");
        assert!(mapping.covers(0, page + 100));
        assert!(!mapping.covers(0, page + 101));
        let (pointer, length) = mapping.range(150, 3);
        // SAFETY: inside the mapping and below the file's end.
        let bytes = unsafe { std::slice::from_raw_parts(pointer, length) };
        assert_eq!(bytes, &[7, 7, 7]);
        let (absent, asked) = mapping.absent_pages(0, page + 100).unwrap();
        assert_eq!((absent, asked), (0, 2), "just written: cached");
        assert!(mapping.all_cached([(0, page + 100)]).unwrap());
        drop(mapping);
        assert_eq!(kept.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn all_cached_asks_about_every_page_past_one_residency_window() {
        use std::os::fd::AsRawFd;
        let page = page_bytes();
        let window = RESIDENCY_PAGES_MAX as u64 * page;
        let file = tempfile::tempfile().unwrap();
        let length = window + 3 * page;
        file.write_all_at(&vec![1u8; usize::try_from(length).unwrap()], 0)
            .unwrap();
        let mapping = Mapping::new(&file, 0, length).unwrap();
        assert!(mapping.all_cached([(0, length)]).unwrap());
        // Evict the last page, past the first window (clean pages go at DONTNEED).
        file.sync_all().unwrap();
        let last = i64::try_from(length - page).unwrap();
        let page_i64 = i64::try_from(page).unwrap();
        // SAFETY: advice on an open descriptor; no memory is involved.
        let status = unsafe {
            libc::posix_fadvise(file.as_raw_fd(), last, page_i64, libc::POSIX_FADV_DONTNEED)
        };
        assert_eq!(status, 0);
        assert_eq!(
            mapping.absent_pages(length - page, length).unwrap(),
            (1, 1),
            "the last page was evicted"
        );
        assert!(
            !mapping.all_cached([(0, length)]).unwrap(),
            "the last page is absent"
        );
        assert!(mapping.all_cached([(0, length - page)]).unwrap());
        // Short runs in any order, merged across pages: the absent page is still found, and
        // ranges short of it are cached.
        let runs = |from: u64, to: u64| (from..to).step_by(1000).map(|at| (at, at + 10));
        let mut strided: Vec<(u64, u64)> = runs(0, length).collect();
        strided.reverse();
        assert!(!mapping.all_cached(strided).unwrap());
        assert!(mapping.all_cached(runs(0, length - page)).unwrap());
        assert!(!mapping.all_cached([(5, 9), (length - 1, length)]).unwrap());
    }
}
