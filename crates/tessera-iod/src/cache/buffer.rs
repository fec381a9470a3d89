//! The memory of one cache unit: a zeroed allocation aligned to `BUFFER_ALIGN_BYTES`, so
//! that a later O_DIRECT read or write can go straight from and into it — a slot of the
//! registered Ready region (`ready.rs`) while one is free, else the heap (Raw).
//!
//! The buffer hands out only a raw start pointer; who may read or write which bytes is decided
//! by the cache's grants (`super`), which build the slices.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

use super::ready::ReadyArena;
use super::BUFFER_ALIGN_BYTES;

/// One unit's bytes, owned by the cache and freed when the last holder drops it.
pub(super) struct UnitBuffer {
    start: NonNull<u8>,
    len: usize,
    /// The Ready slot it occupies (given back on drop); `None`: heap memory.
    ready: Option<(Arc<ReadyArena>, u32)>,
}

// SAFETY: the buffer owns its allocation outright (no thread-local or shared state); which
// thread may touch which bytes is governed by the cache's grants, which hand out `&[u8]` only
// under a shared grant and `&mut [u8]` only under an exclusive one.
unsafe impl Send for UnitBuffer {}
// SAFETY: as for `Send`: `&UnitBuffer` only gives the start pointer; every dereference is in a
// grant that holds the unit shared (reads) or exclusively (writes).
unsafe impl Sync for UnitBuffer {}

impl UnitBuffer {
    /// A zeroed buffer of `len` bytes (a checked unit size: a power of two ≥ the alignment).
    pub(super) fn new_zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (asserted in `layout`).
        let start = unsafe { alloc::alloc_zeroed(layout) };
        let Some(start) = NonNull::new(start) else {
            alloc::handle_alloc_error(layout)
        };
        Self {
            start,
            len,
            ready: None,
        }
    }

    /// A buffer of `len` bytes in a free slot of `arena` (`len` at most a slot), zeroed
    /// unless `zeroed` is false (then it holds what the slot last held, so its holder must
    /// write every byte before anyone reads one), or `None` when every slot is taken.
    pub(super) fn from_ready(arena: &Arc<ReadyArena>, len: usize, zeroed: bool) -> Option<Self> {
        let (start, slot) = arena.take(zeroed)?;
        Some(Self {
            start: NonNull::new(start).expect("slots lie inside a mapping"),
            len,
            ready: Some((Arc::clone(arena), slot)),
        })
    }

    fn layout(len: usize) -> Layout {
        assert!(len > 0, "cache units are never empty");
        Layout::from_size_align(len, BUFFER_ALIGN_BYTES)
            .expect("unit sizes are checked powers of two far below isize::MAX")
    }

    /// A new buffer holding a copy of this one's bytes (copy-on-write of a pinned unit).
    pub(super) fn duplicate(&self) -> Self {
        let copy = Self::new_zeroed(self.len);
        // SAFETY: both buffers are alive and `len` bytes long, and distinct allocations. The
        // caller holds the unit exclusively, so nobody writes `self` meanwhile (pinned copies
        // of it are only read).
        unsafe { std::ptr::copy_nonoverlapping(self.start(), copy.start(), self.len) };
        copy
    }

    /// The buffer's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The first byte. Dereferencing it is the caller's business (see the grants).
    pub(super) fn start(&self) -> *mut u8 {
        self.start.as_ptr()
    }
}

impl Drop for UnitBuffer {
    fn drop(&mut self) {
        if let Some((arena, slot)) = self.ready.take() {
            arena.give(slot);
            return;
        }
        // SAFETY: `start` came from `alloc_zeroed` with exactly this layout and is freed once,
        // here; no slice outlives the buffer (grants hold an `Arc` to it).
        unsafe { alloc::dealloc(self.start.as_ptr(), Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        for len in [4096, 8192, 65536] {
            let buffer = UnitBuffer::new_zeroed(len);
            assert_eq!(buffer.start() as usize % BUFFER_ALIGN_BYTES, 0);
            assert_eq!(buffer.len(), len);
            // SAFETY: the buffer is alive, `len` bytes long and not shared.
            let bytes = unsafe { std::slice::from_raw_parts(buffer.start(), len) };
            assert!(bytes.iter().all(|&b| b == 0));
        }
    }
}
