//! Shared arenas: application memory that the servers of this host can reach directly — the
//! `local` backend's form of registered memory (seed 000 §4: let the application say which
//! allocation its pieces come from; MPI's `MPI_Alloc_mem`).
//!
//! An [`Arena`] is a sealed `memfd` ([`super::region::sealed_memfd`]) mapped shared, with a
//! key new in this process ([`super::region::next_key`], with `SHARED_KEY_ARENA` set). While
//! it lives, a one-sided request whose pieces all lie in one arena names them as offsets in
//! it (`RemoteAccess::Shared`); the first time a connection's request uses the arena, the
//! connection hands the server the memfd itself in a `ShareRegion` frame (`SCM_RIGHTS`), and
//! the iod maps it once per connection (as it maps the eager buffer) and moves the pieces
//! with plain memory copies and vectored storage calls straight from or into them: no
//! `process_vm_*` call, whose cost per piece (one page-pinning walk of the client's address
//! space each) is what makes gathering many small pieces dearer than packing them on this
//! machine.
//!
//! Keys are never reused in a process, so a server never serves a request from a stale
//! mapping of an arena that is gone (it keeps such a mapping, unused, until the connection
//! closes or it is unmapped as least recently used).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use tessera_proto::limits::ARENA_BYTES_MAX;

use super::region::{next_key, sealed_memfd, Mapping};

/// The arenas alive in this process: start address, end address, key, and a borrowed view
/// of the memfd (valid while the arena is in the table: it leaves the table before its
/// descriptor closes).
static LIVE: RwLock<Vec<(usize, usize, u64, i32)>> = RwLock::new(Vec::new());

/// Memory shared with the servers of this host.
#[derive(Debug)]
pub struct Arena {
    fd: OwnedFd,
    mapping: Mapping,
    key: u64,
}

impl Arena {
    /// A zeroed arena of `bytes` bytes (1 to [`ARENA_BYTES_MAX`]), every page allocated now
    /// and charged to this process (a server maps only a region allocated whole).
    pub fn new(bytes: usize) -> io::Result<Self> {
        if bytes == 0 || bytes as u64 > ARENA_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an arena holds 1 to {ARENA_BYTES_MAX} bytes (arena_bytes_max), not {bytes}"
                ),
            ));
        }
        let fd = sealed_memfd(c"tessera-arena", bytes as u64)?;
        let mapping = Mapping::new(fd.as_raw_fd(), bytes)?;
        let key = next_key(true);
        let start = mapping.base as usize;
        LIVE.write()
            .expect("arena table lock")
            .push((start, start + bytes, key, fd.as_raw_fd()));
        COUNT.fetch_add(1, Ordering::Relaxed);
        Ok(Self { fd, mapping, key })
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// Whether it holds no bytes (never).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// The key the arena is shared under (new in this process).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The memfd handed to the servers (`ShareRegion`).
    pub fn descriptor(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The arena's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as `self`; servers touch it only while a request
        // lends it, when the caller holds a borrow of it.
        unsafe { std::slice::from_raw_parts(self.mapping.base, self.mapping.len) }
    }

    /// The arena's bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only view in this process.
        unsafe { std::slice::from_raw_parts_mut(self.mapping.base, self.mapping.len) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let mut live = LIVE.write().expect("arena table lock");
        live.retain(|&(_, _, key, _)| key != self.key);
        COUNT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The arena key and the arena offsets of `slices` when every non-empty one lies inside one
/// live arena; `None` otherwise.
pub fn locate(slices: &[(*const u8, usize)]) -> Option<(u64, Vec<(u64, u64)>)> {
    if !any_live() {
        return None;
    }
    let live = LIVE.read().expect("arena table lock");
    if live.is_empty() {
        return None;
    }
    let mut found: Option<(usize, usize, u64, i32)> = None;
    let mut offsets = Vec::with_capacity(slices.len());
    for &(pointer, len) in slices.iter().filter(|&&(_, len)| len > 0) {
        let (start, end) = (pointer as usize, pointer as usize + len);
        let inside = |&&(low, high, _, _): &&(usize, usize, u64, i32)| start >= low && end <= high;
        let arena = match found {
            Some(arena) if inside(&&arena) => arena,
            Some(_) => return None,
            None => *live.iter().find(inside)?,
        };
        found = Some(arena);
        offsets.push(((start - arena.0) as u64, len as u64));
    }
    found.map(|(_, _, key, _)| (key, offsets))
}

/// A new descriptor of the memfd of the live arena `key`, and its size; `None` once the
/// arena is gone.
pub fn descriptor(key: u64) -> Option<io::Result<(OwnedFd, u64)>> {
    let live = LIVE.read().expect("arena table lock");
    let &(start, end, _, raw) = live.iter().find(|entry| entry.2 == key)?;
    // SAFETY: the arena owning `raw` is alive while its entry is in the table, and the entry
    // cannot leave while this read guard is held.
    let fd = unsafe { BorrowedFd::borrow_raw(raw) };
    Some(
        fd.try_clone_to_owned()
            .map(|owned| (owned, (end - start) as u64)),
    )
}

/// Whether this process has an arena now (cheap: one atomic load).
pub fn any_live() -> bool {
    COUNT.load(Ordering::Relaxed) > 0
}

/// Arenas alive in this process.
static COUNT: AtomicU64 = AtomicU64::new(0);

/// Whether `key` names an arena (not an eager buffer).
pub use super::region::is_arena;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_inside_one_arena_are_located_by_offset() {
        let mut arena = Arena::new(1 << 16).unwrap();
        arena.as_mut_slice()[100] = 7;
        let base = arena.as_slice().as_ptr();
        let slices = [
            (base.wrapping_add(100), 10),
            (base.wrapping_add(4096), 4096),
            (base, 0),
        ];
        let (key, offsets) = locate(&slices).unwrap();
        assert_eq!(key, arena.key());
        assert!(is_arena(key));
        assert_eq!(offsets, vec![(100, 10), (4096, 4096)]);
        // One byte past the end, or memory of the heap, is not in the arena.
        assert!(locate(&[(base.wrapping_add((1 << 16) - 1), 2)]).is_none());
        let heap = [0u8; 64];
        assert!(locate(&[(base, 1), (heap.as_ptr(), 64)]).is_none());
        // Its memfd is found by key while it lives, at its size.
        let (_, bytes) = descriptor(key).unwrap().unwrap();
        assert_eq!(bytes, 1 << 16);
        // A second arena gets a new key even where the descriptor number comes back.
        let old = arena.key();
        drop(arena);
        assert!(locate(&slices).is_none());
        assert!(descriptor(old).is_none());
        let again = Arena::new(4096).unwrap();
        assert_ne!(again.key(), old);
        assert!(Arena::new(0).is_err());
    }
}
