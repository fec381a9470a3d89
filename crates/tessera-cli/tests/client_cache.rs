//! The client cache under read leases (issue 20, docs/SEMANTICS.md §3.2), against real
//! server processes, every read checked byte for byte against a model of the file:
//! - a caching reader sees every write another client made, at once, and hits its cache
//!   between writes;
//! - a client that stops answering revocations loses its lease: the writer goes on after
//!   the lease time, and the silent client's next read sees the write;
//! - random reads and writes from three caching clients (over tcp and same-host) always
//!   read what the model holds.

mod common;

use std::time::{Duration, Instant};

use common::{bytes, metrics_address, model_read, model_write, sample, scrape, Cluster};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tessera_client::{
    Client, ClientOptions, ClusterConfig, CreateOptions, DemoteMode, File, OpenMode,
};

/// Each caching client's budget (64 blocks of 64 KiB).
const CACHE_BYTES: u64 = 4 << 20;

fn caching_client(cluster: &Cluster, local: bool) -> Client {
    client_with(cluster, local, CACHE_BYTES, DemoteMode::Off)
}

fn client_with(cluster: &Cluster, local: bool, cache_bytes: u64, demote: DemoteMode) -> Client {
    let config = ClusterConfig::load(&cluster.file()).expect("cluster file");
    Client::new(
        &config,
        &ClientOptions {
            timeout: Duration::from_secs(30),
            local,
            cache_bytes: Some(cache_bytes),
            demote: Some(demote),
            ..ClientOptions::default()
        },
    )
}

fn create(client: &Client, path: &str) -> File {
    client
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes: 64 << 10,
                ..CreateOptions::default()
            },
        )
        .unwrap()
}

fn read(file: &File, offset: usize, length: usize) -> Vec<u8> {
    let mut back = vec![0xEE; length];
    let report = file.read_at(offset as u64, &mut back).unwrap();
    assert_eq!(report.bytes, length as u64);
    back
}

#[test]
fn a_caching_reader_sees_every_write_of_another_client_and_hits_between_them() {
    let cluster = Cluster::start(2);
    let writer = cluster.tcp_client();
    let reader = caching_client(&cluster, false);
    let by_writer = create(&writer, "/cached");
    let by_reader = reader.open("/cached", OpenMode::ReadOnly).unwrap();
    let length = 1 << 20;
    let mut model = Vec::new();
    model_write(&mut model, 0, &bytes(1, length));
    by_writer.write_at(0, &model).unwrap();

    for round in 0..6u64 {
        // Read twice: the second time all 16 blocks come from the cache.
        assert!(
            read(&by_reader, 0, length) == model,
            "round {round}: first read"
        );
        // A read may find the iod still finishing the write (no lease yet: it reads
        // uncached); a few more reads must all hit.
        let mut hit = false;
        for _ in 0..5 {
            let before = reader.cache_stats().unwrap();
            assert!(
                read(&by_reader, 0, length) == model,
                "round {round}: cached read"
            );
            let after = reader.cache_stats().unwrap();
            if after.uncached_reads > before.uncached_reads {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            assert_eq!(after.hits - before.hits, 16, "round {round}: {after:?}");
            assert_eq!(after.misses, before.misses, "round {round}: {after:?}");
            hit = true;
            break;
        }
        assert!(
            hit,
            "round {round}: never cached: {:?}",
            reader.cache_stats()
        );
        let before = reader.cache_stats().unwrap();
        // Another client overwrites a range across blocks and servers.
        let offset = 10_000 + 77_777 * usize::try_from(round).unwrap();
        let update = bytes(10 + round, 150_000);
        by_writer.write_at(offset as u64, &update).unwrap();
        model_write(&mut model, offset, &update);
        let stats = reader.cache_stats().unwrap();
        assert!(
            stats.revocations > before.revocations,
            "round {round}: {stats:?}"
        );
        assert!(
            read(&by_reader, offset - 1000, 152_000) == model_read(&model, offset - 1000, 152_000),
            "round {round}: the write is seen at once"
        );
    }
    // A truncate by the writer is seen too.
    writer.truncate("/cached", 300_000).unwrap();
    model.truncate(300_000);
    assert!(
        read(&by_reader, 0, length) == model_read(&model, 0, length),
        "after truncate"
    );
}

#[test]
fn a_client_that_stops_answering_loses_its_lease_and_the_writer_goes_on() {
    let cluster = Cluster::start(2);
    cluster.restart_iods_with(&["--lease-ms", "3000"]);
    let writer = cluster.tcp_client();
    let silent = caching_client(&cluster, false);
    let by_writer = create(&writer, "/silent");
    let by_silent = silent.open("/silent", OpenMode::ReadOnly).unwrap();
    let mut model = bytes(3, 256 << 10);
    by_writer.write_at(0, &model).unwrap();
    assert!(read(&by_silent, 0, model.len()) == model);
    assert!(read(&by_silent, 0, model.len()) == model);
    assert!(silent.cache_stats().unwrap().hits >= 4);

    silent.hold_lease_answers(true);
    let update = bytes(4, 100_000);
    let started = Instant::now();
    by_writer.write_at(50_000, &update).unwrap();
    let waited = started.elapsed();
    model_write(&mut model, 50_000, &update);
    // Held up by the unanswered revocation until the lease ran out: no longer.
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(15),
        "the write waited {waited:?} on a silent lease holder (lease 3 s)"
    );
    // A second write finds no lease left: it does not wait.
    let started = Instant::now();
    by_writer.write_at(0, &model[..10]).unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    silent.hold_lease_answers(false);
    // Its lease is gone on both sides: its next read sees the write.
    assert!(
        read(&by_silent, 0, model.len()) == model,
        "after the lease ran out"
    );
}

#[derive(Debug, Clone)]
enum Op {
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
}

fn op() -> impl Strategy<Value = Op> {
    let span = 0usize..600_000;
    prop_oneof![
        1 => (0usize..3, span.clone(), 1usize..200_000, any::<u64>()).prop_map(
            |(client, offset, length, seed)| Op::Write {
                client,
                offset,
                length,
                seed,
            }
        ),
        2 => (0usize..3, span, 1usize..300_000).prop_map(|(client, offset, length)| Op::Read {
            client,
            offset,
            length,
        }),
    ]
}

/// Three caching clients (two over tcp with small caches that demote evicted blocks to the
/// iods' unified caches, eagerly and buffered; one same-host) read and write one file at
/// random, one after another: every read returns what the model holds, so no stale block is
/// ever served from a client cache or demoted into an iod's. Deterministic cases.
#[test]
fn three_caching_clients_always_read_the_model() {
    let cluster = Cluster::start(3);
    cluster.restart_iods_with(&["--serve", "unified", "--cache-bytes", "1m"]);
    // Two small caches that evict and demote (eagerly, buffered), one large that keeps all.
    let clients = [
        client_with(&cluster, false, 256 << 10, DemoteMode::Eager),
        client_with(&cluster, false, 256 << 10, DemoteMode::Buffered),
        caching_client(&cluster, true),
    ];
    let config = Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let counter = std::cell::Cell::new(0u64);
    runner
        .run(&prop::collection::vec(op(), 1..30), |ops| {
            counter.set(counter.get() + 1);
            let path = format!("/model-{}", counter.get());
            let files: Vec<File> = std::iter::once(create(&clients[0], &path))
                .chain(
                    clients[1..]
                        .iter()
                        .map(|client| client.open(&path, OpenMode::ReadWrite).unwrap()),
                )
                .collect();
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
                }
            }
            Ok(())
        })
        .unwrap();
    // The caches were used, and revoked.
    let stats: Vec<_> = clients.iter().map(|c| c.cache_stats().unwrap()).collect();
    assert!(stats.iter().map(|s| s.hits).sum::<u64>() > 0, "{stats:?}");
    assert!(
        stats.iter().map(|s| s.revocations).sum::<u64>() > 0,
        "{stats:?}"
    );
}

/// The sum over iods `0..servers` of counter `name` (0 where not exported yet).
fn iod_counter(cluster: &Cluster, servers: usize, name: &str) -> f64 {
    (0..servers)
        .map(|index| {
            sample(
                &scrape(&metrics_address(cluster, &format!("iod-{index}"))),
                name,
                &[],
            )
        })
        .sum()
}

/// Evicted blocks go to unified iods (eager and buffered DEMOTE): the iods, which put what
/// they sent the caching client at their least recent end, lack them and insert them, and
/// every read, by the demoting client and by another, returns the file's bytes.
#[test]
fn evicted_blocks_are_demoted_to_unified_iods_by_both_methods() {
    let cluster = Cluster::start(2);
    // 1 MiB of cache per iod: 16 units of 64 KiB, far less than the file.
    cluster.restart_iods_with(&[
        "--serve",
        "unified",
        "--cache-bytes",
        "1m",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let writer = cluster.tcp_client();
    let length = 8 << 20;
    let model = bytes(21, length);
    let file = create(&writer, "/demoted");
    file.write_at(0, &model).unwrap();
    file.sync().unwrap();
    // Over tcp the blocks travel in the Demote's bulk; over `local` the iod pulls them.
    let rounds = [
        (DemoteMode::Eager, false),
        (DemoteMode::Buffered, false),
        (DemoteMode::Eager, true),
        (DemoteMode::Buffered, true),
    ];
    for (round, (demote, local)) in rounds.into_iter().enumerate() {
        // A client with 1 MiB of cache reads the file twice, in 256 KiB calls.
        let client = client_with(&cluster, local, 1 << 20, demote);
        let by_client = client.open("/demoted", OpenMode::ReadWrite).unwrap();
        let before = iod_counter(&cluster, 2, "tessera_cache_units_demoted_total");
        for pass in 0..2 {
            for offset in (0..length).step_by(256 << 10) {
                let got = read(&by_client, offset, 256 << 10);
                assert!(
                    got == model[offset..offset + (256 << 10)],
                    "{demote:?} pass {pass} at {offset}"
                );
            }
        }
        let stats = client.cache_stats().unwrap();
        assert!(stats.evictions >= 100, "{demote:?}: {stats:?}");
        assert!(stats.demotes_sent > 0, "{demote:?}: {stats:?}");
        // Every evicted block was sent or refused, but for those still in the buffer.
        let buffered = stats.evictions - stats.demotes_sent - stats.demotes_refused;
        let buffer_max = if demote == DemoteMode::Buffered {
            tessera_client::CLIENT_DEMOTE_BUFFER_BLOCKS as u64
        } else {
            0
        };
        assert!(buffered <= buffer_max, "{demote:?}: {stats:?}");
        // The iods took demoted units (exported every write-back tick).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut after = iod_counter(&cluster, 2, "tessera_cache_units_demoted_total");
        while after <= before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            after = iod_counter(&cluster, 2, "tessera_cache_units_demoted_total");
        }
        assert!(
            after > before,
            "round {round} {demote:?} (local {local}): {before} -> {after} units demoted"
        );
        // What the iods serve from demoted units is the file.
        let other = cluster
            .tcp_client()
            .open("/demoted", OpenMode::ReadOnly)
            .unwrap();
        assert!(
            read(&other, 0, length) == model,
            "{demote:?}: another client's read"
        );
    }
}

/// A client that may only read a file never demotes its blocks (it must not put bytes in
/// the iods' caches that others will read): each evicted block counts as refused.
#[test]
fn a_reader_without_the_write_right_demotes_nothing() {
    let cluster = Cluster::start(2);
    cluster.restart_iods_with(&["--serve", "unified", "--cache-bytes", "1m"]);
    let writer = cluster.tcp_client();
    let length = 4 << 20;
    let model = bytes(22, length);
    let file = create(&writer, "/read-only");
    file.write_at(0, &model).unwrap();
    let client = client_with(&cluster, true, 1 << 20, DemoteMode::Eager);
    let by_client = client.open("/read-only", OpenMode::ReadOnly).unwrap();
    for offset in (0..length).step_by(256 << 10) {
        assert!(read(&by_client, offset, 256 << 10) == model[offset..offset + (256 << 10)]);
    }
    let stats = client.cache_stats().unwrap();
    assert!(stats.evictions >= 40, "{stats:?}");
    assert_eq!(stats.demotes_sent, 0, "{stats:?}");
    assert_eq!(stats.demotes_refused, stats.evictions, "{stats:?}");
}

/// The cluster file's `[client]` section gives every client of the cluster a cache (and its
/// DEMOTE mode) unless the client chooses otherwise.
#[test]
fn the_cluster_file_gives_clients_their_cache() {
    let cluster = Cluster::start(1);
    let text = std::fs::read_to_string(cluster.file()).unwrap();
    let file = cluster.file().with_file_name("cached.toml");
    std::fs::write(
        &file,
        format!("{text}\n[client]\ncache = \"1m\"\ndemote = \"eager\"\n"),
    )
    .unwrap();
    let config = ClusterConfig::load(&file).unwrap();
    let options = ClientOptions {
        cache_bytes: None,
        demote: None,
        ..ClientOptions::default()
    };
    let client = Client::new(&config, &options);
    let model = bytes(23, 256 << 10);
    let written = create(&client, "/from-file");
    written.write_at(0, &model).unwrap();
    assert!(read(&written, 0, model.len()) == model);
    assert!(read(&written, 0, model.len()) == model);
    let stats = client.cache_stats().expect("a cache from [client] cache");
    assert_eq!(stats.hits, 4, "{stats:?}");
    // The client's own choice wins.
    let uncached = Client::new(
        &config,
        &ClientOptions {
            cache_bytes: Some(0),
            ..options
        },
    );
    assert!(uncached.cache_stats().is_none());
}
