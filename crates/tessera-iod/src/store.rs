//! Local objects: one per handle, holding the server's share of the file in logical order,
//! kept by an [`ObjectStorage`] — in a server one file per handle in `DATA_DIR/objects/`
//! ([`FileStorage`]).
//!
//! Each request holds the object's extent lock over the bytes its pieces span — shared for
//! reads, exclusive for writes, the whole object for truncates — so a request is atomic on
//! this server: a reader sees all of a concurrent overlapping write or none of it. Pieces
//! that are adjacent in the object and consecutive in the request become one run; the
//! [`Planner`] then serves the runs one call each, in one io_uring batch, or by sieving
//! (Active Data Sieving). Overlapping pieces of one write apply in list order (the later
//! piece wins) under every plan. Every request is counted per direction for
//! `tessera status --servers`.

use std::collections::{HashMap, HashSet};
use std::io::{self, ErrorKind, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tessera_proto::limits::{check_cache_unit_bytes, HANDLES_LIVE_MAX, IOD_OPEN_OBJECTS_MAX};
use tessera_proto::metrics::{
    STORAGE_BYTES_MOVED, STORAGE_BYTES_WANTED, STORAGE_CALLS, STORAGE_PIECES, STORAGE_PLANS,
    STORAGE_REQUESTS,
};
use tessera_proto::{
    ErrorCode, Piece, RemoteError, ServerStatsReply, StatfsReply, StorageCounters, StoragePlan,
};

use crate::buffers::BufferPool;
use crate::cache::{Cache, CacheConfig, CacheError, Landing};
use crate::cost::{CostModel, Direction};
use crate::extent::ExtentLocks;
pub use crate::files::{FileStorage, OWNER_ONLY_DIRECTORY, OWNER_ONLY_FILE};
use crate::mapping::Mapping;
pub use crate::mapping::RESIDENCY_PAGES_MAX;
use crate::plan::{merge_runs, Decision, Planner, Residency};
use crate::run::Run;
use crate::storage::{is_no_space, read_full, write_full, Listed, ObjectStorage, StorageObject};
use crate::uring;

mod unified;

pub use unified::{
    default_cache_bytes, CachedRead, ServeMode, CACHE_BYTES_MIN, CACHE_RAM_DIVISOR,
    DIRTY_SHARE_DIVISOR, FLUSH_BATCH_BYTES, GRANT_SHARE_DIVISOR, WRITE_BACK_AGE, WRITE_BACK_TICK,
};

/// An open local object.
#[derive(Debug)]
struct Object<O> {
    file: O,
    /// Serialises overlapping requests on this object (see the module comment).
    extents: ExtentLocks,
    /// The mapping of the object's first bytes mapped reads share (see `KEPT_MAPPING_BYTES_MAX`).
    kept: Mutex<Option<Arc<Mapping>>>,
    /// The object's file opened again with `O_DIRECT`, for the unified cache's fills and
    /// write-backs (`None` once tried where it cannot be had).
    direct: std::sync::OnceLock<Option<std::fs::File>>,
}

/// What serving one request did at the storage layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Storage calls (a sieving read-modify-write counts two per chunk).
    pub calls: u32,
    /// Bytes moved to and from storage.
    pub storage_bytes: u64,
    /// The plan followed.
    pub plan: StoragePlan,
}

/// Running totals of one direction, for `ServerStats`; each record is also sent to the
/// process's metrics recorder (`tessera_storage_*`, labelled with the direction).
#[derive(Debug, Default)]
struct Counters {
    /// `read` or `write`: the `direction` label of the metrics.
    direction: &'static str,
    requests: AtomicU64,
    pieces: AtomicU64,
    calls: AtomicU64,
    bytes_wanted: AtomicU64,
    bytes_storage: AtomicU64,
    per_piece: AtomicU64,
    batched: AtomicU64,
    sieve: AtomicU64,
    mapped: AtomicU64,
}

impl Counters {
    fn new(direction: &'static str) -> Self {
        Self {
            direction,
            ..Self::default()
        }
    }

    /// Sends one request's figures to the metrics recorder (a no-op without one).
    fn export(&self, pieces: usize, wanted: u64, calls: u32, moved: u64, plan: &'static str) {
        let direction = self.direction;
        metrics::counter!(STORAGE_REQUESTS, "direction" => direction).increment(1);
        metrics::counter!(STORAGE_PIECES, "direction" => direction).increment(pieces as u64);
        metrics::counter!(STORAGE_CALLS, "direction" => direction).increment(u64::from(calls));
        metrics::counter!(STORAGE_BYTES_WANTED, "direction" => direction).increment(wanted);
        metrics::counter!(STORAGE_BYTES_MOVED, "direction" => direction).increment(moved);
        metrics::counter!(STORAGE_PLANS, "direction" => direction, "plan" => plan).increment(1);
    }

    fn record(&self, pieces: usize, wanted: u64, outcome: &Outcome) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.pieces.fetch_add(pieces as u64, Ordering::Relaxed);
        self.calls
            .fetch_add(u64::from(outcome.calls), Ordering::Relaxed);
        self.bytes_wanted.fetch_add(wanted, Ordering::Relaxed);
        self.bytes_storage
            .fetch_add(outcome.storage_bytes, Ordering::Relaxed);
        let plan = match outcome.plan {
            StoragePlan::Batched => &self.batched,
            StoragePlan::Sieve => &self.sieve,
            StoragePlan::PerPiece | StoragePlan::Auto => &self.per_piece,
        };
        plan.fetch_add(1, Ordering::Relaxed);
        let plan = match outcome.plan {
            StoragePlan::Auto => StoragePlan::PerPiece.name(),
            plan => plan.name(),
        };
        self.export(pieces, wanted, outcome.calls, outcome.storage_bytes, plan);
    }

    /// A read served from a mapping: no storage call, `mapped` bytes of the object in it.
    fn record_mapped(&self, pieces: usize, wanted: u64, mapped: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.pieces.fetch_add(pieces as u64, Ordering::Relaxed);
        self.bytes_wanted.fetch_add(wanted, Ordering::Relaxed);
        self.bytes_storage.fetch_add(mapped, Ordering::Relaxed);
        self.mapped.fetch_add(1, Ordering::Relaxed);
        self.export(pieces, wanted, 0, mapped, "mapped");
    }

    fn snapshot(&self) -> StorageCounters {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StorageCounters {
            requests: load(&self.requests),
            pieces: load(&self.pieces),
            calls: load(&self.calls),
            bytes_wanted: load(&self.bytes_wanted),
            bytes_storage: load(&self.bytes_storage),
            per_piece: load(&self.per_piece),
            batched: load(&self.batched),
            sieve: load(&self.sieve),
            mapped: load(&self.mapped),
        }
    }
}

/// The storage side of a request served in units ([`ObjectStore::serve_units`]).
#[derive(Debug)]
pub struct Units<'a, S: ObjectStorage> {
    store: &'a ObjectStore<S>,
    object: &'a Object<S::Object>,
    handle: u64,
    write: bool,
    requested: StoragePlan,
    outcome: Outcome,
}

impl<S: ObjectStorage> Units<'_, S> {
    /// Writes `data` to `pieces`, one unit of the request.
    pub fn write(&mut self, pieces: &[Piece], data: &[u8]) -> Result<(), RemoteError> {
        debug_assert!(self.write, "a read request writes no unit");
        if self.store.cache.is_some() {
            let outcome = self
                .store
                .cached_write(self.object, self.handle, pieces, data)?;
            self.add(outcome);
            return Ok(());
        }
        let runs = merge_runs(pieces);
        let decision = self
            .store
            .planner
            .plan(Direction::Write, &runs, self.requested);
        let outcome = write_runs(&self.object.file, &runs, data, &decision)
            .map_err(|err| self.store.io_error(self.handle, "write", &err))?;
        self.add(outcome);
        Ok(())
    }

    /// Reads `pieces` into `buffer`, one unit of the request.
    pub fn read(&mut self, pieces: &[Piece], buffer: &mut [u8]) -> Result<(), RemoteError> {
        debug_assert!(!self.write, "a write request reads no unit");
        if self.store.cache.is_some() {
            let outcome = self
                .store
                .cached_read_into(self.object, self.handle, pieces, buffer)?;
            self.add(outcome);
            return Ok(());
        }
        let runs = merge_runs(pieces);
        let decision = self
            .store
            .planner
            .plan(Direction::Read, &runs, self.requested);
        let outcome = read_runs(&self.object.file, &runs, buffer, &decision)
            .map_err(|err| self.store.io_error(self.handle, "read", &err))?;
        self.add(outcome);
        Ok(())
    }

    /// Totals the units; the plan reported is the last non-per-piece one.
    fn add(&mut self, outcome: Outcome) {
        self.outcome.calls += outcome.calls;
        self.outcome.storage_bytes += outcome.storage_bytes;
        if outcome.plan != StoragePlan::PerPiece {
            self.outcome.plan = outcome.plan;
        }
    }
}

/// Consecutive bytes of a list of slices, taken in order.
struct SliceCursor<'a> {
    slices: &'a [&'a [u8]],
    at: usize,
    skip: usize,
}

impl<'a> SliceCursor<'a> {
    /// The next `bytes` bytes, as slices (fewer if the list ends first).
    fn take(&mut self, mut bytes: usize) -> Vec<IoSlice<'a>> {
        let mut parts = Vec::new();
        while bytes > 0 && self.at < self.slices.len() {
            let rest = &self.slices[self.at][self.skip..];
            let step = rest.len().min(bytes);
            if step > 0 {
                parts.push(IoSlice::new(&rest[..step]));
            }
            bytes -= step;
            if step == rest.len() {
                self.at += 1;
                self.skip = 0;
            } else {
                self.skip += step;
            }
        }
        parts
    }
}

/// Writes all of `parts` at `offset`, `IOV_PIECES_MAX` slices a call at most (`pwritev` on a
/// file); returns the calls made.
fn pwritev_all(
    file: &impl StorageObject,
    mut parts: &mut [IoSlice<'_>],
    mut offset: u64,
) -> io::Result<u32> {
    let mut calls = 0;
    while !parts.is_empty() {
        let count = parts.len().min(tessera_proto::limits::IOV_PIECES_MAX);
        calls += 1;
        let written = match file.write_vectored_at(&parts[..count], offset) {
            Ok(written) => written,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if written == 0 {
            return Err(ErrorKind::WriteZero.into());
        }
        offset += written as u64;
        IoSlice::advance_slices(&mut parts, written);
    }
    Ok(calls)
}

// The small helpers below are `#[inline]`: the request paths calling them are generic over
// the storage, so they are compiled in the crate that picks the storage (the server binary),
// where a plain function of this crate could not be inlined as it was before.

/// Where `piece` ends (saturated: decoders refuse pieces past `u64::MAX` anyway).
#[inline]
fn piece_end(piece: &Piece) -> u64 {
    piece.offset.saturating_add(piece.length)
}

/// The object extent `[first offset, last end)` the runs span.
#[inline]
fn extent_of(runs: &[Run]) -> (u64, u64) {
    let start = runs.iter().map(|run| run.offset).min().unwrap_or(0);
    let end = runs.iter().map(Run::end).max().unwrap_or(0);
    (start, end)
}

#[inline]
fn length_of(run: &Run) -> usize {
    usize::try_from(run.length).expect("a run lies within one bulk buffer")
}

/// Offset of `run` inside a chunk starting at `chunk_start`.
#[inline]
fn position_in(run: &Run, chunk_start: u64) -> usize {
    usize::try_from(run.offset - chunk_start).expect("chunks are at most SIEVE_CHUNK_BYTES_MAX")
}

/// Sieving chunk buffers kept between requests.
pub const SIEVE_BUFFERS_KEPT: usize = 4;

/// Chunk buffers of finished sieving requests (a fresh buffer per request cost page faults
/// and zeroing the cost model does not price: see [`crate::buffers`]).
/// (Its buffers are never larger than a chunk, at most `SIEVE_CHUNK_BYTES_MAX`.)
static SIEVE_BUFFERS: BufferPool = BufferPool::new(SIEVE_BUFFERS_KEPT, usize::MAX);

/// The widest extent one mapped read maps ([`ObjectStore::read_mapped`]): address space, not
/// memory — pages are faulted in only as the copy reaches them.
pub const MAPPED_SPAN_MAX: u64 = 1 << 30;

/// Mapped reads within an object's first `KEPT_MAPPING_BYTES_MAX` bytes share one mapping of
/// them, kept while the object is open, so a read pays neither `mmap`/`munmap` nor, for pages
/// an earlier read touched, a page fault: 8 MiB reads of 64 KiB pieces spent a third of their
/// time there. Mapping past the end of the file is allowed; reads touch only bytes below the
/// size they read under the extent lock, which a truncate (holding the whole object) cannot
/// shrink meanwhile, so no access meets a page past the end.
pub const KEPT_MAPPING_BYTES_MAX: u64 = 1 << 30;

/// Kept mappings grow in steps of this, so a growing object is remapped seldom.
const KEPT_MAPPING_STEP: u64 = 64 << 20;

/// Address space all kept mappings of a server cover at once; past it, reads map their own
/// span per request (the page tables of kept mappings stay filled, so this bounds them too).
pub const KEPT_MAPPINGS_BYTES_MAX: u64 = 16 << 30;

/// The source of the zeros a mapped read returns past the end of an object.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Lets go of an extent a request holds, from any thread (the request's guard then releases
/// nothing): what a stalled one-sided push runs.
pub type Release = Box<dyn FnOnce() + Send>;

/// The objects of one I/O server, kept in `S` (by default files in a directory).
#[derive(Debug)]
pub struct ObjectStore<S: ObjectStorage = FileStorage> {
    storage: S,
    /// Open objects, at most `IOD_OPEN_OBJECTS_MAX`.
    open: Mutex<HashMap<u64, Arc<Object<S::Object>>>>,
    object_count: AtomicU64,
    /// Bytes the kept mappings of open objects cover, at most `KEPT_MAPPINGS_BYTES_MAX`.
    kept_bytes: Arc<AtomicU64>,
    planner: Planner,
    reads: Counters,
    writes: Counters,
    /// While an orphan sweep runs: the handles created since it started, which it must not
    /// remove ([`ObjectStore::sweep_orphans`]). `create` and the sweep's removals hold this
    /// lock, so a create is either recorded before a removal looks or runs after it.
    sweep: Mutex<Option<SweepGuard>>,
    /// How reads are served (`--serve`).
    serve: ServeMode,
    /// The unified cache (`ServeMode::Unified` only).
    cache: Option<Cache>,
    /// Held by the write-back that runs (one at a time).
    flushing: Mutex<()>,
    /// The unified cache may still try `O_DIRECT` (cleared, with one log line, at the first
    /// object whose storage refuses it).
    direct_io: std::sync::atomic::AtomicBool,
    /// Write-back steps and the bytes they wrote.
    flushes: AtomicU64,
    flushed_bytes: AtomicU64,
}

/// Handles created while a sweep runs, at most `IOD_SWEEP_CREATES_MAX`.
#[derive(Debug, Default)]
struct SweepGuard {
    created: HashSet<u64>,
    /// More creates than the set holds: the sweep can no longer tell, and stops removing.
    overflowed: bool,
}

/// Most creates an orphan sweep remembers; past it the sweep stops, removing nothing more.
pub const IOD_SWEEP_CREATES_MAX: usize = 1 << 16;

/// What an orphan sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Objects looked at (files named by a handle in the object directory).
    pub examined: u64,
    /// Handles of the objects removed, in the order removed.
    pub removed: Vec<u64>,
    /// Orphans kept because a create of their handle arrived during the sweep.
    pub kept_created: u64,
    /// Files in the object directory whose names are not handles (left alone).
    pub foreign: u64,
    /// The sweep stopped early: more creates than `IOD_SWEEP_CREATES_MAX` during it.
    pub stopped: bool,
}

impl ObjectStore<FileStorage> {
    /// Opens (creating if needed) the object directory under `data_directory`, planning
    /// storage calls with the default cost model (see [`ObjectStore::open_with`]).
    pub fn open(data_directory: &Path) -> io::Result<Self> {
        Self::open_with(data_directory, CostModel::default())
    }

    /// Opens the object directory under `data_directory`, planning storage calls with
    /// `model` (batched plans only where io_uring works; the reason is logged once if not).
    pub fn open_with(data_directory: &Path, model: CostModel) -> io::Result<Self> {
        Self::with_storage(FileStorage::open(data_directory)?, model)
    }

    /// The path of the object of `handle` (for tests and tools that look at the files).
    pub fn object_path(&self, handle: u64) -> PathBuf {
        self.storage.path(handle)
    }
}

impl<S: ObjectStorage> ObjectStore<S> {
    /// A store over `storage`, planning storage calls with `model` (batched plans only for
    /// file-backed storage where io_uring works; the reason is logged once if not).
    pub fn with_storage(storage: S, model: CostModel) -> io::Result<Self> {
        let count = storage.list()?.count() as u64;
        let batching = S::FILE_BACKED
            && match uring::available() {
                Ok(()) => true,
                Err(reason) => {
                    tracing::warn!(
                        "io_uring is unavailable ({reason}): batched storage plans fall back to one call per piece"
                    );
                    false
                }
            };
        Ok(Self {
            storage,
            open: Mutex::new(HashMap::new()),
            object_count: AtomicU64::new(count),
            kept_bytes: Arc::new(AtomicU64::new(0)),
            planner: Planner::new(model, batching),
            reads: Counters::new("read"),
            writes: Counters::new("write"),
            sweep: Mutex::new(None),
            serve: ServeMode::default(),
            cache: None,
            flushing: Mutex::new(()),
            direct_io: std::sync::atomic::AtomicBool::new(true),
            flushes: AtomicU64::new(0),
            flushed_bytes: AtomicU64::new(0),
        })
    }

    /// The store serving reads by `serve`; `Unified` needs `cache` (its budget and unit),
    /// the others take none. Start its write-back with [`ObjectStore::start_write_back`].
    pub fn with_serve(
        mut self,
        serve: ServeMode,
        cache: Option<CacheConfig>,
    ) -> Result<Self, CacheError> {
        self.cache = match (serve, cache) {
            (ServeMode::Unified, Some(config)) => Some(Cache::new(config)?),
            (ServeMode::Unified, None) => {
                Some(Cache::new(CacheConfig::new(default_cache_bytes()))?)
            }
            (_, _) => None,
        };
        if let Some(stats) = self.cache_stats() {
            tracing::info!(
                "unified cache of {} bytes, {} of them Ready (registered by {:?} for the server's life)",
                stats.budget_bytes,
                stats.ready_bytes,
                stats.ready_registrar
            );
        }
        self.serve = serve;
        Ok(self)
    }

    /// The storage planner.
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// Counters of every request served since start, and the model in use.
    pub fn stats(&self) -> ServerStatsReply {
        ServerStatsReply {
            reads: self.reads.snapshot(),
            writes: self.writes.snapshot(),
            io_uring: self.planner.batching(),
            model: self.planner.model().describe(),
            cache: self.cache_counters(),
        }
    }

    /// The storage's capacity and the objects' sizes, for `Statfs` (`tessera df`).
    pub fn statfs(&self) -> Result<StatfsReply, RemoteError> {
        let usage = self.storage.usage().map_err(|err| {
            RemoteError::new(
                ErrorCode::Io,
                format!("measuring {} failed: {err}", self.storage.location()),
            )
        })?;
        Ok(StatfsReply {
            total_bytes: usage.total_bytes,
            free_bytes: usage.free_bytes,
            available_bytes: usage.available_bytes,
            objects: usage.objects,
            object_bytes: usage.object_bytes,
            object_allocated_bytes: usage.object_allocated_bytes,
        })
    }

    /// Objects stored.
    pub fn object_count(&self) -> u64 {
        self.object_count.load(Ordering::Relaxed)
    }

    /// The storage underneath.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The reply for a storage error: `NoSpace` for a full disk (or quota), else `Io`; both
    /// name the object and where the objects are.
    fn io_error(&self, handle: u64, what: &str, err: &io::Error) -> RemoteError {
        let code = if is_no_space(err) {
            ErrorCode::NoSpace
        } else {
            ErrorCode::Io
        };
        RemoteError::new(
            code,
            format!(
                "{what} of object {handle:#x} in {} failed: {err}",
                self.storage.location()
            ),
        )
    }

    fn unknown(handle: u64) -> RemoteError {
        RemoteError::new(
            ErrorCode::UnknownHandle,
            format!("no object for file handle {handle:#x} on this server"),
        )
    }

    fn object(&self, handle: u64) -> Result<Arc<Object<S::Object>>, RemoteError> {
        let mut open = self.open.lock().expect("object table lock");
        if let Some(object) = open.get(&handle) {
            return Ok(object.clone());
        }
        let file = match self.storage.open(handle) {
            Ok(file) => file,
            Err(err) if err.kind() == ErrorKind::NotFound => return Err(Self::unknown(handle)),
            Err(err) => return Err(self.io_error(handle, "open", &err)),
        };
        // Before any grant of the object (every request opens it first). Where the cache
        // still holds units of another size, those stay until dropped: the bytes are right.
        if let Err(error) = self.apply_cache_unit(handle) {
            tracing::warn!("{}", error.message);
        }
        if open.len() >= IOD_OPEN_OBJECTS_MAX {
            // Evict an object no request holds, so every request on one object shares one
            // lock; if all are in use the table grows past the limit by at most the requests in
            // flight (`SERVER_REQUESTS_INFLIGHT_MAX`).
            let idle = open
                .iter()
                .find(|(_, object)| Arc::strong_count(object) == 1)
                .map(|(handle, _)| *handle);
            if let Some(victim) = idle {
                open.remove(&victim);
            }
        }
        let object = Arc::new(Object {
            file,
            extents: ExtentLocks::default(),
            kept: Mutex::new(None),
            direct: std::sync::OnceLock::new(),
        });
        open.insert(handle, object.clone());
        Ok(object)
    }

    /// Creates the empty object of `handle`, recording `cache_unit_bytes` (0: the cache's
    /// default) as its unit in the unified cache. An existing object is left as it is and the
    /// create refused with `Exists`: a create never empties or replaces an object, whoever
    /// asks. (An orphan of a create the mds never committed makes the mds, which may hand its
    /// handle out again after a crash, take a new handle; the orphan sweep removes it.)
    pub fn create(&self, handle: u64, cache_unit_bytes: u32) -> Result<(), RemoteError> {
        check_cache_unit_bytes(u64::from(cache_unit_bytes)).map_err(|reason| {
            RemoteError::new(
                ErrorCode::InvalidArgument,
                format!("object {handle:#x}: {reason}"),
            )
        })?;
        // Held across the create, so a sweep that runs meanwhile sees the object recorded
        // before it looks at it, or never sees it.
        let mut sweep = self.sweep.lock().unwrap_or_else(PoisonError::into_inner);
        match self.storage.create(handle) {
            Ok(()) => {
                self.object_count.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {
                return Err(RemoteError::new(
                    ErrorCode::Exists,
                    format!(
                        "object {handle:#x} exists in {} and was left as it is: a create never empties an object",
                        self.storage.location()
                    ),
                ));
            }
            Err(err) => return Err(self.io_error(handle, "create", &err)),
        }
        if let Some(guard) = sweep.as_mut() {
            if guard.created.len() < IOD_SWEEP_CREATES_MAX {
                guard.created.insert(handle);
            } else {
                guard.overflowed = true;
            }
        }
        drop(sweep);
        self.storage
            .set_cache_unit(handle, cache_unit_bytes)
            .map_err(|err| self.io_error(handle, "recording the cache unit", &err))
    }

    /// Removes the object of `handle`.
    pub fn remove(&self, handle: u64) -> Result<(), RemoteError> {
        self.forget(handle)?;
        self.open.lock().expect("object table lock").remove(&handle);
        match self.storage.remove(handle) {
            Ok(()) => {
                self.object_count.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
            Err(err) if err.kind() == ErrorKind::NotFound => Err(Self::unknown(handle)),
            Err(err) => Err(self.io_error(handle, "remove", &err)),
        }
    }

    /// Removes the objects of this server that no file owns. `live_of` asks the mds which of a
    /// batch of handles (at most `HANDLES_LIVE_MAX`) are live — files in the namespace or
    /// creates in flight — and every other object listed is removed, unless a create of its
    /// handle arrived since the sweep started (the mds may hand a handle out again after a
    /// restart). Objects made after the directory was read are never looked at. One sweep at
    /// a time; a `live_of` error stops the sweep (what it removed stays removed).
    pub fn sweep_orphans(
        &self,
        mut live_of: impl FnMut(&[u64]) -> Result<Vec<u64>, RemoteError>,
    ) -> Result<SweepReport, RemoteError> {
        {
            let mut sweep = self.sweep.lock().unwrap_or_else(PoisonError::into_inner);
            if sweep.is_some() {
                return Err(RemoteError::new(
                    ErrorCode::Busy,
                    format!("an orphan sweep of {} is running", self.storage.location()),
                ));
            }
            *sweep = Some(SweepGuard::default());
        }
        let result = self.sweep_pages(&mut live_of);
        *self.sweep.lock().unwrap_or_else(PoisonError::into_inner) = None;
        result
    }

    fn sweep_pages(
        &self,
        live_of: &mut impl FnMut(&[u64]) -> Result<Vec<u64>, RemoteError>,
    ) -> Result<SweepReport, RemoteError> {
        let listing_error = |err: io::Error| {
            RemoteError::new(
                ErrorCode::Io,
                format!("listing {} failed: {err}", self.storage.location()),
            )
        };
        let mut report = SweepReport::default();
        let mut entries = self.storage.list().map_err(listing_error)?;
        loop {
            let mut batch = Vec::with_capacity(HANDLES_LIVE_MAX);
            for entry in entries.by_ref() {
                match entry.map_err(listing_error)? {
                    Listed::Object(handle) => batch.push(handle),
                    Listed::Foreign => report.foreign += 1,
                }
                if batch.len() == HANDLES_LIVE_MAX {
                    break;
                }
            }
            if batch.is_empty() {
                return Ok(report);
            }
            report.examined += batch.len() as u64;
            let live: HashSet<u64> = live_of(&batch)?.into_iter().collect();
            for handle in batch.into_iter().filter(|handle| !live.contains(handle)) {
                let sweep = self.sweep.lock().unwrap_or_else(PoisonError::into_inner);
                let guard = sweep.as_ref().expect("set while the sweep runs");
                if guard.overflowed {
                    report.stopped = true;
                    return Ok(report);
                }
                if guard.created.contains(&handle) {
                    report.kept_created += 1;
                    continue;
                }
                // Under the sweep lock: no create of this handle can slip in between.
                match self.remove(handle) {
                    Ok(()) => report.removed.push(handle),
                    Err(error) if error.code == ErrorCode::UnknownHandle => {}
                    Err(error) => return Err(error),
                }
            }
        }
    }

    /// Whether a stat of an object may wait (for writes under way and a write-back to disk):
    /// with a unified cache.
    pub fn stat_may_wait(&self) -> bool {
        self.cache.is_some()
    }

    /// Size and mtime (ns since the epoch) of the object of `handle`.
    pub fn stat(&self, handle: u64) -> Result<(u64, u64), RemoteError> {
        let object = self.object(handle)?;
        if self.cache.is_some() {
            let whole = object.extents.lock(0, u64::MAX, false);
            self.flush_object(handle, &whole)?;
        }
        let metadata = object
            .file
            .metadata()
            .map_err(|err| self.io_error(handle, "stat", &err))?;
        Ok((metadata.size, metadata.mtime_ns))
    }

    /// Sets the size of the object of `handle`.
    pub fn truncate(&self, handle: u64, size: u64) -> Result<(), RemoteError> {
        let object = self.object(handle)?;
        let guard = object.extents.lock(0, u64::MAX, true);
        if self.cache.is_some() {
            self.flush_object(handle, &guard)?;
            self.forget(handle)?;
            self.apply_cache_unit(handle)?;
        }
        object
            .file
            .set_size(size)
            .map_err(|err| self.io_error(handle, "truncate", &err))
    }

    /// Flushes the object of `handle` to stable storage.
    pub fn sync(&self, handle: u64) -> Result<(), RemoteError> {
        let object = self.object(handle)?;
        if self.cache.is_some() {
            let whole = object.extents.lock(0, u64::MAX, false);
            self.flush_object(handle, &whole)?;
        }
        object
            .file
            .sync()
            .map_err(|err| self.io_error(handle, "sync", &err))
    }

    /// Writes `data` to `pieces` (back to back in `data`) by the plan `requested`
    /// ([`StoragePlan::Auto`]: the cost model chooses).
    pub fn write(
        &self,
        handle: u64,
        pieces: &[Piece],
        data: &[u8],
        requested: StoragePlan,
    ) -> Result<Outcome, RemoteError> {
        if self.cache.is_some() {
            return self.serve_cached(handle, pieces, Direction::Write, |object| {
                self.cached_write(object, handle, pieces, data)
            });
        }
        self.serve(
            handle,
            pieces,
            data.len(),
            Direction::Write,
            requested,
            |file, runs, decision| write_runs(file, runs, data, decision),
        )
    }

    /// [`ObjectStore::write`] of data received into `landing`, made by
    /// [`ObjectStore::land`] for these `pieces`: its units go into the cache as they are.
    pub fn write_landed(
        &self,
        pieces: &[Piece],
        mut landing: Landing,
    ) -> Result<Outcome, RemoteError> {
        let handle = landing.handle();
        self.serve_cached(handle, pieces, Direction::Write, |object| {
            self.landed_write(object, &mut landing)
        })
    }

    /// [`ObjectStore::write`] with the data in `slices` (back to back), as a client's shared
    /// arena holds it: one call per run writes straight from the slices (`pwritev`); sieving
    /// and batches work on one contiguous copy.
    pub fn write_gathered(
        &self,
        handle: u64,
        pieces: &[Piece],
        slices: &[&[u8]],
        requested: StoragePlan,
    ) -> Result<Outcome, RemoteError> {
        if self.cache.is_some() {
            return self.write(handle, pieces, &slices.concat(), requested);
        }
        let bytes = slices.iter().map(|slice| slice.len()).sum();
        self.serve(
            handle,
            pieces,
            bytes,
            Direction::Write,
            requested,
            |file, runs, decision| match decision.plan {
                StoragePlan::PerPiece | StoragePlan::Auto => {
                    write_runs_gathered(file, runs, slices)
                }
                StoragePlan::Sieve | StoragePlan::Batched => {
                    write_runs(file, runs, &slices.concat(), decision)
                }
            },
        )
    }

    /// Reads `pieces` into `buffer`, back to back, by the plan `requested`; bytes past the
    /// end of the object are zeros.
    pub fn read(
        &self,
        handle: u64,
        pieces: &[Piece],
        buffer: &mut [u8],
        requested: StoragePlan,
    ) -> Result<Outcome, RemoteError> {
        if self.cache.is_some() {
            return self.serve_cached(handle, pieces, Direction::Read, |object| {
                self.cached_read_into(object, handle, pieces, buffer)
            });
        }
        let bytes = buffer.len();
        self.serve(
            handle,
            pieces,
            bytes,
            Direction::Read,
            requested,
            |file, runs, decision| read_runs(file, runs, buffer, decision),
        )
    }

    /// The object if it is open already: never opens it (a storage call the async worker
    /// must not make).
    fn open_object(&self, handle: u64) -> Option<Arc<Object<S::Object>>> {
        self.open
            .lock()
            .expect("object table lock")
            .get(&handle)
            .cloned()
    }

    /// A read served on the caller's thread, without blocking: only when the object is
    /// open, no cache is configured, the pieces merge into at most [`READ_NOW_RUNS_MAX`] runs
    /// of a kernel file, their extent can be held at once, and every byte is in the page
    /// cache (`preadv2` with `RWF_NOWAIT`). `None` otherwise, and the caller reads on a
    /// blocking thread ([`ObjectStore::read`]), which may then read again what was read here:
    /// reads change nothing. An async worker serves a cached read so without handing it to
    /// another thread and back, which on a loaded host cost reads ~15 % (`bench views`).
    pub fn read_now(
        &self,
        handle: u64,
        pieces: &[Piece],
        buffer: &mut [u8],
    ) -> Option<Result<Outcome, RemoteError>> {
        if self.cache.is_some() {
            return None;
        }
        let object = self.open_object(handle)?;
        let file = object.file.as_file()?;
        let runs = merge_runs(pieces);
        if runs.len() > READ_NOW_RUNS_MAX {
            return None;
        }
        let (start, end) = extent_of(&runs);
        let guard = object.extents.try_lock(start, end, false)?;
        for run in &runs {
            let target = &mut buffer[run.data..run.data + length_of(run)];
            if !read_cached_now(file, target, run.offset)? {
                return None;
            }
        }
        drop(guard);
        let outcome = Outcome {
            calls: u32::try_from(runs.len()).expect("at most READ_NOW_RUNS_MAX"),
            storage_bytes: buffer.len() as u64,
            plan: StoragePlan::PerPiece,
        };
        self.reads
            .record(pieces.len(), buffer.len() as u64, &outcome);
        Some(Ok(outcome))
    }

    /// A read sent straight from the object's page-cache pages on the caller's thread,
    /// without blocking and without a request buffer: only in the `mmap` serve mode, when the
    /// object is open, the pieces lie below its end within [`MAPPED_SPAN_MAX`], their extent
    /// can be held at once (shared), and `mincore` finds every page of every run cached. Any
    /// number of runs: they cost no system call each (one `writev` takes up to 1024 slices,
    /// and what it does not take is copied), and their pages are asked about together.
    ///
    /// `send` gets the outcome and the pieces' bytes in request order as slices of a
    /// read-only mapping of the object; while it runs, the extent is held, so no write
    /// changes them, and it must hand them to the kernel (a `writev` into a socket copies
    /// them) or copy them before it returns. `None` otherwise:
    /// the caller reads through a buffer ([`ObjectStore::read_now`], [`ObjectStore::read`]).
    /// This saves the copy into a request buffer: over TCP a cached byte is then copied once
    /// on the server, into the socket.
    ///
    /// A page `mincore` found cached may be evicted before `send` copies it; the copy then
    /// waits for the disk on the caller's thread. That race needs memory pressure between
    /// two system calls, and costs one wait, never wrong bytes.
    pub fn read_mapped_now<R>(
        &self,
        handle: u64,
        pieces: &[Piece],
        send: impl FnOnce(&Outcome, &[IoSlice<'_>]) -> R,
    ) -> Option<R> {
        if self.serve != ServeMode::Mmap || self.cache.is_some() {
            return None;
        }
        let object = self.open_object(handle)?;
        let file = object.file.as_file()?;
        let runs = merge_runs(pieces);
        if runs.is_empty() {
            return None;
        }
        let (start, end) = extent_of(&runs);
        if end - start > MAPPED_SPAN_MAX {
            return None;
        }
        let guard = object.extents.try_lock(start, end, false)?;
        let size = file.metadata().ok()?.len();
        if end > size {
            return None;
        }
        let mapping = self.mapping_for(&object, file, start, end).ok()?;
        let ranges = runs
            .iter()
            .map(|run| (run.offset, run.offset + length_of(run) as u64));
        if !mapping.all_cached(ranges).ok()? {
            return None;
        }
        // SAFETY: the mapping covers [start, end), all below `size`, and the extent is held
        // until the slices are dropped. `send` gives the bytes to the kernel.
        let slices = unsafe { mapped_slices(Some(&mapping), pieces, size) };
        let bytes: u64 = pieces.iter().map(|piece| piece.length).sum();
        // As a one-sided mapped read: no storage call, counted as `mapped`.
        let outcome = Outcome {
            calls: 0,
            storage_bytes: bytes,
            plan: StoragePlan::PerPiece,
        };
        let sent = send(&outcome, &slices);
        drop(slices);
        drop(mapping);
        drop(guard);
        self.reads.record_mapped(pieces.len(), bytes, bytes);
        Some(sent)
    }

    /// [`ObjectStore::serve`] through the unified cache: hold the extent the pieces span
    /// (exclusive for writes), run `execute` on the object, count the outcome.
    fn serve_cached(
        &self,
        handle: u64,
        pieces: &[Piece],
        direction: Direction,
        execute: impl FnOnce(&Object<S::Object>) -> Result<Outcome, RemoteError>,
    ) -> Result<Outcome, RemoteError> {
        let object = self.object(handle)?;
        let (start, end) = extent_of(&merge_runs(pieces));
        let (exclusive, counters) = match direction {
            Direction::Write => (true, &self.writes),
            Direction::Read => (false, &self.reads),
        };
        let guard = object.extents.lock(start, end, exclusive);
        let outcome = execute(&object)?;
        drop(guard);
        let wanted = pieces.iter().map(|piece| piece.length).sum();
        counters.record(pieces.len(), wanted, &outcome);
        Ok(outcome)
    }

    /// The path both directions share: merge the pieces into runs, plan them, hold the
    /// extent they span (exclusive for writes), run `execute`, count the outcome.
    fn serve(
        &self,
        handle: u64,
        pieces: &[Piece],
        bytes: usize,
        direction: Direction,
        requested: StoragePlan,
        execute: impl FnOnce(&S::Object, &[Run], &Decision) -> io::Result<Outcome>,
    ) -> Result<Outcome, RemoteError> {
        debug_assert_eq!(pieces.iter().map(|p| p.length).sum::<u64>(), bytes as u64);
        let object = self.object(handle)?;
        let runs = merge_runs(pieces);
        let (start, end) = extent_of(&runs);
        let residency = if Planner::wants_residency(direction, &runs, requested) {
            self.residency(&object, start, end)
        } else {
            Residency::Cached
        };
        let decision = self
            .planner
            .plan_with(direction, &runs, requested, residency);
        let (exclusive, what, counters) = match direction {
            Direction::Write => (true, "write", &self.writes),
            Direction::Read => (false, "read", &self.reads),
        };
        let guard = object.extents.lock(start, end, exclusive);
        let outcome = execute(&object.file, &runs, &decision)
            .map_err(|err| self.io_error(handle, what, &err))?;
        drop(guard);
        counters.record(pieces.len(), bytes as u64, &outcome);
        Ok(outcome)
    }

    /// Serves one request in units, for a transfer pipelined with storage: `drive` gets a
    /// [`Units`] through which it serves each unit's pieces (a sub-list of `pieces`, cut at
    /// unit boundaries) as the unit's data arrives or is wanted. The extent of the whole
    /// request is held throughout, so the request stays atomic on this server; each unit is
    /// planned on its own.
    pub fn serve_units(
        &self,
        handle: u64,
        pieces: &[Piece],
        write: bool,
        requested: StoragePlan,
        drive: impl FnOnce(&mut Units<'_, S>) -> Result<(), RemoteError>,
    ) -> Result<Outcome, RemoteError> {
        let object = self.object(handle)?;
        let (start, end) = extent_of(&merge_runs(pieces));
        let guard = object.extents.lock(start, end, write);
        let mut units = Units {
            store: self,
            object: &object,
            handle,
            write,
            requested,
            outcome: Outcome {
                calls: 0,
                storage_bytes: 0,
                plan: StoragePlan::PerPiece,
            },
        };
        drive(&mut units)?;
        let outcome = units.outcome;
        drop(guard);
        let bytes = pieces.iter().map(|piece| piece.length).sum();
        let counters = if write { &self.writes } else { &self.reads };
        counters.record(pieces.len(), bytes, &outcome);
        Ok(outcome)
    }

    /// Serves a one-sided read with no buffer and no storage call: maps the bytes `pieces`
    /// span read-only (the object's page-cache pages themselves), holds their extent shared,
    /// and hands `push` the pieces' bytes in request order as slices of the mapping (bytes past
    /// the end of the object as zeros), so the data reaches the client in one copy. `None`
    /// when the extent is wider than [`MAPPED_SPAN_MAX`] or the object is not a file
    /// ([`StorageObject::as_file`]): the caller reads through buffers.
    ///
    /// `push` also gets a way to let go of the extent early, from any thread: a push into a
    /// client's memory that stalls past its deadline has it called, so no writer of the object
    /// waits on that client, while the push still reads the (mapped) bytes until it ends.
    pub fn read_mapped(
        &self,
        handle: u64,
        pieces: &[Piece],
        push: impl FnOnce(&[IoSlice<'_>], Option<Release>) -> Result<(), RemoteError>,
    ) -> Result<Option<Outcome>, RemoteError> {
        match self.serve {
            ServeMode::Normal => return Ok(None),
            ServeMode::Unified => {
                // Pinned bytes never change (a write copies the unit first): no extent need
                // be held while they are pushed.
                let cached = self.read_pinned(handle, pieces)?;
                push(&cached.slices(handle, pieces)?, None)?;
                return Ok(Some(cached.outcome));
            }
            ServeMode::Mmap => {}
        }
        let wanted: u64 = pieces.iter().map(|piece| piece.length).sum();
        let present = pieces.iter().filter(|piece| piece.length > 0);
        let start = present.clone().map(|piece| piece.offset).min().unwrap_or(0);
        let end = present.map(piece_end).max().unwrap_or(0);
        if end - start > MAPPED_SPAN_MAX {
            return Ok(None);
        }
        let object = self.object(handle)?;
        let Some(file) = object.file.as_file() else {
            return Ok(None);
        };
        let guard = object.extents.lock(start, end, false);
        let size = file
            .metadata()
            .map_err(|err| self.io_error(handle, "stat", &err))?
            .len();
        let mapped_end = end.min(size);
        let mapping = if mapped_end > start {
            Some(
                self.mapping_for(&object, file, start, mapped_end)
                    .map_err(|err| self.io_error(handle, "mmap", &err))?,
            )
        } else {
            None
        };
        // SAFETY: the mapping covers [start, mapped_end), the bytes below `size`, and is
        // kept until the slices are dropped; the extent is held until then too, unless `push`
        // lets it go early, after which it only hands the bytes to the kernel
        // (process_vm_writev), which copies whatever they are then and never faults on a
        // page a truncate took away (the copy ends short).
        let slices = unsafe { mapped_slices(mapping.as_deref(), pieces, size) };
        let held = guard.id();
        let extent_of = Arc::clone(&object);
        let release: Release = Box::new(move || extent_of.extents.revoke(held));
        push(&slices, Some(release))?;
        drop(slices);
        drop(mapping);
        drop(guard);
        let mapped_bytes = mapped_end.saturating_sub(start);
        self.reads.record_mapped(pieces.len(), wanted, mapped_bytes);
        Ok(Some(Outcome {
            calls: 0,
            storage_bytes: mapped_bytes,
            plan: StoragePlan::PerPiece,
        }))
    }

    /// Whether most of the pages of object bytes `[start, end)` are missing from the page
    /// cache, by `mincore` over a mapping of them (at most the first
    /// [`RESIDENCY_PAGES_MAX`] pages are asked about). What cannot be asked counts as cached.
    fn residency(&self, object: &Object<S::Object>, start: u64, end: u64) -> Residency {
        let Some(file) = object.file.as_file() else {
            return Residency::Cached;
        };
        let Ok(metadata) = file.metadata() else {
            return Residency::Cached;
        };
        let end = end.min(metadata.len());
        if end <= start {
            return Residency::Cached;
        }
        let absent = self
            .mapping_for(object, file, start, end)
            .and_then(|mapping| mapping.absent_pages(start, end));
        match absent {
            Ok((absent, asked)) if absent * 2 > asked => Residency::Cold,
            _ => Residency::Cached,
        }
    }

    /// Bytes the kept mappings of open objects cover now.
    pub fn kept_mapping_bytes(&self) -> u64 {
        self.kept_bytes.load(Ordering::Relaxed)
    }

    /// A mapping of file bytes `[start, end)` of `object` (whose file is `file`): its kept
    /// mapping (made or grown here) when they lie in the first `KEPT_MAPPING_BYTES_MAX` bytes
    /// and the server's budget allows, else one of just that span for this request.
    fn mapping_for(
        &self,
        object: &Object<S::Object>,
        file: &std::fs::File,
        start: u64,
        end: u64,
    ) -> io::Result<Arc<Mapping>> {
        if end <= KEPT_MAPPING_BYTES_MAX {
            let mut kept = object.kept.lock().expect("kept mapping lock");
            if let Some(mapping) = kept.as_ref().filter(|mapping| mapping.covers(start, end)) {
                return Ok(Arc::clone(mapping));
            }
            let length = end
                .next_multiple_of(KEPT_MAPPING_STEP)
                .min(KEPT_MAPPING_BYTES_MAX);
            // The mapping it replaces gives its bytes back when its last reader is done.
            let before = self.kept_bytes.fetch_add(length, Ordering::Relaxed);
            if before + length <= KEPT_MAPPINGS_BYTES_MAX {
                match Mapping::new(file, 0, length) {
                    Ok(mapping) => {
                        let mapping = Arc::new(mapping.kept(Arc::clone(&self.kept_bytes)));
                        *kept = Some(Arc::clone(&mapping));
                        return Ok(mapping);
                    }
                    Err(err) => {
                        self.kept_bytes.fetch_sub(length, Ordering::Relaxed);
                        return Err(err);
                    }
                }
            }
            self.kept_bytes.fetch_sub(length, Ordering::Relaxed);
        }
        Mapping::new(file, start, end - start).map(Arc::new)
    }
}

/// One `pwritev` (at most `IOV_PIECES_MAX` slices a call) per run, from `slices`.
fn write_runs_gathered(
    file: &impl StorageObject,
    runs: &[Run],
    slices: &[&[u8]],
) -> io::Result<Outcome> {
    let mut cursor = SliceCursor {
        slices,
        at: 0,
        skip: 0,
    };
    let mut calls = 0u32;
    for run in runs {
        let mut parts = cursor.take(length_of(run));
        calls += pwritev_all(file, &mut parts, run.offset)?;
    }
    Ok(Outcome {
        calls,
        storage_bytes: runs.iter().map(|run| run.length).sum(),
        plan: StoragePlan::PerPiece,
    })
}

fn write_runs(
    file: &impl StorageObject,
    runs: &[Run],
    data: &[u8],
    decision: &Decision,
) -> io::Result<Outcome> {
    let wanted: u64 = runs.iter().map(|run| run.length).sum();
    let calls = u32::try_from(runs.len()).expect("runs are bounded by request_pieces_max");
    let direct =
        |run: &Run| write_full(file, &data[run.data..run.data + length_of(run)], run.offset);
    let plan = match (decision.plan, file.as_file()) {
        (StoragePlan::Batched, Some(file)) => {
            uring::write(file, runs, data)?;
            StoragePlan::Batched
        }
        (StoragePlan::Sieve, _) => return sieve_write(file, runs, data, decision),
        // A batch needs a kernel file; without one the runs go one call each.
        (StoragePlan::Batched, None) => {
            runs.iter().try_for_each(direct)?;
            StoragePlan::PerPiece
        }
        (plan @ (StoragePlan::PerPiece | StoragePlan::Auto), _) => {
            runs.iter().try_for_each(direct)?;
            plan
        }
    };
    Ok(Outcome {
        calls,
        storage_bytes: wanted,
        plan,
    })
}

/// Most runs [`ObjectStore::read_now`] reads on the caller's thread.
pub const READ_NOW_RUNS_MAX: usize = 16;

/// The pieces' bytes in request order as slices: inside `mapping` below `size`, of `ZEROS`
/// past it, adjacent ones merged. The bytes are only ever handed to the kernel (a `writev`
/// into a socket, `process_vm_writev`), never read here.
///
/// # Safety
/// `mapping` must cover the pieces' bytes below `size`, and the object must not shrink below
/// `size` while the slices live: the caller holds the extent the pieces span (a truncate
/// locks the whole object). A kept mapping may reach past the end of the file; no byte there
/// is handed out.
unsafe fn mapped_slices<'m>(
    mapping: Option<&'m Mapping>,
    pieces: &[Piece],
    size: u64,
) -> Vec<IoSlice<'m>> {
    let mut slices: Vec<(*const u8, usize)> = Vec::with_capacity(pieces.len());
    let mut add = |pointer: *const u8, length: usize| match slices.last_mut() {
        Some(last) if last.0.wrapping_add(last.1) == pointer && pointer != ZEROS.as_ptr() => {
            last.1 += length;
        }
        _ => slices.push((pointer, length)),
    };
    for piece in pieces {
        let inside_end = piece_end(piece).min(size);
        if let (Some(mapping), true) = (mapping, piece.offset < inside_end) {
            let (pointer, length) = mapping.range(piece.offset, inside_end - piece.offset);
            add(pointer, length);
        }
        let mut zeros = piece_end(piece) - piece.offset.max(inside_end);
        while zeros > 0 {
            let step = zeros.min(ZEROS.len() as u64);
            add(
                ZEROS.as_ptr(),
                usize::try_from(step).expect("at most ZEROS.len()"),
            );
            zeros -= step;
        }
    }
    slices
        .into_iter()
        .map(|(pointer, length)| {
            // SAFETY: each (pointer, length) lies inside `mapping`, which the slices borrow,
            // below a size the caller holds steady, or inside the static ZEROS.
            IoSlice::new(unsafe { std::slice::from_raw_parts(pointer, length) })
        })
        .collect()
}

/// Fills `target` from `offset` of `file` only from the page cache: `Some(true)` when all of
/// it was there, `Some(false)` when some was not (or the file ends first, which the blocking
/// read zero-fills), `None` where `RWF_NOWAIT` is not supported.
fn read_cached_now(file: &std::fs::File, target: &mut [u8], offset: u64) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let mut done = 0;
    while done < target.len() {
        let rest = &mut target[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let at = libc::off_t::try_from(offset + done as u64).ok()?;
        // SAFETY: one iovec over `rest`, which is valid for writes of its length and lives
        // through the call; the descriptor is the open file's.
        let read =
            unsafe { libc::preadv2(file.as_raw_fd(), &raw const iov, 1, at, libc::RWF_NOWAIT) };
        match read {
            0 => return Some(false),
            n if n > 0 => done += usize::try_from(n).expect("positive"),
            _ => {
                let error = std::io::Error::last_os_error();
                return match error.raw_os_error() {
                    Some(libc::EAGAIN) => Some(false),
                    Some(libc::EINTR) => continue,
                    _ => None,
                };
            }
        }
    }
    Some(true)
}

fn read_runs(
    file: &impl StorageObject,
    runs: &[Run],
    buffer: &mut [u8],
    decision: &Decision,
) -> io::Result<Outcome> {
    let wanted: u64 = runs.iter().map(|run| run.length).sum();
    let calls = u32::try_from(runs.len()).expect("runs are bounded by request_pieces_max");
    let direct = |buffer: &mut [u8]| -> io::Result<()> {
        for run in runs {
            read_full(
                file,
                &mut buffer[run.data..run.data + length_of(run)],
                run.offset,
            )?;
        }
        Ok(())
    };
    let plan = match (decision.plan, file.as_file()) {
        (StoragePlan::Batched, Some(file)) => {
            uring::read(file, runs, buffer)?;
            StoragePlan::Batched
        }
        (StoragePlan::Sieve, _) => return sieve_read(file, runs, buffer, decision),
        // A batch needs a kernel file; without one the runs go one call each.
        (StoragePlan::Batched, None) => {
            direct(buffer)?;
            StoragePlan::PerPiece
        }
        (plan @ (StoragePlan::PerPiece | StoragePlan::Auto), _) => {
            direct(buffer)?;
            plan
        }
    };
    Ok(Outcome {
        calls,
        storage_bytes: wanted,
        plan,
    })
}

/// Reads each chunk of several runs with one call into a chunk buffer and copies the runs
/// out; a chunk of one run is read directly.
fn sieve_read(
    file: &impl StorageObject,
    runs: &[Run],
    buffer: &mut [u8],
    decision: &Decision,
) -> io::Result<Outcome> {
    let mut chunk_buffer = SIEVE_BUFFERS.take(0);
    let (mut calls, mut storage_bytes) = (0u32, 0u64);
    for chunk in &decision.chunks {
        let members = &decision.order[chunk.members.clone()];
        calls += 1;
        if let [only] = members {
            let run = &runs[*only];
            read_full(
                file,
                &mut buffer[run.data..run.data + length_of(run)],
                run.offset,
            )?;
            storage_bytes += run.length;
            continue;
        }
        let bytes =
            usize::try_from(chunk.bytes()).expect("chunks are at most SIEVE_CHUNK_BYTES_MAX");
        chunk_buffer.set_len(bytes);
        let chunk_buffer = &mut *chunk_buffer;
        read_full(file, chunk_buffer, chunk.start)?;
        storage_bytes += chunk.bytes();
        for &index in members {
            let run = &runs[index];
            let from = position_in(run, chunk.start);
            buffer[run.data..run.data + length_of(run)]
                .copy_from_slice(&chunk_buffer[from..from + length_of(run)]);
        }
    }
    Ok(Outcome {
        calls,
        storage_bytes,
        plan: StoragePlan::Sieve,
    })
}

/// Read-modify-write of each chunk of several runs (the runs applied in list order); a
/// chunk of one run is written directly. The caller holds the extent lock over all
/// chunks, so no other write can land between the read and the write of a chunk.
fn sieve_write(
    file: &impl StorageObject,
    runs: &[Run],
    data: &[u8],
    decision: &Decision,
) -> io::Result<Outcome> {
    let mut chunk_buffer = SIEVE_BUFFERS.take(0);
    let mut members_in_list_order = Vec::new();
    let (mut calls, mut storage_bytes) = (0u32, 0u64);
    for chunk in &decision.chunks {
        let members = &decision.order[chunk.members.clone()];
        if let [only] = members {
            let run = &runs[*only];
            write_full(file, &data[run.data..run.data + length_of(run)], run.offset)?;
            calls += 1;
            storage_bytes += run.length;
            continue;
        }
        let bytes =
            usize::try_from(chunk.bytes()).expect("chunks are at most SIEVE_CHUNK_BYTES_MAX");
        chunk_buffer.set_len(bytes);
        let chunk_buffer = &mut *chunk_buffer;
        read_full(file, chunk_buffer, chunk.start)?;
        members_in_list_order.clear();
        members_in_list_order.extend_from_slice(members);
        members_in_list_order.sort_unstable();
        for &index in &members_in_list_order {
            let run = &runs[index];
            let to = position_in(run, chunk.start);
            chunk_buffer[to..to + length_of(run)]
                .copy_from_slice(&data[run.data..run.data + length_of(run)]);
        }
        write_full(file, chunk_buffer, chunk.start)?;
        calls += 2;
        storage_bytes += 2 * chunk.bytes();
    }
    Ok(Outcome {
        calls,
        storage_bytes,
        plan: StoragePlan::Sieve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `pieces` of object 7 through `read_mapped`, back to back.
    fn read_mapped(store: &ObjectStore, pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        let outcome = store
            .read_mapped(7, pieces, |slices, _| {
                for slice in slices {
                    out.extend_from_slice(slice);
                }
                Ok(())
            })
            .unwrap();
        assert!(outcome.is_some(), "served from a mapping");
        out
    }

    /// Writes object bytes to the device and drops them from the page cache; false where the
    /// kernel keeps them (tmpfs).
    fn evict(store: &ObjectStore, handle: u64) -> bool {
        use std::os::fd::AsRawFd;
        let object = store.object(handle).unwrap();
        object.file.sync_data().unwrap();
        // SAFETY: advice about an open descriptor.
        let status = unsafe {
            libc::posix_fadvise(object.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
        };
        assert_eq!(status, 0);
        let size = object.file.metadata().unwrap().len();
        store.residency(&object, 0, size) == Residency::Cold
    }

    #[test]
    fn reads_of_cold_data_are_priced_cold_and_sieve_only_small_spans() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        store.create(7, 0).unwrap();
        let data: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 251) as u8).collect();
        store
            .write(
                7,
                &[Piece::new(0, data.len() as u64)],
                &data,
                StoragePlan::PerPiece,
            )
            .unwrap();
        let object = store.object(7).unwrap();
        assert_eq!(store.residency(&object, 0, 1 << 20), Residency::Cached);
        // Past the end of the object there is nothing to read from the device.
        assert_eq!(
            store.residency(&object, 4 << 20, 5 << 20),
            Residency::Cached
        );
        if !evict(&store, 7) {
            crate::not_run::ignored_at_run_time(&format!(
                "the file system of {} keeps the object's pages cached (tmpfs?)",
                directory.path().display()
            ));
            return;
        }
        // Block columns: 512-byte pieces every 2 KiB over 1 MiB, and 128-byte pieces every
        // 512 bytes over 64 KiB.
        let columns = |count: u64, bytes: u64| -> Vec<Piece> {
            (0..count)
                .map(|i| Piece::new(i * 4 * bytes, bytes))
                .collect()
        };
        let check = |pieces: &[Piece], expected: StoragePlan| {
            let wanted: u64 = pieces.iter().map(|p| p.length).sum();
            let mut buffer = vec![0u8; usize::try_from(wanted).unwrap()];
            let outcome = store
                .read(7, pieces, &mut buffer, StoragePlan::Auto)
                .unwrap();
            assert_eq!(outcome.plan, expected, "{} pieces", pieces.len());
            let mut at = 0;
            for piece in pieces {
                let offset = usize::try_from(piece.offset).unwrap();
                let length = usize::try_from(piece.length).unwrap();
                assert_eq!(&buffer[at..at + length], &data[offset..offset + length]);
                at += length;
            }
        };
        check(&columns(512, 512), StoragePlan::PerPiece);
        // The same request again finds the pages cached: sieving pays there.
        assert_eq!(store.residency(&object, 0, 1 << 20), Residency::Cached);
        check(&columns(512, 512), StoragePlan::Sieve);
        assert!(evict(&store, 7));
        check(&columns(128, 128), StoragePlan::Sieve);
    }

    /// A store in `directory` with object 7 holding 1 MiB of a pattern, written just now (so
    /// cached), and that pattern.
    fn store_of_one_mib(directory: &Path) -> (ObjectStore, Vec<u8>) {
        let store = ObjectStore::open(directory).unwrap();
        store.create(7, 0).unwrap();
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        store
            .write(
                7,
                &[Piece::new(0, data.len() as u64)],
                &data,
                StoragePlan::PerPiece,
            )
            .unwrap();
        (store, data)
    }

    #[test]
    fn reads_of_cached_bytes_are_served_now_and_the_rest_left_to_a_blocking_thread() {
        let directory = tempfile::tempdir().unwrap();
        let (store, data) = store_of_one_mib(directory.path());
        let pieces = [Piece::new(1000, 300_000), Piece::new(600_000, 200_000)];
        let mut now = vec![0xEEu8; 500_000];
        let outcome = store
            .read_now(7, &pieces, &mut now)
            .expect("every byte is cached")
            .unwrap();
        assert_eq!((outcome.calls, outcome.storage_bytes), (2, 500_000));
        let expected = [&data[1000..301_000], &data[600_000..800_000]].concat();
        assert!(now == expected, "the bytes read now are the file's");
        let mut buffer = vec![0u8; 4096];
        // An object not open, a read past the end (the blocking read zero-fills it), too many
        // runs, or an extent a write holds: not now.
        assert!(store
            .read_now(8, &[Piece::new(0, 10)], &mut buffer[..10])
            .is_none());
        let past = [Piece::new(data.len() as u64 - 10, 100)];
        assert!(store.read_now(7, &past, &mut buffer[..100]).is_none());
        let many: Vec<Piece> = (0..=READ_NOW_RUNS_MAX as u64)
            .map(|k| Piece::new(k * 100, 10))
            .collect();
        assert!(store
            .read_now(7, &many, &mut buffer[..many.len() * 10])
            .is_none());
        {
            let object = store.object(7).unwrap();
            let _writing = object.extents.lock(0, 4096, true);
            assert!(store
                .read_now(7, &[Piece::new(100, 100)], &mut buffer[..100])
                .is_none());
        }
        assert!(store
            .read_now(7, &[Piece::new(100, 100)], &mut buffer[..100])
            .is_some());
        // Bytes not in the page cache are not waited for (the kernel drops clean pages at
        // DONTNEED here, as the residency test above relies on too).
        assert!(evict(&store, 7), "the pages could not be evicted");
        assert!(store
            .read_now(7, &[Piece::new(0, 4096)], &mut buffer)
            .is_none());
    }

    #[test]
    fn cached_reads_are_sent_from_the_mapping_in_request_order_under_their_extent() {
        let directory = tempfile::tempdir().unwrap();
        let (store, data) = store_of_one_mib(directory.path());
        let whole = [Piece::new(0, data.len() as u64)];
        let concat = |slices: &[IoSlice<'_>]| -> Vec<u8> {
            slices
                .iter()
                .flat_map(|slice| slice.iter().copied())
                .collect()
        };
        let send = |outcome: &Outcome, slices: &[IoSlice<'_>]| (*outcome, concat(slices));
        // Bytes not in the page cache are not waited for; read back in, they are sent.
        assert!(evict(&store, 7), "the pages could not be evicted");
        assert!(store
            .read_mapped_now(7, &[Piece::new(0, 4096)], send)
            .is_none());
        let mut buffer = vec![0u8; data.len()];
        store
            .read(7, &whole, &mut buffer, StoragePlan::PerPiece)
            .unwrap();
        // In request order, not file order; the extent is held shared while they are sent.
        let pieces = [Piece::new(600_000, 200_000), Piece::new(1000, 300_000)];
        let object = store.object(7).unwrap();
        let (outcome, sent) = store
            .read_mapped_now(7, &pieces, |outcome, slices| {
                assert!(
                    object.extents.try_lock(1000, 2000, true).is_none(),
                    "a write waits"
                );
                assert!(object.extents.try_lock(1000, 2000, false).is_some());
                send(outcome, slices)
            })
            .expect("every byte is cached");
        assert_eq!((outcome.calls, outcome.storage_bytes), (0, 500_000));
        assert_eq!(store.stats().reads.mapped, 1, "counted as mapped");
        let expected = [&data[600_000..800_000], &data[1000..301_000]].concat();
        assert!(sent == expected, "the bytes sent are the file's");
        assert!(
            object.extents.try_lock(0, 1 << 20, true).is_some(),
            "let go"
        );
        // An object not open, a read past the end (the buffered read zero-fills it), or an
        // extent a write holds: not from the mapping.
        assert!(store
            .read_mapped_now(8, &[Piece::new(0, 10)], send)
            .is_none());
        let past = [Piece::new(data.len() as u64 - 10, 100)];
        assert!(store.read_mapped_now(7, &past, send).is_none());
        // Many short runs, as a strided read: sent from the mapping all the same.
        let many: Vec<Piece> = (0..2000u64).map(|k| Piece::new(k * 500, 10)).collect();
        let (outcome, sent) = store.read_mapped_now(7, &many, send).expect("all cached");
        let expected: Vec<u8> = (0..2000usize)
            .flat_map(|k| data[k * 500..k * 500 + 10].to_vec())
            .collect();
        assert!(sent == expected && outcome.storage_bytes == 20_000);
        {
            let _writing = object.extents.lock(0, 4096, true);
            assert!(store
                .read_mapped_now(7, &[Piece::new(100, 100)], send)
                .is_none());
        }
        assert!(store
            .read_mapped_now(7, &[Piece::new(100, 100)], send)
            .is_some());
        // Only in the mmap serve mode.
        let normal = ObjectStore::open(directory.path())
            .unwrap()
            .with_serve(ServeMode::Normal, None)
            .unwrap();
        let mut buffer = [0u8; 100];
        normal
            .read(
                7,
                &[Piece::new(100, 100)],
                &mut buffer,
                StoragePlan::PerPiece,
            )
            .unwrap();
        assert!(normal
            .read_mapped_now(7, &[Piece::new(100, 100)], send)
            .is_none());
    }

    #[test]
    fn kept_mappings_follow_truncates_growth_and_removal() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        store.create(7, 0).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let whole = [Piece::new(0, data.len() as u64)];
        store
            .write(7, &whole, &data, StoragePlan::PerPiece)
            .unwrap();
        assert_eq!(
            read_mapped(&store, &[Piece::new(1000, 5000)]),
            data[1000..6000]
        );
        assert_eq!(store.kept_mapping_bytes(), KEPT_MAPPING_STEP);
        // Served by the same mapping: none made, none given back.
        assert_eq!(read_mapped(&store, &whole), data);
        assert_eq!(store.kept_mapping_bytes(), KEPT_MAPPING_STEP);

        // Shrunk: what lies past the new end reads as zeros (and touching it would be fatal).
        store.truncate(7, 3000).unwrap();
        let expected = [&data[1000..3000], &[0u8; 3000][..]].concat();
        assert_eq!(read_mapped(&store, &[Piece::new(1000, 5000)]), expected);

        // Grown past the kept mapping by a write far out: the mapping grows to cover it.
        let far = KEPT_MAPPING_STEP + 10;
        store
            .write(7, &[Piece::new(far, 4)], b"tail", StoragePlan::PerPiece)
            .unwrap();
        let got = read_mapped(&store, &[Piece::new(far, 4), Piece::new(2990, 20)]);
        let expected = [&b"tail"[..], &data[2990..3000], &[0u8; 10][..]].concat();
        assert_eq!(got, expected);
        assert_eq!(
            store.kept_mapping_bytes(),
            2 * KEPT_MAPPING_STEP,
            "the old one given back"
        );

        // Beyond the kept range, a read maps its own span.
        let beyond = KEPT_MAPPING_BYTES_MAX + 100;
        store
            .write(7, &[Piece::new(beyond, 3)], b"end", StoragePlan::PerPiece)
            .unwrap();
        assert_eq!(read_mapped(&store, &[Piece::new(beyond, 3)]), b"end");
        assert_eq!(store.kept_mapping_bytes(), 2 * KEPT_MAPPING_STEP);

        // Removing the object closes it and gives its mapping back.
        store.remove(7).unwrap();
        assert_eq!(store.kept_mapping_bytes(), 0);
    }

    #[test]
    fn merges_adjacent_pieces_and_applies_overlaps_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        store.create(5, 0).unwrap();
        let pieces = [
            Piece::new(0, 4),
            Piece::new(4, 4),
            Piece::new(2, 2),
            Piece::new(100, 0),
        ];
        let outcome = store
            .write(5, &pieces, b"aaaabbbbcc", StoragePlan::PerPiece)
            .unwrap();
        assert_eq!(
            outcome.calls, 2,
            "the first two pieces are one storage call; the empty one is none"
        );
        let mut buffer = [0u8; 10];
        let reads = store
            .read(
                5,
                &[Piece::new(0, 8), Piece::new(8, 2)],
                &mut buffer,
                StoragePlan::Auto,
            )
            .unwrap();
        assert_eq!(reads.calls, 1);
        assert_eq!(
            &buffer, b"aaccbbbb\0\0",
            "later piece wins; past the end reads zeros"
        );
        assert_eq!(store.stat(5).unwrap().0, 8);
        assert_eq!(store.object_count(), 1);
    }

    #[test]
    fn every_read_plan_overwrites_every_byte_of_a_reused_buffer() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        store.create(3, 0).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8 + 1).collect();
        store
            .write(3, &[Piece::new(0, 10_000)], &data, StoragePlan::PerPiece)
            .unwrap();
        // Scattered pieces, out of order, the last ones past the end of the object.
        let pieces = [
            Piece::new(9_000, 500),
            Piece::new(10, 90),
            Piece::new(200, 1_000),
            Piece::new(9_800, 400),
            Piece::new(12_000, 300),
        ];
        let mut expected = Vec::new();
        for piece in &pieces {
            for offset in piece.offset..piece.offset + piece.length {
                expected.push(
                    data.get(usize::try_from(offset).unwrap())
                        .copied()
                        .unwrap_or(0),
                );
            }
        }
        for plan in [
            StoragePlan::Auto,
            StoragePlan::PerPiece,
            StoragePlan::Batched,
            StoragePlan::Sieve,
        ] {
            // A buffer an earlier request filled with its own bytes.
            let mut buffer = vec![0xEE; expected.len()];
            store.read(3, &pieces, &mut buffer, plan).unwrap();
            assert_eq!(buffer, expected, "{plan:?}");
        }
    }

    #[test]
    fn unknown_handles_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let err = store
            .read(0xabc, &[Piece::new(0, 1)], &mut [0], StoragePlan::Auto)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::UnknownHandle);
        assert!(err.message.contains("0xabc"), "{}", err.message);
        assert_eq!(
            store.remove(0xabc).unwrap_err().code,
            ErrorCode::UnknownHandle
        );
    }

    #[test]
    fn the_sweep_removes_dead_objects_and_keeps_live_ones_and_foreign_files() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        for handle in 2..12 {
            store.create(handle, 0).unwrap();
        }
        std::fs::write(directory.path().join("objects").join("notes.txt"), b"x").unwrap();
        let mut asked = Vec::new();
        let report = store
            .sweep_orphans(|handles| {
                asked.extend_from_slice(handles);
                Ok(handles.iter().copied().filter(|h| h % 2 == 0).collect())
            })
            .unwrap();
        asked.sort_unstable();
        assert_eq!(
            asked,
            (2..12).collect::<Vec<_>>(),
            "every object asked about once"
        );
        let mut removed = report.removed.clone();
        removed.sort_unstable();
        assert_eq!(removed, vec![3, 5, 7, 9, 11]);
        assert_eq!(
            (report.examined, report.foreign, report.kept_created),
            (10, 1, 0)
        );
        for handle in 2..12 {
            assert_eq!(
                store.object_path(handle).exists(),
                handle % 2 == 0,
                "{handle}"
            );
        }
        assert_eq!(store.object_count(), 5, "five objects left");
        assert!(directory.path().join("objects").join("notes.txt").exists());
    }

    #[test]
    fn the_sweep_never_removes_an_object_created_while_it_runs() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        store.create(5, 0).unwrap();
        store.create(6, 0).unwrap();
        // The mds says neither is live; meanwhile object 5 is removed and made again (as by
        // an mds that restarted and handed the handle out anew): the new object must stay.
        let report = store
            .sweep_orphans(|_| {
                store.remove(5).unwrap();
                store.create(5, 0).unwrap();
                Ok(Vec::new())
            })
            .unwrap();
        assert_eq!(report.removed, vec![6]);
        assert_eq!(report.kept_created, 1);
        assert!(store.object_path(5).exists());
        assert!(!store.object_path(6).exists());
        // Once the sweep is over, creates are not remembered.
        assert!(store.sweep.lock().unwrap().is_none());
    }

    /// Before, a create of an existing handle emptied the object: a second mds that handed
    /// out the same handle erased a file of this cluster.
    #[test]
    fn a_create_never_empties_an_existing_object() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        store.create(4, 0).unwrap();
        store
            .write(4, &[Piece::new(0, 5)], b"kept!", StoragePlan::PerPiece)
            .unwrap();
        let error = store.create(4, 4096).unwrap_err();
        assert_eq!(error.code, ErrorCode::Exists);
        assert!(
            error.message.contains("object 0x4 exists"),
            "{}",
            error.message
        );
        assert_eq!(store.stat(4).unwrap().0, 5);
        let mut back = [0u8; 5];
        store
            .read(4, &[Piece::new(0, 5)], &mut back, StoragePlan::PerPiece)
            .unwrap();
        assert_eq!(&back, b"kept!");
        assert_eq!(store.object_count(), 1);
        // An empty one is not taken over either.
        store.create(5, 0).unwrap();
        assert_eq!(store.create(5, 0).unwrap_err().code, ErrorCode::Exists);
        assert_eq!(store.object_count(), 2);
    }

    #[test]
    fn a_failed_question_stops_the_sweep_and_removes_nothing() {
        let directory = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(directory.path()).unwrap();
        store.create(9, 0).unwrap();
        let error = store
            .sweep_orphans(|_| Err(RemoteError::new(ErrorCode::Unavailable, "mds down")))
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Unavailable);
        assert!(store.object_path(9).exists());
        assert!(
            store.sweep.lock().unwrap().is_none(),
            "a later sweep may run"
        );
    }

    #[test]
    fn memory_storage_serves_every_path_without_a_file() {
        use crate::testing::MemStorage;
        let store = ObjectStore::with_storage(MemStorage::new(), CostModel::default()).unwrap();
        assert!(!store.planner().batching(), "no batches without a file");
        store.create(7, 0).unwrap();
        let pieces = [Piece::new(0, 4), Piece::new(10, 4), Piece::new(20, 4)];
        let outcome = store
            .write(7, &pieces, b"aaaabbbbcccc", StoragePlan::Batched)
            .unwrap();
        assert_eq!((outcome.plan, outcome.calls), (StoragePlan::PerPiece, 3));
        let gathered = store
            .write_gathered(
                7,
                &pieces[1..],
                &[b"xy", b"zwvu", b"ts"],
                StoragePlan::PerPiece,
            )
            .unwrap();
        assert_eq!(
            (gathered.storage_bytes, gathered.calls),
            (8, 4),
            "one call per slice"
        );
        let mut buffer = [0u8; 12];
        let outcome = store
            .read(7, &pieces, &mut buffer, StoragePlan::Batched)
            .unwrap();
        assert_eq!(outcome.plan, StoragePlan::PerPiece);
        assert_eq!(&buffer, b"aaaaxyzwvuts");
        let mapped = store
            .read_mapped(7, &pieces, |_, _| unreachable!())
            .unwrap();
        assert_eq!(
            mapped, None,
            "no mapping without a file: the caller reads buffered"
        );
        // Pipelined units over memory.
        let outcome = store
            .serve_units(7, &pieces, false, StoragePlan::Auto, |units| {
                let mut first = [0u8; 4];
                units.read(&pieces[..1], &mut first)?;
                assert_eq!(&first, b"aaaa");
                Ok(())
            })
            .unwrap();
        assert_eq!(outcome.calls, 1);
        assert_eq!(store.stat(7).unwrap().0, 24);
        // The sweep lists memory too.
        store.create(8, 0).unwrap();
        let report = store.sweep_orphans(|_| Ok(vec![7])).unwrap();
        assert_eq!(report.removed, vec![8]);
        assert_eq!(store.storage().handles(), vec![7]);
    }
}
