//! Test doubles for the client side: a scripted byte stream and a pool dialer of them.
//!
//! A [`ScriptedStream`] plays a server from a script of what it sends ([`Event`]): bytes, a
//! socket error, a stall that outlasts the receive timeout, or (when the script runs out) the
//! end of the stream. It hands out at most `read_chunk` bytes per read and takes at most
//! `write_chunk` bytes per write (1: every byte one call), fails writes after a set number of
//! bytes, and records everything the client wrote in a [`Tap`] the test keeps. Timeouts follow
//! the socket's semantics (`SO_RCVTIMEO`: the call fails with `WouldBlock`) without sleeping.
//! [`ScriptedDial`] hands a [`crate::Pool`] one scripted stream per connection it opens.
//!
//! Built for this crate's unit tests and, with the `testing` feature, for other crates'.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tessera_auth::{Authenticator, ClusterKey};
use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::{
    Binding, Challenge, Header, Hello, Nonce, Opcode, RemoteError, Request, Welcome, Wire,
};

use crate::client::Connection;
use crate::error::NetError;
use crate::peer::{Expected, Identity, Peer};
use crate::pool::Dial;
use crate::stream::ByteStream;

/// What the scripted server does next, as the client reads.
#[derive(Debug, Clone)]
pub enum Event {
    /// Sends these bytes (over as many reads as the chunk size needs).
    Bytes(Vec<u8>),
    /// The next read fails with this error (e.g. `ConnectionReset`); the script goes on after.
    Fail(io::ErrorKind),
    /// Sends nothing more: every read from here waits out the receive timeout and fails with
    /// `WouldBlock`, as a socket with `SO_RCVTIMEO` does.
    Stall,
    /// Sends the welcome a server of `challenge` holding `key` answers the client's `Hello`
    /// with (the first frame the client wrote): its proof covers the client's nonce, so it
    /// is made only once the client has spoken.
    Welcome {
        /// The key the server signs with.
        key: ClusterKey,
        /// The challenge it sent.
        challenge: Challenge,
    },
}

/// What the client did to a [`ScriptedStream`], shared with the test.
#[derive(Debug, Default)]
pub struct Log {
    /// Every byte written, in order.
    pub written: Vec<u8>,
    /// Write calls that moved bytes (vectored or not).
    pub write_calls: usize,
    /// Read calls that moved bytes.
    pub read_calls: usize,
    /// Reads that failed because the peer stalled past the timeout.
    pub timeouts: usize,
    /// The client shut down its sending side.
    pub shut_down: bool,
    /// The last receive timeout set.
    pub read_timeout: Option<Duration>,
    /// What [`ByteStream::closed_by_peer`] answers (the test sets it to close an idle
    /// connection).
    pub closed_by_peer: bool,
}

/// The test's handle on a scripted stream's [`Log`].
#[derive(Debug, Clone, Default)]
pub struct Tap(Arc<Mutex<Log>>);

impl Tap {
    /// The log.
    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The frames the client wrote, decoded: header and body of each, bulk skipped.
    /// Panics on bytes that are not whole frames (a test asserting on a broken write reads
    /// [`Log::written`] instead).
    pub fn frames(&self) -> Vec<(Header, Vec<u8>)> {
        let written = self.log().written.clone();
        let mut frames = Vec::new();
        let mut rest = &written[..];
        while !rest.is_empty() {
            let (head, after) = rest.split_at(tessera_proto::limits::HEADER_BYTES);
            let header = Header::decode(head.try_into().expect("a whole header"))
                .expect("the client writes valid headers");
            let (body, after) = after.split_at(header.body_bytes as usize);
            frames.push((header, body.to_vec()));
            rest = &after[header.bulk_bytes as usize..];
        }
        frames
    }
}

/// A byte stream that plays a server from a script.
#[derive(Debug)]
pub struct ScriptedStream {
    script: VecDeque<Event>,
    /// Most bytes one read hands out.
    read_chunk: usize,
    /// Most bytes one write takes.
    write_chunk: usize,
    /// After this many bytes written, every write fails with this error.
    write_fail: Option<(usize, io::ErrorKind)>,
    tap: Tap,
}

impl ScriptedStream {
    /// A stream that sends `script`, then ends; any chunk size, writes never fail.
    pub fn new(script: Vec<Event>) -> (Self, Tap) {
        let tap = Tap::default();
        let stream = Self {
            script: script.into(),
            read_chunk: usize::MAX,
            write_chunk: usize::MAX,
            write_fail: None,
            tap: tap.clone(),
        };
        (stream, tap)
    }

    /// Hands out at most `bytes` per read.
    #[must_use]
    pub fn read_chunk(mut self, bytes: usize) -> Self {
        self.read_chunk = bytes.max(1);
        self
    }

    /// Takes at most `bytes` per write.
    #[must_use]
    pub fn write_chunk(mut self, bytes: usize) -> Self {
        self.write_chunk = bytes.max(1);
        self
    }

    /// Fails every write with `kind` once `after` bytes were taken (`WouldBlock`: the send
    /// timeout expired; `ConnectionReset`: the peer is gone).
    #[must_use]
    pub fn fail_writes_after(mut self, after: usize, kind: io::ErrorKind) -> Self {
        self.write_fail = Some((after, kind));
        self
    }

    /// How many more bytes a write may take now, or its error.
    fn write_budget(&self) -> io::Result<usize> {
        let written = self.tap.log().written.len();
        match self.write_fail {
            Some((after, kind)) if written >= after => Err(io::Error::new(kind, "scripted")),
            Some((after, _)) => Ok(self.write_chunk.min(after - written)),
            None => Ok(self.write_chunk),
        }
    }
}

impl Read for ScriptedStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.script.front_mut() {
                None => return Ok(0),
                Some(Event::Stall) => {
                    self.tap.log().timeouts += 1;
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        "scripted stall past the receive timeout",
                    ));
                }
                Some(Event::Fail(kind)) => {
                    let kind = *kind;
                    self.script.pop_front();
                    return Err(io::Error::new(kind, "scripted"));
                }
                Some(Event::Bytes(bytes)) if bytes.is_empty() => {
                    self.script.pop_front();
                }
                Some(Event::Welcome { key, challenge }) => {
                    let welcome = welcome_to(&self.tap, key, challenge);
                    self.script[0] = Event::Bytes(welcome);
                }
                Some(Event::Bytes(bytes)) => {
                    let n = bytes.len().min(buf.len()).min(self.read_chunk);
                    buf[..n].copy_from_slice(&bytes[..n]);
                    bytes.drain(..n);
                    self.tap.log().read_calls += 1;
                    return Ok(n);
                }
            }
        }
    }
}

impl Write for ScriptedStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut budget = self.write_budget()?;
        let mut log = self.tap.log();
        let mut taken = 0;
        for buf in bufs {
            let n = buf.len().min(budget);
            log.written.extend_from_slice(&buf[..n]);
            taken += n;
            budget -= n;
            if budget == 0 {
                break;
            }
        }
        if taken > 0 {
            log.write_calls += 1;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ByteStream for ScriptedStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tap.log().read_timeout = timeout;
        Ok(())
    }

    fn closed_by_peer(&self) -> bool {
        self.tap.log().closed_by_peer
    }

    fn shutdown_write(&self) -> io::Result<()> {
        self.tap.log().shut_down = true;
        Ok(())
    }
}

/// One frame from the server: `header | body | bulk`.
pub fn frame(opcode: u8, flags: u16, request_id: u64, body: &[u8], bulk: &[u8]) -> Vec<u8> {
    let header = Header {
        opcode,
        flags,
        request_id,
        body_bytes: u32::try_from(body.len()).expect("a test body"),
        bulk_bytes: u32::try_from(bulk.len()).expect("a test bulk"),
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(bulk);
    bytes
}

/// The reply to request `request_id` of `opcode`, carrying `reply` and `bulk`.
pub fn reply<M: Wire>(opcode: Opcode, request_id: u64, reply: &M, bulk: &[u8]) -> Vec<u8> {
    frame(opcode as u8, FLAG_REPLY, request_id, &reply.to_body(), bulk)
}

/// The error reply to request `request_id` of `opcode`.
pub fn error_reply(opcode: Opcode, request_id: u64, error: &RemoteError) -> Vec<u8> {
    frame(
        opcode as u8,
        FLAG_REPLY | FLAG_ERROR,
        request_id,
        &error.to_body(),
        &[],
    )
}

/// What a server of `identity` in cluster `cluster_id` holding `key` sends in a handshake:
/// its challenge, then the welcome to the client's `Hello` (request 1). The first request
/// after it is request 2.
pub fn handshake(key: &ClusterKey, identity: Identity, cluster_id: u64) -> Vec<Event> {
    let challenge = Challenge {
        role: identity.role,
        server_index: identity.index,
        cluster_id,
        nonce: Nonce([7; tessera_proto::limits::NONCE_BYTES]),
    };
    let bytes = frame(
        Hello::OPCODE as u8,
        FLAG_REPLY,
        0,
        &challenge.to_body(),
        &[],
    );
    vec![
        Event::Bytes(bytes),
        Event::Welcome {
            key: key.clone(),
            challenge,
        },
    ]
}

/// The welcome frame answering the `Hello` the client wrote first on `tap`.
fn welcome_to(tap: &Tap, key: &ClusterKey, challenge: &Challenge) -> Vec<u8> {
    let frames = tap.frames();
    let (header, body) = frames.first().expect("the client sent its Hello first");
    assert_eq!(
        header.opcode,
        Hello::OPCODE as u8,
        "the client's first frame is a Hello"
    );
    let hello = Hello::from_body(body).expect("the client's Hello decodes");
    let binding = Binding {
        role: challenge.role,
        server_index: challenge.server_index,
        cluster_id: challenge.cluster_id,
        server_nonce: challenge.nonce,
        client_nonce: hello.client_nonce,
    };
    let welcome = Welcome {
        proof: tessera_auth::handshake::welcome_proof(key, &binding, &hello.proof),
    };
    reply(Hello::OPCODE, header.request_id, &welcome, &[])
}

/// Opens a connection over `stream` as [`crate::Pool`] does: handshake and identity check.
pub fn connect(
    stream: ScriptedStream,
    name: &str,
    timeout: Duration,
    auth: &dyn Authenticator,
    expect: Option<Expected>,
) -> Result<Connection<ScriptedStream>, NetError> {
    let mut connection = Connection::over(stream, name.to_owned(), timeout);
    connection.handshake(auth, expect)?;
    Ok(connection)
}

/// Dials scripted streams: the next one queued for each connection a pool opens; with none
/// left, the connect is refused.
#[derive(Debug, Default)]
pub struct ScriptedDial {
    streams: Mutex<VecDeque<ScriptedStream>>,
    dialed: Mutex<usize>,
}

impl ScriptedDial {
    /// Hands out `streams` in order, one per dial.
    pub fn new(streams: Vec<ScriptedStream>) -> Arc<Self> {
        Arc::new(Self {
            streams: Mutex::new(streams.into()),
            dialed: Mutex::new(0),
        })
    }

    /// Connections dialed so far (refused ones included).
    pub fn dialed(&self) -> usize {
        *self
            .dialed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Dial<ScriptedStream> for Arc<ScriptedDial> {
    fn dial(
        &self,
        peer: &Peer,
        timeout: Duration,
        auth: &dyn Authenticator,
        expect: Expected,
    ) -> Result<Connection<ScriptedStream>, NetError> {
        *self
            .dialed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        let next = self
            .streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        let Some(stream) = next else {
            return Err(NetError::Connect {
                peer: peer.name.clone(),
                source: io::Error::new(io::ErrorKind::ConnectionRefused, "no stream scripted"),
            });
        };
        connect(stream, &peer.name, timeout, auth, Some(expect))
    }
}
