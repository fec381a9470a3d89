//! Serving one-sided requests: the data of a write is pulled out of the client's memory and
//! the data of a read pushed into it by this server (`process_vm_readv`/`process_vm_writev`,
//! the `local` backend), with no data in any frame.
//!
//! A read whose storage plan is left to the server, from a client on this host, is pushed
//! straight from a read-only mapping of the object ([`ObjectStore::read_mapped`]): the
//! client's memory is filled from the page cache in one copy, with no server buffer and no
//! storage call (a page not cached is faulted in, with the kernel's readahead, as the copy
//! reaches it). Forced plans and fabric peers go through buffers as below — except under the
//! unified cache (`--serve unified`), where every read, of any plan, is pushed (or, to a
//! fabric peer, written by RMA) straight from the cache's units: unregistered where the
//! provider needs no local registration, else only when every unit lies in the Ready region
//! registered with the fabric (`fabric.rs`).
//!
//! A request larger than one [`PIPELINE_UNIT_BYTES`] unit is pipelined (seed 001 Fig. 2.12):
//! the request's data stream is cut into units, and one thread moves unit `k + 1` between the
//! client and a server buffer while the other serves unit `k` to or from storage, with two
//! unit buffers in rotation. The whole request's extent stays locked throughout
//! ([`ObjectStore::serve_units`]), so a pipelined request is as atomic as any other.

use std::io::IoSliceMut;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use tessera_net::local::region::SharedRegion;
use tessera_proto::limits::{ARENA_BYTES_MAX, EAGER_BYTES_MAX};

use tessera_net::local::mover::{Mover, OnStall};
use tessera_net::local::rma::RmaError;
use tessera_proto::limits::PIPELINE_UNIT_BYTES;
use tessera_proto::{ErrorCode, Piece, RemoteError, RemoteMemory, RemoteSegment, StoragePlan};

use crate::buffers::{BufferPool, KeptBuffer};
use crate::storage::ObjectStorage;
use crate::store::{ObjectStore, Outcome, ServeMode};

/// One unit of a pipelined request: its share of the file pieces and of the client's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unit {
    bytes: usize,
    pieces: Vec<Piece>,
    segments: Vec<RemoteSegment>,
}

/// The client, as a one-sided peer: who reaches its memory, and where its data lies there.
#[derive(Debug)]
pub struct Client {
    /// The thread that copies to and from the client's process memory with the client's own
    /// credentials (same host, [`RemoteAccess::Process`](tessera_proto::RemoteAccess)); `None`
    /// for a fabric peer or memory the client shared.
    pub mover: Option<Arc<Mover>>,
    /// Bench builds only (the unchecked side of `bench listio`'s checks figure): copies to and
    /// from process memory straight with `rma`, as the server, without the mover's checks.
    /// Always false otherwise.
    #[cfg_attr(not(feature = "bench"), allow(dead_code))]
    pub unchecked: bool,
    /// Where its data lies.
    pub memory: RemoteMemory,
    /// Its fabric endpoint, when the memory is reached over a fabric (`fabric.rs`) rather
    /// than directly.
    pub fabric: Option<crate::fabric::Link>,
    /// Its eager buffer, when the data is there (`RemoteAccess::Shared`): storage is written
    /// from it and read into it directly.
    pub shared: Option<Arc<SharedRegion>>,
}

/// The client's bytes each segment names in its shared region (the eager buffer or an
/// arena), in order; a segment outside the region is refused, naming it. The bytes are only
/// ever copied (to storage, into a buffer or a cache unit), never checked and then relied on,
/// so a client that writes them while the request is served spoils only its own data.
fn shared_bytes<'a>(
    region: &'a SharedRegion,
    segments: &[RemoteSegment],
) -> Result<Vec<&'a [u8]>, RemoteError> {
    segments
        .iter()
        .enumerate()
        .map(|(index, segment)| {
            // SAFETY: every caller copies the bytes and nothing else (see above); no
            // `bytes_mut` view of the region is alive while a request reads from it.
            unsafe { region.bytes(segment.address, segment.length) }
                .ok_or_else(|| outside_shared(region, index, segment))
        })
        .collect()
}

/// Copies the bytes of `sources`, back to back, into the segments of `region`, in order.
fn scatter(
    region: &SharedRegion,
    segments: &[RemoteSegment],
    sources: &[impl std::ops::Deref<Target = [u8]>],
) -> Result<(), RemoteError> {
    let mut sources = sources.iter().map(|s| &**s).filter(|s| !s.is_empty());
    let mut source: &[u8] = sources.next().unwrap_or(&[]);
    for (index, segment) in segments.iter().enumerate() {
        // SAFETY: the one request served on this connection holds the region; `target` is
        // its only view of these bytes (the sources are the server's buffers or the object's
        // pages, never the region).
        let target = unsafe { region.bytes_mut(segment.address, segment.length) }
            .ok_or_else(|| outside_shared(region, index, segment))?;
        let mut filled = 0;
        while filled < target.len() {
            if source.is_empty() {
                source = sources.next().ok_or_else(|| {
                    RemoteError::new(
                        ErrorCode::Protocol,
                        "the client lent more bytes than the read holds",
                    )
                })?;
            }
            let step = source.len().min(target.len() - filled);
            target[filled..filled + step].copy_from_slice(&source[..step]);
            filled += step;
            source = &source[step..];
        }
    }
    Ok(())
}

fn outside_shared(region: &SharedRegion, index: usize, segment: &RemoteSegment) -> RemoteError {
    let what = if tessera_net::local::arena::is_arena(region.key()) {
        "arena"
    } else {
        "eager buffer"
    };
    RemoteError::new(
        ErrorCode::BadAddress,
        format!(
            "segment {index}: {} bytes at offset {} of the client's {what} lie outside its {} \
             bytes (eager_bytes_max = {EAGER_BYTES_MAX}, arena_bytes_max = {ARENA_BYTES_MAX})",
            segment.length,
            segment.address,
            region.len()
        ),
    )
}

impl Client {
    /// The mover of a process-memory peer.
    fn mover(&self) -> Result<&Mover, RemoteError> {
        self.mover.as_deref().ok_or_else(|| {
            RemoteError::new(
                ErrorCode::RemoteAccessRefused,
                "no one-sided access to this client's process memory",
            )
        })
    }

    /// Reads the client's `segments` into `data`.
    pub(crate) fn pull(
        &self,
        segments: &[RemoteSegment],
        per_call: u16,
        data: &mut [u8],
    ) -> Result<(), RemoteError> {
        match &self.fabric {
            Some(link) => link.pull(segments, data),
            #[cfg(feature = "bench")]
            None if self.unchecked => {
                tessera_net::local::rma::pull(self.mover()?.pid(), segments, per_call, data)
                    .map(drop)
                    .map_err(|e| rma_error(&e))
            }
            None => self
                .mover()?
                .pull(segments, per_call, data)
                .map(drop)
                .map_err(|e| rma_error(&e)),
        }
    }

    /// Bytes the client's memory descriptor names.
    fn described(&self) -> u64 {
        self.memory.segments.iter().map(|s| s.length).sum()
    }

    /// Reads all of the client's memory, segment after segment (or its eager buffer's
    /// range), into `data`, which must be as long.
    pub(crate) fn pull_all(&self, data: &mut [u8]) -> Result<(), RemoteError> {
        let described = self.described();
        if described != data.len() as u64 {
            return Err(RemoteError::new(
                ErrorCode::Protocol,
                format!(
                    "the client lent {described} bytes for a share of {}",
                    data.len()
                ),
            ));
        }
        if let Some(region) = &self.shared {
            let mut at = 0;
            for bytes in shared_bytes(region, &self.memory.segments)? {
                data[at..at + bytes.len()].copy_from_slice(bytes);
                at += bytes.len();
            }
            return Ok(());
        }
        self.pull(&self.memory.segments, self.memory.segments_per_call, data)
    }

    /// Keeps of the client's memory only the bytes of the pieces `keep` selects, where the
    /// memory holds pieces of `lengths` bytes back to back (however it is cut into
    /// segments): what a choosing `Demote` pulls.
    pub(crate) fn keep_pieces(
        &mut self,
        lengths: &[u64],
        keep: &[bool],
    ) -> Result<(), RemoteError> {
        let pieces: u64 = lengths.iter().sum();
        let described = self.described();
        if described != pieces || lengths.len() != keep.len() {
            return Err(RemoteError::new(
                ErrorCode::Protocol,
                format!("the client lent {described} bytes for pieces of {pieces}"),
            ));
        }
        self.memory.segments = kept_segments(&self.memory.segments, lengths, keep);
        Ok(())
    }

    /// Whether memory the fabric has not registered may take part in a transfer (always,
    /// without a fabric).
    pub(crate) fn unregistered_ok(&self) -> bool {
        self.fabric
            .as_ref()
            .is_none_or(|link| !link.needs_local_registration())
    }

    /// [`Client::pull_all`] into `slices`, back to back (memory the fabric has not
    /// registered: only where [`Client::unregistered_ok`]).
    pub(crate) fn pull_all_into(&self, slices: &mut [IoSliceMut<'_>]) -> Result<(), RemoteError> {
        let described = self.described();
        let bytes: u64 = slices.iter().map(|slice| slice.len() as u64).sum();
        if described != bytes {
            return Err(RemoteError::new(
                ErrorCode::Protocol,
                format!("the client lent {described} bytes for a share of {bytes}"),
            ));
        }
        let segments = &self.memory.segments;
        if let Some(region) = &self.shared {
            copy_between(&shared_bytes(region, segments)?, slices);
            return Ok(());
        }
        match &self.fabric {
            Some(link) => link.pull_slices(segments, slices),
            #[cfg(feature = "bench")]
            None if self.unchecked => tessera_net::local::rma::pull_vectored(
                self.mover()?.pid(),
                segments,
                self.memory.segments_per_call,
                slices,
            )
            .map(drop)
            .map_err(|e| rma_error(&e)),
            None => self
                .mover()?
                .pull_slices(segments, self.memory.segments_per_call, slices)
                .map(drop)
                .map_err(|e| rma_error(&e)),
        }
    }

    /// Writes `data` into all of the client's memory, segment after segment (or its eager
    /// buffer's range).
    pub(crate) fn push_all(&self, data: &[u8]) -> Result<(), RemoteError> {
        let described = self.described();
        if described != data.len() as u64 {
            return Err(RemoteError::new(
                ErrorCode::Protocol,
                format!(
                    "the client lent {described} bytes for a read of {} bytes",
                    data.len()
                ),
            ));
        }
        if let Some(region) = &self.shared {
            return scatter(region, &self.memory.segments, &[data]);
        }
        self.push(data, &self.memory.segments, self.memory.segments_per_call)
    }

    /// Writes `data` into the client's `segments`.
    fn push(
        &self,
        data: &[u8],
        segments: &[RemoteSegment],
        per_call: u16,
    ) -> Result<(), RemoteError> {
        match &self.fabric {
            Some(link) => link.push(data, segments),
            #[cfg(feature = "bench")]
            None if self.unchecked => {
                tessera_net::local::rma::push(self.mover()?.pid(), data, segments, per_call)
                    .map(drop)
                    .map_err(|e| rma_error(&e))
            }
            None => self
                .mover()?
                .push(data, segments, per_call)
                .map(drop)
                .map_err(|e| rma_error(&e)),
        }
    }

    /// Writes `slices`, back to back, into all of the client's process memory (straight from
    /// the object's pages or the cache's units). Should the copy stall, `release` gives back
    /// the extent the caller holds, at once, while the copy still runs.
    fn push_slices(
        &self,
        slices: &[std::io::IoSlice<'_>],
        release: Option<OnStall>,
    ) -> Result<(), RemoteError> {
        #[cfg(feature = "bench")]
        if self.unchecked {
            let segments = &self.memory.segments;
            return tessera_net::local::rma::push_vectored(
                self.mover()?.pid(),
                slices,
                segments,
                self.memory.segments_per_call,
            )
            .map(drop)
            .map_err(|e| rma_error(&e));
        }
        self.mover()?
            .push_slices(
                slices,
                &self.memory.segments,
                self.memory.segments_per_call,
                release,
            )
            .map(drop)
            .map_err(|err| rma_error(&err))
    }
}

/// The parts of `segments` (holding pieces of `lengths` bytes back to back, as many bytes in
/// all) that hold the pieces `keep` selects.
fn kept_segments(segments: &[RemoteSegment], lengths: &[u64], keep: &[bool]) -> Vec<RemoteSegment> {
    let mut kept = Vec::new();
    let mut segments = segments.iter().filter(|segment| segment.length > 0);
    // The segment being cut, and how much of it is behind.
    let mut current: Option<(&RemoteSegment, u64)> = None;
    for (&length, &keep) in lengths.iter().zip(keep) {
        let mut left = length;
        while left > 0 {
            let (segment, used) = match current {
                Some((segment, used)) if used < segment.length => (segment, used),
                _ => match segments.next() {
                    Some(segment) => (segment, 0),
                    None => return kept,
                },
            };
            let step = left.min(segment.length - used);
            if keep {
                kept.push(RemoteSegment {
                    address: segment.address + used,
                    length: step,
                    key: segment.key,
                });
            }
            left -= step;
            current = Some((segment, used + step));
        }
    }
    kept
}

/// Copies `from`, back to back, into `to`, back to back (as many bytes as both hold).
fn copy_between(from: &[&[u8]], to: &mut [IoSliceMut<'_>]) {
    let mut targets = to.iter_mut().map(|slice| &mut **slice);
    let mut target: &mut [u8] = &mut [];
    for mut source in from.iter().copied() {
        while !source.is_empty() {
            if target.is_empty() {
                let Some(next) = targets.next() else { return };
                target = next;
                continue;
            }
            let step = source.len().min(target.len());
            let (head, tail) = std::mem::take(&mut target).split_at_mut(step);
            head.copy_from_slice(&source[..step]);
            target = tail;
            source = &source[step..];
        }
    }
}

fn rma_error(err: &RmaError) -> RemoteError {
    err.to_remote()
}

/// Writes `pieces` of object `handle` with data pulled from the client's memory.
pub fn write<S: ObjectStorage>(
    store: &ObjectStore<S>,
    handle: u64,
    pieces: &[Piece],
    requested: StoragePlan,
    client: &Client,
) -> Result<Outcome, RemoteError> {
    check(pieces, client)?;
    if client.unregistered_ok() {
        if let Some(mut landing) = store.land(handle, pieces) {
            // Unified cache: the bytes are pulled straight into the units they will be.
            client.pull_all_into(&mut landing.slices())?;
            return store.write_landed(pieces, landing);
        }
    }
    if let Some(region) = &client.shared {
        let slices = shared_bytes(region, &client.memory.segments)?;
        return match slices.as_slice() {
            [data] => store.write(handle, pieces, data, requested),
            _ => store.write_gathered(handle, pieces, &slices, requested),
        };
    }
    let per_call = client.memory.segments_per_call;
    let units = cut(pieces, &client.memory.segments, PIPELINE_UNIT_BYTES);
    if let [unit] = units.as_slice() {
        let mut data = UNIT_BUFFERS.take(unit.bytes);
        client.pull(&unit.segments, per_call, &mut data)?;
        return store.write(handle, pieces, &data, requested);
    }
    let (buffers, full, empty) = rotation();
    let units = &units;
    std::thread::scope(|scope| {
        let (full_tx, empty_rx) = (full.0, empty.1);
        let puller = scope.spawn(move || -> Result<(), RemoteError> {
            for unit in units {
                let Ok(mut buffer) = empty_rx.recv() else {
                    return Ok(()); // the storage side stopped; its error is the answer
                };
                buffer.set_len(unit.bytes);
                client.pull(&unit.segments, per_call, &mut buffer)?;
                if full_tx.send(buffer).is_err() {
                    return Ok(());
                }
            }
            Ok(())
        });
        let (full_rx, empty_tx) = (full.1, empty.0);
        for buffer in buffers {
            empty_tx
                .send(buffer)
                .expect("the puller holds the receiver");
        }
        let stored = store.serve_units(handle, pieces, true, requested, |storage| {
            for unit in units {
                // A unit whose pull stalls is not waited for past the copy deadline: the
                // extent goes back at once (the puller reports the stall).
                let Ok(buffer) = full_rx.recv_timeout(UNIT_WAIT) else {
                    return Err(stopped());
                };
                storage.write(&unit.pieces, &buffer)?;
                let _ = empty_tx.send(buffer);
            }
            Ok(())
        });
        drop(full_rx);
        drop(empty_tx);
        let pulled = puller.join().unwrap_or_else(|_| Err(panicked()));
        // The puller's error explains a storage side that stopped for want of data.
        match (pulled, stored) {
            (Err(error), _) | (Ok(()), Err(error)) => Err(error),
            (Ok(()), Ok(outcome)) => Ok(outcome),
        }
    })
}

/// Reads `pieces` of object `handle` and pushes the data into the client's memory.
pub fn read<S: ObjectStorage>(
    store: &ObjectStore<S>,
    handle: u64,
    pieces: &[Piece],
    requested: StoragePlan,
    client: &Client,
) -> Result<Outcome, RemoteError> {
    check(pieces, client)?;
    let unified = store.serve_mode() == ServeMode::Unified;
    if let Some(region) = &client.shared {
        let segments = &client.memory.segments;
        if let ([segment], false) = (segments.as_slice(), unified) {
            // SAFETY: the one request served on this connection holds the region, and
            // `data` is its only view of these bytes.
            let data = unsafe { region.bytes_mut(segment.address, segment.length) }
                .ok_or_else(|| outside_shared(region, 0, segment))?;
            return store.read(handle, pieces, data, requested);
        }
        if requested == StoragePlan::Auto || unified {
            // From the object's pages (or the unified cache's units) straight into the
            // arena: one copy.
            let copied = store.read_mapped(handle, pieces, |slices, _| {
                scatter(region, segments, slices)
            })?;
            if let Some(outcome) = copied {
                return Ok(outcome);
            }
        }
        let bytes: u64 = segments.iter().map(|segment| segment.length).sum();
        let mut data = vec![0u8; usize::try_from(bytes).unwrap_or(usize::MAX)];
        let outcome = store.read(handle, pieces, &mut data, requested)?;
        scatter(region, segments, &[data])?;
        return Ok(outcome);
    }
    let per_call = client.memory.segments_per_call;
    if let (Some(link), true) = (&client.fabric, unified) {
        // From the unified cache's units straight into the client's memory: unregistered
        // where the provider needs no local registration, else from the registered Ready
        // region when every unit lies there now (Raw units would each need registering for
        // the call; the pipelined buffers below register two a request).
        if !link.needs_local_registration()
            || (link.has_ready_registration() && store.is_ready_cached(handle, pieces))
        {
            let pushed = store.read_mapped(handle, pieces, |slices, _| {
                link.push_slices(slices, &client.memory.segments)
            })?;
            if let Some(outcome) = pushed {
                return Ok(outcome);
            }
        }
    }
    // The unified cache serves every plan from its units (it makes no storage call for them).
    if client.fabric.is_none() && (requested == StoragePlan::Auto || unified) {
        // Same host: push straight from the object's pages, one copy and no buffer.
        let pushed = store.read_mapped(handle, pieces, |slices, release| {
            client.push_slices(slices, release)
        })?;
        if let Some(outcome) = pushed {
            return Ok(outcome);
        }
    }
    let units = cut(pieces, &client.memory.segments, PIPELINE_UNIT_BYTES);
    if let [unit] = units.as_slice() {
        let mut data = UNIT_BUFFERS.take(unit.bytes);
        let outcome = store.read(handle, pieces, &mut data, requested)?;
        client.push(&data, &unit.segments, per_call)?;
        return Ok(outcome);
    }
    let (buffers, full, empty) = rotation();
    let units = &units;
    std::thread::scope(|scope| {
        let (full_tx, empty_rx) = (full.0, empty.1);
        let reader = scope.spawn(move || {
            store.serve_units(handle, pieces, false, requested, |storage| {
                for unit in units {
                    // A push that stalls keeps its buffer: the extent goes back at the copy
                    // deadline.
                    let Ok(mut buffer) = empty_rx.recv_timeout(UNIT_WAIT) else {
                        return Err(stopped());
                    };
                    buffer.set_len(unit.bytes);
                    storage.read(&unit.pieces, &mut buffer)?;
                    if full_tx.send(buffer).is_err() {
                        return Err(stopped());
                    }
                }
                Ok(())
            })
        });
        let (full_rx, empty_tx) = (full.1, empty.0);
        for buffer in buffers {
            empty_tx
                .send(buffer)
                .expect("the reader holds the receiver");
        }
        let mut pushed = Ok(());
        for unit in units {
            let Ok(buffer) = full_rx.recv() else {
                break; // the reader stopped; its error is the answer
            };
            if let Err(err) = client.push(&buffer, &unit.segments, per_call) {
                pushed = Err(err);
                break;
            }
            let _ = empty_tx.send(buffer);
        }
        drop(full_rx);
        drop(empty_tx);
        let read = reader.join().unwrap_or_else(|_| Err(panicked()));
        match (pushed, read) {
            (Err(error), _) | (Ok(()), Err(error)) => Err(error),
            (Ok(()), Ok(outcome)) => Ok(outcome),
        }
    })
}

type Channel = (SyncSender<KeptBuffer>, Receiver<KeptBuffer>);

/// Unit buffers kept between requests: the two of each of four pipelined requests at once.
pub const UNIT_BUFFERS_KEPT: usize = 8;

/// Buffers of one unit (at most [`PIPELINE_UNIT_BYTES`]) of finished one-sided transfers:
/// fresh ones cost a page fault and a page clear per 4 KiB (see [`crate::buffers`]).
#[allow(clippy::cast_possible_truncation)] // 1 MiB fits every usize this builds for
static UNIT_BUFFERS: BufferPool = BufferPool::new(UNIT_BUFFERS_KEPT, PIPELINE_UNIT_BYTES as usize);

/// Two unit buffers and the channels they rotate through: `empty` to the producing side,
/// `full` to the consuming side.
fn rotation() -> ([KeptBuffer; 2], Channel, Channel) {
    let buffers = [UNIT_BUFFERS.take(0), UNIT_BUFFERS.take(0)];
    (buffers, sync_channel(2), sync_channel(2))
}

/// Longest one stage of a pipelined transfer waits for the other, which holds the extent:
/// a copy's deadline and then some (a stalled copy is reported by its own stage).
const UNIT_WAIT: std::time::Duration =
    std::time::Duration::from_millis(tessera_proto::limits::REMOTE_COPY_TIMEOUT_MS + 1000);

fn stopped() -> RemoteError {
    RemoteError::new(
        ErrorCode::Internal,
        "the other stage of a pipelined transfer stopped",
    )
}

fn panicked() -> RemoteError {
    RemoteError::new(ErrorCode::Internal, "a pipelined transfer stage panicked")
}

/// The client's segments must hold exactly the request's bytes.
fn check(pieces: &[Piece], client: &Client) -> Result<(), RemoteError> {
    let wanted: u64 = pieces.iter().map(|piece| piece.length).sum();
    let described: u64 = client
        .memory
        .segments
        .iter()
        .map(|segment| segment.length)
        .sum();
    if wanted == described {
        Ok(())
    } else {
        Err(RemoteError::new(
            ErrorCode::Protocol,
            format!("the client's memory segments hold {described} bytes, its pieces {wanted}"),
        ))
    }
}

/// Cuts the request's data stream into units of `unit_bytes`: each unit gets the pieces and
/// the memory segments (both cut at the unit's boundaries) that hold its bytes.
fn cut(pieces: &[Piece], segments: &[RemoteSegment], unit_bytes: u64) -> Vec<Unit> {
    let total: u64 = pieces.iter().map(|piece| piece.length).sum();
    let count = total.div_ceil(unit_bytes).max(1);
    let mut units: Vec<Unit> = (0..count)
        .map(|k| Unit {
            bytes: usize::try_from(unit_bytes.min(total - k * unit_bytes))
                .expect("a unit fits memory"),
            pieces: Vec::new(),
            segments: Vec::new(),
        })
        .collect();
    let mut position = 0u64;
    for piece in pieces {
        let mut offset = piece.offset;
        let mut left = piece.length;
        while left > 0 {
            let unit = position / unit_bytes;
            let room = (unit + 1) * unit_bytes - position;
            let step = left.min(room);
            units[usize::try_from(unit).expect("few units")]
                .pieces
                .push(Piece::new(offset, step));
            offset += step;
            position += step;
            left -= step;
        }
    }
    position = 0;
    for segment in segments {
        let mut address = segment.address;
        let mut left = segment.length;
        while left > 0 {
            let unit = position / unit_bytes;
            let room = (unit + 1) * unit_bytes - position;
            let step = left.min(room);
            units[usize::try_from(unit).expect("few units")]
                .segments
                .push(RemoteSegment {
                    address,
                    length: step,
                    key: segment.key,
                });
            address += step;
            position += step;
            left -= step;
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_cut_pieces_and_segments_at_the_same_bytes() {
        let pieces = [Piece::new(0, 5), Piece::new(100, 7), Piece::new(50, 4)];
        let segments = [
            RemoteSegment {
                address: 1000,
                length: 3,
                key: 0,
            },
            RemoteSegment {
                address: 2000,
                length: 13,
                key: 0,
            },
        ];
        let units = cut(&pieces, &segments, 6);
        assert_eq!(units.len(), 3);
        assert_eq!(
            units.iter().map(|unit| unit.bytes).collect::<Vec<_>>(),
            [6, 6, 4]
        );
        assert_eq!(units[0].pieces, [Piece::new(0, 5), Piece::new(100, 1)]);
        assert_eq!(units[1].pieces, [Piece::new(101, 6)]);
        assert_eq!(units[2].pieces, [Piece::new(50, 4)]);
        let addresses: Vec<Vec<(u64, u64)>> = units
            .iter()
            .map(|unit| {
                unit.segments
                    .iter()
                    .map(|segment| (segment.address, segment.length))
                    .collect()
            })
            .collect();
        assert_eq!(
            addresses,
            [vec![(1000, 3), (2000, 3)], vec![(2003, 6)], vec![(2009, 4)]]
        );
        for unit in &units {
            let piece_bytes: u64 = unit.pieces.iter().map(|piece| piece.length).sum();
            let segment_bytes: u64 = unit.segments.iter().map(|segment| segment.length).sum();
            assert_eq!(piece_bytes, unit.bytes as u64);
            assert_eq!(segment_bytes, unit.bytes as u64);
        }
    }

    #[test]
    fn kept_segments_hold_exactly_the_chosen_pieces_however_the_memory_is_cut() {
        let segment = |address, length| RemoteSegment {
            address,
            length,
            key: 9,
        };
        // Pieces of 4, 6, 2 and 5 bytes over segments of 3, 0, 10 and 4 bytes.
        let segments = [
            segment(100, 3),
            segment(150, 0),
            segment(200, 10),
            segment(300, 4),
        ];
        let lengths = [4, 6, 2, 5];
        let spans = |keep: &[bool]| -> Vec<(u64, u64)> {
            kept_segments(&segments, &lengths, keep)
                .iter()
                .map(|kept| {
                    assert_eq!(kept.key, 9);
                    (kept.address, kept.length)
                })
                .collect()
        };
        assert_eq!(spans(&[true, false, false, false]), [(100, 3), (200, 1)]);
        assert_eq!(spans(&[false, true, false, false]), [(201, 6)]);
        assert_eq!(
            spans(&[false, false, true, true]),
            [(207, 2), (209, 1), (300, 4)]
        );
        assert_eq!(spans(&[false; 4]), []);
        let all: u64 = spans(&[true; 4]).iter().map(|&(_, length)| length).sum();
        assert_eq!(all, 17);
    }
}
