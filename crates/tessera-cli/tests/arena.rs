//! Shared arenas against real server processes: pieces that lie in an arena are named as
//! offsets in it and moved by the iods with plain copies (no `process_vm_*` call and no copy
//! by the client), for every storage plan, read back into an arena and into the heap, byte
//! for byte against the source; a later arena (its memfd may get the same descriptor number)
//! gets a new key and never reaches a stale mapping; a segment outside the arena is refused
//! by name.

mod common;

use std::io::{IoSlice, IoSliceMut};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{bytes, Cluster};
use tessera_client::{
    Arena, ClusterConfig, CreateOptions, ErrorCode, Mechanism, Piece, TransferPolicy,
};
use tessera_proto::{RemoteAccess, RemoteEndpoint, RemoteMemory, RemoteSegment, StoragePlan};

/// 256 slices of 1000 bytes every 1536 bytes of `memory`.
fn slices_of(memory: &[u8]) -> Vec<IoSlice<'_>> {
    memory
        .chunks(1536)
        .take(256)
        .map(|chunk| IoSlice::new(&chunk[..1000]))
        .collect()
}

#[test]
fn arena_pieces_move_without_client_copies_for_every_plan() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    let mut file = client
        .create(
            "/arena",
            &CreateOptions {
                stripe_unit_bytes: 4096,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    // Scattered file pieces over four servers, some adjacent, in no order.
    let pieces: Vec<Piece> = (0..256u64)
        .map(|i| Piece::new(((i * 37) % 256) * 1300 + (i % 2) * 200, 1000))
        .collect();
    let plans = [
        StoragePlan::Auto,
        StoragePlan::PerPiece,
        StoragePlan::Sieve,
        StoragePlan::Batched,
    ];
    let policies = [
        TransferPolicy::Auto,
        TransferPolicy::Force(Mechanism::Gather),
    ];
    let mut arena = Arena::new(1 << 20).unwrap();
    let mut into = Arena::new(1 << 20).unwrap();
    for (round, (plan, policy)) in plans
        .iter()
        .flat_map(|plan| policies.iter().map(move |policy| (*plan, *policy)))
        .enumerate()
    {
        let source = bytes(round as u64 + 7, 1 << 20);
        arena.as_mut_slice().copy_from_slice(&source);
        file.set_storage_plan(plan);
        file.set_transfer_policy(policy);
        let report = file
            .write_list(&slices_of(arena.as_slice()), &pieces)
            .unwrap();
        let what = format!("{plan:?} {policy:?}");
        assert_eq!(report.bytes, 256_000, "{what}");
        assert_eq!(report.one_sided, report.requests, "{what}");
        assert_eq!(report.bytes_copied, 0, "no copy by the client: {what}");

        // Back into another arena, scattered the same way; the gaps stay untouched.
        into.as_mut_slice().fill(0xEE);
        let report = {
            let mut targets: Vec<IoSliceMut<'_>> = into
                .as_mut_slice()
                .chunks_mut(1536)
                .take(256)
                .map(|chunk| IoSliceMut::new(&mut chunk[..1000]))
                .collect();
            file.read_list(&mut targets, &pieces).unwrap()
        };
        assert_eq!(report.bytes_copied, 0, "{what}");
        assert_eq!(report.one_sided, report.requests, "{what}");
        for (index, (got, want)) in into
            .as_slice()
            .chunks(1536)
            .zip(source.chunks(1536))
            .take(256)
            .enumerate()
        {
            assert!(got[..1000] == want[..1000], "slice {index}: {what}");
            assert!(
                got[1000..].iter().all(|&b| b == 0xEE),
                "gap {index}: {what}"
            );
        }
        // And into the heap, through the ordinary one-sided path.
        let mut heap = vec![0u8; 256_000];
        file.read_list(&mut [IoSliceMut::new(&mut heap)], &pieces)
            .unwrap();
        let expected: Vec<u8> = source
            .chunks(1536)
            .take(256)
            .flat_map(|chunk| chunk[..1000].iter().copied())
            .collect();
        assert!(heap == expected, "{what}");
    }

    // A forced pack still packs arena memory (one copy by the client).
    file.set_transfer_policy(TransferPolicy::Force(Mechanism::Pack));
    file.set_storage_plan(StoragePlan::Auto);
    let report = file
        .write_list(&slices_of(arena.as_slice()), &pieces)
        .unwrap();
    assert_eq!(report.bytes_copied, 256_000);

    // The descriptor number of a dropped arena comes back with the next one: its new key
    // keeps the server off the old mapping.
    file.set_transfer_policy(TransferPolicy::Auto);
    let old = arena.key();
    drop(arena);
    let mut again = Arena::new(1 << 20).unwrap();
    assert_ne!(again.key(), old);
    let fresh = bytes(99, 1 << 20);
    again.as_mut_slice().copy_from_slice(&fresh);
    file.write_list(&slices_of(again.as_slice()), &pieces)
        .unwrap();
    let mut heap = vec![0u8; 256_000];
    file.read_list(&mut [IoSliceMut::new(&mut heap)], &pieces)
        .unwrap();
    let expected: Vec<u8> = fresh
        .chunks(1536)
        .take(256)
        .flat_map(|chunk| chunk[..1000].iter().copied())
        .collect();
    assert!(heap == expected);
}

#[test]
fn a_segment_outside_the_arena_is_refused_by_name() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let file = client
        .create("/arena-bad", &CreateOptions::default())
        .unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let socket = config.iods[0].local.clone().expect("a local socket");
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    common::authenticate(&mut stream, &cluster.signer()).unwrap();
    let capability = file.capability().unwrap();
    let arena = Arena::new(8192).unwrap();
    common::share_region(&mut stream, arena.key(), 8192, &[arena.descriptor()], 100).unwrap();
    let cases = [
        // The second segment runs past the arena's end.
        (
            vec![(0, 100, arena.key()), (8100, 100, arena.key())],
            ErrorCode::BadAddress,
            "segment 1",
        ),
        // Two regions in one request.
        (
            vec![(0, 100, arena.key()), (100, 100, arena.key() + 1)],
            ErrorCode::Protocol,
            "segment 1",
        ),
    ];
    for (request_id, (segments, code, words)) in cases.into_iter().enumerate() {
        let length: u64 = segments.iter().map(|&(_, length, _)| length).sum();
        let memory = RemoteMemory {
            access: RemoteAccess::Shared,
            endpoint: RemoteEndpoint::default(),
            segments_per_call: 0,
            segments: segments
                .iter()
                .map(|&(address, length, key)| RemoteSegment {
                    address,
                    length,
                    key,
                })
                .collect(),
        };
        let error = common::refused_write(
            &mut stream,
            (file.handle(), capability.clone()),
            length,
            &memory,
            request_id as u64 + 1,
        );
        assert_eq!(error.code, code, "{}", error.message);
        assert!(error.message.contains(words), "{}", error.message);
    }
    assert_eq!(file.stat().unwrap().size, 0, "nothing was written");
}
