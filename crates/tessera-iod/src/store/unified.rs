//! The object store under the unified server cache (`tessera iod --serve unified`, seed 001
//! ch. 5): every read and write of every request path — list, datatype and view I/O,
//! collectives, one-sided transfers, arenas — goes through the iod's own [`Cache`], so all of
//! them see the same bytes, and a read hit is served from the cache's buffers without a copy
//! into a request buffer.
//!
//! - A request takes the object's extent lock as always (shared for reads, exclusive for
//!   writes), then grants of the units its pieces touch, in batches that fit the budget
//!   ([`GRANT_SHARE_DIVISOR`]). Units a read misses are filled from storage, one `preadv` per
//!   run of adjacent units (with `O_DIRECT` where the file system allows), before anything is
//!   served. Writes copy into the units; a unit a write covers only in part is filled first.
//! - A reply sent over a socket keeps its units' bytes by [`Pinned`]: the grants are released
//!   before the send, and a write that comes meanwhile goes to a copy of the unit. So no grant
//!   is ever held across a wait on a peer, and every holder of a grant or an extent lock waits
//!   only for holders that never wait (fills, copies and write-backs).
//! - Dirty units reach storage by write-back ([`ObjectStore::flush`]): a thread flushes every
//!   dirty byte at least every [`WRITE_BACK_AGE`], and as soon as the dirty bytes pass
//!   `budget / DIRTY_SHARE_DIVISOR`. `sync`, `stat` and `truncate` flush the object first;
//!   `remove` and `truncate` drop its units.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tessera_proto::metrics::{
    CACHE_BYTES, CACHE_DIRTY_BYTES, CACHE_EVICTIONS, CACHE_FLUSHED_BYTES, CACHE_FLUSHES,
    CACHE_GRANT_WAITS, CACHE_HITS, CACHE_MISSES, CACHE_UNITS_DEMOTED, CACHE_UNITS_LANDED,
    CACHE_UNITS_MADE,
};
use tessera_proto::{CacheCounters, ErrorCode, Piece, RemoteError};

use super::{pwritev_all, Object, ObjectStore, Outcome};
use crate::cache::{
    Cache, CacheError, CacheStats, DirtyUnit, End, Landing, Pinned, ReadGrant, BUFFER_ALIGN_BYTES,
};
use crate::extent::ExtentGuard;
use crate::storage::{read_full, ObjectStorage, StorageObject};

pub use tessera_policy::ServeMode;

/// The write-back thread looks at the dirty bytes this often.
pub const WRITE_BACK_TICK: Duration = Duration::from_millis(200);
/// Every dirty byte is flushed within this (plus one tick) of being written.
pub const WRITE_BACK_AGE: Duration = Duration::from_secs(2);
/// Write-back starts at once when more than `budget / DIRTY_SHARE_DIVISOR` bytes are dirty,
/// and flushes down to half of that.
pub const DIRTY_SHARE_DIVISOR: usize = 4;
/// One grant of a request holds at most `budget / GRANT_SHARE_DIVISOR` bytes of units, so
/// several requests can hold grants at once; larger requests take theirs in batches.
pub const GRANT_SHARE_DIVISOR: usize = 8;
/// One write-back step takes at most this many dirty bytes.
pub const FLUSH_BATCH_BYTES: usize = 8 << 20;
/// The default budget is the machine's memory divided by this …
pub const CACHE_RAM_DIVISOR: u64 = 8;
/// … but at least this.
pub const CACHE_BYTES_MIN: usize = 64 << 20;

/// The default cache budget: `CACHE_RAM_DIVISOR`th of the machine's memory, at least
/// `CACHE_BYTES_MIN`.
pub fn default_cache_bytes() -> usize {
    // SAFETY: `sysinfo` only fills the struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable `sysinfo`.
    let total = if unsafe { libc::sysinfo(&raw mut info) } == 0 {
        #[allow(
            clippy::useless_conversion,
            reason = "the sysinfo fields are u64 here, narrower on 32-bit targets"
        )]
        let (total, unit) = (u64::from(info.totalram), u64::from(info.mem_unit));
        total.saturating_mul(unit)
    } else {
        0
    };
    usize::try_from(total / CACHE_RAM_DIVISOR)
        .unwrap_or(usize::MAX)
        .max(CACHE_BYTES_MIN)
}

/// A cache error as the reply names it.
fn cache_error(handle: u64, error: &CacheError) -> RemoteError {
    let code = if error.would_wait() {
        ErrorCode::Busy
    } else {
        ErrorCode::Internal
    };
    RemoteError::new(code, format!("object {handle:#x}: unified cache: {error}"))
}

/// One piece's part of a batch: `len` object bytes at `offset`, at `data` in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    offset: u64,
    len: usize,
    data: usize,
}

/// The request's pieces cut into batches whose units fit one grant of `max_units` units of
/// `unit_bytes` (a piece spanning more than half a grant is cut into parts at unit
/// boundaries).
fn batches(pieces: &[Piece], unit_bytes: u64, max_units: u64) -> Vec<Vec<Segment>> {
    // A part ends at a unit boundary at most `part_units` units on, so it spans at most that
    // many units wherever it starts.
    let part_units = (max_units / 2).max(1);
    let units_of =
        |offset: u64, len: u64| (offset + len - 1) / unit_bytes - offset / unit_bytes + 1;
    let mut batches = vec![Vec::new()];
    let (mut units, mut data) = (0u64, 0usize);
    for piece in pieces {
        let (mut offset, mut left) = (piece.offset, piece.length);
        while left > 0 {
            let len = left.min(part_units * unit_bytes - offset % unit_bytes);
            let spanned = units_of(offset, len);
            if units + spanned > max_units {
                batches.push(Vec::new());
                units = 0;
            }
            units += spanned;
            let len_usize = usize::try_from(len).expect("pieces lie within one bulk buffer");
            batches.last_mut().expect("never empty").push(Segment {
                offset,
                len: len_usize,
                data,
            });
            data += len_usize;
            offset += len;
            left -= len;
        }
    }
    batches.retain(|batch| !batch.is_empty());
    batches
}

fn ranges(batch: &[Segment]) -> Vec<(u64, usize)> {
    batch
        .iter()
        .map(|segment| (segment.offset, segment.len))
        .collect()
}

/// Reads `buffers`, back to back, at `offset` of `file` with `preadv` (at most `IOV_MAX`
/// buffers a call); bytes past the end read as zeros. A read `file` refuses part way (an
/// `O_DIRECT` file at an unaligned offset after a short read) goes on through `fallback`.
fn preadv_full(
    file: &File,
    mut buffers: &mut [IoSliceMut<'_>],
    mut offset: u64,
    fallback: Option<&File>,
) -> io::Result<()> {
    let mut file = file;
    while !buffers.is_empty() {
        let count = buffers.len().min(tessera_proto::limits::IOV_PIECES_MAX);
        let position =
            libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: `buffers` are live, writable slices (IoSliceMut is ABI-compatible with
        // iovec); `count` of them are passed.
        let read = unsafe {
            libc::preadv(
                file.as_raw_fd(),
                buffers.as_ptr().cast(),
                i32::try_from(count).expect("at most IOV_PIECES_MAX"),
                position,
            )
        };
        let Ok(read) = usize::try_from(read) else {
            let err = io::Error::last_os_error();
            match (err.raw_os_error(), fallback) {
                (Some(libc::EINTR), _) => continue,
                (Some(libc::EINVAL), Some(fallback)) if !std::ptr::eq(file, fallback) => {
                    file = fallback;
                    continue;
                }
                _ => return Err(err),
            }
        };
        if read == 0 {
            for buffer in buffers.iter_mut() {
                buffer.fill(0);
            }
            return Ok(());
        }
        offset += read as u64;
        IoSliceMut::advance_slices(&mut buffers, read);
    }
    Ok(())
}

/// The bytes of `unit` between object offsets `from` and `to` (clamped to the unit).
fn unit_slice<'a>(unit: &DirtyUnit<'a>, from: u64, to: u64) -> IoSlice<'a> {
    let unit_end = unit.unit_start + unit.unit.len() as u64;
    let at = |offset: u64| {
        usize::try_from(offset.clamp(unit.unit_start, unit_end) - unit.unit_start)
            .expect("within one unit")
    };
    IoSlice::new(&unit.unit[at(from)..at(to)])
}

/// A read's bytes, kept in the cache's buffers for as long as the reply takes to send.
pub struct CachedRead {
    pinned: Pinned,
    /// What serving it did at the storage layer (fills of missed units).
    pub outcome: Outcome,
}

impl CachedRead {
    /// The bytes of `pieces`, back to back, as slices of the cache's buffers (adjacent slices
    /// merged).
    pub fn slices(&self, handle: u64, pieces: &[Piece]) -> Result<Vec<IoSlice<'_>>, RemoteError> {
        let mut spans: Vec<(*const u8, usize)> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            self.pinned
                .for_each_slice(piece.offset, piece.length, |bytes| {
                    match spans.last_mut() {
                        Some(last) if last.0.wrapping_add(last.1) == bytes.as_ptr() => {
                            last.1 += bytes.len();
                        }
                        _ => spans.push((bytes.as_ptr(), bytes.len())),
                    }
                    Ok::<(), CacheError>(())
                })
                .map_err(|err| cache_error(handle, &err))?;
        }
        Ok(spans
            .into_iter()
            .map(|(start, len)| {
                // SAFETY: each span joins slices handed out by `for_each_slice` that lie one
                // after the other in one pinned buffer (checked by address), which `self`
                // keeps alive and unchanged for the lifetime of the result.
                IoSlice::new(unsafe { std::slice::from_raw_parts(start, len) })
            })
            .collect())
    }

    /// The bytes of each piece as its own list of slices (one `Data` frame per piece).
    pub fn piece_slices(
        &self,
        handle: u64,
        pieces: &[Piece],
    ) -> Result<Vec<Vec<IoSlice<'_>>>, RemoteError> {
        pieces
            .iter()
            .map(|piece| self.slices(handle, std::slice::from_ref(piece)))
            .collect()
    }
}

impl<S: ObjectStorage> ObjectStore<S> {
    /// The unified cache, when the store serves through one.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// How this store serves reads.
    pub fn serve_mode(&self) -> ServeMode {
        self.serve
    }

    /// Most units one grant of `handle` may hold.
    fn grant_units(cache: &Cache, handle: u64) -> (u64, u64) {
        let unit_bytes = cache.unit_bytes(handle);
        let max_units = (cache.config().budget_bytes / GRANT_SHARE_DIVISOR / unit_bytes).max(1);
        (unit_bytes as u64, max_units as u64)
    }

    /// The object's `O_DIRECT` file, opened at first use; `None` where storage refuses it
    /// (logged once per server: the cache then reads and writes through the page cache).
    fn direct<'a>(&self, object: &'a Object<S::Object>) -> Option<&'a File> {
        if !self.direct_io.load(Ordering::Relaxed) {
            return None;
        }
        object
            .direct
            .get_or_init(|| {
                let file = object.file.as_file()?;
                let reopened = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(format!("/proc/self/fd/{}", file.as_raw_fd()));
                match reopened {
                    Ok(direct) => Some(direct),
                    Err(err) => {
                        if self.direct_io.swap(false, Ordering::Relaxed) {
                            tracing::info!(
                                "O_DIRECT is not available in {} ({err}): the unified cache reads and writes through the page cache",
                                self.storage.location()
                            );
                        }
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Fills every unit a grant missed (`fill_missing_runs` hands over each run of units
    /// that follow each other), one storage call (`preadv`) per run, with `O_DIRECT` where
    /// the object has it; counts into `outcome`.
    fn fill(
        &self,
        object: &Object<S::Object>,
        handle: u64,
        unit_bytes: u64,
        fill_missing_runs: impl FnOnce(
            &mut dyn FnMut(u64, &mut [IoSliceMut<'_>]) -> io::Result<()>,
        ) -> io::Result<()>,
        outcome: &mut Outcome,
    ) -> Result<(), RemoteError> {
        let direct = self.direct(object);
        let mut read = |first: u64, buffers: &mut [IoSliceMut<'_>]| {
            outcome.calls += 1;
            outcome.storage_bytes += buffers
                .iter()
                .map(|buffer| buffer.len() as u64)
                .sum::<u64>();
            let offset = first * unit_bytes;
            let Some(file) = direct.or_else(|| object.file.as_file()) else {
                // Storage without a kernel file: one positioned read per unit.
                return (offset..)
                    .step_by(usize::try_from(unit_bytes).expect("a unit size"))
                    .zip(buffers.iter_mut())
                    .try_for_each(|(at, buffer)| read_full(&object.file, buffer, at));
            };
            // Aligned: the units' buffers, offset and lengths are multiples of 4 KiB.
            preadv_full(file, buffers, offset, object.file.as_file())
        };
        fill_missing_runs(&mut read).map_err(|err| self.io_error(handle, "read", &err))
    }

    /// Writes dirty `run` (units of one object following each other) to storage: with
    /// `O_DIRECT`, the run widened to 4 KiB boundaries (the units hold valid bytes around
    /// their dirty spans) but never past the object's end, and the unaligned tail past the
    /// last boundary through the page cache; otherwise as it is, in one `pwritev`.
    fn write_back(&self, object: &Object<S::Object>, run: &[DirtyUnit<'_>]) -> io::Result<()> {
        let (first, last) = (&run[0], &run[run.len() - 1]);
        let (start, end) = (first.offset, last.offset + last.bytes.len() as u64);
        let align = BUFFER_ALIGN_BYTES as u64;
        let direct = self.direct(object).and_then(|direct| {
            let size = object.file.metadata().ok()?.size.max(end);
            let aligned_end = end.next_multiple_of(align);
            let direct_end = if aligned_end <= size {
                aligned_end
            } else {
                end / align * align
            };
            let direct_start = start / align * align;
            (direct_start < direct_end).then_some((direct, direct_start, direct_end))
        });
        let Some((direct, direct_start, direct_end)) = direct else {
            let mut parts: Vec<IoSlice<'_>> =
                run.iter().map(|unit| IoSlice::new(unit.bytes)).collect();
            return pwritev_all(&object.file, &mut parts, start).map(drop);
        };
        let mut parts: Vec<IoSlice<'_>> = run
            .iter()
            .filter(|unit| unit.unit_start < direct_end)
            .map(|unit| unit_slice(unit, direct_start, direct_end))
            .collect();
        match pwritev_all(direct, &mut parts, direct_start) {
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                let mut parts: Vec<IoSlice<'_>> =
                    run.iter().map(|unit| IoSlice::new(unit.bytes)).collect();
                return pwritev_all(&object.file, &mut parts, start).map(drop);
            }
            done => done?,
        };
        if direct_end < end {
            let mut tail = [unit_slice(last, direct_end, end)];
            pwritev_all(&object.file, &mut tail, direct_end)?;
        }
        Ok(())
    }

    /// Takes a grant of `batch` with `grant(ranges, wait)`: at once if it can; when the
    /// budget is full of dirty units, after writing back enough of them here (the write-back
    /// thread may be a tick away); otherwise waiting as configured.
    fn reclaiming<G>(
        &self,
        handle: u64,
        batch: &[Segment],
        grant: impl Fn(&[(u64, usize)], Duration) -> Result<G, CacheError>,
    ) -> Result<G, RemoteError> {
        let cache = self.cache.as_ref().expect("called in unified mode");
        let ranges = ranges(batch);
        match grant(&ranges, Duration::ZERO) {
            Ok(granted) => return Ok(granted),
            Err(CacheError::CacheFull { .. }) => {
                let wanted: usize = batch.iter().map(|segment| segment.len).sum();
                let room = cache.config().budget_bytes / DIRTY_SHARE_DIVISOR;
                self.flush(None, wanted.max(room) as u64)?;
            }
            Err(error) if error.would_wait() => {}
            Err(error) => return Err(cache_error(handle, &error)),
        }
        grant(&ranges, cache.config().grant_wait).map_err(|err| cache_error(handle, &err))
    }

    /// Serves `pieces` from the cache in batches, the object's extent held by the caller:
    /// each batch's grant (`grant`), with the units it lacks filled (`fill` hands them to
    /// [`Self::fill`]), goes to `serve` with the batch's segments.
    fn batched<G>(
        &self,
        object: &Object<S::Object>,
        handle: u64,
        pieces: &[Piece],
        grant: impl Fn(&Cache, &[(u64, usize)], Duration) -> Result<G, CacheError>,
        fill: impl Fn(
            &mut G,
            &mut dyn FnMut(u64, &mut [IoSliceMut<'_>]) -> io::Result<()>,
        ) -> io::Result<()>,
        mut serve: impl FnMut(G, &[Segment]) -> Result<(), RemoteError>,
    ) -> Result<Outcome, RemoteError> {
        let cache = self.cache.as_ref().expect("called in unified mode");
        let (unit_bytes, max_units) = Self::grant_units(cache, handle);
        let mut outcome = Outcome::default();
        for batch in batches(pieces, unit_bytes, max_units) {
            let mut granted =
                self.reclaiming(handle, &batch, |ranges, wait| grant(cache, ranges, wait))?;
            self.fill(
                object,
                handle,
                unit_bytes,
                |read| fill(&mut granted, read),
                &mut outcome,
            )?;
            serve(granted, &batch)?;
        }
        Ok(outcome)
    }

    /// Serves the read of `pieces` from the cache, the object's extent held by the caller:
    /// each batch's read grant, filled, goes to `serve` with the batch's segments.
    fn cached_read(
        &self,
        object: &Object<S::Object>,
        handle: u64,
        pieces: &[Piece],
        serve: impl FnMut(ReadGrant, &[Segment]) -> Result<(), RemoteError>,
    ) -> Result<Outcome, RemoteError> {
        self.batched(
            object,
            handle,
            pieces,
            |cache, ranges, wait| cache.grant_read_ranges(handle, ranges, wait),
            |grant, read| grant.fill_missing_runs(read),
            serve,
        )
    }

    /// Writes `data` (back to back) to `pieces` through the cache, the object's extent held
    /// exclusively by the caller; the later of overlapping pieces wins.
    pub(super) fn cached_write(
        &self,
        object: &Object<S::Object>,
        handle: u64,
        pieces: &[Piece],
        data: &[u8],
    ) -> Result<Outcome, RemoteError> {
        self.batched(
            object,
            handle,
            pieces,
            |cache, ranges, wait| cache.grant_write_ranges(handle, ranges, wait),
            |grant, read| grant.fill_missing_runs(read),
            |mut grant, batch| {
                for segment in batch {
                    grant
                        .write_at(
                            segment.offset,
                            &data[segment.data..segment.data + segment.len],
                        )
                        .map_err(|err| cache_error(handle, &err))?;
                }
                Ok(())
            },
        )
    }

    /// Memory laid out as the cache units of a demote of `pieces` (whole units only are
    /// kept), for the bytes to be pulled straight into; `None` as [`ObjectStore::land`].
    pub fn land_demote(&self, handle: u64, pieces: &[Piece]) -> Option<Landing> {
        let cache = self.cache.as_ref()?;
        self.object(handle).ok()?;
        let pieces = pieces.iter().map(|piece| (piece.offset, piece.length));
        cache.land_demote(handle, pieces).ok().flatten()
    }

    /// Caches a landed demote's whole units clean at the most recent end (as
    /// [`ObjectStore::demote`]); returns the units inserted.
    pub fn demote_landed(&self, landing: Landing) -> Result<u64, RemoteError> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        let handle = landing.handle();
        cache
            .insert_landed_clean(landing, End::MostRecent)
            .map(|inserted| inserted as u64)
            .map_err(|err| cache_error(handle, &err))
    }

    /// Memory for the data of a write of `pieces` to `handle`, laid out as the cache units
    /// it will become ([`Cache::land`]): `None` without a unified cache, or where a landing
    /// gains nothing (the write then takes a plain buffer).
    pub fn land(&self, handle: u64, pieces: &[Piece]) -> Option<Landing> {
        let cache = self.cache.as_ref()?;
        // Opening the object gives the cache its unit before the landing fixes one (an
        // unknown handle lands nothing: the write reports it).
        self.object(handle).ok()?;
        // Only a piece of at least a unit can cover one whole.
        let unit_bytes = cache.unit_bytes(handle) as u64;
        if pieces.iter().all(|piece| piece.length < unit_bytes) {
            return None;
        }
        let pieces = pieces.iter().map(|piece| (piece.offset, piece.length));
        cache.land(handle, pieces).ok().flatten()
    }

    /// Applies a landed write through the cache, the object's extent held exclusively by the
    /// caller: per batch, a grant that installs the landed units and copies in the parts of
    /// units the write covers only in part (filled from storage first).
    pub(super) fn landed_write(
        &self,
        object: &Object<S::Object>,
        landing: &mut Landing,
    ) -> Result<Outcome, RemoteError> {
        let cache = self.cache.as_ref().expect("called in unified mode");
        let handle = landing.handle();
        let (unit_bytes, max_units) = Self::grant_units(cache, handle);
        let max_units = usize::try_from(max_units).unwrap_or(usize::MAX);
        let mut outcome = Outcome::default();
        for batch in landing.batches(max_units) {
            let segments: Vec<Segment> = landing.parts()[batch.clone()]
                .iter()
                .map(|part| Segment {
                    offset: part.offset,
                    len: part.len,
                    data: 0,
                })
                .collect();
            let mut granted = self.reclaiming(handle, &segments, |ranges, wait| {
                cache.grant_write_landed(landing, ranges, wait)
            })?;
            self.fill(
                object,
                handle,
                unit_bytes,
                |read| granted.fill_missing_runs(read),
                &mut outcome,
            )?;
            let installed = granted.install(landing, batch.clone());
            for (index, installed) in batch.zip(installed) {
                if !installed {
                    let offset = landing.parts()[index].offset;
                    granted
                        .write_at(offset, landing.part_bytes(index))
                        .map_err(|err| cache_error(handle, &err))?;
                }
            }
        }
        Ok(outcome)
    }

    /// Reads `pieces` into `buffer` through the cache, the extent held by the caller.
    pub(super) fn cached_read_into(
        &self,
        object: &Object<S::Object>,
        handle: u64,
        pieces: &[Piece],
        buffer: &mut [u8],
    ) -> Result<Outcome, RemoteError> {
        self.cached_read(object, handle, pieces, |grant, batch| {
            for segment in batch {
                grant
                    .read_at(
                        segment.offset,
                        &mut buffer[segment.data..segment.data + segment.len],
                    )
                    .map_err(|err| cache_error(handle, &err))?;
            }
            Ok(())
        })
    }

    /// Pins the bytes of `pieces` in the cache (filling what is missing), under the caller's
    /// shared extent.
    fn cached_pin(
        &self,
        object: &Object<S::Object>,
        handle: u64,
        pieces: &[Piece],
    ) -> Result<CachedRead, RemoteError> {
        let mut pinned: Option<Pinned> = None;
        let outcome = self.cached_read(object, handle, pieces, |grant, _| {
            let more = grant.pin();
            match &mut pinned {
                Some(pinned) => pinned.merge(more),
                None => pinned = Some(more),
            }
            Ok(())
        })?;
        Ok(CachedRead {
            pinned: pinned.unwrap_or_default(),
            outcome,
        })
    }

    /// Reads `pieces` for a reply sent straight from the cache's buffers: the bytes stay
    /// pinned, and unchanged, until the result is dropped (after the send). Counted as a read.
    pub fn read_pinned(&self, handle: u64, pieces: &[Piece]) -> Result<CachedRead, RemoteError> {
        let object = self.object(handle)?;
        let (start, end) = super::extent_of(&super::merge_runs(pieces));
        let guard = object.extents.lock(start, end, false);
        let cached = self.cached_pin(&object, handle, pieces)?;
        drop(guard);
        let wanted = pieces.iter().map(|piece| piece.length).sum();
        self.reads.record(pieces.len(), wanted, &cached.outcome);
        Ok(cached)
    }

    /// Moves the cached units of `pieces` to the least recent end of the unified cache (they
    /// were just sent to a client that caches them: DEMOTE's exclusive placement).
    pub fn place_least_recent(&self, handle: u64, pieces: &[Piece]) {
        if let Some(cache) = &self.cache {
            let ranges: Vec<(u64, usize)> = pieces
                .iter()
                .map(|piece| {
                    (
                        piece.offset,
                        usize::try_from(piece.length).unwrap_or(usize::MAX),
                    )
                })
                .collect();
            cache.place(handle, &ranges, End::LeastRecent);
        }
    }

    /// Which of `pieces` (clean blocks a caching client offers to demote) this store wants:
    /// with a unified cache, those not all cached now (the cached ones are refused and moved
    /// to the most recent end, where the demote would have put them); without one, none.
    pub fn demote_wanted(&self, handle: u64, pieces: &[Piece]) -> Vec<bool> {
        let Some(cache) = self.cache.as_ref().filter(|_| self.object(handle).is_ok()) else {
            return vec![false; pieces.len()];
        };
        let (unit_bytes, max_units) = Self::grant_units(cache, handle);
        pieces
            .iter()
            .map(|piece| {
                let cached =
                    match batches(std::slice::from_ref(piece), unit_bytes, max_units).as_slice() {
                        [batch] => cache.refuse_cached(handle, &ranges(batch), End::MostRecent),
                        _ => false,
                    };
                !cached
            })
            .collect()
    }

    /// Caches the demoted clean blocks `pieces` of `handle` (their bytes back to back in
    /// `data`) at the most recent end of the unified cache, unit by unit where not cached
    /// (DEMOTE); the caller has checked that they are what storage holds (the client's
    /// lease). Returns the units inserted (0 without a unified cache).
    pub fn demote(&self, handle: u64, pieces: &[Piece], data: &[u8]) -> Result<u64, RemoteError> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        self.object(handle)?;
        let mut at = 0usize;
        let mut inserted = 0;
        for piece in pieces {
            let length = usize::try_from(piece.length).unwrap_or(usize::MAX);
            let bytes = data.get(at..at.saturating_add(length)).ok_or_else(|| {
                RemoteError::new(
                    ErrorCode::Protocol,
                    format!("demote of object {handle:#x}: the pieces name more bytes than came"),
                )
            })?;
            at += length;
            inserted += cache
                .insert_clean(handle, piece.offset, bytes, End::MostRecent)
                .map_err(|err| cache_error(handle, &err))?;
        }
        Ok(inserted as u64)
    }

    /// Whether every unit `pieces` touch is cached and free of writers now (it may change the
    /// next moment: a hint for where to serve a read, never a promise).
    pub fn is_cached(&self, handle: u64, pieces: &[Piece]) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let (unit_bytes, max_units) = Self::grant_units(cache, handle);
        match batches(pieces, unit_bytes, max_units).as_slice() {
            [batch] => cache.peek_cached(handle, &ranges(batch)),
            _ => false,
        }
    }

    /// Whether every unit `pieces` touch is cached, free of writers and in the cache's Ready
    /// region now, over however many grants a read of them takes (a hint, as
    /// [`ObjectStore::is_cached`]).
    pub fn is_ready_cached(&self, handle: u64, pieces: &[Piece]) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let (unit_bytes, max_units) = Self::grant_units(cache, handle);
        batches(pieces, unit_bytes, max_units)
            .iter()
            .all(|batch| cache.peek_ready(handle, &ranges(batch)))
    }

    /// The cache's Ready region, when there is one (for a fabric to register it).
    pub fn ready_memory(&self) -> Option<crate::cache::ReadyMemory> {
        self.cache.as_ref().and_then(Cache::ready_memory)
    }

    /// [`ObjectStore::read_pinned`] if it needs no wait and no storage call: the extent is free
    /// and every unit is cached; `None` otherwise (nothing is taken). Cheap enough to run on
    /// an async worker.
    pub fn read_pinned_now(&self, handle: u64, pieces: &[Piece]) -> Option<CachedRead> {
        let cache = self.cache.as_ref()?;
        let object = self.object(handle).ok()?;
        let (start, end) = super::extent_of(&super::merge_runs(pieces));
        let (unit_bytes, max_units) = Self::grant_units(cache, handle);
        let batches = batches(pieces, unit_bytes, max_units);
        let [batch] = batches.as_slice() else {
            return None;
        };
        let guard = object.extents.try_lock(start, end, false)?;
        let grant = cache.grant_cached(handle, &ranges(batch)).ok()?;
        let cached = CachedRead {
            pinned: grant.pin(),
            outcome: Outcome::default(),
        };
        drop(guard);
        let wanted = pieces.iter().map(|piece| piece.length).sum();
        self.reads.record(pieces.len(), wanted, &cached.outcome);
        Some(cached)
    }

    /// Writes the dirty units of `handle` (or of every object) to storage, until at least
    /// `limit_bytes` were written or none is left; returns the bytes written. Write-backs do
    /// not overlap. A unit of an object removed meanwhile is dropped unwritten. A storage
    /// error leaves the units dirty (a later flush retries them) and is returned.
    pub fn flush(&self, handle: Option<u64>, limit_bytes: u64) -> Result<u64, RemoteError> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        let _serial = self.flushing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut written = 0u64;
        // Units a writer holds are skipped and new ones may turn dirty meanwhile: bound the
        // steps by what is dirty now.
        let steps = cache.dirty_bytes() / FLUSH_BATCH_BYTES + 2;
        for _ in 0..steps {
            if written >= limit_bytes {
                break;
            }
            let dirty = cache.take_dirty(handle, FLUSH_BATCH_BYTES);
            if dirty.is_empty() {
                break;
            }
            let step_bytes = dirty.dirty_bytes() as u64;
            let units: Vec<_> = dirty.units().collect();
            let mut at = 0;
            while at < units.len() {
                // Units of one object that follow each other on storage go in one `pwritev`.
                let mut next = at + 1;
                while next < units.len()
                    && units[next].handle == units[at].handle
                    && units[next].offset
                        == units[next - 1].offset + units[next - 1].bytes.len() as u64
                {
                    next += 1;
                }
                let run = &units[at..next];
                let object = match self.object(run[0].handle) {
                    Ok(object) => Some(object),
                    Err(error) if error.code == ErrorCode::UnknownHandle => None,
                    Err(error) => return Err(error),
                };
                if let Some(object) = object {
                    self.write_back(&object, run)
                        .map_err(|err| self.io_error(run[0].handle, "write-back", &err))?;
                }
                let bytes: u64 = run.iter().map(|unit| unit.bytes.len() as u64).sum();
                written += bytes;
                at = next;
            }
            drop(units);
            dirty.mark_clean();
            self.flushes.fetch_add(1, Ordering::Relaxed);
            self.flushed_bytes.fetch_add(step_bytes, Ordering::Relaxed);
        }
        Ok(written)
    }

    /// Flushes every dirty unit of the object whose extent `guard` holds whole (no write of
    /// it can run meanwhile).
    pub(super) fn flush_object(
        &self,
        handle: u64,
        _whole_object: &ExtentGuard<'_>,
    ) -> Result<(), RemoteError> {
        self.flush(Some(handle), u64::MAX).map(drop)
    }

    /// Drops every cached unit of `handle` (it is being removed, or was truncated).
    pub(super) fn forget(&self, handle: u64) -> Result<(), RemoteError> {
        match &self.cache {
            Some(cache) => cache
                .invalidate(handle)
                .map(drop)
                .map_err(|err| cache_error(handle, &err)),
            None => Ok(()),
        }
    }

    /// Gives the cache the unit recorded with the object of `handle` (none: the cache's
    /// default), before any grant of it: at its open and after `forget`.
    pub(super) fn apply_cache_unit(&self, handle: u64) -> Result<(), RemoteError> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let unit_bytes = self
            .storage
            .cache_unit(handle)
            .map_err(|err| self.io_error(handle, "reading the cache unit", &err))?;
        if unit_bytes == 0 {
            return Ok(());
        }
        let unit_bytes = usize::try_from(unit_bytes).expect("u32 fits usize");
        cache
            .set_unit_bytes(handle, unit_bytes)
            .map_err(|err| cache_error(handle, &err))
    }

    /// The cache's counters, when there is a cache.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(Cache::stats)
    }

    /// The cache's counters for `ServerStats`: all zeros without a cache.
    pub fn cache_counters(&self) -> CacheCounters {
        let Some(stats) = self.cache_stats() else {
            return CacheCounters::default();
        };
        let bytes = |value: usize| value as u64;
        CacheCounters {
            hits: stats.hits,
            misses: stats.misses,
            evictions: stats.evictions,
            grant_waits: stats.grant_waits,
            dirty_bytes: bytes(stats.dirty_bytes),
            flushes: self.flushes.load(Ordering::Relaxed),
            flushed_bytes: self.flushed_bytes.load(Ordering::Relaxed),
            ready_units_made: stats.ready_units_made,
            raw_units_made: stats.raw_units_made,
            units_landed: stats.units_landed,
            units_demoted: stats.units_demoted,
            bytes_in_use: bytes(stats.bytes_in_use),
            budget_bytes: bytes(stats.budget_bytes),
        }
    }

    /// Starts the write-back thread of a unified store (nothing otherwise). It stops by itself
    /// once the store is dropped, flushing what is dirty at the time.
    pub fn start_write_back(store: &Arc<Self>) -> io::Result<()> {
        let Some(cache) = store.cache.clone() else {
            return Ok(());
        };
        let store = Arc::downgrade(store);
        let high = cache.config().budget_bytes / DIRTY_SHARE_DIVISOR;
        std::thread::Builder::new()
            .name("iod-write-back".into())
            .spawn(move || {
                let mut last_full = Instant::now();
                let mut failing = false;
                loop {
                    std::thread::sleep(WRITE_BACK_TICK);
                    let Some(store) = store.upgrade() else {
                        return;
                    };
                    let dirty = cache.dirty_bytes();
                    let over = dirty > high;
                    let aged = dirty > 0 && last_full.elapsed() >= WRITE_BACK_AGE;
                    if over || aged {
                        let limit = if aged {
                            u64::MAX
                        } else {
                            (dirty - high / 2) as u64
                        };
                        match (store.flush(None, limit), failing) {
                            (Ok(_), true) => {
                                tracing::info!("write-back works again");
                                failing = false;
                            }
                            (Err(error), false) => {
                                tracing::warn!("write-back failed (retried every tick): {error}");
                                failing = true;
                            }
                            (Ok(_), false) | (Err(_), true) => {}
                        }
                        if aged {
                            last_full = Instant::now();
                        }
                    }
                    store.export_cache_metrics();
                }
            })
            .map(drop)
    }

    /// Sends the cache's counters to the process's metrics recorder.
    fn export_cache_metrics(&self) {
        let Some(stats) = self.cache_stats() else {
            return;
        };
        metrics::counter!(CACHE_HITS).absolute(stats.hits);
        metrics::counter!(CACHE_MISSES).absolute(stats.misses);
        metrics::counter!(CACHE_EVICTIONS).absolute(stats.evictions);
        metrics::counter!(CACHE_GRANT_WAITS).absolute(stats.grant_waits);
        metrics::counter!(CACHE_UNITS_MADE, "memory" => "ready").absolute(stats.ready_units_made);
        metrics::counter!(CACHE_UNITS_MADE, "memory" => "raw").absolute(stats.raw_units_made);
        metrics::counter!(CACHE_UNITS_LANDED).absolute(stats.units_landed);
        metrics::counter!(CACHE_UNITS_DEMOTED).absolute(stats.units_demoted);
        metrics::counter!(CACHE_FLUSHES).absolute(self.flushes.load(Ordering::Relaxed));
        metrics::counter!(CACHE_FLUSHED_BYTES).absolute(self.flushed_bytes.load(Ordering::Relaxed));
        #[allow(clippy::cast_precision_loss)] // gauges are f64; byte counts far below 2^53
        {
            metrics::gauge!(CACHE_DIRTY_BYTES).set(stats.dirty_bytes as f64);
            metrics::gauge!(CACHE_BYTES).set(stats.bytes_in_use as f64);
        }
    }
}

#[cfg(test)]
mod tests;
