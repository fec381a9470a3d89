//! List round trips over libfabric with the `tcp;ofi_rxm` and `shm` providers: an initiator
//! writes ~1000 pieces of 100–5000 bytes into a target's registered memory, with piece
//! boundaries on the two sides that do not line up and more pieces than the providers'
//! iov limits, checks the target's memory by hash against a model, reads everything back into
//! a third layout and checks every byte (and that the gaps between pieces stay untouched). The
//! target is a second thread with its own endpoint, or a second process (this test binary,
//! started again to run `peer_process`). Every wait is bounded.

#![allow(
    clippy::too_many_lines,
    reason = "tests have no length budget (make tidy counts production code only)"
)]
#![cfg(feature = "ofi")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{from_hex, hash, pieces_for_total, to_hex, Piece, Rng, PROVIDERS};
use tessera_ofi::{
    Access, Addressing, Domain, Endpoint, LocalIov, OfiError, Peer, RemoteIov, RemoteRegion,
};

/// Bytes the target registers.
const TARGET_BYTES: usize = 8 << 20;
/// What the target's memory holds before any write.
const TARGET_FILL: u8 = 0xEE;
/// Pieces per side in a round trip.
const PIECES: usize = 1000;
/// Longest any test waits for a peer.
const PEER_DEADLINE: Duration = Duration::from_mins(2);
/// Completion timeout of the endpoints that try pieces outside the region.
const OUTSIDE_COMPLETION_TIMEOUT: Duration = Duration::from_secs(3);
/// Completion timeout of the initiators' endpoints.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(20);

/// What a target tells its initiator.
struct TargetInfo {
    name: Vec<u8>,
    region: RemoteRegion,
}

/// Serves one registered buffer: keeps the endpoint progressing and answers hash queries
/// until told to stop or `PEER_DEADLINE` passes.
fn serve_target(
    provider: &str,
    node: Option<&str>,
    commands: impl Fn() -> Option<String>,
    reply: impl Fn(String),
) {
    let domain = Domain::open(provider, node).expect("open domain");
    let endpoint = domain.endpoint().expect("open endpoint");
    let mut buffer = vec![TARGET_FILL; TARGET_BYTES].into_boxed_slice();
    let base = buffer.as_mut_ptr();
    // SAFETY: `buffer` lives to the end of this function, after the region is dropped; it is
    // only read (for hashing) after the initiator said its transfers completed.
    let region =
        unsafe { domain.register(base as usize, TARGET_BYTES, Access::ALL) }.expect("register");
    let remote = region.remote_region();
    reply(format!(
        "region {} {} {} {}",
        to_hex(endpoint.name()),
        remote.address,
        remote.length,
        remote.key
    ));
    let deadline = Instant::now() + PEER_DEADLINE;
    while Instant::now() < deadline {
        if endpoint.progress().expect("progress") == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
        match commands().as_deref() {
            Some("hash") => {
                // SAFETY: the initiator's transfers have completed (it asks only then), so no
                // peer writes the buffer while it is hashed.
                let bytes = unsafe { std::slice::from_raw_parts(base, TARGET_BYTES) };
                reply(format!("hash {}", hash(bytes)));
            }
            Some("quit") => break,
            _ => {}
        }
    }
    drop(region);
    drop(buffer);
}

fn parse_region(line: &str) -> TargetInfo {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 5, "region line {line:?}");
    assert_eq!(words[0], "region");
    TargetInfo {
        name: from_hex(words[1]),
        region: RemoteRegion {
            address: words[2].parse().expect("address"),
            length: words[3].parse().expect("length"),
            key: words[4].parse().expect("key"),
        },
    }
}

/// A target on another thread.
struct ThreadTarget {
    commands: mpsc::Sender<String>,
    replies: mpsc::Receiver<String>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ThreadTarget {
    fn start(provider: &'static str, node: Option<&'static str>) -> (ThreadTarget, TargetInfo) {
        let (command_sender, command_receiver) = mpsc::channel::<String>();
        let (reply_sender, reply_receiver) = mpsc::channel::<String>();
        let handle = std::thread::spawn(move || {
            serve_target(
                provider,
                node,
                || command_receiver.try_recv().ok(),
                |line| {
                    let _ = reply_sender.send(line);
                },
            );
        });
        let mut target = ThreadTarget {
            commands: command_sender,
            replies: reply_receiver,
            handle: Some(handle),
        };
        let info = parse_region(&target.reply());
        (target, info)
    }

    fn reply(&mut self) -> String {
        self.replies
            .recv_timeout(PEER_DEADLINE)
            .expect("target thread answers")
    }

    fn hash(&mut self) -> u64 {
        self.commands
            .send("hash".to_owned())
            .expect("target thread alive");
        let line = self.reply();
        line.strip_prefix("hash ")
            .expect("hash line")
            .parse()
            .expect("hash")
    }
}

impl Drop for ThreadTarget {
    fn drop(&mut self) {
        let _ = self.commands.send("quit".to_owned());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// A target in another process: this test binary running `peer_process`.
struct ProcessTarget {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
}

/// Prefix of the lines the child process means for its parent (libtest prints its own).
const PEER_LINE_PREFIX: &str = "TESSERA-OFI-PEER ";

impl ProcessTarget {
    fn start(provider: &str, node: Option<&str>) -> (ProcessTarget, TargetInfo) {
        let mut command = Command::new(std::env::current_exe().expect("test binary path"));
        command
            .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
            .env("TESSERA_OFI_PEER_PROVIDER", provider)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(node) = node {
            command.env("TESSERA_OFI_PEER_NODE", node);
        }
        let mut child = command.spawn().expect("spawn peer process");
        let stdin = child.stdin.take().expect("child stdin");
        let stdout = child.stdout.take().expect("child stdout");
        let (sender, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest's "test peer_process ... " may precede the first line.
                if let Some(start) = line.find(PEER_LINE_PREFIX) {
                    if sender
                        .send(line[start + PEER_LINE_PREFIX.len()..].to_owned())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        });
        let mut target = ProcessTarget {
            child,
            stdin,
            replies,
        };
        let info = parse_region(&target.reply());
        (target, info)
    }

    fn reply(&mut self) -> String {
        self.replies
            .recv_timeout(PEER_DEADLINE)
            .expect("peer process answers")
    }

    fn hash(&mut self) -> u64 {
        writeln!(self.stdin, "hash").expect("peer process stdin");
        self.stdin.flush().expect("peer process stdin");
        let line = self.reply();
        line.strip_prefix("hash ")
            .expect("hash line")
            .parse()
            .expect("hash")
    }
}

impl Drop for ProcessTarget {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child side of the process tests; does nothing when run as a normal test.
#[test]
fn peer_process() {
    let Ok(provider) = std::env::var("TESSERA_OFI_PEER_PROVIDER") else {
        return;
    };
    let node = std::env::var("TESSERA_OFI_PEER_NODE").ok();
    let (sender, receiver) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if sender.send(line.trim().to_owned()).is_err() {
                break;
            }
        }
        let _ = sender.send("quit".to_owned());
    });
    serve_target(
        &provider,
        node.as_deref(),
        || receiver.try_recv().ok(),
        |line| {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{PEER_LINE_PREFIX}{line}");
            let _ = stdout.flush();
        },
    );
}

/// Opens the initiator's endpoint.
fn initiator(provider: &str, node: Option<&str>) -> (Domain, Endpoint) {
    let domain = Domain::open(provider, node).expect("open initiator domain");
    let endpoint = domain.endpoint().expect("open initiator endpoint");
    endpoint
        .set_completion_timeout(COMPLETION_TIMEOUT)
        .expect("set timeout");
    (domain, endpoint)
}

/// The byte `index` of pattern `round`.
fn pattern(round: u64, index: usize) -> u8 {
    let mixed = (index as u64)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(round.wrapping_mul(0x85EB_CA6B));
    (mixed ^ (mixed >> 13) ^ (mixed >> 24)).to_le_bytes()[0]
}

/// Concatenates the pieces of `buffer`.
fn gather(buffer: &[u8], pieces: &[Piece]) -> Vec<u8> {
    pieces
        .iter()
        .flat_map(|piece| &buffer[piece.offset..piece.offset + piece.length])
        .copied()
        .collect()
}

/// Counts of a round trip, for the callers' assertions.
struct RoundTrip {
    bytes: u64,
    /// Seconds spent in the writes (printed as a rate, never asserted).
    write_seconds: f64,
    write_operations: u64,
    read_operations: u64,
}

/// Writes two patterns into the target and reads each back; `target_hash` asks the target for
/// the hash of its whole buffer.
fn round_trip(
    domain: &Domain,
    endpoint: &Endpoint,
    info: &TargetInfo,
    seed: u64,
    mut target_hash: impl FnMut() -> u64,
) -> RoundTrip {
    let peer = endpoint.insert_peer(&info.name).expect("insert peer");
    assert_eq!(
        endpoint.insert_peer(&info.name).expect("insert again"),
        peer,
        "same name, same peer"
    );
    let limits = domain.limits().clone();
    assert!(limits.iov_limit >= 1 && limits.rma_iov_limit >= 1);
    let mut rng = Rng::new(seed);
    let mut model = vec![TARGET_FILL; TARGET_BYTES];
    let mut result = RoundTrip {
        bytes: 0,
        write_seconds: 0.0,
        write_operations: 0,
        read_operations: 0,
    };
    for round in 0..2_u64 {
        // The source: PIECES pieces of 100..=5000 bytes, shuffled, with gaps.
        let (source_pieces, source_bytes) = common::pieces(&mut rng, PIECES, 100, 5000);
        let total: usize = source_pieces.iter().map(|piece| piece.length).sum();
        let mut source = vec![0_u8; source_bytes];
        for (index, byte) in source.iter_mut().enumerate() {
            *byte = pattern(round, index);
        }
        let stream = gather(&source, &source_pieces);
        // The target layout: other boundaries, shuffled, inside the region.
        let (remote_pieces, remote_bytes) = pieces_for_total(&mut rng, total, 100, 5000);
        assert!(
            remote_bytes <= TARGET_BYTES,
            "remote layout fits the target region"
        );
        let remote: Vec<RemoteIov> = info
            .region
            .iovs(
                &remote_pieces
                    .iter()
                    .map(|piece| {
                        (
                            info.region.address + piece.offset as u64,
                            piece.length as u64,
                        )
                    })
                    .collect::<Vec<_>>(),
                domain.addressing(),
            )
            .expect("remote pieces inside the region");
        assert!(
            remote_pieces.len() > limits.rma_iov_limit && source_pieces.len() > limits.iov_limit
        );

        let source_region =
            // SAFETY: `source` outlives the region and is only read while registered.
            unsafe { domain.register(source.as_ptr() as usize, source.len(), Access::LOCAL) }.expect("register source");
        let started = Instant::now();
        let counts = if round == 0 {
            let slices: Vec<&[u8]> = source_pieces
                .iter()
                .map(|piece| &source[piece.offset..piece.offset + piece.length])
                .collect();
            endpoint
                .write_from(&peer, &slices, Some(&source_region), &remote)
                .expect("write_from")
        } else {
            let local: Vec<LocalIov> = source_pieces
                .iter()
                .map(|piece| LocalIov {
                    address: source.as_ptr() as usize + piece.offset,
                    length: piece.length,
                    descriptor: source_region.descriptor(),
                })
                .collect();
            // SAFETY: `source` is alive and unwritten for the call; the descriptor's region
            // holds every piece.
            unsafe { endpoint.write_to(&peer, &local, &remote) }.expect("write_to")
        };
        assert_eq!(counts.bytes, total as u64);
        assert_eq!(counts.local_pieces, PIECES as u64);
        assert_eq!(counts.remote_pieces, remote_pieces.len() as u64);
        let fewest = (PIECES.div_ceil(limits.iov_limit))
            .max(remote_pieces.len().div_ceil(limits.rma_iov_limit));
        assert!(
            counts.operations >= fewest as u64,
            "{} operations, at least {fewest}",
            counts.operations
        );
        result.write_operations += counts.operations;
        result.bytes += counts.bytes;
        result.write_seconds += started.elapsed().as_secs_f64();

        // The model of the target's memory, checked by hash.
        let mut position = 0;
        for piece in &remote_pieces {
            model[piece.offset..piece.offset + piece.length]
                .copy_from_slice(&stream[position..position + piece.length]);
            position += piece.length;
        }
        assert_eq!(
            target_hash(),
            hash(&model),
            "round {round}: target memory differs from the model"
        );

        // Read back into a third layout: ordered pieces of 1..=7000 bytes with gaps.
        let mut sink_layout = Vec::new();
        let mut offset = 0;
        let mut left = total;
        while left > 0 {
            offset += rng.range_usize(0, 64);
            let length = rng.range_usize(1, 7000).min(left);
            sink_layout.push(Piece { offset, length });
            offset += length;
            left -= length;
        }
        let sink_size = offset + 64;
        let mut sink = vec![0x5A_u8; sink_size];
        let counts = if round == 0 {
            let sink_region =
                // SAFETY: `sink` outlives the region; it is written only through read_into,
                // which borrows it mutably.
                unsafe { domain.register(sink.as_mut_ptr() as usize, sink.len(), Access::LOCAL) }.expect("register sink");
            let mut slices: Vec<&mut [u8]> = Vec::with_capacity(sink_layout.len());
            let mut rest: &mut [u8] = &mut sink;
            let mut consumed = 0;
            for piece in &sink_layout {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(piece.offset - consumed);
                let (slice, tail) = tail.split_at_mut(piece.length);
                slices.push(slice);
                rest = tail;
                consumed = piece.offset + piece.length;
            }
            let counts = endpoint
                .read_into(&peer, &mut slices, Some(&sink_region), &remote)
                .expect("read_into");
            drop(slices);
            drop(sink_region);
            counts
        } else {
            let base = sink.as_mut_ptr() as usize;
            // SAFETY: `sink` outlives the region and is written only by read_from below.
            let sink_region =
                unsafe { domain.register(base, sink_size, Access::LOCAL) }.expect("register sink");
            let local: Vec<LocalIov> = sink_layout
                .iter()
                .map(|piece| LocalIov {
                    address: base + piece.offset,
                    length: piece.length,
                    descriptor: sink_region.descriptor(),
                })
                .collect();
            // SAFETY: `sink` is valid for writes and untouched during the call; the region holds
            // every piece.
            unsafe { endpoint.read_from(&peer, &local, &remote) }.expect("read_from")
        };
        assert_eq!(counts.bytes, total as u64);
        result.read_operations += counts.operations;
        assert_eq!(
            gather(&sink, &sink_layout),
            stream,
            "round {round}: bytes read back differ"
        );
        // The gaps between the pieces were not touched.
        let mut covered = vec![false; sink_size];
        for piece in &sink_layout {
            covered[piece.offset..piece.offset + piece.length].fill(true);
        }
        assert!(
            sink.iter()
                .zip(&covered)
                .all(|(&byte, &inside)| inside || byte == 0x5A),
            "round {round}: a read wrote outside its pieces"
        );
        drop(source_region);
    }
    result
}

fn thread_round_trip(provider: &'static str, node: Option<&'static str>, seed: u64) {
    let (mut target, info) = ThreadTarget::start(provider, node);
    let (domain, endpoint) = initiator(provider, node);
    let result = round_trip(&domain, &endpoint, &info, seed, || target.hash());
    eprintln!(
        "{provider} (threads): {} bytes, {} write and {} read operations, iov_limit {} rma_iov_limit {} {:?}",
        result.bytes,
        result.write_operations,
        result.read_operations,
        domain.limits().iov_limit,
        domain.limits().rma_iov_limit,
        domain.addressing()
    );
}

fn process_round_trip(provider: &str, node: Option<&str>, seed: u64) {
    let (mut target, info) = ProcessTarget::start(provider, node);
    let (domain, endpoint) = initiator(provider, node);
    let result = round_trip(&domain, &endpoint, &info, seed, || target.hash());
    eprintln!(
        "{provider} (processes): {} bytes, {} write and {} read operations, writes at {:.0} MB/s",
        result.bytes,
        result.write_operations,
        result.read_operations,
        result.bytes as f64 / result.write_seconds / 1e6
    );
}

#[test]
fn tcp_rxm_threads() {
    thread_round_trip(PROVIDERS[0].0, PROVIDERS[0].1, 1);
}

#[test]
fn shm_threads() {
    thread_round_trip(PROVIDERS[1].0, PROVIDERS[1].1, 2);
}

#[test]
fn tcp_rxm_processes() {
    process_round_trip(PROVIDERS[0].0, PROVIDERS[0].1, 3);
}

#[test]
fn shm_processes() {
    process_round_trip(PROVIDERS[1].0, PROVIDERS[1].1, 4);
}

/// A remote piece past the end of the registration fails with an error, for reads and writes,
/// on both providers, and never hangs. `tcp;ofi_rxm` reports an error completion naming the
/// piece. `shm` (libfabric 1.17) drops the operation at the target without answering, so the
/// completion timeout ends the call with an error and closes the endpoint.
#[test]
fn remote_piece_outside_region_is_an_error() {
    for (provider, node) in PROVIDERS {
        let (target, info) = ThreadTarget::start(provider, node);
        let region = info.region;
        for operation in ["write", "read"] {
            // A fresh endpoint per operation: a refused operation may end the connection
            // (tcp) or close the endpoint (shm, by the timeout).
            let (domain, endpoint) = initiator(provider, node);
            endpoint
                .set_completion_timeout(OUTSIDE_COMPLETION_TIMEOUT)
                .expect("set timeout");
            let peer: Peer = endpoint.insert_peer(&info.name).expect("insert peer");
            // The safe conversion refuses the piece before libfabric sees it.
            let refused = region.iov(
                7,
                region.address + region.length - 10,
                100,
                domain.addressing(),
            );
            assert!(
                matches!(refused, Err(OfiError::OutsideRegion { index: 7, .. })),
                "{provider}: {refused:?}"
            );
            // Built by hand, the piece reaches the provider.
            let (inside, beyond) = match domain.addressing() {
                Addressing::Virtual => (region.address, region.address + region.length + (1 << 20)),
                Addressing::Offset => (0, region.length + (1 << 20)),
            };
            let remote = [
                RemoteIov {
                    address: inside,
                    length: 4096,
                    key: region.key,
                },
                RemoteIov {
                    address: beyond,
                    length: 4096,
                    key: region.key,
                },
            ];
            let mut buffer = vec![1_u8; 8192];
            let result = if operation == "write" {
                endpoint.write_from(&peer, &[&buffer], None, &remote)
            } else {
                endpoint.read_into(&peer, &mut [&mut buffer], None, &remote)
            };
            let error = result.expect_err("a piece outside the region must fail");
            eprintln!("{provider}: {operation} outside the region: {error}");
            match (&error, provider) {
                (OfiError::Completion(failure), _) => {
                    assert_eq!(failure.operation, operation);
                    assert!(
                        failure.remote_first <= 1 && failure.remote_last >= 1,
                        "{error}"
                    );
                    assert!(failure.peer == peer.label() && failure.provider == domain.provider());
                }
                (OfiError::Timeout { pending, .. }, "shm") => {
                    assert!(*pending >= 1, "{error}");
                    // The closed endpoint refuses further work instead of hanging.
                    let again = endpoint.write_from(&peer, &[&buffer[..4096]], None, &remote[..1]);
                    assert!(matches!(again, Err(OfiError::Closed { .. })), "{again:?}");
                }
                _ => panic!("{provider}: unexpected error kind: {error}"),
            }
        }
        drop(target);
    }
}

/// Bad input is refused before anything is posted.
#[test]
fn mismatched_lists_and_foreign_peers_are_refused() {
    let (provider, node) = PROVIDERS[1];
    let (_target, info) = ThreadTarget::start(provider, node);
    let (domain, endpoint) = initiator(provider, node);
    let peer = endpoint.insert_peer(&info.name).expect("insert peer");
    let remote = info
        .region
        .iovs(&[(info.region.address, 100)], domain.addressing())
        .expect("inside");
    let buffer = vec![0_u8; 99];
    let error = endpoint
        .write_from(&peer, &[&buffer], None, &remote)
        .expect_err("99 bytes against 100");
    assert!(
        matches!(
            error,
            OfiError::LengthMismatch {
                local_bytes: 99,
                remote_bytes: 100
            }
        ),
        "{error}"
    );
    let other = domain.endpoint().expect("second endpoint");
    let error = other
        .write_from(&peer, &[&buffer], None, &remote)
        .expect_err("foreign peer");
    assert!(matches!(error, OfiError::ForeignPeer { .. }), "{error}");
    let error = endpoint
        .insert_peer(&info.name[1..])
        .expect_err("short name");
    assert!(matches!(error, OfiError::PeerName { .. }), "{error}");
    let error = Domain::open("no-such-provider", None).expect_err("unknown provider");
    assert!(matches!(error, OfiError::NoProvider { .. }), "{error}");
}
