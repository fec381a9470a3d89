//! The baseline noncontiguous methods and range locks against a real cluster.
//!
//! - `write_multiple`/`read_multiple` and `write_sieve`/`read_sieve` against a byte model:
//!   random piece lists (unsorted, overlapping, empty pieces), memory cut elsewhere, random
//!   stripe units and sieve buffers; holes between pieces must keep their old bytes.
//! - Two clients sieving interleaved 100-byte blocks at the same time with tiny write buffers,
//!   so each one's read-modify-write covers the other's blocks: every byte must survive, which
//!   holds only because every chunk is written under an exclusive range lock.
//! - Range locks on the mds: conflicts answered `Busy` after the wait, naming the file, range
//!   and holder; release and drop let a waiter through; an expired lease frees the range;
//!   bad requests refused naming the limit.

// Test sizes and offsets are small; their casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use std::io::{IoSlice, IoSliceMut};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tessera_client::{
    ClientError, CreateOptions, ErrorCode, LockOptions, OpenMode, Piece, SieveOptions,
};
use tessera_net::{Connection, NetError};
use tessera_proto::limits::{RANGE_LOCK_LEASE_MS_MAX, RANGE_LOCK_WAIT_MS_MAX};
use tessera_proto::{LockRange, UnlockRange};

const FILE_BYTES: usize = 24_000;

#[derive(Debug, Clone)]
struct Case {
    stripe_unit_bytes: u64,
    /// Each write: pieces, memory cut points, sieve (true) or multiple.
    writes: Vec<(Vec<Piece>, Vec<usize>, bool)>,
    reads: Vec<(Vec<Piece>, Vec<usize>)>,
    sieve: SieveOptions,
}

fn pieces() -> impl Strategy<Value = Vec<Piece>> {
    prop::collection::vec(
        (0u64..(FILE_BYTES as u64 - 2_000), 0u64..2_000)
            .prop_map(|(offset, length)| Piece::new(offset, length)),
        0..20,
    )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![64u64..256, 256u64..4096],
        prop::collection::vec(
            (
                pieces(),
                prop::collection::vec(0usize..100_000, 0..6),
                any::<bool>(),
            ),
            1..4,
        ),
        prop::collection::vec(
            (pieces(), prop::collection::vec(0usize..100_000, 0..6)),
            1..3,
        ),
        prop_oneof![
            Just(SieveOptions::default()),
            (1u64..3_000, 1u64..3_000).prop_map(|(read, write)| SieveOptions {
                read_buffer_bytes: read,
                write_buffer_bytes: write,
            }),
        ],
    )
        .prop_map(|(stripe_unit_bytes, writes, reads, sieve)| Case {
            stripe_unit_bytes,
            writes,
            reads,
            sieve,
        })
}

/// Cuts `0..total` into memory pieces at the given points.
fn memory_cuts(total: usize, points: &[usize]) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> = points.iter().map(|&p| p % (total + 1)).collect();
    cuts.push(0);
    cuts.push(total);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
}

fn total(pieces: &[Piece]) -> usize {
    pieces.iter().map(|piece| piece.length as usize).sum()
}

#[test]
fn multiple_and_sieve_methods_match_a_byte_model() {
    let cluster = common::Cluster::start(4);
    let client = cluster.client();
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let counter = std::cell::Cell::new(0u64);
    runner
        .run(&case(), |case| {
            counter.set(counter.get() + 1);
            let seed = counter.get();
            let path = format!("/methods-{seed}");
            let file = client
                .create(
                    &path,
                    &CreateOptions {
                        stripe_unit_bytes: case.stripe_unit_bytes,
                        ..CreateOptions::default()
                    },
                )
                .unwrap();
            // Old bytes everywhere, so a sieving write that loses a hole's bytes shows.
            let mut model = common::bytes(seed * 1000, FILE_BYTES);
            file.write_at(0, &model).unwrap();
            for (step, (pieces, points, sieve)) in case.writes.iter().enumerate() {
                let stream = common::bytes(seed * 1000 + step as u64 + 1, total(pieces));
                let memory: Vec<IoSlice<'_>> = memory_cuts(stream.len(), points)
                    .into_iter()
                    .map(|(start, length)| IoSlice::new(&stream[start..start + length]))
                    .collect();
                let report = if *sieve {
                    file.write_sieve(&memory, pieces, &case.sieve)
                } else {
                    file.write_multiple(&memory, pieces)
                }
                .unwrap_or_else(|error| panic!("write {step} ({pieces:?}): {error}"));
                let mut at = 0;
                for piece in pieces {
                    let (offset, length) = (piece.offset as usize, piece.length as usize);
                    model[offset..offset + length].copy_from_slice(&stream[at..at + length]);
                    at += length;
                }
                let nonempty = pieces.iter().filter(|piece| piece.length > 0).count() as u64;
                if *sieve {
                    prop_assert_eq!(report.locks > 0, nonempty > 0);
                    // Every covered byte is written (holes read too, as chunks allow).
                    let mut covered = vec![false; FILE_BYTES];
                    for piece in pieces {
                        covered[piece.offset as usize..(piece.offset + piece.length) as usize]
                            .fill(true);
                    }
                    let covered = covered.iter().filter(|&&byte| byte).count() as u64;
                    prop_assert!(report.bytes >= covered, "{} < {}", report.bytes, covered);
                } else {
                    prop_assert_eq!(report.locks, 0);
                    prop_assert!(report.requests >= nonempty);
                }
            }
            let mut whole = vec![0u8; FILE_BYTES];
            file.read_at(0, &mut whole).unwrap();
            prop_assert!(
                whole == model,
                "file differs from the model after the writes"
            );
            for (pieces, points) in &case.reads {
                let wanted: Vec<u8> = pieces
                    .iter()
                    .flat_map(|piece| {
                        model[piece.offset as usize..(piece.offset + piece.length) as usize]
                            .iter()
                            .copied()
                    })
                    .collect();
                let cuts = memory_cuts(wanted.len(), points);
                for sieve in [false, true] {
                    let mut buffer = vec![0xA5u8; wanted.len()];
                    {
                        let mut rest = buffer.as_mut_slice();
                        let mut memory = Vec::new();
                        for &(_, length) in &cuts {
                            let (head, tail) = rest.split_at_mut(length);
                            memory.push(IoSliceMut::new(head));
                            rest = tail;
                        }
                        if sieve {
                            file.read_sieve(&mut memory, pieces, &case.sieve).unwrap();
                        } else {
                            file.read_multiple(&mut memory, pieces).unwrap();
                        }
                    }
                    prop_assert!(buffer == wanted, "read (sieve {}) of {:?}", sieve, pieces);
                }
            }
            client.unlink(&path).unwrap();
            Ok(())
        })
        .unwrap();
}

#[test]
fn bad_input_is_refused_naming_the_file() {
    let cluster = common::Cluster::start(2);
    let client = cluster.client();
    let file = client.create("/bad", &CreateOptions::default()).unwrap();
    let data = [0u8; 10];
    let memory = [IoSlice::new(&data)];
    let message = |error: ClientError| error.to_string();

    let error = file
        .write_sieve(&memory, &[Piece::new(0, 11)], &SieveOptions::default())
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument));
    assert!(message(error).contains("/bad"));
    let error = file
        .write_multiple(&memory, &[Piece::new(0, 4), Piece::new(9, 5)])
        .unwrap_err();
    assert!(message(error).contains("totals must match"));
    let zero = SieveOptions {
        read_buffer_bytes: 0,
        write_buffer_bytes: 0,
    };
    let error = file
        .write_sieve(&memory, &[Piece::new(0, 10)], &zero)
        .unwrap_err();
    assert!(message(error).contains("sieve buffer"));

    let write_only = client.open("/bad", OpenMode::WriteOnly).unwrap();
    let error = write_only
        .write_sieve(&memory, &[Piece::new(0, 10)], &SieveOptions::default())
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::PermissionDenied));
    assert!(message(error).contains("write_sieve"));
    // Multiple I/O needs no read access.
    write_only
        .write_multiple(&memory, &[Piece::new(0, 10)])
        .unwrap();

    let error = file.lock_range(5, 5, true).unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument));
    let error = file
        .lock_range_with(
            0,
            1,
            true,
            &LockOptions {
                wait: Duration::from_millis(u64::from(RANGE_LOCK_WAIT_MS_MAX) + 1),
                ..LockOptions::default()
            },
        )
        .unwrap_err();
    assert!(message(error).contains("range_lock_wait_ms_max"));
}

/// Client A owns the even 100-byte blocks of 1 MiB, client B the odd ones; both sieve at the
/// same time with 1000-byte write buffers, so every chunk of one holds blocks of the other.
#[test]
fn concurrent_sieving_writers_lose_no_bytes() {
    const BLOCK: u64 = 100;
    const BYTES: u64 = 1 << 20;
    let cluster = common::Cluster::start(4);
    cluster
        .client()
        .create(
            "/interleaved",
            &CreateOptions {
                stripe_unit_bytes: 4096,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let blocks = BYTES.div_ceil(BLOCK);
    let pieces_of = |owner: u64| -> Vec<Piece> {
        (0..blocks)
            .filter(|block| block % 2 == owner)
            .map(|block| {
                let offset = block * BLOCK;
                Piece::new(offset, BLOCK.min(BYTES - offset))
            })
            .collect()
    };
    let data_of = |owner: u64| common::bytes(owner + 77, total(&pieces_of(owner)));
    let options = SieveOptions {
        read_buffer_bytes: 1000,
        write_buffer_bytes: 1000,
    };
    let barrier = std::sync::Barrier::new(2);
    let locks: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2u64)
            .map(|owner| {
                let client = cluster.client();
                let (pieces, data, barrier) = (pieces_of(owner), data_of(owner), &barrier);
                scope.spawn(move || {
                    let file = client.open("/interleaved", OpenMode::ReadWrite).unwrap();
                    barrier.wait();
                    file.write_sieve(&[IoSlice::new(&data)], &pieces, &options)
                        .unwrap()
                        .locks
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert!(locks.iter().all(|&count| count > 1_000), "{locks:?}");

    let file = cluster
        .client()
        .open("/interleaved", OpenMode::ReadOnly)
        .unwrap();
    let mut all = vec![0u8; BYTES as usize];
    file.read_at(0, &mut all).unwrap();
    let mut expected = vec![0u8; BYTES as usize];
    for owner in 0..2 {
        let data = data_of(owner);
        let mut at = 0;
        for piece in pieces_of(owner) {
            let (offset, length) = (piece.offset as usize, piece.length as usize);
            expected[offset..offset + length].copy_from_slice(&data[at..at + length]);
            at += length;
        }
    }
    let wrong: Vec<u64> = (0..blocks)
        .filter(|&block| {
            let start = (block * BLOCK) as usize;
            let end = ((block + 1) * BLOCK).min(BYTES) as usize;
            all[start..end] != expected[start..end]
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {blocks} blocks lost their bytes, first {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    assert_eq!(file.stat().unwrap().size, BYTES);
}

fn lock_options(wait_ms: u64, lease_ms: u64) -> LockOptions {
    LockOptions {
        wait: Duration::from_millis(wait_ms),
        lease: Duration::from_millis(lease_ms),
    }
}

#[test]
fn range_locks_conflict_wait_release_and_expire() {
    let cluster = common::Cluster::start(1);
    let (first, second) = (cluster.client(), cluster.client());
    let path = "/locked";
    first.create(path, &CreateOptions::default()).unwrap();
    let file = first.open(path, OpenMode::ReadWrite).unwrap();
    let other = second.open(path, OpenMode::ReadWrite).unwrap();

    // An exclusive lock keeps out an overlapping shared one, which gets `Busy` after its wait,
    // naming the file, its range and the holder's.
    let held = file.lock_range(0, 100, true).unwrap();
    let started = Instant::now();
    let error = other
        .lock_range_with(50, 60, false, &lock_options(200, 10_000))
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(error.code(), Some(ErrorCode::Busy), "{error}");
    let message = error.to_string();
    for part in [
        path,
        &format!("handle {:#x}", file.handle()),
        "bytes [50, 60) shared",
        "a lock holds bytes [0, 100) exclusive",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    // No wait at all: one try.
    let error = other
        .lock_range_with(99, 100, true, &lock_options(0, 10_000))
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::Busy));
    // Bytes next to the lock, and shared locks together, are fine.
    let beside = other.lock_range(100, 200, false).unwrap();
    let beside_too = file.lock_range(150, 300, false).unwrap();
    drop((beside, beside_too));

    // A waiter gets the lock when the holder releases it.
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| {
            let lock = other
                .lock_range_with(0, 10, true, &lock_options(20_000, 10_000))
                .unwrap();
            (Instant::now(), lock.lock_id())
        });
        std::thread::sleep(Duration::from_millis(300));
        let released = Instant::now();
        held.release().unwrap();
        let (granted, _) = waiter.join().unwrap();
        assert!(granted >= released);
    });

    // Drop releases too.
    let dropped = file.lock_range(0, 100, true).unwrap();
    drop(dropped);
    other
        .lock_range_with(0, 100, true, &lock_options(0, 10_000))
        .unwrap();

    // A lock never released (its client died) goes with its lease.
    let forgotten = file
        .lock_range_with(1000, 2000, true, &lock_options(0, 400))
        .unwrap();
    std::mem::forget(forgotten);
    let started = Instant::now();
    let lock = other
        .lock_range_with(1500, 1600, true, &lock_options(20_000, 500))
        .unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(!lock.expired());
    std::thread::sleep(Duration::from_millis(500));
    assert!(lock.expired());
    // Releasing an expired lock is not an error.
    lock.release().unwrap();
}

/// Two threads sharing one `Client`: a thread waiting for a lock does not hold the client's
/// mds connection, so the holder can release (the wait would otherwise last a socket-timeout
/// slice, 15 s here, before the release could pass).
#[test]
fn a_waiting_thread_does_not_block_the_shared_client() {
    let cluster = common::Cluster::start(1);
    let client = cluster.client_with_timeout(Duration::from_secs(30));
    let file = client.create("/shared", &CreateOptions::default()).unwrap();
    let held = file.lock_range(0, 10, true).unwrap();
    let started = Instant::now();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| file.lock_range(5, 6, true).unwrap().release().unwrap());
        std::thread::sleep(Duration::from_millis(200));
        held.release().unwrap();
        waiter.join().unwrap();
    });
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}

/// The mds itself checks every request: raw `LockRange`/`UnlockRange` frames.
#[test]
fn the_mds_refuses_bad_lock_requests() {
    let cluster = common::Cluster::start(1);
    let client = cluster.client();
    let file = client.create("/raw", &CreateOptions::default()).unwrap();
    let root = client.stat("/").unwrap().handle;
    let config = tessera_client::ClusterConfig::load(&cluster.file()).unwrap();
    let mut mds = Connection::connect(
        "mds",
        &config.mds.address,
        Duration::from_secs(10),
        &cluster.signer(),
        None,
    )
    .unwrap();
    let capability = file.capability().unwrap();
    let request = |start, end, wait_ms, lease_ms| LockRange {
        handle: file.handle(),
        capability: capability.clone(),
        start,
        end,
        exclusive: true,
        wait_ms,
        lease_ms,
    };
    let mut refused = |request: LockRange| match mds.call(&request) {
        Err(NetError::Remote { error, .. }) => (error.code, error.message),
        other => panic!("{request:?} not refused: {other:?}"),
    };
    let (code, message) = refused(request(0, 10, RANGE_LOCK_WAIT_MS_MAX + 1, 1000));
    assert_eq!(code, ErrorCode::LimitExceeded);
    assert!(message.contains("range_lock_wait_ms_max"), "{message}");
    let (_, message) = refused(request(0, 10, 0, RANGE_LOCK_LEASE_MS_MAX + 1));
    assert!(message.contains("range_lock_lease_ms_max"), "{message}");
    let (code, message) = refused(request(10, 10, 0, 1000));
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(message.contains("not below end"), "{message}");
    let (_, message) = refused(request(0, (1 << 62) + 1, 0, 1000));
    assert!(message.contains("file_bytes_max"), "{message}");
    // A well-signed capability for a handle no file has, and for the root directory.
    let uid = tessera_auth::authenticator::process_ids().0;
    let signed = |handle| {
        cluster.capability(
            handle,
            tessera_auth::Rights::READ_WRITE,
            uid,
            tessera_auth::now_s() + 60,
        )
    };
    let (code, _) = refused(LockRange {
        handle: 0xdead_beef,
        capability: signed(0xdead_beef),
        ..request(0, 10, 0, 1000)
    });
    assert_eq!(code, ErrorCode::UnknownHandle);
    let (code, _) = refused(LockRange {
        handle: root,
        capability: signed(root),
        ..request(0, 10, 0, 1000)
    });
    assert_eq!(code, ErrorCode::IsDirectory);
    // Without a capability for the handle, no lock: the mds checks it as the iods do.
    let (code, message) = refused(LockRange {
        capability: tessera_proto::Capability::default(),
        ..request(0, 10, 0, 1000)
    });
    assert_eq!(code, ErrorCode::PermissionDenied);
    assert!(message.contains("no capability"), "{message}");
    let (code, message) = refused(LockRange {
        handle: 0xdead_beef,
        ..request(0, 10, 0, 1000)
    });
    assert_eq!(code, ErrorCode::PermissionDenied);
    assert!(message.contains("not 0xdeadbeef"), "{message}");

    // Grant, unlock twice, unlock an id never granted: all fine.
    let granted = mds.call(&request(0, 10, 0, 1000)).unwrap();
    for lock_id in [granted.lock_id, granted.lock_id, 987_654_321] {
        mds.call(&UnlockRange {
            handle: file.handle(),
            capability: capability.clone(),
            lock_id,
        })
        .unwrap();
    }
    mds.call(&request(0, 10, 0, 1000)).unwrap();
}
