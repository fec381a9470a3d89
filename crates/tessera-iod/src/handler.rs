//! The iod's request handlers: one per opcode it serves.
//!
//! Data path of a `Write`: check the piece list against the limits, take buffer budget, read
//! the bulk (one frame, or one `Data` frame per piece) into one buffer, then apply the pieces
//! to the object on a blocking thread. A `Read` runs the other way. Errors that leave the
//! stream in step (an unknown handle, a storage failure) are answered and the connection stays
//! open; a request whose bulk cannot be accounted for is refused and the connection closed.

use std::sync::Arc;

use tessera_auth::Rights;
use tessera_net::local::mover::Mover;
use tessera_net::server::{ConnectionError, Incoming, ServerConnection, Service};
use tessera_proto::access::{check_stream_ranges, server_share, server_share_within, Share};
use tessera_proto::limits::{
    DEMOTE_PIECES_MAX, FILE_BYTES_MAX, LEASE_MS_DEFAULT, MESSAGE_BULK_BYTES_MAX,
    SIEVE_CHUNK_BYTES_MAX,
};
use tessera_proto::{
    Capability, CollectiveTag, DeclareView, Decoder, Demote, DemoteOffer, DemoteReply,
    DemoteWanted, Empty, ErrorCode, FileType, Header, IoReply, Layout, LeaseAcquire,
    LeaseAcquireReply, LeaseClient, LeaseListen, LeaseRevoke, ObjectCreate, ObjectCreateMany,
    ObjectCreateManyReply, ObjectRemove, ObjectStat, ObjectStatReply, ObjectSync, ObjectTruncate,
    Opcode, Piece, PingReply, Read, ReadCollective, ReadType, ReadView, ReleaseView, RemoteAccess,
    RemoteError, RemoteMemory, RemoteProbe, RemoteProbeReply, ServerStats, ShareRegion, Statfs,
    StoragePlan, TransferMode, WantedFlags, Wire, Write, WriteCollective, WriteType, WriteView,
    ROLE_IOD, STORE_OK,
};

use crate::budget::BufferBudget;
use crate::buffers::REQUEST_BUFFERS;
use crate::collective::{self, Arrival, Collectives, Complete, Done, Joined};
use crate::files::FileStorage;
use crate::leases::{ClientKey, Leases, Revocation, WHOLE};
use crate::membership::Membership;
use crate::remote;
use crate::storage::ObjectStorage;
use crate::store::{ObjectStore, Outcome};
use crate::views::{Declared, ViewTable};

/// Requests moving at most this many bytes run their storage calls on the async worker: a
/// few page-cache copies cost less than handing the work to a blocking thread and back.
const INLINE_STORAGE_BYTES_MAX: u64 = 64 << 10;

/// A share of a file type without holes (the default view, a contiguous access) over a
/// striped file is found on the async worker when its range crosses at most this many stripe
/// units: the walk is one run cut at stripe boundaries, cheaper than the hop to a blocking
/// thread and back that every datatype write of more than 64 KiB paid.
const INLINE_DENSE_SHARE_SEGMENTS_MAX: u64 = 1024;

/// Most segments (of all servers) a datatype walk crosses inline before it is given up and
/// redone on a blocking thread: about 0.2 ms of walking here.
const INLINE_SHARE_SEGMENTS_MAX: u64 = 8192;

/// Most bytes a read copies on the async worker rather than on a blocking thread (a memory
/// copy of at most about 100 µs): a one-sided read the unified cache holds whole, and a read
/// all in the page cache (`ObjectStore::read_now`).
const WORKER_COPY_BYTES_MAX: u64 = 1 << 20;

fn reply_of(bytes: u64, outcome: Outcome) -> IoReply {
    IoReply {
        bytes,
        storage_pieces: outcome.calls,
        storage_bytes: outcome.storage_bytes,
        plan: outcome.plan,
    }
}

/// The storage side of a complete collective: one answer per participant, in arrival order.
type ServeCollective<S> = fn(&ObjectStore<S>, &Complete) -> Vec<Result<Done, RemoteError>>;

/// One I/O server, over storage `S` (a directory of files, or in tests memory or faults).
#[derive(Debug)]
pub struct Iod<S: ObjectStorage = FileStorage> {
    index: u16,
    store: Arc<ObjectStore<S>>,
    /// Bulk-buffer budget, and each uid's share of it.
    buffers: BufferBudget,
    /// Declared views.
    views: ViewTable,
    /// The fabric fabric-access requests are served over (`--ofi-provider`).
    fabric: Option<Arc<crate::fabric::FabricServer>>,
    /// Server-directed collectives waiting for participants.
    collectives: Arc<Collectives>,
    /// Data requests are checked: a valid capability, and one-sided copies through the
    /// connection's mover (always, but for the bench-only `Iod::checks_switch`, compiled in
    /// with the `bench` feature alone).
    #[cfg(feature = "bench")]
    checks: Arc<std::sync::atomic::AtomicBool>,
    /// Read leases of caching clients, revoked before a write is applied.
    leases: Arc<Leases>,
    /// The namespace whose mds may change objects here (shared with the orphan sweep).
    membership: Arc<Membership>,
}

impl<S: ObjectStorage> Iod<S> {
    /// An iod with cluster index `index` over `store`.
    pub fn new(index: u16, store: ObjectStore<S>) -> Self {
        let store = Arc::new(store);
        if let Err(err) = ObjectStore::start_write_back(&store) {
            tracing::error!("iod {index}: cannot start the cache write-back thread: {err}");
        }
        Self {
            index,
            store,
            buffers: BufferBudget::default(),
            views: ViewTable::default(),
            fabric: None,
            collectives: Arc::default(),
            #[cfg(feature = "bench")]
            checks: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            leases: Arc::new(Leases::new(LEASE_MS_DEFAULT).expect("the default lease is valid")),
            membership: Arc::new(Membership::in_memory(index)),
        }
    }

    /// Obeys object requests of the namespace `membership` records (a server reads it from
    /// its data directory; without this call the first contact is kept in memory only).
    #[must_use]
    pub fn with_membership(mut self, membership: Arc<Membership>) -> Self {
        self.membership = membership;
        self
    }

    /// The namespace this iod belongs to (shared with the orphan sweep).
    pub fn membership(&self) -> &Arc<Membership> {
        &self.membership
    }

    /// Leases last `lease_ms` milliseconds (`LEASE_MS_MIN..=LEASE_MS_MAX`).
    pub fn with_lease_ms(mut self, lease_ms: u32) -> Result<Self, String> {
        self.leases = Arc::new(Leases::new(lease_ms)?);
        Ok(self)
    }

    /// The lease table.
    pub fn leases(&self) -> &Arc<Leases> {
        &self.leases
    }

    /// The switch that turns the checks of data requests off (false) and on: capabilities,
    /// and the one-sided path's (copies then run straight on the serving thread, as the
    /// server, with no pin checks and no watch, and small ones on the async worker). Only
    /// `tessera bench listio` uses it, on iods it runs inside its own process, to measure what
    /// the checks cost; it exists only with the `bench` feature, which only `tessera-bench`
    /// turns on, so the `tessera` binary's iod has no such switch.
    #[cfg(feature = "bench")]
    pub fn checks_switch(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.checks.clone()
    }

    /// The caching client whose requests come on `connection` (it said so with `LeaseClient`
    /// or asked for a lease on it), under the uid the connection authenticated as.
    fn lease_client(connection: &ServerConnection) -> Option<ClientKey> {
        connection
            .client_id()
            .map(|id| ClientKey::new(connection.credentials().uid, id))
    }

    /// A write lease buffers writes: it needs the right to write, beyond the read right every
    /// `LeaseAcquire` was checked for.
    fn check_write_right(
        &self,
        connection: &mut ServerConnection,
        handle: u64,
        capability: &Capability,
    ) -> Result<(), RemoteError> {
        if !self.checking() {
            return Ok(());
        }
        connection.check_capability(capability, handle, Rights::WRITE)
    }

    /// Whether data requests are checked (always, outside bench builds).
    #[cfg_attr(not(feature = "bench"), allow(clippy::unused_self))]
    fn checking(&self) -> bool {
        #[cfg(feature = "bench")]
        return self.checks.load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(feature = "bench"))]
        true
    }

    /// Serves one-sided requests with fabric access over `fabric`.
    #[must_use]
    pub fn with_fabric(mut self, fabric: Arc<crate::fabric::FabricServer>) -> Self {
        self.fabric = Some(fabric);
        self
    }

    /// The objects it serves (shared with the orphan sweep).
    pub fn store(&self) -> &Arc<ObjectStore<S>> {
        &self.store
    }

    /// Runs a store call: inline when it moves at most `INLINE_STORAGE_BYTES_MAX` bytes,
    /// otherwise on a blocking thread off the async workers.
    async fn storage<T: Send + 'static>(
        &self,
        bytes: u64,
        call: impl FnOnce(&ObjectStore<S>) -> Result<T, RemoteError> + Send + 'static,
    ) -> Result<T, RemoteError> {
        if bytes <= INLINE_STORAGE_BYTES_MAX {
            return call(&self.store);
        }
        self.blocking(call).await
    }

    /// Runs a blocking store call off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&ObjectStore<S>) -> Result<T, RemoteError> + Send + 'static,
    ) -> Result<T, RemoteError> {
        // A connection's own thread may block: no hand-off.
        if tessera_net::server::serving_on_own_thread() {
            return call(&self.store);
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || call(&store))
            .await
            .unwrap_or_else(|err| {
                Err(RemoteError::new(
                    ErrorCode::Internal,
                    format!("storage task failed: {err}"),
                ))
            })
    }

    async fn answer<T: tessera_proto::Wire>(
        connection: &mut ServerConnection,
        header: &Header,
        result: Result<T, RemoteError>,
    ) -> Result<(), ConnectionError> {
        match result {
            Ok(reply) => connection.reply(header, &reply, &[]).await,
            Err(error) => connection.reply_error(header, &error).await,
        }
    }

    /// The one-sided peer of a request whose bulk is a [`RemoteMemory`]: the process at the
    /// other end of a same-host Unix socket, by the kernel's word. A malformed descriptor
    /// closes the connection; one that cannot be served here is an error reply.
    async fn remote_client(
        &self,
        connection: &mut ServerConnection,
        descriptor: &[u8],
    ) -> Result<Result<remote::Client, RemoteError>, ConnectionError> {
        let memory = RemoteMemory::from_body(descriptor)
            .map_err(|err| ConnectionError::Refused(err.into()))?;
        if let (RemoteAccess::Fabric, Some(fabric)) = (memory.access, &self.fabric) {
            return Ok(fabric.link(&memory.endpoint.0).map(|link| remote::Client {
                mover: None,
                unchecked: false,
                memory,
                fabric: Some(link),
                shared: None,
            }));
        }
        if memory.access == RemoteAccess::Shared {
            let Some(key) = memory.segments.first().map(|segment| segment.key) else {
                return Ok(Err(RemoteError::new(
                    ErrorCode::Protocol,
                    "a shared-memory transfer names no segment",
                )));
            };
            if let Some(index) = memory.segments.iter().position(|s| s.key != key) {
                return Ok(Err(RemoteError::new(
                    ErrorCode::Protocol,
                    format!(
                        "a shared-memory transfer names one region; segment {index} names another"
                    ),
                )));
            }
            return Ok(connection.shared_region(key).map(|region| remote::Client {
                mover: None,
                unchecked: false,
                memory,
                fabric: None,
                shared: Some(region),
            }));
        }
        if memory.access != RemoteAccess::Process {
            return Ok(Err(RemoteError::new(
                ErrorCode::RemoteAccessRefused,
                "fabric one-sided access is not served on this connection",
            )));
        }
        // The client's process memory: reached only by its connection's mover, a thread with
        // the client's own credentials (tessera_net::local::mover).
        Ok(connection.mover().await.map(|mover| remote::Client {
            unchecked: !self.checking(),
            mover: Some(mover),
            memory,
            fabric: None,
            shared: None,
        }))
    }

    /// Runs `call`, which moves data to or from a client's process memory through `mover`,
    /// on a blocking thread, never on an async worker: a copy may wait on the client's memory
    /// (a FUSE mapping, userfaultfd). If the mover is retired meanwhile (a copy stalled past
    /// its deadline, the process is gone), the answer is its reason at once, whatever the
    /// thread still does, and the caller closes the connection.
    async fn one_sided<T: Send + 'static>(
        &self,
        mover: &Arc<Mover>,
        call: impl FnOnce(&ObjectStore<S>) -> Result<T, RemoteError> + Send + 'static,
    ) -> Result<T, RemoteError> {
        // On a connection's own thread the copy runs in line: a wait on the client's memory
        // holds up that connection alone, and the watchdog declares a stall (the mover's
        // `watch`).
        if tessera_net::server::serving_on_own_thread() {
            return call(&self.store);
        }
        let store = self.store.clone();
        let job = tokio::task::spawn_blocking(move || call(&store));
        tokio::select! {
            joined = job => joined.unwrap_or_else(|err| {
                Err(RemoteError::new(
                    ErrorCode::Internal,
                    format!("one-sided transfer failed: {err}"),
                ))
            }),
            () = mover.retired_wait() => Err(Self::retired_error(mover)),
        }
    }

    fn retired_error(mover: &Mover) -> RemoteError {
        RemoteError::new(
            ErrorCode::RemoteAccessRefused,
            format!(
                "pid {}: {}",
                mover.pid(),
                mover.retired().unwrap_or_default()
            ),
        )
    }

    /// Sends `result`; but when the mover of the request's client was retired (its process is
    /// gone, or a copy stalled), the connection is closed after it: its lent memory may still
    /// be written, and it is never used one-sidedly again.
    async fn answer_one_sided<T: tessera_proto::Wire>(
        connection: &mut ServerConnection,
        header: &Header,
        mover: Option<&Arc<Mover>>,
        result: Result<T, RemoteError>,
    ) -> Result<(), ConnectionError> {
        if let Some(mover) = mover.filter(|mover| mover.retired().is_some()) {
            let error = match result {
                Err(error) => error,
                Ok(_) => Self::retired_error(mover),
            };
            return Err(ConnectionError::Refused(error));
        }
        Self::answer(connection, header, result).await
    }

    async fn probe(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let RemoteProbe {} = request.decode()?;
        let descriptor = connection.read_bulk(&request.header).await?;
        let client = match self.remote_client(connection, &descriptor).await? {
            Ok(client) => client,
            Err(error) => return connection.reply_error(&request.header, &error).await,
        };
        let mover = client.mover.clone();
        let result = if client.memory.segments.iter().map(|s| s.length).sum::<u64>() == 8 {
            let probe = move |_: &ObjectStore<S>| {
                let mut token = [0u8; 8];
                client
                    .pull(&client.memory.segments, 0, &mut token)
                    .map(|()| token)
            };
            match &mover {
                // Off the async worker: the client's memory may make the copy wait.
                Some(mover) => self.one_sided(mover, probe).await,
                None => probe(&self.store),
            }
        } else {
            Err(RemoteError::new(
                ErrorCode::Protocol,
                "a remote probe names exactly 8 bytes",
            ))
        };
        let result = result.map(|token| RemoteProbeReply {
            token: u64::from_le_bytes(token),
        });
        Self::answer_one_sided(connection, &request.header, mover.as_ref(), result).await
    }

    /// Serves a write or read whose data the server moves one-sidedly.
    async fn serve_remote(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        write: bool,
        (handle, storage, pieces, total): (u64, StoragePlan, Vec<Piece>, u64),
        descriptor: &[u8],
    ) -> Result<(), ConnectionError> {
        let client = match self.remote_client(connection, descriptor).await? {
            Ok(client) => client,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let mover = client.mover.clone();
        // Pipelined requests hold two units at a time, not the whole request.
        let buffered = total.min(2 * tessera_proto::limits::PIPELINE_UNIT_BYTES);
        let _budget = self
            .buffer_budget(connection, buffered + Self::sieve_budget(&pieces, storage))
            .await;
        // A read the unified cache holds whole is a memory copy with no storage call: pushed
        // from this worker when not too large.
        let inline = !write
            && (INLINE_STORAGE_BYTES_MAX + 1..=WORKER_COPY_BYTES_MAX).contains(&total)
            && self.store.is_cached(handle, &pieces);
        let serve = move |store: &ObjectStore<S>| {
            let outcome = if write {
                remote::write(store, handle, &pieces, storage, &client)
            } else {
                remote::read(store, handle, &pieces, storage, &client)
            };
            outcome.map(|outcome| reply_of(total, outcome))
        };
        let result = if let Some(mover) = &mover {
            self.one_sided(mover, serve).await
        } else if inline {
            serve(&self.store)
        } else {
            self.storage(total, serve).await
        };
        Self::answer_one_sided(connection, header, mover.as_ref(), result).await
    }

    /// Checks a piece list: every piece inside the file limit, total within one bulk.
    fn check_pieces(pieces: &[Piece]) -> Result<u64, RemoteError> {
        let mut total = 0u64;
        for piece in pieces {
            if piece
                .offset
                .checked_add(piece.length)
                .is_none_or(|end| end > FILE_BYTES_MAX)
            {
                return Err(RemoteError::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "piece at {} of {} bytes ends past file_bytes_max ({FILE_BYTES_MAX})",
                        piece.offset, piece.length
                    ),
                ));
            }
            total = total.saturating_add(piece.length);
        }
        if total > u64::from(MESSAGE_BULK_BYTES_MAX) {
            return Err(RemoteError::over_limit(
                "message_bulk_bytes_max",
                total,
                u64::from(MESSAGE_BULK_BYTES_MAX),
            ));
        }
        Ok(total)
    }

    /// Takes `bytes` of the bulk-buffer budget for the connection's uid (waiting, if it
    /// must, without a work slot).
    async fn buffer_budget(
        &self,
        connection: &mut ServerConnection,
        bytes: u64,
    ) -> crate::budget::Taken<'_> {
        let uid = connection.credentials().uid;
        connection.waiting(self.buffers.take(uid, bytes)).await
    }

    /// The share of a collective request: its tag checked, then its type walked.
    async fn collective_share(
        tag: &CollectiveTag,
        file: FileType,
        start: u64,
        end: u64,
        ranges: Vec<Piece>,
    ) -> Result<Share, RemoteError> {
        collective::check_tag(tag)?;
        Self::share(Declared::of_type(file), start, end, ranges).await
    }

    /// Finds this server's share of a datatype range: without a walk for a view that matches
    /// a pattern layout or whose last request was of the same range
    /// ([`KeptShare`](crate::views::KeptShare)); otherwise by a walk.
    async fn share(
        view: Declared,
        start: u64,
        end: u64,
        ranges: Vec<Piece>,
    ) -> Result<Share, RemoteError> {
        let Declared {
            file,
            matched,
            kept,
        } = view;
        if let Some(matched) = matched {
            check_stream_ranges(&ranges, start, end)?;
            return matched.share(&file, start, end);
        }
        let Some(kept) = kept else {
            return Self::walk(file, start, end, ranges).await;
        };
        if let Some(share) = kept.get(start, end, &ranges) {
            return Ok(share);
        }
        let key = ranges.clone();
        let share = Self::walk(file, start, end, ranges).await?;
        kept.keep(start, end, &key, &share);
        Ok(share)
    }

    /// Walks `file` for this server's share of stream bytes `[start, end)`: inline when the
    /// range is small, or not too large and the type has no holes; otherwise on a blocking
    /// thread (the walk may visit millions of segments).
    async fn walk(
        file: Arc<FileType>,
        start: u64,
        end: u64,
        ranges: Vec<Piece>,
    ) -> Result<Share, RemoteError> {
        let bytes = end.saturating_sub(start);
        let holes = !file.filetype.is_dense()
            || u64::try_from(file.filetype.extent()).ok() != Some(file.filetype.size());
        let few_segments = match &file.layout {
            Layout::Stripe(stripe) => {
                bytes / stripe.stripe_unit_bytes < INLINE_DENSE_SHARE_SEGMENTS_MAX
            }
            Layout::Pattern(_) => false,
        };
        if bytes <= INLINE_STORAGE_BYTES_MAX || (!holes && few_segments) {
            return server_share(&file, start, end, &ranges);
        }
        // Most walks are short whatever their bytes (a row per segment): try inline first,
        // since the hop to a blocking thread costs more than such a walk on a loaded host.
        if let Some(share) =
            server_share_within(&file, start, end, &ranges, INLINE_SHARE_SEGMENTS_MAX)?
        {
            return Ok(share);
        }
        tokio::task::spawn_blocking(move || server_share(&file, start, end, &ranges))
            .await
            .unwrap_or_else(|err| {
                Err(RemoteError::new(
                    ErrorCode::Internal,
                    format!("share walk failed: {err}"),
                ))
            })
    }

    /// Buffer budget a request may need beyond its data: one sieving chunk, which is never
    /// larger than the extent its pieces span nor than `SIEVE_CHUNK_BYTES_MAX`.
    fn sieve_budget(pieces: &[Piece], storage: StoragePlan) -> u64 {
        if pieces.len() < 2 || !matches!(storage, StoragePlan::Auto | StoragePlan::Sieve) {
            return 0;
        }
        let start = pieces.iter().map(|piece| piece.offset).min().unwrap_or(0);
        let end = pieces
            .iter()
            .map(|piece| piece.offset + piece.length)
            .max()
            .unwrap_or(0);
        (end - start).min(SIEVE_CHUNK_BYTES_MAX)
    }

    async fn write(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let (handle, mode, storage, pieces, total) = match request.opcode {
            Opcode::WriteType | Opcode::WriteView => {
                let (handle, mode, storage, file, (start, end, ranges), frames) =
                    if request.opcode == Opcode::WriteType {
                        let write: WriteType = request.decode()?;
                        let file = Ok(Declared::of_type(write.file));
                        (
                            write.handle,
                            write.mode,
                            write.storage,
                            file,
                            (write.start, write.end, write.ranges),
                            write.pieces,
                        )
                    } else {
                        let write: WriteView = request.decode()?;
                        let file = self.views.get(write.handle, write.view_id);
                        (
                            write.handle,
                            write.mode,
                            write.storage,
                            file,
                            (write.start, write.end, write.ranges),
                            write.pieces,
                        )
                    };
                let share = match file {
                    Ok(file) => Self::share(file, start, end, ranges).await,
                    Err(error) => Err(error),
                };
                match share {
                    Ok(share) if share.pieces.len() == frames as usize => {
                        (handle, mode, storage, share.pieces, share.bytes)
                    }
                    Ok(share) => {
                        return Err(ConnectionError::Refused(RemoteError::new(
                            ErrorCode::Protocol,
                            format!(
                                "the client counted {frames} local pieces in stream bytes {start}..{end}, this server {}",
                                share.pieces.len()
                            ),
                        )));
                    }
                    Err(error) => {
                        // Drop the data so the connection stays usable (an unknown view is
                        // declared again and the write resent on it).
                        let frames = if mode == TransferMode::Multiple {
                            frames
                        } else {
                            0
                        };
                        connection.skip_request_data(header, frames).await?;
                        return connection.reply_error(header, &error).await;
                    }
                }
            }
            _ => {
                let write: Write = request.decode()?;
                let total = Self::check_pieces(&write.pieces).map_err(ConnectionError::Refused)?;
                (write.handle, write.mode, write.storage, write.pieces, total)
            }
        };
        // Leases on the object are revoked before the data is applied; new ones wait until it
        // is (the guard goes before the answer, so a reader told of the write can lease).
        let writer = Self::lease_client(connection);
        let writing = self
            .leases
            .begin_write(handle, extent(&pieces), writer)
            .await;
        if mode == TransferMode::Remote {
            let descriptor = connection.read_bulk(header).await?;
            let request = (handle, storage, pieces, total);
            return self
                .serve_remote(header, connection, true, request, &descriptor)
                .await;
        }
        let expected_bulk = if mode == TransferMode::Multiple {
            0
        } else {
            total
        };
        if u64::from(header.bulk_bytes) != expected_bulk {
            return Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                format!(
                    "write carries {} bulk bytes but its pieces add up to {expected_bulk}",
                    header.bulk_bytes
                ),
            )));
        }
        let _budget = self
            .buffer_budget(connection, total + Self::sieve_budget(&pieces, storage))
            .await;
        if let Some(mut landing) = self.store.land(handle, &pieces) {
            // Unified cache: the bytes arrive straight in the units they will be.
            if mode == TransferMode::Multiple {
                let mut slices = landing.slices();
                connection
                    .read_data_frames_into(header, &pieces, &mut slices)
                    .await?;
            } else {
                connection
                    .read_bulk_into(header, &mut landing.slices())
                    .await?;
            }
            let result = self
                .storage(total, move |store| {
                    store
                        .write_landed(&pieces, landing)
                        .map(|outcome| reply_of(total, outcome))
                })
                .await;
            drop(writing);
            return Self::answer(connection, header, result).await;
        }
        let mut data =
            REQUEST_BUFFERS.take(usize::try_from(total).expect("bounded by the bulk limit"));
        if mode == TransferMode::Multiple {
            connection
                .read_data_frames(header, &pieces, &mut data)
                .await?;
        } else {
            connection
                .read_bulk_into(header, &mut [std::io::IoSliceMut::new(&mut data)])
                .await?;
        }
        let result = self
            .storage(total, move |store| {
                store
                    .write(handle, &pieces, &data, storage)
                    .map(|outcome| reply_of(total, outcome))
            })
            .await;
        drop(writing);
        Self::answer(connection, header, result).await
    }

    /// The handle, mode and local pieces of a read of any form.
    async fn read_pieces(
        &self,
        request: &Incoming,
    ) -> Result<
        (u64, TransferMode, StoragePlan, Vec<Piece>, u64),
        Result<RemoteError, ConnectionError>,
    > {
        Ok(match request.opcode {
            Opcode::ReadType => {
                let read: ReadType = request.decode().map_err(Err)?;
                let share = Self::share(
                    Declared::of_type(read.file),
                    read.start,
                    read.end,
                    read.ranges,
                )
                .await
                .map_err(Ok)?;
                (
                    read.handle,
                    read.mode,
                    read.storage,
                    share.pieces,
                    share.bytes,
                )
            }
            Opcode::ReadView => {
                let read: ReadView = request.decode().map_err(Err)?;
                let file = self.views.get(read.handle, read.view_id).map_err(Ok)?;
                let share = Self::share(file, read.start, read.end, read.ranges)
                    .await
                    .map_err(Ok)?;
                (
                    read.handle,
                    read.mode,
                    read.storage,
                    share.pieces,
                    share.bytes,
                )
            }
            _ => {
                let read: Read = request.decode().map_err(Err)?;
                let total = Self::check_pieces(&read.pieces).map_err(Ok)?;
                (read.handle, read.mode, read.storage, read.pieces, total)
            }
        })
    }

    async fn read(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        // A one-sided read's bulk is its memory descriptor; read it before anything can fail
        // so the stream stays in step.
        let descriptor = if header.bulk_bytes > 0 {
            Some(connection.read_bulk(header).await?)
        } else {
            None
        };
        let (handle, mode, storage, pieces, total) = match self.read_pieces(request).await {
            Ok(found) => found,
            Err(Ok(error)) => return connection.reply_error(header, &error).await,
            Err(Err(error)) => return Err(error),
        };
        // Bytes another client buffers under a write lease are written before they are read.
        self.leases.begin_read(handle, extent(&pieces)).await;
        // Blocks a leased, demoting caching client reads go to the least recent end once sent.
        let uid = connection.credentials().uid;
        let _sent = connection
            .client_id()
            .filter(|&id| self.leases.demotes(handle, ClientKey::new(uid, id)))
            .map(|_| SentToCache {
                store: &self.store,
                handle,
                pieces: pieces.clone(),
            });
        match (mode, descriptor) {
            (TransferMode::Remote, Some(descriptor)) => {
                let request = (handle, storage, pieces, total);
                return self
                    .serve_remote(header, connection, false, request, &descriptor)
                    .await;
            }
            (TransferMode::Remote, None) | (_, Some(_)) => {
                return Err(ConnectionError::Refused(RemoteError::new(
                    ErrorCode::Protocol,
                    "a read carries a memory descriptor as bulk exactly when its mode is remote",
                )));
            }
            _ => {}
        }
        let _budget = self
            .buffer_budget(connection, total + Self::sieve_budget(&pieces, storage))
            .await;
        if self.store.cache().is_some() {
            return self
                .read_cached(header, connection, mode, handle, pieces, total)
                .await;
        }
        let length = usize::try_from(total).expect("bounded by the bulk limit");
        let small = matches!(storage, StoragePlan::Auto | StoragePlan::PerPiece)
            && total <= WORKER_COPY_BYTES_MAX;
        // A small read all in the page cache goes out right here: in the mmap serve mode, with
        // the plan left to the iod, straight from the object's pages into the socket (what the
        // socket does not take at once copied before the extent is let go), else read into a
        // buffer first. The rest is read on a blocking thread, which also sizes (and so may
        // zero) a larger buffer.
        // A plan the client forced (per piece, batched, sieve) is followed to the letter.
        if small && matches!(storage, StoragePlan::Auto) && mode != TransferMode::Multiple {
            let sent = self
                .store
                .read_mapped_now(handle, &pieces, |outcome, slices| {
                    connection.try_reply_vectored(header, &reply_of(total, *outcome), slices)
                });
            if let Some(rest) = sent {
                return connection.finish_reply(&rest?).await;
            }
        }
        let mut small = small.then(|| REQUEST_BUFFERS.take(length));
        let now = small
            .as_mut()
            .and_then(|data| self.store.read_now(handle, &pieces, data));
        let result = match (now, small) {
            (Some(outcome), Some(data)) => outcome.map(|outcome| (data, pieces, outcome)),
            (_, small) => {
                self.storage(total, move |store| {
                    let mut data = small.unwrap_or_else(|| REQUEST_BUFFERS.take(length));
                    let outcome = store.read(handle, &pieces, &mut data, storage)?;
                    Ok((data, pieces, outcome))
                })
                .await
            }
        };
        match result {
            Err(error) => connection.reply_error(header, &error).await,
            Ok((data, pieces, outcome)) => {
                let reply = reply_of(total, outcome);
                if mode == TransferMode::Multiple {
                    connection.reply(header, &reply, &[]).await?;
                    connection.send_data_frames(header, &pieces, &data).await
                } else {
                    connection.reply(header, &reply, &data).await
                }
            }
        }
    }
}

impl<S: ObjectStorage> Iod<S> {
    /// Sends a read from the unified cache: its bytes stay pinned in the cache's buffers
    /// (no request buffer) and go out straight from them, one `writev` per frame. The
    /// pinned bytes count against the buffer budget the caller holds.
    async fn read_cached(
        &self,
        header: &Header,
        connection: &mut ServerConnection,
        mode: TransferMode,
        handle: u64,
        pieces: Vec<Piece>,
        total: u64,
    ) -> Result<(), ConnectionError> {
        // A hit is pinned right here; a miss or a wait goes where storage calls go.
        let result = match self.store.read_pinned_now(handle, &pieces) {
            Some(cached) => Ok((cached, pieces)),
            None => {
                self.storage(total, move |store| {
                    let cached = store.read_pinned(handle, &pieces)?;
                    Ok((cached, pieces))
                })
                .await
            }
        };
        let (cached, pieces) = match result {
            Ok(found) => found,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let reply = reply_of(total, cached.outcome);
        if mode == TransferMode::Multiple {
            let slices = match cached.piece_slices(handle, &pieces) {
                Ok(slices) => slices,
                Err(error) => return connection.reply_error(header, &error).await,
            };
            connection.reply(header, &reply, &[]).await?;
            connection.send_data_frames_vectored(header, slices).await
        } else {
            match cached.slices(handle, &pieces) {
                Ok(slices) => connection.reply_vectored(header, &reply, &slices).await,
                Err(error) => connection.reply_error(header, &error).await,
            }
        }
    }

    /// Whether the connection may make this request: a capability with the rights it needs
    /// on its handle for data requests; for object life-cycle requests, a server's
    /// connection and the namespace this iod belongs to ([`Membership`]). The outer error
    /// closes the connection (a body too short to hold a handle and capability, or a
    /// malformed life-cycle request); the inner one is the refusal to answer.
    fn authorize(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<Result<(), RemoteError>, ConnectionError> {
        let wanted = match request.opcode {
            Opcode::ObjectCreate
            | Opcode::ObjectRemove
            | Opcode::ObjectTruncate
            | Opcode::ObjectCreateMany => {
                if !connection.is_server() {
                    return Ok(Err(RemoteError::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "permission denied: only the metadata server may {:?}; {} speaks for uid {}",
                            request.opcode,
                            connection.peer(),
                            connection.credentials().uid
                        ),
                    )));
                }
                // Every life-cycle request starts with its handle and the mds's namespace; a
                // create of many starts with the namespace.
                let mut decoder = Decoder::new(&request.body);
                let refused = |err: tessera_proto::WireError| ConnectionError::Refused(err.into());
                if request.opcode == Opcode::ObjectCreateMany {
                    let namespace = decoder.u64().map_err(refused)?;
                    return Ok(self
                        .membership
                        .check(namespace, format_args!("{:?}", request.opcode)));
                }
                let handle = decoder.u64().map_err(refused)?;
                let namespace = decoder.u64().map_err(refused)?;
                return Ok(self.membership.check(
                    namespace,
                    format_args!("{:?} of handle {handle:#x}", request.opcode),
                ));
            }
            Opcode::Write
            | Opcode::WriteType
            | Opcode::WriteView
            | Opcode::WriteCollective
            | Opcode::DemoteOffer
            | Opcode::Demote => Rights::WRITE,
            Opcode::Read
            | Opcode::ReadType
            | Opcode::ReadView
            | Opcode::ReadCollective
            | Opcode::LeaseAcquire => Rights::READ,
            Opcode::DeclareView | Opcode::ReleaseView | Opcode::ObjectStat | Opcode::ObjectSync => {
                Rights::ANY
            }
            // Ping, ServerStats, Statfs and RemoteProbe touch no file; others are refused
            // later.
            _ => return Ok(Ok(())),
        };
        if !self.checking() {
            return Ok(Ok(()));
        }
        // Every request on a file starts with its handle and capability.
        let mut decoder = Decoder::new(&request.body);
        let handle = decoder
            .u64()
            .map_err(|err| ConnectionError::Refused(err.into()))?;
        let capability =
            Capability::decode(&mut decoder).map_err(|err| ConnectionError::Refused(err.into()))?;
        Ok(connection.check_capability(&capability, handle, wanted))
    }

    /// `Data` frames that follow a request (a write in the multiple mode).
    fn data_frames(request: &Incoming) -> Result<u32, ConnectionError> {
        let multiple = |mode: TransferMode, frames: u32| {
            if mode == TransferMode::Multiple {
                frames
            } else {
                0
            }
        };
        Ok(match request.opcode {
            Opcode::Write => {
                let write: Write = request.decode()?;
                multiple(
                    write.mode,
                    u32::try_from(write.pieces.len()).expect("bounded by request_pieces_max"),
                )
            }
            Opcode::WriteType => {
                let write: WriteType = request.decode()?;
                multiple(write.mode, write.pieces)
            }
            Opcode::WriteView => {
                let write: WriteView = request.decode()?;
                multiple(write.mode, write.pieces)
            }
            Opcode::WriteCollective => {
                let write: WriteCollective = request.decode()?;
                multiple(write.mode, write.pieces)
            }
            _ => 0,
        })
    }

    /// Hands an arrival to its collective and waits for the outcome: as the last arrival,
    /// serves the collective (`serve` on a blocking thread) and answers the others; otherwise
    /// waits for the last one, or for the tag's wait to run out.
    async fn take_part(
        &self,
        tag: &CollectiveTag,
        handle: u64,
        write: bool,
        storage: StoragePlan,
        arrival: Arrival,
        serve: ServeCollective<S>,
    ) -> Result<Done, RemoteError> {
        match self
            .collectives
            .join(tag, handle, write, storage, arrival)?
        {
            Joined::Last(complete) => {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || {
                    let results = serve(&store, &complete);
                    complete.answer(results)
                })
                .await
                .unwrap_or_else(|err| {
                    Err(RemoteError::new(
                        ErrorCode::Internal,
                        format!("collective storage task failed: {err}"),
                    ))
                })
            }
            Joined::Wait(mut receiver) => {
                let wait = std::time::Duration::from_millis(u64::from(tag.wait_ms));
                match tokio::time::timeout(wait, &mut receiver).await {
                    Ok(answer) => answer.unwrap_or_else(|_| Err(Self::abandoned(tag))),
                    Err(_) => match self.collectives.expire(tag) {
                        Some(error) => Err(error),
                        // Completed meanwhile: the answer is on its way.
                        None => receiver.await.unwrap_or_else(|_| Err(Self::abandoned(tag))),
                    },
                }
            }
        }
    }

    fn abandoned(tag: &CollectiveTag) -> RemoteError {
        RemoteError::new(
            ErrorCode::Internal,
            format!(
                "collective {:#x} round {} was dropped without an answer",
                tag.id, tag.round
            ),
        )
    }

    /// One participant of a server-directed collective write (seed 004): its share of the
    /// access is found as for `WriteType`, its data read (or pulled one-sidedly), and the
    /// collective joined.
    async fn write_collective(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let write: WriteCollective = request.decode()?;
        let tag = write.collective.clone();
        let frames = if write.mode == TransferMode::Multiple {
            write.pieces
        } else {
            0
        };
        let share =
            Self::collective_share(&tag, write.file, write.start, write.end, write.ranges).await;
        let share = match share {
            Ok(share) if share.pieces.len() != write.pieces as usize => {
                return Err(ConnectionError::Refused(RemoteError::new(
                    ErrorCode::Protocol,
                    format!(
                        "the client counted {} local pieces in stream bytes {}..{}, this server {}",
                        write.pieces,
                        write.start,
                        write.end,
                        share.pieces.len()
                    ),
                )));
            }
            Ok(share) => collective::check_bytes(&tag, share.bytes).map(|()| share),
            Err(error) => Err(error),
        };
        let share = match share {
            Ok(share) => share,
            Err(error) => {
                connection.skip_request_data(header, frames).await?;
                return connection.reply_error(header, &error).await;
            }
        };
        let total = share.bytes;
        let length = usize::try_from(total).expect("bounded by collective_bytes_max");
        let data = match write.mode {
            TransferMode::Remote => {
                let descriptor = connection.read_bulk(header).await?;
                let client = match self.remote_client(connection, &descriptor).await? {
                    Ok(client) => client,
                    Err(error) => return connection.reply_error(header, &error).await,
                };
                let mover = client.mover.clone();
                let pull = move |_: &ObjectStore<S>| {
                    let mut data = vec![0u8; length];
                    client.pull_all(&mut data).map(|()| data)
                };
                let pulled = match &mover {
                    Some(mover) => self.one_sided(mover, pull).await,
                    None => self.blocking(pull).await,
                };
                match pulled {
                    Ok(data) => data,
                    Err(error) => {
                        return Self::answer_one_sided::<Empty>(
                            connection,
                            header,
                            mover.as_ref(),
                            Err(error),
                        )
                        .await;
                    }
                }
            }
            TransferMode::Multiple => {
                let mut data = vec![0u8; length];
                connection
                    .read_data_frames(header, &share.pieces, &mut data)
                    .await?;
                data
            }
            TransferMode::Gather | TransferMode::Pack => {
                if u64::from(header.bulk_bytes) != total {
                    return Err(ConnectionError::Refused(RemoteError::new(
                        ErrorCode::Protocol,
                        format!(
                            "collective write carries {} bulk bytes but its share is {total}",
                            header.bulk_bytes
                        ),
                    )));
                }
                connection.read_bulk(header).await?
            }
        };
        let arrival = Arrival {
            rank: tag.rank,
            pieces: share.pieces,
            data,
            bytes: total,
        };
        // Held until this participant's answer, so past the collective's one write.
        let _writing = self.leases.begin_write(write.handle, WHOLE, None).await;
        let result = self
            .take_part(
                &tag,
                write.handle,
                true,
                write.storage,
                arrival,
                |store, complete| {
                    let outcome = collective::serve_write(store, complete);
                    let last = complete.arrivals.len() - 1;
                    (0..complete.arrivals.len())
                        .map(|index| match &outcome {
                            Ok(outcome) => Ok(Done {
                                data: Vec::new(),
                                outcome: if index == last {
                                    *outcome
                                } else {
                                    crate::store::Outcome {
                                        plan: outcome.plan,
                                        ..Default::default()
                                    }
                                },
                            }),
                            Err(error) => Err(error.clone()),
                        })
                        .collect()
                },
            )
            .await
            .map(|done| reply_of(total, done.outcome));
        Self::answer(connection, header, result).await
    }

    /// One participant of a server-directed collective read: joins with its share, and gets
    /// its bytes of the union the last participant read.
    async fn read_collective(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let descriptor = if header.bulk_bytes > 0 {
            Some(connection.read_bulk(header).await?)
        } else {
            None
        };
        let read: ReadCollective = request.decode()?;
        self.leases.begin_read(read.handle, WHOLE).await;
        let tag = read.collective.clone();
        let share =
            Self::collective_share(&tag, read.file, read.start, read.end, read.ranges).await;
        let share = match share.and_then(|share| {
            // The union and every answer are held at once: count the share twice.
            collective::check_bytes(&tag, share.bytes.saturating_mul(2)).map(|()| share)
        }) {
            Ok(share) => share,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let client = match (read.mode, descriptor) {
            (TransferMode::Remote, Some(descriptor)) => {
                match self.remote_client(connection, &descriptor).await? {
                    Ok(client) => Some(client),
                    Err(error) => return connection.reply_error(header, &error).await,
                }
            }
            (TransferMode::Remote, None) | (_, Some(_)) => {
                return Err(ConnectionError::Refused(RemoteError::new(
                    ErrorCode::Protocol,
                    "a read carries a memory descriptor as bulk exactly when its mode is remote",
                )));
            }
            _ => None,
        };
        let total = share.bytes;
        let pieces = share.pieces.clone();
        let arrival = Arrival {
            rank: tag.rank,
            pieces: share.pieces,
            data: Vec::new(),
            bytes: total.saturating_mul(2),
        };
        let result = self
            .take_part(
                &tag,
                read.handle,
                false,
                read.storage,
                arrival,
                |store, complete| {
                    let last = complete.arrivals.len() - 1;
                    match collective::serve_read(store, complete) {
                        Ok((answers, outcome)) => answers
                            .into_iter()
                            .enumerate()
                            .map(|(index, data)| {
                                Ok(Done {
                                    data,
                                    outcome: if index == last {
                                        outcome
                                    } else {
                                        crate::store::Outcome {
                                            plan: outcome.plan,
                                            ..Default::default()
                                        }
                                    },
                                })
                            })
                            .collect(),
                        Err(error) => (0..complete.arrivals.len())
                            .map(|_| Err(error.clone()))
                            .collect(),
                    }
                },
            )
            .await;
        let done = match result {
            Ok(done) => done,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        let reply = reply_of(total, done.outcome);
        match (client, read.mode) {
            (Some(client), _) => {
                let data = done.data;
                let mover = client.mover.clone();
                let push = move |_: &ObjectStore<S>| client.push_all(&data);
                let pushed = match &mover {
                    Some(mover) => self.one_sided(mover, push).await,
                    None => self.blocking(push).await,
                };
                Self::answer_one_sided(connection, header, mover.as_ref(), pushed.map(|()| reply))
                    .await
            }
            (None, TransferMode::Multiple) => {
                connection.reply(header, &reply, &[]).await?;
                connection
                    .send_data_frames(header, &pieces, &done.data)
                    .await
            }
            (None, _) => connection.reply(header, &reply, &done.data).await,
        }
    }
}

impl<S: ObjectStorage> Iod<S> {
    /// Serves a client's callback channel (`LeaseListen`) until either side closes it:
    /// delivers each revocation as a `LeaseRevoke` and reports the client's answer. The
    /// client's leases end with the channel.
    async fn serve_callbacks(
        &self,
        header: &Header,
        client_id: u64,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let client = ClientKey::new(connection.credentials().uid, client_id);
        let (generation, mut revocations) = match self.leases.listen(client) {
            Ok(listening) => listening,
            Err(error) => return connection.reply_error(header, &error).await,
        };
        if let Err(error) = connection.reply(header, &Empty {}, &[]).await {
            self.leases.unlisten(client, generation);
            return Err(error);
        }
        let lease = std::time::Duration::from_millis(u64::from(self.leases.lease_ms()));
        let result = loop {
            let revocation: Option<Revocation> = tokio::select! {
                revocation = revocations.recv() => revocation,
                closed = connection.closed() => break closed,
            };
            let Some(Revocation { handle, answered }) = revocation else {
                break Ok(()); // replaced by a newer channel of the same client
            };
            // Unanswered within the lease, the write goes on anyway (`begin_write`).
            match connection.call_peer(&LeaseRevoke { handle }, lease).await {
                Ok(Empty {}) => {
                    let _ = answered.send(());
                }
                Err(error) => break Err(error),
            }
        };
        self.leases.unlisten(client, generation);
        result
    }
}

/// A demote's blocks once received: in a buffer, or already in the memory of their units.
enum Demoted {
    Bytes(Vec<u8>),
    Landed(crate::cache::Landing),
}

/// Moves a read's units to the least recent end of the unified cache when dropped (after
/// the reply went to a client that caches them).
struct SentToCache<'a, S: ObjectStorage> {
    store: &'a Arc<ObjectStore<S>>,
    handle: u64,
    pieces: Vec<Piece>,
}

impl<S: ObjectStorage> Drop for SentToCache<'_, S> {
    fn drop(&mut self) {
        self.store.place_least_recent(self.handle, &self.pieces);
    }
}

impl<S: ObjectStorage> Iod<S> {
    /// A demote's pieces: at most `DEMOTE_PIECES_MAX`, their bytes within the bulk limit.
    fn check_demote(pieces: &[Piece]) -> Result<(), RemoteError> {
        if pieces.len() > DEMOTE_PIECES_MAX {
            return Err(RemoteError::over_limit(
                "demote_pieces_max",
                pieces.len() as u64,
                DEMOTE_PIECES_MAX as u64,
            ));
        }
        Self::check_pieces(pieces).map(drop)
    }

    /// Caches the clean blocks of a `Demote` (bulk: their bytes back to back, or a memory
    /// descriptor to pull them from) if the client still holds its lease on the file; with no
    /// lease, or no unified cache, nothing. A choosing demote (`choose`) pulls only the pieces
    /// this iod wants, decided before any byte moves.
    async fn demote(
        &self,
        request: &Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = &request.header;
        let Demote {
            handle,
            client_id,
            lease_id,
            mode,
            choose,
            mut pieces,
            ..
        } = request.decode()?;
        Self::check_demote(&pieces).map_err(ConnectionError::Refused)?;
        let total: u64 = pieces.iter().map(|piece| piece.length).sum();
        let refused = |detail: String| {
            Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                detail,
            )))
        };
        if choose && mode != TransferMode::Remote {
            return refused(format!(
                "a demote chooses its pieces only when the iod pulls them (mode Remote), not \
                 {mode:?}"
            ));
        }
        let client = ClientKey::new(connection.credentials().uid, client_id);
        let _budget = self.buffer_budget(connection, total).await;
        let mut taken = Vec::new();
        let demoted = match mode {
            TransferMode::Gather if u64::from(header.bulk_bytes) == total => {
                Demoted::Bytes(connection.read_bulk(header).await?)
            }
            TransferMode::Gather => {
                return refused(format!(
                    "demote carries {} bulk bytes but its pieces add up to {total}",
                    header.bulk_bytes
                ));
            }
            TransferMode::Remote => {
                let descriptor = connection.read_bulk(header).await?;
                let mut remote = match self.remote_client(connection, &descriptor).await? {
                    Ok(remote) => remote,
                    Err(error) => return connection.reply_error(header, &error).await,
                };
                if choose {
                    if let Err(error) = self.choose_demoted(
                        (handle, client, lease_id),
                        &mut pieces,
                        &mut remote,
                        &mut taken,
                    ) {
                        return connection.reply_error(header, &error).await;
                    }
                    if pieces.is_empty() {
                        let reply = DemoteReply {
                            inserted: 0,
                            taken: WantedFlags(taken),
                        };
                        return Self::answer(connection, header, Ok(reply)).await;
                    }
                }
                let total: u64 = pieces.iter().map(|piece| piece.length).sum();
                // The blocks are pulled straight into the cache units they will be, where
                // the memory allows; else into a buffer, copied in after.
                let landing = if remote.unregistered_ok() {
                    self.store.land_demote(handle, &pieces)
                } else {
                    None
                };
                let length = usize::try_from(total).expect("within the bulk limit");
                let mover = remote.mover.clone();
                let pull = move |_: &ObjectStore<S>| {
                    if let Some(mut landing) = landing {
                        return remote
                            .pull_all_into(&mut landing.slices())
                            .map(|()| Demoted::Landed(landing));
                    }
                    let mut data = vec![0u8; length];
                    remote.pull_all(&mut data).map(|()| Demoted::Bytes(data))
                };
                // A small pull from shared or fabric memory is a memory copy: done here rather
                // than on a storage thread. Process memory is only ever reached by its mover.
                let pulled = match &mover {
                    Some(mover) => self.one_sided(mover, pull).await,
                    None if total <= WORKER_COPY_BYTES_MAX => pull(&self.store),
                    None => self.blocking(pull).await,
                };
                match pulled {
                    Ok(demoted) => demoted,
                    Err(error) => {
                        return Self::answer_one_sided::<Empty>(
                            connection,
                            header,
                            mover.as_ref(),
                            Err(error),
                        )
                        .await;
                    }
                }
            }
            other => {
                return refused(format!(
                    "a demote moves its bytes gathered or one-sidedly, not {other:?}"
                ));
            }
        };
        // In memory only (a clean insert never waits for write-back): served inline, not on a
        // storage thread.
        let result = self
            .leases
            .with_lease(handle, (client, lease_id), || match demoted {
                Demoted::Bytes(data) => self.store.demote(handle, &pieces, &data),
                Demoted::Landed(landing) => self.store.demote_landed(landing),
            })
            .unwrap_or(Ok(0))
            .map(|inserted| DemoteReply {
                inserted: u32::try_from(inserted).unwrap_or(u32::MAX),
                taken: WantedFlags(taken),
            });
        Self::answer(connection, header, result).await
    }

    /// A choosing demote's choice, made before any byte moves: keeps of `pieces` (and of the
    /// client's memory) those this iod wants under the client's lease (as `DemoteOffer`
    /// answers), and sets `taken` to one flag per piece.
    fn choose_demoted(
        &self,
        (handle, client, lease_id): (u64, ClientKey, u64),
        pieces: &mut Vec<Piece>,
        remote: &mut remote::Client,
        taken: &mut Vec<u8>,
    ) -> Result<(), RemoteError> {
        let wanted = self
            .leases
            .with_lease(handle, (client, lease_id), || {
                self.store.demote_wanted(handle, pieces)
            })
            .unwrap_or_else(|| vec![false; pieces.len()]);
        let lengths: Vec<u64> = pieces.iter().map(|piece| piece.length).collect();
        remote.keep_pieces(&lengths, &wanted)?;
        let mut flags = wanted.iter();
        pieces.retain(|_| flags.next().copied().unwrap_or(false));
        *taken = wanted.into_iter().map(u8::from).collect();
        Ok(())
    }
}

impl<S: ObjectStorage> Service for Iod<S> {
    fn name(&self) -> String {
        format!("iod {}", self.index)
    }

    async fn handle(
        &self,
        mut request: Incoming,
        connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        let header = request.header;
        // Writes carry data (or, one-sidedly, a memory descriptor); reads and probes carry
        // a memory descriptor when one-sided.
        let carries_bulk = matches!(
            request.opcode,
            Opcode::Write
                | Opcode::WriteType
                | Opcode::WriteView
                | Opcode::Read
                | Opcode::ReadType
                | Opcode::ReadView
                | Opcode::RemoteProbe
                | Opcode::WriteCollective
                | Opcode::ReadCollective
                | Opcode::Demote
        );
        if header.bulk_bytes != 0 && !carries_bulk {
            return Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                format!("{:?} requests carry no bulk data", request.opcode),
            )));
        }
        if let Err(error) = self.authorize(&request, connection)? {
            // Nothing is touched; the request's data is dropped so the stream stays in step.
            let frames = Self::data_frames(&request)?;
            connection.skip_request_data(&header, frames).await?;
            return connection.reply_error(&header, &error).await;
        }
        match request.opcode {
            Opcode::Ping => {
                let reply = PingReply {
                    role: ROLE_IOD,
                    server_index: self.index,
                    pid: std::process::id(),
                    objects: self.store.object_count(),
                    store_state: STORE_OK,
                };
                connection.reply(&header, &reply, &[]).await
            }
            Opcode::Write | Opcode::WriteType | Opcode::WriteView => {
                self.write(&request, connection).await
            }
            Opcode::Read | Opcode::ReadType | Opcode::ReadView => {
                self.read(&request, connection).await
            }
            Opcode::RemoteProbe => self.probe(&request, connection).await,
            Opcode::ShareRegion => {
                let ShareRegion { key, bytes } = request.decode()?;
                let result = connection
                    .share_region(key, bytes, request.descriptor.take())
                    .map(|()| Empty {});
                Self::answer(connection, &header, result).await
            }
            Opcode::WriteCollective => self.write_collective(&request, connection).await,
            Opcode::ReadCollective => self.read_collective(&request, connection).await,
            Opcode::ServerStats => {
                let ServerStats {} = request.decode()?;
                connection.reply(&header, &self.store.stats(), &[]).await
            }
            Opcode::Statfs => {
                let Statfs {} = request.decode()?;
                let result = self.blocking(ObjectStore::statfs).await;
                Self::answer(connection, &header, result).await
            }
            Opcode::DeclareView => {
                let DeclareView {
                    handle,
                    view_id,
                    file,
                    ..
                } = request.decode()?;
                let body_bytes = request.body.len() as u64;
                let result = self
                    .views
                    .declare(handle, view_id, file, body_bytes)
                    .map(|()| Empty {});
                Self::answer(connection, &header, result).await
            }
            Opcode::ReleaseView => {
                let ReleaseView {
                    handle, view_id, ..
                } = request.decode()?;
                self.views.release(handle, view_id);
                Self::answer(connection, &header, Ok(Empty {})).await
            }
            Opcode::LeaseListen => {
                let LeaseListen { client_id } = request.decode()?;
                self.serve_callbacks(&header, client_id, connection).await
            }
            Opcode::DemoteOffer => {
                let DemoteOffer {
                    handle,
                    client_id,
                    lease_id,
                    pieces,
                    ..
                } = request.decode()?;
                let client = ClientKey::new(connection.credentials().uid, client_id);
                let result = Self::check_demote(&pieces).map(|()| {
                    let wanted = self
                        .leases
                        .with_lease(handle, (client, lease_id), || {
                            self.store.demote_wanted(handle, &pieces)
                        })
                        .unwrap_or_else(|| vec![false; pieces.len()]);
                    DemoteWanted {
                        wanted: WantedFlags(wanted.into_iter().map(u8::from).collect()),
                    }
                });
                Self::answer(connection, &header, result).await
            }
            Opcode::Demote => self.demote(&request, connection).await,
            Opcode::LeaseClient => {
                let LeaseClient { client_id } = request.decode()?;
                connection.set_client_id(client_id);
                Self::answer(connection, &header, Ok(Empty {})).await
            }
            Opcode::LeaseAcquire => {
                let LeaseAcquire {
                    handle,
                    capability,
                    client_id,
                    demotes,
                    write,
                    start,
                    end,
                    group,
                } = request.decode()?;
                let client = ClientKey::new(connection.credentials().uid, client_id);
                let result = if !write {
                    self.leases
                        .acquire(handle, client, demotes)
                        .map(|(lease_ms, lease_id)| LeaseAcquireReply {
                            lease_ms,
                            lease_id,
                            start: 0,
                            end: 0,
                        })
                } else if let Err(refused) = self.check_write_right(connection, handle, &capability)
                {
                    Err(refused)
                } else {
                    self.leases
                        .acquire_write(handle, client, ((start, end), group))
                        .await
                        .map(|grant| LeaseAcquireReply {
                            lease_ms: grant.lease_ms,
                            lease_id: grant.id,
                            start: grant.range.0,
                            end: grant.range.1,
                        })
                };
                if result.is_ok() {
                    connection.set_client_id(client_id);
                }
                Self::answer(connection, &header, result).await
            }
            Opcode::ObjectCreate => {
                let ObjectCreate {
                    handle,
                    cache_unit_bytes,
                    ..
                } = request.decode()?;
                let result = self
                    .blocking(move |store| {
                        store.create(handle, cache_unit_bytes).map(|()| Empty {})
                    })
                    .await;
                Self::answer(connection, &header, result).await
            }
            Opcode::ObjectCreateMany => {
                let ObjectCreateMany {
                    handles,
                    cache_unit_bytes,
                    ..
                } = request.decode()?;
                let result = self
                    .blocking(move |store| {
                        let mut created = Vec::with_capacity(handles.len());
                        for handle in handles {
                            match store.create(handle, cache_unit_bytes) {
                                Ok(()) => created.push(handle),
                                Err(error) if error.code == ErrorCode::Exists => {}
                                Err(error) => return Err(error),
                            }
                        }
                        Ok(ObjectCreateManyReply { created })
                    })
                    .await;
                Self::answer(connection, &header, result).await
            }
            Opcode::ObjectRemove => {
                let ObjectRemove { handle, .. } = request.decode()?;
                let _writing = self.leases.begin_write(handle, WHOLE, None).await;
                self.views.release_handle(handle);
                let result = self
                    .blocking(move |store| store.remove(handle).map(|()| Empty {}))
                    .await;
                Self::answer(connection, &header, result).await
            }
            Opcode::ObjectStat => {
                let ObjectStat { handle, .. } = request.decode()?;
                // Bytes a client buffers under a write lease count: it writes them first.
                self.leases.begin_read(handle, WHOLE).await;
                // Without a unified cache a stat is one `fstat`: served in line; with one it
                // waits for writes under way and writes the object back first.
                let bytes = if self.store.stat_may_wait() {
                    u64::MAX
                } else {
                    0
                };
                let result = self
                    .storage(bytes, move |store| {
                        store
                            .stat(handle)
                            .map(|(size, mtime_ns)| ObjectStatReply { size, mtime_ns })
                    })
                    .await;
                Self::answer(connection, &header, result).await
            }
            Opcode::ObjectTruncate => {
                let ObjectTruncate { handle, size, .. } = request.decode()?;
                let _writing = self.leases.begin_write(handle, WHOLE, None).await;
                let result = if size > FILE_BYTES_MAX {
                    Err(RemoteError::over_limit(
                        "file_bytes_max",
                        size,
                        FILE_BYTES_MAX,
                    ))
                } else {
                    self.blocking(move |store| store.truncate(handle, size).map(|()| Empty {}))
                        .await
                };
                Self::answer(connection, &header, result).await
            }
            Opcode::ObjectSync => {
                let ObjectSync { handle, .. } = request.decode()?;
                let result = self
                    .blocking(move |store| store.sync(handle).map(|()| Empty {}))
                    .await;
                Self::answer(connection, &header, result).await
            }
            other => {
                let error = RemoteError::new(
                    ErrorCode::Protocol,
                    format!("an I/O server does not serve {other:?}"),
                );
                connection.reply_error(&header, &error).await
            }
        }
    }
}

/// The bytes `pieces` touch, from the first to the end of the last: what a write or read
/// conflicts with in the lease table.
fn extent(pieces: &[Piece]) -> (u64, u64) {
    let start = pieces.iter().map(|piece| piece.offset).min().unwrap_or(0);
    let end = pieces
        .iter()
        .map(|piece| piece.offset.saturating_add(piece.length))
        .max()
        .unwrap_or(0);
    (start, end)
}
