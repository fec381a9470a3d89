//! The iod's request handlers: [`Iod`], its shared helpers, and [`Service::handle`], which
//! checks every request (bulk only where it may be, `authorize`) and hands it to the module of
//! its kind: `write`, `read` (list, datatype and view forms alike, decoded into one
//! [`DataRequest`](request::DataRequest) by `request`, their shares found by `share`),
//! `one_sided`, `collective`, `demote`, `leases`, `view`, `objects`, `server`.
//!
//! Data path of a `Write`: check the piece list against the limits, take buffer budget, read
//! the bulk (one frame, or one `Data` frame per piece) into one buffer, then apply the pieces
//! to the object on a blocking thread. A `Read` runs the other way. Errors that leave the
//! stream in step (an unknown handle, a storage failure) are answered and the connection stays
//! open; a request whose bulk cannot be accounted for is refused and the connection closed.

mod auth;
mod collective;
mod demote;
mod leases;
mod objects;
mod one_sided;
mod read;
mod request;
mod server;
mod share;
mod view;
mod write;

use std::sync::Arc;

use tessera_auth::Rights;
use tessera_net::server::{ConnectionError, Incoming, ServerConnection, Service};
use tessera_proto::limits::{LEASE_MS_DEFAULT, SIEVE_CHUNK_BYTES_MAX};
use tessera_proto::{
    Capability, ErrorCode, Header, IoReply, Opcode, Piece, RemoteError, StoragePlan, Wire,
};

use crate::budget::BufferBudget;
use crate::collective::{Collectives, Complete, Done};
use crate::files::FileStorage;
use crate::leases::{ClientKey, Leases};
use crate::membership::Membership;
use crate::storage::ObjectStorage;
use crate::store::{ObjectStore, Outcome};
use crate::views::ViewTable;

/// Requests moving at most this many bytes run their storage calls on the async worker: a
/// few page-cache copies cost less than handing the work to a blocking thread and back.
const INLINE_STORAGE_BYTES_MAX: u64 = 64 << 10;

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

    async fn answer<T: Wire>(
        connection: &mut ServerConnection,
        header: &Header,
        result: Result<T, RemoteError>,
    ) -> Result<(), ConnectionError> {
        match result {
            Ok(reply) => connection.reply(header, &reply, &[]).await,
            Err(error) => connection.reply_error(header, &error).await,
        }
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
        if header.bulk_bytes != 0 && !carries_bulk(request.opcode) {
            return Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                format!("{:?} requests carry no bulk data", request.opcode),
            )));
        }
        if let Err(refusal) = self.authorize(&request, connection) {
            // Nothing is touched; the request's data is dropped so the stream stays in step.
            let frames = Self::data_frames(&request)?;
            return refusal.skipping(frames).send(connection, &header).await;
        }
        let request = &mut request;
        match request.opcode {
            Opcode::Ping => self.ping(&header, connection).await,
            Opcode::ServerStats => self.server_stats(request, connection).await,
            Opcode::Statfs => self.statfs(request, connection).await,
            Opcode::Write | Opcode::WriteType | Opcode::WriteView => {
                self.write(request, connection).await
            }
            Opcode::Read | Opcode::ReadType | Opcode::ReadView => {
                self.read(request, connection).await
            }
            Opcode::RemoteProbe => self.probe(request, connection).await,
            Opcode::ShareRegion => Self::share_region(request, connection).await,
            Opcode::WriteCollective => self.write_collective(request, connection).await,
            Opcode::ReadCollective => self.read_collective(request, connection).await,
            Opcode::DeclareView => self.declare_view(request, connection).await,
            Opcode::ReleaseView => self.release_view(request, connection).await,
            Opcode::LeaseListen => self.lease_listen(request, connection).await,
            Opcode::LeaseClient => Self::lease_client_id(request, connection).await,
            Opcode::LeaseAcquire => self.lease_acquire(request, connection).await,
            Opcode::DemoteOffer => self.demote_offer(request, connection).await,
            Opcode::Demote => self.demote(request, connection).await,
            Opcode::ObjectCreate => self.object_create(request, connection).await,
            Opcode::ObjectCreateMany => self.object_create_many(request, connection).await,
            Opcode::ObjectRemove => self.object_remove(request, connection).await,
            Opcode::ObjectStat => self.object_stat(request, connection).await,
            Opcode::ObjectTruncate => self.object_truncate(request, connection).await,
            Opcode::ObjectSync => self.object_sync(request, connection).await,
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

/// Whether requests of `opcode` may carry bulk: writes carry data (or, one-sidedly, a memory
/// descriptor); reads and probes carry a memory descriptor when one-sided.
fn carries_bulk(opcode: Opcode) -> bool {
    matches!(
        opcode,
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
    )
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
