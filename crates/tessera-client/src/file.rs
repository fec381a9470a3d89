//! An open file: contiguous and list I/O against its servers.
//!
//! Every call is checked against the limits first, then planned ([`crate::plan`]) into one
//! request per involved server (more only past the per-request limits), and executed in
//! rounds: the client sends one request to every server of the round before it reads any
//! reply, so the servers work in parallel while the client stays single-threaded. Bulk data
//! moves between the caller's memory and the sockets by the file's [`TransferMode`].

use std::io::{IoSlice, IoSliceMut};
use std::time::Instant;

use tessera_net::local::policy::{Decision, Mechanism, Transfer, TransferPolicy};
use tessera_net::{Lease, NetError, PieceData, PieceDataMut, TransferCounts};
use tessera_proto::limits::{FILE_BYTES_MAX, LIST_PIECES_MAX, PIECE_BYTES_MAX};
use tessera_proto::{
    Attr, Capability, Create, ErrorCode, FileKind, Layout, ObjectSync, Open, Opened, Piece, Read,
    StoragePlan, TransferMode, Write,
};

use crate::client::Client;
use crate::encodable::check_encodable;
use crate::error::ClientError;
use crate::options::{CreateOptions, OpenMode};
use crate::plan::Plan;

// The namespace calls that hand out a `File` live here, beside it, so that the client
// module needs nothing from this one.
impl Client {
    /// Creates (or, unless `exclusive`, opens) a file for reading and writing.
    pub fn create(&self, path: &str, options: &CreateOptions) -> Result<File, ClientError> {
        for datatype in &options.pattern {
            check_encodable("pattern layout", datatype)?;
        }
        let create = Create {
            credentials: self.credentials()?,
            path: path.to_owned(),
            mode: options.mode,
            exclusive: options.exclusive,
            stripe_unit_bytes: options.stripe_unit_bytes,
            server_count: options.server_count,
            pattern: options.pattern.clone(),
            cache_unit_bytes: options.cache_unit_bytes,
        };
        // An exclusive create repeated after it took effect would report `Exists`.
        let opened = if options.exclusive {
            self.mds_call_once(&create)?
        } else {
            self.mds_call(&create)?
        };
        File::new(self.clone(), path, opened, OpenMode::ReadWrite)
    }

    /// Opens an existing file: the mds checks `mode` against the file's permissions and
    /// signs a capability for it.
    pub fn open(&self, path: &str, mode: OpenMode) -> Result<File, ClientError> {
        let (read, write) = mode.rights();
        let opened = self.mds_call(&Open {
            credentials: self.credentials()?,
            path: path.to_owned(),
            read,
            write,
        })?;
        File::new(self.clone(), path, opened, mode)
    }
}

/// Whole nanoseconds of `elapsed`, saturating.
fn nanoseconds(elapsed: std::time::Duration) -> u64 {
    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
}

/// What one I/O call did on the wire and at the servers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoReport {
    /// Requests sent (one per involved server, unless a request limit split one).
    pub requests: u64,
    /// Frames sent, data frames of the multiple mode included.
    pub messages_sent: u64,
    /// Frames received.
    pub messages_received: u64,
    /// Contiguous storage pieces the servers touched (after merging adjacent pieces).
    pub storage_pieces: u64,
    /// Bytes the servers moved to and from storage (more than `bytes` where they sieved).
    pub storage_bytes: u64,
    /// Requests the servers served by sieving.
    pub sieved: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Bytes copied through pack buffers on the client.
    pub bytes_copied: u64,
    /// Slices of the caller's memory the requests moved data to or from, each in place (after
    /// merging adjacent runs; a slice cut at a server boundary counts once per request): a
    /// strided memory type moved with no contiguous copy shows one slice per run here.
    pub memory_pieces: u64,
    /// Distinct servers the call reached.
    pub servers: u64,
    /// Range locks the call took on the mds (`File::write_sieve`: one per chunk).
    pub locks: u64,
    /// Requests whose data the servers moved one-sidedly (the `local` backend).
    pub one_sided: u64,
    /// Nanoseconds the call spent sending its requests (a write's data included, as far as
    /// the transport takes it before the server reads it).
    pub send_ns: u64,
    /// Nanoseconds the call spent receiving replies after its sends (the servers' storage
    /// work, the rest of a write's transfer, a read's data and the replies).
    pub reply_ns: u64,
}

impl std::ops::AddAssign for IoReport {
    fn add_assign(&mut self, other: Self) {
        self.requests += other.requests;
        self.messages_sent += other.messages_sent;
        self.messages_received += other.messages_received;
        self.storage_pieces += other.storage_pieces;
        self.storage_bytes += other.storage_bytes;
        self.sieved += other.sieved;
        self.bytes += other.bytes;
        self.bytes_copied += other.bytes_copied;
        self.memory_pieces += other.memory_pieces;
        self.servers = self.servers.max(other.servers);
        self.locks += other.locks;
        self.one_sided += other.one_sided;
        self.send_ns += other.send_ns;
        self.reply_ns += other.reply_ns;
    }
}

impl IoReport {
    fn add_counts(&mut self, counts: TransferCounts) {
        self.messages_sent += counts.messages_sent;
        self.messages_received += counts.messages_received;
        self.bytes_copied += counts.bytes_copied;
        self.one_sided += counts.one_sided;
    }
}

/// An open file.
#[derive(Debug, Clone)]
pub struct File {
    pub(crate) client: Client,
    pub(crate) path: String,
    pub(crate) handle: u64,
    pub(crate) layout: Layout,
    pub(crate) mode: OpenMode,
    pub(crate) transfer: TransferPolicy,
    pub(crate) storage: StoragePlan,
    /// Ids of the views declared through this file and its clones, released at close.
    pub(crate) views: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    /// The capability every request to the file's iods carries, shared with the clones and
    /// renewed before it expires.
    held: std::sync::Arc<std::sync::Mutex<HeldCapability>>,
    /// The attributes the create or open returned.
    opened: std::sync::Arc<Attr>,
    /// Small writes may wait in the client cache's write-back (off in MPI's atomic mode).
    pub(crate) buffer_writes: bool,
    /// The write group whose members' write leases do not conflict (0: none).
    pub(crate) write_group: u64,
    /// Writes what the file buffered when the last clone goes (`None` for the write-back's
    /// own copy, which must not keep the file open). Held for its drop only.
    #[allow(dead_code)]
    closer: Option<std::sync::Arc<Closer>>,
}

/// Writes what a file buffered in the write-back when its last clone is dropped (an error
/// is logged; [`File::close`] and [`File::sync`] return theirs).
#[derive(Debug)]
struct Closer {
    client: Client,
    handle: u64,
}

impl Drop for Closer {
    fn drop(&mut self) {
        if let Some(cache) = &self.client.inner.cache {
            if let Err(err) = cache.flush_writes(self.handle) {
                tracing::warn!(
                    "file handle {:#x}: its buffered writes failed at close: {err}",
                    self.handle
                );
            }
        }
    }
}

/// A capability and when it was received (to renew it at a quarter of its life left).
#[derive(Debug, Clone)]
struct HeldCapability {
    capability: Capability,
    received_s: u64,
    expires_s: u64,
}

impl HeldCapability {
    fn new(capability: Capability) -> Self {
        // The client reads its capability's expiry; only the iods check the tag.
        let expires_s = tessera_auth::Grant::parse(&capability).map_or(0, |grant| grant.expires_s);
        Self {
            capability,
            received_s: tessera_auth::now_s(),
            expires_s,
        }
    }

    fn due(&self) -> bool {
        let life = self.expires_s.saturating_sub(self.received_s);
        tessera_auth::now_s() + life / u64::from(tessera_auth::RENEW_FRACTION) >= self.expires_s
    }
}

impl File {
    pub(crate) fn new(
        client: Client,
        path: &str,
        opened: Opened,
        mode: OpenMode,
    ) -> Result<Self, ClientError> {
        let Opened { attr, capability } = opened;
        let kept = std::sync::Arc::new(attr.clone());
        let (FileKind::File, Some(layout)) = (attr.kind, attr.layout) else {
            return Err(ClientError::Server {
                code: ErrorCode::IsDirectory,
                message: format!("{path} is a directory"),
            });
        };
        if let Some(&server) = layout
            .servers()
            .iter()
            .find(|&&server| usize::from(server) >= client.server_count())
        {
            return Err(ClientError::Config {
                path: path.to_owned(),
                detail: format!(
                    "its layout names iod {server}, but the cluster file lists {} servers",
                    client.server_count()
                ),
            });
        }
        Ok(Self {
            path: path.to_owned(),
            handle: attr.handle,
            layout,
            mode,
            transfer: TransferPolicy::Auto,
            storage: StoragePlan::Auto,
            views: std::sync::Arc::default(),
            held: std::sync::Arc::new(std::sync::Mutex::new(HeldCapability::new(capability))),
            opened: kept,
            buffer_writes: true,
            write_group: 0,
            closer: Some(std::sync::Arc::new(Closer {
                client: client.clone(),
                handle: attr.handle,
            })),
            client,
        })
    }

    /// This file reached through `client` instead (the write-back's own connections),
    /// without closing anything when it goes.
    pub(crate) fn through(&self, client: Client) -> Self {
        Self {
            client,
            closer: None,
            buffer_writes: false,
            ..self.clone()
        }
    }

    /// Joins write group `group` (0: none) for this file: with the client cache's
    /// write-back on, the members' write leases on the file do not conflict with each other,
    /// only with everyone else's, so processes that write interleaved pieces of one file all
    /// buffer at once. The members then order their own overlapping writes, as MPI-IO
    /// programs do (sync, barrier, sync); docs/SEMANTICS.md §3.3. What the file buffered
    /// goes first.
    pub fn set_write_group(&mut self, group: u64) -> Result<(), ClientError> {
        self.flush_buffered()?;
        if let Some(cache) = &self.client.inner.cache {
            cache.forget_write_leases(self.handle);
        }
        self.write_group = group;
        Ok(())
    }

    /// Writes what this client's write-back buffered of the file to its iods, where other
    /// clients read it (nothing without write-back). Not to stable storage: that is
    /// [`File::sync`], which flushes first.
    pub fn flush(&self) -> Result<(), ClientError> {
        self.flush_buffered()
    }

    /// Writes what this client's write-back buffered of the file (nothing without one).
    pub(crate) fn flush_buffered(&self) -> Result<(), ClientError> {
        match &self.client.inner.cache {
            Some(cache) => cache.flush_writes(self.handle),
            None => Ok(()),
        }
    }

    /// The attributes the mds returned with this file's create or open, as of then: for a
    /// create, the new file's (size 0) or the existing one's with its size computed (a
    /// non-exclusive create of a name that was there); for an open, size 0 (SEMANTICS.md §6).
    /// No request is made: [`File::stat`] asks for the attributes as of now.
    pub fn attr_at_open(&self) -> &Attr {
        &self.opened
    }

    /// The capability this file's requests carry, renewed from the mds first when less than
    /// a quarter of its life is left (long-running programs never see one expire).
    pub fn capability(&self) -> Result<Capability, ClientError> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.due() {
            let opened = self
                .client
                .renew(self.handle, &held.capability, self.mode)?;
            *held = HeldCapability::new(opened.capability);
        }
        Ok(held.capability.clone())
    }

    /// The path the file was opened by.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file handle.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How the mechanism that moves each request's data is chosen (default
    /// [`TransferPolicy::Auto`]: by the transfer cost model, per request).
    pub fn transfer_policy(&self) -> TransferPolicy {
        self.transfer
    }

    /// Chooses how later calls move their data (forcing a mechanism is for experiments).
    pub fn set_transfer_policy(&mut self, policy: TransferPolicy) {
        self.transfer = policy;
    }

    /// Forces the mechanism a framed transfer mode names: gather, pack or multiple (on the
    /// `local` backend the one-sided mechanism of the same name).
    pub fn set_transfer_mode(&mut self, mode: TransferMode) {
        self.transfer = TransferPolicy::Force(match mode {
            TransferMode::Gather | TransferMode::Remote => Mechanism::Gather,
            TransferMode::Pack => Mechanism::Pack,
            TransferMode::Multiple => Mechanism::Multiple,
        });
    }

    /// The transfer for a request to the server at layout `position` moving `bytes` bytes in
    /// `segments` memory slices. Connects to the server to learn whether it moves data
    /// one-sidedly; a server that cannot be reached gets a framed transfer, and the send
    /// reports the failure.
    ///
    /// Memory that lies in one shared arena (`tessera_net::local::arena`) is gathered by the
    /// server under `Auto` whatever its size: the server reaches it with plain copies, so any
    /// copy on this side would only add to the cost.
    ///
    /// With the transfer comes the policy's [`Decision`] for a one-sided request, which
    /// [`File::execute`] records with the request's measured time.
    pub(crate) fn transfer_for<S: std::ops::Deref<Target = [u8]>>(
        &self,
        position: usize,
        bytes: u64,
        slices: &[S],
    ) -> (Transfer, Option<Decision>) {
        let one_sided = self
            .client
            .inner
            .iods
            .one_sided(self.server_of(position))
            .unwrap_or(false);
        let (chosen, decision) = Transfer::decide(self.transfer, one_sided, bytes, slices.len());
        if one_sided
            && self.transfer == TransferPolicy::Auto
            && !matches!(chosen, Transfer::Framed(_))
            && tessera_net::local::arena::any_live()
        {
            let pointers: Vec<(*const u8, usize)> = slices
                .iter()
                .map(|slice| (slice.as_ptr(), slice.len()))
                .collect();
            if tessera_net::local::arena::locate(&pointers).is_some() {
                let decision = decision.map(|decision| Decision {
                    mechanism: Mechanism::Gather,
                    within_margin: false,
                    // Arena memory moves by plain copies: not what the size class learns.
                    class: None,
                    learned: false,
                    cost: tessera_net::local::policy::model().cost(
                        Mechanism::Gather,
                        bytes,
                        slices.len(),
                    ),
                    ..decision
                });
                let gather = Transfer::Remote {
                    pack: false,
                    segments_per_call: 0,
                };
                return (gather, decision);
            }
        }
        (chosen, decision)
    }

    /// How the servers turn this file's requests into storage calls (default
    /// [`StoragePlan::Auto`]: each server's cost model chooses).
    pub fn storage_plan(&self) -> StoragePlan {
        self.storage
    }

    /// Asks the servers to serve later calls by `plan` (for experiments; `Auto` is best).
    pub fn set_storage_plan(&mut self, plan: StoragePlan) {
        self.storage = plan;
    }

    /// Attributes, with the size computed from the servers.
    pub fn stat(&self) -> Result<Attr, ClientError> {
        self.client.stat_handle(self.handle, self.capability()?)
    }

    /// Flushes the file's data on every server to stable storage.
    pub fn sync(&self) -> Result<(), ClientError> {
        self.flush_buffered()?;
        let capability = self.capability()?;
        for &server in self.layout.servers() {
            self.client
                .inner
                .iods
                .with(usize::from(server), |connection| {
                    connection.call(&ObjectSync {
                        handle: self.handle,
                        capability: capability.clone(),
                    })
                })?;
        }
        Ok(())
    }

    /// Writes `data` at `offset`.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<IoReport, ClientError> {
        self.write_list(
            &[IoSlice::new(data)],
            &[Piece::new(offset, data.len() as u64)],
        )
    }

    /// Whether this file's client has a client cache (reads by [`File::read_at`] use it).
    pub(crate) fn caches(&self) -> bool {
        self.client.inner.cache.is_some()
    }

    /// Reads `data.len()` bytes at `offset`. Bytes never written, past the end included, read
    /// as zeros; use [`File::stat`] for the size.
    pub fn read_at(&self, offset: u64, data: &mut [u8]) -> Result<IoReport, ClientError> {
        let length = data.len() as u64;
        if let Some(cache) = &self.client.inner.cache {
            self.check("read", &[length], &[Piece::new(offset, length)])?;
            let capability = self.capability()?;
            let mut fetched = IoReport::default();
            let cached = cache.read(
                &self.client.inner,
                (self.handle, &capability, &self.layout),
                self.mode.rights().1,
                offset,
                data,
                |pieces, buffers| {
                    fetched = self.read_list(buffers, pieces)?;
                    Ok(())
                },
            )?;
            if cached {
                return Ok(IoReport {
                    bytes: length,
                    ..fetched
                });
            }
        }
        self.read_list(&mut [IoSliceMut::new(data)], &[Piece::new(offset, length)])
    }

    pub(crate) fn check(
        &self,
        operation: &'static str,
        memory: &[u64],
        file: &[Piece],
    ) -> Result<(), ClientError> {
        let allowed = match operation {
            "write" => self.mode != OpenMode::ReadOnly,
            _ => self.mode != OpenMode::WriteOnly,
        };
        if !allowed {
            return Err(ClientError::BadMode {
                path: self.path.clone(),
                mode: self.mode.name(),
                operation,
            });
        }
        let what = || format!("{operation} of {}", self.path);
        for (count, list) in [(memory.len(), "memory"), (file.len(), "file")] {
            if count > LIST_PIECES_MAX {
                return Err(ClientError::LimitExceeded {
                    what: format!("{} ({list} list)", what()),
                    limit: "list_pieces_max",
                    value: count as u64,
                    max: LIST_PIECES_MAX as u64,
                });
            }
        }
        let over_piece = |length: u64| ClientError::LimitExceeded {
            what: what(),
            limit: "piece_bytes_max",
            value: length,
            max: PIECE_BYTES_MAX,
        };
        let mut memory_total = 0u64;
        for &length in memory {
            if length > PIECE_BYTES_MAX {
                return Err(over_piece(length));
            }
            memory_total += length;
        }
        let mut file_total = 0u64;
        for piece in file {
            if piece.length > PIECE_BYTES_MAX {
                return Err(over_piece(piece.length));
            }
            if piece
                .offset
                .checked_add(piece.length)
                .is_none_or(|end| end > FILE_BYTES_MAX)
            {
                return Err(ClientError::LimitExceeded {
                    what: what(),
                    limit: "file_bytes_max",
                    value: piece.offset.saturating_add(piece.length),
                    max: FILE_BYTES_MAX,
                });
            }
            file_total += piece.length;
        }
        if memory_total != file_total {
            return Err(ClientError::InvalidArgument(format!(
                "{}: the memory list holds {memory_total} bytes but the file list {file_total}; the totals must match",
                what()
            )));
        }
        Ok(())
    }

    pub(crate) fn server_of(&self, position: usize) -> usize {
        usize::from(self.layout.servers()[position])
    }

    /// Runs `plan` round by round: `send` then `recv` on every request of a round. Any failure
    /// that may leave a stream out of step closes that round's connections.
    ///
    /// `decisions[i]` is the transfer policy's decision for request `i`, if it was one-sided:
    /// it is recorded with the time from the request's send to its reply
    /// ([`tessera_net::local::policy::decision_stats`]).
    pub(crate) fn execute(
        &self,
        plan: &Plan,
        decisions: &[Option<Decision>],
        mut send: impl FnMut(
            &mut tessera_net::Connection,
            usize,
            &Capability,
        ) -> Result<TransferCounts, NetError>,
        mut recv: impl FnMut(
            &mut tessera_net::Connection,
            usize,
        ) -> Result<(tessera_proto::IoReply, TransferCounts), NetError>,
    ) -> Result<IoReport, ClientError> {
        // This client's calls on the file apply in order: what it buffered goes first.
        self.flush_buffered()?;
        let pool = &self.client.inner.iods;
        let capability = self.capability()?;
        let mut report = IoReport {
            bytes: plan.total_bytes,
            servers: plan.server_positions().len() as u64,
            ..IoReport::default()
        };
        for mut round in plan.rounds() {
            // Lock connections in cluster-index order so concurrent calls cannot deadlock.
            round.sort_by_key(|&index| self.server_of(plan.requests[index].server_position));
            // A kept connection may have died with a server restart since its last use: such
            // a round is run again (every request is idempotent). Each failed attempt drops
            // at least one dead connection, so at most one retry per server is needed.
            for attempt in 0..=round.len() {
                let mut reused = false;
                let mut leases: Vec<(usize, Lease<'_>, Instant)> = Vec::with_capacity(round.len());
                let mut failure: Option<ClientError> = None;
                let mut send_failed = false;
                let sending = Instant::now();
                for &index in &round {
                    let server = self.server_of(plan.requests[index].server_position);
                    let started = Instant::now();
                    let sent = pool.lease(server).and_then(|mut lease| {
                        reused |= lease.reused();
                        match send(lease.connection(), index, &capability) {
                            Ok(counts) => Ok((lease, counts)),
                            Err(error) => {
                                lease.discard();
                                Err(error)
                            }
                        }
                    });
                    match sent {
                        Ok((lease, counts)) => {
                            report.requests += 1;
                            report.add_counts(counts);
                            leases.push((index, lease, started));
                        }
                        Err(error) => {
                            failure = Some(error.into());
                            send_failed = true;
                            break;
                        }
                    }
                }
                let replying = Instant::now();
                report.send_ns += nanoseconds(replying - sending);
                for (index, mut lease, started) in leases {
                    if send_failed {
                        // A send failed: abandon the outstanding replies with their connections.
                        lease.discard();
                        continue;
                    }
                    match recv(lease.connection(), index) {
                        Ok((reply, counts)) => {
                            if let Some(decision) = decisions.get(index).copied().flatten() {
                                decision.record(Some(started.elapsed().as_secs_f64() * 1e6));
                            }
                            report.add_counts(counts);
                            report.storage_pieces += u64::from(reply.storage_pieces);
                            report.storage_bytes += reply.storage_bytes;
                            report.sieved += u64::from(reply.plan == StoragePlan::Sieve);
                        }
                        Err(error) => {
                            lease.discard_after(&error);
                            failure.get_or_insert(error.into());
                        }
                    }
                }
                report.reply_ns += nanoseconds(replying.elapsed());
                match failure {
                    Some(ClientError::Net(NetError::Io { .. }))
                        if attempt < round.len() && reused => {}
                    Some(failure) => return Err(self.name_file(failure)),
                    None => break,
                }
            }
        }
        Ok(report)
    }

    pub(crate) fn name_file(&self, error: ClientError) -> ClientError {
        match error {
            ClientError::Server { code, message } => ClientError::Server {
                code,
                message: format!("{} (handle {:#x}): {message}", self.path, self.handle),
            },
            other => other,
        }
    }

    /// Writes the memory pieces, in order, to the file pieces, in order. The two lists may have
    /// different counts; their totals must match. Where file pieces overlap, the later wins.
    pub fn write_list(
        &self,
        memory: &[IoSlice<'_>],
        file: &[Piece],
    ) -> Result<IoReport, ClientError> {
        let lengths: Vec<u64> = memory.iter().map(|slice| slice.len() as u64).collect();
        self.check("write", &lengths, file)?;
        if let (true, Some(cache)) = (self.buffer_writes, &self.client.inner.cache) {
            if let Some(report) = cache.buffer_write(&self.client.inner, self, memory, file)? {
                return Ok(report);
            }
        }
        let capability = self.capability()?;
        let plan = Plan::new(&self.layout, file);
        let carved = plan.carve(memory.iter().map(|slice| &**slice));
        let mut decisions = Vec::with_capacity(plan.requests.len());
        let memory_pieces = carved.iter().map(|carved| carved.slices.len() as u64).sum();
        let requests: Vec<(Write, Transfer, PieceData<'_>)> = plan
            .requests
            .iter()
            .zip(carved)
            .map(|(request, carved)| {
                let (transfer, decision) =
                    self.transfer_for(request.server_position, request.bytes, &carved.slices);
                decisions.push(decision);
                let write = Write {
                    handle: self.handle,
                    capability: capability.clone(),
                    mode: transfer.wire_mode(),
                    storage: self.storage,
                    pieces: request.pieces.clone(),
                };
                let data = PieceData {
                    slices: carved.slices.into_iter().map(IoSlice::new).collect(),
                    piece_ends: carved.piece_ends,
                };
                (write, transfer, data)
            })
            .collect();
        self.execute(
            &plan,
            &decisions,
            |connection, index, _| {
                let (write, transfer, data) = &requests[index];
                connection.send_write(write, *transfer, data)
            },
            |connection, _| connection.recv_write(),
        )
        .map(|report| IoReport {
            memory_pieces,
            ..report
        })
    }

    /// Reads the file pieces, in order, into the memory pieces, in order. The two lists may
    /// have different counts; their totals must match.
    pub fn read_list(
        &self,
        memory: &mut [IoSliceMut<'_>],
        file: &[Piece],
    ) -> Result<IoReport, ClientError> {
        let lengths: Vec<u64> = memory.iter().map(|slice| slice.len() as u64).collect();
        self.check("read", &lengths, file)?;
        let capability = self.capability()?;
        let plan = Plan::new(&self.layout, file);
        let carved = plan.carve(memory.iter_mut().map(|slice| &mut **slice));
        let mut memory_pieces = 0;
        let mut reads: Vec<(Read, Transfer)> = Vec::with_capacity(plan.requests.len());
        let mut destinations: Vec<PieceDataMut<'_>> = Vec::with_capacity(plan.requests.len());
        let mut decisions = Vec::with_capacity(plan.requests.len());
        for (request, carved) in plan.requests.iter().zip(carved) {
            let (transfer, decision) =
                self.transfer_for(request.server_position, request.bytes, &carved.slices);
            decisions.push(decision);
            reads.push((
                Read {
                    handle: self.handle,
                    capability: capability.clone(),
                    mode: transfer.wire_mode(),
                    storage: self.storage,
                    pieces: request.pieces.clone(),
                },
                transfer,
            ));
            memory_pieces += carved.slices.len() as u64;
            destinations.push(PieceDataMut {
                slices: carved.slices.into_iter().map(IoSliceMut::new).collect(),
                piece_ends: carved.piece_ends,
            });
        }
        // Each closure needs the destinations (send lends them one-sidedly, recv fills
        // them); they take turns, so a cell hands them over.
        let destinations = std::cell::RefCell::new(destinations);
        self.execute(
            &plan,
            &decisions,
            |connection, index, _| {
                let (read, transfer) = &reads[index];
                connection.send_read(read, *transfer, &mut destinations.borrow_mut()[index])
            },
            |connection, index| {
                let (read, transfer) = &reads[index];
                connection.recv_read(read, *transfer, &mut destinations.borrow_mut()[index])
            },
        )
        .map(|report| IoReport {
            memory_pieces,
            ..report
        })
    }
}
