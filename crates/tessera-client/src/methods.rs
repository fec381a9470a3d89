//! Range locks and the baseline noncontiguous methods: "multiple I/O" and client-side data
//! sieving, the yardsticks list and datatype I/O are measured against.
//!
//! - [`File::lock_range`] takes a shared or exclusive lock on bytes of the file from the mds
//!   (`LockRange`); the [`RangeLock`] it returns releases it (`UnlockRange`) on
//!   [`RangeLock::release`] or on drop. The mds drops a lock whose lease ends, so a client that
//!   died holds nothing for long.
//! - [`File::write_multiple`] / [`File::read_multiple`] send one `write_list`/`read_list` call
//!   per file piece, cutting the memory list alongside: the "Multiple I/O" of the seeds.
//! - [`File::write_sieve`] / [`File::read_sieve`] do what ROMIO's data sieving does for
//!   independent I/O: the covered bytes of the file (the union of the pieces) are walked in
//!   chunks of at most the sieve buffer, each starting at a wanted byte; each chunk is read
//!   with one contiguous `read_at` and the wanted bytes copied out, or, for a write, locked
//!   exclusively, read if it has holes, patched with the pieces in list order (the later piece
//!   wins, as in `write_list`), written back with one `write_at` and unlocked. The lock is what
//!   keeps a concurrent sieving writer's read-modify-write from putting back stale bytes in
//!   this writer's pieces; plain writes take no lock, so only writers that all sieve (or all
//!   lock) are safe against each other on interleaved bytes.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use tessera_net::{Connection, NetError};
use tessera_proto::limits::{
    FILE_BYTES_MAX, PIECE_BYTES_MAX, RANGE_LOCK_LEASE_MS_MAX, RANGE_LOCK_WAIT_MS_MAX,
};
use tessera_proto::{ErrorCode, LockRange, Piece, UnlockRange};

use crate::client::Client;
use crate::error::ClientError;
use crate::file::{File, IoReport};
use crate::options::OpenMode;

/// How long [`File::lock_range`] waits for conflicting locks to go.
pub const LOCK_WAIT_DEFAULT: Duration = Duration::from_secs(30);

/// How long a lock of [`File::lock_range`] lives unless released first.
pub const LOCK_LEASE_DEFAULT: Duration = Duration::from_mins(1);

/// ROMIO's `ind_rd_buffer_size`: the read sieve buffer.
pub const SIEVE_READ_BUFFER_BYTES_DEFAULT: u64 = 4 << 20;

/// ROMIO's `ind_wr_buffer_size`: the write sieve buffer.
pub const SIEVE_WRITE_BUFFER_BYTES_DEFAULT: u64 = 512 << 10;

/// Longest pause between two tries when the mds refused to queue a lock request (its queue
/// of waiters was full).
const LOCK_RETRY_PAUSE_MAX: Duration = Duration::from_millis(100);
/// The first pause after such a refusal, doubled after each (and the shortest slice of the
/// wait a retry asks the mds for).
const LOCK_RETRY_PAUSE_MIN: Duration = Duration::from_millis(1);
/// The shortest lease a range lock may ask for: a shorter one would end at once.
const LOCK_LEASE_MIN: Duration = Duration::from_millis(1);

const _: () = assert!(LOCK_WAIT_DEFAULT.as_millis() <= RANGE_LOCK_WAIT_MS_MAX as u128);
const _: () = assert!(LOCK_LEASE_DEFAULT.as_millis() <= RANGE_LOCK_LEASE_MS_MAX as u128);
const _: () = assert!(SIEVE_READ_BUFFER_BYTES_DEFAULT <= PIECE_BYTES_MAX);
const _: () = assert!(SIEVE_WRITE_BUFFER_BYTES_DEFAULT <= PIECE_BYTES_MAX);

/// How long to wait for a range lock and how long to hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// Longest wait for conflicting locks to go (at most `RANGE_LOCK_WAIT_MS_MAX`, 60 s).
    /// Zero means try once.
    pub wait: Duration,
    /// The lease: the mds drops the lock this long after granting it (at most
    /// `RANGE_LOCK_LEASE_MS_MAX`, 10 min; at least 1 ms).
    pub lease: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self {
            wait: LOCK_WAIT_DEFAULT,
            lease: LOCK_LEASE_DEFAULT,
        }
    }
}

/// A granted range lock; released by [`RangeLock::release`] or, ignoring errors, on drop.
#[derive(Debug)]
pub struct RangeLock {
    client: Client,
    path: String,
    handle: u64,
    /// The file's capability when the lock was taken: it outlives the lease (a capability
    /// is renewed with a quarter of its life left, an hour by default, and a lease is at
    /// most `RANGE_LOCK_LEASE_MS_MAX`, ten minutes).
    capability: tessera_proto::Capability,
    lock_id: u64,
    start: u64,
    end: u64,
    exclusive: bool,
    lease: Duration,
    /// When the lease ends at the latest, by this client's clock: the request was sent no
    /// earlier than `expires - lease`, and the mds started the lease after receiving it.
    expires: Instant,
    released: bool,
}

impl RangeLock {
    /// The mds's id of the lock.
    pub fn lock_id(&self) -> u64 {
        self.lock_id
    }

    /// The locked bytes `[start, end)`.
    pub fn range(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// A writer's lock.
    pub fn exclusive(&self) -> bool {
        self.exclusive
    }

    /// The lease may have ended (by this client's clock, counted from before the request was
    /// sent, so never later than the mds's count): the mds may have granted the bytes to
    /// someone else.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.expires
    }

    /// Releases the lock. A lock whose lease ended is gone already; that is not an error.
    pub fn release(mut self) -> Result<(), ClientError> {
        self.released = true;
        self.unlock()
    }

    fn unlock(&self) -> Result<(), ClientError> {
        let unlock = UnlockRange {
            handle: self.handle,
            capability: self.capability.clone(),
            lock_id: self.lock_id,
        };
        // Unlocking is idempotent, so the retrying form is safe.
        self.client
            .mds_call(&unlock)
            .map(drop)
            .map_err(|error| name_path(&self.path, self.handle, error))
    }

    pub(crate) fn lease_error(&self) -> ClientError {
        ClientError::LeaseExpired {
            path: self.path.clone(),
            start: self.start,
            end: self.end,
            lease_ms: u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl Drop for RangeLock {
    fn drop(&mut self) {
        if !self.released {
            // Best effort: the lease frees the bytes anyway if this fails.
            let _ = self.unlock();
        }
    }
}

fn name_path(path: &str, handle: u64, error: ClientError) -> ClientError {
    match error {
        ClientError::Server { code, message } => ClientError::Server {
            code,
            message: format!("{path} (handle {handle:#x}): {message}"),
        },
        other => other,
    }
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// Buffer sizes of the sieving methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SieveOptions {
    /// Largest chunk [`File::read_sieve`] reads at once (default 4 MiB, ROMIO's
    /// `ind_rd_buffer_size`).
    pub read_buffer_bytes: u64,
    /// Largest chunk [`File::write_sieve`] locks, reads and writes at once (default 512 KiB,
    /// ROMIO's `ind_wr_buffer_size`).
    pub write_buffer_bytes: u64,
}

impl Default for SieveOptions {
    fn default() -> Self {
        Self {
            read_buffer_bytes: SIEVE_READ_BUFFER_BYTES_DEFAULT,
            write_buffer_bytes: SIEVE_WRITE_BUFFER_BYTES_DEFAULT,
        }
    }
}

impl File {
    /// Locks bytes `[start, end)`, shared or `exclusive`, waiting at most 30 s
    /// ([`LOCK_WAIT_DEFAULT`]) for conflicting locks to go; the lock lives at most 60 s
    /// ([`LOCK_LEASE_DEFAULT`]). Locks are advisory: they keep out only other lockers.
    pub fn lock_range(
        &self,
        start: u64,
        end: u64,
        exclusive: bool,
    ) -> Result<RangeLock, ClientError> {
        self.lock_range_with(start, end, exclusive, &LockOptions::default())
    }

    /// As [`File::lock_range`], with the wait and lease of `options`.
    ///
    /// An uncontended lock costs one exchange on the client's mds connection. A contended one
    /// waits on a connection of its own, so other threads sharing the `Client` (one of them
    /// may hold the conflicting lock and want to release it) are not held up. Each wait on
    /// the mds lasts at most half the client timeout, so the socket never times out on a
    /// queue; a longer wait is several such requests, each joining the mds's queue anew.
    pub fn lock_range_with(
        &self,
        start: u64,
        end: u64,
        exclusive: bool,
        options: &LockOptions,
    ) -> Result<RangeLock, ClientError> {
        check_lock_range(&self.path, (start, end), options)?;
        let capability = self.capability()?;
        let mut request = LockRange {
            handle: self.handle,
            capability: capability.clone(),
            start,
            end,
            exclusive,
            wait_ms: 0,
            lease_ms: millis(options.lease),
        };
        let granted = |lock_id: u64, sent: Instant| RangeLock {
            client: self.client.clone(),
            path: self.path.clone(),
            handle: self.handle,
            capability: capability.clone(),
            lock_id,
            start,
            end,
            exclusive,
            lease: options.lease,
            expires: sent + options.lease,
            released: false,
        };
        let begun = Instant::now();
        let deadline = begun + options.wait;
        // A grant whose reply was lost is not repeated: it would wait for itself.
        let first = self
            .client
            .inner
            .mds
            .with_once(0, |connection| connection.call(&request));
        let mut refusal = match first {
            Ok(reply) => return Ok(granted(reply.lock_id, begun)),
            Err(NetError::Remote { peer, error })
                if error.code == ErrorCode::Busy && !options.wait.is_zero() =>
            {
                format!("{} (from {peer})", error.message)
            }
            Err(error) => return Err(self.name_file(error.into())),
        };
        let mds = &self.client.inner.mds;
        let peer = &mds.peers()[0];
        let mut connection = Connection::connect(
            peer.name.clone(),
            &peer.address,
            mds.timeout(),
            &**mds.authenticator(),
            Some(mds.expected(0)),
        )?;
        let slice_max = (mds.timeout() / 2).max(LOCK_RETRY_PAUSE_MIN);
        let mut pause = LOCK_RETRY_PAUSE_MIN;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Server {
                    code: ErrorCode::Busy,
                    message: format!(
                        "{} (handle {:#x}): no range lock within {} ms: {refusal}",
                        self.path,
                        self.handle,
                        options.wait.as_millis()
                    ),
                });
            }
            let slice = (deadline - now).min(slice_max);
            request.wait_ms = millis(slice).clamp(1, RANGE_LOCK_WAIT_MS_MAX);
            let sent = Instant::now();
            match connection.call(&request) {
                Ok(reply) => return Ok(granted(reply.lock_id, sent)),
                Err(NetError::Remote { peer, error }) if error.code == ErrorCode::Busy => {
                    refusal = format!("{} (from {peer})", error.message);
                    // Refused before the wait was up: the mds's queue was full. Pause.
                    if sent.elapsed() < slice / 2 {
                        std::thread::sleep(pause.min(deadline.saturating_duration_since(now)));
                        pause = (pause * 2).min(LOCK_RETRY_PAUSE_MAX);
                    }
                }
                Err(error) => return Err(self.name_file(error.into())),
            }
        }
    }

    /// Writes the memory pieces to the file pieces as [`File::write_list`] does, but with one
    /// `write_list` call per non-empty file piece, in list order.
    pub fn write_multiple(
        &self,
        memory: &[IoSlice<'_>],
        file: &[Piece],
    ) -> Result<IoReport, ClientError> {
        let lengths: Vec<u64> = memory.iter().map(|slice| slice.len() as u64).collect();
        self.check("write", &lengths, file)?;
        let mut parts = Parts::new(memory.iter().map(|slice| &**slice));
        let mut report = IoReport::default();
        for piece in file.iter().filter(|piece| piece.length > 0) {
            let slices: Vec<IoSlice<'_>> = parts
                .take(piece.length)
                .into_iter()
                .map(IoSlice::new)
                .collect();
            report += self.write_list(&slices, std::slice::from_ref(piece))?;
        }
        Ok(report)
    }

    /// Reads the file pieces into the memory pieces as [`File::read_list`] does, but with one
    /// `read_list` call per non-empty file piece, in list order.
    pub fn read_multiple(
        &self,
        memory: &mut [IoSliceMut<'_>],
        file: &[Piece],
    ) -> Result<IoReport, ClientError> {
        let lengths: Vec<u64> = memory.iter().map(|slice| slice.len() as u64).collect();
        self.check("read", &lengths, file)?;
        let mut parts = Parts::new(memory.iter_mut().map(|slice| &mut **slice));
        let mut report = IoReport::default();
        for piece in file.iter().filter(|piece| piece.length > 0) {
            let mut slices: Vec<IoSliceMut<'_>> = parts
                .take(piece.length)
                .into_iter()
                .map(IoSliceMut::new)
                .collect();
            report += self.read_list(&mut slices, std::slice::from_ref(piece))?;
        }
        Ok(report)
    }

    fn check_buffer(&self, operation: &str, buffer_bytes: u64) -> Result<(), ClientError> {
        if buffer_bytes == 0 {
            return Err(ClientError::InvalidArgument(format!(
                "{operation} of {}: the sieve buffer must hold at least one byte",
                self.path
            )));
        }
        if buffer_bytes > PIECE_BYTES_MAX {
            return Err(ClientError::LimitExceeded {
                what: format!("{operation} of {} (sieve buffer)", self.path),
                limit: "piece_bytes_max",
                value: buffer_bytes,
                max: PIECE_BYTES_MAX,
            });
        }
        Ok(())
    }

    /// Reads the file pieces into the memory pieces as [`File::read_list`] does, by data
    /// sieving: one `read_at` per chunk of at most `options.read_buffer_bytes` over the covered
    /// bytes (holes inside a chunk are read too), then copies. The pieces may be unsorted and
    /// overlap. The report sums the `read_at` calls, so its `bytes` counts the holes read.
    pub fn read_sieve(
        &self,
        memory: &mut [IoSliceMut<'_>],
        file: &[Piece],
        options: &SieveOptions,
    ) -> Result<IoReport, ClientError> {
        let lengths: Vec<u64> = memory.iter().map(|slice| slice.len() as u64).collect();
        self.check("read", &lengths, file)?;
        self.check_buffer("read_sieve", options.read_buffer_bytes)?;
        let map = SieveMap::new(file, &lengths);
        let mut buffer = Vec::new();
        let mut report = IoReport::default();
        for (chunk, pieces) in map.chunks(options.read_buffer_bytes) {
            buffer.resize(chunk.len_usize(), 0);
            report += self.read_at(chunk.start, &mut buffer)?;
            for index in pieces {
                map.copy_out(index, &chunk, &buffer, memory);
            }
        }
        Ok(report)
    }

    /// Writes the memory pieces to the file pieces as [`File::write_list`] does (where pieces
    /// overlap, the later wins), by data sieving: per chunk of at most
    /// `options.write_buffer_bytes` over the covered bytes, an exclusive [`File::lock_range`]
    /// on the chunk, one `read_at` of it if it has holes, the pieces copied in, one `write_at`,
    /// and the unlock. Needs the file open for reading too. The report sums the underlying
    /// calls (`bytes` counts the holes read and written back) and counts the locks.
    ///
    /// If a chunk's lease ends before its `write_at` returns, the call fails with
    /// [`ClientError::LeaseExpired`]: its bytes may have been overwritten by another writer.
    pub fn write_sieve(
        &self,
        memory: &[IoSlice<'_>],
        file: &[Piece],
        options: &SieveOptions,
    ) -> Result<IoReport, ClientError> {
        let lengths: Vec<u64> = memory.iter().map(|slice| slice.len() as u64).collect();
        self.check("write", &lengths, file)?;
        if self.mode == OpenMode::WriteOnly {
            return Err(ClientError::BadMode {
                path: self.path.clone(),
                mode: "writing only",
                operation: "write_sieve (it reads the holes between pieces)",
            });
        }
        self.check_buffer("write_sieve", options.write_buffer_bytes)?;
        let map = SieveMap::new(file, &lengths);
        let mut buffer = Vec::new();
        let mut report = IoReport::default();
        for (chunk, pieces) in map.chunks(options.write_buffer_bytes) {
            let lock = self.lock_range(chunk.start, chunk.end, true)?;
            report.locks += 1;
            buffer.resize(chunk.len_usize(), 0);
            if chunk.holes {
                report += self.read_at(chunk.start, &mut buffer)?;
            }
            // `pieces` is in list order, so a later piece overwrites an earlier one.
            for index in pieces {
                map.copy_in(index, &chunk, memory, &mut buffer);
            }
            report += self.write_at(chunk.start, &buffer)?;
            if lock.expired() {
                return Err(lock.lease_error());
            }
            lock.release()?;
        }
        Ok(report)
    }
}

/// A byte slice that can be cut in two: `&[u8]` for writes, `&mut [u8]` for reads.
pub(crate) trait Part: Sized {
    fn length(&self) -> usize;
    fn cut(self, at: usize) -> (Self, Self);
}

impl Part for &[u8] {
    fn length(&self) -> usize {
        self.len()
    }
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }
}

impl Part for &mut [u8] {
    fn length(&self) -> usize {
        self.len()
    }
    fn cut(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }
}

/// The memory list as a stream, handed out front first in runs of a given length.
struct Parts<P> {
    rest: VecDeque<P>,
}

impl<P: Part> Parts<P> {
    fn new(slices: impl Iterator<Item = P>) -> Self {
        Self {
            rest: slices.filter(|slice| slice.length() > 0).collect(),
        }
    }

    /// The next `length` bytes of the stream, as slices; the caller checked the totals.
    fn take(&mut self, length: u64) -> Vec<P> {
        let mut parts = Vec::new();
        let mut left = length;
        while left > 0 {
            let front = self
                .rest
                .pop_front()
                .expect("the memory total matches the file total");
            let front_length = front.length() as u64;
            if front_length <= left {
                left -= front_length;
                parts.push(front);
            } else {
                let (head, tail) = front.cut(usize::try_from(left).expect("below a slice length"));
                parts.push(head);
                self.rest.push_front(tail);
                left = 0;
            }
        }
        parts
    }
}

/// Bytes `[start, end)` of the file that a sieving method moves in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    start: u64,
    end: u64,
    /// Some bytes of the chunk belong to no piece (a write must read the chunk first).
    holes: bool,
}

impl Chunk {
    fn len_usize(&self) -> usize {
        usize::try_from(self.end - self.start).expect("a chunk is at most a sieve buffer")
    }
}

/// The file pieces of one sieving call: their place in the data stream, and the bytes of the
/// file they cover, merged and sorted.
struct SieveMap<'a> {
    file: &'a [Piece],
    /// Stream offset of each file piece (the memory list, concatenated, is the stream).
    stream_starts: Vec<u64>,
    /// Stream offset of each memory slice.
    memory_starts: Vec<u64>,
    /// Indices of the non-empty file pieces, by offset.
    by_offset: Vec<usize>,
    /// The union of the pieces: sorted, disjoint, non-touching `[start, end)` intervals.
    covered: Vec<(u64, u64)>,
}

impl<'a> SieveMap<'a> {
    fn new(file: &'a [Piece], memory_lengths: &[u64]) -> Self {
        let prefix = |lengths: &mut dyn Iterator<Item = u64>| -> Vec<u64> {
            let mut total = 0;
            lengths
                .map(|length| {
                    let start = total;
                    total += length;
                    start
                })
                .collect()
        };
        let stream_starts = prefix(&mut file.iter().map(|piece| piece.length));
        let memory_starts = prefix(&mut memory_lengths.iter().copied());
        let mut by_offset: Vec<usize> = (0..file.len()).filter(|&i| file[i].length > 0).collect();
        by_offset.sort_by_key(|&index| file[index].offset);
        let mut covered: Vec<(u64, u64)> = Vec::new();
        for &index in &by_offset {
            let Piece { offset, length } = file[index];
            match covered.last_mut() {
                Some(last) if offset <= last.1 => last.1 = last.1.max(offset + length),
                _ => covered.push((offset, offset + length)),
            }
        }
        Self {
            file,
            stream_starts,
            memory_starts,
            by_offset,
            covered,
        }
    }

    /// The chunks in file order, each with the pieces that touch it, in list order.
    fn chunks(&self, buffer_bytes: u64) -> impl Iterator<Item = (Chunk, Vec<usize>)> + '_ {
        let mut next = 0;
        let mut active: Vec<usize> = Vec::new();
        Chunks::new(&self.covered, buffer_bytes).map(move |chunk| {
            while next < self.by_offset.len() && self.file[self.by_offset[next]].offset < chunk.end
            {
                active.push(self.by_offset[next]);
                next += 1;
            }
            active.retain(|&index| {
                let piece = self.file[index];
                piece.offset + piece.length > chunk.start
            });
            let mut touching = active.clone();
            touching.sort_unstable();
            (chunk, touching)
        })
    }

    /// The part of piece `index` inside `chunk`: (offset in the chunk, stream offset, length).
    fn overlap(&self, index: usize, chunk: &Chunk) -> (usize, u64, usize) {
        let piece = self.file[index];
        let start = piece.offset.max(chunk.start);
        let end = (piece.offset + piece.length).min(chunk.end);
        debug_assert!(start < end, "piece {index} does not touch the chunk");
        let in_chunk = usize::try_from(start - chunk.start).expect("inside a chunk");
        let length = usize::try_from(end - start).expect("inside a chunk");
        (
            in_chunk,
            self.stream_starts[index] + (start - piece.offset),
            length,
        )
    }

    /// Copies the bytes of piece `index` inside `chunk` from the memory list into the chunk.
    fn copy_in<S: Deref<Target = [u8]>>(
        &self,
        index: usize,
        chunk: &Chunk,
        memory: &[S],
        buffer: &mut [u8],
    ) {
        let (in_chunk, stream, length) = self.overlap(index, chunk);
        let mut target = &mut buffer[in_chunk..in_chunk + length];
        self.walk_memory(stream, length, |slice, from, count| {
            let (head, tail) = std::mem::take(&mut target).split_at_mut(count);
            head.copy_from_slice(&memory[slice][from..from + count]);
            target = tail;
        });
    }

    /// Copies the bytes of piece `index` inside `chunk` from the chunk into the memory list.
    fn copy_out<S: DerefMut<Target = [u8]>>(
        &self,
        index: usize,
        chunk: &Chunk,
        buffer: &[u8],
        memory: &mut [S],
    ) {
        let (in_chunk, stream, length) = self.overlap(index, chunk);
        let mut source = &buffer[in_chunk..in_chunk + length];
        self.walk_memory(stream, length, |slice, from, count| {
            let (head, tail) = source.split_at(count);
            memory[slice][from..from + count].copy_from_slice(head);
            source = tail;
        });
    }

    /// Calls `visit(slice, offset in slice, count)` for the memory slices holding stream bytes
    /// `[stream, stream + length)`, in order.
    fn walk_memory(&self, stream: u64, length: usize, mut visit: impl FnMut(usize, usize, usize)) {
        // The last slice starting at or before `stream`: empty slices share their start with
        // the next one, so this is a non-empty slice holding the byte.
        let mut slice = self.memory_starts.partition_point(|&start| start <= stream) - 1;
        let mut from = usize::try_from(stream - self.memory_starts[slice]).expect("in a slice");
        let mut left = length;
        while left > 0 {
            let end = self
                .memory_starts
                .get(slice + 1)
                .map_or(usize::MAX, |&next| {
                    usize::try_from(next - self.memory_starts[slice]).expect("a slice length")
                });
            let count = left.min(end - from);
            if count > 0 {
                visit(slice, from, count);
            }
            left -= count;
            slice += 1;
            from = 0;
        }
    }
}

/// Cuts the covered intervals into chunks of at most `buffer_bytes`. A chunk starts at a
/// covered byte and ends after one (holes at either edge are never read), and a hole wider
/// than the buffer is skipped, never read.
struct Chunks<'a> {
    covered: &'a [(u64, u64)],
    buffer_bytes: u64,
    /// First interval not yet wholly in a chunk.
    index: usize,
    /// First byte not yet in a chunk.
    cursor: u64,
}

impl<'a> Chunks<'a> {
    fn new(covered: &'a [(u64, u64)], buffer_bytes: u64) -> Self {
        assert!(buffer_bytes > 0, "a sieve buffer holds at least one byte");
        Self {
            covered,
            buffer_bytes,
            index: 0,
            cursor: covered.first().map_or(0, |first| first.0),
        }
    }
}

impl Iterator for Chunks<'_> {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        let &(first_start, _) = self.covered.get(self.index)?;
        let start = self.cursor.max(first_start);
        let limit = start.saturating_add(self.buffer_bytes);
        let mut end = start;
        let mut holes = false;
        while let Some(&(interval_start, interval_end)) = self.covered.get(self.index) {
            if interval_start >= limit {
                break;
            }
            holes |= interval_start > end;
            end = interval_end.min(limit);
            if interval_end > limit {
                break;
            }
            self.index += 1;
        }
        self.cursor = end;
        Some(Chunk { start, end, holes })
    }
}

/// Checks a range lock's bytes `[start, end)` of `path` and its options against their limits.
fn check_lock_range(
    path: &str,
    (start, end): (u64, u64),
    options: &LockOptions,
) -> Result<(), ClientError> {
    let what = || format!("range lock on {path}");
    if start >= end {
        return Err(ClientError::InvalidArgument(format!(
            "{}: bytes [{start}, {end}) are empty; a lock covers at least one byte",
            what()
        )));
    }
    let checks = [
        ("file_bytes_max", end, FILE_BYTES_MAX),
        (
            "range_lock_wait_ms_max",
            u64::from(millis(options.wait)),
            u64::from(RANGE_LOCK_WAIT_MS_MAX),
        ),
        (
            "range_lock_lease_ms_max",
            u64::from(millis(options.lease)),
            u64::from(RANGE_LOCK_LEASE_MS_MAX),
        ),
    ];
    for (limit, value, max) in checks {
        if value > max {
            return Err(ClientError::LimitExceeded {
                what: what(),
                limit,
                value,
                max,
            });
        }
    }
    if options.lease < LOCK_LEASE_MIN {
        return Err(ClientError::InvalidArgument(format!(
            "{}: a lease under 1 ms would end at once",
            what()
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // the byte model is a few hundred bytes
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn chunk_list(covered: &[(u64, u64)], buffer: u64) -> Vec<Chunk> {
        Chunks::new(covered, buffer).collect()
    }

    #[test]
    fn chunks_start_and_end_on_covered_bytes_and_skip_wide_holes() {
        let covered = [(10, 20), (25, 30), (1000, 1010)];
        assert_eq!(
            chunk_list(&covered, 100),
            [
                Chunk {
                    start: 10,
                    end: 30,
                    holes: true
                },
                Chunk {
                    start: 1000,
                    end: 1010,
                    holes: false
                },
            ]
        );
        // A window fills the buffer across a small hole; a chunk ends on a covered byte.
        let chunk = |start, end, holes| Chunk { start, end, holes };
        assert_eq!(
            chunk_list(&covered, 8),
            [
                chunk(10, 18, false),
                chunk(18, 26, true),
                chunk(26, 30, false),
                chunk(1000, 1008, false),
                chunk(1008, 1010, false),
            ]
        );
        assert!(chunk_list(&[], 8).is_empty());
    }

    #[test]
    fn parts_cut_the_memory_stream() {
        let a = [1u8, 2, 3];
        let b: [u8; 0] = [];
        let c = [4u8, 5];
        let mut parts = Parts::new([&a[..], &b[..], &c[..]].into_iter());
        assert_eq!(parts.take(2), [&[1u8, 2][..]]);
        assert_eq!(parts.take(2), [&[3u8][..], &[4u8][..]]);
        assert_eq!(parts.take(1), [&[5u8][..]]);
        assert!(parts.take(0).is_empty());
    }

    /// Random pieces (unsorted, overlapping, some empty) over a small file and a memory list
    /// cut at random places.
    fn case() -> impl Strategy<Value = (Vec<Piece>, Vec<u64>, u64)> {
        (
            proptest::collection::vec((0u64..600, 0u64..80), 0..12),
            proptest::collection::vec(0u64..1000, 0..6),
            1u64..200,
        )
            .prop_map(|(pieces, cuts, buffer)| {
                let file: Vec<Piece> = pieces
                    .into_iter()
                    .map(|(offset, length)| Piece::new(offset, length))
                    .collect();
                let total: u64 = file.iter().map(|piece| piece.length).sum();
                let mut cuts: Vec<u64> = cuts.into_iter().map(|cut| cut % (total + 1)).collect();
                cuts.push(0);
                cuts.push(total);
                cuts.sort_unstable();
                let memory = cuts.windows(2).map(|pair| pair[1] - pair[0]).collect();
                (file, memory, buffer)
            })
    }

    fn memory_of(lengths: &[u64], seed: u8) -> Vec<Vec<u8>> {
        let mut next = seed;
        lengths
            .iter()
            .map(|&length| {
                (0..length)
                    .map(|_| {
                        next = next.wrapping_mul(31).wrapping_add(7);
                        next
                    })
                    .collect()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every covered byte lies in exactly one chunk; chunks are in order, within the
        /// buffer, start and end on covered bytes, and say whether they hold holes.
        #[test]
        fn chunks_tile_the_covered_bytes((file, memory, buffer) in case()) {
            let map = SieveMap::new(&file, &memory);
            let covered = |byte: u64| map.covered.iter().any(|&(s, e)| s <= byte && byte < e);
            let chunks = chunk_list(&map.covered, buffer);
            let mut previous_end = 0;
            for chunk in &chunks {
                prop_assert!(chunk.start < chunk.end);
                prop_assert!(chunk.end - chunk.start <= buffer);
                prop_assert!(chunk.start >= previous_end);
                prop_assert!(covered(chunk.start) && covered(chunk.end - 1));
                prop_assert_eq!(chunk.holes, (chunk.start..chunk.end).any(|b| !covered(b)));
                previous_end = chunk.end;
            }
            for &(start, end) in &map.covered {
                for byte in start..end {
                    let holding = chunks.iter().filter(|c| c.start <= byte && byte < c.end).count();
                    prop_assert_eq!(holding, 1, "byte {}", byte);
                }
            }
        }

        /// The sieving walk, run against a byte model, matches writing the pieces one by one in
        /// list order, and reads back what a piece-by-piece read gives.
        #[test]
        fn sieving_matches_piece_by_piece_io((file, memory_lengths, buffer) in case()) {
            let map = SieveMap::new(&file, &memory_lengths);
            let memory = memory_of(&memory_lengths, 3);
            let stream: Vec<u8> = memory.concat();
            let before: Vec<u8> = (0..700u32).map(|i| (i % 251) as u8).collect();

            let mut expected = before.clone();
            let mut at = 0;
            for piece in &file {
                let (offset, length) = (piece.offset as usize, piece.length as usize);
                expected[offset..offset + length].copy_from_slice(&stream[at..at + length]);
                at += length;
            }

            let mut model = before.clone();
            let mut touched = vec![false; model.len()];
            for (chunk, pieces) in map.chunks(buffer) {
                let range = chunk.start as usize..chunk.end as usize;
                let mut chunk_bytes = if chunk.holes {
                    model[range.clone()].to_vec()
                } else {
                    vec![0xEE; range.len()]
                };
                for index in pieces {
                    map.copy_in(index, &chunk, &memory, &mut chunk_bytes);
                }
                for byte in range.clone() {
                    prop_assert!(!touched[byte], "byte {} in two chunks", byte);
                    touched[byte] = true;
                }
                model[range].copy_from_slice(&chunk_bytes);
            }
            prop_assert_eq!(&model, &expected);

            let mut read_back: Vec<Vec<u8>> = memory_lengths.iter().map(|&n| vec![0; n as usize]).collect();
            for (chunk, pieces) in map.chunks(buffer) {
                let chunk_bytes = &model[chunk.start as usize..chunk.end as usize];
                for index in pieces {
                    map.copy_out(index, &chunk, chunk_bytes, &mut read_back);
                }
            }
            let mut wanted = Vec::new();
            for piece in &file {
                wanted.extend_from_slice(&model[piece.offset as usize..(piece.offset + piece.length) as usize]);
            }
            prop_assert_eq!(read_back.concat(), wanted);
        }
    }
}
