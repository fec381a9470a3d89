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
//! does. Writes go through to the iods (the cache holds no dirty data).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::io::IoSlice;

use tessera_policy::{ClientCache, DemoteBuffer, End, Push};
use tessera_proto::{Capability, Demote, DemoteOffer, Layout, LeaseAcquire, Piece};

use crate::client::Inner;
use crate::error::ClientError;
use crate::options::DemoteMode;

/// Blocks of the DEMOTE buffer (two halves: a batch is half of it).
pub const DEMOTE_BUFFER_BLOCKS: usize = 32;

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
}

#[derive(Default)]
struct FileState {
    /// Bumped by every revocation of the file.
    epoch: u64,
    /// Until when the lease from each iod (by index) is trusted.
    leases: HashMap<usize, Instant>,
    /// Where its blocks live and the right to demote them (from the last cached read).
    layout: Option<Layout>,
    capability: Capability,
}

/// A block: (file handle, block index).
type Key = (u64, u64);

/// Parts of blocks grouped per (iod index, file handle): the file's right, the parts as the
/// iod's local pieces, and something per part.
type Groups<T> = HashMap<(usize, u64), (Capability, Vec<Piece>, Vec<T>)>;

struct State {
    blocks: HashMap<Key, Arc<Vec<u8>>>,
    order: ClientCache<Key>,
    files: HashMap<u64, FileState>,
    stats: ClientCacheStats,
    /// Evicted blocks waiting to be demoted (`DemoteMode::Buffered`).
    demotes: DemoteBuffer<Key, Arc<Vec<u8>>>,
}

struct Callback {
    thread: Option<JoinHandle<()>>,
    alive: Arc<AtomicBool>,
}

/// The cache of one client, shared by its files.
pub(crate) struct BlockCache {
    client_id: u64,
    demote: DemoteMode,
    state: Arc<Mutex<State>>,
    callbacks: Mutex<HashMap<usize, Callback>>,
    stop: Arc<AtomicBool>,
    /// Test-only: revocations go unanswered while set (at most [`HOLD_MAX`] each).
    hold: Arc<AtomicBool>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Drop for BlockCache {
    fn drop(&mut self) {
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
    /// A cache of `budget_bytes` (whole blocks, at least one).
    /// A cache of `budget_bytes`, in whole blocks: at least one, at most [`BLOCKS_MAX`].
    pub(crate) fn new(budget_bytes: u64, demote: DemoteMode) -> Self {
        let blocks = (budget_bytes / BLOCK_BYTES).clamp(1, BLOCKS_MAX);
        let order = ClientCache::lru(usize::try_from(blocks).expect("at most BLOCKS_MAX"))
            .expect("a capacity of at least one block");
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Self {
            client_id: hasher.finish(),
            demote,
            state: Arc::new(Mutex::new(State {
                blocks: HashMap::new(),
                order,
                files: HashMap::new(),
                stats: ClientCacheStats::default(),
                demotes: DemoteBuffer::new(DEMOTE_BUFFER_BLOCKS).expect("a valid buffer size"),
            })),
            callbacks: Mutex::default(),
            stop: Arc::new(AtomicBool::new(false)),
            hold: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Test-only: while `hold` is set, revocations are not answered (as from a client that
    /// stopped), at most [`HOLD_MAX`] each.
    pub(crate) fn hold_answers(&self, hold: bool) {
        self.hold.store(hold, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> ClientCacheStats {
        lock(&self.state).stats
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
        connection.listen_for_leases(self.client_id)?;
        let alive = Arc::new(AtomicBool::new(true));
        let (state, stop, hold, thread_alive) = (
            Arc::clone(&self.state),
            Arc::clone(&self.stop),
            Arc::clone(&self.hold),
            Arc::clone(&alive),
        );
        let thread = std::thread::Builder::new()
            .name(format!("tessera-lease-{index}"))
            .spawn(move || {
                let served = connection.serve_lease_callbacks(&stop, CALLBACK_POLL, |handle| {
                    let held = Instant::now();
                    while hold.load(Ordering::Relaxed) && held.elapsed() < HOLD_MAX {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    drop_file(&state, handle);
                });
                if let Err(err) = served {
                    tracing::warn!("client cache: callback channel to iod {index} ended: {err}");
                }
                // The channel is gone, and its leases with it (the iod ends them too).
                thread_alive.store(false, Ordering::Relaxed);
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
        handle: u64,
        capability: &Capability,
        iods: &[usize],
    ) -> Option<u64> {
        let now = Instant::now();
        let (epoch, missing) = {
            let mut state = lock(&self.state);
            if state.files.len() >= FILES_MAX && !state.files.contains_key(&handle) {
                // Forget files without leases (so without usable blocks) before refusing one.
                state.files.retain(|_, file| !file.leases.is_empty());
                if state.files.len() >= FILES_MAX {
                    return None;
                }
            }
            let file = state.files.entry(handle).or_default();
            let lapsed = iods
                .iter()
                .any(|index| file.leases.get(index).is_none_or(|until| *until <= now));
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
                client_id: self.client_id,
                demotes: self.demote != DemoteMode::Off,
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
            let margin = (lease * LEASE_MARGIN_TENTHS / 10).min(LEASE_MARGIN_MAX);
            let mut state = lock(&self.state);
            let file = state.files.entry(handle).or_default();
            if file.epoch != epoch {
                return None;
            }
            file.leases
                .insert(index, asked + lease.saturating_sub(margin));
        }
        Some(epoch)
    }

    /// Reads `data.len()` bytes at `offset` of file `handle` (on the iods `iods`) through
    /// the cache, `fetch(pieces, buffer)` reading the blocks it lacks from the iods. `false`:
    /// no lease now, nothing read (the caller reads plainly).
    pub(crate) fn read(
        &self,
        inner: &Arc<Inner>,
        (handle, capability, layout): (u64, &Capability, &Layout),
        offset: u64,
        data: &mut [u8],
        fetch: impl FnOnce(&[tessera_proto::Piece], &mut [u8]) -> Result<(), ClientError>,
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
        let Some(epoch) = self.lease(inner, handle, capability, iods) else {
            lock(&self.state).stats.uncached_reads += 1;
            return Ok(false);
        };
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| ClientError::InvalidArgument(format!("read at {offset} overflows")))?;
        let (first, last) = (offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
        let mut found: Vec<(u64, Arc<Vec<u8>>)> = Vec::new();
        let mut missing: Vec<u64> = Vec::new();
        let mut evicted: Vec<(Key, Arc<Vec<u8>>)> = Vec::new();
        {
            let mut state = lock(&self.state);
            let file = state.files.entry(handle).or_default();
            file.layout = Some(layout.clone());
            file.capability = capability.clone();
            for block in first..=last {
                let key = (handle, block);
                if let Some(bytes) = state.blocks.get(&key).cloned() {
                    state.order.place(&key, End::MostRecent);
                    found.push((block, bytes));
                } else if let Some(bytes) = state.demotes.take(&key) {
                    // Victim lookup: back from the DEMOTE buffer into the cache.
                    state.stats.buffer_hits += 1;
                    state.blocks.insert(key, Arc::clone(&bytes));
                    if let Some(out) = state.order.insert(key, End::MostRecent) {
                        if let Some(out_bytes) = state.blocks.remove(&out) {
                            evicted.push((out, out_bytes));
                        }
                        state.stats.evictions += 1;
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
            let mut buffer = vec![0u8; missing.len() * block_len];
            fetch(&pieces, &mut buffer)?;
            let fetched: Vec<(u64, Arc<Vec<u8>>)> = missing
                .iter()
                .zip(buffer.chunks(block_len))
                .map(|(&block, bytes)| (block, Arc::new(bytes.to_vec())))
                .collect();
            let mut state = lock(&self.state);
            let now = Instant::now();
            let leased = state.files.get(&handle).is_some_and(|file| {
                file.epoch == epoch
                    && iods
                        .iter()
                        .all(|index| file.leases.get(index).is_some_and(|until| *until > now))
            });
            if leased {
                for (block, bytes) in &fetched {
                    let key = (handle, *block);
                    state.blocks.insert(key, Arc::clone(bytes));
                    if let Some(out) = state.order.insert(key, End::MostRecent) {
                        if let Some(out_bytes) = state.blocks.remove(&out) {
                            evicted.push((out, out_bytes));
                        }
                        state.stats.evictions += 1;
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

    /// Demotes evicted clean blocks by the client's [`DemoteMode`]; failures only count.
    fn demote_evicted(&self, inner: &Arc<Inner>, evicted: Vec<(Key, Arc<Vec<u8>>)>) {
        match self.demote {
            DemoteMode::Off => {}
            DemoteMode::Eager => {
                for block in evicted {
                    let (sent, refused) = self.send_demotes(inner, &[block]);
                    self.count_demotes(sent, refused);
                }
            }
            DemoteMode::Buffered => {
                let mut sealed = Vec::new();
                {
                    let mut state = lock(&self.state);
                    for (key, bytes) in evicted {
                        match state.demotes.push(key, bytes) {
                            Push::Buffered => {}
                            Push::Sealed(id) => sealed.push(id),
                            Push::Full(..) => state.stats.demotes_refused += 1,
                        }
                    }
                }
                for mut id in sealed {
                    loop {
                        let Ok(keys) = lock(&self.state).demotes.metadata(id) else {
                            break;
                        };
                        // Metadata first: which blocks the iods want.
                        let wanted = self.offer(inner, &keys);
                        let send = {
                            let mut state = lock(&self.state);
                            let send = state.demotes.answer(id, &wanted).unwrap_or_default();
                            state.stats.demotes_refused += (keys.len() - send.len()) as u64;
                            send
                        };
                        let (sent, refused) = self.send_demotes(inner, &send);
                        self.count_demotes(sent, refused);
                        match lock(&self.state).demotes.complete(id) {
                            Ok(Some(next)) => id = next,
                            _ => break,
                        }
                    }
                }
            }
        }
    }

    fn count_demotes(&self, sent: u64, refused: u64) {
        let mut state = lock(&self.state);
        state.stats.demotes_sent += sent;
        state.stats.demotes_refused += refused;
    }

    /// The file, iod pieces and right of each block: `(iod index, handle, piece, position in
    /// the block, length)`, per part of the block on each iod.
    fn place_blocks(&self, keys: &[Key]) -> Vec<(usize, u64, Capability, Piece, usize)> {
        let state = lock(&self.state);
        let mut parts = Vec::new();
        for &(handle, block) in keys {
            let Some(file) = state.files.get(&handle) else {
                continue;
            };
            let Some(layout) = &file.layout else {
                continue;
            };
            let start = block * BLOCK_BYTES;
            layout.for_each_segment(start, BLOCK_BYTES, |segment| {
                let index = usize::from(layout.servers()[segment.server_position]);
                let at = usize::try_from(segment.logical_offset - start).expect("in a block");
                parts.push((
                    index,
                    handle,
                    file.capability.clone(),
                    Piece::new(segment.local_offset, segment.length),
                    at,
                ));
            });
        }
        parts
    }

    /// Asks each block's iod whether it wants it (`DemoteOffer`, one per iod and file); a
    /// block split over iods is wanted only if every part is, and one of a file with no
    /// known layout is not.
    fn offer(&self, inner: &Arc<Inner>, keys: &[Key]) -> Vec<bool> {
        let mut wanted = vec![false; keys.len()];
        let mut groups: Groups<usize> = HashMap::new();
        for (position, key) in keys.iter().enumerate() {
            for (index, handle, capability, piece, _) in
                self.place_blocks(std::slice::from_ref(key))
            {
                wanted[position] = true;
                let group = groups
                    .entry((index, handle))
                    .or_insert_with(|| (capability, Vec::new(), Vec::new()));
                group.1.push(piece);
                group.2.push(position);
            }
        }
        for ((index, handle), (capability, pieces, positions)) in groups {
            let request = DemoteOffer {
                handle,
                capability,
                client_id: self.client_id,
                pieces,
            };
            match inner
                .iods
                .with(index, |connection| connection.call(&request))
            {
                Ok(reply) if reply.wanted.0.len() == positions.len() => {
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

    /// Sends `blocks` to their iods, one `Demote` per iod and file (the parts of each
    /// gathered from the blocks' bytes); returns (parts sent, parts that failed).
    fn send_demotes(&self, inner: &Arc<Inner>, blocks: &[(Key, Arc<Vec<u8>>)]) -> (u64, u64) {
        let keys: Vec<Key> = blocks.iter().map(|(key, _)| *key).collect();
        let mut groups: Groups<IoSlice<'_>> = HashMap::new();
        for (position, key) in keys.iter().enumerate() {
            let bytes = &blocks[position].1;
            for (index, handle, capability, piece, at) in
                self.place_blocks(std::slice::from_ref(key))
            {
                let length = usize::try_from(piece.length).expect("within a block");
                let group = groups
                    .entry((index, handle))
                    .or_insert_with(|| (capability, Vec::new(), Vec::new()));
                group.1.push(piece);
                group.2.push(IoSlice::new(&bytes[at..at + length]));
            }
        }
        let (mut sent, mut refused) = (0, 0);
        for ((index, handle), (capability, pieces, mut slices)) in groups {
            let count = pieces.len() as u64;
            let request = Demote {
                handle,
                capability,
                client_id: self.client_id,
                pieces,
            };
            match inner.iods.with_once(index, |connection| {
                connection.call_with_bulk(&request, &mut slices)
            }) {
                Ok(_) => sent += count,
                Err(err) => {
                    tracing::debug!("client cache: demote to iod {index} failed: {err}");
                    refused += count;
                }
            }
        }
        (sent, refused)
    }
}
