//! The client cache's write-back (issue 37, docs/SEMANTICS.md §3.3) against real server
//! processes:
//! - random small writes, reads, syncs, closes and stats from four clients with write-back
//!   (over tcp and same-host), one after another, always read what a model of the file
//!   holds: a write buffered by one client is seen by the next read of any other;
//! - a client writing from one thread while another client reads from another (revocations
//!   racing the writer's flushes): every read sees each record whole or not at all, never
//!   less records than it saw before, and after the writer's sync all of them;
//! - a client killed with SIGKILL leaves every byte it had synced; only what it buffered
//!   after its last sync may be lost, and nothing waits on its leases.

// Test sizes and offsets are small; their casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bytes, model_read, model_write, Cluster};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tessera_client::{Client, ClientOptions, ClusterConfig, CreateOptions, File, OpenMode};

/// Each client's cache (half of it for buffered writes).
const CACHE_BYTES: u64 = 8 << 20;

fn write_back_client(cluster_file: &std::path::Path, local: bool) -> Client {
    let config = ClusterConfig::load(cluster_file).expect("cluster file");
    Client::new(
        &config,
        &ClientOptions {
            local,
            cache_bytes: Some(CACHE_BYTES),
            write_back: Some(true),
            ..ClientOptions::default()
        },
    )
}

fn striped(client: &Client, path: &str) -> File {
    client
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes: 16 << 10,
                ..CreateOptions::default()
            },
        )
        .unwrap()
}

fn read(file: &File, offset: usize, length: usize) -> Vec<u8> {
    let mut data = vec![0u8; length];
    file.read_at(offset as u64, &mut data).unwrap();
    data
}

#[derive(Debug, Clone)]
enum Op {
    /// Mostly small (buffered), now and then past the buffered-write limit (sent at once).
    Write {
        client: usize,
        offset: usize,
        length: usize,
        seed: u64,
    },
    Read {
        client: usize,
        offset: usize,
        length: usize,
    },
    Sync(usize),
    /// Drops the client's file (its buffered bytes go out) and opens it again.
    Close(usize),
    /// The size the mds computes from the iods: buffered bytes count.
    Stat(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let span = 0usize..200_000;
    prop_oneof![
        6 => (0usize..4, span.clone(), 1usize..6_000, any::<u64>()).prop_map(
            |(client, offset, length, seed)| Op::Write { client, offset, length, seed }
        ),
        1 => (0usize..4, span.clone(), 60_000usize..90_000, any::<u64>()).prop_map(
            |(client, offset, length, seed)| Op::Write { client, offset, length, seed }
        ),
        4 => (0usize..4, span, 1usize..40_000)
            .prop_map(|(client, offset, length)| Op::Read { client, offset, length }),
        1 => (0usize..4).prop_map(Op::Sync),
        1 => (0usize..4).prop_map(Op::Close),
        1 => (0usize..4).prop_map(Op::Stat),
    ]
}

/// Four write-back clients (two over tcp, two same-host) write, read, sync, close and stat
/// one striped file at random, one after another: every read and every size is the model's.
/// Deterministic cases.
#[test]
fn four_write_back_clients_always_read_the_model() {
    let cluster = Cluster::start(3);
    let clients: Vec<Client> = [false, true, false, true]
        .into_iter()
        .map(|local| write_back_client(&cluster.file(), local))
        .collect();
    let config = Config {
        cases: 10,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let counter = std::cell::Cell::new(0u64);
    runner
        .run(&prop::collection::vec(op(), 1..40), |ops| {
            counter.set(counter.get() + 1);
            let path = format!("/model-{}", counter.get());
            drop(striped(&clients[0], &path));
            let open = |client: usize| clients[client].open(&path, OpenMode::ReadWrite).unwrap();
            let mut files: Vec<File> = (0..clients.len()).map(open).collect();
            let mut model = Vec::new();
            for op in ops {
                match op {
                    Op::Write {
                        client,
                        offset,
                        length,
                        seed,
                    } => {
                        let data = bytes(seed, length);
                        files[client].write_at(offset as u64, &data).unwrap();
                        model_write(&mut model, offset, &data);
                    }
                    Op::Read {
                        client,
                        offset,
                        length,
                    } => {
                        let got = read(&files[client], offset, length);
                        prop_assert!(
                            got == model_read(&model, offset, length),
                            "client {} read {}+{}",
                            client,
                            offset,
                            length
                        );
                    }
                    Op::Sync(client) => files[client].sync().unwrap(),
                    Op::Close(client) => files[client] = open(client),
                    Op::Stat(client) => {
                        let size = files[client].stat().unwrap().size;
                        prop_assert_eq!(size, model.len() as u64, "client {} stat", client);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    // Writes were buffered, leases revoked, and buffered bytes flushed.
    let stats: Vec<_> = clients
        .iter()
        .map(|client| client.write_back_stats().unwrap())
        .collect();
    let sum =
        |field: fn(&tessera_client::WriteBackStats) -> u64| stats.iter().map(field).sum::<u64>();
    assert!(sum(|s| s.buffered) > 0, "{stats:?}");
    assert!(sum(|s| s.through) > 0, "{stats:?}");
    assert!(sum(|s| s.flushes) > 0, "{stats:?}");
    assert!(sum(|s| s.revocations) > 0, "{stats:?}");
}

/// One client writes 4 KiB records in order from a thread while another reads the whole
/// file over and over: each read sees every record whole or not at all (a read spanning
/// iods is not atomic against concurrent writes, SEMANTICS.md §2), never fewer records than
/// the read before it, and once the writer synced, all of them.
#[test]
fn a_reader_racing_a_buffering_writer_sees_whole_records_in_order() {
    const RECORD: usize = 4 << 10;
    const RECORDS: usize = 200;
    let cluster = Cluster::start(2);
    let writer = write_back_client(&cluster.file(), true);
    let reader = write_back_client(&cluster.file(), false);
    let file = striped(&writer, "/race");
    let record = |index: usize| vec![u8::try_from(index % 251).unwrap() + 1; RECORD];
    let written = std::thread::scope(|scope| {
        let writing = scope.spawn(|| {
            for index in 0..RECORDS {
                file.write_at((index * RECORD) as u64, &record(index))
                    .unwrap();
            }
            file.sync().unwrap();
        });
        let reading = reader.open("/race", OpenMode::ReadOnly).unwrap();
        let mut reads = 0;
        let mut seen = 0;
        let started = Instant::now();
        while !writing.is_finished() && started.elapsed() < Duration::from_mins(1) {
            let data = read(&reading, 0, RECORDS * RECORD);
            let mut present = 0;
            for (index, chunk) in data.chunks(RECORD).enumerate() {
                if chunk[0] == 0 {
                    assert!(chunk.iter().all(|&b| b == 0), "record {index} is torn");
                } else {
                    assert_eq!(chunk, &record(index)[..], "record {index} is torn");
                    present += 1;
                }
            }
            assert!(present >= seen, "{present} records after {seen}");
            seen = present;
            reads += 1;
        }
        writing.join().unwrap();
        reads
    });
    assert!(written > 0);
    let reading = reader.open("/race", OpenMode::ReadOnly).unwrap();
    let data = read(&reading, 0, RECORDS * RECORD);
    for (index, chunk) in data.chunks(RECORD).enumerate() {
        assert_eq!(chunk, &record(index)[..], "record {index} after the sync");
    }
    let stats = writer.write_back_stats().unwrap();
    assert!(stats.buffered > 0, "{stats:?}");
}

/// The child of the kill test: writes records 0..100 with write-back, syncs, says so,
/// writes records 100..200 (buffered), says so, and waits to be killed.
/// Not a test of its own: without `WRITE_BACK_CHILD_CLUSTER` (set only by the kill test) it
/// does nothing.
#[test]
fn write_back_child() {
    let Ok(cluster_file) = std::env::var("WRITE_BACK_CHILD_CLUSTER") else {
        return;
    };
    let client = write_back_client(std::path::Path::new(&cluster_file), true);
    let file = client.open("/killed", OpenMode::ReadWrite).unwrap();
    for index in 0..100u64 {
        file.write_at(index * 1000, &[1 + (index % 200) as u8; 1000])
            .unwrap();
    }
    file.sync().unwrap();
    println!("synced");
    for index in 100..200u64 {
        file.write_at(index * 1000, &[1 + (index % 200) as u8; 1000])
            .unwrap();
    }
    println!("buffered {}", client.write_back_stats().unwrap().buffered);
    std::thread::sleep(Duration::from_mins(2));
}

/// A caching client killed with SIGKILL: every byte it synced is there; each record it
/// buffered afterwards is whole or absent; and reading it does not wait for the dead
/// client's leases (its callback channels closed with it).
#[test]
fn a_killed_write_back_client_leaves_every_byte_it_synced() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    drop(striped(&client, "/killed"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "write_back_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WRITE_BACK_CHILD_CLUSTER", cluster.file())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_mins(1) {
        let Some(Ok(line)) = lines.next() else { break };
        // The test harness may print its own words before the child's on a line.
        let buffered = line.contains("buffered ");
        said.push(line);
        if buffered {
            break;
        }
    }
    assert!(
        said.iter().any(|line| line.contains("synced"))
            && said.iter().any(|line| line.contains("buffered ")),
        "the child said {said:?}"
    );
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill sends a signal to the child we started; no memory is touched.
    let killed = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(killed, 0);
    child.wait().unwrap();
    let file = client.open("/killed", OpenMode::ReadOnly).unwrap();
    let asked = Instant::now();
    let data = read(&file, 0, 200 * 1000);
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the read waited {:?} on a dead client's leases",
        asked.elapsed()
    );
    for (index, record) in data.chunks(1000).enumerate() {
        let expected = 1 + (index % 200) as u8;
        if index < 100 {
            assert!(
                record.iter().all(|&b| b == expected),
                "synced record {index} lost"
            );
        } else {
            // Written or not (the flusher may have sent them before the kill), never other
            // bytes.
            assert!(
                record.iter().all(|&b| b == expected || b == 0),
                "buffered record {index} holds bytes nobody wrote"
            );
        }
    }
}
