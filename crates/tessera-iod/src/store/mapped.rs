//! Reads served without a storage thread: from the page cache on the async worker
//! (`read_now`), straight from a kept mapping into the socket (`read_mapped_now`,
//! `read_mapped`), or from the unified cache's units (`serve_units`); and the kept mappings
//! themselves.

use std::io::{self, IoSlice};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tessera_proto::{Piece, RemoteError, StoragePlan};

use super::runs::{
    extent_of, length_of, mapped_slices, piece_end, read_cached_now, READ_NOW_RUNS_MAX,
};
use super::{
    Object, ObjectStore, Outcome, Release, ServeMode, Units, KEPT_MAPPINGS_BYTES_MAX,
    KEPT_MAPPING_BYTES_MAX, KEPT_MAPPING_STEP, MAPPED_SPAN_MAX,
};
use crate::cost::Direction;
use crate::mapping::Mapping;
use crate::plan::{merge_runs, Decision, Planner, Residency};
use crate::run::Run;
use crate::storage::{ObjectStorage, StorageObject};

impl<S: ObjectStorage> ObjectStore<S> {
    /// The object if it is open already: never opens it (a storage call the async worker
    /// must not make).
    pub(super) fn open_object(&self, handle: u64) -> Option<Arc<Object<S::Object>>> {
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
    pub(super) fn serve_cached(
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
    pub(super) fn serve(
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
    pub(super) fn residency(&self, object: &Object<S::Object>, start: u64, end: u64) -> Residency {
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
    pub(super) fn mapping_for(
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
