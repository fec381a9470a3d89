//! The client side of a connection to one server: blocking, one request in flight.
//!
//! Bulk data moves between the socket and the caller's memory pieces by the request's
//! [`TransferMode`]: `Gather` hands the pieces to `writev`/`readv` directly (no copy),
//! `Pack` copies them through one contiguous buffer (one copy, one message) and `Multiple`
//! sends or receives one `Data` frame per file piece (no copy, one message per piece).
//! Requests are split into `send_*` and `recv_*` halves so a client can have one request
//! outstanding on every server at once and let the servers work in parallel.
//!
//! On a same-host connection the client shares memory outright: its eager buffer right after
//! the probe, and an arena the first time a request uses it, each with one `ShareRegion`
//! round trip that passes the region's memfd (`SCM_RIGHTS`). The connection keeps the keys it
//! shared, least recently used first, with the server's limit and order
//! (`SHARED_REGIONS_PER_CONNECTION_MAX`), so it shares a region again where the server has
//! unmapped it. Should the two ever disagree, the server answers `UnknownRegion` before it
//! touches any data; the connection then shares the region again and sends the request once
//! more, within the same `recv_*` call.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tessera_auth::Authenticator;
use tessera_proto::limits::HEADER_BYTES;
use tessera_proto::{
    Challenge, ErrorCode, Header, Hello, IoReply, Opcode, Piece, Read as ReadRequest, RemoteAccess,
    RemoteMemory, RemoteProbe, RemoteSegment, Request, TransferMode, Wire, Write,
};

use crate::error::NetError;
use crate::local::eager::EagerBuffer;
use crate::local::policy::Transfer;
use crate::peer::{Expected, Identity};
use crate::stream::{ByteStream, Stream};

mod frames;
mod lent;

use lent::Lent;

/// The longest a connection waits for a reply on the CPU before it blocks
/// ([`Connection::set_reply_spin`]).
pub const REPLY_SPIN_MAX: Duration = Duration::from_millis(1);

/// Memory registration for one-sided transfers: the client registers the segments a server
/// will reach before it sends the request and releases them after the reply (what an RDMA
/// fabric needs; on the `local` backend it measures the registration policies). The returned
/// guard releases on drop.
pub trait Registration: Send + Sync + std::fmt::Debug {
    /// Registers `segments` (address, length) of this process's memory.
    fn acquire(&self, segments: &[(usize, usize)]) -> Result<Box<dyn Send>, String>;
}

/// The data of a write: memory slices, grouped by file piece.
///
/// Piece `i` of the request is `slices[piece_ends[i - 1]..piece_ends[i]]` (from 0 for `i = 0`);
/// its slices add up to the piece's length.
#[derive(Debug, Default)]
pub struct PieceData<'a> {
    /// Memory slices in data order.
    pub slices: Vec<IoSlice<'a>>,
    /// End index into `slices` of each file piece.
    pub piece_ends: Vec<usize>,
}

/// The destination of a read: memory slices, grouped by file piece (as [`PieceData`]).
#[derive(Debug, Default)]
pub struct PieceDataMut<'a> {
    /// Memory slices in data order.
    pub slices: Vec<IoSliceMut<'a>>,
    /// End index into `slices` of each file piece.
    pub piece_ends: Vec<usize>,
}

/// What one exchange cost on the wire.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransferCounts {
    /// Frames sent to the server.
    pub messages_sent: u64,
    /// Frames received from the server.
    pub messages_received: u64,
    /// Bytes copied through a pack buffer on this side.
    pub bytes_copied: u64,
    /// Requests whose data the server moved one-sidedly.
    pub one_sided: u64,
}

impl std::ops::AddAssign for TransferCounts {
    fn add_assign(&mut self, other: Self) {
        self.messages_sent += other.messages_sent;
        self.messages_received += other.messages_received;
        self.bytes_copied += other.bytes_copied;
        self.one_sided += other.one_sided;
    }
}

/// A blocking connection to one server, over a TCP or Unix socket ([`Stream`], the default)
/// or, in tests, any other [`ByteStream`].
#[derive(Debug)]
pub struct Connection<S: ByteStream = Stream> {
    stream: S,
    peer: String,
    timeout: Duration,
    next_request_id: u64,
    /// Id and opcode of the request whose reply has not been read yet.
    outstanding: Option<(u64, Opcode)>,
    /// The server can reach this process's memory (a same-host Unix socket whose probe
    /// succeeded).
    one_sided: bool,
    /// Registers memory before one-sided transfers.
    registration: Option<Arc<dyn Registration>>,
    /// The fabric one-sided transfers go over instead of the server reaching this process
    /// (`RemoteAccess::Fabric`), when the cluster has one and the server passed its probe.
    fabric: Option<Arc<dyn crate::fabric::Fabric>>,
    /// The fabric last offered to this connection and probed (whatever the outcome), so a
    /// connection probes each fabric once.
    fabric_probed: Option<Arc<dyn crate::fabric::Fabric>>,
    /// What the outstanding one-sided request lends the server until its reply: the pack
    /// buffer (unpacked into the caller's slices after a read) and the registration.
    lent: Option<Lent>,
    /// The eager buffer the server maps (one-sided same-host connections only).
    eager: Option<EagerBuffer>,
    /// Keys of the regions shared on this connection, least recently used first: the
    /// server's table, kept the same way (touched by every request that names a key, at most
    /// `SHARED_REGIONS_PER_CONNECTION_MAX`).
    shared_keys: Vec<u64>,
    /// The server refused a region: no more are shared on this connection (eager requests
    /// pack, arena pieces go by address).
    sharing_refused: bool,
    /// The process that opened the connection. A child forked from it inherits the socket,
    /// but the server knows the parent (its pid, from `SO_PEERCRED`, is whose memory a
    /// one-sided transfer reaches), so a child must open connections of its own
    /// ([`Connection::inherited`]; the pool opens a new one).
    opened_by: u32,
    /// Who the server said it is in its challenge, and its cluster id.
    identity: Option<(Identity, u64)>,
    /// How long to wait for a reply on the CPU before blocking (zero: block at once).
    reply_spin: Duration,
}

impl<S: ByteStream> Drop for Connection<S> {
    /// A connection dropped with a one-sided request outstanding (a failed round abandons
    /// its replies) must not return the memory before the server has let go of it.
    fn drop(&mut self) {
        if self.lent.is_some() && !self.settle() {
            self.keep_lent();
        }
    }
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent")
            .field("packed", &self.packed.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl Connection<Stream> {
    /// Connects to `address`; `peer` names the server in every error ("iod 2 at 127.0.0.1:7001").
    /// Connecting, and every later send or receive, gives up after `timeout`.
    pub fn connect(
        peer: impl Into<String>,
        address: &str,
        timeout: Duration,
        auth: &dyn Authenticator,
        expect: Option<Expected>,
    ) -> Result<Self, NetError> {
        let peer = peer.into();
        let connect_error = |source| NetError::Connect {
            peer: peer.clone(),
            source,
        };
        let targets = address.to_socket_addrs().map_err(connect_error)?;
        let mut last_error = io::Error::new(
            io::ErrorKind::NotFound,
            format!("{address} resolves to no address"),
        );
        for target in targets {
            match TcpStream::connect_timeout(&target, timeout) {
                Ok(stream) => {
                    stream.set_nodelay(true).map_err(connect_error)?;
                    stream
                        .set_read_timeout(Some(timeout))
                        .map_err(connect_error)?;
                    stream
                        .set_write_timeout(Some(timeout))
                        .map_err(connect_error)?;
                    let mut connection = Self::over(Stream::Tcp(stream), peer, timeout);
                    connection.handshake(auth, expect)?;
                    return Ok(connection);
                }
                Err(err) => last_error = err,
            }
        }
        Err(connect_error(last_error))
    }

    /// Connects to a same-host server by its Unix socket at `path` and checks that it can
    /// reach this process's memory; if the socket cannot be reached, connects to `address`
    /// by TCP instead. Either fallback is logged once per connection.
    pub fn connect_local(
        peer: impl Into<String>,
        path: &Path,
        address: &str,
        timeout: Duration,
        auth: &dyn Authenticator,
        expect: Option<Expected>,
    ) -> Result<Self, NetError> {
        let peer = peer.into();
        let stream = match Stream::connect_unix(path, timeout) {
            Ok(stream) => stream,
            Err(err) => {
                tracing::info!(
                    "{peer}: no local socket at {} ({err}); using tcp",
                    path.display()
                );
                return Self::connect(peer, address, timeout, auth, expect);
            }
        };
        let mut connection = Self::over(stream, peer, timeout);
        connection.handshake(auth, expect)?;
        match connection.probe() {
            Ok(()) => {
                connection.one_sided = true;
                connection.eager = match EagerBuffer::new() {
                    Ok(buffer) => Some(buffer),
                    Err(err) => {
                        tracing::info!(
                            "{}: no eager buffer ({err}); small transfers pack instead",
                            connection.peer
                        );
                        None
                    }
                };
                if let Some(key) = connection.eager.as_ref().map(EagerBuffer::key) {
                    connection.ensure_shared(key)?;
                }
                // Measure the transfer model now, not in the first timed transfer.
                crate::local::policy::model();
            }
            Err(NetError::Remote { error, .. }) if error.code == ErrorCode::RemoteAccessRefused => {
                tracing::warn!(
                    "{}: one-sided access refused ({}); moving data in messages",
                    connection.peer,
                    error.message
                );
            }
            Err(other) => return Err(other),
        }
        Ok(connection)
    }
}

impl<S: ByteStream> Connection<S> {
    /// A connection over `stream`, before its handshake ([`Connection::handshake`]).
    pub(crate) fn over(stream: S, peer: String, timeout: Duration) -> Self {
        Self {
            stream,
            peer,
            timeout,
            next_request_id: 1,
            outstanding: None,
            one_sided: false,
            registration: None,
            fabric: None,
            fabric_probed: None,
            lent: None,
            eager: None,
            shared_keys: Vec::new(),
            sharing_refused: false,
            opened_by: std::process::id(),
            identity: None,
            reply_spin: Duration::ZERO,
        }
    }

    /// The server closed the connection while it sat unused (an idle connection it closed),
    /// so it must not be used for a request.
    pub fn closed_by_peer(&self) -> bool {
        self.outstanding.is_none() && self.lent.is_none() && self.stream.closed_by_peer()
    }

    /// The connection was opened by another process: this one is a child forked since, and
    /// must not speak on it (the server would move the parent's memory, and the two
    /// processes' requests and replies would interleave on one stream).
    pub fn inherited(&self) -> bool {
        self.opened_by != std::process::id()
    }

    /// Gives up a connection inherited across a fork without touching the stream the parent
    /// still uses: no shutdown and no wait for a request the parent has outstanding (that
    /// memory and its registrations are the parent's); only this process's copy of the
    /// descriptor and of the eager mapping go.
    pub fn abandon(mut self) {
        if let Some(lent) = self.lent.take() {
            std::mem::forget(lent);
        }
    }

    /// The handshake every connection starts with (`tessera_auth::handshake`): reads the
    /// server's challenge, answers it with this process's credential and proof, and checks
    /// that the server's welcome proves it holds the cluster key.
    pub(crate) fn handshake(
        &mut self,
        auth: &dyn Authenticator,
        expect: Option<Expected>,
    ) -> Result<(), NetError> {
        let header = self.read_header()?;
        if header.opcode != Hello::OPCODE as u8
            || !header.is_reply()
            || header.is_error()
            || header.request_id != 0
            || header.bulk_bytes != 0
            || header.body_bytes > 64
        {
            return Err(self.protocol(format!(
                "expected the server's challenge, got opcode {:#04x} flags {:#x}",
                header.opcode, header.flags
            )));
        }
        let body = self.read_vec(header.body_bytes)?;
        let challenge =
            Challenge::from_body(&body).map_err(|err| NetError::protocol(&self.peer, &err))?;
        // A server at the wrong address is refused before this side says or lends anything.
        self.identity = Some((
            Identity {
                role: challenge.role,
                index: challenge.server_index,
            },
            challenge.cluster_id,
        ));
        if let Some(expect) = expect {
            self.check_identity(expect.identity, expect.cluster_id)?;
        }
        // The proofs are bound to the server the challenge named, which is the expected one
        // when this side knows whom it expects: a squatter cannot relay them elsewhere.
        let (hello, expected) = auth.hello(&challenge).map_err(|err| NetError::Auth {
            peer: self.peer.clone(),
            detail: err.to_string(),
        })?;
        let welcome = self.call(&hello)?;
        if welcome.proof != expected {
            return Err(NetError::Auth {
                peer: self.peer.clone(),
                detail: "the server's welcome is not signed with this cluster's key".to_owned(),
            });
        }
        Ok(())
    }

    /// Checks that the server is `expect` and, when `cluster_id` is given, of that cluster,
    /// by what its challenge said. A server at the wrong address (swapped indices, another
    /// cluster) is refused before any request.
    pub fn check_identity(
        &self,
        expect: Identity,
        cluster_id: Option<u64>,
    ) -> Result<(), NetError> {
        let Some((found, found_cluster)) = self.identity else {
            return Err(self.protocol("no handshake on this connection".to_owned()));
        };
        if found != expect {
            return Err(NetError::WrongServer {
                peer: self.peer.clone(),
                detail: format!("expected {expect}, found {found}"),
            });
        }
        if let Some(cluster_id) = cluster_id.filter(|&id| id != found_cluster) {
            return Err(NetError::WrongServer {
                peer: self.peer.clone(),
                detail: format!(
                    "expected a server of cluster {cluster_id:016x}, found one of cluster {found_cluster:016x}"
                ),
            });
        }
        Ok(())
    }

    /// Asks the server to pull a token out of this process's memory (directly, on a
    /// same-host socket).
    fn probe(&mut self) -> Result<(), NetError> {
        let token: u64 = u64::from(std::process::id()) << 32 | 0x7e55_e7a0;
        let bytes = token.to_le_bytes();
        let memory = RemoteMemory {
            access: RemoteAccess::Process,
            endpoint: tessera_proto::RemoteEndpoint::default(),
            segments_per_call: 0,
            segments: vec![segment_of(bytes.as_ptr(), bytes.len())],
        };
        self.probe_with(&memory, token)?;
        // `bytes` must stay in memory until the reply: the server reads it in between.
        std::hint::black_box(&bytes);
        Ok(())
    }

    /// Asks the server to read a token out of this process's memory over `fabric` with RMA
    /// (`RemoteAccess::Fabric`); the token's buffer is lent transiently.
    fn probe_fabric(&mut self, fabric: &dyn crate::fabric::Fabric) -> Result<(), NetError> {
        let token: u64 = u64::from(std::process::id()) << 32 | 0x0f1_e7a0;
        let bytes = Box::new(token.to_le_bytes());
        let lending = fabric
            .lend(&[(bytes.as_ptr() as usize, bytes.len())], true)
            .map_err(|detail| NetError::Register {
                peer: self.peer.clone(),
                detail: format!("{}: {detail}", fabric.provider()),
            })?;
        let memory = RemoteMemory {
            access: RemoteAccess::Fabric,
            endpoint: tessera_proto::RemoteEndpoint(lending.endpoint),
            segments_per_call: 0,
            segments: lending.segments,
        };
        let result = self.probe_with(&memory, token);
        // The registration goes (and is invalidated) before the token's memory is freed.
        drop(lending.guard);
        drop(bytes);
        result
    }

    /// Sends a `RemoteProbe` naming `memory` and checks that the server read `token`.
    fn probe_with(&mut self, memory: &RemoteMemory, token: u64) -> Result<(), NetError> {
        let descriptor = memory.to_body();
        let body = RemoteProbe {}.to_body();
        let bulk_bytes = self.bulk_len(descriptor.len() as u64)?;
        self.send_frame(
            RemoteProbe::OPCODE,
            &body,
            &mut [IoSlice::new(&descriptor)],
            bulk_bytes,
        )?;
        let (reply, _) = self.recv_reply::<tessera_proto::RemoteProbeReply>(None)?;
        if reply.token == token {
            Ok(())
        } else {
            Err(self.protocol(format!(
                "the remote probe read {:#x}, not the token {token:#x}",
                reply.token
            )))
        }
    }

    /// The server's name, as used in errors.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Whether the server can move data one-sidedly from and into this process's memory.
    pub fn one_sided(&self) -> bool {
        self.one_sided || self.fabric.is_some()
    }

    /// Moves the data of later one-sided transfers over `fabric` (`None`: the server reaches
    /// this process directly, where it can). The first time a fabric is offered, the server
    /// must read a token of this process over it (a `RemoteProbe` with fabric access); if it
    /// answers with an error instead (it lacks the provider, or cannot reach this endpoint),
    /// one line is logged and this connection moves data in messages (or as it did before).
    /// An error here is the connection's own (it broke): drop the connection.
    pub fn set_fabric(
        &mut self,
        fabric: Option<Arc<dyn crate::fabric::Fabric>>,
    ) -> Result<(), NetError> {
        let Some(fabric) = fabric else {
            self.fabric = None;
            self.fabric_probed = None;
            return Ok(());
        };
        if self
            .fabric_probed
            .as_ref()
            .is_some_and(|probed| Arc::ptr_eq(probed, &fabric))
        {
            return Ok(());
        }
        self.fabric = None;
        self.fabric_probed = Some(Arc::clone(&fabric));
        match self.probe_fabric(fabric.as_ref()) {
            Ok(()) => self.fabric = Some(fabric),
            Err(NetError::Remote { error, .. }) => tracing::warn!(
                "{}: the server cannot reach this process over {} ({}: {}); moving data \
                 without the fabric on this connection",
                self.peer,
                fabric.provider(),
                error.code,
                error.message
            ),
            Err(other) => return Err(other),
        }
        Ok(())
    }

    /// Whether one-sided transfers on this connection go over a fabric (it passed the probe).
    pub fn fabric(&self) -> Option<&Arc<dyn crate::fabric::Fabric>> {
        self.fabric.as_ref()
    }

    /// Waits up to `spin` on the CPU for each reply before blocking for it (at most
    /// [`REPLY_SPIN_MAX`]; zero: block at once). A thread that blocks leaves its CPU idle, and
    /// waking an idle CPU (in a virtual machine above all) can cost more than a small
    /// request's whole round trip.
    pub fn set_reply_spin(&mut self, spin: Duration) {
        self.reply_spin = spin.min(REPLY_SPIN_MAX);
    }

    /// Registers the memory of later one-sided transfers through `registration`.
    pub fn set_registration(&mut self, registration: Option<Arc<dyn Registration>>) {
        self.registration = registration;
    }

    /// Makes this connection the callback channel of client `client_id` on its server
    /// (`LeaseListen`); then serve it with [`Connection::serve_lease_callbacks`].
    pub fn listen_for_leases(&mut self, client_id: u64) -> Result<(), NetError> {
        self.call(&tessera_proto::LeaseListen { client_id })
            .map(|tessera_proto::Empty {}| ())
    }

    /// Answers the server's `LeaseRevoke` requests on a callback channel, each after
    /// `revoke(handle)` returned, until the server closes the channel (`Ok`) or `stop` is set
    /// (looked at every `poll`). Anything else the server sends is a protocol error.
    pub fn serve_lease_callbacks(
        &mut self,
        stop: &std::sync::atomic::AtomicBool,
        poll: Duration,
        mut revoke: impl FnMut(u64),
    ) -> Result<(), NetError> {
        loop {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(());
            }
            // Wait for a request's first byte a poll at a time; the rest must follow.
            let mut bytes = [0u8; HEADER_BYTES];
            self.stream
                .set_read_timeout(Some(poll))
                .map_err(|err| self.io_error(err))?;
            let first = self.stream.read(&mut bytes[..1]);
            self.stream
                .set_read_timeout(Some(self.timeout))
                .map_err(|err| self.io_error(err))?;
            match first {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(err) => return Err(self.io_error(err)),
            }
            self.stream
                .read_exact(&mut bytes[1..])
                .map_err(|err| self.io_error(err))?;
            let header =
                Header::decode(&bytes).map_err(|err| NetError::protocol(&self.peer, &err))?;
            if header.is_reply()
                || header.opcode != tessera_proto::LeaseRevoke::OPCODE as u8
                || header.bulk_bytes != 0
            {
                return Err(self.protocol(format!(
                    "a callback channel carries only LeaseRevoke requests, got opcode {:#04x} \
                     flags {:#x}",
                    header.opcode, header.flags
                )));
            }
            let body = self.read_vec(header.body_bytes)?;
            let tessera_proto::LeaseRevoke { handle } =
                Wire::from_body(&body).map_err(|err| NetError::protocol(&self.peer, &err))?;
            revoke(handle);
            let reply = Header {
                opcode: header.opcode,
                flags: tessera_proto::header::FLAG_REPLY,
                request_id: header.request_id,
                body_bytes: 0,
                bulk_bytes: 0,
            }
            .encode();
            self.stream
                .write_all(&reply)
                .map_err(|err| self.io_error(err))?;
        }
    }

    /// Sends a request with `bulk` (gathered from the slices) and waits for its reply.
    pub fn call_with_bulk<R: Request>(
        &mut self,
        request: &R,
        bulk: &mut [IoSlice<'_>],
    ) -> Result<R::Reply, NetError> {
        let body = request.to_body();
        let bytes = bulk.iter().map(|slice| slice.len() as u64).sum();
        let bulk_bytes = self.bulk_len(bytes)?;
        self.send_frame(R::OPCODE, &body, bulk, bulk_bytes)?;
        let (reply, _) = self.recv_reply::<R::Reply>(None)?;
        Ok(reply)
    }

    /// Sends a request whose bulk the server pulls one-sidedly from `slices` (lent until the
    /// reply; the connection must be [`Connection::one_sided`]) and waits for its reply.
    pub fn call_remote<R: Request>(
        &mut self,
        request: &R,
        slices: &[IoSlice<'_>],
    ) -> Result<R::Reply, NetError> {
        let pointers: Vec<(*const u8, usize)> = slices
            .iter()
            .map(|slice| (slice.as_ptr(), slice.len()))
            .collect();
        self.send_remote(R::OPCODE, request.to_body(), &pointers, false, 0)?;
        let result = self.recv_reply::<R::Reply>(None).map(|(reply, _)| reply);
        drop(self.settle_lent(&result));
        result
    }

    /// Sends a request without bulk data and waits for its reply.
    pub fn call<R: Request>(&mut self, request: &R) -> Result<R::Reply, NetError> {
        self.send_request(request)?;
        let (reply, _) = self.recv_reply::<R::Reply>(None)?;
        Ok(reply)
    }

    /// Waits for the reply to the request [`Connection::send_request`] sent: with it, a caller
    /// asks several servers at once and then reads their replies ([`crate::Pool::call_each`]).
    pub fn recv_reply_to<R: Request>(&mut self) -> Result<R::Reply, NetError> {
        self.recv_reply::<R::Reply>(None).map(|(reply, _)| reply)
    }

    /// Sends a request that carries no bulk data (every request but `Write`).
    pub fn send_request<R: Request>(&mut self, request: &R) -> Result<TransferCounts, NetError> {
        let body = request.to_body();
        self.send_frame(R::OPCODE, &body, &mut [], 0)?;
        Ok(TransferCounts {
            messages_sent: 1,
            ..TransferCounts::default()
        })
    }

    /// Sends a `Write` and its data by `transfer` (whose mode the request names).
    pub fn send_write(
        &mut self,
        request: &Write,
        transfer: Transfer,
        data: &PieceData<'_>,
    ) -> Result<TransferCounts, NetError> {
        debug_assert_eq!(request.mode, transfer.wire_mode());
        self.send_data(request, transfer, &request.pieces, data)
    }

    /// Sends a write request of any form (`Write`, `WriteType`, `WriteView`) with its data
    /// by `transfer`, whose mode the request must name; `pieces` are the local pieces the
    /// server will find (one `Data` frame each in the framed multiple mode).
    pub fn send_data<R: Request<Reply = IoReply>>(
        &mut self,
        request: &R,
        transfer: Transfer,
        pieces: &[Piece],
        data: &PieceData<'_>,
    ) -> Result<TransferCounts, NetError> {
        let mode = match transfer {
            Transfer::Framed(mode) => mode,
            Transfer::Eager => {
                let slices: Vec<(*const u8, usize)> = data
                    .slices
                    .iter()
                    .map(|slice| (slice.as_ptr(), slice.len()))
                    .collect();
                let body = request.to_body();
                return self.send_eager(R::OPCODE, body, &slices, true);
            }
            Transfer::Remote {
                pack,
                segments_per_call,
            } => {
                let slices: Vec<(*const u8, usize)> = data
                    .slices
                    .iter()
                    .map(|slice| (slice.as_ptr(), slice.len()))
                    .collect();
                let body = request.to_body();
                return self.send_remote(R::OPCODE, body, &slices, pack, segments_per_call);
            }
        };
        let data_bytes: u64 = pieces.iter().map(|piece| piece.length).sum();
        debug_assert_eq!(data.piece_ends.len(), pieces.len());
        debug_assert_eq!(
            data.slices
                .iter()
                .map(|slice| slice.len() as u64)
                .sum::<u64>(),
            data_bytes
        );
        let body = request.to_body();
        let bulk_bytes = self.bulk_len(data_bytes)?;
        let mut counts = TransferCounts {
            messages_sent: 1,
            ..TransferCounts::default()
        };
        match mode {
            TransferMode::Remote => {
                return Err(self.protocol(
                    "the remote mode travels as Transfer::Remote, not in frames".to_owned(),
                ));
            }
            TransferMode::Gather => {
                let mut slices = data.slices.clone();
                self.send_frame(R::OPCODE, &body, &mut slices, bulk_bytes)?;
            }
            TransferMode::Pack => {
                let mut packed = Vec::with_capacity(bulk_bytes as usize);
                for slice in &data.slices {
                    packed.extend_from_slice(slice);
                }
                counts.bytes_copied = packed.len() as u64;
                self.send_frame(R::OPCODE, &body, &mut [IoSlice::new(&packed)], bulk_bytes)?;
            }
            TransferMode::Multiple => {
                self.send_frame(R::OPCODE, &body, &mut [], 0)?;
                let mut start = 0;
                for (piece, &end) in pieces.iter().zip(&data.piece_ends) {
                    let mut slices = data.slices[start..end].to_vec();
                    let bytes = self.bulk_len(piece.length)?;
                    self.write_frame(
                        Opcode::Data,
                        0,
                        self.next_request_id - 1,
                        &[],
                        &mut slices,
                        bytes,
                    )?;
                    counts.messages_sent += 1;
                    start = end;
                }
            }
        }
        Ok(counts)
    }

    /// Sends a read request of any form (`Read`, `ReadType`, `ReadView`) whose data will land
    /// in `data` by `transfer` (whose mode the request must name): one-sidedly, the request
    /// lends the server `data`'s memory (or a pack buffer) until [`Connection::recv_data`].
    pub fn send_read<R: Request<Reply = IoReply>>(
        &mut self,
        request: &R,
        transfer: Transfer,
        data: &mut PieceDataMut<'_>,
    ) -> Result<TransferCounts, NetError> {
        match transfer {
            Transfer::Framed(_) => self.send_request(request),
            Transfer::Eager => {
                let slices: Vec<(*const u8, usize)> = data
                    .slices
                    .iter_mut()
                    .map(|slice| (slice.as_mut_ptr().cast_const(), slice.len()))
                    .collect();
                let body = request.to_body();
                self.send_eager(R::OPCODE, body, &slices, false)
            }
            Transfer::Remote {
                pack,
                segments_per_call,
            } => {
                let slices: Vec<(*const u8, usize)> = data
                    .slices
                    .iter_mut()
                    .map(|slice| (slice.as_mut_ptr().cast_const(), slice.len()))
                    .collect();
                let body = request.to_body();
                self.send_remote(R::OPCODE, body, &slices, pack, segments_per_call)
            }
        }
    }

    /// Receives the reply to the outstanding `Read`, placing its data into `data` by
    /// `transfer`.
    pub fn recv_read(
        &mut self,
        request: &ReadRequest,
        transfer: Transfer,
        data: &mut PieceDataMut<'_>,
    ) -> Result<(IoReply, TransferCounts), NetError> {
        self.recv_data(transfer, &request.pieces, data)
    }

    /// Receives the reply to the outstanding read of any form (`Read`, `ReadType`,
    /// `ReadView`), whose local pieces are `pieces`, placing its data into `data` by
    /// `transfer` (one-sidedly the server has put it there before replying).
    pub fn recv_data(
        &mut self,
        transfer: Transfer,
        pieces: &[Piece],
        data: &mut PieceDataMut<'_>,
    ) -> Result<(IoReply, TransferCounts), NetError> {
        debug_assert_eq!(data.piece_ends.len(), pieces.len());
        match transfer {
            Transfer::Framed(mode) => self.recv_reply::<IoReply>(Some((mode, pieces, data))),
            Transfer::Remote { .. } | Transfer::Eager => {
                let (result, lent) = self.recv_lent_reply();
                let (reply, mut counts) = result?;
                if let (Some(Lent { eager: true, .. }), Some(eager)) = (&lent, &self.eager) {
                    let mut slices: Vec<&mut [u8]> =
                        data.slices.iter_mut().map(|slice| &mut **slice).collect();
                    counts.bytes_copied += eager.empty_into(&mut slices) as u64;
                }
                if let Some(Lent {
                    packed: Some(packed),
                    ..
                }) = lent
                {
                    let mut cursor = 0;
                    for slice in &mut data.slices {
                        let len = slice.len();
                        slice.copy_from_slice(&packed[cursor..cursor + len]);
                        cursor += len;
                    }
                    counts.bytes_copied += packed.len() as u64;
                }
                Ok((reply, counts))
            }
        }
    }
}

fn segment_of(address: *const u8, length: usize) -> RemoteSegment {
    RemoteSegment {
        address: address as u64,
        length: length as u64,
        key: 0,
    }
}

#[cfg(test)]
mod tests;
