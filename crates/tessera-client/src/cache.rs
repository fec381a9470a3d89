//! The client cache (opt-in, `ClientOptions::cache_bytes`; docs/SEMANTICS.md §3.2): clean
//! blocks of files, kept only under read leases from the iods that hold them, so a cached
//! read never returns bytes older than a write another reader could see.
//!
//! A block of `BLOCK_BYTES` of a file is cached only while this client holds a read lease on
//! the file from every iod of its layout. Leases come from `LeaseAcquire`; each iod revokes
//! them over a callback channel this client opened to it (`LeaseListen`, served by one thread
//! per iod), before it applies any write, truncate or remove of the file — this client's own
//! writes included. A revocation drops the file's blocks and bumps the file's epoch before it
//! is answered; a read inserts the blocks it fetched only if the epoch it started under still
//! holds, so a read that raced a revocation never caches what it read. The client counts a
//! lease from before it asked, less a margin, so it stops trusting a lease before the iod
//! does. Writes go through to the iods (the cache holds no dirty data). The blocks' memory is
//! a shared arena ([`block`]), so the iods of this host fill blocks and pull demoted ones with
//! plain copies.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::io::{IoSlice, IoSliceMut};

use tessera_net::{Connection, NetError, Pool};
use tessera_policy::{BatchId, ClientCache, DemoteBuffer, End, Push};
use tessera_proto::{Capability, Demote, DemoteOffer, Layout, LeaseAcquire, Piece, TransferMode};

use crate::client::Inner;
use crate::error::ClientError;
use crate::options::DemoteMode;

mod block;
mod writeback;

use block::{Block, Slab};
use writeback::WriteBack;

/// How often a held lease answer looks whether it may go.
const HOLD_POLL_INTERVAL: Duration = Duration::from_millis(10);
pub use writeback::{
    WriteBackStats, BUFFERED_WRITE_BYTES_MAX, WRITE_BACK_AGE_MAX, WRITE_BACK_BYTES_MAX,
    WRITE_BACK_FILES_MAX,
};

/// Blocks of the DEMOTE buffer (two halves: a batch is half of it; 4 MiB of 64 KiB blocks),
/// taken out of the cache's budget, and at most a third of it.
pub const DEMOTE_BUFFER_BLOCKS: usize = 64;
/// The longest a read waits for room in a full DEMOTE buffer before it drops the evicted
/// block instead (counted as refused).
const DEMOTE_FULL_WAIT: Duration = Duration::from_secs(2);

/// The bytes of one cached block (and of a read's alignment).
pub const BLOCK_BYTES: u64 = 64 << 10;
/// The most blocks one client caches (64 GiB of 64 KiB blocks).
pub const BLOCKS_MAX: u64 = 1 << 20;
/// The most files one client caches blocks of (beyond, a new file is read uncached).
pub const FILES_MAX: usize = 1 << 16;
/// How often a callback thread looks whether its client is gone.
const CALLBACK_POLL: Duration = Duration::from_millis(200);
/// The part of a lease this client does not trust (clock drift, the reply's travel), in
/// tenths, and at most [`LEASE_MARGIN_MAX`].
const LEASE_MARGIN_TENTHS: u32 = 2;
/// See [`LEASE_MARGIN_TENTHS`].
const LEASE_MARGIN_MAX: Duration = Duration::from_secs(1);

/// The longest a test may keep a client from answering revocations
/// ([`crate::Client::hold_lease_answers`]).
const HOLD_MAX: Duration = Duration::from_mins(1);

/// What the client cache did, since the client was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCacheStats {
    /// Blocks found cached.
    pub hits: u64,
    /// Blocks read from the iods.
    pub misses: u64,
    /// Blocks dropped to make room.
    pub evictions: u64,
    /// Revocations answered (each drops a file's blocks).
    pub revocations: u64,
    /// Reads that could not cache (a lease refused while a write was under way, or lost).
    pub uncached_reads: u64,
    /// Blocks cached now.
    pub blocks: u64,
    /// Evicted blocks sent to their iods (DEMOTE).
    pub demotes_sent: u64,
    /// Evicted blocks their iods did not want (cached there already, no unified cache, no
    /// lease) or that could not be sent.
    pub demotes_refused: u64,
    /// Misses found in the DEMOTE buffer (victim lookup).
    pub buffer_hits: u64,
    /// Evictions that found the DEMOTE buffer full and waited for the batch in flight.
    pub buffer_full_waits: u64,
}

#[derive(Default)]
struct FileState {
    /// Bumped by every revocation of the file.
    epoch: u64,
    /// Until when the lease from each iod (by index) is trusted, and its id.
    leases: HashMap<usize, (Instant, u64)>,
    /// Where its blocks live and the right to demote them (from the last cached read).
    layout: Option<Layout>,
    capability: Capability,
    /// Whether that right includes writing, which a demote needs (a client that may only
    /// read a file must not put bytes in the iods' caches that others will read).
    writable: bool,
}

/// A block: (file handle, block index).
type Key = (u64, u64);

struct State {
    blocks: HashMap<Key, Arc<Block>>,
    order: ClientCache<Key>,
    files: HashMap<u64, FileState>,
    stats: ClientCacheStats,
    /// Evicted blocks waiting to be demoted (`DemoteMode::Buffered`).
    demotes: DemoteBuffer<Key, Demoted>,
}

struct Callback {
    thread: Option<JoinHandle<()>>,
    alive: Arc<AtomicBool>,
}

/// The cache of one client, shared by its files.
pub(crate) struct BlockCache {
    demote: DemoteMode,
    /// Where blocks live: a shared arena the iods copy in and out of directly.
    slab: Option<Arc<Slab>>,
    /// The client id, the state, and what the sender thread needs of them.
    demoter: Demoter,
    /// Started at the first sealed batch (`DemoteMode::Buffered`).
    sender: Mutex<Option<DemoteSender>>,
    callbacks: Mutex<HashMap<usize, Callback>>,
    stop: Arc<AtomicBool>,
    /// Test-only: revocations go unanswered while set (at most [`HOLD_MAX`] each).
    hold: Arc<AtomicBool>,
    /// Small writes buffered under write leases (`ClientOptions::write_back`).
    write_back: Option<Arc<WriteBack>>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("client_id", &self.demoter.client_id)
            .finish_non_exhaustive()
    }
}

impl Drop for BlockCache {
    fn drop(&mut self) {
        // Buffered bytes go out while the callback channels still answer the revocations
        // the writes cause.
        if let Some(write_back) = &self.write_back {
            write_back.flush_all();
        }
        self.stop.store(true, Ordering::Relaxed);
        let callbacks = std::mem::take(
            &mut *self
                .callbacks
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, mut callback) in callbacks {
            if let Some(thread) = callback.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// How long after asking this client trusts a lease of `lease`: less a margin for clock drift
/// and the reply's travel.
fn trusted_for(lease: Duration) -> Duration {
    lease.saturating_sub((lease * LEASE_MARGIN_TENTHS / 10).min(LEASE_MARGIN_MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops every block of `handle` and bumps its epoch (a revocation).
fn drop_file(state: &Mutex<State>, handle: u64) {
    let mut state = lock(state);
    forget_file(&mut state, handle);
    state.stats.revocations += 1;
}

/// Drops every block of `handle`, its leases, and bumps its epoch.
fn forget_file(state: &mut State, handle: u64) {
    state.files.entry(handle).or_default().epoch += 1;
    if let Some(file) = state.files.get_mut(&handle) {
        file.leases.clear();
    }
    let keys: Vec<(u64, u64)> = state
        .blocks
        .keys()
        .filter(|(file, _)| *file == handle)
        .copied()
        .collect();
    for key in keys {
        state.blocks.remove(&key);
        state.order.remove(&key);
    }
    // Never demote a block of a changed file.
    state.demotes.purge(|(file, _)| *file == handle);
    state.stats.blocks = state.blocks.len() as u64;
}

impl BlockCache {
    /// A cache of `budget_bytes`, in whole blocks: at least one, at most [`BLOCKS_MAX`].
    /// With buffered DEMOTE the buffer comes out of the budget: [`DEMOTE_BUFFER_BLOCKS`], or
    /// a third of the budget if that is less (at least 2 blocks).
    ///
    /// With a `flusher` (a client of its own, without a cache), small writes are buffered
    /// under write leases too ([`writeback`]), at most half the budget of them.
    pub(crate) fn new(
        budget_bytes: u64,
        demote: DemoteMode,
        flusher: Option<crate::client::Client>,
    ) -> Self {
        let budget = (budget_bytes / BLOCK_BYTES).clamp(1, BLOCKS_MAX);
        let buffer = if demote == DemoteMode::Buffered {
            (DEMOTE_BUFFER_BLOCKS as u64).min(budget / 3).max(2) / 2 * 2
        } else {
            2
        };
        let cached = if demote == DemoteMode::Buffered {
            budget.saturating_sub(buffer).max(1)
        } else {
            budget
        };
        let order = ClientCache::lru(usize::try_from(cached).expect("at most BLOCKS_MAX"))
            .expect("a capacity of at least one block");
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let client_id = hasher.finish();
        let state = State {
            blocks: HashMap::new(),
            order,
            files: HashMap::new(),
            stats: ClientCacheStats::default(),
            demotes: DemoteBuffer::new(usize::try_from(buffer).expect("at most 64"))
                .expect("a valid buffer size"),
        };
        let block_bytes = usize::try_from(BLOCK_BYTES).expect("64 KiB");
        Self {
            demote,
            slab: Slab::new(
                usize::try_from(budget).expect("at most BLOCKS_MAX"),
                block_bytes,
            ),
            demoter: Demoter {
                client_id,
                state: Arc::new(Mutex::new(state)),
                completed: Arc::new(Condvar::new()),
            },
            sender: Mutex::default(),
            callbacks: Mutex::default(),
            stop: Arc::new(AtomicBool::new(false)),
            hold: Arc::new(AtomicBool::new(false)),
            write_back: flusher
                .map(|flusher| Arc::new(WriteBack::new(budget_bytes / 2, flusher, client_id))),
        }
    }

    pub(crate) fn write_back_stats(&self) -> Option<WriteBackStats> {
        self.write_back.as_deref().map(WriteBack::stats)
    }

    /// Keeps a small write of `file` in the write-back buffer if it can (`Some`: done);
    /// `None`: the caller sends it now (what the file buffered went first).
    pub(crate) fn buffer_write(
        &self,
        inner: &Arc<Inner>,
        file: &crate::file::File,
        memory: &[IoSlice<'_>],
        pieces: &[Piece],
    ) -> Result<Option<crate::file::IoReport>, ClientError> {
        let Some(write_back) = &self.write_back else {
            return Ok(None);
        };
        write_back.buffer(file, memory, pieces, |asks| {
            for &(index, _) in asks {
                self.ensure_callback(inner, index)?;
            }
            let granted = writeback::acquire(inner, file, self.demoter.client_id, asks)?;
            if granted.iter().any(Option::is_some) {
                // Blocks cached under a read lease would not show this client's buffered
                // bytes: the file is read from the iods (after a flush) while it writes.
                forget_file(&mut lock(&self.demoter.state), file.handle);
            }
            Ok(granted)
        })
    }

    /// Forgets this client's write leases on file `handle` (its write group changed).
    pub(crate) fn forget_write_leases(&self, handle: u64) {
        if let Some(write_back) = &self.write_back {
            write_back.forget_leases(handle);
        }
    }

    /// Writes what file `handle` buffered (before any other data call on it, its sync and
    /// close).
    pub(crate) fn flush_writes(&self, handle: u64) -> Result<(), ClientError> {
        match &self.write_back {
            Some(write_back) => write_back.flush(handle),
            None => Ok(()),
        }
    }

    /// Test-only: while `hold` is set, revocations are not answered (as from a client that
    /// stopped), at most [`HOLD_MAX`] each.
    pub(crate) fn hold_answers(&self, hold: bool) {
        self.hold.store(hold, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> ClientCacheStats {
        lock(&self.demoter.state).stats
    }

    /// Starts the callback channel to iod `index` unless one is alive.
    fn ensure_callback(&self, inner: &Arc<Inner>, index: usize) -> Result<(), ClientError> {
        let mut callbacks = lock(&self.callbacks);
        if callbacks
            .get(&index)
            .is_some_and(|callback| callback.alive.load(Ordering::Relaxed))
        {
            return Ok(());
        }
        // An ended channel's thread has ended or is ending (its socket is closed): let it go.
        callbacks.remove(&index);
        let mut connection = inner.iods.dial_separate(index)?;
        connection.listen_for_leases(self.demoter.client_id)?;
        let alive = Arc::new(AtomicBool::new(true));
        let (state, stop, hold, thread_alive) = (
            Arc::clone(&self.demoter.state),
            Arc::clone(&self.stop),
            Arc::clone(&self.hold),
            Arc::clone(&alive),
        );
        let write_back = self.write_back.clone();
        let thread = std::thread::Builder::new()
            .name(format!("tessera-lease-{index}"))
            .spawn(move || {
                let served = connection.serve_lease_callbacks(&stop, CALLBACK_POLL, |handle| {
                    let held = Instant::now();
                    while hold.load(Ordering::Relaxed) && held.elapsed() < HOLD_MAX {
                        std::thread::sleep(HOLD_POLL_INTERVAL);
                    }
                    drop_file(&state, handle);
                    // What the file buffered is written before the answer.
                    if let Some(write_back) = &write_back {
                        write_back.revoked(handle, index);
                    }
                });
                if let Err(err) = served {
                    tracing::warn!("client cache: callback channel to iod {index} ended: {err}");
                }
                // The channel is gone, and its leases with it (the iod ends them too).
                thread_alive.store(false, Ordering::Relaxed);
                if let Some(write_back) = &write_back {
                    write_back.channel_lost(index);
                }
                let mut state = lock(&state);
                for file in state.files.values_mut() {
                    if file.leases.remove(&index).is_some() {
                        file.epoch += 1;
                    }
                }
            })
            .map_err(|err| {
                ClientError::InvalidArgument(format!("client cache: callback thread: {err}"))
            })?;
        callbacks.insert(
            index,
            Callback {
                thread: Some(thread),
                alive,
            },
        );
        Ok(())
    }

    /// Makes sure this client holds a lease on `handle` from each iod of `iods`: the file's
    /// epoch under which it may cache, or `None` (read uncached) when an iod refused one for
    /// now (a write under way), could not be asked, or a revocation came meanwhile, or the
    /// client already caches `FILES_MAX` files.
    fn lease(
        &self,
        inner: &Arc<Inner>,
        (handle, capability, demotes): (u64, &Capability, bool),
        iods: &[usize],
    ) -> Option<u64> {
        let now = Instant::now();
        let (epoch, missing) = {
            let mut state = lock(&self.demoter.state);
            if state.files.len() >= FILES_MAX && !state.files.contains_key(&handle) {
                // Forget files without leases (so without usable blocks) before refusing one.
                state.files.retain(|_, file| !file.leases.is_empty());
                if state.files.len() >= FILES_MAX {
                    return None;
                }
            }
            let file = state.files.entry(handle).or_default();
            let lapsed = iods.iter().any(|index| {
                file.leases
                    .get(index)
                    .is_none_or(|(until, _)| *until <= now)
            });
            let missing = if lapsed {
                // Blocks cached under a lease that ran out may be stale (the iod let a write
                // go on without this client's answer): they go, with every lease of the file,
                // and all are asked for again.
                forget_file(&mut state, handle);
                iods.to_vec()
            } else {
                Vec::new()
            };
            let file = state.files.entry(handle).or_default();
            (file.epoch, missing)
        };
        for index in missing {
            if let Err(err) = self.ensure_callback(inner, index) {
                // No callback channel (an iod at its LEASE_LISTENERS_MAX, or unreachable):
                // no lease; the read goes to the iods, which name any real failure.
                tracing::debug!("client cache: no callback channel to iod {index}: {err}");
                return None;
            }
            let asked = Instant::now();
            let request = LeaseAcquire {
                handle,
                capability: capability.clone(),
                client_id: self.demoter.client_id,
                demotes,
                write: false,
                start: 0,
                end: 0,
                group: 0,
            };
            let reply = match inner
                .iods
                .with(index, |connection| connection.call(&request))
            {
                Ok(reply) => reply,
                Err(err) => {
                    // The iod may have closed this client's channel (a revocation it did not
                    // answer in time): open a new one next time, read uncached now.
                    tracing::debug!("client cache: no lease from iod {index}: {err}");
                    if let Some(callback) = lock(&self.callbacks).get(&index) {
                        callback.alive.store(false, Ordering::Relaxed);
                    }
                    return None;
                }
            };
            if reply.lease_ms == 0 {
                return None;
            }
            let lease = Duration::from_millis(u64::from(reply.lease_ms));
            let mut state = lock(&self.demoter.state);
            let file = state.files.entry(handle).or_default();
            if file.epoch != epoch {
                return None;
            }
            file.leases
                .insert(index, (asked + trusted_for(lease), reply.lease_id));
        }
        Some(epoch)
    }

    /// Reads `data.len()` bytes at `offset` of file `handle` (on the iods `iods`) through
    /// the cache, `fetch(pieces, buffer)` reading the blocks it lacks from the iods; the file
    /// was opened `writable` or not (only then are its blocks demoted). `false`: no lease
    /// now, nothing read (the caller reads plainly).
    pub(crate) fn read(
        &self,
        inner: &Arc<Inner>,
        (handle, capability, layout): (u64, &Capability, &Layout),
        writable: bool,
        offset: u64,
        data: &mut [u8],
        fetch: impl FnOnce(&[tessera_proto::Piece], &mut [IoSliceMut<'_>]) -> Result<(), ClientError>,
    ) -> Result<bool, ClientError> {
        if data.is_empty() {
            return Ok(true);
        }
        let iods: Vec<usize> = layout
            .servers()
            .iter()
            .map(|&index| usize::from(index))
            .collect();
        let iods = iods.as_slice();
        let demotes = writable && self.demote != DemoteMode::Off;
        let Some(epoch) = self.lease(inner, (handle, capability, demotes), iods) else {
            lock(&self.demoter.state).stats.uncached_reads += 1;
            return Ok(false);
        };
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| ClientError::InvalidArgument(format!("read at {offset} overflows")))?;
        let (first, last) = (offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
        let mut found: Vec<(u64, Arc<Block>)> = Vec::new();
        let mut missing: Vec<u64> = Vec::new();
        let mut evicted: Vec<(Key, Demoted)> = Vec::new();
        {
            let mut state = lock(&self.demoter.state);
            let file = state.files.entry(handle).or_default();
            file.layout = Some(layout.clone());
            file.capability = capability.clone();
            file.writable = writable;
            for block in first..=last {
                let key = (handle, block);
                if let Some(bytes) = state.blocks.get(&key).cloned() {
                    state.order.place(&key, End::MostRecent);
                    found.push((block, bytes));
                } else if let Some(Demoted { bytes, .. }) = state.demotes.take(&key) {
                    // Victim lookup: back from the DEMOTE buffer into the cache.
                    state.stats.buffer_hits += 1;
                    state.blocks.insert(key, Arc::clone(&bytes));
                    if let Some(out) = state.order.insert(key, End::MostRecent) {
                        self.evict(&mut state, out, &mut evicted);
                    }
                    found.push((block, bytes));
                } else {
                    missing.push(block);
                }
            }
            state.stats.hits += found.len() as u64;
            state.stats.misses += missing.len() as u64;
        }
        if !missing.is_empty() {
            let pieces: Vec<tessera_proto::Piece> = missing
                .iter()
                .map(|block| tessera_proto::Piece::new(block * BLOCK_BYTES, BLOCK_BYTES))
                .collect();
            let block_len = usize::try_from(BLOCK_BYTES).expect("64 KiB");
            // The blocks are read straight into the memory they will be cached in.
            let mut buffers: Vec<Block> = missing
                .iter()
                .map(|_| Block::new(self.slab.as_ref(), block_len))
                .collect();
            let mut slices: Vec<IoSliceMut<'_>> = buffers
                .iter_mut()
                .map(|buffer| IoSliceMut::new(buffer.as_mut_slice()))
                .collect();
            fetch(&pieces, &mut slices)?;
            drop(slices);
            let fetched: Vec<(u64, Arc<Block>)> = missing
                .iter()
                .zip(buffers)
                .map(|(&block, bytes)| (block, Arc::new(bytes)))
                .collect();
            let mut state = lock(&self.demoter.state);
            let now = Instant::now();
            let leased = state.files.get(&handle).is_some_and(|file| {
                file.epoch == epoch
                    && iods.iter().all(|index| {
                        file.leases
                            .get(index)
                            .is_some_and(|(until, _)| *until > now)
                    })
            });
            if leased {
                for (block, bytes) in &fetched {
                    let key = (handle, *block);
                    state.blocks.insert(key, Arc::clone(bytes));
                    if let Some(out) = state.order.insert(key, End::MostRecent) {
                        self.evict(&mut state, out, &mut evicted);
                    }
                }
            }
            state.stats.blocks = state.blocks.len() as u64;
            found.extend(fetched);
        }
        for (block, bytes) in found {
            let block_start = block * BLOCK_BYTES;
            let from = offset.max(block_start);
            let to = end.min(block_start + BLOCK_BYTES);
            let source = usize::try_from(from - block_start).expect("within a block");
            let target = usize::try_from(from - offset).expect("within the read");
            let len = usize::try_from(to - from).expect("within a block");
            data[target..target + len].copy_from_slice(&bytes[source..source + len]);
        }
        self.demote_evicted(inner, evicted);
        Ok(true)
    }

    /// Drops block `out` (the policy's victim) and, when demoting, keeps where it goes.
    fn evict(&self, state: &mut State, out: Key, evicted: &mut Vec<(Key, Demoted)>) {
        state.stats.evictions += 1;
        let Some(bytes) = state.blocks.remove(&out) else {
            return;
        };
        if self.demote != DemoteMode::Off {
            match demoted(state, out, bytes) {
                Some(demoted) => evicted.push((out, demoted)),
                None => state.stats.demotes_refused += 1,
            }
        }
    }

    /// Demotes evicted clean blocks by the client's [`DemoteMode`]: eagerly, each sent
    /// before the read returns; or buffered, handed to the DEMOTE sender thread a batch at a
    /// time. Failures only count.
    fn demote_evicted(&self, inner: &Arc<Inner>, evicted: Vec<(Key, Demoted)>) {
        match self.demote {
            DemoteMode::Off => {}
            DemoteMode::Eager => {
                let mut links = PoolLinks(&inner.iods);
                for block in evicted {
                    let (sent, refused) = self.demoter.send(&mut links, &[block], false);
                    self.demoter.count(sent, refused);
                }
            }
            DemoteMode::Buffered => {
                let mut state = lock(&self.demoter.state);
                for (key, demoted) in evicted {
                    let mut block = (key, demoted);
                    let deadline = Instant::now() + DEMOTE_FULL_WAIT;
                    loop {
                        match state.demotes.push(block.0, block.1) {
                            Push::Buffered => break,
                            Push::Sealed(id) => {
                                self.dispatch(inner, &mut state, id);
                                break;
                            }
                            Push::Full(key, demoted) => {
                                // Both halves taken: wait for the batch in flight.
                                state.stats.buffer_full_waits += 1;
                                let left = deadline.saturating_duration_since(Instant::now());
                                if left.is_zero() {
                                    state.stats.demotes_refused += 1;
                                    break;
                                }
                                state = self
                                    .demoter
                                    .completed
                                    .wait_timeout(state, left)
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .0;
                                block = (key, demoted);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Hands sealed batch `id` to the DEMOTE sender thread, starting it at the first batch
    /// (`state` is the locked cache state).
    fn dispatch(&self, inner: &Arc<Inner>, state: &mut State, id: BatchId) {
        let mut sender = lock(&self.sender);
        if sender.is_none() {
            match DemoteSender::start(self.demoter.clone(), Arc::clone(&inner.iods)) {
                Ok(started) => *sender = Some(started),
                Err(err) => tracing::warn!("client cache: {err}"),
            }
        }
        let sent = sender
            .as_ref()
            .and_then(|sender| sender.batches.as_ref())
            .is_some_and(|batches| batches.try_send(id).is_ok());
        if !sent {
            // No sender: the batch is dropped (its blocks count as refused), so the buffer
            // does not stay full.
            let keys = state.demotes.metadata(id).unwrap_or_default();
            let _ = state.demotes.answer(id, &vec![false; keys.len()]);
            let _ = state.demotes.complete(id);
            state.stats.demotes_refused += keys.len() as u64;
        }
    }
}

/// An evicted block on its way to its iods: its bytes, and where each part goes under which
/// lease — fixed when it was evicted, so a block only ever travels under the lease it was
/// cached under (the iod refuses it under any other).
#[derive(Clone)]
pub(crate) struct Demoted {
    bytes: Arc<Block>,
    parts: Vec<DemotePart>,
}

/// One part of an evicted block, on one iod.
#[derive(Clone)]
struct DemotePart {
    iod: usize,
    handle: u64,
    capability: Capability,
    lease_id: u64,
    /// The part as a local piece of the iod's object.
    piece: Piece,
    /// Where the part starts in the block.
    at: usize,
}

/// Where an evicted block goes: `None` if its file was not opened for writing, or its
/// layout or a lease of one of its iods is not known (it is then not demoted).
fn demoted(state: &State, (handle, block): Key, bytes: Arc<Block>) -> Option<Demoted> {
    let file = state.files.get(&handle).filter(|file| file.writable)?;
    let layout = file.layout.as_ref()?;
    let start = block * BLOCK_BYTES;
    let mut parts = Vec::new();
    let mut leased = true;
    layout.for_each_segment(start, BLOCK_BYTES, |segment| {
        let iod = usize::from(layout.servers()[segment.server_position]);
        let Some(&(_, lease_id)) = file.leases.get(&iod) else {
            leased = false;
            return;
        };
        parts.push(DemotePart {
            iod,
            handle,
            capability: file.capability.clone(),
            lease_id,
            piece: Piece::new(segment.local_offset, segment.length),
            at: usize::try_from(segment.logical_offset - start).expect("in a block"),
        });
    });
    (leased && !parts.is_empty()).then_some(Demoted { bytes, parts })
}

/// Parts of blocks grouped per (iod, file, lease): the file's right, the parts as the iod's
/// local pieces, and something per part.
type Groups<T> = HashMap<(usize, u64, u64), (Capability, Vec<Piece>, Vec<T>)>;

/// Groups the parts of `blocks` per iod, file and lease, `each(position, part)` giving what
/// to keep per part.
fn group<'a, T>(
    blocks: impl Iterator<Item = &'a Demoted>,
    mut each: impl FnMut(usize, &'a Demoted, &'a DemotePart) -> T,
) -> Groups<T> {
    let mut groups: Groups<T> = HashMap::new();
    for (position, block) in blocks.enumerate() {
        for part in &block.parts {
            let group = groups
                .entry((part.iod, part.handle, part.lease_id))
                .or_insert_with(|| (part.capability.clone(), Vec::new(), Vec::new()));
            group.1.push(part.piece);
            group.2.push(each(position, block, part));
        }
    }
    groups
}

/// The connections demotes travel on.
trait Links {
    /// Runs `exchange` once on a connection to iod `index`.
    fn call<T>(
        &mut self,
        index: usize,
        exchange: impl FnOnce(&mut Connection) -> Result<T, NetError>,
    ) -> Result<T, NetError>;
}

/// The client's own pool (eager DEMOTE, from the reading thread).
struct PoolLinks<'a>(&'a Pool);

impl Links for PoolLinks<'_> {
    fn call<T>(
        &mut self,
        index: usize,
        exchange: impl FnOnce(&mut Connection) -> Result<T, NetError>,
    ) -> Result<T, NetError> {
        self.0.with_once(index, exchange)
    }
}

/// Connections of the DEMOTE sender thread's own, so demotes never queue behind reads (nor
/// reads behind demotes) on the pool's one connection per iod; a failed one is dropped and
/// dialed again at the next batch.
struct OwnLinks {
    pool: Arc<Pool>,
    connections: HashMap<usize, Connection>,
}

impl Links for OwnLinks {
    fn call<T>(
        &mut self,
        index: usize,
        exchange: impl FnOnce(&mut Connection) -> Result<T, NetError>,
    ) -> Result<T, NetError> {
        let connection = match self.connections.entry(index) {
            std::collections::hash_map::Entry::Occupied(kept) => kept.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(self.pool.dial_separate(index)?)
            }
        };
        let result = exchange(connection);
        if result.is_err() {
            self.connections.remove(&index);
        }
        result
    }
}

/// What demoting needs of the cache, shared with the sender thread.
#[derive(Clone)]
struct Demoter {
    client_id: u64,
    state: Arc<Mutex<State>>,
    /// Signalled when a batch completes (a reader waiting on a full buffer).
    completed: Arc<Condvar>,
}

impl Demoter {
    fn count(&self, sent: u64, refused: u64) {
        let mut state = lock(&self.state);
        state.stats.demotes_sent += sent;
        state.stats.demotes_refused += refused;
    }

    /// Asks each block's iods whether they want it (`DemoteOffer`, one per iod, file and
    /// lease); a block split over iods is wanted only if every part is. An iod that pulls
    /// one-sidedly is not asked: it chooses as it pulls ([`Demoter::send`] choosing).
    fn offer(&self, links: &mut impl Links, blocks: &[Demoted]) -> Vec<bool> {
        let mut wanted = vec![true; blocks.len()];
        let groups = group(blocks.iter(), |position, _, _| position);
        for ((index, handle, lease_id), (capability, pieces, positions)) in groups {
            let request = DemoteOffer {
                handle,
                capability,
                client_id: self.client_id,
                lease_id,
                pieces,
            };
            let asked = links.call(index, |connection| {
                if connection.one_sided() {
                    return Ok(None);
                }
                connection.call(&request).map(Some)
            });
            match asked {
                Ok(None) => {}
                Ok(Some(reply)) if reply.wanted.0.len() == positions.len() => {
                    for (flag, position) in reply.wanted.0.iter().zip(&positions) {
                        wanted[*position] &= *flag == 1;
                    }
                }
                _ => positions
                    .iter()
                    .for_each(|position| wanted[*position] = false),
            }
        }
        wanted
    }

    /// Sends `blocks` to their iods, one `Demote` per iod, file and lease (the parts of each
    /// gathered from the blocks' bytes); returns (parts sent, parts refused or failed).
    /// Where an iod pulls one-sidedly and `choose` is set (buffered DEMOTE, not offered
    /// first), it pulls only the parts it wants.
    fn send(&self, links: &mut impl Links, blocks: &[(Key, Demoted)], choose: bool) -> (u64, u64) {
        let groups = group(blocks.iter().map(|(_, block)| block), |_, block, part| {
            let length = usize::try_from(part.piece.length).expect("within a block");
            IoSlice::new(&block.bytes[part.at..part.at + length])
        });
        let (mut sent, mut refused) = (0, 0);
        for ((index, handle, lease_id), (capability, pieces, mut slices)) in groups {
            let count = pieces.len() as u64;
            let mut request = Demote {
                handle,
                capability,
                client_id: self.client_id,
                lease_id,
                mode: TransferMode::Gather,
                choose: false,
                pieces,
            };
            match links.call(index, |connection| {
                // Where the iod can reach this process's memory it pulls the blocks itself.
                if connection.one_sided() {
                    request.mode = TransferMode::Remote;
                    request.choose = choose;
                    connection.call_remote(&request, &slices)
                } else {
                    connection.call_with_bulk(&request, &mut slices)
                }
            }) {
                Ok(reply) if request.choose => {
                    // Flags are 0 or 1 (else the reply fails to decode).
                    let taken: u64 = reply.taken.0.iter().map(|&flag| u64::from(flag)).sum();
                    let taken = taken.min(count);
                    sent += taken;
                    refused += count - taken;
                }
                Ok(_) => sent += count,
                Err(err) => {
                    tracing::debug!("client cache: demote to iod {index} failed: {err}");
                    refused += count;
                }
            }
        }
        (sent, refused)
    }

    /// Moves sealed batch `id` (and any batch sealed meanwhile): its metadata first, then
    /// the blocks the iods want in one gathered transfer per iod, then frees its half.
    fn run_batches(&self, links: &mut impl Links, mut id: BatchId) {
        loop {
            let offered = lock(&self.state)
                .demotes
                .metadata_with(id, |_, demoted| demoted.clone());
            if let Ok(blocks) = offered {
                let wanted = self.offer(links, &blocks);
                let send = {
                    let mut state = lock(&self.state);
                    let send = state.demotes.answer(id, &wanted).unwrap_or_default();
                    state.stats.demotes_refused += (blocks.len() - send.len()) as u64;
                    send
                };
                let (sent, refused) = self.send(links, &send, true);
                self.count(sent, refused);
            }
            let next = lock(&self.state).demotes.complete(id);
            self.completed.notify_all();
            match next {
                Ok(Some(sealed)) => id = sealed,
                _ => break,
            }
        }
    }
}

/// The thread that moves sealed DEMOTE batches while the client reads on (double buffering:
/// one half fills while the other travels).
struct DemoteSender {
    /// Closed to stop the thread.
    batches: Option<SyncSender<BatchId>>,
    thread: Option<JoinHandle<()>>,
}

impl DemoteSender {
    fn start(demoter: Demoter, pool: Arc<Pool>) -> Result<Self, String> {
        // One batch is in flight at a time; the next is sealed when it completes.
        let (batches, jobs) = std::sync::mpsc::sync_channel::<BatchId>(2);
        let thread = std::thread::Builder::new()
            .name("tessera-demote".to_owned())
            .spawn(move || {
                let mut links = OwnLinks {
                    pool,
                    connections: HashMap::new(),
                };
                while let Ok(id) = jobs.recv() {
                    demoter.run_batches(&mut links, id);
                }
            })
            .map_err(|err| format!("DEMOTE sender thread: {err}"))?;
        Ok(Self {
            batches: Some(batches),
            thread: Some(thread),
        })
    }
}

impl Drop for DemoteSender {
    fn drop(&mut self) {
        self.batches = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
