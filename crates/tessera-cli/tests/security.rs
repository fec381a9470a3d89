//! Who may talk to a cluster and what they may touch (issue 16), against real servers:
//! the handshake with the cluster key, credentials in namespace calls, capabilities on every
//! data request to an iod. Each refusal is checked for its reason, for leaving the data as it
//! was, and for the server going on serving.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::Cluster;
use tessera_auth::handshake::sign_credentials;
use tessera_auth::{Authenticator, ClusterKey, Grant, KeySigner, Rights};
use tessera_client::{ClusterConfig, CreateOptions, OpenMode};
use tessera_net::{Connection, NetError};
use tessera_proto::{
    Capability, Challenge, Credentials, ErrorCode, Header, LeaseAcquire, Lookup, ObjectCreate,
    ObjectCreateMany, ObjectRemove, Opcode, Piece, Read, RemoteError, StoragePlan, TransferMode,
    Wire,
};

const TIMEOUT: Duration = Duration::from_secs(10);

fn uid() -> u32 {
    tessera_auth::authenticator::process_ids().0
}

fn in_a_minute() -> u64 {
    tessera_auth::now_s() + 60
}

/// A raw connection to iod `index`, authenticated with the cluster key as this process.
fn iod(cluster: &Cluster, index: usize) -> Connection {
    Connection::connect(
        format!("iod {index}"),
        &cluster.iod_address(index),
        TIMEOUT,
        &cluster.signer(),
        None,
    )
    .unwrap()
}

/// Reads `length` bytes at offset 0 of `handle`'s object on `connection`, carrying
/// `capability`.
fn raw_read(
    connection: &mut Connection,
    handle: u64,
    capability: Capability,
    length: u64,
) -> Result<Vec<u8>, RemoteError> {
    let read = Read {
        handle,
        capability,
        mode: TransferMode::Pack,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(0, length)],
    };
    connection.send_request(&read).unwrap();
    let mut buffer = vec![0u8; usize::try_from(length).unwrap()];
    let mut data = tessera_net::PieceDataMut::default();
    data.slices.push(std::io::IoSliceMut::new(&mut buffer));
    data.piece_ends.push(1);
    match connection.recv_read(
        &read,
        tessera_client::Transfer::Framed(TransferMode::Pack),
        &mut data,
    ) {
        Ok(_) => Ok(buffer),
        Err(NetError::Remote { error, .. }) => Err(error),
        Err(other) => panic!("the connection broke instead of a refusal: {other}"),
    }
}

/// Writes `data` at offset 0 of `handle`'s object, carrying `capability`.
fn raw_write(
    connection: &mut Connection,
    handle: u64,
    capability: Capability,
    data: &[u8],
) -> Result<(), RemoteError> {
    let write = tessera_proto::Write {
        handle,
        capability,
        mode: TransferMode::Gather,
        storage: StoragePlan::Auto,
        pieces: vec![Piece::new(0, data.len() as u64)],
    };
    let pieces = tessera_net::PieceData {
        slices: vec![std::io::IoSlice::new(data)],
        piece_ends: vec![1],
    };
    connection
        .send_write(
            &write,
            tessera_client::Transfer::Framed(TransferMode::Gather),
            &pieces,
        )
        .unwrap();
    match connection.recv_write() {
        Ok(_) => Ok(()),
        Err(NetError::Remote { error, .. }) => Err(error),
        Err(other) => panic!("the connection broke instead of a refusal: {other}"),
    }
}

fn assert_denied(result: Result<impl std::fmt::Debug, RemoteError>, words: &str) {
    let error = result.expect_err("refused");
    assert_eq!(error.code, ErrorCode::PermissionDenied, "{}", error.message);
    assert!(
        error.message.contains(words),
        "{:?} does not say {words:?}",
        error.message
    );
}

/// A raw request to an iod, naming a guessed handle, is refused without a valid capability
/// for it: none, forged, expired, another file's, read rights used to write. The same
/// request with a valid capability is served, on the same connection.
#[test]
fn a_raw_iod_request_needs_a_capability_for_its_handle_and_rights() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    let secret = client.create("/secret", &CreateOptions::default()).unwrap();
    secret.write_at(0, b"top secret bytes").unwrap();
    let other = client.create("/other", &CreateOptions::default()).unwrap();
    let handle = secret.handle();
    let mut connection = iod(&cluster, 0);
    let wrong_key = ClusterKey::from_bytes([7; 32]);
    let grant = |rights, expires_s| Grant {
        handle,
        rights,
        uid: uid(),
        expires_s,
        epoch: 1,
    };

    assert_denied(
        raw_read(&mut connection, handle, Capability::default(), 16),
        "no capability",
    );
    let forged = grant(Rights::READ_WRITE, in_a_minute()).sign(&wrong_key);
    assert_denied(
        raw_read(&mut connection, handle, forged.clone(), 16),
        "not signed with this cluster's key",
    );
    let expired = cluster.capability(handle, Rights::READ, uid(), tessera_auth::now_s() - 1);
    assert_denied(raw_read(&mut connection, handle, expired, 16), "expired");
    let others = other.capability().unwrap();
    assert_denied(
        raw_read(&mut connection, handle, others, 16),
        &format!("for handle {:#x}, not {handle:#x}", other.handle()),
    );
    let read_only = cluster.capability(handle, Rights::READ, uid(), in_a_minute());
    assert_denied(
        raw_write(
            &mut connection,
            handle,
            read_only.clone(),
            b"overwritten!!!!!",
        ),
        "grants read access, and this request needs write",
    );
    assert_denied(
        raw_write(&mut connection, handle, forged, b"overwritten!!!!!"),
        "not signed",
    );
    let someone_elses = cluster.capability(handle, Rights::READ, uid() + 1, in_a_minute());
    assert_denied(
        raw_read(&mut connection, handle, someone_elses, 16),
        "this connection speaks for uid",
    );
    // A user's connection may not create, empty or remove objects: only the mds may.
    for refused in [
        connection
            .call(&ObjectCreate {
                handle,
                namespace: 1,
                cache_unit_bytes: 0,
            })
            .map(drop),
        connection
            .call(&ObjectRemove {
                handle,
                namespace: 1,
            })
            .map(drop),
        // Nor make objects ahead: a user could squat handles the mds will hand out.
        connection
            .call(&ObjectCreateMany {
                namespace: 1,
                cache_unit_bytes: 0,
                handles: vec![handle + 1, handle + 2],
            })
            .map(drop),
    ] {
        let error = refused.unwrap_err();
        let remote = error.remote().expect("a refusal");
        assert_eq!(remote.code, ErrorCode::PermissionDenied, "{remote:?}");
        assert!(
            remote.message.contains("only the metadata server"),
            "{remote:?}"
        );
    }
    // A write lease lets a client hold back writes others will read: it needs the write
    // right, not only the read right of a read lease (asked on the other file, whose lease
    // then holds up no later read here).
    let mut channel = iod(&cluster, 0);
    channel.listen_for_leases(0x5eed).unwrap();
    let lease = |capability| LeaseAcquire {
        handle: other.handle(),
        capability,
        client_id: 0x5eed,
        demotes: false,
        write: true,
        start: 0,
        end: 16,
        group: 0,
    };
    let other_read_only = cluster.capability(other.handle(), Rights::READ, uid(), in_a_minute());
    let refused = connection.call(&lease(other_read_only)).unwrap_err();
    let remote = refused.remote().expect("a refusal");
    assert_eq!(remote.code, ErrorCode::PermissionDenied, "{remote:?}");
    assert!(remote.message.contains("needs write"), "{remote:?}");
    let read_write = cluster.capability(other.handle(), Rights::READ_WRITE, uid(), in_a_minute());
    let granted = connection.call(&lease(read_write)).unwrap();
    assert!(granted.lease_ms > 0, "{granted:?}");
    assert_eq!((granted.start, granted.end), (0, u64::MAX), "{granted:?}");
    drop(channel);
    // The valid capability is served on the same connection, and nothing was changed.
    assert_eq!(
        raw_read(&mut connection, handle, read_only, 16).unwrap(),
        b"top secret bytes"
    );
    let mut back = [0u8; 16];
    secret.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"top secret bytes");
    assert_eq!(secret.stat().unwrap().size, 16);
}

/// A process with a wrong key is refused by the mds and by every iod at the handshake, with
/// one log line each; a server without the key is refused by the client; a handshake
/// recorded on one connection does not open another.
#[test]
fn a_wrong_key_or_a_replayed_handshake_is_refused() {
    let cluster = Cluster::start(2);
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let wrong = KeySigner::process(ClusterKey::from_bytes([9; 32]));
    let mut servers = vec![("mds", config.mds.address.clone())];
    servers.extend(config.iods.iter().map(|iod| ("iod", iod.address.clone())));
    for (name, address) in &servers {
        let error = Connection::connect(*name, address, TIMEOUT, &wrong, None).unwrap_err();
        let remote = error.remote().expect("refused with a reason");
        assert_eq!(remote.code, ErrorCode::PermissionDenied);
        assert!(
            remote
                .message
                .contains("not signed with this cluster's key"),
            "{remote:?}"
        );
    }
    // One log line per refused peer (the servers log after answering: wait for it).
    for log in ["mds", "iod-0", "iod-1"] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let refusals = loop {
            let refusals = cluster
                .log(log)
                .lines()
                .filter(|line| line.contains("refusing") && line.contains("authentication failed"))
                .count();
            if refusals > 0 || std::time::Instant::now() > deadline {
                break refusals;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(refusals, 1, "{log} logs one line per refused peer");
    }

    // A recorded Hello, replayed on a new connection, answers the wrong nonce.
    let key = cluster.key();
    let mut first = TcpStream::connect(&config.mds.address).unwrap();
    first.set_read_timeout(Some(TIMEOUT)).unwrap();
    let (_, body) = common::read_frame(&mut first);
    let challenge = Challenge::from_body(&body).unwrap();
    let signer = KeySigner::user(key.clone(), (uid(), 0, Vec::new()));
    let (hello, _) = signer.hello(&challenge).unwrap();
    send_frame(&mut first, Opcode::Hello, &hello.to_body());
    let (welcome, _) = common::read_frame(&mut first);
    assert!(!welcome.is_error(), "the genuine handshake is accepted");
    let mut replay = TcpStream::connect(&config.mds.address).unwrap();
    replay.set_read_timeout(Some(TIMEOUT)).unwrap();
    common::read_frame(&mut replay);
    send_frame(&mut replay, Opcode::Hello, &hello.to_body());
    let (refusal, body) = common::read_frame(&mut replay);
    assert!(refusal.is_error());
    let error = RemoteError::from_body(&body).unwrap();
    assert!(error.message.contains("handshake proof"), "{error:?}");

    // A server without the key cannot pose as one: its welcome does not verify.
    let impostor = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = impostor.local_addr().unwrap().to_string();
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = impostor.accept().unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let challenge = Challenge {
            role: tessera_proto::ROLE_MDS,
            server_index: 0,
            cluster_id: 0,
            nonce: tessera_proto::Nonce([1; 32]),
        };
        write_reply(&mut stream, 0, &challenge.to_body());
        let (hello, _) = common::read_frame(&mut stream);
        let welcome = tessera_proto::Welcome {
            proof: tessera_proto::Mac([2; 32]),
        };
        write_reply(&mut stream, hello.request_id, &welcome.to_body());
        // Until the client hangs up.
        let _ = stream.read_to_end(&mut Vec::new());
    });
    let error =
        Connection::connect("impostor", &address, TIMEOUT, &cluster.signer(), None).unwrap_err();
    assert!(
        matches!(&error, NetError::Auth { detail, .. } if detail.contains("welcome is not signed")),
        "{error}"
    );
    fake.join().unwrap();

    // The servers go on serving the cluster's own clients.
    let client = cluster.client();
    let file = client.create("/after", &CreateOptions::default()).unwrap();
    file.write_at(0, b"still served").unwrap();
}

fn send_frame(stream: &mut TcpStream, opcode: Opcode, body: &[u8]) {
    let header = Header {
        opcode: opcode as u8,
        flags: 0,
        request_id: 1,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes: 0,
    };
    stream
        .write_all(&[header.encode().as_slice(), body].concat())
        .unwrap();
}

fn write_reply(stream: &mut TcpStream, request_id: u64, body: &[u8]) {
    let header = Header {
        opcode: Opcode::Hello as u8,
        flags: tessera_proto::header::FLAG_REPLY,
        request_id,
        body_bytes: u32::try_from(body.len()).unwrap(),
        bulk_bytes: 0,
    };
    stream
        .write_all(&[header.encode().as_slice(), body].concat())
        .unwrap();
}

/// The credential in a namespace call is believed only when it is signed, current and the
/// connection's own: a forged uid, an expired credential and another user's credential on
/// this connection are each refused, and the namespace is unchanged.
#[test]
fn a_forged_or_expired_credential_in_a_message_is_refused() {
    let cluster = Cluster::start(1);
    let client = cluster.client();
    client.create("/kept", &CreateOptions::default()).unwrap();
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let signer = cluster.signer();
    let mut mds = Connection::connect("mds", &config.mds.address, TIMEOUT, &signer, None).unwrap();
    let own = tessera_auth::Authenticator::credentials(&signer).unwrap();
    let lookup = |credentials: Credentials| Lookup {
        credentials,
        path: "/kept".to_owned(),
    };
    mds.call(&lookup(own.clone())).unwrap();
    let refused = |mds: &mut Connection, credentials: Credentials| {
        let error = mds.call(&lookup(credentials)).unwrap_err();
        error.remote().expect("a refusal").clone()
    };
    let mut forged = own.clone();
    forged.uid = own.uid + 1;
    let error = refused(&mut mds, forged);
    assert_eq!(error.code, ErrorCode::PermissionDenied);
    assert!(error.message.contains("not signed"), "{error:?}");
    let key = cluster.key();
    let mut old = own.clone();
    old.expires_s = tessera_auth::now_s() - 1;
    sign_credentials(&key, &mut old);
    assert!(refused(&mut mds, old).message.contains("expired"));
    let mut someone = own.clone();
    someone.uid = own.uid + 1;
    sign_credentials(&key, &mut someone);
    let error = refused(&mut mds, someone);
    assert!(
        error.message.contains("on a connection of uid"),
        "{error:?}"
    );
    // A stat by handle needs the capability an open returned, as every request by handle.
    let kept = client.open("/kept", OpenMode::ReadOnly).unwrap();
    let stat = |capability| tessera_proto::StatHandle {
        credentials: own.clone(),
        handle: kept.handle(),
        capability,
    };
    let error = mds.call(&stat(Capability::default())).unwrap_err();
    let error = error.remote().expect("a refusal");
    assert_eq!(error.code, ErrorCode::PermissionDenied);
    assert!(error.message.contains("no capability"), "{error:?}");
    let attr = mds.call(&stat(kept.capability().unwrap())).unwrap();
    assert_eq!(attr.handle, kept.handle());
    // The connection still serves its own credential.
    mds.call(&lookup(own)).unwrap();
    assert!(client.open("/kept", OpenMode::ReadOnly).is_ok());
}

/// A long-running program never sees its capability expire: the client renews it from the
/// mds before it runs out, while the old one is refused by the iods once expired.
#[test]
fn capabilities_are_renewed_before_they_expire() {
    let cluster = Cluster {
        dir: tempfile::tempdir().unwrap(),
    };
    let output = common::tessera(&[
        "up",
        "--servers",
        "1",
        "--dir",
        cluster.path().to_str().unwrap(),
        "--capability-seconds",
        "2",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let client = cluster.client();
    let file = client.create("/long", &CreateOptions::default()).unwrap();
    file.write_at(0, b"first").unwrap();
    let first = file.capability().unwrap();
    let grant = tessera_auth::Grant::parse(&first).unwrap();
    assert!(grant.expires_s <= tessera_auth::now_s() + 2, "{grant:?}");
    std::thread::sleep(Duration::from_millis(2500));
    // Past the first capability's life: the next call renews it and succeeds.
    file.write_at(5, b"second").unwrap();
    let second = file.capability().unwrap();
    assert_ne!(first, second, "renewed");
    let mut back = [0u8; 11];
    file.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"firstsecond");
    // The old one is refused by the iod.
    let mut connection = iod(&cluster, 0);
    assert_denied(
        raw_read(&mut connection, file.handle(), first, 5),
        "expired",
    );
    assert_eq!(
        raw_read(&mut connection, file.handle(), second, 5).unwrap(),
        b"first"
    );
}

/// A server at another index's address is refused before any request, by clients (a cluster
/// file with two iods swapped) and by the mds (an `--iod` list in the wrong order), and no
/// byte moves.
#[test]
fn a_server_at_the_wrong_address_is_refused_and_no_byte_moves() {
    let cluster = Cluster::start(2);
    let client = cluster.client();
    let file = client.create("/kept", &CreateOptions::default()).unwrap();
    let data = common::bytes(7, 256 << 10);
    file.write_at(0, &data).unwrap();

    // A client whose cluster file swaps iod 0 and iod 1.
    let mut config = ClusterConfig::load(&cluster.file()).unwrap();
    let (first, second) = (config.iods[0].clone(), config.iods[1].clone());
    config.iods[0].address = second.address;
    config.iods[0].local = second.local;
    config.iods[1].address = first.address;
    config.iods[1].local = first.local;
    let swapped = tessera_client::Client::new(&config, &tessera_client::ClientOptions::default());
    let opened = swapped.open("/kept", OpenMode::ReadWrite).unwrap();
    let error = opened
        .write_at(0, &vec![0u8; 256 << 10])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("expected iod 0, found iod 1")
            || error.contains("expected iod 1, found iod 0"),
        "{error}"
    );
    let mut back = vec![0u8; data.len()];
    assert!(opened.read_at(0, &mut back).is_err());

    // An mds started with the iods in the wrong order cannot create objects on them.
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let address_file = dir.path().join("mds.addr");
    let mut mds = std::process::Command::new(common::TESSERA)
        .args(["mds", "--db"])
        .arg(dir.path().join("meta.redb"))
        .arg("--key")
        .arg(cluster.path().join("key"))
        .args([
            "--iod",
            &config.iods[1].address,
            "--iod",
            &config.iods[0].address,
        ])
        .arg("--address-file")
        .arg(&address_file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !address_file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the second mds did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut wrong = config.clone();
    wrong.mds.address = std::fs::read_to_string(&address_file).unwrap();
    let through_it = tessera_client::Client::new(&wrong, &tessera_client::ClientOptions::default());
    let error = through_it
        .create("/new", &CreateOptions::default())
        .unwrap_err()
        .to_string();
    let _ = mds.kill();
    let _ = mds.wait();
    assert!(error.contains("expected iod 0, found iod 1"), "{error}");

    // The file is as it was.
    let mut back = vec![0u8; data.len()];
    file.read_at(0, &mut back).unwrap();
    assert!(back == data, "the swapped servers changed no byte");
}
