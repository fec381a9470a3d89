//! Servers that keep serving (issue 17): a real mds and a real iod under 2000 idle sockets
//! (no handshake), 64 authenticated writes whose bulk never comes, and 64 authenticated
//! readdir pipelines that never read their replies. A normal client's `stat`, write and read
//! must each still finish within 2 s, and the servers' memory stays bounded.

mod common;

use std::io::Write as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use tessera_client::{ClusterConfig, CreateOptions, OpenMode};
use tessera_proto::{Header, Opcode, Readdir, Wire};

const IDLE_SOCKETS: usize = 2000;
const HALF_SENT_WRITES: usize = 64;
const SILENT_READERS: usize = 64;
/// What a normal call may take while the servers are under attack.
const CALL_BOUND: Duration = Duration::from_secs(2);
/// A server's resident memory stays under this (docs/ARCHITECTURE.md §5.2).
const RSS_BOUND_BYTES: u64 = tessera_proto::limits::SERVER_PEER_BYTES_MAX;

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
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib << 10
}

/// Runs `call` and checks it finishes within [`CALL_BOUND`].
fn timed<T>(what: &str, call: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let result = call();
    let took = start.elapsed();
    assert!(took <= CALL_BOUND, "{what} took {took:?} under attack");
    result
}

#[test]
fn idle_half_sent_and_silent_peers_do_not_stop_the_servers() {
    let cluster = Cluster::start(1);
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let client = cluster.client();
    client.mkdir("/wide", 0o755).unwrap();
    // A directory whose listing fills socket buffers fast: 1000 long names.
    for index in 0..1000 {
        client
            .create(
                &format!("/wide/{index:04}-{}", "n".repeat(200)),
                &CreateOptions::default(),
            )
            .unwrap();
    }
    let file = client.create("/victim", &CreateOptions::default()).unwrap();
    let data = common::bytes(3, 1 << 20);
    file.write_at(0, &data).unwrap();
    let signer = cluster.signer();
    let iod = config.iods[0].address.clone();
    let mds = config.mds.address.clone();

    // 2000 sockets to each server that never even answer the challenge.
    let mut idle = Vec::with_capacity(2 * IDLE_SOCKETS);
    for _ in 0..IDLE_SOCKETS {
        idle.push(TcpStream::connect(&iod).unwrap());
        idle.push(TcpStream::connect(&mds).unwrap());
    }
    // 64 authenticated writes whose 4 KiB bulk never comes.
    let capability = file.capability().unwrap();
    let mut half_sent = Vec::with_capacity(HALF_SENT_WRITES);
    for _ in 0..HALF_SENT_WRITES {
        let mut stream = TcpStream::connect(&iod).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        common::authenticate(&mut stream, &signer).unwrap();
        let write = tessera_proto::Write {
            handle: file.handle(),
            capability: capability.clone(),
            mode: tessera_proto::TransferMode::Gather,
            storage: tessera_proto::StoragePlan::Auto,
            pieces: vec![tessera_proto::Piece::new(0, 4096)],
        };
        stream
            .write_all(&frame(Opcode::Write, 2, &write.to_body(), 4096))
            .unwrap();
        half_sent.push(stream);
    }
    // 64 authenticated readdir pipelines that never read a reply: each writes requests
    // until its socket is full.
    let credentials = tessera_auth::Authenticator::credentials(&signer).unwrap();
    let readdir = Readdir {
        credentials,
        path: "/wide".to_owned(),
        after: String::new(),
    }
    .to_body();
    let mut silent = Vec::with_capacity(SILENT_READERS);
    for _ in 0..SILENT_READERS {
        let mut stream = TcpStream::connect(&mds).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        common::authenticate(&mut stream, &signer).unwrap();
        stream.set_nonblocking(true).unwrap();
        for request_id in 2..2000 {
            if stream
                .write_all(&frame(Opcode::Readdir, request_id, &readdir, 0))
                .is_err()
            {
                break;
            }
        }
        silent.push(stream);
    }

    // A normal client still gets through, fast, on new connections.
    let fresh = cluster.client();
    let attr = timed("stat", || fresh.stat("/victim").unwrap());
    assert_eq!(attr.size, data.len() as u64);
    let opened = timed("open", || {
        fresh.open("/victim", OpenMode::ReadWrite).unwrap()
    });
    let update = common::bytes(4, 1 << 20);
    timed("write", || opened.write_at(0, &update).unwrap());
    let mut back = vec![0u8; update.len()];
    timed("read", || opened.read_at(0, &mut back).unwrap());
    assert!(back == update, "the write under attack reads back");
    let listing = timed("readdir", || fresh.readdir("/wide").unwrap());
    assert_eq!(listing.len(), 1000);

    for server in ["mds", "iod-0"] {
        let rss = rss_bytes(cluster.pid(server));
        assert!(
            rss < RSS_BOUND_BYTES,
            "{server} holds {} MiB under attack",
            rss >> 20
        );
    }
    drop((idle, half_sent, silent));
    // And after the attackers leave, the old client's kept connections still serve.
    file.read_at(0, &mut back).unwrap();
    assert!(back == update);
}

/// A stopped iod costs the requests that need it one mds timeout, not one each in turn: the
/// first finds it silent, the rest (queued behind it, or arriving within 5 s) are answered
/// `Unavailable` at once, and requests that do not need it go on.
#[test]
fn a_stopped_iod_costs_one_timeout_not_one_per_request() {
    const STATS: usize = 8;
    let cluster = Cluster::start(2);
    let client = cluster.client();
    for index in 0..STATS {
        client
            .create(&format!("/f{index}"), &CreateOptions::default())
            .unwrap();
    }
    let iod = cluster.pid("iod-1");
    // SAFETY: stops a server process of this test's cluster; no memory is involved.
    unsafe { libc::kill(iod, libc::SIGSTOP) };
    let start = Instant::now();
    let stats: Vec<_> = (0..STATS)
        .map(|index| {
            let client = cluster.client_with_timeout(Duration::from_mins(1));
            std::thread::spawn(move || client.stat(&format!("/f{index}")))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    timed("mkdir while an iod is stopped", || {
        cluster.client().mkdir("/other", 0o755).unwrap()
    });
    for stat in stats {
        let error = stat.join().unwrap().unwrap_err();
        assert_eq!(
            error.code(),
            Some(tessera_client::ErrorCode::Unavailable),
            "{error}"
        );
    }
    let took = start.elapsed();
    // SAFETY: resumes the process stopped above.
    unsafe { libc::kill(iod, libc::SIGCONT) };
    assert!(
        took < Duration::from_secs(16),
        "{STATS} stats of a stopped iod's files took {took:?}: one mds timeout (10 s) was expected"
    );
    // Once it answers again (after the 5 s the mds does not ask it), it serves.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(client.stat("/f0").unwrap().size, 0);
}
