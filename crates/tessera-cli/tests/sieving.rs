//! Active Data Sieving on real servers: the plan each request gets, the counters `status
//! --servers` reports, and concurrent writers whose sieving read-modify-writes overlap.

mod common;

use std::io::{IoSlice, IoSliceMut};

use common::Cluster;
use tessera_client::CreateOptions;
use tessera_proto::{Piece, StoragePlan};

/// A cluster whose iods plan with the default cost model rather than one measured at their
/// start: a calibration on a loaded host may find sieving not worth it (one run in five
/// beside three busy loops did), and the plans below would vary with the host's load.
fn cluster_with_fixed_model(servers: u16) -> Cluster {
    let cluster = Cluster::start(servers);
    let model = cluster.path().join("fixed-cost-model.toml");
    let text = toml::to_string(&tessera_iod::cost::CostModel::default()).unwrap();
    std::fs::write(&model, text).unwrap();
    cluster.restart_iods_with(&["--cost-model", model.to_str().unwrap()]);
    cluster
}

/// `count` pieces of `bytes` bytes, `owners` of them interleaved; those of `owner`.
fn interleaved(owner: u64, owners: u64, count: u64, bytes: u64) -> Vec<Piece> {
    (0..count)
        .map(|index| Piece::new((index * owners + owner) * bytes, bytes))
        .collect()
}

fn fill(owner: u64, round: u64, length: usize) -> Vec<u8> {
    (0..length)
        .map(|index| u8::try_from((index as u64 * 7 + owner * 31 + round * 101) % 251).unwrap() | 1)
        .collect()
}

#[test]
fn small_interleaved_pieces_are_sieved_and_counted() {
    let cluster = cluster_with_fixed_model(2);
    let client = cluster.client();
    let mut file = client.create("/sieved", &CreateOptions::default()).unwrap();
    // 1024 pieces of 64 B every 256 B: 256 KiB spanning both servers' 64 KiB units.
    let pieces = interleaved(0, 4, 1024, 64);
    let data = fill(0, 0, 1024 * 64);
    let auto = file.write_list(&[IoSlice::new(&data)], &pieces).unwrap();
    assert_eq!(auto.requests, 2);
    assert_eq!(
        auto.sieved, 2,
        "both servers sieve tiny nearby pieces: {auto:?}"
    );
    assert_eq!(
        auto.storage_pieces, 4,
        "one read and one write of one chunk per server"
    );
    assert!(auto.storage_bytes > 4 * auto.bytes, "{auto:?}");

    file.set_storage_plan(StoragePlan::PerPiece);
    let per_piece = file.write_list(&[IoSlice::new(&data)], &pieces).unwrap();
    assert_eq!((per_piece.sieved, per_piece.storage_pieces), (0, 1024));
    assert_eq!(per_piece.storage_bytes, per_piece.bytes);

    for plan in [
        StoragePlan::Auto,
        StoragePlan::Sieve,
        StoragePlan::Batched,
        StoragePlan::PerPiece,
    ] {
        file.set_storage_plan(plan);
        let mut back = vec![0u8; data.len()];
        file.read_list(&mut [IoSliceMut::new(&mut back)], &pieces)
            .unwrap();
        assert!(back == data, "read by {plan:?} differs");
    }

    let stats: Vec<_> = (0..2)
        .map(|index| client.server_stats(index).unwrap())
        .collect();
    for (index, stats) in stats.iter().enumerate() {
        assert_eq!(stats.writes.requests, 2, "iod {index}");
        assert_eq!(
            stats.writes.pieces, 1024,
            "iod {index}: 512 pieces per write"
        );
        assert_eq!(
            (stats.writes.sieve, stats.writes.per_piece),
            (1, 1),
            "iod {index}"
        );
        assert_eq!(stats.writes.bytes_wanted, 2 * 512 * 64);
        assert_eq!(stats.reads.requests, 4);
        assert_eq!(stats.reads.bytes_wanted, 4 * 512 * 64);
        assert!(stats.model.contains("read_op_us="), "{}", stats.model);
    }

    let status = common::tessera(&[
        "status",
        "--servers",
        "--cluster",
        cluster.file().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}");
    assert!(
        text.contains("sieve") && text.contains("gap_break_write="),
        "{text}"
    );
}

#[test]
fn concurrent_writers_through_sieving_servers_lose_no_bytes() {
    // Four clients, each with its own connections, write their interleaved 48-byte blocks of
    // one 768 KiB region at once, several rounds, all with forced server-side sieving: every
    // request's read-modify-write covers the other clients' blocks, so only the servers'
    // extent locks keep them from writing back stale bytes.
    let cluster = cluster_with_fixed_model(4);
    let path = "/concurrent";
    cluster
        .client()
        .create(path, &CreateOptions::default())
        .unwrap();
    let (owners, blocks, bytes, rounds) = (4u64, 4096u64, 48u64, 6u64);
    std::thread::scope(|scope| {
        for owner in 0..owners {
            let client = cluster.client();
            scope.spawn(move || {
                let mut file = client
                    .open(path, tessera_client::OpenMode::ReadWrite)
                    .unwrap();
                file.set_storage_plan(StoragePlan::Sieve);
                let pieces = interleaved(owner, owners, blocks, bytes);
                for round in 0..rounds {
                    let data = fill(owner, round, usize::try_from(blocks * bytes).unwrap());
                    let report = file.write_list(&[IoSlice::new(&data)], &pieces).unwrap();
                    assert_eq!(report.sieved, report.requests, "every server sieves");
                }
            });
        }
    });
    let file = cluster
        .client()
        .open(path, tessera_client::OpenMode::ReadOnly)
        .unwrap();
    let mut whole = vec![0u8; usize::try_from(owners * blocks * bytes).unwrap()];
    file.read_at(0, &mut whole).unwrap();
    for owner in 0..owners {
        let expected = fill(owner, rounds - 1, usize::try_from(blocks * bytes).unwrap());
        for (index, piece) in interleaved(owner, owners, blocks, bytes).iter().enumerate() {
            let at = usize::try_from(piece.offset).unwrap();
            let want = &expected[index * 48..index * 48 + 48];
            assert!(
                &whole[at..at + 48] == want,
                "block {index} of client {owner} at byte {at} holds another write's bytes"
            );
        }
    }
}
