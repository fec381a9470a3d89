//! The pool's discard, reuse and retry rules against scripted servers: a connection whose
//! stream may be out of step is never reused, an error reply keeps it, only `Pool::with` on a
//! kept connection that died retries (once, on a fresh one), and a wrong server is refused.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tessera_auth::{Authenticator, ClusterKey, KeySigner};
use tessera_proto::{ErrorCode, Opcode, Ping, PingReply, RemoteError};

use super::Pool;
use crate::error::NetError;
use crate::peer::{Identity, Peer};
use crate::testing::{self, error_reply, reply, Event, ScriptedDial, ScriptedStream, Tap};

const TIMEOUT: Duration = Duration::from_millis(250);
const CLUSTER: u64 = 0x5eed;

fn key() -> ClusterKey {
    ClusterKey::from_bytes([3; 32])
}

fn auth() -> Arc<dyn Authenticator> {
    Arc::new(KeySigner::process(key()))
}

/// A server that is iod `index` and then sends `after`.
fn server(key: &ClusterKey, index: u16, after: Vec<Event>) -> (ScriptedStream, Tap) {
    let mut script = testing::handshake(key, Identity::iod(index), CLUSTER);
    script.extend(after);
    ScriptedStream::new(script)
}

fn pong(request_id: u64, objects: u64) -> Event {
    Event::Bytes(reply(
        Opcode::Ping,
        request_id,
        &PingReply {
            objects,
            ..PingReply::default()
        },
        &[],
    ))
}

fn reset() -> Event {
    Event::Fail(io::ErrorKind::ConnectionReset)
}

/// A pool of one server, iod 0, dialing `streams` in order.
fn pool(
    auth: Arc<dyn Authenticator>,
    streams: Vec<ScriptedStream>,
) -> (Pool<ScriptedStream>, Arc<ScriptedDial>) {
    let dial = ScriptedDial::new(streams);
    let peers = vec![Peer::tcp("iod 0 at test", "unused:1", Identity::iod(0))];
    let pool = Pool::with_dial(peers, TIMEOUT, auth, Box::new(Arc::clone(&dial)))
        .with_cluster_id(Some(CLUSTER));
    (pool, dial)
}

fn ping(pool: &Pool<ScriptedStream>) -> Result<u64, NetError> {
    pool.with_once(0, |connection| {
        connection.call(&Ping {}).map(|reply| reply.objects)
    })
}

#[test]
fn a_broken_connection_is_discarded_and_the_next_call_reconnects() {
    let auth = auth();
    let (first, _) = server(&key(), 0, vec![pong(2, 1), reset()]);
    let (second, second_tap) = server(&key(), 0, vec![pong(2, 2)]);
    let (pool, dial) = pool(auth, vec![first, second]);
    assert_eq!(ping(&pool).unwrap(), 1);
    assert!(matches!(ping(&pool), Err(NetError::Io { .. })));
    assert_eq!(dial.dialed(), 1, "with_once does not retry");
    // The broken connection is gone: the next call dials a new one.
    assert_eq!(ping(&pool).unwrap(), 2);
    assert_eq!(dial.dialed(), 2);
    assert_eq!(
        second_tap.frames().len(),
        2,
        "hello and one ping on the new connection"
    );
}

#[test]
fn timeouts_and_protocol_errors_discard_the_connection_too() {
    let auth = auth();
    let (stalled, _) = server(&key(), 0, vec![Event::Stall]);
    let (garbled, _) = server(&key(), 0, vec![pong(7, 0)]);
    let (good, _) = server(&key(), 0, vec![pong(2, 3)]);
    let (pool, dial) = pool(auth, vec![stalled, garbled, good]);
    assert!(matches!(ping(&pool), Err(NetError::TimedOut { .. })));
    assert!(matches!(ping(&pool), Err(NetError::Protocol { .. })));
    assert_eq!(ping(&pool).unwrap(), 3);
    assert_eq!(dial.dialed(), 3);
}

#[test]
fn an_error_reply_keeps_the_connection() {
    let auth = auth();
    let refusal = RemoteError::new(ErrorCode::PermissionDenied, "no");
    let (only, _) = server(
        &key(),
        0,
        vec![
            Event::Bytes(error_reply(Opcode::Ping, 2, &refusal)),
            pong(3, 4),
        ],
    );
    let (pool, dial) = pool(auth, vec![only]);
    assert_eq!(ping(&pool).unwrap_err().remote(), Some(&refusal));
    assert_eq!(ping(&pool).unwrap(), 4);
    assert_eq!(dial.dialed(), 1);
}

#[test]
fn with_retries_once_on_a_fresh_connection_when_a_kept_one_died() {
    let auth = auth();
    // The server restarted between two calls: the kept connection is reset.
    let (first, _) = server(&key(), 0, vec![pong(2, 1), reset()]);
    let (second, _) = server(&key(), 0, vec![pong(2, 2)]);
    let (pool, dial) = pool(auth, vec![first, second]);
    let mut runs = 0;
    let mut call = || {
        pool.with(0, |connection| {
            runs += 1;
            connection.call(&Ping {}).map(|reply| reply.objects)
        })
    };
    assert_eq!(call().unwrap(), 1);
    assert_eq!(call().unwrap(), 2, "answered by the fresh connection");
    assert_eq!(runs, 3, "the second exchange ran twice");
    assert_eq!(dial.dialed(), 2);
}

#[test]
fn with_does_not_retry_on_a_fresh_connection() {
    let auth = auth();
    // A fresh connection reset: a real failure of this server, not a stale connection.
    let (fresh, _) = server(&key(), 0, vec![reset()]);
    let (spare, spare_tap) = server(&key(), 0, vec![pong(2, 1)]);
    let (pool, dial) = pool(auth, vec![fresh, spare]);
    let mut runs = 0;
    let result = pool.with(0, |connection| {
        runs += 1;
        connection.call(&Ping {}).map(|reply| reply.objects)
    });
    assert!(matches!(result, Err(NetError::Io { .. })));
    assert_eq!(runs, 1);
    assert_eq!(dial.dialed(), 1);
    assert!(spare_tap.log().written.is_empty());
}

#[test]
fn a_kept_connection_times_out_without_a_retry() {
    let auth = auth();
    let (kept, _) = server(&key(), 0, vec![pong(2, 1), Event::Stall]);
    let (spare, _) = server(&key(), 0, vec![pong(2, 5)]);
    let (pool, dial) = pool(auth, vec![kept, spare]);
    let mut runs = 0;
    let mut call = || {
        pool.with(0, |connection| {
            runs += 1;
            connection.call(&Ping {}).map(|reply| reply.objects)
        })
    };
    assert_eq!(call().unwrap(), 1);
    assert!(matches!(call(), Err(NetError::TimedOut { .. })));
    assert_eq!(runs, 2, "a timeout is never retried");
    assert_eq!(dial.dialed(), 1);
    // It was discarded all the same: the next call dials the spare.
    assert_eq!(ping(&pool).unwrap(), 5);
    assert_eq!(dial.dialed(), 2);
}

#[test]
fn with_once_does_not_retry_on_a_kept_connection() {
    let auth = auth();
    let (kept, _) = server(&key(), 0, vec![pong(2, 1), reset()]);
    let (spare, spare_tap) = server(&key(), 0, vec![pong(2, 5)]);
    let (pool, dial) = pool(auth, vec![kept, spare]);
    assert_eq!(ping(&pool).unwrap(), 1);
    assert!(matches!(ping(&pool), Err(NetError::Io { .. })));
    assert_eq!(dial.dialed(), 1);
    assert!(
        spare_tap.log().written.is_empty(),
        "the spare was not touched"
    );
}

#[test]
fn the_identity_check_refuses_a_wrong_server_and_keeps_nothing() {
    let auth = auth();
    let (wrong, wrong_tap) = server(&key(), 1, vec![pong(2, 9)]);
    let (right, _) = server(&key(), 0, vec![pong(2, 6)]);
    let (pool, dial) = pool(auth, vec![wrong, right]);
    let error = ping(&pool).unwrap_err();
    assert!(
        matches!(&error, NetError::WrongServer { peer, detail } if peer == "iod 0 at test" && detail == "expected iod 0, found iod 1"),
        "{error}"
    );
    assert!(
        wrong_tap.log().written.is_empty(),
        "nothing was sent to iod 1"
    );
    assert_eq!(ping(&pool).unwrap(), 6);
    assert_eq!(dial.dialed(), 2);
}

#[test]
fn an_idle_connection_the_server_closed_is_replaced_before_use() {
    let auth = auth();
    let (first, first_tap) = server(&key(), 0, vec![pong(2, 1), pong(3, 2)]);
    let (second, _) = server(&key(), 0, vec![pong(2, 3)]);
    let (pool, dial) = pool(auth, vec![first, second]);
    assert_eq!(ping(&pool).unwrap(), 1);
    assert!(pool.lease(0).unwrap().reused());
    first_tap.log().closed_by_peer = true;
    let mut lease = pool.lease(0).unwrap();
    assert!(!lease.reused(), "a new connection");
    assert_eq!(lease.connection().call(&Ping {}).unwrap().objects, 3);
    assert_eq!(dial.dialed(), 2);
}

#[test]
fn a_server_that_timed_out_is_not_asked_again_for_a_while() {
    let auth = auth();
    let (stalled, _) = server(&key(), 0, vec![Event::Stall]);
    let (spare, _) = server(&key(), 0, vec![pong(2, 1)]);
    let dial = ScriptedDial::new(vec![stalled, spare]);
    let peers = vec![Peer::tcp("iod 0", "unused:1", Identity::iod(0))];
    let pool = Pool::with_dial(peers, TIMEOUT, auth, Box::new(Arc::clone(&dial)))
        .with_retry_after(Duration::from_mins(1));
    assert!(matches!(ping(&pool), Err(NetError::TimedOut { .. })));
    let error = ping(&pool).unwrap_err();
    assert!(matches!(error, NetError::NotAsked { seconds, .. } if (59..=60).contains(&seconds)));
    assert_eq!(dial.dialed(), 1, "not asked: no dial");
}

#[test]
fn a_refused_connect_is_reported_and_costs_no_silence() {
    let dial = ScriptedDial::new(vec![]);
    let peers = vec![Peer::tcp("iod 0", "unused:1", Identity::iod(0))];
    let pool = Pool::with_dial(peers, TIMEOUT, auth(), Box::new(Arc::clone(&dial)))
        .with_retry_after(Duration::from_mins(1));
    assert!(matches!(ping(&pool), Err(NetError::Connect { .. })));
    assert!(
        matches!(ping(&pool), Err(NetError::Connect { .. })),
        "asked again at once"
    );
    assert_eq!(dial.dialed(), 2);
}
