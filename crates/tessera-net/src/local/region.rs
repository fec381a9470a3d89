//! Shared-memory regions between a same-host client and its servers: the eager buffer of a
//! connection ([`super::eager`]) and shared arenas ([`super::arena`]).
//!
//! The client makes each region with `memfd_create(MFD_ALLOW_SEALING)`, sizes it, and seals
//! it with `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` ([`sealed_memfd`]) so that its size is
//! fixed for good. It hands the descriptor itself to the server, once per connection, in a
//! `ShareRegion` frame with `SCM_RIGHTS` ([`super::scm`]), under a key unique in the process
//! for its life ([`next_key`]). The server maps a region only if the descriptor it was given
//! is a memfd sealed against shrinking (so the client can never cut the file under the
//! server's mapping, which would raise `SIGBUS` in the server), open read-write (it is mapped
//! with exactly the rights it came with), and of the declared size within the limit of its
//! kind ([`SharedRegion::from_descriptor`]). The server never opens a client's file by path
//! (`/proc/PID/fd/N` would use the server's rights, not the client's).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use tessera_proto::limits::{ARENA_BYTES_MAX, EAGER_BYTES_MAX};
use tessera_proto::SHARED_KEY_ARENA;

/// A shared read-write mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is unmapped only by
// Drop, and every access goes through the methods of its owners.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&self` methods only hand out raw views that callers use while the
// region is lent to one request at a time.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn new(fd: i32, len: usize) -> io::Result<Self> {
        Self::map(fd, len, false)
    }

    /// A mapping whose page tables are made now (`MAP_POPULATE`), so no copy into or out of
    /// it takes a page fault later.
    pub(crate) fn populated(fd: i32, len: usize) -> io::Result<Self> {
        Self::map(fd, len, true)
    }

    fn map(fd: i32, len: usize, populate: bool) -> io::Result<Self> {
        let flags = if populate {
            libc::MAP_SHARED | libc::MAP_POPULATE
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: a new shared mapping of an open file chosen by the kernel; it aliases no
        // Rust object and is unmapped only by Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: base.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped only here.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// The largest shared region a server maps populated (`MAP_POPULATE`): its page tables made
/// at once instead of at each page's first touch. A larger one (an application's arena of
/// gigabytes, mostly never touched) is faulted in as it is used.
pub const SHARED_POPULATE_BYTES_MAX: u64 = 64 << 20;

/// The seals a client puts on every region before sharing it: its size can never change,
/// and no seal can be added or removed (so no later `F_SEAL_WRITE` can break a mapping).
pub const REGION_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd of `bytes` bytes named `name`, close-on-exec, sealed with [`REGION_SEALS`].
pub(crate) fn sealed_memfd(name: &std::ffi::CStr, bytes: u64) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just returned to us and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    File::from(fd.try_clone()?).set_len(bytes)?;
    // SAFETY: fcntl on a descriptor this function owns, with an int argument.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REGION_SEALS) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Serials of the regions of this process; never reused, so a key never comes to mean
/// another region (a fork inherits the counter, but a child never speaks on its parent's
/// connections, and keys are per connection on the server).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// A new key for a region: an arena's has [`SHARED_KEY_ARENA`] set.
pub(crate) fn next_key(arena: bool) -> u64 {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    assert!(serial < SHARED_KEY_ARENA, "region serials never reach 2^63");
    if arena {
        serial | SHARED_KEY_ARENA
    } else {
        serial
    }
}

/// Whether `key` names an arena (not an eager buffer).
pub fn is_arena(key: u64) -> bool {
    key & SHARED_KEY_ARENA != 0
}

/// What a key names, for messages, and the largest such region with its limit's name.
fn kind_of(key: u64) -> (&'static str, u64, &'static str) {
    if is_arena(key) {
        ("an arena", ARENA_BYTES_MAX, "arena_bytes_max")
    } else {
        ("an eager buffer", EAGER_BYTES_MAX, "eager_bytes_max")
    }
}

/// The server's side: a client's region, mapped for one connection.
#[derive(Debug)]
pub struct SharedRegion {
    key: u64,
    mapping: Mapping,
}

impl SharedRegion {
    /// Maps the region the client shared as `key`, declared `bytes` bytes long, from the
    /// descriptor that came with its `ShareRegion` frame. Refused, with the reason, unless
    /// the descriptor is open read-write, is a memfd sealed with `F_SEAL_SHRINK`, and holds
    /// exactly `bytes` bytes, 1 to [`EAGER_BYTES_MAX`] for an eager buffer or
    /// [`ARENA_BYTES_MAX`] for an arena. The caller may close the descriptor once mapped
    /// (the mapping keeps the memory).
    pub fn from_descriptor(key: u64, bytes: u64, descriptor: &OwnedFd) -> Result<Self, String> {
        let (what, limit, limit_name) = kind_of(key);
        if bytes == 0 || bytes > limit {
            return Err(format!(
                "declared {bytes} bytes; {what} holds 1 to {limit} ({limit_name})"
            ));
        }
        let fd = descriptor.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(format!(
                "the descriptor cannot be inspected (F_GETFL: {})",
                io::Error::last_os_error()
            ));
        }
        if flags & libc::O_PATH != 0 {
            return Err("the descriptor was opened O_PATH: it grants no access to map".to_owned());
        }
        match flags & libc::O_ACCMODE {
            libc::O_RDWR => {}
            mode => {
                let how = if mode == libc::O_RDONLY {
                    "read-only"
                } else {
                    "write-only"
                };
                return Err(format!(
                    "the descriptor is open {how}; a region is mapped read-write and must be \
                     passed open read-write (O_RDWR)"
                ));
            }
        }
        // SAFETY: fcntl on a descriptor this function owns.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(format!(
                "not a memfd (F_GET_SEALS: {})",
                io::Error::last_os_error()
            ));
        }
        if seals & libc::F_SEAL_SHRINK == 0 {
            return Err(format!(
                "not a memfd sealed against shrinking (seals {seals:#x}, F_SEAL_SHRINK missing; \
                 a tmpfs file opened by path cannot be sealed)"
            ));
        }
        // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on a descriptor this function owns, into a local of the right type.
        if unsafe { libc::fstat(fd, &raw mut stat) } < 0 {
            return Err(format!("fstat: {}", io::Error::last_os_error()));
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size != bytes {
            return Err(format!(
                "the memfd holds {size} bytes, not the {bytes} declared"
            ));
        }
        let len = usize::try_from(size).map_err(|_| format!("{size} bytes do not fit"))?;
        // A server maps a region once per connection and copies into it per request: a
        // small one gets its page tables at once, rather than a fault per page at first touch
        // in each mapping (a client cache's blocks are touched by every iod's mapping).
        let mapping = if size <= SHARED_POPULATE_BYTES_MAX {
            Mapping::populated(fd, len)
        } else {
            Mapping::new(fd, len)
        }
        .map_err(|err| format!("mmap: {err}"))?;
        Ok(Self { key, mapping })
    }

    /// The key it was shared under.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// Whether it holds no bytes (never: empty regions are refused).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// Bytes `[offset, offset + len)` of the region, if inside it.
    ///
    /// The bytes are shared with the client, which lends them to the request being served
    /// and does not touch them until the reply; they go only to the kernel (`pwrite`).
    pub fn bytes(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`.
        Some(unsafe { std::slice::from_raw_parts(self.mapping.base.add(offset), len) })
    }

    /// Bytes `[offset, offset + len)` of the region to fill, if inside it.
    ///
    /// The region is reached through `&self` (the connection and the request being served
    /// share it by `Arc`), so the exclusivity of the returned slice is the caller's to keep.
    ///
    /// # Safety
    ///
    /// While the returned slice is alive, no other reference into the same bytes of this
    /// region may be made or used in this process: no second `bytes_mut` and no `bytes`
    /// overlapping it. The server keeps this by serving one request at a time per
    /// connection (regions are per connection) and by taking one view of a range at a time
    /// within that request.
    #[allow(clippy::mut_from_ref)] // exclusivity is the caller's contract, stated above
    pub unsafe fn bytes_mut(&self, offset: u64, len: u64) -> Option<&mut [u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`; no other reference to
        // these bytes is alive in this process (this function's contract). The client, the
        // other process mapping them, does not touch them until the reply.
        Some(unsafe { std::slice::from_raw_parts_mut(self.mapping.base.add(offset), len) })
    }

    fn range(&self, offset: u64, len: u64) -> Option<(usize, usize)> {
        let end = offset.checked_add(len)?;
        if end > self.mapping.len as u64 {
            return None;
        }
        Some((usize::try_from(offset).ok()?, usize::try_from(len).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn reopen(fd: &OwnedFd, flags: i32) -> OwnedFd {
        let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        // SAFETY: a NUL-terminated path and valid flags; the result is checked.
        let raw = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
        assert!(raw >= 0, "{}", io::Error::last_os_error());
        // SAFETY: a descriptor just opened and owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(raw) }
    }

    fn refusal(key: u64, bytes: u64, fd: &OwnedFd) -> String {
        SharedRegion::from_descriptor(key, bytes, fd).unwrap_err()
    }

    #[test]
    fn only_a_sealed_read_write_memfd_of_the_declared_size_is_mapped() {
        let key = next_key(false);
        let fd = sealed_memfd(c"test", 4096).unwrap();
        // The client's seals hold: the file can neither shrink nor grow.
        assert!(File::from(fd.try_clone().unwrap()).set_len(100).is_err());
        assert!(File::from(fd.try_clone().unwrap()).set_len(8192).is_err());
        let client = Mapping::new(fd.as_raw_fd(), 4096).unwrap();
        let region = SharedRegion::from_descriptor(key, 4096, &fd).unwrap();
        // SAFETY: the only view of these bytes in this test.
        unsafe { region.bytes_mut(10, 4) }
            .unwrap()
            .copy_from_slice(b"SEEN");
        // SAFETY: bytes 10..14 of the client's mapping of the same memfd.
        let seen = unsafe { std::slice::from_raw_parts(client.base.add(10), 4) };
        assert_eq!(seen, b"SEEN");
        assert!(region.bytes(4090, 7).is_none());

        let plain = tempfile::tempfile().unwrap();
        plain.set_len(4096).unwrap();
        assert!(refusal(key, 4096, &OwnedFd::from(plain)).contains("not a memfd"));
        // A tmpfs file opened by path passes F_GET_SEALS but can never be sealed.
        let shm = tempfile::tempfile_in("/dev/shm").expect("a tmpfs at /dev/shm");
        shm.set_len(4096).unwrap();
        assert!(refusal(key, 4096, &OwnedFd::from(shm)).contains("F_SEAL_SHRINK"));
        let readonly = reopen(&fd, libc::O_RDONLY);
        assert!(refusal(key, 4096, &readonly).contains("read-only"));
        let path_only = reopen(&fd, libc::O_PATH);
        assert!(refusal(key, 4096, &path_only).contains("O_PATH"));
        assert!(refusal(key, 8192, &fd).contains("not the 8192 declared"));
        assert!(refusal(key, EAGER_BYTES_MAX + 1, &fd).contains("eager_bytes_max"));
        assert!(refusal(key, 0, &fd).contains("1 to"));
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(raw >= 0);
        // SAFETY: a descriptor just made and owned by nothing else.
        let unsealed = unsafe { OwnedFd::from_raw_fd(raw) };
        File::from(unsealed.try_clone().unwrap())
            .set_len(4096)
            .unwrap();
        assert!(refusal(key, 4096, &unsealed).contains("F_SEAL_SHRINK"));
        // An arena key allows more than the eager buffer's size.
        let big = sealed_memfd(c"big", EAGER_BYTES_MAX * 2).unwrap();
        let arena = next_key(true);
        assert!(is_arena(arena) && !is_arena(key));
        assert_eq!(
            SharedRegion::from_descriptor(arena, EAGER_BYTES_MAX * 2, &big)
                .unwrap()
                .len() as u64,
            EAGER_BYTES_MAX * 2
        );
    }
}
