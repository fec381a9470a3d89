//! The iod's request handler over the storage of the `testing` feature: a real
//! `Iod<MemStorage>` or `Iod<Faulty<MemStorage>>` serves a loopback TCP connection that
//! authenticates as a server (as the mds does: object life-cycle requests are allowed, no
//! capability is needed), and every reply is checked — data against a byte model, failures
//! code by code: an injected `EIO` is `Io`, `ENOSPC` is `NoSpace`, short calls are finished,
//! and the connection and the object's extent lock are usable after every failure.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tessera_auth::{ClusterKey, KeySigner, ServerAuth};
use tessera_iod::testing::{Fault, Faulty, MemStorage, Op};
use tessera_iod::{cost::CostModel, Iod, ObjectStorage, ObjectStore};
use tessera_net::local::policy::Transfer;
use tessera_net::{Connection, NetError, PieceData, PieceDataMut};
use tessera_proto::{
    Capability, ErrorCode, IoReply, ObjectCreate, ObjectRemove, ObjectStat, ObjectSync,
    ObjectTruncate, Piece, Read, RemoteError, ServerStats, StoragePlan, TransferMode, Write,
    ROLE_IOD,
};

/// The namespace id the test speaks for, as an mds would (the iod records it at the first
/// object request).
const NAMESPACE: u64 = 0x7e57;

/// Bound on every connect, send and receive of the test client.
const TIMEOUT: Duration = Duration::from_secs(20);

/// An iod serving on a loopback port from its own thread, stopped on drop.
struct Server<S: ObjectStorage> {
    iod: Arc<Iod<S>>,
    address: String,
    key: ClusterKey,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: ObjectStorage> Server<S> {
    fn start(storage: S) -> Self {
        let key = ClusterKey::from_bytes([7; 32]);
        let store = ObjectStore::with_storage(storage, CostModel::default()).unwrap();
        let iod = Arc::new(Iod::new(0, store));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let auth = Arc::new(ServerAuth::new(key.clone(), ROLE_IOD, 0));
        let service = Arc::clone(&iod);
        let thread = std::thread::spawn(move || {
            runtime.block_on(tessera_net::server::serve(
                listener,
                service,
                auth,
                async move {
                    let _ = stopped.wait_for(|&stop| stop).await;
                },
            ));
        });
        Self {
            iod,
            address,
            key,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// A connection speaking for a server of the cluster.
    fn connect(&self) -> Connection {
        Connection::connect(
            "iod 0",
            &self.address,
            TIMEOUT,
            &KeySigner::server(self.key.clone()),
            None,
        )
        .unwrap()
    }

    fn storage(&self) -> &S {
        self.iod.store().storage()
    }
}

impl<S: ObjectStorage> Drop for Server<S> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The server's error, or a panic for a failure of the connection itself.
fn remote<T>(result: Result<T, NetError>) -> Result<T, RemoteError> {
    result.map_err(|error| match error.remote() {
        Some(remote) => remote.clone(),
        None => panic!("the connection failed instead of an error reply: {error}"),
    })
}

fn piece_ends(pieces: &[Piece]) -> Vec<usize> {
    (1..=pieces.len()).collect()
}

/// Writes `data` (back to back) to `pieces` of `handle`, one slice per piece.
fn write(
    connection: &mut Connection,
    handle: u64,
    pieces: &[Piece],
    data: &[u8],
    storage: StoragePlan,
    mode: TransferMode,
) -> Result<IoReply, RemoteError> {
    let mut slices = Vec::new();
    let mut at = 0;
    for piece in pieces {
        let length = usize::try_from(piece.length).unwrap();
        slices.push(std::io::IoSlice::new(&data[at..at + length]));
        at += length;
    }
    let request = Write {
        handle,
        capability: Capability::default(),
        mode,
        storage,
        pieces: pieces.to_vec(),
    };
    let sent = PieceData {
        slices,
        piece_ends: piece_ends(pieces),
    };
    connection
        .send_write(&request, Transfer::Framed(mode), &sent)
        .unwrap();
    remote(connection.recv_write()).map(|(reply, _)| reply)
}

/// Reads `pieces` of `handle`, back to back.
fn read(
    connection: &mut Connection,
    handle: u64,
    pieces: &[Piece],
    storage: StoragePlan,
    mode: TransferMode,
) -> Result<(Vec<u8>, IoReply), RemoteError> {
    let total: u64 = pieces.iter().map(|piece| piece.length).sum();
    let mut data = vec![0xeeu8; usize::try_from(total).unwrap()];
    let request = Read {
        handle,
        capability: Capability::default(),
        mode,
        storage,
        pieces: pieces.to_vec(),
    };
    let reply = {
        let mut slices = Vec::new();
        let mut rest = data.as_mut_slice();
        for piece in pieces {
            let (head, tail) = rest.split_at_mut(usize::try_from(piece.length).unwrap());
            slices.push(std::io::IoSliceMut::new(head));
            rest = tail;
        }
        let mut target = PieceDataMut {
            slices,
            piece_ends: piece_ends(pieces),
        };
        let transfer = Transfer::Framed(mode);
        connection
            .send_read(&request, transfer, &mut target)
            .unwrap();
        remote(connection.recv_data(transfer, pieces, &mut target)).map(|(reply, _)| reply)
    }?;
    Ok((data, reply))
}

fn create(connection: &mut Connection, handle: u64) -> Result<(), RemoteError> {
    remote(connection.call(&ObjectCreate {
        handle,
        namespace: NAMESPACE,
        cache_unit_bytes: 0,
    }))
    .map(drop)
}

fn stat(connection: &mut Connection, handle: u64) -> Result<u64, RemoteError> {
    let request = ObjectStat {
        handle,
        capability: Capability::default(),
    };
    remote(connection.call(&request)).map(|reply| reply.size)
}

fn truncate(connection: &mut Connection, handle: u64, size: u64) -> Result<(), RemoteError> {
    remote(connection.call(&ObjectTruncate {
        handle,
        namespace: NAMESPACE,
        size,
    }))
    .map(drop)
}

fn sync(connection: &mut Connection, handle: u64) -> Result<(), RemoteError> {
    let request = ObjectSync {
        handle,
        capability: Capability::default(),
    };
    remote(connection.call(&request)).map(drop)
}

/// `count` pieces of `length` bytes every `stride` bytes from `start`.
fn strided(start: u64, count: u64, length: u64, stride: u64) -> Vec<Piece> {
    (0..count)
        .map(|index| Piece::new(start + index * stride, length))
        .collect()
}

fn pattern(bytes: usize, seed: u8) -> Vec<u8> {
    (0..bytes)
        .map(|index| u8::try_from(index % 251).unwrap() ^ seed)
        .collect()
}

/// Applies a write to a byte model of the object (zeros where nothing was written).
fn apply(model: &mut Vec<u8>, pieces: &[Piece], data: &[u8]) {
    let mut at = 0;
    for piece in pieces {
        let (offset, length) = (
            usize::try_from(piece.offset).unwrap(),
            usize::try_from(piece.length).unwrap(),
        );
        if model.len() < offset + length {
            model.resize(offset + length, 0);
        }
        model[offset..offset + length].copy_from_slice(&data[at..at + length]);
        at += length;
    }
}

/// The model's bytes of `pieces`, back to back (zeros past its end).
fn expected(model: &[u8], pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        for offset in piece.offset..piece.offset + piece.length {
            out.push(
                model
                    .get(usize::try_from(offset).unwrap())
                    .copied()
                    .unwrap_or(0),
            );
        }
    }
    out
}

#[test]
fn data_round_trips_through_every_plan_and_mode_in_memory() {
    let server = Server::start(MemStorage::new());
    let mut connection = server.connect();
    create(&mut connection, 1).unwrap();
    let mut model = Vec::new();
    let mut writes = 0;
    let plans = [
        StoragePlan::PerPiece,
        StoragePlan::Batched,
        StoragePlan::Sieve,
        StoragePlan::Auto,
    ];
    let modes = [
        TransferMode::Pack,
        TransferMode::Gather,
        TransferMode::Multiple,
    ];
    for (round, (&plan, &mode)) in plans
        .iter()
        .flat_map(|plan| modes.iter().map(move |mode| (plan, mode)))
        .enumerate()
    {
        let round = u64::try_from(round).unwrap();
        // 64 pieces of 100 bytes every 300, shifted each round so rounds overlap.
        let pieces = strided(round * 37, 64, 100, 300);
        let data = pattern(6400, u8::try_from(round).unwrap());
        let reply = write(&mut connection, 1, &pieces, &data, plan, mode).unwrap();
        writes += 1;
        apply(&mut model, &pieces, &data);
        assert_eq!(reply.bytes, 6400);
        assert_ne!(
            reply.plan,
            StoragePlan::Batched,
            "memory has no file to batch on: the runs go one call each"
        );
        let wanted = strided(round * 11, 80, 90, 250);
        let (back, reply) = read(&mut connection, 1, &wanted, plan, mode).unwrap();
        assert_eq!(back, expected(&model, &wanted), "{plan:?} {mode:?}");
        assert_eq!(reply.bytes, 80 * 90);
    }
    assert_eq!(server.storage().contents(1).unwrap(), model);
    assert_eq!(stat(&mut connection, 1).unwrap(), model.len() as u64);
    truncate(&mut connection, 1, 1000).unwrap();
    assert_eq!(stat(&mut connection, 1).unwrap(), 1000);
    let (back, _) = read(
        &mut connection,
        1,
        &[Piece::new(990, 20)],
        StoragePlan::Auto,
        TransferMode::Pack,
    )
    .unwrap();
    assert_eq!(&back[..10], &model[990..1000]);
    assert_eq!(&back[10..], &[0; 10], "past the end: zeros");
    sync(&mut connection, 1).unwrap();
    let stats = remote(connection.call(&ServerStats {})).unwrap();
    assert_eq!(stats.writes.requests, writes);
    assert!(!stats.io_uring, "no batches without a file");
    remote(connection.call(&ObjectRemove {
        handle: 1,
        namespace: NAMESPACE,
    }))
    .unwrap();
    assert_eq!(
        stat(&mut connection, 1).unwrap_err().code,
        ErrorCode::UnknownHandle
    );
    assert!(server.storage().handles().is_empty());
}

#[test]
fn an_injected_eio_is_an_io_error_and_the_connection_and_lock_stay_usable() {
    let server = Server::start(Faulty::new(MemStorage::new()));
    let plan = server.storage().plan().clone();
    let mut connection = server.connect();
    create(&mut connection, 5).unwrap();
    let whole = [Piece::new(0, 4096)];
    let old = pattern(4096, 1);
    write(
        &mut connection,
        5,
        &whole,
        &old,
        StoragePlan::PerPiece,
        TransferMode::Pack,
    )
    .unwrap();

    // A failed read: Io, naming the object and the storage.
    plan.add(Fault::eio(Op::Read).on(5).times(1)).unwrap();
    let error = read(
        &mut connection,
        5,
        &whole,
        StoragePlan::PerPiece,
        TransferMode::Pack,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Io, "{}", error.message);
    assert!(
        error.message.contains("read of object 0x5 in memory"),
        "{}",
        error.message
    );
    let (back, _) = read(
        &mut connection,
        5,
        &whole,
        StoragePlan::PerPiece,
        TransferMode::Pack,
    )
    .unwrap();
    assert_eq!(back, old, "the next read on the same connection works");

    // A sieving write whose chunk read fails writes nothing of the chunk.
    plan.add(Fault::eio(Op::Read).on(5).times(1)).unwrap();
    let writes_before = plan.calls(Op::Write);
    let columns = strided(0, 32, 16, 64);
    let error = write(
        &mut connection,
        5,
        &columns,
        &pattern(512, 2),
        StoragePlan::Sieve,
        TransferMode::Gather,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Io);
    assert_eq!(plan.calls(Op::Write), writes_before, "no write was made");
    assert_eq!(server.storage().inner().contents(5).unwrap(), old);

    // A per-piece write failing at its second run: the first run stays (a request is atomic
    // against concurrent requests, not against a failing disk: SEMANTICS.md §2), the rest
    // is not written, and the extent lock is free again for the next write.
    plan.add(Fault::eio(Op::Write).on(5).after(1).times(1))
        .unwrap();
    let runs = strided(0, 3, 100, 1000);
    let new = pattern(300, 3);
    let error = write(
        &mut connection,
        5,
        &runs,
        &new,
        StoragePlan::PerPiece,
        TransferMode::Pack,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Io);
    let contents = server.storage().inner().contents(5).unwrap();
    assert_eq!(&contents[..100], &new[..100]);
    assert_eq!(&contents[1000..1100], &old[1000..1100]);
    assert_eq!(&contents[2000..2100], &old[2000..2100]);
    write(
        &mut connection,
        5,
        &runs,
        &new,
        StoragePlan::PerPiece,
        TransferMode::Pack,
    )
    .unwrap();
    let contents = server.storage().inner().contents(5).unwrap();
    assert_eq!(&contents[2000..2100], &new[200..300]);

    // Life-cycle requests: a failed truncate or sync changes nothing; a failed create makes
    // no object.
    plan.add(Fault::eio(Op::SetSize).times(1)).unwrap();
    assert_eq!(
        truncate(&mut connection, 5, 10).unwrap_err().code,
        ErrorCode::Io
    );
    assert_eq!(stat(&mut connection, 5).unwrap(), 4096);
    plan.add(Fault::eio(Op::Sync).times(1)).unwrap();
    assert_eq!(sync(&mut connection, 5).unwrap_err().code, ErrorCode::Io);
    plan.add(Fault::eio(Op::Create).on(6)).unwrap();
    assert_eq!(create(&mut connection, 6).unwrap_err().code, ErrorCode::Io);
    assert_eq!(
        stat(&mut connection, 6).unwrap_err().code,
        ErrorCode::UnknownHandle
    );
    assert_eq!(server.storage().inner().handles(), vec![5]);
    assert_eq!(plan.injected(), 6);
}

#[test]
fn a_full_store_answers_no_space() {
    // A real shortage: 8 KiB of memory.
    let server = Server::start(MemStorage::with_capacity(8 << 10));
    let mut connection = server.connect();
    create(&mut connection, 1).unwrap();
    let error = write(
        &mut connection,
        1,
        &[Piece::new(0, 16 << 10)],
        &pattern(16 << 10, 0),
        StoragePlan::Auto,
        TransferMode::Pack,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::NoSpace, "{}", error.message);
    assert!(error.message.contains("in memory"), "{}", error.message);
    assert_eq!(
        truncate(&mut connection, 1, 1 << 20).unwrap_err().code,
        ErrorCode::NoSpace
    );
    // What fits still goes in.
    truncate(&mut connection, 1, 0).unwrap();
    write(
        &mut connection,
        1,
        &[Piece::new(0, 4096)],
        &pattern(4096, 0),
        StoragePlan::Auto,
        TransferMode::Pack,
    )
    .unwrap();

    // An injected ENOSPC, on a create too.
    let server = Server::start(Faulty::new(MemStorage::new()));
    let mut connection = server.connect();
    server
        .storage()
        .plan()
        .add(Fault::no_space(Op::Create).times(1))
        .unwrap();
    assert_eq!(
        create(&mut connection, 2).unwrap_err().code,
        ErrorCode::NoSpace
    );
    create(&mut connection, 2).unwrap();
    server
        .storage()
        .plan()
        .add(Fault::no_space(Op::Write))
        .unwrap();
    let error = write(
        &mut connection,
        2,
        &strided(0, 4, 10, 20),
        &[1; 40],
        StoragePlan::Sieve,
        TransferMode::Multiple,
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::NoSpace);
}

#[test]
fn short_reads_and_writes_are_finished_where_they_stopped() {
    let server = Server::start(Faulty::new(MemStorage::new()));
    let plan = server.storage().plan().clone();
    plan.add(Fault::short(Op::Write, 7)).unwrap();
    plan.add(Fault::short(Op::Read, 5)).unwrap();
    let mut connection = server.connect();
    create(&mut connection, 3).unwrap();
    let pieces = strided(0, 10, 100, 150);
    let data = pattern(1000, 9);
    for storage in [StoragePlan::PerPiece, StoragePlan::Sieve] {
        let before = plan.calls(Op::Write);
        write(
            &mut connection,
            3,
            &pieces,
            &data,
            storage,
            TransferMode::Gather,
        )
        .unwrap();
        let calls = plan.calls(Op::Write) - before;
        assert!(calls >= 1000 / 7, "{storage:?}: {calls} write calls");
        let (back, _) = read(&mut connection, 3, &pieces, storage, TransferMode::Pack).unwrap();
        assert_eq!(back, data, "{storage:?}");
    }
    assert_eq!(
        plan.injected(),
        plan.calls(Op::Write) + plan.calls(Op::Read)
    );
}

/// SEMANTICS.md §2.1: a read sees all of a concurrent overlapping write request or none of
/// it. Each storage call of the writes is slowed down, so without the extent lock a reader
/// would land between two runs of a write.
#[test]
fn a_read_sees_all_of_a_concurrent_write_or_none_of_it() {
    let server = Server::start(Faulty::new(MemStorage::new()));
    let plan = server.storage().plan().clone();
    let mut connection = server.connect();
    create(&mut connection, 9).unwrap();
    let runs = strided(0, 4, 32 << 10, 64 << 10);
    write(
        &mut connection,
        9,
        &runs,
        &vec![0u8; 128 << 10],
        StoragePlan::PerPiece,
        TransferMode::Pack,
    )
    .unwrap();
    plan.add(Fault::delay(Op::Write, Duration::from_millis(5)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut connection = server.connect();
            for round in 1..=20u8 {
                let data = vec![round; 128 << 10];
                write(
                    &mut connection,
                    9,
                    &runs,
                    &data,
                    StoragePlan::PerPiece,
                    TransferMode::Pack,
                )
                .unwrap();
            }
        });
        let mut seen = std::collections::BTreeSet::new();
        loop {
            let (back, _) = read(
                &mut connection,
                9,
                &runs,
                StoragePlan::PerPiece,
                TransferMode::Pack,
            )
            .unwrap();
            let first = back[0];
            assert!(
                back.iter().all(|&byte| byte == first),
                "a read saw two writes at once"
            );
            seen.insert(first);
            if writer.is_finished() || Instant::now() > deadline {
                break;
            }
        }
        writer.join().unwrap();
        assert!(!seen.is_empty());
    });
}
