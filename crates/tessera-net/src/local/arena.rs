//! Shared arenas: application memory that the servers of this host can reach directly — the
//! `local` backend's form of registered memory (seed 000 §4: let the application say which
//! allocation its pieces come from; MPI's `MPI_Alloc_mem`).
//!
//! An [`Arena`] is a `memfd` mapped shared. While it lives, a one-sided request whose pieces
//! all lie in one arena names them as offsets in it (`RemoteAccess::Shared`, the key holding
//! the descriptor number and the arena's serial); the iod maps the arena once per connection
//! through `/proc/PID/fd/N` (as it maps the eager buffer) and moves the pieces with plain
//! memory copies and vectored storage calls straight from or into them: no `process_vm_*`
//! call, whose cost per piece (one page-pinning walk of the client's address space each) is
//! what makes gathering many small pieces dearer than packing them on this machine.
//!
//! The key is `serial << 32 | descriptor`: a descriptor number reused by a later arena comes
//! with a new serial, so a server never serves a request from a stale mapping of an arena
//! that is gone.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use tessera_proto::limits::ARENA_BYTES_MAX;

use super::eager::Mapping;

/// Serials of arenas made by this process (0 is the eager buffer's).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// The arenas alive in this process: (start address, end address, key).
static LIVE: RwLock<Vec<(usize, usize, u64)>> = RwLock::new(Vec::new());

/// Memory shared with the servers of this host.
#[derive(Debug)]
pub struct Arena {
    _fd: OwnedFd,
    mapping: Mapping,
    key: u64,
}

impl Arena {
    /// A zeroed arena of `bytes` bytes (1 to [`ARENA_BYTES_MAX`]).
    pub fn new(bytes: usize) -> io::Result<Self> {
        if bytes == 0 || bytes as u64 > ARENA_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an arena holds 1 to {ARENA_BYTES_MAX} bytes (arena_bytes_max), not {bytes}"
                ),
            ));
        }
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let raw = unsafe { libc::memfd_create(c"tessera-arena".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just returned to us and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        File::from(fd.try_clone()?).set_len(bytes as u64)?;
        let mapping = Mapping::new(fd.as_raw_fd(), bytes)?;
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff;
        let key =
            (serial << 32) | u64::try_from(fd.as_raw_fd()).expect("descriptors are not negative");
        let start = mapping.base as usize;
        LIVE.write()
            .expect("arena table lock")
            .push((start, start + bytes, key));
        COUNT.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            _fd: fd,
            mapping,
            key,
        })
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// Whether it holds no bytes (never).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// What the server is told: serial and descriptor number.
    pub fn key(&self) -> u64 {
        self.key
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
        live.retain(|&(_, _, key)| key != self.key);
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
    let mut found: Option<(usize, usize, u64)> = None;
    let mut offsets = Vec::with_capacity(slices.len());
    for &(pointer, len) in slices.iter().filter(|&&(_, len)| len > 0) {
        let (start, end) = (pointer as usize, pointer as usize + len);
        let inside = |&&(low, high, _): &&(usize, usize, u64)| start >= low && end <= high;
        let arena = match found {
            Some(arena) if inside(&&arena) => arena,
            Some(_) => return None,
            None => *live.iter().find(inside)?,
        };
        found = Some(arena);
        offsets.push(((start - arena.0) as u64, len as u64));
    }
    found.map(|(_, _, key)| (key, offsets))
}

/// Whether this process has an arena now (cheap: one atomic load).
pub fn any_live() -> bool {
    COUNT.load(Ordering::Relaxed) > 0
}

/// Arenas alive in this process.
static COUNT: AtomicU64 = AtomicU64::new(0);

/// The descriptor number inside an arena or eager-buffer key.
pub fn descriptor_of(key: u64) -> u64 {
    key & 0xffff_ffff
}

/// Whether `key` names an arena (not the eager buffer).
pub fn is_arena(key: u64) -> bool {
    key >> 32 != 0
}

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
        // A second arena gets a new key even where the descriptor number comes back.
        let old = arena.key();
        drop(arena);
        assert!(locate(&slices).is_none());
        let again = Arena::new(4096).unwrap();
        assert_ne!(again.key(), old);
        assert!(Arena::new(0).is_err());
    }
}
