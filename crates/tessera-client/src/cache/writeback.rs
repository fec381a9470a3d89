//! The client cache's write-back (opt-in, `ClientOptions::write_back`; docs/SEMANTICS.md
//! §3.3): small writes buffered under write leases and sent as one list write per iod.
//!
//! A write of at most [`BUFFERED_WRITE_BYTES_MAX`] to a file is kept in this client's memory,
//! merged with the file's other buffered bytes it touches or adjoins, when the client holds a
//! write lease from every iod it lands on over the object bytes it lands on
//! (`LeaseAcquire { write }`; each iod grants the largest gap around them that no other
//! client's write lease covers, so one lease usually covers a whole run of writes). Before any
//! other client's read, write or stat of those bytes is served, the iod revokes the lease, and
//! this client writes what it buffered of the file before it answers. So another client never
//! reads older bytes than a write that returned here, as without the cache.
//!
//! The buffered bytes of a file go out as list writes (one request per iod, the most pieces a
//! request takes): at [`WriteBack::flush`] (the file's sync and close, and before any other
//! data call of this client on the file, so its own calls apply in order), when a revocation
//! comes, when the client's buffer passes its budget, and at most [`WRITE_BACK_AGE_MAX`] after
//! the first of them was buffered (the flusher thread; a lease is trusted only while more than
//! that is left of it). A write that cannot be buffered (too large, no lease to be had now)
//! goes to the iods at once, after what the file buffered.
//!
//! Flushes go over a client of their own ([`WriteBack::new`]'s `flusher`): its connections
//! are never the ones a call of this client waits on, so a revocation that a call of this
//! client caused (its own read of bytes it buffered from another thread) is answered at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera_proto::limits::LIST_PIECES_MAX;
use tessera_proto::{LeaseAcquire, LeaseClient, Piece};

use super::lock;
use crate::client::{Client, Inner};
use crate::error::ClientError;
use crate::file::{File, IoReport};

/// The most bytes one client buffers (its budget is half its cache, at most this).
pub const WRITE_BACK_BYTES_MAX: u64 = 256 << 20;
/// The largest write that is buffered; a larger one goes to the iods at once.
pub const BUFFERED_WRITE_BYTES_MAX: u64 = 64 << 10;
/// The longest a buffered byte waits before the flusher writes it.
pub const WRITE_BACK_AGE_MAX: Duration = Duration::from_millis(500);
/// The most files with buffered bytes or write leases one client keeps (beyond, a write to
/// another file goes to the iods at once).
pub const WRITE_BACK_FILES_MAX: usize = 1 << 12;
/// How often the flusher looks for bytes due.
const FLUSHER_TICK: Duration = Duration::from_millis(50);
/// The longest a call waits for another thread's flush of the same file.
const FLUSH_WAIT_MAX: Duration = Duration::from_mins(2);

/// A write lease as this client keeps it: the object bytes it covers, and until when it is
/// trusted.
type HeldLease = ((u64, u64), Instant);

/// What one file has buffered, and its write leases.
struct Dirty {
    /// The file, reached through the flusher's own client.
    file: File,
    /// Buffered bytes by file offset: no two overlap or adjoin, none is empty.
    extents: BTreeMap<u64, Vec<u8>>,
    /// Bytes written into `extents` since the last flush (overwritten ones counted again:
    /// the budget errs on the early side).
    bytes: u64,
    /// When the oldest buffered byte was buffered.
    since: Option<Instant>,
    /// Per iod (cluster index): the object bytes its write lease covers, trusted until when.
    leases: HashMap<usize, HeldLease>,
    /// A flush of the file is under way (its bytes taken out of `extents`).
    flushing: bool,
}

#[derive(Default)]
struct State {
    files: HashMap<u64, Dirty>,
    bytes: u64,
    /// Flushes made, and buffered writes (for tests and the bench).
    stats: WriteBackStats,
}

/// What the write-back did, since the client was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteBackStats {
    /// Writes kept in the buffer.
    pub buffered: u64,
    /// Writes that went to the iods at once.
    pub through: u64,
    /// Flushes that wrote bytes.
    pub flushes: u64,
    /// Write leases granted.
    pub leases: u64,
    /// Revocations of write leases answered.
    pub revocations: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a flush ends.
    flushed: Condvar,
    stop: AtomicBool,
    /// The client flushes go over (its own connections, no cache).
    flusher: Client,
    /// This client's id on its callback channels.
    client_id: u64,
    /// The iods (cluster index) told that the flusher's connection to them speaks for
    /// `client_id` (`LeaseClient`).
    declared: Mutex<HashSet<usize>>,
}

impl Shared {
    /// The state, once no flush of `handle` is under way.
    fn wait_idle(&self, handle: u64) -> Result<std::sync::MutexGuard<'_, State>, ClientError> {
        let state = lock(&self.state);
        let (state, waited) = self
            .flushed
            .wait_timeout_while(state, FLUSH_WAIT_MAX, |state| {
                state.files.get(&handle).is_some_and(|dirty| dirty.flushing)
            })
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if waited.timed_out() {
            return Err(ClientError::InvalidArgument(format!(
                "file handle {handle:#x}: another thread's flush of its buffered writes took \
                 more than {} s",
                FLUSH_WAIT_MAX.as_secs()
            )));
        }
        Ok(state)
    }

    /// Tells each iod of `file` not told yet that the flusher's connection to it speaks for
    /// this client, so its flushes revoke neither its own write leases nor its group's (a
    /// failure only costs those revocations).
    fn declare(&self, file: &File) {
        for &server in file.layout().servers() {
            let index = usize::from(server);
            if lock(&self.declared).contains(&index) {
                continue;
            }
            let said = self.flusher.inner.iods.with(index, |connection| {
                connection.call(&LeaseClient {
                    client_id: self.client_id,
                })
            });
            match said {
                Ok(tessera_proto::Empty {}) => {
                    lock(&self.declared).insert(index);
                }
                Err(err) => tracing::debug!("client write-back: LeaseClient to iod {index}: {err}"),
            }
        }
    }

    /// Writes what `handle` buffered to the iods, waiting for a flush of it under way first.
    fn flush(&self, handle: u64) -> Result<(), ClientError> {
        let state = self.wait_idle(handle)?;
        self.flush_locked(state, handle)
    }

    /// Writes what `handle` buffered unless a flush of it is under way (that flush carries
    /// every byte buffered: writers wait for it).
    fn flush_unless_flushing(&self, handle: u64) -> Result<(), ClientError> {
        let state = lock(&self.state);
        if state.files.get(&handle).is_some_and(|dirty| dirty.flushing) {
            return Ok(());
        }
        self.flush_locked(state, handle)
    }

    fn flush_locked(
        &self,
        mut state: std::sync::MutexGuard<'_, State>,
        handle: u64,
    ) -> Result<(), ClientError> {
        let Some(dirty) = state.files.get_mut(&handle) else {
            return Ok(());
        };
        if dirty.extents.is_empty() {
            return Ok(());
        }
        let extents = std::mem::take(&mut dirty.extents);
        let bytes = std::mem::take(&mut dirty.bytes);
        dirty.since = None;
        dirty.flushing = true;
        let file = dirty.file.clone();
        drop(state);
        self.declare(&file);
        let written = write_extents(&file, &extents);
        let mut state = lock(&self.state);
        state.stats.flushes += 1;
        if let Some(dirty) = state.files.get_mut(&handle) {
            dirty.flushing = false;
            if written.is_err() {
                lock(&self.declared).clear();
                // Kept for the next flush (the error goes to this one's caller); nothing was
                // buffered meanwhile: writers wait for a flush.
                dirty.extents = extents;
                dirty.bytes = bytes;
                dirty.since = Some(Instant::now());
            }
        }
        if written.is_ok() {
            state.bytes -= bytes;
        }
        drop(state);
        self.flushed.notify_all();
        written
    }
}

/// The write-back of one client.
pub(crate) struct WriteBack {
    budget: u64,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl WriteBack {
    /// A write-back buffering at most `budget` bytes (at most [`WRITE_BACK_BYTES_MAX`]),
    /// flushing over `flusher`, a client without a cache of its own.
    pub(crate) fn new(budget: u64, flusher: Client, client_id: u64) -> Self {
        Self {
            budget: budget.clamp(BUFFERED_WRITE_BYTES_MAX, WRITE_BACK_BYTES_MAX),
            shared: Arc::new(Shared {
                state: Mutex::default(),
                flushed: Condvar::new(),
                stop: AtomicBool::new(false),
                flusher,
                client_id,
                declared: Mutex::default(),
            }),
            thread: Mutex::default(),
        }
    }

    pub(crate) fn stats(&self) -> WriteBackStats {
        lock(&self.shared.state).stats
    }

    /// Keeps a write of `memory` to the file pieces `pieces` of `file` in the buffer if it
    /// can (`Some`: done); `None`: the caller writes it to the iods now (the file's buffered
    /// bytes were written first). `leases(asks)` asks each iod `index` of `asks` for a write
    /// lease on object bytes `[start, end)`, all at once, and says for each what it covers
    /// and until when it is trusted (`None`: none to be had now).
    pub(crate) fn buffer(
        &self,
        file: &File,
        memory: &[IoSlice<'_>],
        pieces: &[Piece],
        leases: impl Fn(&[(usize, (u64, u64))]) -> Result<Vec<Option<HeldLease>>, ClientError>,
    ) -> Result<Option<IoReport>, ClientError> {
        let total: u64 = pieces.iter().map(|piece| piece.length).sum();
        if total == 0 || total > BUFFERED_WRITE_BYTES_MAX || total > self.budget / 2 {
            return self.through(file);
        }
        let needed = object_ranges(file, pieces);
        for _attempt in 0..2 {
            let missing: Vec<(usize, (u64, u64))> = {
                let mut state = self.wait_idle(file.handle)?;
                let files = state.files.len();
                let Some(dirty) = self.entry(&mut state, file, files) else {
                    drop(state);
                    return self.through(file);
                };
                let due = Instant::now() + WRITE_BACK_AGE_MAX;
                let missing: Vec<_> = needed
                    .iter()
                    .filter(|(index, range)| {
                        dirty.leases.get(index).is_none_or(|(held, until)| {
                            *until <= due || held.0 > range.0 || held.1 < range.1
                        })
                    })
                    .map(|(index, range)| (*index, *range))
                    .collect();
                if missing.is_empty() {
                    let data = flatten(memory, total);
                    let mut at = 0usize;
                    for piece in pieces.iter().filter(|piece| piece.length > 0) {
                        let length = usize::try_from(piece.length).expect("at most 64 KiB");
                        insert(&mut dirty.extents, piece.offset, &data[at..at + length]);
                        at += length;
                    }
                    dirty.bytes += total;
                    dirty.since.get_or_insert_with(Instant::now);
                    state.bytes += total;
                    state.stats.buffered += 1;
                    let over = state.bytes > self.budget;
                    drop(state);
                    self.start_flusher();
                    if over {
                        self.flush(file.handle)?;
                    }
                    return Ok(Some(IoReport {
                        bytes: total,
                        ..IoReport::default()
                    }));
                }
                missing
            };
            // A new lease replaces the one held on that object: what was buffered under the
            // old one goes first.
            self.flush(file.handle)?;
            let granted = leases(&missing)?;
            {
                let mut state = lock(&self.shared.state);
                for (&(index, _), granted) in missing.iter().zip(&granted) {
                    if let Some(granted) = granted {
                        state.stats.leases += 1;
                        if let Some(dirty) = state.files.get_mut(&file.handle) {
                            dirty.leases.insert(index, *granted);
                        }
                    }
                }
            }
            if granted.iter().any(Option::is_none) {
                return self.through(file);
            }
        }
        self.through(file)
    }

    /// A write that goes to the iods now: after what the file buffered.
    fn through(&self, file: &File) -> Result<Option<IoReport>, ClientError> {
        lock(&self.shared.state).stats.through += 1;
        self.flush(file.handle)?;
        Ok(None)
    }

    /// The file's entry, made if missing (`None` when [`WRITE_BACK_FILES_MAX`] files have
    /// one already).
    fn entry<'a>(&self, state: &'a mut State, file: &File, files: usize) -> Option<&'a mut Dirty> {
        if files >= WRITE_BACK_FILES_MAX && !state.files.contains_key(&file.handle) {
            // Forget files with nothing buffered before refusing one.
            state
                .files
                .retain(|_, dirty| dirty.bytes > 0 || dirty.flushing);
            if state.files.len() >= WRITE_BACK_FILES_MAX {
                return None;
            }
        }
        Some(state.files.entry(file.handle).or_insert_with(|| Dirty {
            file: file.through(self.shared.flusher.clone()),
            extents: BTreeMap::new(),
            bytes: 0,
            since: None,
            leases: HashMap::new(),
            flushing: false,
        }))
    }

    /// The state, once no flush of `handle` is under way.
    fn wait_idle(&self, handle: u64) -> Result<std::sync::MutexGuard<'_, State>, ClientError> {
        self.shared.wait_idle(handle)
    }

    /// Writes what `handle` buffered to the iods, waiting for a flush of it under way first.
    pub(crate) fn flush(&self, handle: u64) -> Result<(), ClientError> {
        self.shared.flush(handle)
    }

    /// Forgets this client's write leases on `handle` (the next buffered write asks again:
    /// its write group changed).
    pub(crate) fn forget_leases(&self, handle: u64) {
        if let Some(dirty) = lock(&self.shared.state).files.get_mut(&handle) {
            dirty.leases.clear();
        }
    }

    /// Iod `index` revoked this client's leases on `handle`: writes what the file buffered,
    /// after any flush of it under way, before the caller answers.
    pub(crate) fn revoked(&self, handle: u64, index: usize) {
        {
            let mut state = lock(&self.shared.state);
            let Some(dirty) = state.files.get_mut(&handle) else {
                return;
            };
            // A lease of the file gone: all of its buffering stops until asked again. (Another
            // iod's revocation may have cleared this one's record already; its flush may still
            // be on the way here, so the flush below runs all the same.)
            tracing::trace!("client write-back: iod {index} revoked file {handle:#x}");
            dirty.leases.clear();
            state.stats.revocations += 1;
        }
        // A flush under way (the flusher's, or one another iod's revocation started) may not
        // have reached this iod yet: it is waited for. It never waits for this answer: the
        // flusher's connections speak for this client (`LeaseClient`), so its writes do not
        // revoke its own leases.
        if let Err(err) = self.shared.flush(handle) {
            tracing::warn!(
                "client write-back: writing what file {handle:#x} buffered on revocation \
                 failed: {err}"
            );
        }
    }

    /// The callback channel to iod `index` ended: the leases from it are gone, and what was
    /// buffered under them is written now.
    pub(crate) fn channel_lost(&self, index: usize) {
        let handles: Vec<u64> = lock(&self.shared.state)
            .files
            .iter()
            .filter(|(_, dirty)| dirty.leases.contains_key(&index))
            .map(|(&handle, _)| handle)
            .collect();
        for handle in handles {
            self.revoked(handle, index);
        }
    }

    /// Writes everything buffered (the client is going away).
    pub(crate) fn flush_all(&self) {
        let handles: Vec<u64> = lock(&self.shared.state).files.keys().copied().collect();
        for handle in handles {
            if let Err(err) = self.flush(handle) {
                tracing::warn!("client write-back: file {handle:#x}: {err}");
            }
        }
    }

    /// Starts the flusher thread unless it runs.
    fn start_flusher(&self) {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let started = std::thread::Builder::new()
            .name("tessera-flusher".to_owned())
            .spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(FLUSHER_TICK);
                    shared.flush_due();
                }
            });
        match started {
            Ok(handle) => *thread = Some(handle),
            // Without the thread, bytes wait for the next sync, close or revocation.
            Err(err) => tracing::warn!("client write-back: no flusher thread: {err}"),
        }
    }
}

impl Shared {
    /// Flushes every file whose oldest buffered byte is [`WRITE_BACK_AGE_MAX`] old.
    fn flush_due(&self) {
        let due: Vec<u64> = lock(&self.state)
            .files
            .iter()
            .filter(|(_, dirty)| {
                !dirty.flushing
                    && dirty
                        .since
                        .is_some_and(|since| since.elapsed() >= WRITE_BACK_AGE_MAX)
            })
            .map(|(&handle, _)| handle)
            .collect();
        for handle in due {
            if let Err(err) = self.flush_unless_flushing(handle) {
                tracing::warn!("client write-back: file {handle:#x}: {err}");
            }
        }
    }
}

impl Drop for WriteBack {
    fn drop(&mut self) {
        self.flush_all();
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

/// Per iod (cluster index): the object bytes `pieces` of `file` land on, first to last.
fn object_ranges(file: &File, pieces: &[Piece]) -> Vec<(usize, (u64, u64))> {
    let layout = file.layout();
    let mut ranges: HashMap<usize, (u64, u64)> = HashMap::new();
    for piece in pieces {
        layout.for_each_segment(piece.offset, piece.length, |segment| {
            let index = usize::from(layout.servers()[segment.server_position]);
            let end = segment.local_offset + segment.length;
            ranges
                .entry(index)
                .and_modify(|range| {
                    range.0 = range.0.min(segment.local_offset);
                    range.1 = range.1.max(end);
                })
                .or_insert((segment.local_offset, end));
        });
    }
    ranges.into_iter().collect()
}

/// `memory`'s bytes in one buffer.
fn flatten(memory: &[IoSlice<'_>], total: u64) -> Vec<u8> {
    let mut data = Vec::with_capacity(usize::try_from(total).expect("at most 64 KiB"));
    for slice in memory {
        data.extend_from_slice(slice);
    }
    data
}

/// Puts `data` at `offset` into `extents`, over what it overlaps, merged with what it
/// overlaps or adjoins.
fn insert(extents: &mut BTreeMap<u64, Vec<u8>>, offset: u64, data: &[u8]) {
    let end = offset + data.len() as u64;
    // Every extent that starts at or before `end` and ends at or after `offset`.
    let touched: Vec<u64> = extents
        .range(..=end)
        .rev()
        .take_while(|(start, bytes)| **start + bytes.len() as u64 >= offset)
        .map(|(start, _)| *start)
        .collect();
    if let [only] = touched[..] {
        let extent = extents.get_mut(&only).expect("listed above");
        if only <= offset {
            // Within or past the end of one extent (a sequential run): grown in place.
            let at = usize::try_from(offset - only).expect("in memory");
            let needed = at + data.len();
            if needed > extent.len() {
                extent.resize(needed, 0);
            }
            extent[at..needed].copy_from_slice(data);
            return;
        }
    }
    let mut start = offset;
    let mut last = end;
    for &key in &touched {
        start = start.min(key);
        last = last.max(key + extents[&key].len() as u64);
    }
    let mut merged = vec![0u8; usize::try_from(last - start).expect("merged extent in memory")];
    for key in touched {
        let bytes = extents.remove(&key).expect("listed above");
        let at = usize::try_from(key - start).expect("in memory");
        merged[at..at + bytes.len()].copy_from_slice(&bytes);
    }
    let at = usize::try_from(offset - start).expect("in memory");
    merged[at..at + data.len()].copy_from_slice(data);
    extents.insert(start, merged);
}

/// Writes `extents` to `file`: list writes of at most [`LIST_PIECES_MAX`] pieces each.
fn write_extents(file: &File, extents: &BTreeMap<u64, Vec<u8>>) -> Result<(), ClientError> {
    let all: Vec<(&u64, &Vec<u8>)> = extents.iter().collect();
    for batch in all.chunks(LIST_PIECES_MAX) {
        let memory: Vec<IoSlice<'_>> = batch.iter().map(|(_, bytes)| IoSlice::new(bytes)).collect();
        let pieces: Vec<Piece> = batch
            .iter()
            .map(|(&offset, bytes)| Piece::new(offset, bytes.len() as u64))
            .collect();
        file.write_list(&memory, &pieces)?;
    }
    Ok(())
}

/// Asks each iod `index` of `asks` for a write lease on object bytes `[start, end)` of
/// `file` for client `client_id`, all at once ([`tessera_net::Pool::call_each`]): for each,
/// what it covers and until when this client trusts it, or `None` (none now).
pub(crate) fn acquire(
    inner: &Arc<Inner>,
    file: &File,
    client_id: u64,
    asks: &[(usize, (u64, u64))],
) -> Result<Vec<Option<HeldLease>>, ClientError> {
    let capability = file.capability()?;
    let mut requests: Vec<(usize, LeaseAcquire)> = asks
        .iter()
        .map(|&(index, (start, end))| {
            let request = LeaseAcquire {
                handle: file.handle,
                capability: capability.clone(),
                client_id,
                demotes: false,
                write: true,
                start,
                end,
                group: file.write_group,
            };
            (index, request)
        })
        .collect();
    // The pool takes connections in increasing server order.
    requests.sort_by_key(|(index, _)| *index);
    let calls: Vec<(usize, &LeaseAcquire)> = requests
        .iter()
        .map(|(index, request)| (*index, request))
        .collect();
    let asked = Instant::now();
    let replies = inner.iods.call_each(&calls);
    let mut granted: HashMap<usize, Option<HeldLease>> = HashMap::with_capacity(asks.len());
    for ((index, _), reply) in requests.iter().zip(replies) {
        let reply = reply?;
        let lease = Duration::from_millis(u64::from(reply.lease_ms));
        let trusted = super::trusted_for(lease);
        // None now; or too short to buffer under (bytes would go out at once anyway).
        let held = (reply.lease_ms > 0 && trusted > WRITE_BACK_AGE_MAX * 2)
            .then_some(((reply.start, reply.end), asked + trusted));
        granted.insert(*index, held);
    }
    Ok(asks.iter().map(|(index, _)| granted[index]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bytes `extents` hold, as a model file of `size` (unbuffered bytes 0), and whether
    /// no two extents overlap or adjoin.
    fn model(extents: &BTreeMap<u64, Vec<u8>>, size: usize) -> (Vec<u8>, bool) {
        let mut file = vec![0u8; size];
        let mut apart = true;
        let mut last_end = None;
        for (&start, bytes) in extents {
            if last_end.is_some_and(|end| start <= end) {
                apart = false;
            }
            let at = usize::try_from(start).unwrap();
            file[at..at + bytes.len()].copy_from_slice(bytes);
            last_end = Some(start + bytes.len() as u64);
        }
        (file, apart)
    }

    proptest! {
        #[test]
        fn buffered_writes_read_as_the_same_writes_applied_in_order(
            writes in proptest::collection::vec((0u64..200, 1usize..40, any::<u8>()), 1..60)
        ) {
            let mut extents = BTreeMap::new();
            let mut reference = vec![0u8; 256];
            for (offset, length, byte) in writes {
                let data: Vec<u8> = (0..length).map(|i| byte.wrapping_add(u8::try_from(i).unwrap())).collect();
                insert(&mut extents, offset, &data);
                let at = usize::try_from(offset).unwrap();
                reference[at..at + length].copy_from_slice(&data);
            }
            let (file, apart) = model(&extents, 256);
            prop_assert_eq!(file, reference);
            prop_assert!(apart, "extents overlap or adjoin: {:?}", extents.keys().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_sequential_run_is_one_extent_grown_in_place() {
        let mut extents = BTreeMap::new();
        for i in 0..100u64 {
            insert(&mut extents, i * 10, &[u8::try_from(i).unwrap(); 10]);
        }
        assert_eq!(extents.len(), 1);
        assert_eq!(extents[&0].len(), 1000);
        assert_eq!(extents[&0][995], 99);
        // A write before the run and one bridging a gap merge too.
        insert(&mut extents, 2000, &[7; 5]);
        insert(&mut extents, 1000, &[8; 1000]);
        assert_eq!(extents.len(), 1);
        assert_eq!(extents[&0].len(), 2005);
    }
}
