//! The server's framing limits without sockets: a connection over an in-memory pipe
//! (`tokio::io::duplex`) on a paused clock, so the idle, frame, body and reply deadlines and
//! the body budget are driven to their ends in no real time.

use std::sync::Arc;

use tessera_auth::{ClusterKey, ServerAuth};
use tessera_proto::header::{FLAG_ERROR, FLAG_REPLY};
use tessera_proto::limits::{
    BULK_PREFETCH_BYTES_MAX, FRAME_TIMEOUT_MS, HEADER_BYTES, IDLE_CONNECTION_TIMEOUT_MS,
    MESSAGE_BODY_BYTES_MAX,
};
use tessera_proto::{ErrorCode, Header, Opcode, Ping, RemoteError, Wire};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::Semaphore;
use tokio::time::{Duration, Instant};

use tessera_auth::HANDSHAKE_TIMEOUT;
use tessera_proto::limits::CONNECTIONS_MAX;

use super::accept::{handshake, run_connection, Admission, Slots};
use super::frame::frame_deadline;
use super::*;

/// Bytes the pipe holds before a writer waits (a small socket buffer).
const PIPE_BYTES: usize = 4096;

/// The server's end of a new connection (past its handshake) and the client's end.
fn pipe(bodies: Arc<Semaphore>) -> (ServerConnection, DuplexStream) {
    let (server, client) = tokio::io::duplex(PIPE_BYTES);
    (over(ServerStream::Duplex(server), bodies), client)
}

/// A connection past its handshake over `stream`.
fn over(stream: ServerStream, bodies: Arc<Semaphore>) -> ServerConnection {
    let auth = ServerAuth::new(ClusterKey::from_bytes([5; 32]), tessera_proto::ROLE_IOD, 0);
    ServerConnection {
        stream,
        peer: "test peer".to_owned(),
        peer_pid: None,
        mover: MoverSlot::Absent,
        auth: Arc::new(auth),
        credentials: Credentials::default(),
        last_credentials: None,
        capabilities: CapabilityCache::default(),
        shared: RegionTable::new(Arc::default(), None),
        slot: Arc::new(Slot::default()),
        work: None,
        inflight: Arc::new(Semaphore::new(
            tessera_proto::limits::SERVER_REQUESTS_INFLIGHT_MAX,
        )),
        prefetched: None,
        bodies,
        body_budget: None,
        peer_calls: 0,
        client_id: None,
    }
}

fn budget() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(1024))
}

fn header(opcode: u8, flags: u16, request_id: u64, body_bytes: u32, bulk_bytes: u32) -> Vec<u8> {
    Header {
        opcode,
        flags,
        request_id,
        body_bytes,
        bulk_bytes,
    }
    .encode()
    .to_vec()
}

fn request(opcode: Opcode, request_id: u64, body: &[u8], bulk: &[u8]) -> Vec<u8> {
    let mut bytes = header(
        opcode as u8,
        0,
        request_id,
        u32::try_from(body.len()).unwrap(),
        u32::try_from(bulk.len()).unwrap(),
    );
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(bulk);
    bytes
}

fn timed_out(error: &ConnectionError, what: &str) -> bool {
    matches!(error, ConnectionError::Io(err)
        if err.kind() == io::ErrorKind::TimedOut && err.to_string().contains(what))
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_closes_quietly_after_the_idle_timeout() {
    let (mut connection, _client) = pipe(budget());
    let start = Instant::now();
    assert!(connection.read_incoming().await.unwrap().is_none());
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(IDLE_CONNECTION_TIMEOUT_MS)
    );
}

#[tokio::test(start_paused = true)]
async fn a_connection_closed_for_another_ends_at_once() {
    let (mut connection, _client) = pipe(budget());
    let slot = connection.slot.clone();
    let start = Instant::now();
    let read = connection.read_incoming();
    tokio::pin!(read);
    assert!(tokio::time::timeout(Duration::from_secs(1), &mut read)
        .await
        .is_err());
    // The server evicts it for a new connection while it waits for a request.
    assert!(slot.idle_since().is_some());
    slot.close.notify_one();
    assert!(read.await.unwrap().is_none());
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_clean_end_before_a_frame_ends_quietly_and_an_end_mid_header_does_not() {
    let (mut connection, client) = pipe(budget());
    drop(client);
    assert!(connection.read_incoming().await.unwrap().is_none());

    let (mut connection, mut client) = pipe(budget());
    client
        .write_all(&request(Opcode::Ping, 1, &[], &[])[..5])
        .await
        .unwrap();
    drop(client);
    let error = connection.read_incoming().await.unwrap_err();
    assert!(
        matches!(&error, ConnectionError::Io(err) if err.kind() == io::ErrorKind::UnexpectedEof),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_header_begun_must_end_within_the_frame_timeout() {
    let (mut connection, mut client) = pipe(budget());
    client
        .write_all(&request(Opcode::Ping, 1, &[], &[])[..5])
        .await
        .unwrap();
    let start = Instant::now();
    let error = connection.read_incoming().await.unwrap_err();
    assert!(timed_out(&error, "the rest of a frame header"), "{error}");
    assert_eq!(start.elapsed(), frame_deadline(HEADER_BYTES as u64));
    assert!(start.elapsed() >= Duration::from_millis(FRAME_TIMEOUT_MS));
    assert!(start.elapsed() < Duration::from_millis(IDLE_CONNECTION_TIMEOUT_MS));
}

#[tokio::test(start_paused = true)]
async fn a_body_must_arrive_within_its_deadline() {
    let (mut connection, mut client) = pipe(budget());
    let mut bytes = header(Opcode::Ping as u8, 0, 1, 100, 0);
    bytes.extend_from_slice(&[0; 10]);
    client.write_all(&bytes).await.unwrap();
    let start = Instant::now();
    let error = connection.read_incoming().await.unwrap_err();
    assert!(timed_out(&error, "a request body of 100 bytes"), "{error}");
    assert_eq!(start.elapsed(), frame_deadline(100));
}

#[tokio::test(start_paused = true)]
async fn a_request_bulk_must_arrive_within_its_deadline() {
    let (mut connection, mut client) = pipe(budget());
    let mut bytes = header(Opcode::Write as u8, 0, 1, 0, 2000);
    bytes.extend_from_slice(&[1; 1000]);
    client.write_all(&bytes).await.unwrap();
    let incoming = connection.read_incoming().await.unwrap().unwrap();
    let error = connection.read_bulk(&incoming.header).await.unwrap_err();
    assert!(
        timed_out(&error, "a request's bulk of 2000 bytes"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn garbage_and_oversized_headers_close_the_connection() {
    let mut garbage = request(Opcode::Ping, 1, &[], &[]);
    garbage[0] ^= 0xff;
    let mut oversized = header(Opcode::Ping as u8, 0, 1, 0, 0);
    oversized[16..20].copy_from_slice(&(MESSAGE_BODY_BYTES_MAX + 1).to_le_bytes());
    let reply_flag = header(Opcode::Ping as u8, FLAG_REPLY, 1, 0, 0);
    let stray_data = header(Opcode::Data as u8, 0, 1, 0, 0);
    let unknown_opcode = header(0xee, 0, 1, 0, 0);
    for (bytes, why) in [
        (garbage, "magic"),
        (oversized, "message_body_bytes_max"),
        (reply_flag, "reply sent to a server"),
        (stray_data, "data frame outside a request"),
        (unknown_opcode, "opcode"),
    ] {
        let (mut connection, mut client) = pipe(budget());
        client.write_all(&bytes).await.unwrap();
        let error = connection.read_incoming().await.unwrap_err();
        assert!(
            matches!(&error, ConnectionError::Wire(_)) && error.to_string().contains(why),
            "{why}: {error}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_large_body_waits_for_the_body_budget_and_holds_it() {
    // Room for one KiB of bodies; the request's body needs 65.
    let bodies = Arc::new(Semaphore::new(1));
    let (mut connection, mut client) = pipe(bodies.clone());
    let body_bytes = BULK_PREFETCH_BYTES_MAX + 1;
    let permits = body_bytes.div_ceil(BODY_PERMIT_BYTES);
    let body = vec![9u8; body_bytes as usize];
    let writer = tokio::spawn(async move {
        client
            .write_all(&request(Opcode::Ping, 1, &body, &[]))
            .await
            .unwrap();
        client
    });
    {
        let read = connection.read_incoming();
        tokio::pin!(read);
        assert!(
            tokio::time::timeout(Duration::from_hours(1), &mut read)
                .await
                .is_err(),
            "the body is not read before the budget allows it"
        );
        bodies.add_permits(permits as usize);
        let incoming = read.await.unwrap().unwrap();
        assert_eq!(incoming.body.len(), body_bytes as usize);
        assert!(incoming.body.iter().all(|&byte| byte == 9));
    }
    // The request holds its share until it is done.
    assert_eq!(bodies.available_permits(), 1);
    connection.body_budget = None;
    assert_eq!(bodies.available_permits(), 1 + permits as usize);
    drop(writer.await.unwrap());

    // A small body takes no budget at all.
    let (mut connection, mut client) = pipe(Arc::new(Semaphore::new(0)));
    client
        .write_all(&request(Opcode::Ping, 1, &[1; 64], &[]))
        .await
        .unwrap();
    assert_eq!(
        connection
            .read_incoming()
            .await
            .unwrap()
            .unwrap()
            .body
            .len(),
        64
    );
}

#[tokio::test(start_paused = true)]
async fn skipped_request_data_leaves_the_stream_in_step() {
    let (mut connection, mut client) = pipe(budget());
    let mut bytes = request(Opcode::Write, 4, b"body", &[]);
    bytes.extend(request(Opcode::Data, 4, &[], &[1; 300]));
    bytes.extend(request(Opcode::Data, 4, &[], &[2; 20]));
    bytes.extend(request(Opcode::Ping, 5, &Ping {}.to_body(), &[]));
    client.write_all(&bytes).await.unwrap();
    let first = connection.read_incoming().await.unwrap().unwrap();
    assert_eq!(first.body, b"body");
    connection
        .skip_request_data(&first.header, 2)
        .await
        .unwrap();
    let next = connection.read_incoming().await.unwrap().unwrap();
    assert_eq!((next.opcode, next.header.request_id), (Opcode::Ping, 5));

    // A data frame of another request is refused.
    let (mut connection, mut client) = pipe(budget());
    let mut bytes = request(Opcode::Write, 4, b"body", &[]);
    bytes.extend(request(Opcode::Data, 3, &[], &[1; 3]));
    client.write_all(&bytes).await.unwrap();
    let first = connection.read_incoming().await.unwrap().unwrap();
    assert!(connection
        .skip_request_data(&first.header, 1)
        .await
        .is_err());
}

/// The header of a read request with no body.
fn read_request(request_id: u64) -> Header {
    Header {
        opcode: Opcode::Read as u8,
        flags: 0,
        request_id,
        body_bytes: 0,
        bulk_bytes: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn a_reply_the_peer_does_not_take_times_out() {
    let (mut connection, _client) = pipe(budget());
    let request = read_request(3);
    let bulk = vec![0u8; PIPE_BYTES * 4];
    let start = Instant::now();
    let error = connection
        .reply(&request, &tessera_proto::IoReply::default(), &bulk)
        .await
        .unwrap_err();
    assert!(timed_out(&error, "a reply"), "{error}");
    let bytes =
        (HEADER_BYTES + tessera_proto::IoReply::default().to_body().len() + bulk.len()) as u64;
    assert_eq!(start.elapsed(), frame_deadline(bytes));
}

/// A read's reply as `try_reply_vectored` frames it: header, body, then the slices' bytes.
fn read_reply(request: &Header, reply: &tessera_proto::IoReply, bulk: &[Vec<u8>]) -> Vec<u8> {
    let body = reply.to_body();
    let bulk: Vec<u8> = bulk.concat();
    let mut frame = header(
        request.opcode,
        FLAG_REPLY,
        request.request_id,
        u32::try_from(body.len()).unwrap(),
        u32::try_from(bulk.len()).unwrap(),
    );
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&bulk);
    frame
}

#[tokio::test]
async fn a_reply_begun_now_sends_what_the_socket_takes_and_hands_back_the_rest() {
    let (server, mut client) = tokio::net::UnixStream::pair().unwrap();
    let mut connection = over(ServerStream::Unix(server), budget());
    let request = read_request(9);
    let reply = tessera_proto::IoReply {
        bytes: 3 << 20,
        ..tessera_proto::IoReply::default()
    };
    // More than a Unix socket holds, in slices of different bytes.
    let bulk: Vec<Vec<u8>> = (0..3u8).map(|k| vec![k + 1; 1 << 20]).collect();
    let slices: Vec<IoSlice<'_>> = bulk.iter().map(|part| IoSlice::new(part)).collect();
    let frame = read_reply(&request, &reply, &bulk);
    let rest = connection
        .try_reply_vectored(&request, &reply, &slices)
        .unwrap();
    assert!(
        !rest.is_empty() && rest.len() < frame.len(),
        "the socket took part of the frame: {} of {} left",
        rest.len(),
        frame.len()
    );
    assert!(
        rest[..] == frame[frame.len() - rest.len()..],
        "the rest is the frame's tail"
    );
    drop(slices);
    drop(bulk);
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; frame.len()];
        client.read_exact(&mut got).await.unwrap();
        (got, frame)
    });
    connection.finish_reply(&rest).await.unwrap();
    let (got, frame) = reader.await.unwrap();
    assert!(got == frame, "the peer read the whole frame in order");

    // A stream that takes nothing at once (the test pipe): the whole frame comes back.
    let (mut connection, _client) = pipe(budget());
    let small: Vec<Vec<u8>> = vec![b"abc".to_vec(), b"defg".to_vec()];
    let slices: Vec<IoSlice<'_>> = small.iter().map(|part| IoSlice::new(part)).collect();
    let rest = connection
        .try_reply_vectored(&request, &reply, &slices)
        .unwrap();
    assert_eq!(rest, read_reply(&request, &reply, &small));
}

/// Refuses every request, as a handler does with a body it cannot decode.
struct Refuser;

impl Service for Refuser {
    fn name(&self) -> String {
        "refuser".to_owned()
    }

    async fn handle(
        &self,
        request: Incoming,
        _connection: &mut ServerConnection,
    ) -> Result<(), ConnectionError> {
        request.decode::<tessera_proto::Stat>()?;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_is_answered_then_the_connection_closes() {
    let (mut connection, mut client) = pipe(budget());
    client
        .write_all(&request(Opcode::Stat, 8, b"\xff\xff", &[]))
        .await
        .unwrap();
    let inflight = Arc::new(Semaphore::new(1));
    let error = run_connection(&Refuser, &mut connection, &inflight)
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectionError::Refused(_)), "{error}");
    assert_eq!(inflight.available_permits(), 1, "the work slot went back");
    drop(connection);
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    let header = Header::decode(answer[..HEADER_BYTES].try_into().unwrap()).unwrap();
    assert_eq!(header.flags, FLAG_REPLY | FLAG_ERROR);
    assert_eq!((header.opcode, header.request_id), (Opcode::Stat as u8, 8));
    let error = RemoteError::from_body(&answer[HEADER_BYTES..]).unwrap();
    assert_eq!(error.code, ErrorCode::Protocol);
    assert_eq!(
        answer.len(),
        HEADER_BYTES + header.body_bytes as usize,
        "one frame, then the end"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_client_fails_the_handshake_in_time() {
    let (server, _client) = tokio::io::duplex(PIPE_BYTES);
    let mut stream = ServerStream::Duplex(server);
    let auth = ServerAuth::new(ClusterKey::from_bytes([5; 32]), tessera_proto::ROLE_IOD, 0);
    let start = Instant::now();
    let error = handshake(&mut stream, &auth).await.unwrap_err();
    assert!(error.to_string().contains("no handshake within"), "{error}");
    assert_eq!(start.elapsed(), HANDSHAKE_TIMEOUT);
}

#[test]
fn a_full_server_evicts_its_longest_idle_connection_or_refuses() {
    let slots = Slots::default();
    let admitted: Vec<(u64, Arc<Slot>)> = (0..CONNECTIONS_MAX)
        .map(|_| match slots.admit() {
            Admission::Free(id, slot) => (id, slot),
            _ => panic!("room for connections_max connections"),
        })
        .collect();
    // Every connection busy with a request: the next is refused.
    for (_, slot) in &admitted {
        slot.set_idle(false);
    }
    assert!(matches!(slots.admit(), Admission::Full));
    // Two wait for a request; the one waiting longest goes.
    admitted[7].1.set_idle(true);
    std::thread::sleep(std::time::Duration::from_millis(2));
    admitted[3].1.set_idle(true);
    let Admission::Evicted(_, _, idle) = slots.admit() else {
        panic!("an idle connection is evicted");
    };
    assert!(idle >= std::time::Duration::from_millis(2));
    let table = slots.table.lock().unwrap();
    assert_eq!(table.len(), CONNECTIONS_MAX);
    assert!(!table.contains_key(&admitted[7].0), "the longest idle went");
    assert!(table.contains_key(&admitted[3].0));
}
