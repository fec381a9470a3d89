//! The memory of the client cache's blocks: slots of one shared arena
//! ([`tessera_net::local::arena`]) while there are free ones, else the heap.
//!
//! An iod on this host reaches an arena by mapping it once per connection, so a block read
//! into the cache is a plain memory copy on the iod's side, and so is a demoted block the iod
//! pulls back out: no `process_vm_*` call (each of which pins the client's pages again) on
//! either path. Heap blocks work the same, through those calls.

use std::sync::{Arc, Mutex, PoisonError};

use tessera_net::local::arena::Arena;

/// Slots kept beyond the cache's budget in blocks: blocks on their way out (an eager demote
/// in flight, a read copying out of a block just evicted) still hold theirs.
const SLACK_BLOCKS: usize = 16;

/// The arena the blocks are cut from, and its free slots.
pub(crate) struct Slab {
    arena: Arena,
    /// Start of the arena's mapping (written only through a slot's sole [`Block`]).
    base: *mut u8,
    block_bytes: usize,
    /// Bounded by construction: the arena's slot count.
    free: Mutex<Vec<u32>>,
}

// SAFETY: `base` points into the mapping `arena` owns for the slab's life. Each slot is owned
// by at most one `Block` at a time (the free list hands each index out once until it is given
// back), and a block gives out `&mut` only through `&mut self` and `&` only through `&self`.
unsafe impl Send for Slab {}
// SAFETY: as for `Send`; the free list is behind a mutex.
unsafe impl Sync for Slab {}

impl std::fmt::Debug for Slab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slab")
            .field("arena_bytes", &self.arena.len())
            .field("block_bytes", &self.block_bytes)
            .finish_non_exhaustive()
    }
}

impl Slab {
    /// An arena of `blocks` (plus [`SLACK_BLOCKS`]) slots of `block_bytes`; `None` (blocks
    /// then come from the heap) if the arena cannot be made.
    pub(crate) fn new(blocks: usize, block_bytes: usize) -> Option<Arc<Self>> {
        let slots = blocks.checked_add(SLACK_BLOCKS)?;
        let count = u32::try_from(slots).ok()?;
        let mut arena = match Arena::new(slots.checked_mul(block_bytes)?) {
            Ok(arena) => arena,
            Err(err) => {
                tracing::warn!("client cache: no shared arena for its blocks ({err}); heap blocks");
                return None;
            }
        };
        // Every page of the arena is allocated by `Arena::new`, in this process (an iod
        // refuses a region with holes): an iod's mapping of it allocates none.
        let base = arena.as_mut_slice().as_mut_ptr();
        Some(Arc::new(Self {
            arena,
            base,
            block_bytes,
            free: Mutex::new((0..count).rev().collect()),
        }))
    }

    fn take(&self) -> Option<u32> {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    fn give_back(&self, slot: u32) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
    }

    /// Where slot `slot` starts, and its length.
    fn slot(&self, slot: u32) -> (*mut u8, usize) {
        // SAFETY: `slot` came from the free list, so it is below the arena's slot count and
        // the offset lies inside the mapping.
        let start = unsafe { self.base.add(slot as usize * self.block_bytes) };
        (start, self.block_bytes)
    }
}

/// One cached block's bytes: a slot of the cache's [`Slab`] or a heap buffer.
pub(crate) struct Block(Memory);

enum Memory {
    Slot { slab: Arc<Slab>, slot: u32 },
    Heap(Vec<u8>),
}

impl Block {
    /// A block of the slab's size (or `bytes` from the heap without a slab or a free slot),
    /// to be filled whole before it is read: a slot holds what it last held.
    pub(crate) fn new(slab: Option<&Arc<Slab>>, bytes: usize) -> Self {
        if let Some(slab) = slab.filter(|slab| slab.block_bytes == bytes) {
            if let Some(slot) = slab.take() {
                return Self(Memory::Slot {
                    slab: Arc::clone(slab),
                    slot,
                });
            }
        }
        Self(Memory::Heap(vec![0; bytes]))
    }

    /// The bytes, to fill.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Memory::Slot { slab, slot } => {
                let (start, len) = slab.slot(*slot);
                // SAFETY: the slot is this block's alone (see `Slab`), inside the mapping,
                // and `&mut self` makes this the only view of it.
                unsafe { std::slice::from_raw_parts_mut(start, len) }
            }
            Memory::Heap(bytes) => bytes,
        }
    }
}

impl std::ops::Deref for Block {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Memory::Slot { slab, slot } => {
                let (start, len) = slab.slot(*slot);
                // SAFETY: as in `as_mut_slice`; `&self` gives only shared views.
                unsafe { std::slice::from_raw_parts(start, len) }
            }
            Memory::Heap(bytes) => bytes,
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Memory::Slot { slab, slot } = &self.0 {
            slab.give_back(*slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_the_heap_takes_over_when_they_run_out() {
        let slab = Slab::new(2, 4096).expect("an arena");
        let total = 2 + SLACK_BLOCKS;
        let mut blocks: Vec<Block> = (0..total).map(|_| Block::new(Some(&slab), 4096)).collect();
        assert!(blocks
            .iter()
            .all(|block| matches!(block.0, Memory::Slot { .. })));
        let extra = Block::new(Some(&slab), 4096);
        assert!(matches!(extra.0, Memory::Heap(_)));
        // Each slot is its own memory.
        for (index, block) in (0u8..).zip(blocks.iter_mut()) {
            block.as_mut_slice().fill(index);
        }
        for (index, block) in (0u8..).zip(blocks.iter()) {
            assert!(block.iter().all(|&byte| byte == index));
        }
        drop(blocks.pop());
        let again = Block::new(Some(&slab), 4096);
        assert!(matches!(again.0, Memory::Slot { .. }));
        // Another size never takes a slot.
        assert!(matches!(Block::new(Some(&slab), 512).0, Memory::Heap(_)));
        assert_eq!(Block::new(None, 512).len(), 512);
    }
}
