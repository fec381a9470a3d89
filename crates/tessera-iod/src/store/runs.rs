//! Applying a plan to merged runs of one object: one positioned call per run (gathered from
//! slices or from one buffer), or sieving through chunk buffers; and reading runs back, with
//! the page-cache-only read the async worker may make.

use std::io::{self, ErrorKind, IoSlice};

use tessera_proto::{Piece, StoragePlan};

use super::{Outcome, SIEVE_BUFFERS, ZEROS};
use crate::mapping::Mapping;
use crate::plan::Decision;
use crate::run::Run;
use crate::storage::{read_full, write_full, StorageObject};
use crate::uring;

/// Consecutive bytes of a list of slices, taken in order.
pub(super) struct SliceCursor<'a> {
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
pub(super) fn pwritev_all(
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
pub(super) fn piece_end(piece: &Piece) -> u64 {
    piece.offset.saturating_add(piece.length)
}

/// The object extent `[first offset, last end)` the runs span.
#[inline]
pub(super) fn extent_of(runs: &[Run]) -> (u64, u64) {
    let start = runs.iter().map(|run| run.offset).min().unwrap_or(0);
    let end = runs.iter().map(Run::end).max().unwrap_or(0);
    (start, end)
}

#[inline]
pub(super) fn length_of(run: &Run) -> usize {
    usize::try_from(run.length).expect("a run lies within one bulk buffer")
}

/// Offset of `run` inside a chunk starting at `chunk_start`.
#[inline]
pub(super) fn position_in(run: &Run, chunk_start: u64) -> usize {
    usize::try_from(run.offset - chunk_start).expect("chunks are at most SIEVE_CHUNK_BYTES_MAX")
}

/// One `pwritev` (at most `IOV_PIECES_MAX` slices a call) per run, from `slices`.
pub(super) fn write_runs_gathered(
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

pub(super) fn write_runs(
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
pub(super) unsafe fn mapped_slices<'m>(
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
pub(super) fn read_cached_now(
    file: &std::fs::File,
    target: &mut [u8],
    offset: u64,
) -> Option<bool> {
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

pub(super) fn read_runs(
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
pub(super) fn sieve_read(
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
pub(super) fn sieve_write(
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
