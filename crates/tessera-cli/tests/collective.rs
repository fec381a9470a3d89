//! Collective I/O against real server processes: `two_phase`, `server_directed` and
//! `independent`, with the thread communicator standing in for MPI (one `Client`, so one set
//! of connections, per "process"). Every write is checked byte by byte against a plain model
//! of the file, every collective read against the data written. Fault tests: a participant
//! that never reaches the server, a collective over the servers' byte limit.

mod common;

use std::time::Duration;

use common::Cluster;
use tessera_client::collective::COLLECTIVE_WAIT_MS_DEFAULT;
use tessera_client::{
    Client, ClientError, CollectiveBuffering, CollectiveMethod, CollectiveOptions, Communicator,
    CreateOptions, Datatype, OpenMode, ThreadCommunicator, TransferMode, ViewedFile,
};

const INT: u64 = 4;

/// Process `rank`'s file type of the interleaved pattern: `block` ints of every
/// `block · processes`, its block being the `rank`-th.
fn interleaved(rank: u64, processes: u64, block: u64) -> Datatype {
    let int = Datatype::bytes(4).unwrap();
    let mine = Datatype::hindexed(
        &[block],
        &[i64::try_from(rank * block * INT).unwrap()],
        &int,
    )
    .unwrap();
    Datatype::resized(0, i64::try_from(processes * block * INT).unwrap(), &mine).unwrap()
}

/// The ints process `rank` writes: distinct per rank and position.
fn values(rank: u64, count: u64, salt: u32) -> Vec<u8> {
    (0..count)
        .flat_map(|k| (u32::try_from(rank * 1_000_000 + k).unwrap() ^ salt).to_le_bytes())
        .collect()
}

struct Case {
    /// Processes that take part (the pattern has room for `slots` of them).
    processes: u64,
    /// Processes the interleaved pattern is laid out for (at least `processes`; more leave
    /// holes in the file).
    slots: u64,
    /// Reach the servers by TCP in this transfer mode instead of the default transport.
    tcp_mode: Option<TransferMode>,
    block: u64,
    count: u64,
    displacement: u64,
    options: CollectiveOptions,
    /// A memory type with holes: every int followed by 4 unused bytes.
    strided_memory: bool,
}

/// Runs one collective write and read of the interleaved pattern and checks both.
fn run(cluster: &Cluster, path: &str, case: &Case, salt: u32) {
    let setup = cluster.client();
    let file = setup
        .create(
            path,
            &CreateOptions {
                stripe_unit_bytes: 4096,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    file.close().unwrap();
    let processes = usize::try_from(case.processes).unwrap();
    let group = ThreadCommunicator::group(processes, Duration::from_secs(30));
    let int = Datatype::bytes(4).unwrap();
    let strided = Datatype::resized(0, 8, &int).unwrap();
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|member| {
                let (int, strided) = (&int, &strided);
                scope.spawn(move || -> Result<(), String> {
                    let rank = member.rank() as u64;
                    let client = if case.tcp_mode.is_some() {
                        cluster.tcp_client()
                    } else {
                        cluster.client()
                    };
                    let mut viewed = ViewedFile::new(
                        client
                            .open(path, OpenMode::ReadWrite)
                            .map_err(|e| e.to_string())?,
                    );
                    if let Some(mode) = case.tcp_mode {
                        viewed.file_mut().set_transfer_mode(mode);
                    }
                    viewed
                        .set_view(
                            case.displacement,
                            &interleaved(rank, case.slots, case.block),
                        )
                        .map_err(|e| e.to_string())?;
                    let data = values(rank, case.count, salt);
                    let (memory, memtype) = if case.strided_memory {
                        let memory: Vec<u8> = data
                            .chunks(4)
                            .flat_map(|int| [int, &[0xEE; 4][..]].concat())
                            .collect();
                        (memory, strided)
                    } else {
                        (data.clone(), int)
                    };
                    viewed
                        .write_all(&member, &case.options, 0, &memory, memtype, case.count)
                        .map_err(|e| format!("rank {rank} write: {e}"))?;
                    let mut back = vec![0xAAu8; memory.len()];
                    viewed
                        .read_all(&member, &case.options, 0, &mut back, memtype, case.count)
                        .map_err(|e| format!("rank {rank} read: {e}"))?;
                    let expected = if case.strided_memory {
                        // The holes of the memory type are left alone.
                        data.chunks(4)
                            .flat_map(|int| [int, &[0xAA; 4][..]].concat())
                            .collect()
                    } else {
                        data
                    };
                    if back != expected {
                        let first = back.iter().zip(&expected).position(|(a, b)| a != b);
                        return Err(format!(
                            "rank {rank} read back other bytes (first at {first:?})"
                        ));
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for result in results {
        result.unwrap();
    }
    // The model: displacement bytes of zeros, then the interleaved blocks (empty slots zero).
    let total_ints = case.count.div_ceil(case.block) * case.block * case.slots;
    let mut model = vec![0u8; usize::try_from(case.displacement + total_ints * INT).unwrap()];
    let mut end_written = 0u64;
    for rank in 0..case.processes {
        let data = values(rank, case.count, salt);
        for k in 0..case.count {
            let (instance, within) = (k / case.block, k % case.block);
            let int_index = instance * case.block * case.slots + rank * case.block + within;
            let at = usize::try_from(case.displacement + int_index * INT).unwrap();
            let from = usize::try_from(k * INT).unwrap();
            model[at..at + 4].copy_from_slice(&data[from..from + 4]);
            end_written = end_written.max(at as u64 + 4);
        }
    }
    let mut file_bytes = vec![0u8; model.len()];
    setup
        .open(path, OpenMode::ReadWrite)
        .unwrap()
        .read_at(0, &mut file_bytes)
        .unwrap();
    let first = file_bytes.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(
        first, None,
        "{path}: the file differs from the model at byte {first:?}"
    );
    // The file ends with the last int written (trailing empty slots are not in it).
    assert_eq!(setup.stat(path).unwrap().size, end_written, "{path}: size");
}

fn options(method: CollectiveMethod) -> CollectiveOptions {
    CollectiveOptions {
        method,
        ..CollectiveOptions::default()
    }
}

#[test]
fn interleaved_ints_land_where_the_model_says_for_every_method() {
    let cluster = Cluster::start(2);
    let mut salt = 1;
    for method in CollectiveMethod::ALL {
        for processes in [2u64, 4] {
            for (block, displacement, strided_memory) in [(1, 0, false), (3, 100, true)] {
                let case = Case {
                    processes,
                    slots: processes,
                    tcp_mode: None,
                    block,
                    count: 3000,
                    displacement,
                    options: options(method),
                    strided_memory,
                };
                let path = format!("/{}-{processes}-{block}-{displacement}", method.name());
                run(&cluster, &path, &case, salt);
                salt += 1;
            }
        }
    }
}

#[test]
fn framed_transfers_and_files_with_holes_for_both_methods() {
    let cluster = Cluster::start(2);
    let mut salt = 100;
    for method in [CollectiveMethod::TwoPhase, CollectiveMethod::ServerDirected] {
        for (mode, slots) in [
            (TransferMode::Gather, 3u64),
            (TransferMode::Pack, 2),
            (TransferMode::Multiple, 5),
            // Sparse enough that the servers sort the pieces instead of using a bitmap.
            (TransferMode::Gather, 20),
        ] {
            let case = Case {
                processes: 2,
                slots,
                tcp_mode: Some(mode),
                block: 2,
                count: 2000,
                displacement: 40,
                options: options(method),
                strided_memory: mode == TransferMode::Pack,
            };
            let path = format!("/framed-{}-{}-{slots}", method.name(), mode.name());
            run(&cluster, &path, &case, salt);
            salt += 1;
        }
    }
}

#[test]
fn two_phase_rounds_and_aggregators_follow_the_hints() {
    let cluster = Cluster::start(2);
    for (index, (cb_buffer_bytes, cb_nodes)) in [
        (4096u64, None),
        (4096, Some(1)),
        (8192, Some(3)),
        (1 << 20, Some(4)),
    ]
    .into_iter()
    .enumerate()
    {
        let case = Case {
            processes: 4,
            slots: 4,
            tcp_mode: None,
            block: 5,
            count: 4000,
            displacement: 12,
            options: CollectiveOptions {
                method: CollectiveMethod::TwoPhase,
                cb_buffer_bytes,
                cb_nodes,
                ..CollectiveOptions::default()
            },
            strided_memory: index % 2 == 1,
        };
        run(&cluster, &format!("/rounds-{index}"), &case, 77);
    }
}

#[test]
fn server_directed_requests_split_into_rounds_stay_correct() {
    let cluster = Cluster::start(2);
    let case = Case {
        processes: 3,
        slots: 3,
        tcp_mode: None,
        block: 2,
        count: 30_000,
        displacement: 8,
        options: CollectiveOptions {
            method: CollectiveMethod::ServerDirected,
            // Many requests per server per process: several collective rounds.
            request_bytes_max: Some(4096),
            ..CollectiveOptions::default()
        },
        strided_memory: false,
    };
    run(&cluster, "/sd-rounds", &case, 5);
}

#[test]
fn overlapping_collective_writes_keep_the_highest_rank() {
    let cluster = Cluster::start(2);
    for method in [CollectiveMethod::TwoPhase, CollectiveMethod::ServerDirected] {
        let path = format!("/overlap-{}", method.name());
        cluster
            .client()
            .create(&path, &CreateOptions::default())
            .unwrap();
        let group = ThreadCommunicator::group(3, Duration::from_secs(30));
        std::thread::scope(|scope| {
            for member in group {
                let (cluster, path) = (&cluster, &path);
                scope.spawn(move || {
                    let mut viewed =
                        ViewedFile::new(cluster.client().open(path, OpenMode::ReadWrite).unwrap());
                    let fill = vec![u8::try_from(member.rank()).unwrap() + 1; 10_000];
                    // Rank r writes bytes [r·1000, r·1000 + 10000): all overlap.
                    let offset = member.rank() as u64 * 1000;
                    viewed
                        .write_all(
                            &member,
                            &options(method),
                            offset,
                            &fill,
                            &Datatype::byte(),
                            10_000,
                        )
                        .unwrap();
                });
            }
        });
        let mut bytes = vec![0u8; 12_000];
        cluster
            .client()
            .open(&path, OpenMode::ReadWrite)
            .unwrap()
            .read_at(0, &mut bytes)
            .unwrap();
        for (offset, &byte) in bytes.iter().enumerate() {
            let highest = (offset / 1000).min(2) + 1;
            assert_eq!(usize::from(byte), highest, "{path}: byte {offset}");
        }
    }
}

#[test]
fn a_participant_that_never_arrives_fails_the_collective_by_name() {
    let cluster = Cluster::start(1);
    let client: Client = cluster.client();
    let file = client
        .create("/missing", &CreateOptions::default())
        .unwrap();
    let mut viewed = ViewedFile::new(file);
    viewed.set_view(0, &interleaved(0, 2, 1)).unwrap();
    let options = CollectiveOptions {
        method: CollectiveMethod::ServerDirected,
        wait_ms: 300,
        ..CollectiveOptions::default()
    };
    assert!(options.wait_ms < COLLECTIVE_WAIT_MS_DEFAULT);
    let data = values(0, 100, 0);
    let error = viewed
        .write_all(
            &Phantom { span: None },
            &options,
            0,
            &data,
            &Datatype::bytes(4).unwrap(),
            100,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("collective 0x"), "{error}");
    assert!(
        error.contains("1 of 2 participants arrived within 300 ms"),
        "{error}"
    );
    // The same for a read; and the server is still fine afterwards.
    let mut back = vec![0u8; data.len()];
    let error = viewed
        .read_all(
            &Phantom { span: None },
            &options,
            0,
            &mut back,
            &Datatype::bytes(4).unwrap(),
            100,
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("1 of 2 participants arrived"), "{error}");
    let single = ThreadCommunicator::group(1, Duration::from_secs(5));
    viewed
        .write_all(
            &single[0],
            &options,
            0,
            &data,
            &Datatype::bytes(4).unwrap(),
            100,
        )
        .unwrap();
    viewed
        .read_all(
            &single[0],
            &options,
            0,
            &mut back,
            &Datatype::bytes(4).unwrap(),
            100,
        )
        .unwrap();
    assert_eq!(back, data);
}

/// A communicator of one real process that pretends to be rank 0 of two: whatever it sends,
/// the phantom rank 1 "sends" the same, but never reaches a server. With a span, the phantom
/// reports the file span `[low, high)` for its part of the access instead (the exchange that
/// automatic collective buffering starts with: a status byte and two little-endian `i128`s).
struct Phantom {
    span: Option<(i128, i128)>,
}

impl Communicator for Phantom {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        2
    }
    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        if let (Some((low, high)), 33, Some(0)) = (self.span, data.len(), data.first().copied()) {
            let span = [&[0u8][..], &low.to_le_bytes(), &high.to_le_bytes()].concat();
            return Ok(vec![data.to_vec(), span]);
        }
        Ok(vec![data.to_vec(), data.to_vec()])
    }
    fn alltoallv(&self, data: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ClientError> {
        Ok(data)
    }
    fn barrier(&self) -> Result<(), ClientError> {
        Ok(())
    }
}

/// Automatic collective buffering (ROMIO's `automatic`, the default): a process whose file
/// span overlaps no other's writes and reads alone, so the phantom rank that never reaches a
/// server does not hold it up; where the spans overlap, or with `Enable`, the access goes by
/// the method and the server waits for the phantom in vain.
#[test]
fn automatic_buffering_sends_accesses_that_do_not_interleave_alone() {
    let cluster = Cluster::start(2);
    let file = cluster
        .client()
        .create("/automatic", &CreateOptions::default())
        .unwrap();
    let mut viewed = ViewedFile::new(file);
    let data = common::bytes(7, 64 << 10);
    let byte = Datatype::byte();
    for method in [CollectiveMethod::ServerDirected, CollectiveMethod::TwoPhase] {
        let options = CollectiveOptions {
            method,
            wait_ms: 300,
            ..CollectiveOptions::default()
        };
        // Rank 0 writes [64 KiB, 128 KiB); the phantom's span touches it without overlap.
        let apart = Phantom {
            span: Some((128 << 10, 1 << 20)),
        };
        let report = viewed
            .write_all(&apart, &options, 64 << 10, &data, &byte, data.len() as u64)
            .unwrap();
        assert_eq!(report.bytes, data.len() as u64, "{}", method.name());
        let mut back = vec![0u8; data.len()];
        viewed
            .read_all(
                &apart,
                &options,
                64 << 10,
                &mut back,
                &byte,
                data.len() as u64,
            )
            .unwrap();
        assert_eq!(back, data, "{}", method.name());
    }
    let overlapping = Phantom {
        span: Some((100 << 10, 200 << 10)),
    };
    let apart = Phantom {
        span: Some((0, 64 << 10)),
    };
    let server_directed = CollectiveOptions {
        method: CollectiveMethod::ServerDirected,
        wait_ms: 300,
        ..CollectiveOptions::default()
    };
    let enabled = CollectiveOptions {
        buffering: CollectiveBuffering::Enable,
        ..server_directed
    };
    for (communicator, options, what) in [
        (&overlapping, &server_directed, "overlapping spans"),
        (&apart, &enabled, "buffering enabled"),
    ] {
        let error = viewed
            .write_all(
                communicator,
                options,
                64 << 10,
                &data,
                &byte,
                data.len() as u64,
            )
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("1 of 2 participants arrived"),
            "{what}: {error}"
        );
    }
}

#[test]
fn a_collective_over_the_byte_limit_is_refused_naming_it() {
    let cluster = Cluster::start(1);
    cluster
        .client()
        .create("/big", &CreateOptions::default())
        .unwrap();
    let group = ThreadCommunicator::group(3, Duration::from_secs(30));
    let options = CollectiveOptions {
        method: CollectiveMethod::ServerDirected,
        // The blocks do not interleave: only an enabled collective buffering sends them by
        // the method.
        buffering: CollectiveBuffering::Enable,
        // Larger requests than the default, so three participants pass the server's limit.
        request_bytes_max: Some(16 << 20),
        ..CollectiveOptions::default()
    };
    let length: u64 = 12 << 20;
    let errors: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|member| {
                let cluster = &cluster;
                scope.spawn(move || {
                    let mut viewed = ViewedFile::new(
                        cluster.client().open("/big", OpenMode::ReadWrite).unwrap(),
                    );
                    let data = vec![1u8; usize::try_from(length).unwrap()];
                    let offset = member.rank() as u64 * length;
                    viewed
                        .write_all(&member, &options, offset, &data, &Datatype::byte(), length)
                        .unwrap_err()
                        .to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for error in errors {
        assert!(error.contains("collective_bytes_max"), "{error}");
    }
}
