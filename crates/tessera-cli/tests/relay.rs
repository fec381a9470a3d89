//! A handshake proof cannot be relayed (issue 35, hole 2), against real servers: with iod 1
//! stopped, a squatter binds its port and waits for the mds to dial it. It shows the mds the
//! nonce of another real server (iod 2, then the mds itself) as if iod 1 had sent it, and
//! forwards the mds's answer to that server. Before proofs named the server they were made
//! for, both accepted it as a server of the cluster (no capability needed): the squatter read
//! root's 0600 file and listed root's 0700 directory. Now both refuse it, and the cluster's
//! own clients go on being served.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::Cluster;
use tessera_client::{ClusterConfig, CreateOptions};
use tessera_proto::header::FLAG_REPLY;
use tessera_proto::{Challenge, ErrorCode, Header, Hello, Opcode, RemoteError, Wire, ROLE_IOD};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Writes one frame.
fn send(stream: &mut TcpStream, header: &Header, body: &[u8]) {
    stream
        .write_all(&[header.encode().as_slice(), body].concat())
        .unwrap();
}

/// What the real server answered the relayed `Hello` with.
fn relay_once(squatter: &TcpListener, victim: &str) -> Result<(), RemoteError> {
    // The mds dials iod 1's address: the squatter answers.
    let (mut mds, _) = squatter.accept().unwrap();
    mds.set_read_timeout(Some(TIMEOUT)).unwrap();
    // The squatter's own connection to the real server gives it a genuine nonce.
    let mut real = TcpStream::connect(victim).unwrap();
    real.set_read_timeout(Some(TIMEOUT)).unwrap();
    let (header, body) = common::read_frame(&mut real);
    assert_eq!(header.opcode, Opcode::Hello as u8);
    let genuine = Challenge::from_body(&body).unwrap();
    // Shown to the mds as iod 1's challenge: the role, index and cluster it expects there.
    let posed = Challenge {
        role: ROLE_IOD,
        server_index: 1,
        ..genuine
    };
    let challenge = posed.to_body();
    send(
        &mut mds,
        &Header {
            opcode: Opcode::Hello as u8,
            flags: FLAG_REPLY,
            request_id: 0,
            body_bytes: u32::try_from(challenge.len()).unwrap(),
            bulk_bytes: 0,
        },
        &challenge,
    );
    let (hello_header, hello) = common::read_frame(&mut mds);
    assert_eq!(hello_header.opcode, Opcode::Hello as u8);
    let decoded = Hello::from_body(&hello).unwrap();
    assert_eq!(
        decoded.credentials.principal,
        tessera_proto::Principal::Server,
        "the mds answers as a server of the cluster"
    );
    // Forwarded, byte for byte, to the real server.
    send(&mut real, &hello_header, &hello);
    let (reply, body) = common::read_frame(&mut real);
    drop(mds);
    if reply.is_error() {
        return Err(RemoteError::from_body(&body).unwrap());
    }
    // Accepted: the squatter speaks as a server. Show what that gives (nothing must).
    let mut rest = Vec::new();
    let _ = real.read_to_end(&mut rest);
    Ok(())
}

#[test]
fn a_proof_relayed_from_a_squatted_port_is_refused_by_every_other_server() {
    let cluster = Cluster::start(3);
    let config = ClusterConfig::load(&cluster.file()).unwrap();
    let client = cluster.client_with_timeout(Duration::from_secs(5));
    let before = client.create("/before", &CreateOptions::default()).unwrap();
    before.write_at(0, b"written before the squatter").unwrap();

    cluster.kill_iod(1);
    // The port is free once the iod is gone; another process of the host may hold it for a
    // moment (an outgoing connection's ephemeral port), so a few tries.
    let squatter = {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match TcpListener::bind(cluster.iod_address(1)) {
                Ok(squatter) => break squatter,
                Err(err) if std::time::Instant::now() < deadline => {
                    let _ = err;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => panic!("cannot bind iod 1's port: {err}"),
            }
        }
    };
    for victim in [config.iods[2].address.clone(), config.mds.address.clone()] {
        // A create striped over every iod makes the mds dial iod 1 (the squatter).
        let file_client = client.clone();
        let create = std::thread::spawn(move || {
            file_client
                .create("/needs-iod-1", &CreateOptions::default())
                .map(drop)
        });
        let relayed = relay_once(&squatter, &victim);
        let error = relayed.expect_err(&format!("{victim} accepted a proof made for iod 1"));
        assert_eq!(error.code, ErrorCode::PermissionDenied, "{error:?}");
        assert!(
            error.message.contains("made for another server"),
            "{error:?}"
        );
        // The create fails: iod 1 did not answer as the cluster's iod 1.
        assert!(create.join().unwrap().is_err());
    }
    // The real servers logged the refusals and go on serving the cluster's clients.
    for log in ["iod-2", "mds"] {
        let deadline = std::time::Instant::now() + TIMEOUT;
        while !cluster.log(log).contains("made for another server") {
            assert!(
                std::time::Instant::now() < deadline,
                "{log} did not log the refusal: {}",
                cluster.log(log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut back = vec![0u8; 27];
    before.read_at(0, &mut back).unwrap();
    assert_eq!(&back, b"written before the squatter");
}
