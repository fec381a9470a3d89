//! Integration and fault tests against real server processes on loopback.

// Test sizes and offsets are small; their casts cannot truncate.
#![allow(clippy::cast_possible_truncation)]

mod common;

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{bytes, tessera, Cluster};
use tessera_client::{ClientError, CreateOptions, ErrorCode, OpenMode, Piece, TransferMode};
use tessera_net::Connection;
use tessera_proto::limits::{LIST_PIECES_MAX, PIECE_BYTES_MAX};
use tessera_proto::{Header, Opcode};

fn code(result: Result<impl std::fmt::Debug, ClientError>) -> (ErrorCode, String) {
    let err = result.expect_err("expected an error");
    (err.code().expect("error has a code"), err.to_string())
}

#[test]
fn put_get_round_trip_survives_restart() {
    let cluster = Cluster::start(4);
    let local = cluster.path().join("input");
    let data = bytes(7, (12 << 20) + 12345);
    std::fs::write(&local, &data).unwrap();
    let file = cluster.file();
    let cluster_arg = file.to_str().unwrap();
    let output = tessera(&[
        "put",
        local.to_str().unwrap(),
        "/big",
        "--cluster",
        cluster_arg,
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stat = tessera(&["stat", "/big", "--cluster", cluster_arg]);
    assert!(String::from_utf8_lossy(&stat.stdout).contains(&format!("({} bytes)", data.len())));

    cluster.down();
    cluster.up(4);
    let file = cluster.file();
    let back = cluster.path().join("output");
    let output = tessera(&[
        "get",
        "/big",
        back.to_str().unwrap(),
        "--cluster",
        file.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        std::fs::read(&back).unwrap() == data,
        "bytes differ after down + up"
    );
    assert_eq!(
        cluster.client().stat("/big").unwrap().size,
        data.len() as u64
    );
}

#[test]
fn get_of_a_missing_path_names_it() {
    let cluster = Cluster::start(2);
    let file = cluster.file();
    let output = tessera(&[
        "get",
        "/no/such/file",
        "/tmp/unused",
        "--cluster",
        file.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/no/such/file") && stderr.contains("not found"),
        "{stderr}"
    );
    let output = tessera(&["ls", "/"]);
    assert!(
        !output.status.success(),
        "no cluster given must be an error"
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("TESSERA_CLUSTER"));
}

#[test]
fn namespace_operations_and_bad_input() {
    let cluster = Cluster::start(3);
    let client = cluster.client();
    client.mkdir("/d", 0o750).unwrap();
    let file = client
        .create(
            "/d/f",
            &CreateOptions {
                exclusive: true,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    assert_eq!(file.layout().servers().len(), 3);
    assert_eq!(
        code(client.create(
            "/d/f",
            &CreateOptions {
                exclusive: true,
                ..CreateOptions::default()
            }
        ))
        .0,
        ErrorCode::Exists
    );
    file.write_at(100, b"hello").unwrap();
    assert_eq!(client.stat("/d/f").unwrap().size, 105);

    // Truncate grows with zeros and shrinks.
    client.truncate("/d/f", 300_000).unwrap();
    assert_eq!(client.stat("/d/f").unwrap().size, 300_000);
    let mut tail = vec![1u8; 10];
    file.read_at(299_990, &mut tail).unwrap();
    assert_eq!(tail, vec![0u8; 10]);
    client.truncate("/d/f", 102).unwrap();
    assert_eq!(client.stat("/d/f").unwrap().size, 102);
    let mut head = [0u8; 5];
    file.read_at(100, &mut head).unwrap();
    assert_eq!(&head, b"he\0\0\0");

    client.rename("/d/f", "/g").unwrap();
    let names: Vec<String> = client
        .readdir("/")
        .unwrap()
        .into_iter()
        .map(|entry| entry.name)
        .collect();
    assert_eq!(names, ["d", "g"]);
    assert_eq!(code(client.rmdir("/g")).0, ErrorCode::NotDirectory);
    client.unlink("/g").unwrap();
    client.rmdir("/d").unwrap();
    assert_eq!(client.readdir("/").unwrap().len(), 0);

    // Unknown paths and wrong modes, each named.
    let (found, message) = code(client.stat("/nope"));
    assert_eq!(found, ErrorCode::NotFound);
    assert!(message.contains("/nope"), "{message}");
    assert_eq!(
        code(client.open("/nope", OpenMode::ReadOnly)).0,
        ErrorCode::NotFound
    );
    let (found, message) = code(client.mkdir("/m", 0o20000));
    assert_eq!(found, ErrorCode::InvalidArgument);
    assert!(message.contains("mode"), "{message}");
    client.mkdir("/dir", 0o755).unwrap();
    assert_eq!(
        code(client.open("/dir", OpenMode::ReadOnly)).0,
        ErrorCode::IsDirectory
    );
    client.create("/ro", &CreateOptions::default()).unwrap();
    let read_only = client.open("/ro", OpenMode::ReadOnly).unwrap();
    let (found, message) = code(read_only.write_at(0, b"x"));
    assert_eq!(found, ErrorCode::PermissionDenied);
    assert!(message.contains("/ro"), "{message}");
    assert_eq!(
        code(client.mkdir("relative", 0o755)).0,
        ErrorCode::InvalidArgument
    );
    let (found, message) = code(client.create(
        "/wide",
        &CreateOptions {
            server_count: 9,
            ..CreateOptions::default()
        },
    ));
    assert_eq!(found, ErrorCode::InvalidArgument);
    assert!(message.contains("9 servers"), "{message}");
}

#[test]
fn list_io_limits_totals_and_zero_length_pieces() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    let file = client
        .create(
            "/l",
            &CreateOptions {
                stripe_unit_bytes: 4096,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    let data = bytes(3, 3000);

    // Totals that differ.
    let (found, message) = code(file.write_list(&[IoSlice::new(&data)], &[Piece::new(0, 2999)]));
    assert_eq!(found, ErrorCode::InvalidArgument);
    assert!(
        message.contains("3000") && message.contains("2999"),
        "{message}"
    );

    // Zero-length pieces on both sides are no-ops; the rest lands.
    let memory = [
        IoSlice::new(&data[..0]),
        IoSlice::new(&data[..1000]),
        IoSlice::new(&[]),
        IoSlice::new(&data[1000..]),
    ];
    let pieces = [
        Piece::new(50_000, 0),
        Piece::new(10_000, 1000),
        Piece::new(0, 0),
        Piece::new(20_000, 2000),
    ];
    let report = file.write_list(&memory, &pieces).unwrap();
    assert_eq!(report.bytes, 3000);
    // [10000, 11000) lies in one 4 KiB unit; [20000, 22000) crosses the unit boundary at 20480.
    assert_eq!(report.storage_pieces, 3);
    let mut back = vec![0u8; 3000];
    let (first, second) = back.split_at_mut(1000);
    file.read_list(
        &mut [IoSliceMut::new(first), IoSliceMut::new(second)],
        &[Piece::new(10_000, 1000), Piece::new(20_000, 2000)],
    )
    .unwrap();
    assert!(back == data);
    assert_eq!(file.stat().unwrap().size, 22_000);

    // Lists and pieces over the named limits.
    let many = vec![Piece::new(0, 0); LIST_PIECES_MAX + 1];
    let (found, message) = code(file.write_list(&[], &many));
    assert_eq!(found, ErrorCode::LimitExceeded);
    assert!(message.contains("list_pieces_max"), "{message}");
    let (found, message) = code(file.read_list(&mut [], &[Piece::new(0, PIECE_BYTES_MAX + 1)]));
    assert_eq!(found, ErrorCode::LimitExceeded);
    assert!(message.contains("piece_bytes_max"), "{message}");
    let (found, message) = code(file.write_list(
        &[],
        &[Piece::new(u64::MAX - 5, 0), Piece::new(u64::MAX - 1, 1)],
    ));
    assert_eq!(found, ErrorCode::LimitExceeded, "{message}");
}

#[test]
fn transfer_modes_move_the_same_bytes_with_their_message_counts() {
    let cluster = Cluster::start(4);
    // The framed modes: data in messages over TCP (tests/local.rs covers one-sided ones).
    let client = cluster.tcp_client();
    let mut file = client.create("/modes", &CreateOptions::default()).unwrap();
    // One storage call per piece, so the counts below do not depend on the cost model.
    file.set_storage_plan(tessera_proto::StoragePlan::PerPiece);
    // 64 pieces of 100 bytes every 1000 bytes: all inside the first stripe unit of iod 0's
    // share... spread over the 4 servers by choosing offsets in 4 different units.
    let pieces: Vec<Piece> = (0..64u64)
        .map(|i| Piece::new((i % 4) * 65_536 + (i / 4) * 1000, 100))
        .collect();
    for (round, mode) in TransferMode::FRAMED.into_iter().enumerate() {
        file.set_transfer_mode(mode);
        let data = bytes(round as u64 + 10, 6400);
        let memory: Vec<IoSlice<'_>> = data.chunks(100).map(IoSlice::new).collect();
        let report = file.write_list(&memory, &pieces).unwrap();
        assert_eq!(report.requests, 4, "{mode:?}: one request per server");
        assert_eq!(report.storage_pieces, 64);
        let expected_messages = if mode == TransferMode::Multiple {
            4 + 64
        } else {
            4
        };
        assert_eq!(report.messages_sent, expected_messages, "{mode:?}");
        assert_eq!(
            report.bytes_copied,
            if mode == TransferMode::Pack { 6400 } else { 0 }
        );
        let mut back = vec![0u8; 6400];
        let mut slices: Vec<IoSliceMut<'_>> = back.chunks_mut(100).map(IoSliceMut::new).collect();
        let report = file.read_list(&mut slices, &pieces).unwrap();
        assert_eq!(report.messages_received, expected_messages, "{mode:?}");
        assert!(back == data, "{mode:?}: read-back differs");
    }
}

#[test]
fn concurrent_clients_write_disjoint_pieces() {
    let cluster = Cluster::start(4);
    let client = cluster.client();
    client
        .create(
            "/shared",
            &CreateOptions {
                stripe_unit_bytes: 1024,
                ..CreateOptions::default()
            },
        )
        .unwrap();
    std::thread::scope(|scope| {
        for rank in 0..4u64 {
            let client = cluster.client();
            scope.spawn(move || {
                let file = client.open("/shared", OpenMode::WriteOnly).unwrap();
                let pieces: Vec<Piece> = (0..200)
                    .map(|i| Piece::new((i * 4 + rank) * 300, 300))
                    .collect();
                let data = vec![rank as u8 + 1; 60_000];
                file.write_list(&[IoSlice::new(&data)], &pieces).unwrap();
            });
        }
    });
    let file = client.open("/shared", OpenMode::ReadOnly).unwrap();
    let mut all = vec![0u8; 240_000];
    file.read_at(0, &mut all).unwrap();
    for (index, byte) in all.iter().enumerate() {
        assert_eq!(
            u64::from(*byte),
            (index as u64 / 300) % 4 + 1,
            "byte {index}"
        );
    }
}

/// The server closes the connection (cleanly, or with a reset if bytes were left unread).
fn assert_closed(mut stream: TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sink = Vec::new();
    match stream.read_to_end(&mut sink) {
        Ok(read) => assert_eq!(read, 0, "the server sent {sink:?} instead of closing"),
        Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}"),
    }
}

/// The uid this test process authenticates as.
fn connection_uid() -> u32 {
    tessera_auth::authenticator::process_ids().0
}

#[test]
fn unknown_handle_and_malformed_messages() {
    let cluster = Cluster::start(2);
    let address = cluster.iod_address(0);
    let mut connection = Connection::connect(
        "iod 0",
        &address,
        Duration::from_secs(5),
        &cluster.signer(),
        None,
    )
    .unwrap();
    // A well-signed capability for a handle no file has.
    let uid = connection_uid();
    let capability = cluster.capability(
        0xdead_beef,
        tessera_auth::Rights::READ,
        uid,
        tessera_auth::now_s() + 60,
    );
    let read = tessera_proto::Read {
        handle: 0xdead_beef,
        capability,
        mode: TransferMode::Gather,
        storage: tessera_proto::StoragePlan::Auto,
        pieces: vec![Piece::new(0, 10)],
    };
    connection.send_request(&read).unwrap();
    let mut nowhere = tessera_net::PieceDataMut::default();
    let mut buffer = [0u8; 10];
    nowhere.slices.push(IoSliceMut::new(&mut buffer));
    nowhere.piece_ends.push(1);
    let err = connection
        .recv_read(
            &read,
            tessera_client::Transfer::Framed(TransferMode::Gather),
            &mut nowhere,
        )
        .unwrap_err();
    let remote = err.remote().expect("an error reply");
    assert_eq!(remote.code, ErrorCode::UnknownHandle);
    assert!(remote.message.contains("0xdeadbeef"), "{}", remote.message);
    // The connection stays usable after an error reply.
    assert_eq!(
        connection
            .call(&tessera_proto::Ping {})
            .unwrap()
            .server_index,
        0
    );

    // Garbage, then a truncated frame, on authenticated connections: each connection is
    // dropped with one log line.
    let signer = cluster.signer();
    let connect = || {
        let mut stream = TcpStream::connect(&address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        common::authenticate(&mut stream, &signer).unwrap();
        stream
    };
    let mut garbage = connect();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_closed(garbage);
    let mut truncated = connect();
    let header = Header {
        opcode: Opcode::Write as u8,
        flags: 0,
        request_id: 1,
        body_bytes: 100,
        bulk_bytes: 0,
    };
    truncated.write_all(&header.encode()).unwrap();
    truncated.write_all(&[0u8; 10]).unwrap();
    drop(truncated);
    // An over-limit body length is refused before anything is allocated.
    let mut huge = connect();
    let mut bytes = Header {
        opcode: Opcode::Read as u8,
        flags: 0,
        request_id: 1,
        body_bytes: 0,
        bulk_bytes: 0,
    }
    .encode();
    bytes[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    huge.write_all(&bytes).unwrap();
    assert_closed(huge);
    // Garbage instead of a handshake: refused, with one line naming the failed handshake.
    let mut unauthenticated = TcpStream::connect(&address).unwrap();
    unauthenticated
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    common::read_frame(&mut unauthenticated);
    unauthenticated
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_closed(unauthenticated);

    // Others are still served.
    let client = cluster.client();
    let file = client.create("/still", &CreateOptions::default()).unwrap();
    file.write_at(0, b"served").unwrap();
    let mut back = [0u8; 6];
    file.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"served");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = cluster.log("iod-0");
        let drops = log
            .lines()
            .filter(|line| line.contains("dropping connection"))
            .count();
        let refusals = log
            .lines()
            .filter(|line| line.contains("refusing") && line.contains("authentication failed"))
            .count();
        if drops >= 3 && refusals >= 1 {
            assert!(log.contains("bad magic"), "{log}");
            assert!(log.contains("message_body_bytes_max"), "{log}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected 3 dropped connections in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to 10 s) until process `pid` is in one of `states` (as `/proc/PID/stat` shows
/// them) or gone: signals are delivered asynchronously, and a loaded machine may take a
/// while to stop or reap a server.
fn wait_for_state(pid: i32, states: &[char]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        // The state follows the command name, which is in parentheses.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.trim().chars().next());
        if state.is_some_and(|state| states.contains(&state)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("process {pid} did not reach state {states:?}");
}

#[test]
fn a_down_or_silent_server_is_named_within_the_timeout() {
    let cluster = Cluster::start(3);
    let client = cluster.client_with_timeout(Duration::from_secs(1));
    let file = client.create("/f", &CreateOptions::default()).unwrap();
    file.write_at(0, &vec![9u8; 300_000]).unwrap();

    // A stopped (silent) server: a timeout naming it.
    let pid = cluster.pid("iod-1");
    // SAFETY: signalling a child process of the test's cluster.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_for_state(pid, &['T']);
    let started = Instant::now();
    let mut buffer = vec![0u8; 300_000];
    let (found, message) = code(file.read_at(0, &mut buffer));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(found, ErrorCode::Unavailable);
    assert!(
        message.contains("iod 1") && message.contains("did not answer"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    // After it resumes, the client reconnects and reads the data.
    file.read_at(0, &mut buffer).unwrap();
    assert!(buffer.iter().all(|&byte| byte == 9));

    // A killed server: an error naming it, at once.
    let pid = cluster.pid("iod-2");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_for_state(pid, &['Z', 'X']);
    let (found, message) = code(file.read_at(0, &mut buffer));
    assert_eq!(found, ErrorCode::Unavailable);
    assert!(message.contains("iod 2"), "{message}");
    let (_, message) = code(client.stat("/f"));
    assert!(
        message.contains("iod 2"),
        "stat needs every server: {message}"
    );
}

/// `tessera demo` forwards to tessera-bench, which writes and verifies its array (the
/// benches' own tests are in crates/tessera-bench/tests).
#[test]
fn demo_verifies_its_data() {
    let cluster = Cluster::start(4);
    let file = cluster.file();
    let output = tessera(&["demo", "--size", "256", "--cluster", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("16 requests") && stdout.contains("verified"),
        "{stdout}"
    );
}

/// The mode bits of `path` (permission bits only).
fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Every data directory, object, namespace store and log of a cluster is its owner's alone
/// (issue 16's data at rest), whatever the umask, and a cluster directory an older version
/// left readable is made so at the next `up`.
#[test]
fn data_at_rest_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client.create("/secret", &CreateOptions::default()).unwrap();
    file.write_at(0, &bytes(3, 300_000)).unwrap();
    let dir = cluster.path();
    let check = |what: &str| {
        let mut files = vec![dir.join("mds/meta.redb")];
        let mut dirs = vec![dir.join("mds"), dir.join("log")];
        for entry in std::fs::read_dir(dir.join("log")).unwrap() {
            files.push(entry.unwrap().path());
        }
        for index in 0..2 {
            let data = dir.join(format!("iod-{index}"));
            let objects = data.join("objects");
            let mut count = 0;
            for entry in std::fs::read_dir(&objects).unwrap() {
                files.push(entry.unwrap().path());
                count += 1;
            }
            assert!(count >= 1, "{what}: iod {index} holds no object");
            // The namespace the iod belongs to, recorded at the mds's first create.
            files.push(data.join("namespace"));
            dirs.extend([data, objects]);
        }
        for path in &dirs {
            assert_eq!(mode_of(path), 0o700, "{what}: {}", path.display());
        }
        for path in &files {
            assert_eq!(mode_of(path), 0o600, "{what}: {}", path.display());
        }
        files.len()
    };
    assert!(check("a new cluster") >= 5);
    // As an older version left them: readable by all. The next up makes them private again.
    cluster.down();
    for path in ["mds", "log", "iod-0", "iod-0/objects", "iod-1"] {
        std::fs::set_permissions(dir.join(path), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        dir.join("mds/meta.redb"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    cluster.up(2);
    check("a cluster restarted");
    let mut back = vec![0u8; 300_000];
    cluster
        .client()
        .open("/secret", OpenMode::ReadWrite)
        .unwrap()
        .read_at(0, &mut back)
        .unwrap();
    assert_eq!(back, bytes(3, 300_000));
}
