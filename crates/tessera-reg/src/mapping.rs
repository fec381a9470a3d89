//! Anonymous memory mappings with holes, for calibration, tests and benchmarks.
//!
//! Registration has to be measured and tested on real address space: a region whose pages
//! are present (so locking them costs what it costs in an application), and regions with
//! deliberately unmapped holes (the OGR+holes case of seed 000 Table 3). An
//! [`AnonymousMapping`] owns such a region and remembers which parts it punched out, so on
//! drop it unmaps only what it still owns and never a mapping another thread placed into one of
//! its holes since.

use crate::segment::{page_bytes, Segment};

/// A private anonymous read-write mapping, unmapped (except its holes) on drop.
#[derive(Debug)]
pub struct AnonymousMapping {
    address: usize,
    length: usize,
    holes: Vec<Segment>,
}

impl AnonymousMapping {
    /// Maps `pages` pages and writes every one of them, so they are present.
    pub fn new(pages: usize) -> std::io::Result<Self> {
        let length = pages
            .checked_mul(page_bytes())
            .filter(|&length| length > 0)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("cannot map {pages} pages"),
                )
            })?;
        // SAFETY: an anonymous private mapping at an address the kernel picks; no existing
        // memory is touched. The result is checked against MAP_FAILED below.
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if pointer == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut mapping = Self {
            address: pointer as usize,
            length,
            holes: Vec::new(),
        };
        mapping.fill(0);
        Ok(mapping)
    }

    /// The whole region, holes included.
    pub fn segment(&self) -> Segment {
        Segment::new(self.address, self.length)
    }

    /// First byte.
    pub fn address(&self) -> usize {
        self.address
    }

    /// Bytes, holes included.
    pub fn len(&self) -> usize {
        self.length
    }

    /// Never true: a mapping has at least one page.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// The holes punched so far.
    pub fn holes(&self) -> &[Segment] {
        &self.holes
    }

    /// Unmaps `pages` pages from page `first_page` of the region, leaving a hole.
    pub fn punch_hole(&mut self, first_page: usize, pages: usize) -> std::io::Result<Segment> {
        let page = page_bytes();
        let hole = Segment::new(self.address + first_page * page, pages * page);
        if pages == 0
            || first_page + pages > self.length / page
            || self.holes.iter().any(|known| known.overlaps(&hole))
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "hole {hole} is empty, outside {} or punched already",
                    self.segment()
                ),
            ));
        }
        // SAFETY: the range is page-aligned, inside this mapping and not yet a hole, so it
        // is memory this object owns; no reference into it is handed out.
        if unsafe { libc::munmap(hole.address as *mut libc::c_void, hole.length) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.holes.push(hole);
        Ok(hole)
    }

    /// Whether byte `offset` of the region is mapped (not in a hole).
    pub fn is_mapped(&self, offset: usize) -> bool {
        let address = self.address + offset;
        offset < self.length
            && !self
                .holes
                .iter()
                .any(|hole| hole.covers(&Segment::new(address, 1)))
    }

    /// Writes `byte` into every mapped byte.
    pub fn fill(&mut self, byte: u8) {
        for part in self.mapped_parts() {
            // SAFETY: `part` is mapped, read-write and owned by this object, and `&mut self`
            // guarantees no slice of it is borrowed.
            unsafe { std::ptr::write_bytes(part.address as *mut u8, byte, part.length) };
        }
    }

    /// Writes `bytes` at `offset`; the whole range must be mapped.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> std::io::Result<()> {
        let target = self.checked_range(offset, bytes.len())?;
        // SAFETY: `target` is mapped, read-write, owned by this object (checked above) and
        // does not overlap `bytes`, which the caller borrows from elsewhere.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), target.address as *mut u8, bytes.len());
        }
        Ok(())
    }

    /// Reads `length` bytes at `offset`; the whole range must be mapped.
    pub fn read(&self, offset: usize, length: usize) -> std::io::Result<Vec<u8>> {
        let source = self.checked_range(offset, length)?;
        let mut bytes = vec![0; length];
        // SAFETY: `source` is mapped and readable (checked above); `bytes` is a fresh vector of
        // exactly `length` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(source.address as *const u8, bytes.as_mut_ptr(), length);
        }
        Ok(bytes)
    }

    /// The mapped bytes from `offset`, as a slice; the whole range must be mapped.
    pub fn slice(&self, offset: usize, length: usize) -> std::io::Result<&[u8]> {
        let range = self.checked_range(offset, length)?;
        // SAFETY: the range is mapped and owned by this object for as long as `&self` lives
        // (holes are only punched through `&mut self`), and every writer takes `&mut self`,
        // so the bytes cannot change while the slice is borrowed.
        Ok(unsafe { std::slice::from_raw_parts(range.address as *const u8, length) })
    }

    fn checked_range(&self, offset: usize, length: usize) -> std::io::Result<Segment> {
        let range = Segment::new(self.address.wrapping_add(offset), length);
        let inside = offset
            .checked_add(length)
            .is_some_and(|end| end <= self.length);
        if !inside || self.holes.iter().any(|hole| hole.overlaps(&range)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{range} is outside {} or in a hole", self.segment()),
            ));
        }
        Ok(range)
    }

    /// The mapped parts of the region, in address order.
    pub fn mapped_parts(&self) -> Vec<Segment> {
        let mut holes = self.holes.clone();
        holes.sort();
        let mut parts = Vec::new();
        let mut cursor = self.address;
        for hole in holes {
            if hole.address > cursor {
                parts.push(Segment::new(cursor, hole.address - cursor));
            }
            cursor = hole.end();
        }
        if cursor < self.address + self.length {
            parts.push(Segment::new(cursor, self.address + self.length - cursor));
        }
        parts
    }
}

impl Drop for AnonymousMapping {
    fn drop(&mut self) {
        for part in self.mapped_parts() {
            // SAFETY: each part is a page-aligned piece of the mapping this object made and
            // still owns (holes are skipped, another mapping may live there now).
            unsafe { libc::munmap(part.address as *mut libc::c_void, part.length) };
        }
    }
}

/// Serialises the unit tests that punch holes and then inspect them: the kernel may place a
/// mapping another test makes into a hole (it is free address space) and fill it.
#[cfg(test)]
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_tracked_and_refused_twice() {
        let _serial = serial();
        let mut mapping = AnonymousMapping::new(8).unwrap();
        let page = page_bytes();
        let hole = mapping.punch_hole(2, 2).unwrap();
        assert_eq!(hole, Segment::new(mapping.address() + 2 * page, 2 * page));
        assert!(mapping.punch_hole(3, 1).is_err());
        assert!(mapping.punch_hole(7, 2).is_err());
        assert_eq!(
            mapping.mapped_parts(),
            vec![
                Segment::new(mapping.address(), 2 * page),
                Segment::new(mapping.address() + 4 * page, 4 * page)
            ]
        );
        assert!(mapping.is_mapped(0));
        assert!(!mapping.is_mapped(2 * page));
        assert!(mapping.write(2 * page - 1, &[1, 2]).is_err());
        mapping.write(4 * page, &[7, 8, 9]).unwrap();
        assert_eq!(mapping.read(4 * page, 3).unwrap(), vec![7, 8, 9]);
    }
}
