//! The connection's failure paths against a scripted server ([`crate::testing`]): resets and
//! stalls mid-frame, short reads and writes, a peer that closes after the request, garbage
//! and oversized headers, replies to another request, and the identity and proof checks of
//! the handshake.

use std::io::{self, IoSlice, IoSliceMut};
use std::time::Duration;

use tessera_auth::{ClusterKey, KeySigner};
use tessera_proto::limits::{HEADER_BYTES, MESSAGE_BODY_BYTES_MAX};
use tessera_proto::{
    ErrorCode, IoReply, Opcode, Piece, Ping, PingReply, Read as ReadRequest, RemoteError,
    StoragePlan, TransferMode, Wire, Write,
};

use super::{Connection, PieceData, PieceDataMut};
use crate::error::NetError;
use crate::local::policy::Transfer;
use crate::peer::{Expected, Identity};
use crate::testing::{self, error_reply, frame, reply, Event, ScriptedStream, Tap};

const TIMEOUT: Duration = Duration::from_millis(250);
const CLUSTER: u64 = 0x5eed;

fn key() -> ClusterKey {
    ClusterKey::from_bytes([3; 32])
}

fn auth() -> KeySigner {
    KeySigner::process(key())
}

fn expect_iod(index: u16) -> Expected {
    Expected {
        identity: Identity::iod(index),
        cluster_id: Some(CLUSTER),
    }
}

/// A connection to iod 0 whose server sends `after` once the handshake is done.
fn connected(
    after: Vec<Event>,
    shape: impl FnOnce(ScriptedStream) -> ScriptedStream,
) -> (Connection<ScriptedStream>, Tap) {
    let auth = auth();
    let mut script = testing::handshake(&key(), Identity::iod(0), CLUSTER);
    script.extend(after);
    let (stream, tap) = ScriptedStream::new(script);
    let connection = testing::connect(shape(stream), "iod 0", TIMEOUT, &auth, Some(expect_iod(0)))
        .expect("the scripted handshake passes");
    (connection, tap)
}

/// Bytes the client writes in its handshake (its `Hello`).
fn handshake_bytes() -> usize {
    let (_connection, tap) = connected(vec![], |stream| stream);
    let written = tap.log().written.len();
    written
}

fn ping_reply(request_id: u64) -> Vec<u8> {
    reply(
        Opcode::Ping,
        request_id,
        &PingReply {
            role: tessera_proto::ROLE_IOD,
            server_index: 0,
            pid: 42,
            objects: 7,
            store_state: 0,
        },
        &[],
    )
}

fn io_reply(bytes: u64) -> IoReply {
    IoReply {
        bytes,
        storage_pieces: 1,
        storage_bytes: bytes,
        plan: StoragePlan::default(),
    }
}

fn read_request(mode: TransferMode, pieces: Vec<Piece>) -> ReadRequest {
    ReadRequest {
        handle: 9,
        mode,
        pieces,
        ..ReadRequest::default()
    }
}

#[test]
fn short_reads_and_short_writes_move_every_byte() {
    let data: Vec<u8> = (0..40).collect();
    let after = vec![
        Event::Bytes(ping_reply(2)),
        Event::Bytes(reply(Opcode::Read, 3, &io_reply(40), &data)),
    ];
    // Every byte in one read call and one write call.
    let (mut connection, tap) = connected(after, |stream| stream.read_chunk(1).write_chunk(1));
    let before = tap.log().written.len();
    assert_eq!(
        tap.log().write_calls,
        before,
        "one write call per handshake byte"
    );

    let pong = connection.call(&Ping {}).unwrap();
    assert_eq!((pong.pid, pong.objects), (42, 7));

    let request = read_request(
        TransferMode::Gather,
        vec![Piece::new(0, 25), Piece::new(100, 15)],
    );
    let (mut first, mut second) = ([0u8; 25], [0u8; 15]);
    let mut target = PieceDataMut {
        slices: vec![IoSliceMut::new(&mut first), IoSliceMut::new(&mut second)],
        piece_ends: vec![1, 2],
    };
    connection.send_request(&request).unwrap();
    let (answer, counts) = connection
        .recv_read(
            &request,
            Transfer::Framed(TransferMode::Gather),
            &mut target,
        )
        .unwrap();
    assert_eq!(answer.bytes, 40);
    assert_eq!(counts.messages_received, 1);
    assert_eq!(&first[..], &data[..25]);
    assert_eq!(&second[..], &data[25..]);

    let log = tap.log();
    assert_eq!(
        log.write_calls,
        log.written.len(),
        "every byte went in its own write"
    );
    assert!(
        log.read_calls > HEADER_BYTES * 3,
        "every byte came in its own read"
    );
    drop(log);
    // What the server got: Hello, then the Ping and the Read, whole and in order.
    let frames = tap.frames();
    let opcodes: Vec<(u8, u64)> = frames
        .iter()
        .map(|(h, _)| (h.opcode, h.request_id))
        .collect();
    assert_eq!(
        opcodes,
        [
            (Opcode::Hello as u8, 1),
            (Opcode::Ping as u8, 2),
            (Opcode::Read as u8, 3)
        ]
    );
    assert_eq!(ReadRequest::from_body(&frames[2].1).unwrap(), request);
}

#[test]
fn gathered_write_data_goes_out_whole_through_short_writes() {
    let (mut connection, tap) = connected(
        vec![Event::Bytes(reply(Opcode::Write, 2, &io_reply(9), &[]))],
        |stream| stream.write_chunk(2),
    );
    let (a, b) = (b"abcd".to_vec(), b"efghi".to_vec());
    let request = Write {
        handle: 5,
        mode: TransferMode::Gather,
        pieces: vec![Piece::new(0, 9)],
        ..Write::default()
    };
    let data = PieceData {
        slices: vec![IoSlice::new(&a), IoSlice::new(&b)],
        piece_ends: vec![2],
    };
    connection
        .send_write(&request, Transfer::Framed(TransferMode::Gather), &data)
        .unwrap();
    let (answer, _) = connection.recv_write().unwrap();
    assert_eq!(answer.bytes, 9);
    let written = tap.log().written.clone();
    assert!(
        written.ends_with(b"abcdefghi"),
        "the bulk follows the body whole"
    );
    let (header, body) = tap.frames().pop().unwrap();
    assert_eq!((header.opcode, header.bulk_bytes), (Opcode::Write as u8, 9));
    assert_eq!(Write::from_body(&body).unwrap(), request);
}

#[test]
fn a_reset_mid_reply_is_an_io_error() {
    let half = ping_reply(2)[..HEADER_BYTES + 3].to_vec();
    let (mut connection, _tap) = connected(
        vec![
            Event::Bytes(half),
            Event::Fail(io::ErrorKind::ConnectionReset),
        ],
        |stream| stream,
    );
    match connection.call(&Ping {}) {
        Err(NetError::Io { peer, source }) => {
            assert_eq!(peer, "iod 0");
            assert_eq!(source.kind(), io::ErrorKind::ConnectionReset);
        }
        other => panic!("expected an io error, got {other:?}"),
    }
}

#[test]
fn a_reset_mid_request_is_an_io_error_and_sends_no_more() {
    let handshake_bytes = handshake_bytes();
    // The peer goes away after 10 bytes of the request's header.
    let (mut connection, tap) = connected(vec![], |stream| {
        stream.fail_writes_after(handshake_bytes + 10, io::ErrorKind::ConnectionReset)
    });
    let error = connection.send_request(&Ping {}).unwrap_err();
    assert!(
        matches!(&error, NetError::Io { source, .. } if source.kind() == io::ErrorKind::ConnectionReset),
        "{error:?}"
    );
    assert_eq!(tap.log().written.len(), handshake_bytes + 10);
}

#[test]
fn a_stall_past_the_timeout_is_timed_out_for_reads_and_writes() {
    // The server takes the request but never answers.
    let (mut connection, tap) = connected(vec![Event::Stall], |stream| stream);
    match connection.call(&Ping {}) {
        Err(NetError::TimedOut { peer, timeout_ms }) => {
            assert_eq!(peer, "iod 0");
            assert_eq!(timeout_ms, 250);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(tap.log().timeouts, 1);
    assert!(tap
        .frames()
        .iter()
        .any(|(h, _)| h.opcode == Opcode::Ping as u8));

    // The server stops taking bytes: the send times out (`SO_SNDTIMEO` gives WouldBlock).
    let written = handshake_bytes();
    let (mut connection, _tap) = connected(vec![], |stream| {
        stream.fail_writes_after(written + 1, io::ErrorKind::WouldBlock)
    });
    assert!(matches!(
        connection.send_request(&Ping {}),
        Err(NetError::TimedOut {
            timeout_ms: 250,
            ..
        })
    ));
}

#[test]
fn a_peer_that_closes_after_the_request_is_an_unexpected_end() {
    let (mut connection, tap) = connected(vec![], |stream| stream);
    match connection.call(&Ping {}) {
        Err(NetError::Io { source, .. }) => {
            assert_eq!(source.kind(), io::ErrorKind::UnexpectedEof);
        }
        other => panic!("expected the end of the stream, got {other:?}"),
    }
    // The request itself went out whole.
    assert_eq!(tap.frames().last().unwrap().0.opcode, Opcode::Ping as u8);

    // Closed between the reply's header and its body: the same.
    let cut = ping_reply(2)[..HEADER_BYTES + 2].to_vec();
    let (mut connection, _tap) = connected(vec![Event::Bytes(cut)], |stream| stream);
    assert!(matches!(
        connection.call(&Ping {}),
        Err(NetError::Io { source, .. }) if source.kind() == io::ErrorKind::UnexpectedEof
    ));
}

#[test]
fn garbage_and_oversized_headers_are_protocol_errors() {
    let mut garbage = ping_reply(2);
    garbage[0] ^= 0xff;
    let (mut connection, _tap) = connected(vec![Event::Bytes(garbage)], |stream| stream);
    let error = connection.call(&Ping {}).unwrap_err();
    assert!(
        matches!(&error, NetError::Protocol { detail, .. } if detail.contains("magic")),
        "{error}"
    );

    // A header claiming a body over the limit is refused before any of it is read.
    let mut oversized = frame(
        Opcode::Ping as u8,
        tessera_proto::header::FLAG_REPLY,
        2,
        &[],
        &[],
    );
    oversized[16..20].copy_from_slice(&(MESSAGE_BODY_BYTES_MAX + 1).to_le_bytes());
    let (mut connection, tap) = connected(vec![Event::Bytes(oversized)], |stream| stream);
    let error = connection.call(&Ping {}).unwrap_err();
    assert!(
        matches!(&error, NetError::Protocol { detail, .. } if detail.contains("message_body_bytes_max")),
        "{error}"
    );
    assert_eq!(tap.log().timeouts, 0);

    // Bulk on a reply that carries none.
    let (mut connection, _tap) = connected(
        vec![Event::Bytes(reply(
            Opcode::Ping,
            2,
            &PingReply::default(),
            b"xx",
        ))],
        |stream| stream,
    );
    let error = connection.call(&Ping {}).unwrap_err();
    assert!(
        error.to_string().contains("unexpected 2 bulk bytes"),
        "{error}"
    );
}

#[test]
fn a_reply_to_another_request_is_refused() {
    // Id 3 where request 2 is outstanding (a stale reply of an abandoned exchange).
    let (mut connection, _tap) = connected(vec![Event::Bytes(ping_reply(3))], |stream| stream);
    let error = connection.call(&Ping {}).unwrap_err();
    assert!(
        matches!(&error, NetError::Protocol { detail, .. } if detail.contains("expected the reply to request 2")),
        "{error}"
    );
    // The right id on another opcode is refused too.
    let (mut connection, _tap) = connected(
        vec![Event::Bytes(reply(
            Opcode::Stat,
            2,
            &PingReply::default(),
            &[],
        ))],
        |stream| stream,
    );
    assert!(matches!(
        connection.call(&Ping {}),
        Err(NetError::Protocol { .. })
    ));
}

#[test]
fn a_read_reply_of_the_wrong_size_or_a_stray_data_frame_is_refused() {
    let request = read_request(TransferMode::Gather, vec![Piece::new(0, 8)]);
    let (mut connection, _tap) = connected(
        vec![Event::Bytes(reply(Opcode::Read, 2, &io_reply(8), &[1; 5]))],
        |stream| stream,
    );
    let mut target = [0u8; 8];
    let mut data = PieceDataMut {
        slices: vec![IoSliceMut::new(&mut target)],
        piece_ends: vec![1],
    };
    connection.send_request(&request).unwrap();
    let error = connection
        .recv_read(&request, Transfer::Framed(TransferMode::Gather), &mut data)
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("reply carries 5 data bytes, expected 8"),
        "{error}"
    );
    assert_eq!(target, [0; 8], "nothing landed in the caller's memory");

    // Multiple mode: a data frame of another request.
    let request = read_request(TransferMode::Multiple, vec![Piece::new(0, 4)]);
    let mut script = reply(Opcode::Read, 2, &io_reply(4), &[]);
    script.extend(frame(Opcode::Data as u8, 0, 9, &[], b"data"));
    let (mut connection, _tap) = connected(vec![Event::Bytes(script)], |stream| stream);
    let mut target = [0u8; 4];
    let mut data = PieceDataMut {
        slices: vec![IoSliceMut::new(&mut target)],
        piece_ends: vec![1],
    };
    connection.send_request(&request).unwrap();
    let error = connection
        .recv_read(
            &request,
            Transfer::Framed(TransferMode::Multiple),
            &mut data,
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("expected a data frame"),
        "{error}"
    );
}

#[test]
fn an_error_reply_leaves_the_connection_in_step() {
    let refusal = RemoteError::new(ErrorCode::UnknownHandle, "no such handle");
    let (mut connection, _tap) = connected(
        vec![
            Event::Bytes(error_reply(Opcode::Ping, 2, &refusal)),
            Event::Bytes(ping_reply(3)),
        ],
        |stream| stream,
    );
    let error = connection.call(&Ping {}).unwrap_err();
    assert_eq!(error.remote(), Some(&refusal));
    // The next request on the same stream gets its own reply.
    assert_eq!(connection.call(&Ping {}).unwrap().pid, 42);
}

#[test]
fn a_body_over_the_limit_is_refused_before_a_byte_is_sent() {
    // The refused request used up id 2 without sending it; the next one is request 3.
    let (mut connection, tap) = connected(vec![Event::Bytes(ping_reply(3))], |stream| stream);
    let before = tap.log().written.len();
    let huge = Write {
        pieces: vec![Piece::new(0, 1); MESSAGE_BODY_BYTES_MAX as usize / 16 + 1],
        ..Write::default()
    };
    let error = connection.send_request(&huge).unwrap_err();
    assert!(
        error.to_string().contains("message_body_bytes_max"),
        "{error}"
    );
    assert_eq!(tap.log().written.len(), before);
    // Still in step: the next request works.
    assert_eq!(connection.call(&Ping {}).unwrap().objects, 7);
    let frames = tap.frames();
    assert_eq!(
        frames.len(),
        2,
        "the hello and the ping; nothing of the refused request"
    );
    assert_eq!(frames[1].0.request_id, 3);
}

#[test]
fn the_handshake_refuses_a_wrong_server_before_saying_anything() {
    let auth = auth();
    // Iod 3 answers where iod 0 was expected (swapped addresses).
    let (stream, tap) = ScriptedStream::new(testing::handshake(&key(), Identity::iod(3), CLUSTER));
    let error = testing::connect(stream, "iod 0", TIMEOUT, &auth, Some(expect_iod(0))).unwrap_err();
    assert!(
        matches!(&error, NetError::WrongServer { detail, .. } if detail == "expected iod 0, found iod 3"),
        "{error}"
    );
    assert!(
        tap.log().written.is_empty(),
        "nothing was sent to the wrong server"
    );

    // The right role and index in another cluster.
    let (stream, tap) =
        ScriptedStream::new(testing::handshake(&key(), Identity::iod(0), CLUSTER + 1));
    let error = testing::connect(stream, "iod 0", TIMEOUT, &auth, Some(expect_iod(0))).unwrap_err();
    assert!(error.to_string().contains("cluster"), "{error}");
    assert!(tap.log().written.is_empty());

    // The mds where an iod was expected.
    let (stream, _tap) = ScriptedStream::new(testing::handshake(&key(), Identity::MDS, CLUSTER));
    assert!(matches!(
        testing::connect(stream, "iod 0", TIMEOUT, &auth, Some(expect_iod(0))),
        Err(NetError::WrongServer { .. })
    ));
}

#[test]
fn a_welcome_without_the_cluster_key_is_refused() {
    let auth = auth();
    // A server that does not hold this key signs its welcome with another.
    let impostor = ClusterKey::from_bytes([4; 32]);
    let (stream, _tap) =
        ScriptedStream::new(testing::handshake(&impostor, Identity::iod(0), CLUSTER));
    let error = testing::connect(stream, "iod 0", TIMEOUT, &auth, Some(expect_iod(0))).unwrap_err();
    assert!(
        matches!(&error, NetError::Auth { detail, .. } if detail.contains("not signed with this cluster's key")),
        "{error}"
    );

    // No challenge at all: the server speaks first with something else.
    let (stream, _tap) = ScriptedStream::new(vec![Event::Bytes(ping_reply(0))]);
    let error = testing::connect(stream, "iod 0", TIMEOUT, &auth, Some(expect_iod(0))).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("expected the server's challenge"),
        "{error}"
    );
}

#[test]
fn an_idle_connection_closed_by_the_server_is_seen_without_reading() {
    let (connection, tap) = connected(vec![], |stream| stream);
    let reads = tap.log().read_calls;
    assert!(!connection.closed_by_peer());
    tap.log().closed_by_peer = true;
    assert!(connection.closed_by_peer());
    assert_eq!(tap.log().read_calls, reads, "no read was made");
}

/// A one-sided read on `connection` lending `target`, packed: the memory is lent to the
/// server until its reply.
fn send_one_sided_read(connection: &mut Connection<ScriptedStream>, target: &mut [u8]) {
    // What a same-host probe would have found.
    connection.one_sided = true;
    let request = read_request(
        TransferMode::Remote,
        vec![Piece::new(0, target.len() as u64)],
    );
    let mut data = PieceDataMut {
        slices: vec![IoSliceMut::new(target)],
        piece_ends: vec![1],
    };
    let transfer = Transfer::Remote {
        pack: true,
        segments_per_call: 0,
    };
    connection.send_read(&request, transfer, &mut data).unwrap();
    assert!(connection.lent.is_some());
}

#[test]
fn lent_memory_is_kept_until_the_server_lets_go_after_a_missing_reply() {
    // No reply within the timeout; then the server finishes and closes the stream.
    let (mut connection, tap) = connected(vec![Event::Fail(io::ErrorKind::WouldBlock)], |s| s);
    let mut target = [0u8; 16];
    send_one_sided_read(&mut connection, &mut target);
    let request = read_request(TransferMode::Remote, vec![Piece::new(0, 16)]);
    let mut data = PieceDataMut {
        slices: vec![IoSliceMut::new(&mut target)],
        piece_ends: vec![1],
    };
    let transfer = Transfer::Remote {
        pack: true,
        segments_per_call: 0,
    };
    let error = connection
        .recv_data(transfer, &request.pieces, &mut data)
        .unwrap_err();
    assert!(matches!(error, NetError::TimedOut { .. }), "{error}");
    // Before returning, the connection stopped sending and waited for the server's end of
    // the stream, with the timeout as the bound.
    let log = tap.log();
    assert!(log.shut_down);
    assert_eq!(log.read_timeout, Some(TIMEOUT));
    drop(log);
    assert!(
        connection.lent.is_none(),
        "the memory is back with the caller"
    );
}

#[test]
fn a_connection_dropped_with_memory_lent_waits_for_the_server() {
    let (mut connection, tap) = connected(vec![], |stream| stream);
    let mut target = [0u8; 8];
    send_one_sided_read(&mut connection, &mut target);
    assert!(!tap.log().shut_down);
    drop(connection);
    assert!(
        tap.log().shut_down,
        "the drop settled the outstanding one-sided request"
    );
}
