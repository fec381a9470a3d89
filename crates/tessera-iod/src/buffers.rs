//! Server buffers kept between requests.
//!
//! A request that moves data through a server buffer (a sieving chunk; a unit of a one-sided
//! transfer, pulled from the client before it is written or read before it is pushed) would
//! otherwise allocate it zeroed: the allocator either clears reused memory or maps new pages
//! (a page fault and a page clear per 4 KiB), work that the copy the buffer is there for
//! overwrites at once, and that made sieving lose where the cost model expected a gain
//! (blockcol, n = 2048). A [`BufferPool`] keeps a bounded number
//! of finished buffers; a [`KeptBuffer`] is taken from it and goes back on drop. Buffers are
//! only ever grown, never cleared: each use overwrites the bytes it reads.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Request buffers kept between requests (data of a write as it arrives, of a read before it
/// is sent).
pub const REQUEST_BUFFERS_KEPT: usize = 8;

/// The largest request buffer kept: 8 of them hold at most 32 MiB idle.
pub const REQUEST_BUFFER_KEPT_BYTES_MAX: usize = 4 << 20;

/// The buffers a write's data lands in, and a read's data is read into, before storage or
/// the socket. A read may take one only because every read path (per piece, batched,
/// sieving) writes every byte of every run, zeros past the end of the object included, so
/// no byte of an earlier request can be sent (`store` test
/// `every_read_plan_overwrites_every_byte_of_a_reused_buffer`). With a fresh zeroed buffer
/// per request, 4 clients reading 1 MiB each spent 9 % of the host's CPU in `memset`.
pub static REQUEST_BUFFERS: BufferPool =
    BufferPool::new(REQUEST_BUFFERS_KEPT, REQUEST_BUFFER_KEPT_BYTES_MAX);

/// Buffers of finished requests, at most `kept_max`, none larger than `bytes_max`.
#[derive(Debug)]
pub struct BufferPool {
    kept: Mutex<Vec<Vec<u8>>>,
    kept_max: usize,
    bytes_max: usize,
}

impl BufferPool {
    /// A pool keeping at most `kept_max` buffers of at most `bytes_max` bytes each.
    pub const fn new(kept_max: usize, bytes_max: usize) -> Self {
        Self {
            kept: Mutex::new(Vec::new()),
            kept_max,
            bytes_max,
        }
    }

    /// A buffer of `bytes` bytes (their values are whatever a previous use left).
    pub fn take(&'static self, bytes: usize) -> KeptBuffer {
        let kept = self.kept.lock().expect("buffer pool lock").pop();
        let mut buffer = KeptBuffer {
            bytes: kept.unwrap_or_default(),
            length: 0,
            pool: self,
        };
        buffer.set_len(bytes);
        buffer
    }

    /// Buffers kept now.
    pub fn kept(&self) -> usize {
        self.kept.lock().expect("buffer pool lock").len()
    }
}

/// A buffer from a [`BufferPool`], given back when dropped.
#[derive(Debug)]
pub struct KeptBuffer {
    bytes: Vec<u8>,
    /// Bytes in use: the buffer derefs to the first `length` bytes.
    length: usize,
    pool: &'static BufferPool,
}

impl KeptBuffer {
    /// Makes the buffer `bytes` long, growing it if needed (new bytes are zero).
    pub fn set_len(&mut self, bytes: usize) {
        if self.bytes.len() < bytes {
            self.bytes.resize(bytes, 0);
        }
        self.length = bytes;
    }
}

impl Deref for KeptBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.length]
    }
}

impl DerefMut for KeptBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.length]
    }
}

impl Drop for KeptBuffer {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        if bytes.is_empty() || bytes.len() > self.pool.bytes_max {
            return;
        }
        let mut kept = self.pool.kept.lock().expect("buffer pool lock");
        if kept.len() < self.pool.kept_max {
            kept.push(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static POOL: BufferPool = BufferPool::new(2, 1 << 20);

    #[test]
    fn buffers_come_back_bounded_in_count_and_size_and_keep_their_memory() {
        let mut first = POOL.take(4096);
        first.fill(7);
        let address = first.as_ptr();
        drop(first);
        assert_eq!(POOL.kept(), 1);
        // The same memory comes back, its old bytes in place, shrunk or grown as asked.
        let again = POOL.take(100);
        assert_eq!((again.as_ptr(), again.len(), again[99]), (address, 100, 7));
        let (b, c, d) = (POOL.take(10), POOL.take(10), POOL.take(10));
        drop((again, b, c, d));
        assert_eq!(POOL.kept(), 2, "at most kept_max");
        let mut large = POOL.take(0);
        large.set_len(2 << 20);
        let kept_before = POOL.kept();
        drop(large);
        assert_eq!(POOL.kept(), kept_before, "a buffer over bytes_max is freed");
    }
}
