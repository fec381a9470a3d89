//! One user cannot starve the others of an iod (issue 35, holes 7 and 8), against a real iod:
//! user 2001 (credentials signed for that uid, as the agent signs them) opens 24 connections
//! that each ask for a 16 MiB read and never read the reply, and 70 that each send the header
//! of a 16 MiB write and never its data. Before, the reads held the iod's whole bulk-buffer
//! budget while their replies waited on full sockets, so another user's read of a small file
//! waited for them (24.8 s instead of 0.07 s), and the half-sent writes made the iod hold far
//! more memory than its documented bound, much of it kept after they left. Now each uid holds
//! at most its share of the budget and no work slot while it waits for a peer: another user's
//! calls finish promptly, the iod stays within its bound, and it gives the memory back.

mod common;

use std::io::Write as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use tessera_auth::{KeySigner, Rights};
use tessera_client::{ClusterConfig, CreateOptions};
use tessera_proto::{Header, Opcode, Piece, Read, StoragePlan, TransferMode, Wire, Write};

/// The user who attacks.
const ATTACKER: u32 = 2001;
/// Reads whose replies are never read, and writes whose data never comes.
const UNREAD_READS: usize = 24;
const HALF_SENT_WRITES: usize = 70;
/// Bytes of each of them.
const REQUEST_BYTES: usize = 16 << 20;
/// What another user's call may take under the attack (it takes ~0.01-0.1 s alone).
const CALL_BOUND: Duration = Duration::from_secs(1);

fn frame(opcode: Opcode, request_id: u64, body: &[u8], bulk_bytes: u32) -> Vec<u8> {
    let mut bytes = Header {
        opcode: opcode as u8,
        flags: 0,
        request_id,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes,
    }
    .encode()
    .to_vec();
    bytes.extend_from_slice(body);
    bytes
}

fn rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib << 10
}

/// Runs `call` and checks it finished within [`CALL_BOUND`].
fn within_bound<T>(what: &str, call: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let result = call();
    let took = start.elapsed();
    assert!(took <= CALL_BOUND, "{what} took {took:?} under the attack");
    result
}

#[test]
fn one_user_holds_only_its_share_of_an_iod() {
    let cluster = Cluster::start(1);
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let root = cluster.client();
    let big = root.create("/big", &CreateOptions::default()).unwrap();
    big.write_at(0, &common::bytes(1, REQUEST_BYTES)).unwrap();
    let small_data = common::bytes(2, 64 << 10);
    let small = root.create("/small", &CreateOptions::default()).unwrap();
    small.write_at(0, &small_data).unwrap();
    let iod = config.iods[0].address.clone();
    let pid = cluster.pid("iod-0");
    let before = rss_bytes(pid);

    let attacker = KeySigner::user(cluster.key(), (ATTACKER, ATTACKER, Vec::new()));
    let capability = cluster.capability(
        big.handle(),
        Rights::READ_WRITE,
        ATTACKER,
        tessera_auth::now_s() + 3600,
    );
    let connect = || {
        let mut stream = TcpStream::connect(&iod).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        common::authenticate(&mut stream, &attacker).unwrap();
        stream
    };
    let pieces = vec![Piece::new(0, REQUEST_BYTES as u64)];
    let mut attack = Vec::new();
    for _ in 0..UNREAD_READS {
        let mut stream = connect();
        let read = Read {
            handle: big.handle(),
            capability: capability.clone(),
            mode: TransferMode::Gather,
            storage: StoragePlan::Auto,
            pieces: pieces.clone(),
        };
        stream
            .write_all(&frame(Opcode::Read, 2, &read.to_body(), 0))
            .unwrap();
        attack.push(stream);
    }
    for _ in 0..HALF_SENT_WRITES {
        let mut stream = connect();
        let write = Write {
            handle: big.handle(),
            capability: capability.clone(),
            mode: TransferMode::Gather,
            storage: StoragePlan::Auto,
            pieces: pieces.clone(),
        };
        let bulk = u32::try_from(REQUEST_BYTES).unwrap();
        stream
            .write_all(&frame(Opcode::Write, 2, &write.to_body(), bulk))
            .unwrap();
        attack.push(stream);
    }
    // Let the iod take in what was sent (the reads fill their sockets).
    std::thread::sleep(Duration::from_millis(500));

    // Another user (root) reads and writes on fresh connections, promptly.
    let fresh = cluster.client_with_timeout(Duration::from_secs(30));
    let opened = within_bound("open", || {
        fresh
            .open("/small", tessera_client::OpenMode::ReadWrite)
            .unwrap()
    });
    let mut back = vec![0u8; small_data.len()];
    within_bound("a read of 64 KiB", || opened.read_at(0, &mut back).unwrap());
    assert!(back == small_data);
    let update = common::bytes(3, 64 << 10);
    within_bound("a write of 64 KiB", || opened.write_at(0, &update).unwrap());
    within_bound("a read of 64 KiB", || opened.read_at(0, &mut back).unwrap());
    assert!(back == update);

    let under_attack = rss_bytes(pid);
    let bound = tessera_proto::limits::SERVER_PEER_BYTES_MAX;
    assert!(
        under_attack <= before + bound,
        "the iod holds {} MiB under attack, {} MiB over its {} MiB before (bound {} MiB)",
        under_attack >> 20,
        (under_attack.saturating_sub(before)) >> 20,
        before >> 20,
        bound >> 20
    );
    drop(attack);
    // Given back once the attack is over (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(20);
    let given_back = 64 << 20;
    loop {
        let now = rss_bytes(pid);
        if now <= before + given_back {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the iod still holds {} MiB after the attack ({} MiB before)",
            now >> 20,
            before >> 20
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
