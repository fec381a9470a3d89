//! The server side of the transport: accept loop, per-connection framing, bounded work.
//!
//! Each accepted connection gets one task that reads a frame header, checks it against the
//! limits, reads the body and hands the request to the [`Service`]. Requests on one connection
//! are served in order; [`CONNECTIONS_MAX`] bounds the connections and
//! [`SERVER_REQUESTS_INFLIGHT_MAX`] the requests being served at once. A connection that sends
//! a malformed frame gets one log line and is closed; the other connections carry on.
//!
//! On a Unix socket every frame header is read with `recvmsg` ([`crate::local::scm`]), so a
//! descriptor passed with `SCM_RIGHTS` is seen with the frame it came with: a `ShareRegion`
//! may carry one (handed to the service in [`Incoming::descriptor`]); a descriptor with any
//! other frame, or more than one, is answered with an error and the connection is closed,
//! descriptors and all. Bodies, bulk and `Data` frames are read plainly.

use std::future::Future;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tessera_auth::{CapabilityCache, Rights, ServerAuth};
use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::limits::{
    BULK_PREFETCH_BYTES_MAX, HEADER_BYTES, IDLE_CONNECTION_TIMEOUT_MS,
    SHARED_REGIONS_PER_CONNECTION_MAX,
};
use tessera_proto::metrics::{CAPABILITY_CACHE, ERRORS, REGIONS_SHARED, REGION_LOOKUPS};
use tessera_proto::{
    Capability, Credentials, ErrorCode, Header, Opcode, Piece, Principal, RemoteError, Request,
    Wire, WireError,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::local::mover::Mover;
use crate::local::region::{RegionTable, SharedRegion};
use crate::local::scm::{self, Received};

mod accept;
mod frame;

use accept::{request_kind, MoverSlot, Slot};
pub use accept::{
    serve, serve_with_local, serving_on_own_thread, CONNECTION_WARNINGS_PER_SECOND_MAX,
};
use frame::{
    check_slices, frame_head, read_into_slices, within, write_frame_to, write_frame_vectored,
    BODY_PERMIT_BYTES, WRITEV_SLICES_MAX,
};

/// Why a connection is being closed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The socket failed or the peer went away.
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    /// The peer sent bytes that are not a valid frame.
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
    /// The peer failed the handshake (already answered; the connection is closed).
    #[error("{0}")]
    Auth(String),
    /// The request cannot be served and the stream cannot be resynchronised: the error is
    /// sent back, then the connection is closed.
    #[error("refused and closing: {0}")]
    Refused(RemoteError),
}

/// One decoded request frame (header and body; any bulk is still on the socket).
#[derive(Debug)]
pub struct Incoming {
    /// The frame header.
    pub header: Header,
    /// The operation.
    pub opcode: Opcode,
    /// The encoded body.
    pub body: Vec<u8>,
    /// The descriptor that came with the frame (`SCM_RIGHTS`, a `ShareRegion` only).
    pub descriptor: Option<OwnedFd>,
}

impl Incoming {
    /// Decodes the body as `M`; a malformed body refuses the request and closes the connection.
    pub fn decode<M: Wire>(&self) -> Result<M, ConnectionError> {
        M::from_body(&self.body).map_err(|err| ConnectionError::Refused(err.into()))
    }
}

/// A server's request handler.
pub trait Service: Send + Sync + 'static {
    /// "mds" or "iod 3", for log lines.
    fn name(&self) -> String;

    /// Serves one request: reads its bulk data from `connection` if it has any and writes
    /// exactly one reply (plus `Data` frames in the multiple mode).
    fn handle<'a>(
        &'a self,
        request: Incoming,
        connection: &'a mut ServerConnection,
    ) -> impl Future<Output = Result<(), ConnectionError>> + Send + 'a;
}

/// The server's end of one client connection.
#[derive(Debug)]
pub struct ServerConnection {
    stream: ServerStream,
    peer: String,
    peer_pid: Option<u32>,
    /// Who moves this connection's one-sided copies (a same-host peer only).
    mover: MoverSlot,
    /// The key, to check credentials and capabilities in requests.
    auth: Arc<ServerAuth>,
    /// Whom the connection speaks for, proved in its handshake.
    credentials: Credentials,
    /// The last credential a request carried that verified (other than the handshake's).
    last_credentials: Option<Credentials>,
    /// Capabilities that verified on this connection.
    capabilities: CapabilityCache,
    /// Shared regions the peer handed over on this connection (`ShareRegion`), least
    /// recently used first (at most `SHARED_REGIONS_PER_CONNECTION_MAX`), charged to the
    /// peer's uid in the server's account until they are unmapped (evicted, replaced, or
    /// dropped with the connection).
    shared: RegionTable,
    /// The connection's place in the server's table (idle or busy; how to close it).
    slot: Arc<Slot>,
    /// The work slot of the request being served, given back as its reply goes out and
    /// while the request waits on its peer or on a budget ([`ServerConnection::waiting`]).
    work: Option<OwnedSemaphorePermit>,
    /// The server's work slots (`SERVER_REQUESTS_INFLIGHT_MAX`), to take one back.
    inflight: Arc<Semaphore>,
    /// The current request's bulk, read before it took a work slot (small bulk only).
    prefetched: Option<Vec<u8>>,
    /// The server's budget for large request bodies (`SERVER_BODY_BYTES_MAX`, in KiB).
    bodies: Arc<Semaphore>,
    /// The current request's share of it, held until the request is done.
    body_budget: Option<OwnedSemaphorePermit>,
    /// Requests this server sent the peer (`call_peer`), for their ids.
    peer_calls: u64,
    /// The id of the caching client speaking on this connection (it asked for a lease here).
    client_id: Option<u64>,
}

/// A connection's socket: TCP, or a Unix socket from a process on this host.
#[derive(Debug)]
enum ServerStream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// An in-memory pipe standing in for a socket in unit tests.
    #[cfg(test)]
    Duplex(tokio::io::DuplexStream),
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Self::Unix(stream) => Pin::new(stream).poll_read(cx, buf),
            #[cfg(test)]
            Self::Duplex(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Self::Unix(stream) => Pin::new(stream).poll_write(cx, buf),
            #[cfg(test)]
            Self::Duplex(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Self::Unix(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            #[cfg(test)]
            Self::Duplex(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Self::Unix(stream) => Pin::new(stream).poll_flush(cx),
            #[cfg(test)]
            Self::Duplex(stream) => Pin::new(stream).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Self::Unix(stream) => Pin::new(stream).poll_shutdown(cx),
            #[cfg(test)]
            Self::Duplex(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

impl ServerStream {
    /// One `readv` into `slices` once the socket is readable (a plain read of the first
    /// slice in tests); 0 at the end of the stream.
    async fn read_vectored(&mut self, slices: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        loop {
            let result = match self {
                Self::Tcp(stream) => {
                    stream.readable().await?;
                    stream.try_read_vectored(slices)
                }
                Self::Unix(stream) => {
                    stream.readable().await?;
                    stream.try_read_vectored(slices)
                }
                #[cfg(test)]
                Self::Duplex(stream) => match slices.iter_mut().find(|slice| !slice.is_empty()) {
                    Some(slice) => stream.read(slice).await,
                    None => Ok(0),
                },
            };
            match result {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                done => return done,
            }
        }
    }

    /// One `writev` of what the socket takes now, without waiting: the bytes taken, 0 when
    /// it takes none (and always in tests).
    fn try_write_vectored(&self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let result = match self {
            Self::Tcp(stream) => stream.try_write_vectored(slices),
            Self::Unix(stream) => stream.try_write_vectored(slices),
            #[cfg(test)]
            Self::Duplex(_) => Ok(0),
        };
        match result {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        }
    }
}

impl ServerConnection {
    /// The client's address, for log lines.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The client's process id, from the kernel (`SO_PEERCRED`), on a Unix socket whose peer
    /// is visible in this pid namespace; `None` over TCP.
    pub fn peer_pid(&self) -> Option<u32> {
        self.peer_pid
    }

    /// The [`Mover`] of this connection's one-sided copies: started at the first call (it
    /// opens the client's memory with the client's credentials and pins its process), then the
    /// same one.
    /// Refused over TCP, where the kernel refuses (the client's own rights do not reach its
    /// memory), and once the mover is retired (the process is gone, or a copy stalled): the
    /// caller then closes the connection.
    pub async fn mover(&mut self) -> Result<Arc<Mover>, RemoteError> {
        let refused = |detail: String| RemoteError::new(ErrorCode::RemoteAccessRefused, detail);
        match std::mem::replace(&mut self.mover, MoverSlot::Absent) {
            MoverSlot::Started(mover) => {
                if let Some(reason) = mover.retired() {
                    let error = refused(format!("pid {}: {reason}", mover.pid()));
                    self.mover = MoverSlot::Refused(error.clone());
                    return Err(error);
                }
                self.mover = MoverSlot::Started(Arc::clone(&mover));
                Ok(mover)
            }
            // Opening the client's memory may wait on the client (an exec under way): on a
            // blocking thread.
            MoverSlot::Unstarted(peer) => {
                let started = if serving_on_own_thread() {
                    Mover::start(peer)
                } else {
                    tokio::task::spawn_blocking(move || Mover::start(peer))
                        .await
                        .unwrap_or_else(|err| {
                            Err(crate::local::rma::RmaError::Gone {
                                pid: 0,
                                reason: format!("its mover did not start: {err}"),
                            })
                        })
                };
                match started {
                    Ok(mover) => {
                        let mover = Arc::new(mover);
                        crate::local::mover::watch(&mover);
                        self.mover = MoverSlot::Started(Arc::clone(&mover));
                        Ok(mover)
                    }
                    Err(err) => {
                        let error = err.to_remote();
                        self.mover = MoverSlot::Refused(error.clone());
                        Err(error)
                    }
                }
            }
            MoverSlot::Refused(error) => {
                self.mover = MoverSlot::Refused(error.clone());
                Err(error)
            }
            MoverSlot::Absent => Err(refused(format!(
                "one-sided transfers need a same-host Unix socket whose peer is visible; {} is \
                 not",
                self.peer
            ))),
        }
    }

    /// Whom the connection speaks for (its handshake credential, verified).
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// Whether the peer is a server of the cluster (the mds), not a user's process.
    pub fn is_server(&self) -> bool {
        self.credentials.principal == Principal::Server
    }

    /// Checks the credential a request carries: signed with the cluster key, not expired, and
    /// (on a user's connection) for the uid the connection authenticated as. A server's
    /// connection may speak for any user.
    pub fn check_credentials(&mut self, credentials: &Credentials) -> Result<(), RemoteError> {
        let refused = |detail: String| {
            RemoteError::new(
                ErrorCode::PermissionDenied,
                format!("permission denied: {detail}"),
            )
        };
        let known =
            *credentials == self.credentials || self.last_credentials.as_ref() == Some(credentials);
        if known {
            tessera_auth::handshake::check_credentials_expiry(credentials)
                .map_err(|err| refused(err.to_string()))?;
        } else {
            tessera_auth::handshake::verify_credentials(self.auth.key(), credentials)
                .map_err(|err| refused(err.to_string()))?;
        }
        if !self.is_server() && credentials.uid != self.credentials.uid {
            return Err(refused(format!(
                "a credential for uid {} on a connection of uid {}",
                credentials.uid, self.credentials.uid
            )));
        }
        if !known {
            self.last_credentials = Some(credentials.clone());
        }
        Ok(())
    }

    /// Checks that `capability` lets this connection do `wanted` on `handle` (a server's
    /// connection needs none). The refusal names the handle and the reason.
    pub fn check_capability(
        &mut self,
        capability: &Capability,
        handle: u64,
        wanted: Rights,
    ) -> Result<(), RemoteError> {
        let (principal, uid) = (self.credentials.principal, self.credentials.uid);
        let checks_before = self.capabilities.checks;
        let checked =
            self.capabilities
                .check(self.auth.key(), principal, uid, capability, handle, wanted);
        if !(principal == Principal::Server && capability.0.is_empty()) {
            let result = if self.capabilities.checks == checks_before {
                "hit"
            } else {
                "miss"
            };
            metrics::counter!(CAPABILITY_CACHE, "result" => result).increment(1);
        }
        checked.map_err(|err| {
            RemoteError::new(
                ErrorCode::PermissionDenied,
                format!("permission denied on handle {handle:#x}: {err}"),
            )
        })
    }

    /// Capability tags checked on this connection (cache misses).
    pub fn capability_checks(&self) -> u64 {
        self.capabilities.checks
    }

    /// The shared region (eager buffer or arena) the peer shared on this connection as
    /// `key`; it becomes the most recently used. A key never shared here, or unmapped since,
    /// is `UnknownRegion` (the client shares it again and retries).
    pub fn shared_region(&mut self, key: u64) -> Result<Arc<SharedRegion>, RemoteError> {
        let Some(region) = self.shared.get(key) else {
            metrics::counter!(REGION_LOOKUPS, "result" => "miss").increment(1);
            return Err(RemoteError::new(
                ErrorCode::UnknownRegion,
                format!(
                    "shared region {key:#x} is not shared on this connection (never shared, or \
                     unmapped since: at most {SHARED_REGIONS_PER_CONNECTION_MAX} are kept, \
                     shared_regions_per_connection_max, least recently used unmapped first); \
                     share it again"
                ),
            ));
        };
        metrics::counter!(REGION_LOOKUPS, "result" => "hit").increment(1);
        Ok(region)
    }

    /// Serves a `ShareRegion`: maps the region `descriptor` holds as `key`, declared `bytes`
    /// long ([`SharedRegion::from_descriptor`] checks it), charged to the peer's uid (at most
    /// `SHARED_BYTES_PER_UID_MAX` mapped by this server at once), replacing any region shared
    /// as `key` before and unmapping the least recently used past the limit
    /// ([`RegionTable::share`]). A refusal (`RemoteAccessRefused`) names the key and the
    /// reason, and unmaps nothing.
    pub fn share_region(
        &mut self,
        key: u64,
        bytes: u64,
        descriptor: Option<OwnedFd>,
    ) -> Result<(), RemoteError> {
        let refused = |reason: String| {
            RemoteError::new(
                ErrorCode::RemoteAccessRefused,
                format!("shared region {key:#x}: {reason}"),
            )
        };
        let Some(descriptor) = descriptor else {
            return Err(refused(format!(
                "no descriptor came with the request (a region travels as a memfd passed \
                 with SCM_RIGHTS over a same-host Unix socket; {} is not one)",
                self.peer
            )));
        };
        self.shared
            .share(key, bytes, &descriptor)
            .map_err(refused)?;
        metrics::counter!(REGIONS_SHARED).increment(1);
        Ok(())
    }

    /// Reads a frame header: plainly over TCP; with `recvmsg` over a Unix socket, returning
    /// what came besides the bytes. `None` at a clean end of the stream, after
    /// `IDLE_CONNECTION_TIMEOUT_MS` with no request begun, or when the server closes this
    /// idle connection for a new one. Once the first byte is in, the rest must follow within
    /// the frame timeout.
    async fn read_header(
        &mut self,
    ) -> Result<Option<([u8; HEADER_BYTES], Received)>, ConnectionError> {
        let mut bytes = [0u8; HEADER_BYTES];
        let mut received = Received::default();
        self.slot.set_idle(true);
        let idle = Duration::from_millis(IDLE_CONNECTION_TIMEOUT_MS);
        let first = {
            let slot = self.slot.clone();
            let read = Self::read_some_header(&mut self.stream, &mut bytes, 0, &mut received);
            tokio::select! {
                () = slot.close.notified() => return Ok(None),
                () = tokio::time::sleep(idle) => return Ok(None),
                read = read => read?,
            }
        };
        self.slot.set_idle(false);
        if first == 0 {
            if received.descriptors.is_empty() {
                return Ok(None);
            }
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        let mut filled = first;
        let stream = &mut self.stream;
        within(HEADER_BYTES as u64, "the rest of a frame header", async {
            while filled < HEADER_BYTES {
                match Self::read_some_header(stream, &mut bytes, filled, &mut received).await? {
                    0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                    got => filled += got,
                }
            }
            Ok(())
        })
        .await?;
        Ok(Some((bytes, received)))
    }

    /// One read of header bytes from `filled` on: plain over TCP, `recvmsg` over a Unix
    /// socket (never more than the rest of this header, so the descriptors of a later frame
    /// cannot come with it).
    async fn read_some_header(
        stream: &mut ServerStream,
        bytes: &mut [u8; HEADER_BYTES],
        filled: usize,
        received: &mut Received,
    ) -> io::Result<usize> {
        match stream {
            ServerStream::Tcp(stream) => stream.read(&mut bytes[filled..]).await,
            #[cfg(test)]
            ServerStream::Duplex(stream) => stream.read(&mut bytes[filled..]).await,
            ServerStream::Unix(stream) => {
                let socket = stream.as_raw_fd();
                stream
                    .async_io(Interest::READABLE, || {
                        scm::recv_with_descriptors(socket, &mut bytes[filled..], received)
                    })
                    .await
            }
        }
    }

    async fn read_incoming(&mut self) -> Result<Option<Incoming>, ConnectionError> {
        let Some((bytes, received)) = self.read_header().await? else {
            return Ok(None);
        };
        let header = Header::decode(&bytes)?;
        if header.is_reply() {
            return Err(WireError::BadValue {
                field: "header flags (reply sent to a server)",
                value: u64::from(header.flags),
            }
            .into());
        }
        let opcode = Opcode::from_u8(header.opcode)?;
        if opcode == Opcode::Data {
            return Err(WireError::BadValue {
                field: "opcode (data frame outside a request)",
                value: u64::from(header.opcode),
            }
            .into());
        }
        let Received {
            mut descriptors,
            truncated,
            unexpected,
        } = received;
        let refusal = if let Some((level, kind)) = unexpected {
            Some(format!(
                "ancillary data of level {level} type {kind} came with {opcode:?}; only \
                 SCM_RIGHTS is accepted"
            ))
        } else if truncated || descriptors.len() > 1 {
            Some(format!(
                "{} descriptors came with {opcode:?}; a frame carries at most one",
                if truncated {
                    "more than 2".to_owned()
                } else {
                    descriptors.len().to_string()
                }
            ))
        } else if !descriptors.is_empty() && opcode != Opcode::ShareRegion {
            Some(format!(
                "a descriptor came with {opcode:?}; only ShareRegion carries one"
            ))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            // The descriptors close here; the peer learns why, then the connection closes.
            drop(descriptors);
            let error = RemoteError::new(ErrorCode::Protocol, refusal);
            let _ = self.reply_error(&header, &error).await;
            return Err(ConnectionError::Refused(error));
        }
        if header.body_bytes > BULK_PREFETCH_BYTES_MAX {
            let permits = header.body_bytes.div_ceil(BODY_PERMIT_BYTES);
            self.body_budget = Some(
                self.bodies
                    .clone()
                    .acquire_many_owned(permits)
                    .await
                    .expect("the body budget is never closed"),
            );
        }
        let mut body = vec![0u8; header.body_bytes as usize];
        within(
            u64::from(header.body_bytes),
            "a request body",
            self.stream.read_exact(&mut body),
        )
        .await?;
        Ok(Some(Incoming {
            header,
            opcode,
            body,
            descriptor: descriptors.pop(),
        }))
    }

    /// The caching client speaking on this connection, once it asked for a lease on it.
    pub fn client_id(&self) -> Option<u64> {
        self.client_id
    }

    /// Records the caching client speaking on this connection.
    pub fn set_client_id(&mut self, client_id: u64) {
        self.client_id = Some(client_id);
    }

    /// Waits until the peer closes the connection (`Ok`), or sends anything, which is a
    /// protocol error on a callback channel, where only the server asks. Cancel-safe.
    pub async fn closed(&mut self) -> Result<(), ConnectionError> {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte).await? {
            0 => Ok(()),
            _ => Err(ConnectionError::Refused(RemoteError::new(
                ErrorCode::Protocol,
                "a callback channel carries only answers to the server's requests",
            ))),
        }
    }

    /// Sends `request` to the peer (a server's request on a callback channel the peer opened)
    /// and waits up to `wait` for its reply. An error reply, or none in time, is an error.
    pub async fn call_peer<R: Request>(
        &mut self,
        request: &R,
        wait: Duration,
    ) -> Result<R::Reply, ConnectionError> {
        self.peer_calls += 1;
        let request_id = self.peer_calls;
        let body = request.to_body();
        write_frame_to(&mut self.stream, R::OPCODE as u8, 0, request_id, &body, &[]).await?;
        let stream = &mut self.stream;
        let answer = async {
            let mut bytes = [0u8; HEADER_BYTES];
            stream.read_exact(&mut bytes).await?;
            let header = Header::decode(&bytes).map_err(io::Error::other)?;
            let mut body = vec![0u8; header.body_bytes as usize];
            stream.read_exact(&mut body).await?;
            Ok::<_, io::Error>((header, body))
        };
        let (header, body) = tokio::time::timeout(wait, answer).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} did not answer {:?} within {wait:?}",
                    self.peer,
                    R::OPCODE
                ),
            )
        })??;
        if !header.is_reply() || header.request_id != request_id || header.bulk_bytes != 0 {
            return Err(WireError::BadValue {
                field: "reply to a callback",
                value: header.request_id,
            }
            .into());
        }
        if header.is_error() {
            let error = RemoteError::from_body(&body)?;
            return Err(ConnectionError::Refused(error));
        }
        Ok(R::Reply::from_body(&body)?)
    }

    /// Reads the request's bulk bytes (gather and pack modes) into a new buffer.
    pub async fn read_bulk(&mut self, header: &Header) -> Result<Vec<u8>, ConnectionError> {
        if let Some(bulk) = self.prefetched.take() {
            return Ok(bulk);
        }
        let mut bulk = vec![0u8; header.bulk_bytes as usize];
        let held = self.release_work();
        within(
            u64::from(header.bulk_bytes),
            "a request's bulk",
            self.stream.read_exact(&mut bulk),
        )
        .await?;
        self.retake_work(held).await;
        Ok(bulk)
    }

    /// Gives the request's work slot back while it waits; returns whether it held one.
    fn release_work(&mut self) -> bool {
        self.work.take().is_some()
    }

    /// Takes a work slot again, if the request held one before it waited.
    async fn retake_work(&mut self, held: bool) {
        if held {
            self.work = Some(
                self.inflight
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the in-flight semaphore is never closed"),
            );
        }
    }

    /// Runs `wait` (a wait for a budget, or for anything that does not need the server's
    /// work) without holding a work slot, then takes one again: a request that waits holds
    /// none, so waiters never keep the server from serving others.
    pub async fn waiting<T>(&mut self, wait: impl Future<Output = T>) -> T {
        let held = self.release_work();
        let out = wait.await;
        self.retake_work(held).await;
        out
    }

    /// Reads a small bulk before the request takes a work slot (`BULK_PREFETCH_BYTES_MAX`).
    async fn prefetch_bulk(&mut self, header: &Header) -> Result<(), ConnectionError> {
        self.prefetched = None;
        if header.bulk_bytes > 0 && header.bulk_bytes <= BULK_PREFETCH_BYTES_MAX {
            let bulk = self.read_bulk(header).await?;
            self.prefetched = Some(bulk);
        }
        Ok(())
    }

    /// Reads and drops the data of a request that will be answered with an error: its bulk
    /// bytes, then `data_frames` `Data` frames (multiple mode). The connection stays in step.
    pub async fn skip_request_data(
        &mut self,
        header: &Header,
        data_frames: u32,
    ) -> Result<(), ConnectionError> {
        let held = self.release_work();
        if self.prefetched.take().is_none() {
            self.discard(u64::from(header.bulk_bytes)).await?;
        }
        for _ in 0..data_frames {
            let mut bytes = [0u8; HEADER_BYTES];
            within(
                HEADER_BYTES as u64,
                "a data frame header",
                self.stream.read_exact(&mut bytes),
            )
            .await?;
            let frame = Header::decode(&bytes)?;
            if frame.opcode != Opcode::Data as u8
                || frame.request_id != header.request_id
                || frame.body_bytes != 0
            {
                return Err(WireError::BadValue {
                    field: "data frame",
                    value: u64::from(frame.opcode),
                }
                .into());
            }
            self.discard(u64::from(frame.bulk_bytes)).await?;
        }
        self.retake_work(held).await;
        Ok(())
    }

    /// Reads and drops `bytes` bytes.
    async fn discard(&mut self, bytes: u64) -> Result<(), ConnectionError> {
        let stream = &mut self.stream;
        within(bytes, "data to drop", async {
            let mut scratch = vec![0u8; 64 << 10];
            let mut left = bytes;
            while left > 0 {
                let step = usize::try_from(left.min(scratch.len() as u64)).expect("at most 64 KiB");
                stream.read_exact(&mut scratch[..step]).await?;
                left -= step as u64;
            }
            Ok(())
        })
        .await
    }

    /// Reads one `Data` frame per piece (multiple mode) into `buffer`, back to back.
    pub async fn read_data_frames(
        &mut self,
        header: &Header,
        pieces: &[Piece],
        buffer: &mut [u8],
    ) -> Result<(), ConnectionError> {
        self.read_data_frames_into(header, pieces, &mut [IoSliceMut::new(buffer)])
            .await
    }

    /// Reads one `Data` frame per piece (multiple mode) into `slices`, back to back (they
    /// must hold exactly the pieces' bytes): straight into memory the caller laid out, such
    /// as cache units.
    pub async fn read_data_frames_into(
        &mut self,
        header: &Header,
        pieces: &[Piece],
        slices: &mut [IoSliceMut<'_>],
    ) -> Result<(), ConnectionError> {
        let total: u64 = pieces.iter().map(|piece| piece.length).sum();
        check_slices(slices, total)?;
        let held = self.release_work();
        let mut left = slices;
        for piece in pieces {
            let mut bytes = [0u8; HEADER_BYTES];
            within(
                HEADER_BYTES as u64,
                "a data frame header",
                self.stream.read_exact(&mut bytes),
            )
            .await?;
            let frame = Header::decode(&bytes)?;
            if frame.opcode != Opcode::Data as u8
                || frame.request_id != header.request_id
                || frame.body_bytes != 0
                || u64::from(frame.bulk_bytes) != piece.length
            {
                return Err(WireError::BadValue {
                    field: "data frame",
                    value: u64::from(frame.opcode),
                }
                .into());
            }
            let stream = &mut self.stream;
            let length = frame.bulk_bytes as usize;
            within(
                u64::from(frame.bulk_bytes),
                "a data frame",
                read_into_slices(stream, &mut left, length),
            )
            .await?;
        }
        self.retake_work(held).await;
        Ok(())
    }

    /// Reads the request's bulk bytes (gather and pack modes) into `slices`, in order (they
    /// must hold exactly the bulk): straight into memory the caller laid out, such as cache
    /// units, with `readv`.
    pub async fn read_bulk_into(
        &mut self,
        header: &Header,
        slices: &mut [IoSliceMut<'_>],
    ) -> Result<(), ConnectionError> {
        check_slices(slices, u64::from(header.bulk_bytes))?;
        if let Some(bulk) = self.prefetched.take() {
            let mut at = 0;
            for slice in slices.iter_mut() {
                let len = slice.len();
                slice.copy_from_slice(&bulk[at..at + len]);
                at += len;
            }
            return Ok(());
        }
        let held = self.release_work();
        let mut left = slices;
        let stream = &mut self.stream;
        let bytes = header.bulk_bytes as usize;
        within(
            u64::from(header.bulk_bytes),
            "a request's bulk",
            read_into_slices(stream, &mut left, bytes),
        )
        .await?;
        self.retake_work(held).await;
        Ok(())
    }

    /// Sends the reply to `request`, followed by `bulk` bytes in the same frame.
    pub async fn reply<M: Wire>(
        &mut self,
        request: &Header,
        reply: &M,
        bulk: &[u8],
    ) -> Result<(), ConnectionError> {
        let body = reply.to_body();
        self.write_frame(request.opcode, FLAG_REPLY, request.request_id, &body, bulk)
            .await
    }

    /// Sends the reply to `request`, followed in the same frame by the bytes of `bulk`, in
    /// order, written straight from the slices (`writev`, no copy into a frame buffer).
    pub async fn reply_vectored<M: Wire>(
        &mut self,
        request: &Header,
        reply: &M,
        bulk: &[IoSlice<'_>],
    ) -> Result<(), ConnectionError> {
        let body = reply.to_body();
        self.work = None;
        write_frame_vectored(
            &mut self.stream,
            request.opcode,
            FLAG_REPLY,
            request.request_id,
            &body,
            bulk,
        )
        .await
    }

    /// Begins the reply to `request`, followed in the same frame by the bytes of `bulk`,
    /// without waiting: one `writev` of what the socket takes now, straight from the slices.
    /// Returns a copy of the rest of the frame (empty when all of it went), for
    /// [`ServerConnection::finish_reply`]. So the caller may hold the slices' bytes steady
    /// only while this runs, however slowly the peer then reads.
    pub fn try_reply_vectored<M: Wire>(
        &mut self,
        request: &Header,
        reply: &M,
        bulk: &[IoSlice<'_>],
    ) -> Result<Vec<u8>, ConnectionError> {
        let body = reply.to_body();
        self.work = None;
        let head = frame_head(request.opcode, FLAG_REPLY, request.request_id, &body, bulk);
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(bulk.len().min(WRITEV_SLICES_MAX));
        slices.push(IoSlice::new(&head));
        slices.extend(
            bulk.iter()
                .filter(|slice| !slice.is_empty())
                .take(WRITEV_SLICES_MAX - 1)
                .copied(),
        );
        let mut taken = self.stream.try_write_vectored(&slices)?;
        let unsent = head.len() + bulk.iter().map(|slice| slice.len()).sum::<usize>() - taken;
        let mut rest = Vec::with_capacity(unsent);
        for part in std::iter::once(&head[..]).chain(bulk.iter().map(|slice| &slice[..])) {
            let skip = taken.min(part.len());
            taken -= skip;
            rest.extend_from_slice(&part[skip..]);
        }
        Ok(rest)
    }

    /// Sends `rest`, the part of a reply [`ServerConnection::try_reply_vectored`] left.
    pub async fn finish_reply(&mut self, rest: &[u8]) -> Result<(), ConnectionError> {
        if rest.is_empty() {
            return Ok(());
        }
        within(rest.len() as u64, "a reply", self.stream.write_all(rest)).await
    }

    /// Sends one `Data` frame per group of slices (multiple mode, one group per piece), after
    /// the reply, each written straight from its slices.
    pub async fn send_data_frames_vectored(
        &mut self,
        request: &Header,
        pieces: impl IntoIterator<Item = Vec<IoSlice<'_>>>,
    ) -> Result<(), ConnectionError> {
        self.work = None;
        for piece in pieces {
            write_frame_vectored(
                &mut self.stream,
                Opcode::Data as u8,
                0,
                request.request_id,
                &[],
                &piece,
            )
            .await?;
        }
        Ok(())
    }

    /// Sends a reply whose body is already encoded.
    pub async fn reply_raw(
        &mut self,
        request: &Header,
        body: &[u8],
    ) -> Result<(), ConnectionError> {
        self.write_frame(request.opcode, FLAG_REPLY, request.request_id, body, &[])
            .await
    }

    /// Sends an error reply to `request`.
    pub async fn reply_error(
        &mut self,
        request: &Header,
        error: &RemoteError,
    ) -> Result<(), ConnectionError> {
        metrics::counter!(
            ERRORS,
            "kind" => request_kind(request.opcode),
            "code" => error.code.name()
        )
        .increment(1);
        let body = error.to_body();
        self.write_frame(
            request.opcode,
            FLAG_REPLY | FLAG_ERROR,
            request.request_id,
            &body,
            &[],
        )
        .await
    }

    /// Sends one `Data` frame per piece of `buffer` (multiple mode), after the reply.
    pub async fn send_data_frames(
        &mut self,
        request: &Header,
        pieces: &[Piece],
        buffer: &[u8],
    ) -> Result<(), ConnectionError> {
        let mut cursor = 0usize;
        for piece in pieces {
            let length = usize::try_from(piece.length).expect("piece within one bulk buffer");
            self.write_frame(
                Opcode::Data as u8,
                0,
                request.request_id,
                &[],
                &buffer[cursor..cursor + length],
            )
            .await?;
            cursor += length;
        }
        Ok(())
    }

    async fn write_frame(
        &mut self,
        opcode: u8,
        flags: u16,
        request_id: u64,
        body: &[u8],
        bulk: &[u8],
    ) -> Result<(), ConnectionError> {
        // The work is done once a reply goes out: a peer slow to take it holds no work slot.
        self.work = None;
        write_frame_to(&mut self.stream, opcode, flags, request_id, body, bulk).await
    }
}

#[cfg(test)]
mod tests;
