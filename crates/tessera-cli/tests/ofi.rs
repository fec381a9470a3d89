//! List I/O over the libfabric backend against real server processes: a cluster started with
//! `tessera up --ofi-provider` (for `tcp;ofi_rxm` and `shm`), a client whose control messages
//! go by TCP and whose data the iods move one-sidedly over the fabric (`fi_readmsg` for
//! writes, `fi_writemsg` for reads), scattered memory to scattered file pieces over three
//! servers, small and pipelined (over 1 MiB a server) requests, every byte read back and
//! checked, and every request counted as one-sided.

#![cfg(feature = "ofi")]

mod common;

use std::io::{IoSlice, IoSliceMut};

use common::{bytes, tessera, Cluster};
use tessera_client::{ClusterConfig, CreateOptions, Mechanism, Piece, TransferPolicy};

/// The providers `make test` covers.
const PROVIDERS: [&str; 2] = ["tcp;ofi_rxm", "shm"];
/// I/O servers of each cluster.
const SERVERS: u16 = 3;

fn cluster_over(provider: &str) -> Cluster {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cluster = Cluster { dir };
    let output = tessera(&[
        "up",
        "--servers",
        &SERVERS.to_string(),
        "--dir",
        cluster.path().to_str().unwrap(),
        "--ofi-provider",
        provider,
    ]);
    assert!(
        output.status.success(),
        "{provider}: tessera up failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config = ClusterConfig::load(&cluster.file()).expect("cluster file");
    assert_eq!(
        config.ofi.as_ref().map(|entry| entry.provider.as_str()),
        Some(provider),
        "the cluster file names the fabric"
    );
    cluster
}

/// Writes `pieces` from `stride`-spaced slices of `length` bytes, reads them back into other
/// scattered memory, and checks every byte and that every request went over the fabric.
fn round_trip(
    provider: &str,
    file: &mut tessera_client::File,
    pieces: &[Piece],
    (length, stride): (usize, usize),
    seed: u64,
) {
    let count = pieces.len();
    let total: u64 = pieces.iter().map(|piece| piece.length).sum();
    assert_eq!(total, (count * length) as u64);
    let policies = [
        TransferPolicy::Auto,
        TransferPolicy::Force(Mechanism::Pack),
        TransferPolicy::Force(Mechanism::Gather),
        TransferPolicy::Force(Mechanism::Multiple),
    ];
    for (round, policy) in policies.into_iter().enumerate() {
        let source = bytes(seed + round as u64, count * stride);
        let memory: Vec<IoSlice<'_>> = source
            .chunks(stride)
            .map(|chunk| IoSlice::new(&chunk[..length]))
            .collect();
        file.set_transfer_policy(policy);
        let report = file.write_list(&memory, pieces).unwrap();
        assert_eq!(report.bytes, total, "{provider} {policy:?}");
        assert!(
            report.requests >= u64::from(SERVERS),
            "{provider}: {report:?}"
        );
        assert_eq!(
            report.one_sided, report.requests,
            "{provider} {policy:?}: every write over the fabric: {report:?}"
        );
        assert_eq!(
            report.messages_sent, report.requests,
            "{provider} {policy:?}"
        );

        // Read back through the next policy into memory scattered differently.
        let back_policy = policies[(round + 1) % policies.len()];
        file.set_transfer_policy(back_policy);
        let back_stride = stride + 64;
        let mut back = vec![0u8; count * back_stride];
        let mut slices: Vec<IoSliceMut<'_>> = back
            .chunks_mut(back_stride)
            .map(|chunk| IoSliceMut::new(&mut chunk[..length]))
            .collect();
        let report = file.read_list(&mut slices, pieces).unwrap();
        assert_eq!(report.bytes, total, "{provider} {back_policy:?}");
        assert_eq!(
            report.one_sided, report.requests,
            "{provider} {back_policy:?}: every read over the fabric: {report:?}"
        );
        for index in 0..count {
            let wrote = &source[index * stride..index * stride + length];
            let read = &back[index * back_stride..index * back_stride + length];
            assert!(
                wrote == read,
                "{provider} {policy:?}/{back_policy:?}: piece {index} differs"
            );
            // The gaps between slices stay untouched.
            assert!(
                back[index * back_stride + length..(index + 1) * back_stride]
                    .iter()
                    .all(|&byte| byte == 0),
                "{provider}: gap after piece {index} written"
            );
        }
    }
}

#[test]
fn list_io_round_trips_over_tcp_rxm() {
    list_io_round_trips(PROVIDERS[0]);
}

#[test]
fn list_io_round_trips_over_shm() {
    list_io_round_trips(PROVIDERS[1]);
}

fn list_io_round_trips(provider: &str) {
    let cluster = cluster_over(provider);
    // Control messages by TCP: only the fabric can make a transfer one-sided.
    let client = cluster.tcp_client();
    let mut file = client
        .create(
            "/ofi",
            &CreateOptions {
                stripe_unit_bytes: 64 << 10,
                ..CreateOptions::default()
            },
        )
        .unwrap();

    // 600 scattered pieces of 3000 bytes (1.8 MB) over three servers.
    let small: Vec<Piece> = (0..600u64)
        .map(|i| Piece::new(i * 5000 + (i % 7) * 13, 3000))
        .collect();
    round_trip(provider, &mut file, &small, (3000, 4096), 1);

    // 12 pieces of 600 KB (7.2 MB, over 2 MiB a server): pipelined in 1 MiB units.
    let large: Vec<Piece> = (0..12u64)
        .map(|i| Piece::new(4_000_000 + i * 700_000, 600_000))
        .collect();
    round_trip(provider, &mut file, &large, (600_000, 600_128), 100);

    // The first file's bytes were not disturbed by the second's.
    let expected = bytes(1 + 3, 600 * 4096);
    let mut back = vec![0u8; 600 * 3000];
    let mut slices: Vec<IoSliceMut<'_>> = back.chunks_mut(3000).map(IoSliceMut::new).collect();
    file.set_transfer_policy(TransferPolicy::Auto);
    let report = file.read_list(&mut slices, &small).unwrap();
    assert_eq!(report.one_sided, report.requests, "{provider}: {report:?}");
    for index in 0..600 {
        assert!(
            back[index * 3000..(index + 1) * 3000] == expected[index * 4096..index * 4096 + 3000],
            "{provider}: piece {index} after the large round"
        );
    }
    for index in 0..SERVERS {
        let log = cluster.log(&format!("iod-{index}"));
        assert!(
            log.contains(&format!("one-sided transfers over {provider}")),
            "{provider}: iod {index} log: {log}"
        );
    }
    drop(file);
    drop(client);
    cluster.down();
}
