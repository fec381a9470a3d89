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
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tessera_proto::limits::{check_cache_unit_bytes, HANDLES_LIVE_MAX, IOD_OPEN_OBJECTS_MAX};
use tessera_proto::{ErrorCode, Piece, RemoteError, ServerStatsReply, StatfsReply, StoragePlan};

use crate::buffers::BufferPool;
use crate::cache::{Cache, CacheConfig, CacheError, Landing};
use crate::cost::{CostModel, Direction};
use crate::extent::ExtentLocks;
pub use crate::files::{FileStorage, OWNER_ONLY_DIRECTORY, OWNER_ONLY_FILE};
use crate::mapping::Mapping;
pub use crate::mapping::RESIDENCY_PAGES_MAX;
use crate::plan::{merge_runs, Planner};
use crate::storage::{is_no_space, Listed, ObjectStorage, StorageObject};
use crate::uring;

mod counters;
mod mapped;
mod runs;
mod unified;

use counters::Counters;
pub use runs::READ_NOW_RUNS_MAX;
use runs::{extent_of, pwritev_all, read_runs, write_runs, write_runs_gathered};

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
}

#[cfg(test)]
mod tests;
