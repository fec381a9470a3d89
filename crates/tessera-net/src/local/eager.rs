//! The eager buffer of a same-host connection (seed 001 §2.5.3, "Fast RDMA"): a small
//! shared-memory file the client creates for the connection and the server maps once, so a
//! small request's data moves with one copy by the client (into the buffer for a write, out
//! of it for a read) and no one-sided system call at all. The server writes storage straight
//! from the buffer and reads storage straight into it.
//!
//! The client makes the buffer with `memfd_create` and names it in each eager request by its
//! descriptor number; the server opens `/proc/PID/fd/N` of the process at the other end of
//! the socket (the pid from `SO_PEERCRED`, never from a message) — the same permission
//! `process_vm_readv` needs — checks its size against [`EAGER_BYTES_MAX`], maps it and keeps
//! the mapping for the connection. The client never closes the descriptor while the
//! connection lives, so the number cannot come to mean another file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tessera_proto::limits::{ARENA_BYTES_MAX, EAGER_BYTES_MAX};

/// A shared read-write mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is unmapped only by
// Drop, and every access goes through the methods below.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&self` methods only hand out raw views that callers use while the
// buffer is lent to one request at a time.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn new(fd: i32, len: usize) -> io::Result<Self> {
        // SAFETY: a new shared mapping of an open file chosen by the kernel; it aliases no
        // Rust object and is unmapped only by Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
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

/// The client's side: the buffer it fills and empties.
#[derive(Debug)]
pub struct EagerBuffer {
    fd: OwnedFd,
    mapping: Mapping,
}

impl EagerBuffer {
    /// Creates a buffer of [`EAGER_BYTES_MAX`] bytes.
    pub fn new() -> io::Result<Self> {
        let len = usize::try_from(EAGER_BYTES_MAX).expect("64 KiB fits");
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let raw = unsafe { libc::memfd_create(c"tessera-eager".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just returned to us and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        File::from(fd.try_clone()?).set_len(EAGER_BYTES_MAX)?;
        let mapping = Mapping::new(fd.as_raw_fd(), len)?;
        Ok(Self { fd, mapping })
    }

    /// The descriptor number the server opens.
    pub fn key(&self) -> u64 {
        u64::try_from(self.fd.as_raw_fd()).expect("descriptors are not negative")
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// Whether it holds no bytes (never: it is made with [`EAGER_BYTES_MAX`]).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// Copies `slices`, back to back, to the start of the buffer; returns the bytes copied.
    /// The caller checks that they fit.
    pub fn fill(&mut self, slices: &[(*const u8, usize)]) -> usize {
        let mut cursor = 0;
        for &(pointer, len) in slices {
            assert!(
                cursor + len <= self.mapping.len,
                "eager data past the buffer"
            );
            // SAFETY: the source slice is a live slice the caller lends; the target lies
            // inside the mapping (checked above); the two never overlap (the mapping is ours).
            unsafe {
                std::ptr::copy_nonoverlapping(pointer, self.mapping.base.add(cursor), len);
            }
            cursor += len;
        }
        cursor
    }

    /// Copies the start of the buffer out into `slices`, back to back; returns the bytes.
    pub fn empty_into(&self, slices: &mut [&mut [u8]]) -> usize {
        let mut cursor = 0;
        for slice in slices {
            let len = slice.len();
            assert!(
                cursor + len <= self.mapping.len,
                "eager data past the buffer"
            );
            // SAFETY: inside the mapping (checked above), into a distinct caller slice.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.mapping.base.add(cursor),
                    slice.as_mut_ptr(),
                    len,
                );
            }
            cursor += len;
        }
        cursor
    }
}

/// The server's side: a client's eager buffer, mapped for one connection.
#[derive(Debug)]
pub struct SharedRegion {
    key: u64,
    mapping: Mapping,
}

impl SharedRegion {
    /// Maps descriptor `key` of process `pid`. Refused (with the reason) when the process or
    /// descriptor cannot be opened, or the file is empty or larger than [`EAGER_BYTES_MAX`].
    ///
    /// A key with a serial above its low 32 bits names a shared arena (`local::arena`), which
    /// may hold up to [`ARENA_BYTES_MAX`] bytes.
    pub fn open(pid: u32, key: u64) -> io::Result<Self> {
        let path = format!("/proc/{pid}/fd/{}", super::arena::descriptor_of(key));
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let size = file.metadata()?.len();
        let (limit, what, name) = if super::arena::is_arena(key) {
            (ARENA_BYTES_MAX, "an arena", "arena_bytes_max")
        } else {
            (EAGER_BYTES_MAX, "an eager buffer", "eager_bytes_max")
        };
        if size == 0 || size > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{path} holds {size} bytes; {what} holds 1 to {limit} ({name})"),
            ));
        }
        // Only shared memory the client made: the server reopens the descriptor with its own
        // rights, so a file the client may only read must never be written through it.
        // F_GET_SEALS answers for memfd and shmem files alone.
        // SAFETY: fcntl on a descriptor this function owns.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) } < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{path} is not shared memory made by memfd_create"),
            ));
        }
        let len =
            usize::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let mapping = Mapping::new(file.as_raw_fd(), len)?;
        Ok(Self { key, mapping })
    }

    /// The key it was opened by (descriptor number, and an arena's serial).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.mapping.len
    }

    /// Whether it holds no bytes (never: empty files are refused).
    pub fn is_empty(&self) -> bool {
        self.mapping.len == 0
    }

    /// Bytes `[offset, offset + len)` of the buffer, if inside it.
    ///
    /// The bytes are shared with the client, which lends them to the request being served
    /// and does not touch them until the reply; they go only to the kernel (`pwrite`).
    pub fn bytes(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`.
        Some(unsafe { std::slice::from_raw_parts(self.mapping.base.add(offset), len) })
    }

    /// Bytes `[offset, offset + len)` of the buffer to fill, if inside it. One request at a
    /// time is served per connection, so no two of these are alive at once.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self, offset: u64, len: u64) -> Option<&mut [u8]> {
        let (offset, len) = self.range(offset, len)?;
        // SAFETY: inside the mapping, which lives as long as `self`; the connection serves one
        // request at a time, so this is the only view of these bytes in this process.
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

    #[test]
    fn the_server_maps_the_clients_buffer_and_both_see_the_same_bytes() {
        let mut buffer = EagerBuffer::new().unwrap();
        assert_eq!(buffer.len() as u64, EAGER_BYTES_MAX);
        let data = b"eager bytes";
        assert_eq!(buffer.fill(&[(data.as_ptr(), data.len())]), data.len());
        let region = SharedRegion::open(std::process::id(), buffer.key()).unwrap();
        assert_eq!(region.bytes(0, 11).unwrap(), data);
        assert!(region.bytes(EAGER_BYTES_MAX - 1, 2).is_none());
        region.bytes_mut(0, 5).unwrap().copy_from_slice(b"READY");
        let mut out = [0u8; 5];
        buffer.empty_into(&mut [&mut out[..]]);
        assert_eq!(&out, b"READY");
        // A file that is not a memfd is refused, however small.
        let plain = tempfile::tempfile().unwrap();
        plain.set_len(100).unwrap();
        let key = u64::try_from(plain.as_raw_fd()).unwrap();
        let err = SharedRegion::open(std::process::id(), key).unwrap_err();
        assert!(err.to_string().contains("memfd"), "{err}");
        // A descriptor that is not a small file is refused by name.
        let err = SharedRegion::open(std::process::id(), 0x7fff_0000).unwrap_err();
        assert!(
            err.to_string().contains("No such file") || err.kind() == io::ErrorKind::NotFound,
            "{err}"
        );
    }
}
