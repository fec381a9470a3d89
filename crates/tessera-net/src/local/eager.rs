//! The eager buffer of a same-host connection (seed 001 §2.5.3, "Fast RDMA"): a small
//! shared-memory file the client creates for the connection and the server maps once, so a
//! small request's data moves with one copy by the client (into the buffer for a write, out
//! of it for a read) and no one-sided system call at all. The server writes storage straight
//! from the buffer and reads storage straight into it.
//!
//! The client makes the buffer as a sealed memfd of [`EAGER_BYTES_MAX`] bytes
//! ([`super::region::sealed_memfd`]) and, right after the connection's probe, hands the
//! descriptor itself to the server in a `ShareRegion` frame (`SCM_RIGHTS`) under a key new in
//! this process ([`EagerBuffer::key`]); eager requests name the buffer by that key. The
//! server checks the descriptor it was given (a memfd sealed against shrinking, open
//! read-write, of the declared size: [`super::region::SharedRegion`]), maps it and keeps the
//! mapping for the connection; it never opens a file of the client by path.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use tessera_proto::limits::EAGER_BYTES_MAX;

use super::region::{next_key, sealed_memfd, Mapping};

/// The client's side: the buffer it fills and empties.
#[derive(Debug)]
pub struct EagerBuffer {
    fd: OwnedFd,
    mapping: Mapping,
    key: u64,
}

impl EagerBuffer {
    /// Creates a buffer of [`EAGER_BYTES_MAX`] bytes, sealed at that size.
    pub fn new() -> io::Result<Self> {
        let len = usize::try_from(EAGER_BYTES_MAX).expect("64 KiB fits");
        let fd = sealed_memfd(c"tessera-eager", EAGER_BYTES_MAX)?;
        let mapping = Mapping::new(fd.as_raw_fd(), len)?;
        Ok(Self {
            fd,
            mapping,
            key: next_key(false),
        })
    }

    /// The key the buffer is shared under (new in this process, never an arena's).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The memfd handed to the server (`ShareRegion`).
    pub fn descriptor(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
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
    ///
    /// # Safety
    ///
    /// Each `(pointer, len)` must be readable for `len` bytes for the whole call (made from
    /// a live `&[u8]` or `&mut [u8]`, as the connection's slices are).
    pub unsafe fn fill(&mut self, slices: &[(*const u8, usize)]) -> usize {
        let mut cursor = 0;
        for &(pointer, len) in slices {
            assert!(
                cursor + len <= self.mapping.len,
                "eager data past the buffer"
            );
            // SAFETY: the source is readable for `len` bytes (this function's contract); the target lies
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::region::SharedRegion;

    #[test]
    fn the_server_maps_the_clients_buffer_and_both_see_the_same_bytes() {
        let mut buffer = EagerBuffer::new().unwrap();
        assert_eq!(buffer.len() as u64, EAGER_BYTES_MAX);
        assert!(!crate::local::region::is_arena(buffer.key()));
        assert_ne!(EagerBuffer::new().unwrap().key(), buffer.key());
        let data = b"eager bytes";
        // SAFETY: the pointer and length of a live array.
        let copied = unsafe { buffer.fill(&[(data.as_ptr(), data.len())]) };
        assert_eq!(copied, data.len());
        let descriptor = buffer.descriptor().try_clone_to_owned().unwrap();
        let region =
            SharedRegion::from_descriptor(buffer.key(), EAGER_BYTES_MAX, &descriptor).unwrap();
        // SAFETY: the test is the only one touching the region.
        assert_eq!(unsafe { region.bytes(0, 11) }.unwrap(), data);
        // SAFETY: a range check only.
        assert!(unsafe { region.bytes(EAGER_BYTES_MAX - 1, 2) }.is_none());
        // SAFETY: the only view of these bytes in this test.
        unsafe { region.bytes_mut(0, 5) }
            .unwrap()
            .copy_from_slice(b"READY");
        let mut out = [0u8; 5];
        buffer.empty_into(&mut [&mut out[..]]);
        assert_eq!(&out, b"READY");
    }
}
